"""Poison-record isolation for share partitions (KAFKA-17541). Sans-IO arithmetic.

Why: a consumer that fails on one bad record usually fails the whole batch it
was handed (it releases everything, or its lock runs out). Delivered as one
batch again and again, the 99 good records of a batch of 100 would reach the
delivery limit together with the bad one and be archived (or dead-lettered)
with it. Kafka therefore hands out less of a range once its records have
failed often:

* From the *throttle threshold* on -- half the delivery count limit, rounded
  up, at least 2 (3 for the default limit of 5) -- a fetch takes at most
  ``size >> (count - threshold + 1)`` records of the range (at least one),
  where ``count`` is the delivery count of its first acquirable record so
  far and ``size`` the range's size: half at the threshold, a quarter one
  delivery later, and so on.
* A record about to get its last delivery (count == limit - 1, for limits
  above 2) goes out alone: the fetch ends before it when it already took
  something, and right after it otherwise.
* A throttled range is never combined with other records in one fetch: the
  fetch ends before it when it already took something, and after it when it
  took something from it.

So with the default limit one bad record among 100 costs the other 99 at most
four deliveries; each of them ends ACKNOWLEDGED and the bad one is archived
alone. The share-partition core (:mod:`broker.share.share_partition`) asks
:func:`throttle` for a range and :meth:`Throttle.last` per run of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Throttle", "threshold", "throttle"]

MIN_THRESHOLD = 2


def threshold(delivery_count_limit: int) -> int:
    """The delivery count from which a range is handed out in halves."""
    return max(MIN_THRESHOLD, -(-delivery_count_limit // 2))


@dataclass(slots=True)
class Throttle:
    """How much of one in-flight range a fetch may take."""

    quota: int  # records of the range this fetch may take
    limit: int  # the delivery count limit

    def last(self, first: int, last: int, count: int, taken: int) -> int:
        """The last offset of the acquirable run [first, last] (delivery count `count` so far) a
        fetch that already took `taken` records of this range may take; ``first - 1``: none."""
        if self.limit > 2 and count == self.limit - 1:
            return first if taken == 0 else first - 1  # the last attempt goes alone
        return min(last, first + self.quota - taken - 1)

    def done(self, count_after: int, taken: int) -> bool:
        """Whether the fetch must end after a run that left its records at `count_after` deliveries
        and brought this range's taken records to `taken`."""
        return taken >= self.quota or (self.limit > 2 and count_after >= self.limit)


def throttle(size: int, counts: Iterable[int], delivery_count_limit: int) -> Throttle | None:
    """The throttle of a range of `size` offsets whose acquirable runs have delivery counts
    `counts` (in offset order); None when none of them reached the threshold."""
    t = threshold(delivery_count_limit)
    first = next((c for c in counts if c >= t), None)
    if first is None:
        return None
    return Throttle(max(1, size >> (first - t + 1)), delivery_count_limit)
