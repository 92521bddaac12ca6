"""Which old segments retention removes: a pure function of sizes and times.

Why separate: the rule is the part worth testing exhaustively and it needs no
files.  ``PartitionLog.enforce_retention`` feeds it the closed segments
(never the active one) and deletes what it names.

The rule follows Kafka's: only a *prefix* of the log goes (a log never has
holes), first every leading segment whose newest timestamp is more than
``retention_ms`` old, then, while the partition is still over
``retention_bytes``, every further leading segment whose removal keeps the
partition at or above that size.  Either limit is off when negative.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RetentionDecision", "SegmentStats", "select_for_deletion"]


@dataclass(slots=True, frozen=True)
class SegmentStats:
    base_offset: int
    size: int
    largest_timestamp: int


@dataclass(slots=True)
class RetentionDecision:
    """Delete the first ``count`` segments: ``by_time`` of them for age, the rest for size."""

    count: int = 0
    by_time: int = 0
    by_size: int = 0
    bytes: int = 0


def select_for_deletion(
    closed: Sequence[SegmentStats],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    total_bytes: int,
) -> RetentionDecision:
    """Pick the leading segments of ``closed`` (oldest first) to delete."""
    decision = RetentionDecision()
    i = 0
    if retention_ms >= 0:
        while i < len(closed) and now_ms - closed[i].largest_timestamp > retention_ms:
            decision.bytes += closed[i].size
            i += 1
        decision.by_time = i
    if retention_bytes >= 0:
        excess = total_bytes - decision.bytes - retention_bytes
        while i < len(closed) and excess - closed[i].size >= 0:
            excess -= closed[i].size
            decision.bytes += closed[i].size
            decision.by_size += 1
            i += 1
    decision.count = i
    return decision
