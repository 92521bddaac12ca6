"""Shortening a partition log: retention, DeleteRecords (a new log start) and truncation.

A mixin of ``PartitionLog``, kept apart so each file stays readable (as
``reads`` holds the read side). Each operation removes a prefix or a suffix
of the segments and leaves the log's invariants as ``PartitionLog`` states
them: the active segment is never deleted by retention, a new log start is
durable before anything is removed, and a truncation is fsynced before it
returns. Which segments retention removes is decided by ``retention``.
"""

from __future__ import annotations

from bisect import bisect_right

from shoal.broker.log.recovery import write_log_start
from shoal.broker.log.retention import SegmentStats, select_for_deletion
from shoal.broker.log.segment import LogSegment, OffsetOutOfRange

__all__ = ["LogTrimming"]


class LogTrimming:
    """Retention and truncation methods of ``PartitionLog`` (see there for the log's invariants)."""

    __slots__ = ()

    # PartitionLog provides the segment lists, offsets, files, clock and the
    # _check_writable / _storage_io / drain / _write_recovery_point / _fsync_dir steps.

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete the oldest closed segments past retention_ms / retention_bytes.

        Returns the number of segments deleted.  The active segment is never
        deleted, so a log always keeps its end offset.  No-op unless the
        cleanup policy includes "delete".
        """
        self._check_writable()
        cfg = self.config
        if not cfg.deletes or len(self._segments) < 2:
            return 0
        now = self.clock() if now_ms is None else now_ms
        closed = [SegmentStats(s.base_offset, s.size, s.largest_timestamp) for s in self._segments[:-1]]
        decision = select_for_deletion(
            closed,
            now_ms=now,
            retention_ms=cfg.retention_ms,
            retention_bytes=cfg.retention_bytes,
            total_bytes=self._size,
        )
        with self._storage_io():
            for seg in self._segments[: decision.count]:
                self._size -= seg.size
                seg.delete()
        del self._segments[: decision.count]
        del self._bases[: decision.count]
        if decision.count:
            self._recovery_point = max(self._recovery_point, self._segments[0].base_offset)
            self._dir_dirty = True
        return decision.count

    def advance_log_start(self, offset: int) -> bool:
        """Make every record below ``offset`` unreadable (Kafka's DeleteRecords).

        The new start is written durably before anything is removed; closed
        segments that then lie wholly below it are deleted, the rest of the
        prefix is only hidden.  Returns False when the start is already at or
        past ``offset``; raises OffsetOutOfRange past the log end.
        """
        self._check_writable()
        if offset > self.log_end_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return False
        with self._storage_io():
            write_log_start(self.path, offset)
            self._start = offset
            self._drop_segments_below_start()
        return True

    def _drop_segments_below_start(self) -> None:
        """Delete closed segments whose every offset is below the log start."""
        n = 0
        while n + 1 < len(self._segments) and self._segments[n + 1].base_offset <= self._start:
            n += 1
        if not n:
            return
        for seg in self._segments[:n]:
            self._size -= seg.size
            seg.delete()
        del self._segments[:n]
        del self._bases[:n]
        self._recovery_point = max(self._recovery_point, self._segments[0].base_offset)
        self._dir_dirty = True

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset ``>= offset``; return bytes removed.

        A batch straddling ``offset`` goes whole, so the log end may end up
        below ``offset``.  Below the log start, the log is emptied and starts
        again at ``offset``.  The result is fsynced before returning (rare,
        and a crash must not resurrect the removed batches).
        """
        self._check_writable()
        self.drain()
        if offset >= self.log_end_offset:
            return 0
        with self._storage_io():
            return self._truncate_to(offset)

    def _truncate_to(self, offset: int) -> int:
        now = self.clock()
        removed = 0
        keep = bisect_right(self._bases, offset) - 1  # -1: below the log start
        for seg in self._segments[keep + 1 :]:
            removed += seg.size
            seg.delete()
        if keep < 0:
            self._segments = [LogSegment.create(self.path, offset, now, **self._segment_args())]
        else:
            del self._segments[keep + 1 :]
            removed += self._segments[-1].truncate_to(offset, now)
            self.files.fsync(self._segments[-1].fd)
        self._bases = [s.base_offset for s in self._segments]
        self._size = sum(s.size for s in self._segments)
        if self._start > self.log_end_offset:  # truncated below the start: restart there
            self._start = self.log_end_offset
            write_log_start(self.path, self._start)
        self._rp_cap = self.log_end_offset
        self._recovery_point = min(self._recovery_point, self.log_end_offset)
        self._write_recovery_point()
        self.files.fsync(self._rp_fd)
        self._fsync_dir()
        return removed
