"""The share-partition core (KIP-932): which records of one partition a share
group has delivered, to whom, how often, and which are done. Sans-IO.

One :class:`SharePartition` exists per (group, topic id, partition) on the
partition leader. It never reads the log, calls the share coordinator or
runs timers: the asyncio shell does that and drives it with plain calls and
an explicit ``now_ms``. Every state change worth persisting comes back as a
:class:`Change` the shell writes with WriteShareGroupState.

State. ``start_offset`` is the first offset not yet done; ``end_offset`` the
last offset the partition has tracked (``start - 1`` when nothing is in
flight). In between, an ordered map (first offset -> :class:`InFlightBatch`)
holds the in-flight ranges: AVAILABLE, ACQUIRED (by a member, with a lock
deadline), ACKNOWLEDGED or ARCHIVED, plus a delivery count. A range is kept
per acquired batch, not per record, because consumers acquire and
acknowledge whole batches; it splits into compact per-offset arrays only when
acknowledged unevenly (see :mod:`broker.share.in_flight`); tiny adjacent
acquisitions (one record per fetch) are stitched into one such range. Offsets in
``[start, end]`` that no range covers are *holes*: offsets known to hold no
deliverable record (compacted away, control batches, aborted transactional
data), which count as done -- except inside the gap window below.

Gap window. The coordinator only stores ranges whose state changed (released,
acknowledged, archived). After a restore, offsets between the start offset and
the last persisted range that no persisted range covers were either never
delivered or delivered without a persisted outcome, so nothing is known about
them. As in Kafka they form a gap window: holes at or after ``gap_start``
(and up to the restored end offset) are acquirable as new records (delivery
count 1), the next fetch offset points at the first of them, the start offset
stops at them, and ``gap_start`` moves past whatever a fetch has covered. The
window closes once it is covered or new records beyond it are acquired.

Pending changes and undo. Acknowledgements, lock expiry and member release
change memory at once (the member sees the outcome) but the touched offsets
are marked *pending* with their Change until the shell calls
:meth:`Change.commit` (the write succeeded) or :meth:`Change.undo` (it failed:
the offsets get back exactly the state, member and lock deadline they had).
A pending offset cannot be acquired or acknowledged and the start offset does
not pass it, so writes may be outstanding concurrently and each undoes
independently -- Kafka's "ongoing state transition". The start offset moves
(and fully done ranges below it are dropped) on commit; the Change already
carries the start offset the write establishes: the start as it will be once
this change commits, or -1 ("unchanged", which the share coordinator
accepts) when it would not move the persisted start. Reported start offsets
only grow in creation order, so the shell must send the writes of one share
partition in the order the Changes were made (one ordered queue), committing
in that order; undo may come in any order. A Change that is neither committed
nor undone keeps its records pending for good.

Decisions where Kafka (4.2) is a judgement call or where we differ:

* An acknowledgement request is all or nothing per partition, as in Kafka
  (one failing batch rolls back the others). Every batch gets an error code;
  on rejection, batches that were valid on their own carry the error of the
  first failing one. Offsets below the start offset are ignored (Kafka).
* Control batches, aborted transactional batches (read_committed) and
  offsets with no batch at all are never delivered: they are left as holes
  (or archived when already tracked), without a write. Kafka delivers control
  batches and lets clients acknowledge them as GAP; both are valid for
  clients, which skip offsets missing from the acquired ranges.
* The in-flight cap limits only records beyond the end offset; re-acquiring
  released records never grows the in-flight count, so it is bounded by
  ``max_records`` alone. Batch-optimized mode rounds new records up to the end
  of the log batch, so the cap can be crossed by less than one log batch.
* Member release decreases delivery counts (Kafka: records of a closed share
  session were acquired but maybe never seen); ``decrease_delivery_count=False``
  makes it behave like a lock expiry. Records already at the delivery limit
  when fetched again (e.g. a lowered limit) are archived rather than sent.
* Lock expiry: Kafka keeps the transition even when the write fails, so the
  shell may commit an expiry Change at once and write in the background.
* Undo does not revert RENEW acknowledgements in the same request (a renewed
  lock is harmless; Kafka does not roll them back either).
* Records that failed often are handed out alone and in halves
  (KAFKA-17541, :mod:`broker.share.poison`).
* Dead-letter queue (KIP-1191): with ``archive_to = ARCHIVING`` a REJECT or
  the delivery limit moves records to ARCHIVING (persisted, not terminal: the
  start offset stops there) and the shell, once its copy is written, calls
  :meth:`finish_archiving`, which makes them ARCHIVED.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from sortedcontainers import SortedDict

from shoal.broker.share import poison
from shoal.broker.share.ack_batches import ack_fields as _ack_fields
from shoal.broker.share.ack_batches import coalesce as _coalesce
from shoal.broker.share.ack_batches import type_runs as _type_runs
from shoal.broker.share.acquisition import Acquisition as _Acquisition
from shoal.broker.share.backoff import BackoffPolicy, Holds
from shoal.broker.share.change import _COMMITTED, _PENDING, AcquiredRange, Change
from shoal.broker.share.fetched import deliverable_segments
from shoal.broker.share.in_flight import NO_DEADLINE, TERMINAL, InFlightBatch, Run
from shoal.broker.share.key_order import KeyOrder
from shoal.protocol.constants import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    ARCHIVING,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
)
from shoal.protocol.errors import ErrorCode

__all__ = [
    "AcquiredRange",
    "Change",
    "SharePartition",
]

# What each acknowledge type (ShareFetch / ShareAcknowledge AcknowledgeTypes) moves a record to.
_ACK_STATE = {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, RELEASE: AVAILABLE, REJECT: ARCHIVED}


# New records adjacent to a range this small join it (per offset) instead of making their own.
_STITCH_MAX = 16

# (state, delivery count, member, lock deadline) of a range before a transition
_Old = tuple[int, int, "str | None", int]


def _starts_by(last: int) -> Callable[[InFlightBatch], bool]:
    """A test of "this in-flight range starts at or before ``last``"."""
    return lambda u: u.first <= last


class SharePartition:
    """In-flight state of one share-partition; see the module docstring."""

    def __init__(
        self,
        group_id: str,
        topic_id: Any,
        partition: int,
        *,
        max_in_flight_records: int = 2000,
        delivery_count_limit: int = 5,
        lock_duration_ms: int = 30000,
    ) -> None:
        if max_in_flight_records <= 0 or delivery_count_limit <= 0 or lock_duration_ms <= 0:
            raise ValueError("limits must be positive")
        self.group_id = group_id
        self.topic_id = topic_id
        self.partition = partition
        self.max_in_flight_records = max_in_flight_records
        self.delivery_count_limit = delivery_count_limit
        self.lock_duration_ms = lock_duration_ms
        self.archive_to = ARCHIVED  # ARCHIVING while the group has a dead-letter topic (KIP-1191)
        self.state_epoch = 0
        self.backoff = BackoffPolicy()  # redelivery back-off (beyond Kafka; off by default)
        self.clock: Callable[[], int] = lambda: 0  # the shell's monotonic clock, for back-off ends
        self.key_order: KeyOrder | None = None  # key-ordered delivery (beyond Kafka; off by default)
        self._initialized = False
        self._reset(0)

    def _reset(self, start: int) -> None:
        self._batches: SortedDict = SortedDict()  # first offset -> InFlightBatch
        self._start = start
        self._end = start - 1
        self._gap_start: int | None = None
        self._gap_end = -1
        self._locks: list[tuple[int, InFlightBatch]] = []  # (deadline, batch) heap, lazily pruned
        self._rescan = False  # something may have become AVAILABLE (or, key ordering, unblocked) since the last scan
        self._memo: tuple[int, int] | None = None  # back-off / key ordering: (scan from, until a back-off ends)
        self._holds = Holds()  # back-off: released offsets not acquirable before a time
        if self.key_order is not None:
            self.key_order.clear()
        for change in getattr(self, "_outstanding", {}):
            change._owner = None
        self._outstanding: dict[Change, int] = {}  # pending change -> start offset it reports
        self._committed_floor = -1  # highest start offset a committed change (or the restore) established

    # -- initialization ----------------------------------------------------------
    def initialize(
        self,
        state_epoch: int,
        start_offset: int,
        batches: Iterable[Any],
        *,
        log_start_offset: int,
        high_watermark: int,
    ) -> None:
        """Load persisted state (ReadShareGroupState). `start_offset` must already be
        resolved (share.auto.offset.reset) by the caller. `high_watermark` is not used to
        trim anything: a new leader's high watermark may lag the old one's."""
        del high_watermark
        if start_offset < 0:
            raise ValueError("start offset must be resolved before initializing")
        self._reset(start_offset)
        self.state_epoch = state_epoch
        prev_last = start_offset - 1
        gap_start: int | None = None
        rows = sorted(
            (b if isinstance(b, tuple) else (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count))
            for b in batches
        )
        for first, last, state, count in rows:
            if state not in (AVAILABLE, ACKNOWLEDGED, ARCHIVING, ARCHIVED) or first > last:
                raise ValueError(f"invalid persisted batch {(first, last, state, count)}")
            if last < start_offset:
                continue
            first = max(first, start_offset)
            if first <= prev_last:
                raise ValueError("overlapping persisted batches")
            if first > prev_last + 1 and gap_start is None:
                gap_start = prev_last + 1
            self._batches[first] = InFlightBatch(first, last, state, count)
            if state == AVAILABLE and count:  # released before: its back-off restarts from now
                self._hold(first, last, count, self.clock())
            prev_last = last
        self._end = prev_last
        if gap_start is not None:
            self._gap_start, self._gap_end = gap_start, prev_last
        self._committed_floor = start_offset
        self._rescan = True
        self._initialized = True
        if log_start_offset > self._start:
            self._start = log_start_offset
        self._settle()

    def _check_ready(self) -> None:
        if not self._initialized:
            raise RuntimeError("share partition not initialized")

    # -- lookups -------------------------------------------------------------------
    def _unit_at(self, offset: int) -> InFlightBatch | None:
        d = self._batches
        i = d.bisect_right(offset) - 1
        if i >= 0:
            u = d.peekitem(i)[1]
            if u.last >= offset:
                return u
        return None

    def _next_key(self, offset: int) -> int | None:
        """First offset of the first range starting after `offset`."""
        i = self._batches.bisect_right(offset)
        return self._batches.peekitem(i)[0] if i < len(self._batches) else None

    def _units_from(self, offset: int) -> Iterator[InFlightBatch]:
        """Ranges ending at or after `offset`, in order (do not mutate the map meanwhile)."""
        u = self._unit_at(offset)
        d = self._batches
        for k in d.irange(minimum=offset if u is None else u.first):
            yield d[k]

    def _gap_active(self) -> bool:
        return self._gap_start is not None and self._end == self._gap_end

    def _first_gap_hole(self) -> int | None:
        """The first acquirable offset of the gap window, if it is open."""
        if not self._gap_active():
            return None
        cur = max(self._gap_start or 0, self._start)
        for u in self._units_from(cur):
            if u.first > cur:
                return cur
            cur = u.last + 1
        return cur if cur <= self._end else None

    # -- introspection -------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def in_flight_count(self) -> int:
        return max(0, self._end - self._start + 1)

    @property
    def pending_changes(self) -> int:
        return len(self._outstanding)

    def state_of(self, offset: int) -> tuple[int, int, str | None] | None:
        """(state, delivery count, holding member) of a tracked offset; None for offsets
        below the start that were forgotten, holes, and offsets beyond the end."""
        u = self._unit_at(offset)
        if u is None:
            return None
        state, count, member, _deadline, _pending = u.at(offset)
        return state, count, member

    def units(self) -> list[InFlightBatch]:
        """The tracked ranges as held, in offset order, for read-only views (the web console)."""
        return list(self._batches.values())

    def ranges(self) -> Iterator[tuple[int, int, int, int, str | None]]:
        """Every tracked range as (first, last, state, delivery count, member)."""
        for u in list(self._batches.values()):
            for a, b, state, count, member, _d, _p in u.runs(u.first, u.last):
                yield a, b, state, count, member

    def delivery_complete_count(self, from_offset: int | None = None) -> int:
        """Terminal (ACKNOWLEDGED / ARCHIVED) records from the start offset to the end (lag)."""
        lo = self._start if from_offset is None else from_offset
        end = self._end
        total = 0
        for u in self._units_from(lo):  # every change asks: whole ranges read their kept count
            if u.first < lo or u.last > end:
                total += u.terminal_count(lo, end)
            elif u.offsets is not None:
                total += u.offsets.done
            elif u.state in TERMINAL:
                total += u.last - u.first + 1
        return total

    # -- fetch ---------------------------------------------------------------------
    def next_fetch_offset(self) -> int:
        """Where the next log read should start: the first acquirable offset in flight
        (AVAILABLE, or a hole of the gap window), else the offset after the end."""
        gap = self._gap_start if self._gap_active() else None
        cur = self._start
        if not self._rescan and gap is None:
            if self._memo is None:
                return self._end + 1
            if self._memo[1] > self.clock():  # no back-off ended: nothing before the memo got ready
                cur = max(cur, self._memo[0])
        waiting = bool(self._holds) or self.key_order is not None
        for u in self._units_from(cur):
            if u.first > cur:
                if gap is not None and gap < u.first:
                    return max(cur, gap)
                cur = u.first
            found = u.first_available(cur, u.last)
            if found is not None and waiting:
                found = self._first_ready(u, found)
            if found is not None:
                return self._remember(found) if waiting else found
            cur = u.last + 1
        if gap is not None and max(cur, gap) <= self._end:
            return max(cur, gap)
        self._rescan = False
        return self._remember(self._end + 1) if waiting else self._end + 1

    def _remember(self, offset: int) -> int:
        """Later scans start at `offset` until something before it may be ready (see _rescan)."""
        end = self._holds.next_end(self.clock()) if self._holds else None
        self._memo = (offset, 1 << 62 if end is None else end)
        self._rescan = False
        return offset

    def features_changed(self) -> None:  # the back-off or key ordering was switched: scan again
        self._rescan, self._memo = True, None

    def _first_ready(self, u: InFlightBatch, found: int | None) -> int | None:
        """The first AVAILABLE offset of `u` from `found` on neither backing off nor waiting behind
        an earlier record of its key."""
        now, ko = self.clock(), self.key_order
        while found is not None:
            end = self._holds.held_until(found, now) if self._holds else None
            if end is None and (ko is None or not ko.blocked(found, self._open)):
                return found
            found = u.first_available((found if end is None else end) + 1, u.last)
        return None

    def _open(self, offset: int) -> bool:
        """Key ordering: whether `offset` holds a record not yet done (ARCHIVING counts as done)."""
        u = self._unit_at(offset) if offset >= self._start else None
        if u is None:
            return offset > self._end or (self._gap_active() and offset >= (self._gap_start or 0))
        state, _c, _m, _d, pending = u.at(offset)
        return pending is not None or state in (AVAILABLE, ACQUIRED)

    def next_backoff_end(self) -> int | None:
        """When the earliest running redelivery back-off ends (the shell wakes fetches then)."""
        return self._holds.next_end(self.clock()) if self._holds else None

    def acquirable(self, high_watermark: int) -> bool:
        """Whether a fetch could acquire something now (Kafka's canAcquireRecords, plus
        "new records exist below the high watermark")."""
        self._check_ready()
        nfo = self.next_fetch_offset()
        if nfo <= self._end:
            return True
        return nfo < high_watermark and self.in_flight_count < self.max_in_flight_records

    def acquire(
        self,
        member_id: str,
        fetched: Sequence[Any],
        max_records: int,
        *,
        batch_optimized: bool = True,
        now_ms: int,
        aborted: Iterable[Sequence[int]] | None = None,
        fetch_offset: int | None = None,
        batch_size: int | None = None,
    ) -> list[AcquiredRange]:
        """Acquire records of `fetched` (log batch headers with base_offset, last_offset,
        is_control and, for read_committed, producer_id / is_transactional) for `member_id`.
        `fetched` was read from `fetch_offset`, by default the next fetch offset as it is
        now: pass the offset actually read when the state may have changed since.

        AVAILABLE offsets are re-acquired (delivery count + 1); offsets beyond the end
        (and gap-window holes) become new ranges with count 1. Record-limit mode stops at
        exactly `max_records`; batch-optimized mode finishes the uniform range or log
        batch it is in. Offsets from `fetch_offset` on that no fetched batch holds
        (compaction) are archived if tracked, passed over otherwise. `batch_size` caps how
        many records one new range may gather across log batches (Kafka's BatchSize)."""
        self._check_ready()
        if max_records <= 0 or not fetched:
            return []
        first_base = fetched[0].base_offset
        if fetch_offset is None:
            fetch_offset = self.next_fetch_offset()
        lo_read = min(fetch_offset, first_base)
        lo = max(lo_read, self._start)
        hi = fetched[-1].last_offset
        room = self.max_in_flight_records - self.in_flight_count
        if room <= 0:
            hi = min(hi, self._end)
        if lo > hi:
            return []
        acq = _Acquisition(member_id, now_ms + self.lock_duration_ms, max_records, room, batch_optimized, batch_size)
        hole = self._first_gap_hole()
        gap = self._gap_start if hole is not None else None
        pos = lo
        for seg_first, seg_last, has_data in deliverable_segments(fetched, aborted or (), lo_read):
            if seg_last < pos:
                continue
            if seg_first > hi or acq.stop:
                break
            seg_last, pos = min(seg_last, hi), max(pos, seg_first)
            ko = self.key_order if has_data and pos <= seg_last else None
            for x, y, admitted in (
                [(pos, seg_last, True)] if ko is None else ko.pieces(fetched, pos, seg_last, self._open)
            ):
                if acq.stop:
                    break
                pos = self._acquire_span(acq, x, y, has_data, gap) if admitted else self._park(acq, x, y, gap)
        if hole is not None and lo <= hole and self._gap_start is not None:
            self._gap_start = max(self._gap_start, pos)
        for u in acq.touched.values():
            u.maybe_merge()
            self._lock(u, acq.deadline)
        self._settle()
        return [AcquiredRange(f, last, c, acq.deadline) for f, last, c in acq.out]

    def _acquire_span(self, acq: _Acquisition, pos: int, last: int, has_data: bool, gap: int | None) -> int:
        while pos <= last and not acq.stop:
            if acq.taken >= acq.max_records:
                acq.stop = True
                break
            u = self._unit_at(pos)
            if u is not None:
                pos = self._acquire_in(acq, u, pos, min(u.last, last), has_data)
                continue
            nxt = self._next_key(pos)
            b = last if nxt is None else min(last, nxt - 1)
            if pos > self._end:
                pos = self._acquire_hole(acq, pos, b, has_data, beyond_end=True)
            elif gap is not None and gap <= min(b, self._end):
                # holes below `gap` are natural; skip to the window
                pos = self._acquire_hole(acq, max(pos, gap), min(b, self._end), has_data, beyond_end=False)
            else:
                pos = min(b, self._end) + 1
        return pos

    def _park(self, acq: _Acquisition, a: int, b: int, gap: int | None) -> int:
        """Key ordering: records of [a, b] wait behind an earlier record of their key. Untracked
        ones (new, or gap-window holes) are tracked as AVAILABLE with no delivery yet."""
        while a <= b:
            u = self._unit_at(a)
            if u is not None:
                a = u.last + 1
                continue
            nxt = self._next_key(a)
            y = b if nxt is None else min(b, nxt - 1)
            if a > self._end:
                y = min(y, a + acq.room - 1)
                if y < a:
                    acq.stop = True
                    return a
                acq.room -= y - a + 1
                self._end = y
            elif gap is None or gap > min(y, self._end):  # natural holes stay holes
                a = min(y, self._end) + 1
                continue
            else:
                a, y = max(a, gap), min(y, self._end)
            prev = self._unit_at(a - 1)
            if prev is not None and prev.size + y - a + 1 <= _STITCH_MAX:
                prev.append(y - a + 1, AVAILABLE, 0, None, NO_DEADLINE)
            else:
                self._batches[a] = InFlightBatch(a, y, AVAILABLE, 0)
            a = y + 1
        return a

    def _acquire_in(self, acq: _Acquisition, u: InFlightBatch, a: int, b: int, has_data: bool) -> int:
        """Acquire (or archive, without data) the available offsets of [a, b] in range `u`;
        returns the next offset to look at. A range whose records failed often is handed out
        alone and in shrinking parts (:mod:`broker.share.poison`)."""
        first = u.first_available(a, b)  # what comes before it is not acquirable
        if first is None:
            return b + 1
        limit = self.delivery_count_limit
        # Without back-off and with no count near the poison threshold, the runs are read only as
        # far as this fetch takes (a 30,000-record batch handed out 5 records at a time was
        # scanned whole for every fetch before); otherwise the throttle needs them all.
        bounded = not self._holds and has_data and u.max_count() < poison.threshold(limit)
        cap = max(1, acq.max_records - acq.taken) if bounded and not acq.batch_optimized else None
        runs: Iterable[Run] = (r for r in u.runs(first, b, cap) if r[2] == AVAILABLE and r[6] is None)
        held = None
        if not bounded:
            runs = list(runs)
            if self._holds and runs:  # back-off: only the parts whose wait is over
                now = acq.deadline - self.lock_duration_ms
                runs = [(p, q, *r[2:]) for r in runs for p, q in self._holds.free(r[0], r[1], now)]
            held = poison.throttle(u.size, (r[3] for r in runs), limit) if has_data else None
        if held is not None and acq.taken:
            acq.stop = True
            return a
        start = acq.taken
        for x, y, _s, count, _m, _d, _p in runs:
            if not has_data or count >= limit:
                u.set_range(x, y, ARCHIVED, count, None, NO_DEADLINE, None)
                acq.touched[id(u)] = u
                self._rescan = True  # done now: a later record of its key may be next
                continue
            if acq.taken >= acq.max_records:
                acq.stop = True
                return x
            last = y if acq.batch_optimized else min(y, x + acq.max_records - acq.taken - 1)
            if held is not None:
                last = held.last(x, last, count, acq.taken - start)
                if last < x:
                    acq.stop = True
                    return x
            u.set_range(x, last, ACQUIRED, count + 1, acq.member, acq.deadline, None)
            acq.add(u, x, last, count + 1)
            if last < y or (held is not None and held.done(count + 1, acq.taken - start)):
                acq.stop = True
                return last + 1
        if held is not None and acq.taken > start:
            acq.stop = True
        return b + 1

    def _acquire_hole(self, acq: _Acquisition, a: int, b: int, has_data: bool, *, beyond_end: bool) -> int:
        """Offsets [a, b] nobody tracks: new records beyond the end, or gap-window holes."""
        if beyond_end and acq.room <= 0:
            acq.stop = True
            return a
        if not has_data:
            if beyond_end:
                self._end = b
                acq.room -= b - a + 1
            return b + 1
        want = acq.max_records - acq.taken
        if beyond_end:
            want = min(want, acq.room)
        last = b if acq.batch_optimized else min(b, a + want - 1)
        fresh = acq.fresh
        if fresh is not None and fresh.last == a - 1 and (acq.batch_size is None or a - fresh.first < acq.batch_size):
            fresh.append(last - a + 1, ACQUIRED, 1, acq.member, acq.deadline)
        else:
            prev = self._unit_at(a - 1)
            if prev is not None and prev is not fresh and prev.size + last - a + 1 <= _STITCH_MAX:
                # tiny acquisitions (one record per fetch) share one per-offset range
                prev.append(last - a + 1, ACQUIRED, 1, acq.member, acq.deadline)
                fresh = prev
            else:
                fresh = InFlightBatch(a, last, ACQUIRED, 1, acq.member, acq.deadline)
                self._batches[a] = fresh
            acq.fresh = fresh
        acq.add(fresh, a, last, 1)
        if beyond_end:
            self._end = last
            acq.room -= last - a + 1
        if last < b:
            acq.stop = True
        return last + 1

    # -- acknowledge ---------------------------------------------------------------
    def acknowledge(self, member_id: str, batches: Sequence[Any], now_ms: int) -> tuple[list[ErrorCode], Change]:
        """Apply acknowledgement batches (first, last, types) -- or objects with
        first_offset / last_offset / acknowledge_types -- from `member_id`, all or nothing.
        Returns one error code per batch and the Change (empty when rejected)."""
        self._check_ready()
        parsed = [_ack_fields(b) for b in batches]
        errors: list[ErrorCode] = []
        prev_last: int | None = None
        for first, last, types in parsed:
            if (
                first < 0
                or last < first
                or len(types) not in (1, last - first + 1)
                or any(t not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) for t in types)
                or (prev_last is not None and first <= prev_last)
            ):
                errors.append(ErrorCode.INVALID_REQUEST)
            else:
                errors.append(ErrorCode.NONE)
            prev_last = last if prev_last is None else max(prev_last, last)
        if not any(errors):
            errors = [self._check_held(member_id, first, last) for first, last, _t in parsed]
        if any(errors):
            first_error = next(e for e in errors if e)
            return [e or first_error for e in errors], Change()
        change = Change(_owner=self)
        deadline = now_ms + self.lock_duration_ms
        touched: list[InFlightBatch] = []
        for first, last, types in parsed:
            a = max(first, self._start)
            if a > last:
                continue
            units = list(itertools.takewhile(_starts_by(last), self._units_from(a)))
            touched += units
            for u in units:
                for x, y, state, count, member, dl, _p in list(u.runs(a, last)):
                    for p, q, t in _type_runs(first, types, x, y):
                        if t == RENEW:
                            u.set_range(p, q, ACQUIRED, count, member, deadline, None)
                            self._lock(u, deadline)
                            continue
                        new_state = self.archive_to if t == REJECT else _ACK_STATE[t]
                        if new_state == AVAILABLE and count >= self.delivery_count_limit:
                            new_state = self.archive_to
                        self._transition(change, u, p, q, new_state, count, (state, count, member, dl))
                        if t == RELEASE and new_state == AVAILABLE:
                            self._hold(p, q, count, now_ms)
        for u in touched:
            u.maybe_merge()  # renewed offsets may agree again
        return [ErrorCode.NONE] * len(parsed), self._finish(change)

    def renew(self, member_id: str, first_offset: int, last_offset: int, now_ms: int) -> ErrorCode:
        """Restart the locks of [first, last] held by `member_id` (a RENEW acknowledgement)."""
        errors, _change = self.acknowledge(member_id, [(first_offset, last_offset, [RENEW])], now_ms)
        return errors[0]

    def _check_held(self, member_id: str, first: int, last: int) -> ErrorCode:
        """NONE when every offset of [first, last] at or above the start is ACQUIRED by `member_id`.

        A batch wholly below the start offset is INVALID_RECORD_STATE, as in Kafka ("batch
        record not found"): those records are done, the acknowledgement comes too late (its
        lock ran out and the records went to another member, say). Only while a range still
        in flight holds such offsets (records the member acquired before the log start moved
        past them) is it accepted and skipped, as Kafka skips offsets below the start."""
        cur = max(first, self._start)
        if cur > last:
            u = self._unit_at(first)
            if u is None:
                nxt = self._next_key(first)
                u = self._batches[nxt] if nxt is not None and nxt <= last else None
            return ErrorCode.NONE if u is not None else ErrorCode.INVALID_RECORD_STATE
        if last > self._end:
            return ErrorCode.INVALID_REQUEST
        for u in self._units_from(cur):
            if u.first > cur:
                return ErrorCode.INVALID_RECORD_STATE  # a hole: nothing was acquired there
            for _a, _b, state, _c, member, _d, _p in u.runs(cur, last):
                if state != ACQUIRED or member != member_id:
                    return ErrorCode.INVALID_RECORD_STATE
            cur = u.last + 1
            if cur > last:
                return ErrorCode.NONE
        return ErrorCode.INVALID_RECORD_STATE

    # -- locks and release -----------------------------------------------------------
    def _lock(self, u: InFlightBatch, deadline: int) -> None:
        heapq.heappush(self._locks, (deadline, u))

    def _lock_live(self, deadline: int, u: InFlightBatch) -> bool:
        return self._batches.get(u.first) is u and u.has_deadline(deadline)

    def next_lock_deadline(self) -> int | None:
        """The earliest acquisition-lock deadline, or None when nothing is acquired."""
        locks = self._locks
        while locks:
            deadline, u = locks[0]
            if self._lock_live(deadline, u):
                return deadline
            heapq.heappop(locks)
        return None

    def expire_locks(self, now_ms: int) -> Change:
        """Locks due at `now_ms`: their records become AVAILABLE, or ARCHIVED at the delivery
        limit (or below the start offset)."""
        self._check_ready()
        due: dict[int, InFlightBatch] = {}
        locks = self._locks
        while locks and locks[0][0] <= now_ms:
            deadline, u = heapq.heappop(locks)
            if self._lock_live(deadline, u):
                due[id(u)] = u
        change = Change(_owner=self)
        for u in sorted(due.values(), key=lambda u: u.first):
            for a, b, state, count, member, dl, _p in list(u.runs(u.first, u.last)):
                if state == ACQUIRED and dl <= now_ms:
                    self._release(change, u, a, b, (state, count, member, dl), decrease=False)
        return self._finish(change)

    def release_member(self, member_id: str, *, decrease_delivery_count: bool = True) -> Change:
        """Give back everything `member_id` holds (it left, was fenced, closed its session)."""
        self._check_ready()
        change = Change(_owner=self)
        for u in list(self._batches.values()):
            for a, b, state, count, member, dl, _p in list(u.runs(u.first, u.last)):
                if state == ACQUIRED and member == member_id:
                    self._release(change, u, a, b, (state, count, member, dl), decrease=decrease_delivery_count)
        return self._finish(change)

    def _release(self, change: Change, u: InFlightBatch, a: int, b: int, old: _Old, *, decrease: bool) -> None:
        count = old[1]
        if a < self._start:  # below the start (the log start moved): never deliverable again
            y = min(b, self._start - 1)
            self._transition(change, u, a, y, ARCHIVED, count, old)
            a = y + 1
            if a > b:
                return
        if decrease:
            self._transition(change, u, a, b, AVAILABLE, max(count - 1, 0), old)
        else:
            state = self.archive_to if count >= self.delivery_count_limit else AVAILABLE
            self._transition(change, u, a, b, state, count, old)
            if state == AVAILABLE:
                self._hold(a, b, count, self.clock())

    def _hold(self, a: int, b: int, count: int, now_ms: int) -> None:
        """Redelivery back-off (:mod:`broker.share.backoff`): [a, b] failed its `count`-th delivery."""
        if self.backoff.enabled:
            self._holds.hold(a, b, now_ms + self.backoff.delay(count))

    def finish_archiving(self, first: int, last: int) -> Change:
        """The dead-letter copies of [first, last] were written (or given up): its ARCHIVING
        records become ARCHIVED, and the start offset may pass them once that is written."""
        self._check_ready()
        change = Change(_owner=self)
        for u in list(itertools.takewhile(_starts_by(last), self._units_from(first))):
            for a, b, state, count, member, dl, pending in list(u.runs(first, last)):
                if state == ARCHIVING and pending is None:
                    self._transition(change, u, a, b, ARCHIVED, count, (state, count, member, dl))
        return self._finish(change)

    # -- changes -------------------------------------------------------------------
    def _transition(self, change: Change, u: InFlightBatch, a: int, b: int, state: int, count: int, old: _Old) -> None:
        change._undo.append((u, a, b, *old))
        change._marked.append((u, a, b))
        u.set_range(a, b, state, count, None, NO_DEADLINE, change)
        change.batches.append((a, b, AVAILABLE if state == ACQUIRED else state, count))

    def _finish(self, change: Change) -> Change:
        """Decide what `change` must persist and register it as pending if anything."""
        if not change.batches:  # a moved start alone waits for the next real write (as Kafka)
            change._status = _COMMITTED
            change._owner = None
            return change
        change.batches = _coalesce(change.batches)
        projected = self._advance(change)
        floor = max(self._committed_floor, max(self._outstanding.values(), default=-1))
        change.start_offset = projected if projected > floor else -1
        change._status = _PENDING
        change.delivery_complete_count = self.delivery_complete_count(max(projected, self._start))
        self._outstanding[change] = change.start_offset
        return change

    def _commit(self, change: Change) -> None:
        touched: dict[int, InFlightBatch] = {}
        for u, a, b in change._marked:
            u.clear_pending(a, b)
            touched[id(u)] = u
        for u in touched.values():
            u.maybe_merge()
        self._committed_floor = max(self._committed_floor, change.start_offset)
        del self._outstanding[change]
        self._rescan = True
        self._settle()

    def _undo_change(self, change: Change) -> None:
        touched: dict[int, InFlightBatch] = {}
        for u, a, b, state, count, member, deadline in reversed(change._undo):
            u.set_range(a, b, state, count, member, deadline, None)
            touched[id(u)] = u
            if deadline != NO_DEADLINE:
                self._lock(u, deadline)
        for u in touched.values():
            u.maybe_merge()
        del self._outstanding[change]
        self._rescan = True
        self._settle()

    # -- start offset ----------------------------------------------------------------
    def _advance(self, token: Change | None) -> int:
        """How far the start offset can move: over terminal offsets that are committed (or
        belong to `token`) and natural holes; not into the gap window."""
        cur = self._start
        gap = self._gap_start if self._gap_active() else None
        for u in self._units_from(cur):
            if u.first > cur:
                if gap is not None and gap < u.first:
                    return max(cur, gap)
                cur = u.first
            cur = u.first_not_done(cur, token)
            if cur <= u.last:
                return cur
        if gap is not None and max(cur, gap) <= self._end:
            return max(cur, gap)
        return max(cur, self._end + 1)

    def _settle(self) -> None:
        """Move the start offset as far as it goes; archive AVAILABLE records left below it
        (the log start moved); forget ranges below it that are done."""
        new_start = self._advance(None)
        if new_start > self._start:
            self._start = new_start
        start = self._start
        d = self._batches
        for key in list(d.irange(maximum=start - 1)):
            u = d[key]
            if u.first_available(u.first, start - 1) is not None:  # the log start moved
                for a, b, state, count, _m, _d, pending in list(u.runs(u.first, start - 1)):
                    if state == AVAILABLE and pending is None:
                        u.set_range(a, b, ARCHIVED, count, None, NO_DEADLINE, None)
            if u.last < start and u.all_done():
                del d[key]
            else:
                u.maybe_merge()
        if self._end < start - 1:
            self._end = start - 1
        if self._gap_start is not None:
            self._gap_start = max(self._gap_start, start)
            if self._gap_start > self._gap_end or self._end != self._gap_end:
                self._gap_start = None

    def on_log_start_advanced(self, log_start_offset: int) -> None:
        """The log start moved (retention, DeleteRecords): records below it are gone.
        AVAILABLE ones are archived at once, acquired ones when their lock ends or they are
        acknowledged. Nothing is written now; the next Change carries the new start."""
        self._check_ready()
        if log_start_offset > self._start:
            self._start = log_start_offset
            self._rescan = True  # key ordering: records below it no longer hold their keys back
            self._settle()
