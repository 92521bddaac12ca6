"""What an acquire-only share consumer holds and owes, by offset range instead of by record. Sans-IO.

Why ranges: a share group hands each member AcquiredRecords -- (first
offset, last offset, delivery count) -- next to the record bytes. A member
that does not read the records itself (the Spark source's driver, which
plans the ranges as tasks and lets executors fetch and decode the records)
needs nothing else, and handling thousands of records as one range costs the
same as handling one. ``RangeTracker`` is ``AckTracker``'s counterpart for
such a member (``client.share.acquirer`` plugs it into the share consumer in
place of ``AckTracker``); the wire side -- ``PartitionAcks`` of offset ->
type, built with C-speed ``dict.fromkeys`` -- is shared, so the fetcher
sends, merges, requeues and completes acknowledgements exactly as for
records.

Life of an ``AcquiredRange``, per partition: **buffered** (fetched, not
handed out; dropped unhanded once its lock deadline passed), **delivered**
(returned by ``take_records``), **pending** / **owed** (acknowledged, not
sent / not answered yet), **renewing** -> **renewed** (RENEW confirmed: the
same object is handed out again by the next poll, with the new deadline, as
KIP-1222 asks). Explicit acknowledgement only; ``acknowledge`` takes any
range lying within what was delivered (a caller may cut a delivered range in
pieces and acknowledge them at different times), each offset once.

Offsets with no record inside an acquired range (compacted away) are not
known here -- the records are not decoded -- and are acknowledged like the
rest; the broker archives them either way. Control batches and aborted
transactions (with ``share.isolation.level=read_committed``) are never
acquired by the broker, so ranges do not cover them.

A range acquired again while this member still holds part of it (its lock
ran out first): the held copy stays the live one and takes the new deadline
and delivery count (as ``AckTracker`` does); a stale buffered copy is cut
away so the new acquisition replaces it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import IllegalStateError
from shoal.client.share.acks import PartitionAcks, SendSide, check_type
from shoal.protocol.constants import ACCEPT, RELEASE, RENEW, AcknowledgeType

__all__ = ["AcquiredRange", "RangeTracker", "subtract_offsets"]


@dataclass(slots=True, eq=False)
class AcquiredRange:
    """Offsets ``first..last`` of one partition, acquired with one delivery count and lock deadline.

    ``offset`` (= ``first``) makes it keyable like a record: (topic, partition, offset).
    """

    topic: str
    partition: int
    first: int
    last: int
    delivery_count: int
    acquisition_lock_deadline: float | None = None

    @property
    def offset(self) -> int:
        return self.first

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def split(self, n: int) -> tuple[AcquiredRange, AcquiredRange]:
        """The first ``n`` offsets and the rest (0 < n < size), as two new ranges."""
        if not 0 < n < self.size:
            raise ValueError(f"cannot split {self.size} offsets after {n}")
        cut = self.first + n
        return (
            AcquiredRange(
                self.topic, self.partition, self.first, cut - 1, self.delivery_count, self.acquisition_lock_deadline
            ),
            AcquiredRange(
                self.topic, self.partition, cut, self.last, self.delivery_count, self.acquisition_lock_deadline
            ),
        )

    def __repr__(self) -> str:
        return f"AcquiredRange({self.topic}-{self.partition} [{self.first}, {self.last}] x{self.delivery_count})"


def subtract_offsets(ranges: Iterable[tuple[int, int, int]], drop: frozenset[int]) -> list[tuple[int, int, int]]:
    """(first, last, count) ranges without the offsets in ``drop`` (cut into pieces), sorted."""
    out: list[tuple[int, int, int]] = []
    for first, last, count in sorted(ranges):
        start = first
        for o in sorted(o for o in drop if first <= o <= last):
            if o > start:
                out.append((start, o - 1, count))
            start = o + 1
        if start <= last:
            out.append((start, last, count))
    return out


def _overlap(a: AcquiredRange, first: int, last: int) -> tuple[int, int] | None:
    lo, hi = max(a.first, first), min(a.last, last)
    return (lo, hi) if lo <= hi else None


def _cut(a: AcquiredRange, first: int, last: int) -> list[AcquiredRange]:
    """What is left of ``a`` without ``first..last`` (a itself when they do not overlap)."""
    if _overlap(a, first, last) is None:
        return [a]
    out = []
    if a.first < first:
        out.append(
            AcquiredRange(a.topic, a.partition, a.first, first - 1, a.delivery_count, a.acquisition_lock_deadline)
        )
    if a.last > last:
        out.append(AcquiredRange(a.topic, a.partition, last + 1, a.last, a.delivery_count, a.acquisition_lock_deadline))
    return out


@dataclass(slots=True)
class _Part:
    buffer: deque[AcquiredRange] = field(default_factory=deque)
    delivered: list[AcquiredRange] = field(default_factory=list)
    pending: dict[int, int] = field(default_factory=dict)
    renewing: list[AcquiredRange] = field(default_factory=list)
    renewed: list[AcquiredRange] = field(default_factory=list)
    owed: set[int] = field(default_factory=set)
    internal: set[int] = field(default_factory=set)
    in_flight: int = 0
    high: int = -1  # highest offset ever buffered or acknowledged here (see AckTracker)

    def empty(self) -> bool:
        return not (self.buffer or self.delivered or self.pending or self.renewing or self.renewed or self.in_flight)


class RangeTracker(SendSide):
    """Acquired ranges of one acquire-only share consumer and what it owes (see module doc)."""

    def __init__(self, *, explicit: bool = True) -> None:
        self.explicit = explicit
        self._parts: dict[TopicPartition, _Part] = {}

    def _new_part(self) -> _Part:
        return _Part()

    # -- fetch side ------------------------------------------------------------------
    def add_ranges(self, tp: TopicPartition, ranges: Sequence[AcquiredRange]) -> None:
        """Ranges a fetch acquired (already without offsets ``claim`` reported), in offset order."""
        if not ranges:
            return
        p = self._part(tp)
        p.buffer.extend(ranges)
        top = max(r.last for r in ranges)
        if top > p.high:
            p.high = top

    def claim(
        self, tp: TopicPartition, ranges: Sequence[tuple[int, int, int]], lock_deadline: float | None
    ) -> frozenset[int]:
        """Offsets of a new acquisition that this member still holds (delivered, renewing, or
        acknowledged and not answered): not to be handed out again. Held copies take the new
        deadline and count; stale buffered copies are cut away (the new copy replaces them)."""
        p = self._parts.get(tp)
        if p is None or not ranges or p.empty():
            return frozenset()
        if min(f for f, _, _ in ranges) > p.high:
            return frozenset()
        out: set[int] = set()
        for held in (*p.delivered, *p.renewing, *p.renewed):
            for first, last, count in ranges:
                both = _overlap(held, first, last)
                if both is not None:
                    out.update(range(both[0], both[1] + 1))
                    held.acquisition_lock_deadline = lock_deadline
                    held.delivery_count = count
        acked = p.owed.union(p.pending)
        if acked:
            for first, last, _ in ranges:
                out.update(acked.intersection(range(first, last + 1)))
        if p.buffer:
            buf = list(p.buffer)
            for first, last, _ in ranges:
                buf = [piece for b in buf for piece in _cut(b, first, last)]
            p.buffer = deque(buf)
        return frozenset(out)

    def buffered(self, tp: TopicPartition) -> int:
        p = self._parts.get(tp)
        return sum(r.size for r in p.buffer) + sum(r.size for r in p.renewed) if p is not None else 0

    def has_records(self) -> bool:
        return any(p.buffer or p.renewed for p in self._parts.values())

    # -- poll side -------------------------------------------------------------------
    def begin_poll(self) -> None:
        if self.explicit:
            left = self.unacknowledged()
            if left:
                raise IllegalStateError(
                    f"{left} acquired offset(s) of the previous poll are not acknowledged: in explicit "
                    "acknowledgement mode every one must be acknowledged before the next poll"
                )
            return
        self.accept_delivered()

    def accept_delivered(self) -> None:
        for p in self._parts.values():
            for r in p.delivered:
                p.pending.update(dict.fromkeys(range(r.first, r.last + 1), ACCEPT))
            p.delivered.clear()

    def take_records(self, max_records: int, now: float | None = None) -> list[AcquiredRange]:
        """Hand out up to ``max_records`` offsets as ranges: renewed ranges if there are any (whole:
        they go back to whoever renewed them), else buffered ones (the last one cut to fit). Buffered
        ranges whose lock deadline passed are dropped."""
        out: list[AcquiredRange] = []
        room = max_records
        for p in self._parts.values():
            if room <= 0:
                break
            while p.renewed and room > 0:
                r = p.renewed.pop(0)
                p.delivered.append(r)
                out.append(r)
                room -= r.size
        if out:
            return out
        for p in self._parts.values():
            buf = p.buffer
            while buf and room > 0:
                r = buf.popleft()
                d = r.acquisition_lock_deadline
                if now is not None and d is not None and d <= now:
                    continue
                if r.size > room:
                    r, rest = r.split(room)
                    buf.appendleft(rest)
                p.delivered.append(r)
                out.append(r)
                room -= r.size
        return out

    def acknowledge(self, rng: AcquiredRange, kind: object = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge ``rng``: every offset of it must have been delivered and not acknowledged yet."""
        t = check_type(kind)
        where = f"{rng.topic}-{rng.partition} [{rng.first}, {rng.last}]"
        p = self._parts.get((rng.topic, rng.partition))  # type: ignore[call-overload]
        if rng.last < rng.first:
            raise ValueError(f"empty range {where}")
        covered = 0
        if p is not None:
            for d in p.delivered:
                both = _overlap(d, rng.first, rng.last)
                if both is not None:
                    covered += both[1] - both[0] + 1
        if p is None or covered != rng.size:
            if p is not None and (rng.first in p.pending or rng.first in p.owed or any(rng is r for r in p.renewing)):
                raise IllegalStateError(f"offsets {where} were already acknowledged")
            raise IllegalStateError(
                f"offsets {where} cannot be acknowledged: not all of them were handed out by this consumer "
                "and left unacknowledged"
            )
        p.delivered = [piece for d in p.delivered for piece in _cut(d, rng.first, rng.last)]
        p.pending.update(dict.fromkeys(range(rng.first, rng.last + 1), t))
        if t == RENEW:
            p.renewing.append(rng)

    def unacknowledged(self) -> int:
        return sum(r.size for p in self._parts.values() for r in p.delivered)

    # -- send side (the rest is SendSide's) --------------------------------------------
    def complete(self, pa: PartitionAcks, error: BaseException | None, lock_deadline: float | None = None) -> None:
        """The broker answered for ``pa``; confirmed renewals come back for the next poll."""
        if pa.done:
            return
        pa.done, pa.error = True, error
        p = self._parts.get(pa.tp)
        if p is None:
            return
        p.in_flight -= 1
        p.owed.difference_update(pa.acks)
        if pa.has_renew and p.renewing:
            keep = []
            for r in p.renewing:
                if pa.acks.get(r.first) != RENEW:
                    keep.append(r)
                    continue
                if error is None:
                    if lock_deadline is not None:
                        r.acquisition_lock_deadline = lock_deadline
                    p.renewed.append(r)
            p.renewing = keep
            p.renewed.sort(key=lambda r: r.first)
        self._maybe_forget(pa.tp, p)

    def add_pending(self, tp: TopicPartition, offsets: Iterable[int], kind: int) -> None:
        """Acknowledge acquired offsets the application never saw (RELEASE of a revoked partition's)."""
        p = self._part(tp)
        offsets = list(offsets)
        p.pending.update(dict.fromkeys(offsets, int(kind)))
        p.internal.update(offsets)
        if offsets and max(offsets) > p.high:
            p.high = max(offsets)

    # -- assignment changes ------------------------------------------------------------
    def release_buffered(self, tp: TopicPartition) -> int:
        p = self._parts.get(tp)
        if p is None or not p.buffer:
            return 0
        n = 0
        for r in p.buffer:
            offsets = range(r.first, r.last + 1)
            p.pending.update(dict.fromkeys(offsets, RELEASE))
            p.internal.update(offsets)
            n += r.size
        p.buffer.clear()
        return n

    def drop_buffered(self, tps: Iterable[TopicPartition]) -> int:
        n = 0
        for tp in tps:
            p = self._parts.get(tp)
            if p is not None and p.buffer:
                n += sum(r.size for r in p.buffer)
                p.buffer.clear()
                self._maybe_forget(tp, p)
        return n

    def renewing(self) -> int:
        return sum(r.size for p in self._parts.values() for r in p.renewing)
