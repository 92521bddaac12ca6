"""Opening a partition directory: finding segments, trusting or rebuilding
their indexes, and cutting a log that did not shut down cleanly.

Why it is shaped this way (Kafka's recovery, with our own bookkeeping):

* The ``recovery-point`` file names an offset below which everything was
  fsynced.  It is a 16-byte record (magic, offset, CRC-32) rewritten in place
  after each flush; a missing or unreadable one means 0, i.e. check it all.
* After a crash, segments from the one holding ``recovery point - 1`` on are
  walked batch by batch (``LogSegment.recover``): batches past the recovery
  point must pass their CRC, every batch must be whole with increasing
  offsets.  The log is cut just before the first one that is not, and every
  later segment is deleted, because a Kafka log has no holes.
* Why ``recovery point - 1``: a segment's index files are written when it
  rolls and fsynced by the first flush *issued* after that, and only a
  recovery point strictly past the segment's end proves such a flush
  completed.  Segments wholly before that load their index files, provided
  they are consistent with the data; doubtful ones are rebuilt, without CRC
  checks, since their data was durable.
* Everything that was changed is written into a ``RecoveryReport`` for the
  broker to log.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from bisect import bisect_right
from dataclasses import dataclass, field

from shoal.broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, parse_segment_name

__all__ = [
    "LOG_START_FILE",
    "RECOVERY_POINT_FILE",
    "RecoveryReport",
    "Truncation",
    "encode_recovery_point",
    "list_segment_bases",
    "load_segments",
    "read_log_start",
    "read_recovery_point",
    "write_log_start",
]

RECOVERY_POINT_FILE = "recovery-point"
_RECOVERY_POINT = struct.Struct(">4sqI")  # magic, offset, crc32 of the first 12 bytes
_RECOVERY_MAGIC = b"SHRP"
# A log start offset inside the first segment (DeleteRecords, share-state
# pruning): same layout as the recovery point, its own magic.
LOG_START_FILE = "log-start-offset"
_LOG_START_MAGIC = b"SHLS"


@dataclass(slots=True)
class Truncation:
    segment_base_offset: int
    position: int
    bytes: int
    reason: str


@dataclass(slots=True)
class RecoveryReport:
    """What ``PartitionLog.open`` found and changed, for the broker to log."""

    clean_shutdown: bool
    recovery_point: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    segments: int = 0
    recovered_segments: list[int] = field(default_factory=list)
    rebuilt_indexes: list[tuple[int, str]] = field(default_factory=list)
    validated_bytes: int = 0
    truncations: list[Truncation] = field(default_factory=list)
    deleted_segments: list[int] = field(default_factory=list)
    deleted_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def truncated_bytes(self) -> int:
        """Bytes cut off the log: the torn tail plus the segments after it."""
        return sum(t.bytes for t in self.truncations) + self.deleted_bytes

    @property
    def truncated(self) -> bool:
        return bool(self.truncations or self.deleted_segments)

    def summary(self) -> str:
        parts = [
            f"{'clean' if self.clean_shutdown else 'unclean'} open: {self.segments} segments, "
            f"offsets [{self.log_start_offset}, {self.log_end_offset})"
        ]
        if self.recovered_segments:
            parts.append(
                f"recovered {len(self.recovered_segments)} segments from recovery point "
                f"{self.recovery_point} ({self.validated_bytes} bytes CRC-checked)"
            )
        if self.rebuilt_indexes:
            parts.append(f"rebuilt {len(self.rebuilt_indexes)} indexes")
        for t in self.truncations:
            parts.append(f"truncated segment {t.segment_base_offset} at {t.position} ({t.bytes} bytes): {t.reason}")
        if self.deleted_segments:
            parts.append(f"deleted {len(self.deleted_segments)} later segments ({self.deleted_bytes} bytes)")
        parts.extend(self.notes)
        return "; ".join(parts)


def read_recovery_point(directory: str) -> tuple[int, str | None]:
    try:
        with open(os.path.join(directory, RECOVERY_POINT_FILE), "rb") as f:
            data = f.read(64)
    except FileNotFoundError:
        return 0, "no recovery-point file: the whole log is checked"
    if len(data) == _RECOVERY_POINT.size:
        magic, offset, crc = _RECOVERY_POINT.unpack(data)
        if magic == _RECOVERY_MAGIC and crc == zlib.crc32(data[:12]) and offset >= 0:
            return offset, None
    return 0, "unreadable recovery-point file: the whole log is checked"


def encode_recovery_point(offset: int) -> bytes:
    return _encode_offset(_RECOVERY_MAGIC, offset)


def _encode_offset(magic: bytes, offset: int) -> bytes:
    head = _RECOVERY_POINT.pack(magic, offset, 0)[:12]
    return head + zlib.crc32(head).to_bytes(4, "big")


def read_log_start(directory: str) -> int:
    """The stored log start offset, 0 when there is none (or it is unreadable:
    the first segment's base then rules, which only exposes more records)."""
    try:
        with open(os.path.join(directory, LOG_START_FILE), "rb") as f:
            data = f.read(64)
    except FileNotFoundError:
        return 0
    if len(data) == _RECOVERY_POINT.size:
        magic, offset, crc = _RECOVERY_POINT.unpack(data)
        if magic == _LOG_START_MAGIC and crc == zlib.crc32(data[:12]) and offset >= 0:
            return offset
    return 0


def write_log_start(directory: str, offset: int) -> None:
    """Replace the log start file durably (temp file, fsync, rename, fsync dir)."""
    path = os.path.join(directory, LOG_START_FILE)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, _encode_offset(_LOG_START_MAGIC, offset))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def list_segment_bases(directory: str) -> list[int]:
    """Base offsets of the ``.log`` files; drops leftovers of interrupted deletions."""
    bases: set[int] = set()
    indexes: list[tuple[int, str]] = []
    for name in os.listdir(directory):
        full = os.path.join(directory, name)
        if name.endswith((".deleted", ".tmp")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(full)
            continue
        parsed = parse_segment_name(name)
        if parsed is None:
            continue
        if parsed[1] == LOG_SUFFIX:
            bases.add(parsed[0])
        elif parsed[1] in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            indexes.append((parsed[0], full))
    for base, full in indexes:
        if base not in bases:  # the .log goes first when a segment is deleted
            with contextlib.suppress(FileNotFoundError):
                os.unlink(full)
    return sorted(bases)


def load_segments(
    directory: str,
    recovery_point: int,
    clean_shutdown: bool,
    now_ms: int,
    report: RecoveryReport,
    *,
    index_interval: int,
    index_max_bytes: int,
) -> list[LogSegment]:
    """Open every segment of ``directory`` (at least one), recovering as needed."""
    args = {"index_interval": index_interval, "index_max_bytes": index_max_bytes}
    bases = list_segment_bases(directory)
    rp = recovery_point
    segments: list[LogSegment] = []
    try:
        for base in bases:
            segments.append(LogSegment.open_existing(directory, base, **args))
        kept = _recover(segments, bases, rp, clean_shutdown, now_ms, report)
        if not kept:
            kept.append(LogSegment.create(directory, 0, now_ms, **args))
        for seg in kept[:-1]:  # closed segments keep their final max timestamp
            seg.seal()
    except BaseException:
        for seg in segments:
            seg.close()
        raise
    report.segments = len(kept)
    return kept


def _recover(
    segments: list[LogSegment], bases: list[int], rp: int, clean: bool, now: int, report: RecoveryReport
) -> list[LogSegment]:
    first_recovered = len(segments) if clean else max(0, bisect_right(bases, rp - 1) - 1)
    kept: list[LogSegment] = []
    expected = bases[0] if bases else 0
    for i, seg in enumerate(segments):
        if i < first_recovered:
            problem = seg.load_indexes(expected, now)
            if problem is None:
                kept.append(seg)
                expected = seg.next_offset
                continue
            report.rebuilt_indexes.append((seg.base_offset, problem))
            validate_from = None
        else:
            report.recovered_segments.append(seg.base_offset)
            validate_from = rp
        outcome = seg.recover(expected, now, validate_from=validate_from)
        report.validated_bytes += outcome.validated_bytes
        kept.append(seg)
        expected = seg.next_offset
        if outcome.truncated_at is None:
            continue
        reason = outcome.reason or ""
        report.truncations.append(Truncation(seg.base_offset, outcome.truncated_at, outcome.truncated_bytes, reason))
        doomed = segments[i + 1 :]
        if seg.size == 0 and len(kept) > 1:  # an emptied segment after others: its name is moot
            doomed.insert(0, kept.pop())
        for later in doomed:
            report.deleted_segments.append(later.base_offset)
            report.deleted_bytes += later.size
            later.delete()
        break
    return kept
