"""Which offsets of a fetch a share group may deliver: data, not control or aborted records.

Apart from ``share_partition`` because it is a rule about the log, not about
in-flight state: given the batches a fetch read and the aborted transactions
it reported (read_committed), it covers the fetched offsets with segments
that do or do not hold deliverable data. Sans-IO.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["deliverable_segments"]


def deliverable_segments(
    fetched: Sequence[Any], aborted: Iterable[Sequence[int]], cursor: int
) -> list[tuple[int, int, bool]]:
    """Cover [cursor, last fetched offset] with (first, last, has_data) segments, one per
    log batch plus fillers for offsets no batch holds. Control batches and batches of
    aborted transactions (producer id, first offset[, last offset]) have no data: a
    transaction is aborted from its first offset until its producer's next control batch
    (the abort marker) or its last offset, as Kafka's read_committed filter decides."""
    txns = sorted((int(t[1]), int(t[0]), int(t[2]) if len(t) > 2 else None) for t in aborted)
    active: dict[int, int | None] = {}
    i = 0
    out: list[tuple[int, int, bool]] = []
    for batch in fetched:
        base, last = batch.base_offset, batch.last_offset
        if last < cursor:
            continue
        if base > cursor:
            out.append((cursor, base - 1, False))
        while i < len(txns) and txns[i][0] <= last:
            _first, pid, end = txns[i]
            i += 1
            if end is None or end >= base:
                active[pid] = end
        pid = getattr(batch, "producer_id", -1)
        if batch.is_control:
            data = False
            active.pop(pid, None)
        elif pid in active and getattr(batch, "is_transactional", True):
            end = active[pid]
            data = end is not None and base > end
        else:
            data = True
        out.append((max(base, cursor), last, data))
        cursor = last + 1
    return out
