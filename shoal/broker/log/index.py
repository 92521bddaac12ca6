"""Sparse offset and time indexes of one log segment, held in memory.

Why they live in memory: a segment of 1 GiB with an entry every 4 KiB has
about 262k entries, 2 MiB as compact ``array`` columns.  Bisecting those costs
no syscall and no mmap bookkeeping, and Python's ``bisect`` works on arrays
directly.  The files are a persistence format only: a segment writes them
whole when it rolls or the log closes, and reads them back on open when they
can be trusted (see ``broker.log.segment``).  Both file formats are Kafka's:
big-endian ``(int32 relative offset, int32 position)`` pairs and
``(int64 timestamp, int32 relative offset)`` triples.

Why an offset entry names the *base* offset of a batch (Kafka's names the
last one): a floor lookup for offset ``o`` then returns the position of a
batch whose first offset is ``<= o``, so the scan that follows never starts
past the batch holding ``o``, and the batch sitting at an entry's position is
known without reading it (the read path uses this to find batch boundaries).

A time entry ``(T, r)`` records that ``T`` was the segment's largest
timestamp at some point and that the batch based at relative offset ``r`` was
the first to reach it.  Every batch before ``r`` therefore has a smaller max
timestamp, which makes ``r`` a safe place to start looking for the first batch
whose max timestamp is ``>= T``.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right

__all__ = ["INT32_MAX", "IndexCorrupt", "OffsetIndex", "TimeIndex"]

INT32_MAX = 2**31 - 1

_BIG_ENDIAN_HOST = sys.byteorder == "big"
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorrupt(ValueError):
    """An index file that does not describe its segment; the caller rebuilds."""


class OffsetIndex:
    """Relative base offset → file position, strictly increasing in both."""

    ENTRY_SIZE = 8
    __slots__ = ("_pos", "_rel", "max_entries")

    def __init__(self, max_entries: int) -> None:
        self._rel = array("i")
        self._pos = array("i")
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._rel)

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self.max_entries

    @property
    def first(self) -> tuple[int, int] | None:
        if not self._rel:
            return None
        return self._rel[0], self._pos[0]

    @property
    def last(self) -> tuple[int, int] | None:
        if not self._rel:
            return None
        return self._rel[-1], self._pos[-1]

    def append(self, rel: int, position: int) -> None:
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise ValueError(f"index entry ({rel}, {position}) does not follow {self.last}")
        self._rel.append(rel)
        self._pos.append(position)

    def lookup(self, rel: int) -> tuple[int, int] | None:
        """Entry with the largest relative offset ``<= rel``, or None."""
        i = bisect_right(self._rel, rel) - 1
        if i < 0:
            return None
        return self._rel[i], self._pos[i]

    def floor_position(self, position: int) -> tuple[int, int] | None:
        """Entry with the largest position ``<= position``, or None."""
        i = bisect_right(self._pos, position) - 1
        if i < 0:
            return None
        return self._rel[i], self._pos[i]

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._rel, self._pos))

    def clear(self) -> None:
        del self._rel[:]
        del self._pos[:]

    def to_bytes(self) -> bytes:
        buf = bytearray(len(self._rel) * self.ENTRY_SIZE)
        if buf:
            view = memoryview(buf).cast("i")
            view[0::2] = self._rel
            view[1::2] = self._pos
            view.release()
        if not _BIG_ENDIAN_HOST:
            swapped = array("i", buf)
            swapped.byteswap()
            return swapped.tobytes()
        return bytes(buf)

    @classmethod
    def from_bytes(cls, data: bytes, max_entries: int) -> OffsetIndex:
        """Decode an index file; raises IndexCorrupt unless strictly increasing."""
        if len(data) % cls.ENTRY_SIZE:
            raise IndexCorrupt(f"offset index size {len(data)} is not a multiple of {cls.ENTRY_SIZE}")
        flat = array("i", data)
        if not _BIG_ENDIAN_HOST:
            flat.byteswap()
        index = cls(max_entries)
        index._rel = flat[0::2]
        index._pos = flat[1::2]
        rel, pos = index._rel, index._pos
        if rel and (rel[0] < 0 or pos[0] < 0):
            raise IndexCorrupt("negative offset index entry")
        for i in range(1, len(rel)):
            if rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]:
                raise IndexCorrupt(f"offset index entry {i} does not increase")
        return index


class TimeIndex:
    """Max timestamp so far → relative base offset of the batch reaching it."""

    ENTRY_SIZE = 12
    __slots__ = ("_rel", "_ts", "max_entries")

    def __init__(self, max_entries: int) -> None:
        self._ts = array("q")
        self._rel = array("i")
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._ts)

    @property
    def is_full(self) -> bool:
        return len(self._ts) >= self.max_entries

    @property
    def last(self) -> tuple[int, int] | None:
        if not self._ts:
            return None
        return self._ts[-1], self._rel[-1]

    def maybe_append(self, timestamp: int, rel: int) -> bool:
        """Add an entry if ``timestamp`` is larger than every earlier one."""
        if timestamp < 0 or (self._ts and timestamp <= self._ts[-1]):
            return False
        if self._rel and rel < self._rel[-1]:
            raise ValueError(f"time index offset {rel} goes back from {self._rel[-1]}")
        self._ts.append(timestamp)
        self._rel.append(rel)
        return True

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """Entry with the largest timestamp ``<= timestamp``, or None."""
        i = bisect_right(self._ts, timestamp) - 1
        if i < 0:
            return None
        return self._ts[i], self._rel[i]

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._ts, self._rel))

    def clear(self) -> None:
        del self._ts[:]
        del self._rel[:]

    def to_bytes(self) -> bytes:
        return b"".join(map(_TIME_ENTRY.pack, self._ts, self._rel))

    @classmethod
    def from_bytes(cls, data: bytes, max_entries: int) -> TimeIndex:
        """Decode a time index file; raises IndexCorrupt unless monotonic."""
        if len(data) % cls.ENTRY_SIZE:
            raise IndexCorrupt(f"time index size {len(data)} is not a multiple of {cls.ENTRY_SIZE}")
        index = cls(max_entries)
        ts_col, rel_col = index._ts, index._rel
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            if ts < 0 or rel < 0:
                raise IndexCorrupt(f"negative time index entry ({ts}, {rel})")
            if ts_col and (ts <= ts_col[-1] or rel < rel_col[-1]):
                raise IndexCorrupt(f"time index entry ({ts}, {rel}) does not increase")
            ts_col.append(ts)
            rel_col.append(rel)
        return index
