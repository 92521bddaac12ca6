"""The log of one partition: ordered segments, offsets, recovery and flushing.

Why it is shaped this way:

* The bookkeeping is synchronous, on the event loop.  Reads are a handful
  of syscalls on the page cache; the broker hands appends to a writer
  thread (below), as a write into a throttled page cache can block.  The
  slowest operation, fsync, is split out: ``flush_target``
  names the descriptors to sync and the offset that will then be durable,
  a worker thread fsyncs them, and ``mark_flushed`` records the result.  That
  lets the broker fsync outside the loop and let one fsync serve every
  producer waiting on it (``broker.log.flusher``).
* Appends may hand the copy into the page cache to a writer thread
  (``append_async``, ``broker.log.writer``): offsets are assigned at once,
  but the bytes join the segments — and with them the log end, reads and
  flush targets — only when written, in order, back on the log's thread.
  Anything that needs file and bookkeeping to agree (roll, truncate, close,
  delete, a synchronous append) first waits for the writes in flight.
* Durability is tracked as a single number, the recovery point: every offset
  below it is known to be on disk.  It is kept in a small ``recovery-point``
  file (written after each flush, synced on close) so that a restart after a
  crash only validates batches past it.  The file may lag behind the truth,
  never run ahead of it, so it is never fsynced on the hot path.
* Recovery is Kafka's: segments from the one holding the recovery point on
  are walked batch by batch, CRC-checked past the recovery point, and the log
  is cut just before the first torn or corrupt batch.  Segments before that
  trust their index files when those are consistent with the data.
* Offsets are contiguous per append; the log assigns them in place in the
  caller's buffer (the base offset sits outside the CRC'd part of a batch).
* The read path (``read``, ``read_region``, ``scan``, timestamp lookups)
  lives in ``broker.log.reads`` as a mixin of this class.
* Storage errors take the log offline, with its directory (Kafka's log dir
  failure): every write, fsync and checkpoint goes through ``self.files``
  (``broker.log.fileops``), and an ``OSError`` from any of them — ENOSPC,
  EIO, EROFS — is recorded (``failed``), reported to ``self.log_dir``
  (``broker.log.log_dir``) and raised as ``LogFailed``.  An offline log takes
  no appends; whatever it held past its last flush is recovered at the next
  open as after a crash.
* The file descriptors handed out by ``flush_target`` and ``read_region``
  belong to the log.  They stay valid until the log deletes the segment
  (retention, truncation), closes, or is deleted; a racing fsync may then see
  EBADF, which only means the file is gone or was synced by ``close``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from shoal.broker.log.cleaner_files import finish_interrupted_cleaning
from shoal.broker.log.config import LogConfig
from shoal.broker.log.fileops import FileOps
from shoal.broker.log.index import INT32_MAX
from shoal.broker.log.log_dir import LogDir
from shoal.broker.log.reads import FileRegion, LogReads, ReadResult
from shoal.broker.log.recovery import (
    RECOVERY_POINT_FILE,
    RecoveryReport,
    encode_recovery_point,
    load_segments,
    read_log_start,
    read_recovery_point,
)
from shoal.broker.log.segment import (
    InvalidBatch,
    LogClosed,
    LogError,
    LogFailed,
    LogSegment,
    RecordBatchTooLarge,
    RecordTooLarge,
)
from shoal.broker.log.trimming import LogTrimming
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.records import BatchHeader, set_base_offset, set_log_append_time

__all__ = ["AppendInfo", "FileRegion", "LogConfig", "LogWriter", "PartitionLog", "ReadResult"]

Clock = Callable[[], int]

logger = logging.getLogger("shoal.log")


@dataclass(slots=True)
class AppendInfo:
    """What one ``append`` wrote.  ``offset_of_max_timestamp`` is the base offset of
    the batch holding ``max_timestamp`` (batches are not decoded on append)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    num_records: int
    bytes: int
    log_start_offset: int


class LogWriter(Protocol):
    """Writes log bytes elsewhere, in order (``broker.log.writer.ThreadedWriter``)."""

    def channel(self) -> object: ...

    def submit(
        self, channel: object, fd: int, data: memoryview, start: int, done: Callable[[BaseException | None], None]
    ) -> None: ...

    def wait(self, channel: object) -> None: ...


@dataclass(slots=True)
class _Append:
    """An append between ``_prepare`` and its bytes being in the segment."""

    segment: LogSegment
    data: memoryview
    batches: list[tuple[int, int, int, int]]  # (position in data, base offset, size, max timestamp)
    now: int
    info: AppendInfo
    callbacks: list[Callable[[BaseException | None], None]]


class PartitionLog(LogReads, LogTrimming):
    """Segments of one partition, oldest first; the last one takes appends.

    Not thread-safe: call everything from one thread (the event loop).  The
    only work meant for another thread is fsyncing what ``flush_target``
    returns.
    """

    __slots__ = (
        "_bases",
        "_channel",
        "_closed",
        "_dir_dirty",
        "_failed",
        "_inflight",
        "_inflight_batches",
        "_inflight_bytes",
        "_last_flush_ms",
        "_opened_end",
        "_pending",
        "_pending_refs",
        "_recovery_point",
        "_rp_cap",
        "_rp_fd",
        "_segments",
        "_size",
        "_start",
        "_targets_out",
        "checkpoint_on_flush",
        "clock",
        "config",
        "files",
        "log_dir",
        "path",
        "recovery",
        "writer",
    )

    def __init__(self, path: str, config: LogConfig, clock: Clock) -> None:
        self.path = path
        self.config = config
        self.clock = clock
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._size = 0
        self._recovery_point = 0
        self._opened_end = 0  # log end at open: what ``abandon`` takes as already on disk
        # Log start inside the first segment (advance_log_start); the first
        # segment's base rules when it is higher.
        self._start = 0
        # Kafka persists the recovery point on every flush, so an unclean
        # restart re-checks only unflushed data. The broker turns this off to
        # re-validate everything written since the last clean shutdown.
        self.checkpoint_on_flush = True
        self._rp_fd = -1
        self._rp_cap: int | None = None
        self._targets_out = 0  # flush targets handed out and not yet marked flushed
        self._pending: list[tuple[int, int]] = []  # (fd to fsync once, offset that covers it)
        # fd of _pending -> flush targets handed out holding it and not yet marked: with two rounds
        # in flight, the first to end must not close a descriptor the other has yet to fsync.
        self._pending_refs: dict[int, int] = {}
        self._dir_dirty = False
        self._last_flush_ms = 0
        self._closed = False
        self.recovery = RecoveryReport(clean_shutdown=True)
        # Writes in flight on a writer thread (append_async), oldest first.
        self.writer: LogWriter | None = None
        self._channel: object = None
        self._inflight: deque[_Append] = deque()
        self._inflight_bytes = 0
        self._inflight_batches = 0
        self._failed: BaseException | None = None  # a write failed: the log takes no more appends
        self.files = FileOps()  # the broker hands every log its own (one per broker)
        self.log_dir: LogDir | None = None  # told of storage errors; offline with it

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.path!r}, offsets=[{self.log_start_offset}, {self.log_end_offset}), "
            f"segments={len(self._segments)}, size={self._size})"
        )

    # -- opening -------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], config: LogConfig, clock: Clock, clean_shutdown: bool) -> PartitionLog:
        """Open (or create) the partition directory ``path``.

        With ``clean_shutdown`` False, batches past the recovery point are
        validated and the log is cut before the first bad one; see
        ``recovery`` (a ``RecoveryReport``) for what happened.
        """
        directory = os.path.abspath(os.fspath(path))
        os.makedirs(directory, exist_ok=True)
        log = cls(directory, config, clock)
        now = clock()
        report = RecoveryReport(clean_shutdown=clean_shutdown)
        rp, problem = read_recovery_point(directory)
        report.recovery_point = rp
        if problem and not clean_shutdown:
            report.notes.append(problem)
        report.notes.extend(finish_interrupted_cleaning(directory))
        log._segments = segments = load_segments(directory, rp, clean_shutdown, now, report, **log._segment_args())
        try:
            log._finish_open(segments, rp, clean_shutdown, report, now)
        except BaseException:  # e.g. EMFILE writing the log start: the segments' files go too
            log._close_files()
            raise
        return log

    def _finish_open(
        self, segments: list[LogSegment], rp: int, clean_shutdown: bool, report: RecoveryReport, now: int
    ) -> None:
        log, directory = self, self.path
        log._bases = [s.base_offset for s in segments]
        log._size = sum(s.size for s in segments)
        log._dir_dirty = True  # the first flush also syncs the directory entries
        leo = segments[-1].next_offset
        rp = leo if clean_shutdown and not report.truncated else min(rp, leo)
        log._recovery_point = max(rp, segments[0].base_offset)
        # A start stored above what recovery kept means the tail it covered
        # was lost: the log then starts (empty) at its end.
        log._start = min(read_log_start(directory), leo)
        log._drop_segments_below_start()  # a crash may have come between the two steps
        report.log_start_offset = log.log_start_offset
        report.log_end_offset = log.log_end_offset
        log.recovery = report
        log._last_flush_ms = now
        log._opened_end = log.log_end_offset

    def _segment_args(self) -> dict[str, int]:
        return {
            "index_interval": self.config.index_interval_bytes,
            "index_max_bytes": self.config.segment_index_bytes,
        }

    # -- properties ----------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return max(self._segments[0].base_offset, self._start)

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """Single replica: everything appended is committed."""
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def recovery_point(self) -> int:
        """Every offset below this is on disk (fsynced)."""
        return self._recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._recovery_point

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"log {self.path} is closed")

    # -- appending -----------------------------------------------------------

    def append(
        self,
        batches: bytes | bytearray | memoryview,
        *,
        assign_offsets: bool = True,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Append one or more whole batches (already validated by the broker).

        With ``assign_offsets`` the batches get consecutive offsets from the
        log end, written into the buffer in place (a read-only buffer is
        copied once).  Without, their offsets must not go below the log end.
        LogAppendTime topics get ``now_ms`` stamped into every batch.
        Raises InvalidBatch, RecordTooLarge or RecordBatchTooLarge, leaving
        the log unchanged.  Waits for writes in flight first (append_async).
        """
        self._check_writable()
        self.drain()
        self._check_writable()
        try:
            job = self._prepare(batches, assign_offsets, self.clock() if now_ms is None else now_ms)
            seg = job.segment
            self.files.write_all(seg.fd, job.data, seg.size)
        except OSError as e:
            raise self.io_failed(e) from e
        seg.commit(job.batches, job.info.bytes, job.info.last_offset, job.now)
        self._size += job.info.bytes
        return job.info

    def append_async(
        self,
        batches: bytes | bytearray | memoryview,
        on_written: Callable[[BaseException | None], None],
        *,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """``append`` with the write handed to ``self.writer`` (a thread).

        Offsets are assigned (in the buffer, which must then stay untouched)
        and returned at once; the bytes become part of the log — readable,
        counted in ``log_end_offset``, covered by ``flush_target`` — only
        once written, in order, when ``on_written(None)`` is called on this
        log's thread.  If a write fails the log goes offline: that append
        and every later one in flight get ``on_written(error)``, the file is
        cut back to its last good batch, and further appends raise LogFailed
        until the log is reopened (recovery then starts from what is on disk).
        """
        self._check_writable()
        writer = self.writer
        if writer is None:
            raise RuntimeError("append_async needs a writer")
        if self._channel is None:
            self._channel = writer.channel()
        try:
            job = self._prepare(batches, True, self.clock() if now_ms is None else now_ms)
            fd = job.segment.fd
        except OSError as e:
            raise self.io_failed(e) from e
        job.callbacks.append(on_written)
        start = job.segment.size + self._inflight_bytes
        # Completions are delivered on this thread, never inside submit: registering after it is safe.
        writer.submit(self._channel, fd, job.data, start, lambda error: self._written(job, error))
        self._inflight.append(job)
        self._inflight_bytes += job.info.bytes
        self._inflight_batches += len(job.batches)
        return job.info

    def when_written(self, end_offset: int, callback: Callable[[BaseException | None], None]) -> None:
        """Call ``callback`` once every offset below ``end_offset`` is written (now, if it is)."""
        for job in self._inflight:
            if job.info.last_offset + 1 >= end_offset:
                job.callbacks.append(callback)
                return
        callback(self._failed if end_offset > self.log_end_offset else None)

    @property
    def writes_in_flight(self) -> int:
        return len(self._inflight)

    @property
    def pending_end_offset(self) -> int:
        """The offset the next append gets: ``log_end_offset`` plus the writes in flight."""
        return self._next_offset

    @property
    def failed(self) -> BaseException | None:
        """The storage error that took the log (or its directory) offline, if any."""
        if self._failed is not None:
            return self._failed
        log_dir = self.log_dir
        return log_dir.error if log_dir is not None else None

    def io_failed(self, error: BaseException) -> LogFailed:
        """Take the log and its directory offline after a storage error; return the LogFailed to raise.

        For the log's own I/O, and for callers that did I/O on its behalf
        (the flusher's fsyncs, reads).  Idempotent: the first error is kept.
        """
        if self._failed is None:
            self._failed = error
        if self.log_dir is not None:
            self.log_dir.fail(error, self.path)
        return LogFailed(f"log {self.path} is offline: {error}")

    def drain(self) -> None:
        """Block until every write in flight is done and taken into the log."""
        if self._inflight:
            assert self.writer is not None
            self.writer.wait(self._channel)
            assert not self._inflight, "a writer's wait returned with writes of this log in flight"

    def _written(self, job: _Append, error: BaseException | None) -> None:
        # The writer delivers completions in submission order, on this log's thread.
        assert self._inflight and self._inflight[0] is job, "log writes completed out of order"
        self._inflight.popleft()
        self._inflight_bytes -= job.info.bytes
        self._inflight_batches -= len(job.batches)
        if error is None and self._failed is None and not self._closed:
            job.segment.commit(job.batches, job.info.bytes, job.info.last_offset, job.now)
            self._size += job.info.bytes
            writer = self.writer
            if writer is not None and writer.syncs:
                self._mark_synced(job.info.last_offset + 1)
        else:
            if self._failed is None:
                if error is not None:
                    self.io_failed(error)
                else:
                    self._failed = LogFailed(f"log {self.path} is closed")
            error = self._failed
        for callback in job.callbacks:
            callback(error)

    def _mark_synced(self, offset: int) -> None:
        """The writer fsynced the file before reporting this write (a syncing writer, which the
        coordinators' logs use): with nothing else to sync -- no directory entry, no rolled
        segment or index file, no older segment past the recovery point -- everything up to
        ``offset`` is durable. Marked here, a flush of it is answered at once, with no round of
        the flusher (whose trip through another thread each coordinator write used to wait for).
        Otherwise the flusher's next round syncs the rest, as for any log."""
        if self._dir_dirty or self._pending or offset <= self._recovery_point:
            return
        segments = self._segments
        if len(segments) > 1 and segments[-2].next_offset > self._recovery_point:
            return
        if self._targets_out == 0:  # as flush_target: no target from before a truncation is out
            self._rp_cap = None
        self._advance_recovery_point(offset, checkpoint=False)

    def _check_writable(self) -> None:
        self._check_open()
        failed = self.failed
        if failed is not None:
            raise LogFailed(f"log {self.path} is offline after a storage error: {failed}")

    @property
    def _next_offset(self) -> int:
        """The offset the next append gets (past the writes in flight)."""
        return self._inflight[-1].info.last_offset + 1 if self._inflight else self._segments[-1].next_offset

    def _prepare(self, batches: bytes | bytearray | memoryview, assign_offsets: bool, now: int) -> _Append:
        """Check the batches, assign their offsets, roll if due: everything but the write."""
        cfg = self.config
        view = memoryview(batches)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        total = len(view)
        if total == 0:
            raise InvalidBatch("nothing to append")
        if total > cfg.segment_bytes:
            raise RecordBatchTooLarge(f"append of {total} bytes exceeds segment_bytes {cfg.segment_bytes}")
        log_append = cfg.log_append_time
        if view.readonly and (assign_offsets or log_append):
            view = memoryview(bytearray(view))
        next_offset = self._next_offset
        infos: list[tuple[int, int, int, int]] = []
        max_ts, offset_of_max, records = -1, -1, 0
        pos = 0
        try:
            while pos < total:
                header = BatchHeader.read(view, pos)
                size = header.size
                if size > cfg.max_message_bytes:
                    raise RecordTooLarge(f"batch of {size} bytes exceeds max_message_bytes {cfg.max_message_bytes}")
                if header.last_offset_delta < 0:
                    raise InvalidBatch(f"negative last offset delta {header.last_offset_delta}")
                if assign_offsets:
                    base = next_offset
                    set_base_offset(view, base, pos)
                else:
                    base = header.base_offset
                    if base < next_offset:
                        raise InvalidBatch(f"batch offset {base} is below the log end {next_offset}")
                batch_ts = now if log_append else header.max_timestamp
                if log_append:
                    set_log_append_time(view, now, pos)
                if batch_ts > max_ts:
                    max_ts, offset_of_max = batch_ts, base
                records += header.records_count
                infos.append((pos, base, size, batch_ts))
                next_offset = base + header.last_offset_delta + 1
                pos += size
        except ProtocolError as exc:
            raise InvalidBatch(f"not a run of record batches: {exc}") from None
        first_offset, last_offset = infos[0][1], next_offset - 1
        seg = self._segments[-1]
        if self._inflight and self._may_roll(seg, total, len(infos), last_offset, now):
            self.drain()  # a roll seals the segment: its writes must be in first
            self._check_writable()
        if self._roll_reason(seg, total, last_offset, now) is not None:
            seg = self._roll(first_offset, now)
        if last_offset - seg.base_offset > INT32_MAX:
            raise InvalidBatch(f"offsets {first_offset}..{last_offset} span more than one segment can index")
        info = AppendInfo(
            first_offset=first_offset,
            last_offset=last_offset,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max if not log_append else first_offset,
            log_append_time=now if log_append else -1,
            num_records=records,
            bytes=total,
            log_start_offset=self.log_start_offset,
        )
        return _Append(seg, view, infos, now, info, [])

    def _may_roll(self, seg: LogSegment, size: int, batches: int, last_offset: int, now: int) -> bool:
        """Whether ``_roll_reason`` could say roll once the writes in flight are in (errs towards yes)."""
        roll_base = seg.roll_base_ms if seg.roll_base_ms is not None else self._inflight[0].now
        grows = self._inflight_batches + batches
        return (
            seg.size + self._inflight_bytes + size > self.config.segment_bytes
            or now - roll_base > self.config.segment_ms
            or last_offset - seg.base_offset > INT32_MAX
            or len(seg.offset_index) + grows >= seg.offset_index.max_entries
            or len(seg.time_index) + grows >= seg.time_index.max_entries
        )

    def _roll_reason(self, seg: LogSegment, size: int, last_offset: int, now: int) -> str | None:
        if seg.size == 0:
            return "offsets overflow the segment" if last_offset - seg.base_offset > INT32_MAX else None
        if seg.size + size > self.config.segment_bytes:
            return "size"
        if seg.roll_base_ms is not None and now - seg.roll_base_ms > self.config.segment_ms:
            return "age"
        if last_offset - seg.base_offset > INT32_MAX:
            return "offsets overflow the segment"
        if seg.indexes_full:
            return "index full"
        return None

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (no-op when the active one is empty)."""
        self._check_writable()
        self.drain()
        try:
            return self._roll(self.log_end_offset, self.clock() if now_ms is None else now_ms)
        except OSError as e:
            raise self.io_failed(e) from e

    def _roll(self, base_offset: int, now: int) -> LogSegment:
        assert not self._inflight, "rolling with writes in flight"
        old = self._segments[-1]
        if old.size == 0:
            if old.base_offset == base_offset:
                return old
            old.delete()
            self._segments.pop()
            self._bases.pop()
        else:
            old.seal()
            # The index files become durable with the first flush issued after
            # this roll; only a recovery point strictly past the old segment's
            # end proves such a flush happened.
            self._pending.extend((fd, old.next_offset + 1) for fd in old.write_index_files(self.files.write))
        seg = LogSegment.create(self.path, base_offset, now, **self._segment_args())
        self._segments.append(seg)
        self._bases.append(base_offset)
        self._dir_dirty = True
        return seg

    def replace_segments(self, old: Sequence[LogSegment], new: LogSegment) -> None:
        """Put ``new`` in place of ``old``, a run of consecutive closed segments.

        For log compaction, and in memory only: the caller owns the files
        (``broker.log.cleaner`` commits ``new`` to disk first and deletes the
        old segments right after).  ``new`` must start at the first old
        segment's base offset and end no later than the segment after the
        run.  Raises ValueError, changing nothing, when that does not hold.
        """
        self._check_open()
        first = next((i for i, seg in enumerate(self._segments) if seg is old[0]), -1) if old else -1
        end = first + len(old)
        if first < 0 or end >= len(self._segments) or any(a is not b for a, b in zip(self._segments[first:end], old)):
            raise ValueError("not a run of consecutive closed segments of this log")
        if new.base_offset != old[0].base_offset or new.next_offset > self._segments[end].base_offset:
            raise ValueError(f"{new} does not fit in place of segments {old[0].base_offset}..{old[-1].next_offset}")
        self._size += new.size - sum(seg.size for seg in old)
        self._segments[first:end] = [new]
        self._bases[first:end] = [new.base_offset]
        self._dir_dirty = True

    # -- flushing ------------------------------------------------------------

    def needs_flush(self, now_ms: int | None = None) -> bool:
        """True when flush_interval_messages or flush_interval_ms is reached.

        ``now_ms`` must come from the same clock the log was opened with.
        """
        unflushed = self.unflushed_messages
        if unflushed <= 0:
            return False
        if unflushed >= self.config.flush_interval_messages:
            return True
        now = self.clock() if now_ms is None else now_ms
        return now - self._last_flush_ms >= self.config.flush_interval_ms

    def flush_target(self) -> tuple[list[int], int]:
        """Descriptors to fsync, and the offset that is durable once they are.

        Contract: fsync every descriptor (in any thread), then call
        ``mark_flushed(offset, fds=fds)`` from the log's thread.  Do not close them.
        Several targets may be in flight (the flusher overlaps two rounds),
        and they may be marked in any order; on an fsync error, call
        ``io_failed`` instead of ``mark_flushed``.
        Raises LogFailed for an offline log: nothing more of it becomes durable.
        """
        self._check_writable()
        leo = self.log_end_offset
        if self._dir_dirty:  # new or removed segment files: sync the directory entry
            try:
                dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as e:
                raise self.io_failed(e) from e
            self._pending.append((dir_fd, leo))
            self._dir_dirty = False
        fds = [fd for fd, _ in self._pending]
        for fd in fds:
            self._pending_refs[fd] = self._pending_refs.get(fd, 0) + 1
        rp = self._recovery_point
        for seg in reversed(self._segments):
            if seg.next_offset <= rp:
                break
            fds.append(seg.fd)
        if self._targets_out == 0:  # no target from before a truncation is left to cap
            self._rp_cap = None
        self._targets_out += 1
        return fds, leo

    def mark_flushed(self, offset: int, *, checkpoint: bool = True, fds: list[int] | None = None) -> None:
        """Record that the descriptors of a ``flush_target`` were fsynced.

        With ``checkpoint`` (and ``checkpoint_on_flush``) the recovery-point
        file is rewritten too; failing that takes the log offline.
        """
        if self._closed:
            return
        refs = self._pending_refs
        for fd in fds or ():  # the target's descriptors: this target is done with them
            n = refs.get(fd)
            if n is not None:
                if n <= 1:
                    del refs[fd]
                else:
                    refs[fd] = n - 1
        self._targets_out = max(0, self._targets_out - 1)
        self._advance_recovery_point(offset, checkpoint)

    def _advance_recovery_point(self, offset: int, checkpoint: bool) -> None:
        """Everything below ``offset`` is durable: move the recovery point, close the pending
        descriptors it covers (and no round still holds), rewrite the checkpoint if asked."""
        refs = self._pending_refs
        # Truncated after a target still in flight was taken: cap (errs low, when
        # this target came after the truncation, until no older one is out).
        if self._rp_cap is not None:
            offset = min(offset, self._rp_cap)
        offset = min(offset, self.log_end_offset)
        still: list[tuple[int, int]] = []
        for fd, cover in self._pending:
            if cover <= offset and fd not in refs:  # durable, and no other round still to fsync it
                os.close(fd)
            else:
                still.append((fd, cover))
        self._pending = still
        if offset > self._recovery_point:
            self._recovery_point = offset
            if checkpoint and self.checkpoint_on_flush:
                try:
                    self._write_recovery_point()
                except OSError as e:
                    raise self.io_failed(e) from e
        self._last_flush_ms = self.clock()

    def flush(self, *, checkpoint: bool = True) -> None:
        """fsync everything appended, here and now (blocks; waits for writes in flight).

        Raises LogFailed if the log is offline or an fsync fails (which takes it offline).
        """
        self.drain()
        fds, offset = self.flush_target()
        try:
            for fd in fds:
                self.files.fsync(fd)
        except OSError as e:
            raise self.io_failed(e) from e
        self.mark_flushed(offset, checkpoint=checkpoint, fds=fds)

    def _write_recovery_point(self) -> None:
        """Rewrite the 16-byte checkpoint in place (no new blocks once the file exists)."""
        data = encode_recovery_point(self._recovery_point)
        if self._rp_fd < 0:
            path = os.path.join(self.path, RECOVERY_POINT_FILE)
            self._rp_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._dir_dirty = True
        self.files.pwrite(self._rp_fd, data, 0)

    # -- deletion ------------------------------------------------------------

    @contextlib.contextmanager
    def _storage_io(self) -> Iterator[None]:
        """Turn an OSError from the block into LogFailed, taking the log offline (rare paths)."""
        try:
            yield
        except OSError as e:
            raise self.io_failed(e) from e

    def _fsync_dir(self) -> None:
        self.files.fsync_dir(self.path)
        self._dir_dirty = False

    def close(self) -> None:
        """Write the indexes, fsync everything, record the recovery point, close files.

        Every file is closed whatever happens.  Raises LogFailed when the log
        is offline or its last flush fails: what it holds past its last flush
        is then not known to be on disk, the broker must not write its
        clean-shutdown marker, and the next open recovers the log as after a
        crash.  Index files and the recovery-point checkpoint that cannot be
        written (a full disk) are only logged: the next open checks index
        files against the log and rebuilds doubtful ones, and a checkpoint
        that lags only makes a later crash recovery check more.
        """
        if self._closed:
            return
        try:
            self.drain()
            failed = self.failed
            if failed is not None:
                raise LogFailed(f"log {self.path} is offline, not flushed at close: {failed}")
            self._segments[-1].seal()
            for seg in self._segments:
                if seg.index_dirty:
                    try:
                        self._pending.extend((fd, 0) for fd in seg.write_index_files(self.files.write))
                    except OSError as e:
                        logger.warning(
                            "%s: index files of segment %d not written at close (%s); the next start rebuilds them",
                            self.path,
                            seg.base_offset,
                            e,
                        )
            self.flush(checkpoint=False)  # the checkpoint is written next, where failing it is no harm
            try:
                self._write_recovery_point()
                self.files.fsync(self._rp_fd)
                if self._dir_dirty:
                    self._fsync_dir()
            except OSError as e:
                logger.warning("%s: recovery-point checkpoint not written at close: %s", self.path, e)
        finally:
            self._close_files()
            self._closed = True

    def abandon(self, *, lose_unflushed: bool) -> None:
        """Close the files as a crash would: no index files, no flush, no checkpoint.

        With ``lose_unflushed`` the log is first cut back to what this run
        fsynced (its recovery point, or the end it had at open if that is
        higher: what an earlier run left is taken as written back by the
        kernel since), as a power cut drops what was only in the page cache.
        A test seam (``Broker.halt``); an offline log is closed as it is.
        """
        if self._closed:
            return
        try:
            self.drain()
            durable = max(self._recovery_point, self._opened_end)
            if lose_unflushed and self.failed is None and durable < self.log_end_offset:
                self._truncate_to(durable)
        except (OSError, LogError) as e:
            logger.warning("%s: not cut back to its recovery point: %s", self.path, e)
        finally:
            self._close_files()
            self._closed = True

    def delete(self) -> None:
        """Close and remove the whole partition directory (DeleteTopics).

        The directory is first renamed to ``<name>.<uuid>-delete`` so that a
        crash midway leaves nothing that looks like a partition.
        """
        if not self._closed:
            self.drain()  # never close a descriptor the writer thread still writes to
            self._close_files()
            self._closed = True
        doomed = os.path.join(os.path.dirname(self.path), delete_dir_name(os.path.basename(self.path)))
        try:
            os.rename(self.path, doomed)
        except FileNotFoundError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    def _close_files(self) -> None:
        for seg in self._segments:
            with contextlib.suppress(OSError):
                seg.close()
        for fd, _ in self._pending:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._pending = []
        self._pending_refs.clear()
        if self._rp_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._rp_fd)
            self._rp_fd = -1


NAME_MAX = 255  # bytes in one path component (Linux, and Kafka's own bound)


def delete_dir_name(name: str) -> str:
    """``<topic>-<partition>.<32 hex>-delete``, the topic cut so the whole fits in one path
    component, as Kafka's LocalLog.logDeleteDirName does: a 249-character topic would otherwise
    give a 289-byte name, the rename fail and the deleted records come back with the topic."""
    topic, _, partition = name.rpartition("-")
    tail = f"-{partition}.{uuid.uuid4().hex}-delete"
    return topic.encode()[: NAME_MAX - len(tail.encode())].decode(errors="ignore") + tail
