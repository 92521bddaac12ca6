"""One log segment: a ``.log`` file of record batches plus its two indexes.

Why it is shaped this way:

* Writes go straight to the OS with ``os.write`` on a descriptor opened with
  ``O_APPEND``; the segment keeps its size itself, so no ``lseek``/``fstat``
  ever sits on the produce path.  A failed or short write is rolled back with
  ``ftruncate`` so that the file never holds bytes the segment does not know.
* Reads use ``os.pread`` (one copy, no shared file offset), which also lets a
  worker thread read or fsync the same descriptor while the event loop
  appends.
* Indexes are in memory (``broker.log.index``) and persisted whole when the
  segment is sealed (roll) or the log closes.  Loading them is only worth it
  when they are consistent with the ``.log`` file; anything doubtful is
  rebuilt by walking the batches, and recovery of a log that did not shut down
  cleanly goes through the same walk (``recover``) with CRC checks switched on
  past the recovery point.
* Walking whole batches uses the record-batch codec
  (``protocol.records.iter_batches`` / ``BatchHeader``) over large chunks.  The
  read path, however, only ever needs a few header fields of batches that may
  be megabytes long, and ``BatchHeader.read`` insists on the whole batch being
  in the buffer.  ``_PEEK`` (a ``header_struct``, cut from the codec's one
  statement of the header layout) therefore decodes just base offset, length,
  magic, last offset delta and max timestamp out of a header-sized window; it
  checks nothing beyond sanity and is never used to accept data into the log.
* A segment never decides *when* to roll or what to delete: that is
  ``PartitionLog``'s job.  That keeps segments replaceable: the cleaner
  (``broker.log.cleaner``) writes a compacted segment under a temporary file
  suffix and swaps it in.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from shoal.broker.log.index import INT32_MAX, IndexCorrupt, OffsetIndex, TimeIndex
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.records import (
    BATCH_HEADER_SIZE,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    BatchHeader,
    Record,
    header_struct,
    iter_batches,
)

__all__ = [
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "BatchPeek",
    "CorruptLog",
    "FileBatchReader",
    "InvalidBatch",
    "LogClosed",
    "LogError",
    "LogFailed",
    "LogSegment",
    "OffsetOutOfRange",
    "RecordBatchTooLarge",
    "RecordTooLarge",
    "SegmentRecovery",
    "parse_segment_name",
    "pread_exact",
    "segment_file_name",
    "write_all",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
_NAME_DIGITS = 20

_MIN_BATCH_SIZE = BATCH_HEADER_SIZE
_PEEK = header_struct("base_offset", "batch_length", "magic", "last_offset_delta", "max_timestamp")
_LENGTH = header_struct("batch_length")
_HEADER_WINDOW = 16 * 1024
DEFAULT_CHUNK_BYTES = 1 << 20


# --------------------------------------------------------------------------
# errors


class LogError(Exception):
    """Base of the log's errors; ``error_code`` is the Kafka code to answer with."""

    error_code: ClassVar[int] = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRange(LogError):
    """A read or scan asked for an offset outside [log start, log end]."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(f"offset {offset} is outside [{log_start_offset}, {log_end_offset}]")


class InvalidBatch(LogError):
    """Bytes handed to ``append`` that are not a run of magic 2 batches."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class RecordTooLarge(LogError):
    """One batch is larger than ``max_message_bytes``."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLarge(LogError):
    """One append is larger than a whole segment."""

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class LogFailed(LogError):
    """A write to the log failed; it takes no more appends until reopened (Kafka: log dir offline)."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class CorruptLog(LogError):
    """The file on disk does not hold what the in-memory state says."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class LogClosed(LogError):
    """The log was closed or deleted."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


# --------------------------------------------------------------------------
# helpers


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:0{_NAME_DIGITS}d}{suffix}"


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """``(base offset, suffix)`` for a segment file name, else None."""
    stem, dot, ext = name.partition(".")
    if not dot or len(stem) != _NAME_DIGITS or not stem.isdigit():
        return None
    return int(stem), "." + ext


def pread_exact(fd: int, length: int, position: int) -> bytes:
    """``os.pread`` until ``length`` bytes or end of file (short only at EOF)."""
    data = os.pread(fd, length, position)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def write_all(fd: int, data: memoryview, start: int) -> None:
    """Append ``data`` to the file (opened O_APPEND) whose size is ``start``.

    All or nothing: on an error the file is cut back to ``start`` and the
    error raised, so the file never holds bytes its segment does not know.
    Safe to call from a worker thread (``os.write`` releases the GIL).
    """
    total = len(data)
    written = 0
    try:
        while written < total:
            written += os.write(fd, data[written:])
    except BaseException:
        if written:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
        raise


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class BatchPeek(NamedTuple):
    """The header fields the read path needs, and where the batch sits."""

    position: int
    base_offset: int
    size: int
    last_offset: int
    max_timestamp: int


class FileBatchReader:
    """Iterates ``(position, BatchHeader)`` over whole batches of a file region.

    Reads ``chunk_bytes`` at a time (more when one batch is bigger) and walks
    each chunk with ``iter_batches``, so a scan costs one syscall per chunk,
    not per batch.  Yielded headers (and their ``data`` views) stay valid
    after the iteration moves on.  The walk stops at the first thing that is
    not a whole batch; then ``error`` says why and ``position`` is where that
    thing starts.  On a clean end ``error`` is None and ``position`` the end.
    """

    __slots__ = ("_chunk", "_end", "_fd", "error", "position")

    def __init__(self, fd: int, start: int, end: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self._fd = fd
        self._end = end
        self._chunk = max(chunk_bytes, _MIN_BATCH_SIZE)
        self.position = start
        self.error: str | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        fd, end = self._fd, self._end
        pos = self.position
        want = self._chunk
        while pos < end:
            buf = pread_exact(fd, min(want, end - pos), pos)
            if len(buf) < min(want, end - pos):
                end = pos + len(buf)  # the file is shorter than expected
            it = iter_batches(buf, allow_partial=True)
            try:
                for header, _ in it:
                    self.position = pos + it.position
                    yield pos + it.position - header.size, header
            except ProtocolError as exc:
                self.position = pos + it.position
                self.error = f"invalid batch: {exc.message}"
                return
            consumed = it.position
            pos += consumed
            self.position = pos
            want = self._chunk
            if not it.truncated or consumed:
                continue
            # A batch at ``pos`` larger than the chunk, or a torn tail.
            left = end - pos
            if len(buf) < LOG_OVERHEAD:
                self.error = f"torn batch: {left} trailing bytes"
                return
            need = LOG_OVERHEAD + _LENGTH.unpack_from(buf)[0]
            if need > left:
                self.error = f"torn batch: {need} bytes declared, {left} left in the file"
                return
            want = need
        if pos < self._end:
            self.error = f"file ends at {pos}, expected {self._end}"


@dataclass(slots=True)
class SegmentRecovery:
    """What ``LogSegment.recover`` found: bytes checked and what it cut off."""

    validated_bytes: int = 0
    truncated_at: int | None = None
    truncated_bytes: int = 0
    reason: str | None = None


# --------------------------------------------------------------------------
# the segment


def batch_records(seg: LogSegment, header: BatchHeader, *, verify_crc: bool) -> list[Record]:
    """Decode a stored batch's records; a bad batch is a corrupt log, not bad input."""
    try:
        return header.records(verify_crc=verify_crc)
    except ProtocolError as exc:
        raise CorruptLog(f"{seg.path()}: batch at offset {header.base_offset}: {exc}") from None


class LogSegment:
    """A ``<base offset>.log`` file and its in-memory offset and time indexes.

    ``size`` is the file length the segment vouches for, ``next_offset`` one
    past the last offset it holds (its base offset while empty).
    """

    __slots__ = (
        "_bytes_since_index",
        "_fd",
        "base_offset",
        "deleted",
        "directory",
        "file_suffix",
        "index_dirty",
        "index_interval",
        "last_modified_ms",
        "max_timestamp",
        "next_offset",
        "offset_index",
        "offset_of_max_timestamp",
        "roll_base_ms",
        "size",
        "time_index",
    )

    def __init__(self, directory: str, base_offset: int, *, index_interval: int, index_max_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval = index_interval
        self.offset_index = OffsetIndex(max(1, index_max_bytes // OffsetIndex.ENTRY_SIZE))
        self.time_index = TimeIndex(max(1, index_max_bytes // TimeIndex.ENTRY_SIZE))
        self._fd = -1
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        self.roll_base_ms: int | None = None
        self.last_modified_ms = 0
        self.index_dirty = False
        self.deleted = False
        # Appended to every file name: the cleaner builds a segment as
        # ``<name>.cleaned`` files and renames them (``broker.log.cleaner``).
        self.file_suffix = ""

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size}, "
            f"max_ts={self.max_timestamp})"
        )

    # -- files ---------------------------------------------------------------

    def path(self, suffix: str = LOG_SUFFIX) -> str:
        return os.path.join(self.directory, segment_file_name(self.base_offset, suffix) + self.file_suffix)

    @property
    def fd(self) -> int:
        """The segment's descriptor (read/write, append mode), opened on demand."""
        if self._fd < 0:
            if self.deleted:
                raise LogClosed(f"segment {self.path()} was deleted")
            self._fd = os.open(self.path(), os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        return self._fd

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    @classmethod
    def create(
        cls,
        directory: str,
        base_offset: int,
        now_ms: int,
        *,
        index_interval: int,
        index_max_bytes: int,
        file_suffix: str = "",
    ) -> LogSegment:
        """A new, empty segment file (stale index files of that name are dropped).

        ``file_suffix`` names the files ``<base>.log<file_suffix>`` etc.: a
        segment that is not part of the log yet (the cleaner's output).
        """
        seg = cls(directory, base_offset, index_interval=index_interval, index_max_bytes=index_max_bytes)
        seg.file_suffix = file_suffix
        fd = seg._fd = os.open(seg.path(), os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        if os.fstat(fd).st_size:
            os.close(fd)
            seg._fd = -1
            raise CorruptLog(f"segment {seg.path()} already exists and is not empty")
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(seg.path(suffix))
        seg.last_modified_ms = now_ms
        seg.index_dirty = True
        return seg

    @classmethod
    def open_existing(
        cls, directory: str, base_offset: int, *, index_interval: int, index_max_bytes: int
    ) -> LogSegment:
        """Open a segment file; call ``load_indexes`` or ``recover`` next."""
        seg = cls(directory, base_offset, index_interval=index_interval, index_max_bytes=index_max_bytes)
        st = os.fstat(seg.fd)
        seg.size = st.st_size
        seg.last_modified_ms = st.st_mtime_ns // 1_000_000
        return seg

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def delete(self) -> None:
        """Close and remove the segment's files (the log file first)."""
        self.close()
        self.deleted = True
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(suffix))

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp, or the file's last write time when it has none."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms

    # -- indexing ------------------------------------------------------------

    def _reset_indexes(self) -> None:
        self.offset_index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        self.index_dirty = True

    def _index_batch(self, position: int, base_offset: int, size: int, max_timestamp: int) -> None:
        """Account for the batch at ``position`` (append and rebuild share this)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if not len(self.offset_index) or self._bytes_since_index >= self.index_interval:
            self.offset_index.append(base_offset - self.base_offset, position)
            if self.max_timestamp >= 0:
                self.time_index.maybe_append(self.max_timestamp, self._rel_of_max)
            self._bytes_since_index = 0
        self._bytes_since_index += size

    @property
    def _rel_of_max(self) -> int:
        return self.offset_of_max_timestamp - self.base_offset

    @property
    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def seal(self) -> None:
        """Record the final max timestamp in the time index (on roll and close)."""
        if self.max_timestamp >= 0 and self.time_index.maybe_append(self.max_timestamp, self._rel_of_max):
            self.index_dirty = True

    def write_index_files(self, write: Callable[[int, memoryview], int] = os.write) -> list[int]:
        """Write both index files whole; return their open descriptors (caller fsyncs and closes).

        ``write`` is ``os.write`` or the log's ``FileOps.write`` (``broker.log.fileops``).
        """
        fds: list[int] = []
        try:
            for suffix, data in (
                (INDEX_SUFFIX, self.offset_index.to_bytes()),
                (TIME_INDEX_SUFFIX, self.time_index.to_bytes()),
            ):
                fd = os.open(self.path(suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                fds.append(fd)
                view = memoryview(data)
                while view:
                    view = view[write(fd, view) :]
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        self.index_dirty = False
        return fds

    def load_indexes(self, expected_first: int, now_ms: int) -> str | None:
        """Adopt the index files if they match the log; return why not otherwise.

        Checks: both files decode and increase, the first entry is the batch
        at position 0, the last entry points inside the file at a batch with
        the offset it claims, the batches after it walk cleanly to the end of
        the file, and the time index names no offset past the end.
        """
        try:
            raw_offsets = _read_file(self.path(INDEX_SUFFIX))
            raw_times = _read_file(self.path(TIME_INDEX_SUFFIX))
            offsets = OffsetIndex.from_bytes(raw_offsets, self.offset_index.max_entries)
            times = TimeIndex.from_bytes(raw_times, self.time_index.max_entries)
        except FileNotFoundError:
            return "index file missing"
        except IndexCorrupt as exc:
            return str(exc)
        self._reset_indexes()
        if self.size == 0:
            if len(offsets) or len(times):
                return "index entries for an empty segment"
            self.index_dirty = False
            return None
        first_rel, first_pos = offsets.first or (0, -1)
        last_rel, last_pos = offsets.last or (0, -1)
        if first_pos != 0:
            return "offset index does not start at position 0"
        if last_pos >= self.size:
            return f"offset index points at {last_pos}, past the log size {self.size}"
        try:
            first = self._peek(0)
            if first.base_offset != self.base_offset + first_rel:
                return f"first batch has offset {first.base_offset}, not {self.base_offset + first_rel}"
            if first.base_offset < expected_first:
                return f"first batch has offset {first.base_offset}, below the previous segment's end"
            self.offset_index, self.time_index = offsets, times
            if times.last is not None:
                self.max_timestamp = times.last[0]
                self.offset_of_max_timestamp = self.base_offset + times.last[1]
            headers = self._headers(last_pos)
            peek = next(headers)
            if peek.base_offset != self.base_offset + last_rel:
                raise CorruptLog(f"batch at {last_pos} has offset {peek.base_offset}, index says {last_rel}")
            if peek.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = peek.max_timestamp, peek.base_offset
            self._bytes_since_index = peek.size
            last = peek
            entries = len(offsets) + len(times)
            for last in headers:
                self._index_batch(last.position, last.base_offset, last.size, last.max_timestamp)
        except CorruptLog as exc:
            self._reset_indexes()
            return str(exc)
        self.next_offset = last.last_offset + 1
        if times.last is not None and self.base_offset + times.last[1] >= self.next_offset:
            self._reset_indexes()
            return "time index points past the last batch"
        self.index_dirty = len(self.offset_index) + len(self.time_index) != entries
        self._set_roll_base(first.max_timestamp, now_ms)
        return None

    def _set_roll_base(self, first_max_timestamp: int, now_ms: int) -> None:
        # Unknown after a restart: like Kafka, age the segment by its first
        # batch's timestamp (never from the future).
        self.roll_base_ms = first_max_timestamp if 0 <= first_max_timestamp <= now_ms else now_ms

    def recover(
        self,
        expected_first: int,
        now_ms: int,
        *,
        validate_from: int | None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> SegmentRecovery:
        """Rebuild the indexes by walking every batch; cut the file at the first bad one.

        Every batch must be a whole magic 2 batch with a sane length, with
        offsets increasing from ``expected_first`` and fitting the segment.
        Batches whose last offset is ``>= validate_from`` must also pass
        their CRC (None: no CRC checks, a plain index rebuild).
        """
        self._reset_indexes()
        result = SegmentRecovery()
        expected = max(expected_first, self.base_offset)
        reader = FileBatchReader(self.fd, 0, self.size, chunk_bytes)
        first_max_ts = -1
        end = 0
        reason: str | None = None
        for position, header in reader:
            if header.base_offset < expected:
                reason = f"offset {header.base_offset} below the expected {expected}"
            elif header.last_offset_delta < 0 or header.last_offset - self.base_offset > INT32_MAX:
                reason = f"offset delta {header.last_offset_delta} does not fit the segment"
            elif validate_from is not None and header.last_offset >= validate_from:
                if not header.verify_crc():
                    reason = f"CRC mismatch in the batch at offset {header.base_offset}"
                else:
                    result.validated_bytes += header.size
            if reason is not None:
                break
            if position == 0:
                first_max_ts = header.max_timestamp
            self._index_batch(position, header.base_offset, header.size, header.max_timestamp)
            expected = header.last_offset + 1
            self.next_offset = expected
            end = position + header.size
        else:
            reason = reader.error
        if end:
            self._set_roll_base(first_max_ts, now_ms)
        if reason is None:
            return result
        result.truncated_at = end
        result.truncated_bytes = self.size - end
        result.reason = reason
        os.ftruncate(self.fd, end)
        self.size = end
        return result

    # -- writing -------------------------------------------------------------

    def append(self, data: memoryview, batches: list[tuple[int, int, int, int]], last_offset: int, now_ms: int) -> None:
        """Write ``data`` and index its batches: ``(offset in data, base offset, size, max ts)``."""
        write_all(self.fd, data, self.size)
        self.commit(batches, len(data), last_offset, now_ms)

    def commit(self, batches: list[tuple[int, int, int, int]], total: int, last_offset: int, now_ms: int) -> None:
        """Take in ``total`` bytes now at the end of the file: index their batches, grow.

        The second half of ``append``, for bytes written elsewhere (a writer
        thread, ``broker.log.writer``): until this runs, reads do not see them.
        """
        start = self.size
        for rel_pos, base, size, max_ts in batches:
            self._index_batch(start + rel_pos, base, size, max_ts)
        self.size = start + total
        self.next_offset = last_offset + 1
        if self.roll_base_ms is None:
            self.roll_base_ms = now_ms
        self.last_modified_ms = now_ms
        self.index_dirty = True

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Drop the batch holding ``offset`` and everything after; return bytes removed."""
        peek = self.locate(offset)
        if peek is None:
            return 0
        removed = self.size - peek.position
        os.ftruncate(self.fd, peek.position)
        self.size = peek.position
        self.recover(self.base_offset, now_ms, validate_from=None)
        if self.size == 0:
            self.roll_base_ms = None
        return removed

    # -- reading -------------------------------------------------------------

    def _headers(self, start: int) -> Iterator[BatchPeek]:
        """Peek at every batch from ``start`` to the end, reading header windows.

        The first window spans one index interval plus a header: a walk that
        starts at an index entry rarely needs more.  Later windows are larger.
        """
        fd, end = self.fd, self.size
        pos = start
        window = b""
        window_start = 0
        want = self.index_interval + BATCH_HEADER_SIZE
        while pos < end:
            off = pos - window_start
            if off + BATCH_HEADER_SIZE > len(window):
                window = pread_exact(fd, min(want, end - pos), pos)
                window_start, off = pos, 0
                want = max(want, _HEADER_WINDOW)
                if len(window) < BATCH_HEADER_SIZE:
                    raise CorruptLog(f"{self.path()}: torn batch header at {pos}")
            base, length, magic, delta, max_ts = _PEEK.unpack_from(window, off)
            size = length + LOG_OVERHEAD
            if magic != CURRENT_MAGIC or size < _MIN_BATCH_SIZE or pos + size > end or delta < 0:
                raise CorruptLog(f"{self.path()}: bad batch header at {pos} (magic {magic}, size {size})")
            yield BatchPeek(pos, base, size, base + delta, max_ts)
            pos += size

    def _peek(self, position: int) -> BatchPeek:
        return next(self._headers(position))

    def index_lookup(self, offset: int) -> int:
        """Position the offset index gives for ``offset``: a batch at or before it."""
        entry = self.offset_index.lookup(offset - self.base_offset)
        return 0 if entry is None else entry[1]

    def locate(self, offset: int) -> BatchPeek | None:
        """The first batch whose last offset is ``>= offset`` (None: past the end)."""
        if offset >= self.next_offset:
            return None
        for peek in self._headers(self.index_lookup(offset)):
            if peek.last_offset >= offset:
                return peek
        return None

    def boundary(self, start: int, start_offset: int, limit: int) -> tuple[int, int]:
        """The last batch boundary in ``[start, limit]``, and the offset to read
        next from there.  ``start`` must be a batch boundary and ``start_offset``
        an offset that reads the batch at ``start``.

        The offset index gives a boundary at most one index interval before
        ``limit``, so only the headers in between are read.
        """
        limit = min(limit, self.size)
        pos, nxt = start, start_offset
        entry = self.offset_index.floor_position(limit)
        if entry is not None and entry[1] > start:
            pos, nxt = entry[1], self.base_offset + entry[0]
        if pos == self.size:
            return pos, self.next_offset
        if limit - pos < _MIN_BATCH_SIZE:
            return pos, nxt
        for peek in self._headers(pos):
            if peek.position + peek.size > limit:
                return peek.position, peek.base_offset
        return self.size, self.next_offset

    def read_batch(self, peek: BatchPeek) -> BatchHeader:
        """Read and parse the whole batch ``peek`` describes."""
        data = pread_exact(self.fd, peek.size, peek.position)
        try:
            return BatchHeader.read(data)
        except ProtocolError as exc:
            raise CorruptLog(f"{self.path()}: batch at {peek.position}: {exc}") from None

    def batches_reaching(self, timestamp: int) -> Iterator[BatchPeek]:
        """Batches whose max timestamp is ``>= timestamp``, in log order.

        Starts from the time index: every batch before the entry's offset
        has a smaller max timestamp than the entry, hence than ``timestamp``.
        """
        entry = self.time_index.lookup(timestamp)
        start = 0 if entry is None else self.index_lookup(self.base_offset + entry[1])
        for peek in self._headers(start):
            if peek.max_timestamp >= timestamp:
                yield peek
