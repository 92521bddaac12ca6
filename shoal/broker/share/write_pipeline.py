"""Pipelined state writes of one share partition: which changes go in which write, and
what happens to them when a write ends. Sans-IO.

Why: every acknowledgement of a share partition waits until its change is durable
in the share coordinator (WriteShareGroupState: an append to __share_group_state
and its fsync, both on the coordinators' log writer thread). With one write in
flight at a time, an acknowledgement that arrived while a write was syncing
waited for that whole write, then for its own:
under 32 to 128 members the median wait was 25-37 ms and its tail (a slow fsync
round, a loop stall) was paid by every acknowledgement queued behind it. Here the
next write is sent while the previous one's fsync runs (it waits on the writer
thread and shares the next fsync with whatever else queued meanwhile), as Kafka's
coordinator runtime appends a batch at once and answers its writers when the high
watermark passes it: up to ``depth`` writes are in flight, each made of everything
queued when it was sent (the ranges overlaid in order, the furthest start offset).

Order. Writes are sent in the order their changes were made (the share-partition
core requires it: reported start offsets only grow), and they are settled in that
order too: a write that finished is settled only once every write before it has
been, so waiters are answered oldest first and a change is never committed while
an earlier one could still be undone.

Failure. When the oldest write in flight failed, it and every later write in flight
fail together, undone newest first (each undo restores what its change found, so
the newest goes first), and all their waiters get the error. A later write may
have reached the coordinator meanwhile; undoing it leaves memory behind what is
durable, never ahead: its members were told the acknowledgement failed, and the
records come back (at least once), while nothing in memory claims a state a
restart could lose. Changes still queued were made with the failed ones pending
(the core's start offset never passes a pending offset), so they do not depend on
them and go out in the next write. Changes nobody waits for (lock expiry, member
release) are kept when their write fails, as Kafka keeps those transitions; the
next write carries the state again.

The shell (``partition_manager``) sends each ``Group`` the pipeline hands out,
reports its outcome with ``finished`` and answers the waiters of the groups that
returns; this module calls only ``commit`` and ``undo`` of the changes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from shoal.broker.share_coordinator.shard import merge_batches

__all__ = ["DEPTH", "MAX_BATCHES", "Group", "Pending", "WritePipeline"]

DEPTH = 2  # writes in flight per share partition: one syncing, the next appended behind it
MAX_BATCHES = 1000  # queued changes share one write while their ranges stay under this


class Change(Protocol):
    """What the pipeline needs of a share-partition core's Change."""

    start_offset: int
    batches: list
    delivery_complete_count: int

    def commit(self) -> None: ...

    def undo(self) -> None: ...


@dataclass(slots=True)
class Pending:
    """One change waiting to be written: who waits for it, and whether a failure undoes it."""

    change: Change
    waiter: Any = None  # the shell's token (a future) answered with the write's error code
    undo: bool = True  # False: kept even when its write fails (lock expiry, member release)


@dataclass(slots=True, eq=False)
class Group:
    """One write: the changes it carries and what it sends."""

    items: list[Pending]
    start_offset: int
    batches: list
    delivery_complete_count: int
    seq: int = 0  # its place in the order of writes (1, 2, ...)
    error: int | None = None  # None while in flight; 0 once written
    settled: bool = False  # its changes were committed or undone, its waiters may be answered


@dataclass(slots=True)
class WritePipeline:
    depth: int = DEPTH
    max_batches: int = MAX_BATCHES
    _queue: deque[Pending] = field(default_factory=deque)
    _in_flight: deque[Group] = field(default_factory=deque)
    _sent: int = 0

    def add(self, change: Change, waiter: Any = None, *, undo: bool = True) -> None:
        """Queue a change's write, in the order the changes were made."""
        self._queue.append(Pending(change, waiter, undo))

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Writes sent and not yet settled (a failed one counts until the ones before it settle)."""
        return len(self._in_flight)

    @property
    def idle(self) -> bool:
        return not self._queue and not self._in_flight

    def next_group(self) -> Group | None:
        """The next write to send now, or None (nothing queued, or ``depth`` writes in flight)."""
        if not self._queue or len(self._in_flight) >= self.depth:
            return None
        first = self._queue.popleft()
        items = [first]
        batches = list(first.change.batches)
        while self._queue and len(batches) < self.max_batches:
            items.append(self._queue.popleft())
            batches = merge_batches(batches, items[-1].change.batches, -1)
        self._sent += 1
        group = Group(
            items,
            max(p.change.start_offset for p in items),
            batches,
            items[-1].change.delivery_complete_count,
            seq=self._sent,
        )
        self._in_flight.append(group)
        return group

    def finished(self, group: Group, error: int) -> list[Group]:
        """`group`'s write ended with `error` (0: durable). Returns the groups settled now, oldest
        first, each with its final error: commit and undo are done, their waiters may be answered.
        A group already settled (failed with an earlier one) is ignored."""
        if group.settled or group.error is not None:
            return []
        group.error = int(error)
        out: list[Group] = []
        while self._in_flight and self._in_flight[0].error is not None:
            head = self._in_flight[0]
            if head.error == 0:
                self._in_flight.popleft()
                for p in head.items:
                    p.change.commit()
                head.settled = True
                out.append(head)
                continue
            failed = list(self._in_flight)
            self._in_flight.clear()
            for g in reversed(failed):
                if not g.error:  # in flight, or written after a failed one: fails with it
                    g.error = head.error
                for p in reversed(g.items):
                    if p.undo:
                        p.change.undo()
                    else:
                        p.change.commit()
                g.settled = True
            out.extend(failed)
            break
        return out
