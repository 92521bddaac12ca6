"""The log cleaner's files: its checkpoint, and finishing a pass that a crash interrupted.

Apart from ``cleaner`` because opening a log needs them (``PartitionLog.open``
completes or discards an interrupted swap before loading segments) while the
cleaner itself works on open logs: with both in one module, the log and the
cleaner would import each other.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from dataclasses import dataclass

from shoal.broker.log.fileops import fsync_dir
from shoal.broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileBatchReader,
    parse_segment_name,
    segment_file_name,
)

__all__ = [
    "CLEANED_SUFFIX",
    "CLEANER_CHECKPOINT_FILE",
    "SEGMENT_SUFFIXES",
    "SWAP_SUFFIX",
    "CleanerCheckpoint",
    "finish_interrupted_cleaning",
    "read_cleaner_checkpoint",
    "unlink_if_present",
    "write_cleaner_checkpoint",
]

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX)  # rename order: the log last
_CHECKPOINT = struct.Struct(">4sqqI")  # magic, first dirty offset, tombstone timestamp, crc32
_CHECKPOINT_MAGIC = b"SHCL"


@dataclass(slots=True, frozen=True)
class CleanerCheckpoint:
    """Persisted per partition: where the dirty part starts, and the largest
    timestamp of the oldest segment that kept a tombstone (-1: none)."""

    offset: int
    tombstone_timestamp: int = -1


def read_cleaner_checkpoint(directory: str) -> CleanerCheckpoint | None:
    """The checkpoint of a partition directory; None when missing or unreadable."""
    try:
        with open(os.path.join(directory, CLEANER_CHECKPOINT_FILE), "rb") as f:
            data = f.read(_CHECKPOINT.size + 1)
    except FileNotFoundError:
        return None
    if len(data) != _CHECKPOINT.size:
        return None
    magic, offset, tombstone_ts, crc = _CHECKPOINT.unpack(data)
    if magic != _CHECKPOINT_MAGIC or crc != zlib.crc32(data[:-4]) or offset < 0:
        return None
    return CleanerCheckpoint(offset, tombstone_ts)


def write_cleaner_checkpoint(directory: str, checkpoint: CleanerCheckpoint) -> None:
    """Replace the checkpoint atomically (temporary file, fsync, rename, fsync directory)."""
    head = _CHECKPOINT.pack(_CHECKPOINT_MAGIC, checkpoint.offset, checkpoint.tombstone_timestamp, 0)[:-4]
    data = head + zlib.crc32(head).to_bytes(4, "big")
    path = os.path.join(directory, CLEANER_CHECKPOINT_FILE)
    tmp = path + ".tmp"  # a crash leaves a .tmp file, which opening the log removes
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


# --------------------------------------------------------------------------
# recovery of an interrupted pass


def unlink_if_present(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _stored_end(path: str) -> int:
    """One past the last offset of the whole batches in a segment file (-1: none)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        end = -1
        for _, header in FileBatchReader(fd, 0, os.fstat(fd).st_size):
            end = header.last_offset + 1
        return end
    finally:
        os.close(fd)


def finish_interrupted_cleaning(directory: str) -> list[str]:
    """Clean up after a cleaner pass that a crash interrupted; return notes for the log.

    ``.cleaned`` files are unfinished output: deleted.  A ``<base>.log.swap``
    was committed: the ``.log`` segments it replaces (base offsets from its
    own base to its last offset) are deleted and its files renamed into
    place.  Stray ``.swap`` index files without a ``.log.swap`` are deleted.
    Call before the segments are loaded.
    """
    notes: list[str] = []
    logs: set[int] = set()
    swaps: set[int] = set()
    swap_indexes: list[tuple[int, str]] = []
    for name in os.listdir(directory):
        parsed = parse_segment_name(name)
        if parsed is None:
            continue
        base, suffix = parsed
        if suffix.endswith(CLEANED_SUFFIX):
            if unlink_if_present(os.path.join(directory, name)):
                notes.append(f"deleted unfinished cleaner output {name}")
        elif suffix == LOG_SUFFIX:
            logs.add(base)
        elif suffix == LOG_SUFFIX + SWAP_SUFFIX:
            swaps.add(base)
        elif suffix in (INDEX_SUFFIX + SWAP_SUFFIX, TIME_INDEX_SUFFIX + SWAP_SUFFIX):
            swap_indexes.append((base, name))
    for base, name in swap_indexes:
        if base not in swaps and unlink_if_present(os.path.join(directory, name)):
            notes.append(f"deleted stray cleaner file {name}")
    for base in sorted(swaps):
        stem = os.path.join(directory, segment_file_name(base, ""))
        end = max(_stored_end(stem + LOG_SUFFIX + SWAP_SUFFIX), base + 1)
        doomed = sorted(b for b in logs if base <= b < end)
        for old in doomed:  # the log file first, as LogSegment.delete does
            old_stem = os.path.join(directory, segment_file_name(old, ""))
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                unlink_if_present(old_stem + suffix)
            logs.discard(old)
        for suffix in SEGMENT_SUFFIXES:
            with contextlib.suppress(FileNotFoundError):
                os.rename(stem + suffix + SWAP_SUFFIX, stem + suffix)
        logs.add(base)
        notes.append(f"completed an interrupted cleaner swap: segment {base} replaced segments {doomed}")
    if notes:
        fsync_dir(directory)
    return notes
