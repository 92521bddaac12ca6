"""The bookkeeping of one ``SharePartition.acquire`` call: what it took so far, for whom, how much
room is left, and the ranges it touched. Apart from :mod:`broker.share.share_partition` only to keep
that module within the size rule. Sans-IO.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.broker.share.in_flight import InFlightBatch

__all__ = ["Acquisition"]


@dataclass(slots=True)
class Acquisition:
    """Bookkeeping of one acquire() call."""

    member: str
    deadline: int
    max_records: int
    room: int  # records that may still be added beyond the end offset
    batch_optimized: bool
    batch_size: int | None
    taken: int = 0
    stop: bool = False
    out: list[list[int]] = field(default_factory=list)
    touched: dict[int, InFlightBatch] = field(default_factory=dict)
    fresh: InFlightBatch | None = None

    def add(self, unit: InFlightBatch, first: int, last: int, count: int) -> None:
        self.taken += last - first + 1
        self.touched[id(unit)] = unit
        if self.out and self.out[-1][1] == first - 1 and self.out[-1][2] == count:
            self.out[-1][1] = last
        else:
            self.out.append([first, last, count])
