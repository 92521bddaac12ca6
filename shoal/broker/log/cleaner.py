"""Log compaction: keep only the latest record per key in ``cleanup.policy=compact`` logs.

Why it exists: a compacted topic (``__consumer_offsets``, ``__share_group_state``,
changelog-style user topics) is a table written as a stream.  Replaying it
must cost in proportion to the live keys, not to every update ever made, and
a key deleted with a tombstone must eventually vanish.  The cleaner rewrites
closed segments so that only the latest record of each key survives.

How a pass works (Kafka's LogCleaner ideas, re-derived for this log layout):

* The log splits into a *clean* head (compacted by an earlier pass), a *dirty*
  part (from the persisted ``cleaner-offset-checkpoint`` to the start of the
  active segment, or to the first segment younger than
  ``min_compaction_lag_ms``) and the active segment, which is never touched.
  ``dirty_bytes / (clean_bytes + dirty_bytes)`` is the dirty ratio that
  ``needs_cleaning`` compares with ``min_cleanable_ratio``.
* An offset map ``key bytes -> latest offset`` is built over the dirty part
  only: the clean head holds no duplicates of its own, so it matters only
  where the dirty part supersedes it.  Keys are compared as raw bytes (no
  hashing, so no collisions).  ``max_map_keys`` bounds memory: mapping stops
  at a segment boundary and the rest waits for the next pass.
* Every closed segment from the log start to the end of the mapped range is
  then rewritten.  A record survives when its key is not in the map or it is
  the mapped offset (so records newer than the map are never judged).  Records
  with a null key are dropped (Kafka refuses them at produce; here they simply
  never survive compaction).  Control batches are copied as they are.
* Tombstones (null value) survive while ``largest timestamp of the segment
  holding them + delete_retention_ms > now``.  Kafka ages them by the
  segment's last-modified time; using the largest record timestamp makes the
  rule testable with a fake clock and immune to file copies.  Merging can
  only raise a segment's largest timestamp, so a merge postpones removal,
  never hastens it.  The checkpoint also remembers the oldest segment still
  holding a tombstone, so ``needs_cleaning`` fires once one is due even when
  nothing new was written.
* Offsets never change.  A batch whose records all survive is copied byte
  for byte (CRC, compression and all).  A batch that lost records is rebuilt
  with ``build_batch`` and ``offset_deltas``: same codec, producer id/epoch,
  leader epoch, timestamp type and transactional flag; its base offset becomes
  the first surviving offset and its base sequence moves along by the same
  amount, so every surviving record keeps its own sequence number.  A batch
  left with no record is dropped, even the last batch of an idempotent
  producer (Kafka keeps an empty header there to preserve producer state; in
  Shoal such a producer's state is as if retention had removed the batch).
* Consecutive source segments are merged into one output while it stays
  within ``segment.bytes`` (and the offset span and index capacity fit), so a
  heavily compacted log also shrinks in segment count.  A source that turns
  out not to fit is cut off the output again and starts the next one.  An
  output that would be identical to its single source is discarded, so a
  second pass over a clean log changes no file.
* Crash safety: an output is written as ``<base>.log.cleaned`` plus
  ``.index.cleaned``/``.timeindex.cleaned`` (indexes rebuilt while writing),
  fsynced, then renamed to ``.swap`` names, indexes first and the log last;
  that last rename is the commit point.  Then the log adopts it in memory
  (``PartitionLog.replace_segments``), the old segments are deleted and the
  ``.swap`` files renamed to their final names.  ``finish_interrupted_cleaning``
  (run by ``PartitionLog.open``) deletes ``.cleaned`` leftovers and completes a
  pending ``.swap``: it deletes the ``.log`` segments with base offsets in
  ``[swap base, swap end)`` and renames the swap files.  Old segments of the
  group lying wholly past the last surviving offset cannot be told apart
  there; they stay behind holding only superseded records (offsets still
  increase, no latest value is lost) and the next pass removes them.
* Everything is synchronous.  Run ``clean`` on the log's thread, or in an
  executor while nothing else touches the log: it verifies before each
  commit that its source segments are still in the log, but the log itself is
  not thread-safe.  Scans and file regions that span a replaced segment end
  as they do after retention (``OffsetOutOfRange`` / a closed descriptor).
* A ``truncate_to`` below the checkpoint is noticed only when the checkpoint
  lies past the log end; it then counts as absent (everything dirty).  A
  stale checkpoint can only leave duplicates for longer, never lose a latest
  value: a record is dropped only for a later record that the log holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shoal.broker.log.cleaner_files import (
    CLEANED_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    CleanerCheckpoint,
    read_cleaner_checkpoint,
    unlink_if_present,
    write_cleaner_checkpoint,
)
from shoal.broker.log.fileops import fsync_dir
from shoal.broker.log.index import INT32_MAX
from shoal.broker.log.segment import (
    DEFAULT_CHUNK_BYTES,
    LOG_SUFFIX,
    CorruptLog,
    FileBatchReader,
    LogSegment,
    batch_records,
    segment_file_name,
)
from shoal.protocol.records import BatchHeader, Record, TimestampType, build_batch

if TYPE_CHECKING:
    from shoal.broker.log.partition_log import PartitionLog

__all__ = ["CleanStats", "CleanableRange", "CleaningAborted", "LogCleaner"]

_SEQUENCE_MASK = 0x7FFFFFFF

Step = Callable[[str], None]


class CleaningAborted(Exception):
    """The log changed under the cleaner (retention, truncation, close): nothing was swapped."""


# --------------------------------------------------------------------------
# results and checkpoint


@dataclass(slots=True)
class CleanStats:
    """What one ``clean`` call did.

    Bytes and segment counts are for the whole log, active segment included.
    ``records_removed`` counts every dropped record; ``tombstones_removed``
    the tombstones among them dropped because delete retention had passed.
    ``cleaned`` is False when the pass was skipped (not due); ``end_offset``
    is then -1, else the new checkpoint (offsets below it are clean).
    """

    bytes_before: int
    bytes_after: int
    records_removed: int = 0
    tombstones_removed: int = 0
    segments_before: int = 0
    segments_after: int = 0
    cleaned: bool = False
    end_offset: int = -1
    map_keys: int = 0
    segments_rewritten: int = 0


@dataclass(slots=True, frozen=True)
class CleanableRange:
    """Offsets ``[first_dirty_offset, first_uncleanable_offset)`` are dirty and old enough."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    active_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


# --------------------------------------------------------------------------
# the cleaner


@dataclass(slots=True)
class _Tally:
    """What cleaning one source segment into an output did."""

    removed: int = 0
    tombstones_removed: int = 0
    kept_tombstone: bool = False
    changed: bool = False


@dataclass(slots=True)
class _Output:
    """One cleaned segment being written and the source segments it replaces."""

    seg: LogSegment
    sources: list[LogSegment] = field(default_factory=list)
    changed: bool = False
    kept_tombstone: bool = False
    committed: bool = False  # its .log.swap exists: only completing the swap may follow


class LogCleaner:
    """Compacts ``PartitionLog``s; holds no per-log state (that is the checkpoint file).

    ``max_map_keys`` caps the offset map (None: unbounded; at least one dirty
    segment is always mapped).  ``on_step`` is called with a short name after
    every durable step (``write``, ``written``, ``commit``, ``delete``,
    ``final``, ``checkpoint``, each followed by a segment or file name where
    that applies): for progress reporting and fault-injection tests.
    """

    __slots__ = ("chunk_bytes", "max_map_keys", "on_step")

    def __init__(
        self,
        *,
        max_map_keys: int | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        on_step: Step | None = None,
    ) -> None:
        self.max_map_keys = max_map_keys
        self.chunk_bytes = chunk_bytes
        self.on_step = on_step

    def _step(self, name: str) -> None:
        if self.on_step is not None:
            self.on_step(name)

    # -- deciding ------------------------------------------------------------

    def cleanable_range(self, log: PartitionLog, now_ms: int, min_compaction_lag_ms: int = 0) -> CleanableRange:
        """Where the dirty part starts and ends, and the byte counts behind the ratio.

        A broker that finds ``active_bytes`` dominating may ``log.roll()``
        first (or pass ``roll_first`` to ``clean``) to make that data cleanable.
        """
        return self._range(log, read_cleaner_checkpoint(log.path), now_ms, min_compaction_lag_ms)

    @staticmethod
    def _range(log: PartitionLog, checkpoint: CleanerCheckpoint | None, now: int, lag: int) -> CleanableRange:
        segments = log.segments
        start, leo = log.log_start_offset, log.log_end_offset
        first_dirty = checkpoint.offset if checkpoint and start <= checkpoint.offset <= leo else start
        end = segments[-1].base_offset
        clean_bytes = dirty_bytes = 0
        for seg in segments[:-1]:
            if seg.next_offset <= first_dirty:
                clean_bytes += seg.size
            elif lag > 0 and seg.largest_timestamp > now - lag:
                end = seg.base_offset
                break
            else:
                dirty_bytes += seg.size
        return CleanableRange(first_dirty, end, clean_bytes, dirty_bytes, segments[-1].size)

    @staticmethod
    def _due(
        rng: CleanableRange,
        checkpoint: CleanerCheckpoint | None,
        now: int,
        min_ratio: float,
        delete_retention_ms: int | None,
    ) -> bool:
        if rng.dirty_bytes > 0 and rng.dirty_ratio >= min_ratio:
            return True
        return (
            delete_retention_ms is not None
            and checkpoint is not None
            and checkpoint.tombstone_timestamp >= 0
            and checkpoint.tombstone_timestamp + delete_retention_ms <= now
        )

    def needs_cleaning(
        self,
        log: PartitionLog,
        now_ms: int,
        *,
        min_cleanable_ratio: float = 0.5,
        min_compaction_lag_ms: int = 0,
        delete_retention_ms: int | None = None,
    ) -> bool:
        """True when the dirty ratio reaches ``min_cleanable_ratio``, or (given
        ``delete_retention_ms``) a tombstone kept by an earlier pass is due.
        Always False for a log whose cleanup policy does not include compact."""
        if not log.config.compacts:
            return False
        checkpoint = read_cleaner_checkpoint(log.path)
        rng = self._range(log, checkpoint, now_ms, min_compaction_lag_ms)
        return self._due(rng, checkpoint, now_ms, min_cleanable_ratio, delete_retention_ms)

    # -- cleaning ------------------------------------------------------------

    def clean(
        self,
        log: PartitionLog,
        now_ms: int,
        delete_retention_ms: int,
        min_cleanable_ratio: float = 0.5,
        min_compaction_lag_ms: int = 0,
        *,
        force: bool = False,
        roll_first: bool = False,
    ) -> CleanStats:
        """Run one pass if it is due (``needs_cleaning``) or ``force``d.

        ``roll_first`` rolls a non-empty active segment first so that its
        records can be cleaned too.  Raises ValueError for a log that is not
        compacted, CorruptLog when a source batch fails its CRC or does not
        decode (no later group is swapped), CleaningAborted when the log
        changed underneath or an earlier pass failed after its commit point
        (the log stays readable; opening it again completes that swap).
        """
        if not log.config.compacts:
            raise ValueError(f"cleanup policy {log.config.cleanup_policy!r} of {log.path} does not compact")
        if any(seg.file_suffix for seg in log.segments):
            raise CleaningAborted(f"an earlier swap in {log.path} did not finish; reopen the log to complete it")
        if roll_first and log.active_segment.size:
            log.roll(now_ms)
        size, count = log.size_bytes, len(log.segments)
        stats = CleanStats(bytes_before=size, bytes_after=size, segments_before=count, segments_after=count)
        checkpoint = read_cleaner_checkpoint(log.path)
        rng = self._range(log, checkpoint, now_ms, min_compaction_lag_ms)
        if not force and not self._due(rng, checkpoint, now_ms, min_cleanable_ratio, delete_retention_ms):
            return stats
        closed = log.segments[:-1]
        dirty = [
            s for s in closed if s.next_offset > rng.first_dirty_offset and s.base_offset < rng.first_uncleanable_offset
        ]
        offset_map, end = self._build_map(dirty, rng.first_uncleanable_offset)
        sources = [s for s in closed if s.base_offset < end]
        tombstone_ts = self._rewrite(log, sources, offset_map, now_ms, delete_retention_ms, stats)
        write_cleaner_checkpoint(log.path, CleanerCheckpoint(end, tombstone_ts))
        self._step("checkpoint")
        stats.cleaned = True
        stats.end_offset = end
        stats.map_keys = len(offset_map)
        stats.bytes_after = log.size_bytes
        stats.segments_after = len(log.segments)
        return stats

    def _batches(self, seg: LogSegment) -> Iterator[BatchHeader]:
        """Every batch of a closed segment, read in chunks through a duplicate descriptor."""
        fd = os.dup(seg.fd)
        try:
            reader = FileBatchReader(fd, 0, seg.size, self.chunk_bytes)
            yield from (header for _, header in reader)
            if reader.error:
                raise CorruptLog(f"{seg.path()}: {reader.error} at {reader.position}")
        finally:
            os.close(fd)

    @staticmethod
    def _records(seg: LogSegment, header: BatchHeader) -> list[Record]:
        return batch_records(seg, header, verify_crc=True)

    def _build_map(self, dirty: Sequence[LogSegment], end: int) -> tuple[dict[bytes, int], int]:
        """Latest offset per key over ``dirty``, and the offset the mapped range ends at."""
        offset_map: dict[bytes, int] = {}
        limit = self.max_map_keys
        for i, seg in enumerate(dirty):
            seg_map: dict[bytes, int] = {}
            for header in self._batches(seg):
                if header.is_control:
                    continue
                for record in self._records(seg, header):
                    if record.key is not None:
                        seg_map[record.key] = record.offset
            if i and limit is not None and len(offset_map) + sum(k not in offset_map for k in seg_map) > limit:
                return offset_map, seg.base_offset
            offset_map.update(seg_map)
        return offset_map, end

    def _rewrite(
        self,
        log: PartitionLog,
        sources: Sequence[LogSegment],
        offset_map: dict[bytes, int],
        now: int,
        delete_retention_ms: int,
        stats: CleanStats,
    ) -> int:
        """Clean ``sources`` into merged outputs and swap each in; return the
        largest timestamp of the oldest resulting segment that kept a tombstone."""
        segment_bytes = log.config.segment_bytes
        tombstone_ts = -1
        out: _Output | None = None
        i = 0
        try:
            while i < len(sources):
                src = sources[i]
                if out is not None and src.next_offset - 1 - out.seg.base_offset > INT32_MAX:
                    tombstone_ts = _older(tombstone_ts, self._finish(log, out, stats))
                    out = None
                if out is None:
                    out = self._start(log, src.base_offset, now)
                sure_to_fit = not out.sources or out.seg.size + src.size <= segment_bytes
                tally = self._clean_segment(src, out.seg, offset_map, now, delete_retention_ms)
                if not sure_to_fit and (out.seg.size > segment_bytes or out.seg.indexes_full):
                    out.seg.truncate_to(src.base_offset, now)  # src starts the next output
                    tombstone_ts = _older(tombstone_ts, self._finish(log, out, stats))
                    out = None
                    continue
                out.sources.append(src)
                out.changed = out.changed or tally.changed or len(out.sources) > 1
                out.kept_tombstone = out.kept_tombstone or tally.kept_tombstone
                stats.records_removed += tally.removed
                stats.tombstones_removed += tally.tombstones_removed
                i += 1
            if out is not None:
                tombstone_ts = _older(tombstone_ts, self._finish(log, out, stats))
                out = None
        except BaseException:
            if out is not None and not out.committed:
                _discard(out.seg)
            raise
        return tombstone_ts

    def _start(self, log: PartitionLog, base: int, now: int) -> _Output:
        cfg = log.config
        stem = os.path.join(log.path, segment_file_name(base, LOG_SUFFIX))
        unlink_if_present(stem + CLEANED_SUFFIX)  # left by an earlier failed pass
        seg = LogSegment.create(
            log.path,
            base,
            now,
            index_interval=cfg.index_interval_bytes,
            index_max_bytes=cfg.segment_index_bytes,
            file_suffix=CLEANED_SUFFIX,
        )
        return _Output(seg)

    def _clean_segment(
        self, src: LogSegment, out: LogSegment, offset_map: dict[bytes, int], now: int, delete_retention_ms: int
    ) -> _Tally:
        """Append what survives of ``src`` to ``out``."""
        tally = _Tally()
        keep_tombstones = src.largest_timestamp + delete_retention_ms > now
        buf = bytearray()
        infos: list[tuple[int, int, int, int]] = []
        last_offset = -1
        for header in self._batches(src):
            data: bytes | memoryview = header.data
            if header.is_control:
                if not header.verify_crc():
                    raise CorruptLog(f"{src.path()}: CRC mismatch in the control batch at {header.base_offset}")
            else:
                records = self._records(src, header)
                kept: list[Record] = []
                for record in records:
                    latest = offset_map.get(record.key) if record.key is not None else None
                    if record.key is None or (latest is not None and record.offset < latest):
                        tally.removed += 1
                    elif record.value is None and not keep_tombstones:
                        tally.removed += 1
                        tally.tombstones_removed += 1
                    else:
                        kept.append(record)
                        tally.kept_tombstone = tally.kept_tombstone or record.value is None
                if not kept:
                    tally.changed = True
                    continue
                if len(kept) < len(records):
                    tally.changed = True
                    data = _rebuild(header, kept)
                    header = BatchHeader.read(data)
            infos.append((len(buf), header.base_offset, header.size, header.max_timestamp))
            buf += data
            last_offset = header.last_offset
            if len(buf) >= self.chunk_bytes:
                out.append(memoryview(buf), infos, last_offset, now)
                self._step(f"write {out.base_offset}")
                buf, infos = bytearray(), []
        if infos:
            out.append(memoryview(buf), infos, last_offset, now)
            self._step(f"write {out.base_offset}")
        return tally

    def _finish(self, log: PartitionLog, out: _Output, stats: CleanStats) -> int:
        """Make ``out`` durable and swap it in for its sources; return its
        largest timestamp if it kept a tombstone, else -1."""
        seg = out.seg
        base = seg.base_offset
        if len(out.sources) == 1 and not out.changed:  # byte for byte its source: keep the source
            _discard(seg)
            return out.sources[0].largest_timestamp if out.kept_tombstone else -1
        try:
            seg.seal()
            mtime_ns = max(s.last_modified_ms for s in out.sources) * 1_000_000
            os.utime(seg.path(), ns=(mtime_ns, mtime_ns))  # ages like its newest source
            seg.last_modified_ms = mtime_ns // 1_000_000
            for fd in seg.write_index_files():
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.fsync(seg.fd)
            self._step(f"written {base}")
            _check_still_in_log(log, out.sources)
            for suffix in SEGMENT_SUFFIXES:
                stem = os.path.join(log.path, segment_file_name(base, suffix))
                os.rename(stem + CLEANED_SUFFIX, stem + SWAP_SUFFIX)
                if suffix == LOG_SUFFIX:
                    out.committed = True
                    seg.file_suffix = SWAP_SUFFIX
                    fsync_dir(log.path)
                self._step(f"commit {segment_file_name(base, suffix)}")
        except BaseException:
            if not out.committed:
                _discard(seg)
            raise
        log.replace_segments(out.sources, seg)
        for old in out.sources:
            old.delete()
            self._step(f"delete {old.base_offset}")
        for suffix in SEGMENT_SUFFIXES:
            stem = os.path.join(log.path, segment_file_name(base, suffix))
            os.rename(stem + SWAP_SUFFIX, stem)
            self._step(f"final {segment_file_name(base, suffix)}")
        seg.file_suffix = ""
        fsync_dir(log.path)
        stats.segments_rewritten += len(out.sources)
        return seg.largest_timestamp if out.kept_tombstone else -1


def _rebuild(header: BatchHeader, kept: list[Record]) -> bytes:
    """The batch ``header`` with only ``kept`` records, at their own offsets."""
    first = kept[0].offset
    sequence = header.base_sequence
    if sequence >= 0:  # the first survivor keeps its own sequence number
        sequence = (sequence + first - header.base_offset) & _SEQUENCE_MASK
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    return build_batch(
        kept,
        base_offset=first,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=sequence,
        transactional=header.is_transactional,
        timestamp_type=header.timestamp_type,
        log_append_time=header.max_timestamp if log_append else None,
        partition_leader_epoch=header.partition_leader_epoch,
        offset_deltas=[r.offset - first for r in kept],
    )


def _older(a: int, b: int) -> int:
    """The smaller of two timestamps where -1 means none."""
    return b if a < 0 else a if b < 0 else min(a, b)


def _discard(seg: LogSegment) -> None:
    """Remove an uncommitted output, whichever temporary name its files have now."""
    seg.close()
    for suffix in SEGMENT_SUFFIXES:
        stem = os.path.join(seg.directory, segment_file_name(seg.base_offset, suffix))
        unlink_if_present(stem + CLEANED_SUFFIX)
        unlink_if_present(stem + SWAP_SUFFIX)
    seg.deleted = True


def _check_still_in_log(log: PartitionLog, sources: Sequence[LogSegment]) -> None:
    segments = log.segments if not log.closed else ()
    first = next((i for i, seg in enumerate(segments) if seg is sources[0]), -1)
    end = first + len(sources)
    if first < 0 or end >= len(segments) or any(a is not b for a, b in zip(segments[first:end], sources)):
        raise CleaningAborted(f"segments {sources[0].base_offset}..{sources[-1].next_offset} of {log.path} changed")
