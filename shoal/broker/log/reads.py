"""The read side of a partition log: fetch reads, file regions, scans, timestamp lookups.

A mixin of ``PartitionLog`` (kept apart so each file stays readable); it
only reads ``_segments``, ``_bases`` and the offsets the log maintains, and
never changes them.  Reads see what was written: a batch whose write is still
in flight (``PartitionLog.append_async``) is not part of any segment yet.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from shoal.broker.log.segment import (
    DEFAULT_CHUNK_BYTES,
    CorruptLog,
    FileBatchReader,
    LogSegment,
    OffsetOutOfRange,
    batch_records,
    pread_exact,
)
from shoal.protocol.records import BatchHeader, Record

__all__ = ["FileRegion", "LogReads", "ReadResult"]


@dataclass(slots=True)
class ReadResult:
    """Whole batches from one segment.  ``first_offset`` is the base offset of
    the first batch (it may be below the offset asked for: a read lands on the
    batch holding it); ``next_offset`` is where the next read should start."""

    data: memoryview
    first_offset: int
    next_offset: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(slots=True)
class FileRegion:
    """The same bytes as a ``ReadResult``, as a file region for ``sendfile``.

    ``fd`` belongs to the log (see the module notes): send before the log
    next deletes segments, or ``os.dup`` it first.  ``length`` 0 means empty.
    """

    fd: int
    position: int
    length: int
    first_offset: int
    next_offset: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class LogReads:
    """Reading methods of ``PartitionLog`` (see there for the log's invariants)."""

    __slots__ = ()

    # PartitionLog provides _segments, _bases, _check_open, log_start_offset and log_end_offset.

    def _region(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool
    ) -> tuple[LogSegment | None, int, int, int, int]:
        """(segment, position, length, first offset, next offset) of a read."""
        self._check_open()
        start, leo = self.log_start_offset, self.log_end_offset
        if offset < start or offset > leo:
            raise OffsetOutOfRange(offset, start, leo)
        upper = leo if max_offset is None else min(max_offset, leo)
        empty = (None, 0, 0, offset, offset)
        if offset >= upper:
            return empty
        first = None
        for seg in self._segments[bisect_right(self._bases, offset) - 1 :]:
            if seg.base_offset >= upper:
                return empty
            first = seg.locate(offset)
            if first is not None:
                break
        if first is None or first.last_offset >= upper:
            return empty
        limit = first.position + max(max_bytes, 0)
        if upper < seg.next_offset:
            stop = seg.locate(upper)
            if stop is not None:
                limit = min(limit, stop.position)
        first_end = first.position + first.size
        if first_end <= limit:
            end, next_offset = seg.boundary(first_end, first.last_offset + 1, limit)
        elif min_one_message:  # KIP-74: the first batch whole, even past max_bytes
            end, next_offset = first_end, first.last_offset + 1
        else:
            return empty
        return seg, first.position, end - first.position, first.base_offset, next_offset

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> ReadResult:
        """Whole batches from the batch holding ``offset``, at most ``max_bytes``
        (but at least the first batch when ``min_one_message``), from one
        segment, and none with offsets at or past ``max_offset``.

        ``offset == log_end_offset`` gives an empty result; outside
        ``[log_start_offset, log_end_offset]`` raises OffsetOutOfRange.
        """
        seg, position, length, first, next_offset = self._region(offset, max_bytes, max_offset, min_one_message)
        data = memoryview(b"")
        if seg is not None and length:
            raw = pread_exact(seg.fd, length, position)
            if len(raw) != length:
                raise CorruptLog(f"{seg.path()}: short read at {position}")
            data = memoryview(raw)
        leo = self.log_end_offset
        return ReadResult(data, first, next_offset, leo, self.log_start_offset, leo)

    def read_region(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FileRegion:
        """Like ``read`` but without reading: where the bytes are, for ``sendfile``."""
        seg, position, length, first, next_offset = self._region(offset, max_bytes, max_offset, min_one_message)
        leo = self.log_end_offset
        fd = seg.fd if seg is not None else -1
        return FileRegion(fd, position, length, first, next_offset, leo, self.log_start_offset, leo)

    def scan(
        self,
        start_offset: int | None = None,
        *,
        end_offset: int | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Every batch holding offsets in ``[start_offset, end_offset)``, in order.

        For replaying a whole partition (producer state, coordinators): reads
        ``chunk_bytes`` at a time.  The end defaults to the log end when
        called; appends made while iterating are not seen.  Each segment is
        read through its own duplicate descriptor, so retention running
        meanwhile cannot make it read the wrong file; reaching a segment that
        was deleted meanwhile raises OffsetOutOfRange.
        """
        self._check_open()
        begin = self.log_start_offset if start_offset is None else start_offset
        leo = self.log_end_offset
        if not self.log_start_offset <= begin <= leo:
            raise OffsetOutOfRange(begin, self.log_start_offset, leo)
        end = leo if end_offset is None else min(end_offset, leo)
        first = max(0, bisect_right(self._bases, begin) - 1)
        return self._scan([(s, s.size) for s in self._segments[first:]], begin, end, chunk_bytes)

    def _scan(
        self, segments: list[tuple[LogSegment, int]], begin: int, end: int, chunk_bytes: int
    ) -> Iterator[tuple[BatchHeader, memoryview]]:
        for seg, size in segments:
            if seg.base_offset >= end:
                return
            if seg.next_offset <= begin or size == 0:
                continue
            if seg.deleted:  # retention or truncation ran while scanning
                raise OffsetOutOfRange(seg.base_offset, self.log_start_offset, self.log_end_offset)
            position = seg.index_lookup(begin) if begin > seg.base_offset else 0
            fd = os.dup(seg.fd)
            try:
                reader = FileBatchReader(fd, position, size, chunk_bytes)
                for _, header in reader:
                    if header.base_offset >= end:
                        return
                    if header.last_offset >= begin:
                        yield header, header.data
                if reader.error:
                    raise CorruptLog(f"{seg.path()}: {reader.error} at {reader.position}")
            finally:
                os.close(fd)

    # -- timestamps ----------------------------------------------------------

    @staticmethod
    def _records(seg: LogSegment, header: BatchHeader) -> list[Record]:
        return batch_records(seg, header, verify_crc=False)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the earliest record with timestamp ``>= timestamp``.

        Kafka's ListOffsets rule: the first batch (in offset order) whose max
        timestamp reaches ``timestamp``, then the first record in it that
        does.  None when no record is that recent.
        """
        self._check_open()
        for seg in self._segments:
            if seg.max_timestamp < timestamp:
                continue
            for peek in seg.batches_reaching(timestamp):
                for record in self._records(seg, seg.read_batch(peek)):
                    if record.timestamp >= timestamp:
                        return record.offset, record.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record with the largest timestamp
        (ListOffsets MAX_TIMESTAMP, -3); None when no record has a timestamp."""
        self._check_open()
        best: LogSegment | None = None
        for seg in self._segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return None
        peek = best.locate(best.offset_of_max_timestamp)
        if peek is None:
            raise CorruptLog(f"{best.path()}: no batch at offset {best.offset_of_max_timestamp}")
        for record in self._records(best, best.read_batch(peek)):
            if record.timestamp == best.max_timestamp:
                return record.offset, record.timestamp
        return peek.base_offset, best.max_timestamp
