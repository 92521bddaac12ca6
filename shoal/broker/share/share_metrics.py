"""KIP-932's share-group counts, worked out from a share partition's Changes.

The share-partition manager calls these at its three call sites (acquire,
acknowledge once durable, lock expiry); keeping the counting here leaves the
manager's flow readable and the sans-IO ``SharePartition`` untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shoal.broker.metrics.counters import ShareCounts
from shoal.broker.share.in_flight import ARCHIVED, ARCHIVING
from shoal.broker.share.share_partition import RELEASE

__all__ = ["count_acknowledged", "count_expired"]

_ARCHIVED = (ARCHIVED, ARCHIVING)  # ARCHIVING: on the way to the dead-letter topic, archived all the same


def _fields(raw: Any) -> tuple[int, int, Sequence[int]]:
    if isinstance(raw, tuple | list):
        first, last, types = raw
        return int(first), int(last), types
    return int(raw.first_offset), int(raw.last_offset), raw.acknowledge_types


def count_acknowledged(counts: ShareCounts, batches: Sequence[Any], change: Any, limit: int) -> None:
    """An acknowledgement was applied (and persisted): records by type, and those a release archived
    because they had reached the delivery limit."""
    acks = counts.acks
    parsed = [_fields(b) for b in batches]
    for first, last, types in parsed:
        if len(types) == 1:
            if types[0]:
                acks[types[0]] = acks.get(types[0], 0) + last - first + 1
            continue
        for t in types:
            if t:
                acks[t] = acks.get(t, 0) + 1
    for first, last, state, delivered in change.batches:
        if state not in _ARCHIVED or delivered < limit:
            continue
        for a_first, a_last, types in parsed:
            if a_first <= first <= a_last:
                t = types[0] if len(types) == 1 else types[first - a_first]
                if t == RELEASE:
                    counts.archived_at_limit += last - first + 1
                break


def count_expired(counts: ShareCounts, change: Any, limit: int) -> None:
    """Acquisition locks expired: every record in the change timed out; those archived reached the limit."""
    for first, last, state, delivered in change.batches:
        n = last - first + 1
        counts.lock_timeouts += n
        if state in _ARCHIVED and delivered >= limit:
            counts.archived_at_limit += n
