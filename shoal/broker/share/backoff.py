"""Redelivery back-off for share partitions (beyond Kafka). Sans-IO.

Why: Kafka makes a released or timed-out record acquirable again at once, so a
record whose processing fails for a transient reason (a database that is down)
comes straight back and fails again, burning its delivery attempts in
milliseconds. With ``shoal.share.redelivery.backoff.ms`` set, such a record
waits ``min(max, base * multiplier ** (deliveryCount - 1))`` before any member
may acquire it again. Default 0: Kafka's behaviour, and the share partition
then never consults this module (its fast path is unchanged).

What counts as a failure: a RELEASE acknowledgement and a lock that ran out.
Records a member gives back by leaving or closing its share session come back
without back-off (their delivery count is lowered too: nobody may have seen
them).

:class:`Holds` keeps "not before" times per offset range, disjoint, newest hold
winning where two overlap. It is not persisted, but rebuilt: the delivery
count is, so when a share partition loads, each AVAILABLE range that was
delivered before starts its back-off again from the load time (a record may so
wait up to one back-off longer than it would have without the restart).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from sortedcontainers import SortedDict

__all__ = ["BackoffPolicy", "Holds"]


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """The back-off of one group: ``base_ms`` 0 turns it off."""

    base_ms: int = 0
    max_ms: int = 60000
    multiplier: float = 2.0

    @property
    def enabled(self) -> bool:
        return self.base_ms > 0

    def delay(self, delivery_count: int) -> int:
        """Milliseconds a record that failed its `delivery_count`-th delivery waits."""
        if self.base_ms <= 0:
            return 0
        cap = max(self.max_ms, self.base_ms)
        n = max(delivery_count, 1) - 1
        d = float(self.base_ms)
        for _ in range(n):  # stepwise: never overflows a float on a large count
            d *= self.multiplier
            if d >= cap:
                return cap
        return min(cap, int(d))


class Holds:
    """Offset ranges that may not be acquired before a given time."""

    __slots__ = ("_ends", "_ranges")

    def __init__(self) -> None:
        self._ranges: SortedDict = SortedDict()  # first -> (last, not_before)
        self._ends: list[int] = []  # heap of not_before times (stale entries pruned lazily)

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def __len__(self) -> int:
        return len(self._ranges)

    def clear(self) -> None:
        self._ranges.clear()
        self._ends.clear()

    def hold(self, first: int, last: int, not_before: int) -> None:
        """[first, last] is not acquirable before `not_before` (replaces older holds there)."""
        self._carve(first, last)
        self._ranges[first] = (last, not_before)
        heapq.heappush(self._ends, not_before)

    def _carve(self, first: int, last: int) -> None:
        d = self._ranges
        i = d.bisect_right(first) - 1
        keys = list(d.irange(d.peekitem(i)[0] if i >= 0 else first, last))
        for k in keys:
            end, nb = d[k]
            if end < first:
                continue
            del d[k]
            if k < first:
                d[k] = (first - 1, nb)
            if end > last:
                d[last + 1] = (end, nb)

    def prune(self, now_ms: int) -> None:
        """Forget holds that ended by `now_ms`."""
        ends = self._ends
        if not ends or ends[0] > now_ms:
            return
        while ends and ends[0] <= now_ms:
            heapq.heappop(ends)
        d = self._ranges
        for k in [k for k, (_e, nb) in d.items() if nb <= now_ms]:
            del d[k]

    def next_end(self, now_ms: int) -> int | None:
        """The earliest time a hold still running at `now_ms` ends (None: none is running)."""
        self.prune(now_ms)
        return self._ends[0] if self._ends else None

    def free(self, first: int, last: int, now_ms: int) -> list[tuple[int, int]]:
        """The parts of [first, last] not held at `now_ms`, in order."""
        self.prune(now_ms)
        d = self._ranges
        if not d:
            return [(first, last)]
        out: list[tuple[int, int]] = []
        cur = first
        i = d.bisect_right(first) - 1
        for k in d.irange(d.peekitem(i)[0] if i >= 0 else first, last):
            end, _nb = d[k]
            if end < cur:
                continue
            if k > cur:
                out.append((cur, k - 1))
            cur = end + 1
            if cur > last:
                return out
        out.append((cur, last))
        return out

    def held_until(self, offset: int, now_ms: int) -> int | None:
        """The last offset of the hold covering `offset` at `now_ms`, or None."""
        self.prune(now_ms)
        d = self._ranges
        i = d.bisect_right(offset) - 1
        if i < 0:
            return None
        end, _nb = d.peekitem(i)[1]
        return end if end >= offset else None
