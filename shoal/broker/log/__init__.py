"""Shoal's on-disk partition logs (Kafka's segmented log layout).

A partition directory holds ``<20-digit base offset>.log`` segment files with
their ``.index`` (offset → position) and ``.timeindex`` (timestamp → offset)
files, plus a ``recovery-point`` file.  ``PartitionLog`` is the entry point;
everything here is synchronous and meant to be called from the event loop,
with fsync split out (``flush_target`` / ``mark_flushed``) for a worker thread,
and large appends optionally copied to the page cache by a writer thread
(``append_async`` with ``broker.log.writer.ThreadedWriter``).
"""

from shoal.broker.log.partition_log import AppendInfo, FileRegion, LogConfig, LogWriter, PartitionLog, ReadResult
from shoal.broker.log.recovery import RECOVERY_POINT_FILE, RecoveryReport, Truncation
from shoal.broker.log.retention import RetentionDecision, SegmentStats, select_for_deletion
from shoal.broker.log.segment import (
    CorruptLog,
    InvalidBatch,
    LogClosed,
    LogError,
    LogFailed,
    LogSegment,
    OffsetOutOfRange,
    RecordBatchTooLarge,
    RecordTooLarge,
)

__all__ = [
    "RECOVERY_POINT_FILE",
    "AppendInfo",
    "CorruptLog",
    "FileRegion",
    "InvalidBatch",
    "LogClosed",
    "LogConfig",
    "LogError",
    "LogFailed",
    "LogSegment",
    "LogWriter",
    "OffsetOutOfRange",
    "PartitionLog",
    "ReadResult",
    "RecordBatchTooLarge",
    "RecordTooLarge",
    "RecoveryReport",
    "RetentionDecision",
    "SegmentStats",
    "Truncation",
    "select_for_deletion",
]
