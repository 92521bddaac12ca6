"""Which share-group records a Spark stream holds, and in which micro-batch, sans-IO.

Why a ledger: Spark's micro-batch protocol and a share group's locks meet
here. The stream's offsets are not Kafka offsets (a share group has no
position a reader could replay from) but batch counters; the records behind
a counter exist only in the process that acquired them. ``BatchLedger`` is
that process's memory of them:

* **pool** -- acquired by a poll, not yet given to a batch (a poll may return
  more than ``maxRecordsPerTrigger``; the rest waits for the next batch).
* **planned batches** -- ``plan(after, limit)`` moves up to ``limit`` pooled
  records into batch ``max(after, last) + 1`` and returns that number, which
  becomes Spark's end offset. The batch's records stay here unchanged until
  Spark has committed it, so every ``partitions()`` call, task retry or
  second action of a foreachBatch sees identical rows.
* **committed** -- ``take_committed(n)``: Spark's commit log holds batch
  ``n``, so batches up to ``n`` leave the ledger and their records are
  ACCEPTed. ``unplan_after(n)``: batches after ``n`` that Spark asked for but
  never recorded return to the pool.

Entries are acquired offset ranges (``client.share.ranges.AcquiredRange``:
the executors read the records, the driver never decodes one), keyed by
(topic, partition, first offset); limits count their offsets and ``plan``
may cut a range in two. ``add`` of a key already held replaces the entry (a
RENEWed range comes back from the consumer with a new lock deadline) and
reports only new keys. Locks:
``renewal_due(now, margin)`` says when the earliest lock deadline among held
records is closer than ``margin`` seconds. Lost records (a renewal or an
acknowledgement that failed: the broker will redeliver them) are dropped
with ``drop``. No I/O, no clock: ``client.spark.stream`` drives it.

Spark offsets are ``{"batch": n, "run": id}``: ``run`` names the process that
planned the batch, so a restarted query asking to replay a batch it finds in
its checkpoint gets nothing from a process that never held it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BatchLedger", "Key", "make_offset", "parse_offset"]

Key = tuple[str, int, int]


def make_offset(batch_id: int, run: str) -> dict[str, Any]:
    return {"batch": batch_id, "run": run}


def parse_offset(offset: Mapping[str, Any] | None) -> tuple[int, str | None]:
    """(batch counter, run id) of one of our Spark offsets; (0, None) for none."""
    if not offset:
        return 0, None
    try:
        batch = int(offset["batch"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"not an offset of the shoal stream source: {offset!r}") from None
    run = offset.get("run")
    return batch, None if run is None else str(run)


def key_of(record: Any) -> Key:
    return (record.topic, record.partition, record.offset)


class BatchLedger:
    """Acquired ranges held by one stream reader process (see the module docstring)."""

    __slots__ = ("batches", "last_id", "pool")

    def __init__(self) -> None:
        # Entries are offset ranges (client.share.ranges.AcquiredRange: ``size``, ``split``):
        # limits count their offsets, and a range is cut where a limit falls inside it.
        self.pool: dict[Key, Any] = {}
        self.batches: dict[int, dict[Key, Any]] = {}
        self.last_id = 0

    # -- records -----------------------------------------------------------------------
    def add(self, records: Iterable[Any]) -> list[Any]:
        """Records returned by a poll: known keys are refreshed in place, new ones pooled (returned)."""
        fresh = []
        for r in records:
            k = key_of(r)
            home = self._home(k)
            if home is None:
                self.pool[k] = r
                fresh.append(r)
            else:
                home[k] = r
        return fresh

    def _home(self, k: Key) -> dict[Key, Any] | None:
        if k in self.pool:
            return self.pool
        for held in self.batches.values():
            if k in held:
                return held
        return None

    def held(self) -> list[Any]:
        """Every record held: planned batches first (oldest first), then the pool."""
        out = [r for bid in sorted(self.batches) for r in self.batches[bid].values()]
        out += self.pool.values()
        return out

    def keys(self) -> set[Key]:
        out = set(self.pool)
        for held in self.batches.values():
            out.update(held)
        return out

    def __len__(self) -> int:
        """Entries (ranges) held."""
        return len(self.pool) + sum(len(b) for b in self.batches.values())

    def rows(self, entries: Iterable[Any] | None = None) -> int:
        """Records (offsets) in ``entries``, by default everything held."""
        if entries is None:
            entries = self.held()
        return sum(r.size for r in entries)

    def drop(self, keys: Iterable[Key]) -> int:
        """Forget records whose lock is gone; returns how many were held."""
        n = 0
        for k in keys:
            home = self._home(k)
            if home is not None:
                del home[k]
                n += 1
        return n

    def drop_partitions(self, tps: Iterable[tuple[str, int]]) -> int:
        tps = set(tps)
        return self.drop([k for k in self.keys() if (k[0], k[1]) in tps])

    def release_all(self) -> list[Any]:
        """Everything held, forgotten at once (to be RELEASEd)."""
        out = self.held()
        self.pool.clear()
        self.batches.clear()
        return out

    # -- batches -----------------------------------------------------------------------
    def plan(self, after: int, limit: int | None = None) -> int | None:
        """Move up to ``limit`` pooled offsets into a new batch numbered after
        ``after``; None if the pool is empty."""
        if not self.pool or (limit is not None and limit <= 0):
            return None
        batch_id = max(after, self.last_id) + 1
        self.last_id = batch_id
        if limit is None or limit >= self.rows(self.pool.values()):
            taken, self.pool = self.pool, {}
        else:
            taken = {}
            room = limit
            for k in list(self.pool):
                r = self.pool[k]
                if r.size > room:  # cut it: the head goes now, the tail stays first in the pool
                    head, tail = r.split(room)
                    del self.pool[k]
                    taken[key_of(head)] = head
                    self.pool = {key_of(tail): tail, **self.pool}
                    break
                taken[k] = self.pool.pop(k)
                room -= r.size
                if room <= 0:
                    break
        self.batches[batch_id] = taken
        return batch_id

    def batch(self, batch_id: int) -> list[Any] | None:
        held = self.batches.get(batch_id)
        return None if held is None else list(held.values())

    def batches_between(self, after: int, upto: int) -> list[int]:
        """Held batch numbers ``after < n <= upto``."""
        return sorted(b for b in self.batches if after < b <= upto)

    def take_committed(self, upto: int) -> list[Any]:
        """Batches up to ``upto`` are in Spark's commit log: forget them, return their records (to ACCEPT)."""
        out: list[Any] = []
        for bid in sorted(b for b in self.batches if b <= upto):
            out += self.batches.pop(bid).values()
        return out

    def unplan_after(self, batch_id: int) -> int:
        """Batches after ``batch_id`` were never recorded by Spark: their records go back to the pool."""
        later = sorted(b for b in self.batches if b > batch_id)
        if not later:
            return 0
        back: dict[Key, Any] = {}
        for bid in later:
            back.update(self.batches.pop(bid))
        back.update(self.pool)
        self.pool = back
        return len(later)

    # -- locks -------------------------------------------------------------------------
    def earliest_deadline(self) -> float | None:
        deadlines = [d for r in self.held() if (d := getattr(r, "acquisition_lock_deadline", None)) is not None]
        return min(deadlines) if deadlines else None

    def renewal_due(self, now: float, margin: float) -> bool:
        deadline = self.earliest_deadline()
        return deadline is not None and deadline - now <= margin
