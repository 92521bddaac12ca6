"""Tests for broker.log.cleaner: log compaction on real segment files.

Logs are built with ``protocol.records.build_batch`` in a temporary
directory; the expected outcome is always an independent model (a dict of
key -> latest value, and the original record stored at every offset), so a
cleaner that drops a live record, keeps a superseded one, moves an offset or
corrupts a batch fails.  Crashes are simulated by copying the partition
directory at a step of the swap protocol and opening the copy uncleanly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.broker.log import LogConfig, PartitionLog
from shoal.broker.log.cleaner import CleaningAborted, LogCleaner
from shoal.broker.log.cleaner_files import (
    CLEANER_CHECKPOINT_FILE,
    CleanerCheckpoint,
    read_cleaner_checkpoint,
    write_cleaner_checkpoint,
)
from shoal.broker.log.segment import CorruptLog
from shoal.protocol.records import (
    BatchHeader,
    Compression,
    ControlType,
    Record,
    TimestampType,
    build_batch,
    build_control_batch,
)

T0 = 1_700_000_000_000
HOUR = 3_600_000
DAY = 24 * HOUR


class FakeClock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def open_log(path, clock=None, clean: bool = True, **cfg) -> PartitionLog:
    cfg.setdefault("cleanup_policy", "compact")
    cfg.setdefault("index_interval_bytes", 128)
    return PartitionLog.open(path, LogConfig(**cfg), clock or FakeClock(), clean)


class Writer:
    """Appends to a log and remembers what went to every offset (the model)."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.original: dict[int, tuple[bytes | None, bytes | None]] = {}
        self.latest: dict[bytes, int] = {}
        self.table: dict[bytes, bytes] = {}

    def put(self, pairs, ts: int | None = None, compression: int = Compression.NONE, **kw) -> int:
        stamp = T0 if ts is None else ts
        info = self.log.append(build_batch([(k, v, (), stamp) for k, v in pairs], compression=compression, **kw))
        for i, (k, v) in enumerate(pairs):
            offset = info.first_offset + i
            self.original[offset] = (k, v)
            if k is None:
                continue
            self.latest[k] = offset
            if v is None:
                self.table.pop(k, None)
            else:
                self.table[k] = v
        return info.first_offset


def all_records(log: PartitionLog) -> list[Record]:
    return [r for h, _ in log.scan() if not h.is_control for r in h.records()]


def replay(log: PartitionLog) -> dict[bytes, bytes]:
    table: dict[bytes, bytes] = {}
    for r in all_records(log):
        if r.key is None:
            continue
        if r.value is None:
            table.pop(r.key, None)
        else:
            table[r.key] = r.value
    return table


def check_consistent(log: PartitionLog, w: Writer) -> list[Record]:
    """Offsets strictly increase, every record is the one written there, and
    the replayed table and each key's latest offset match the model."""
    records = all_records(log)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    for r in records:
        assert (r.key, r.value) == w.original[r.offset]
    assert replay(log) == w.table
    latest: dict[bytes, int] = {}
    for r in records:
        latest[r.key] = r.offset
    for key in w.table:
        assert latest[key] == w.latest[key], key
    for h, _ in log.scan():
        assert h.verify_crc()
    return records


def check_reads(log: PartitionLog) -> None:
    """A fetch at any offset, removed or not, starts at the next surviving record."""
    survivors = [r.offset for h, _ in log.scan() for r in h.records()]
    for offset in range(log.log_start_offset, log.log_end_offset):
        result = log.read(offset, 1)
        later = [s for s in survivors if s >= offset]
        if not later:
            assert result.size == 0
            continue
        got = next(r.offset for r in BatchHeader.read(result.data).records() if r.offset >= offset)
        assert got == later[0]


def segment_files(path) -> dict[str, bytes]:
    return {n: open(os.path.join(path, n), "rb").read() for n in sorted(os.listdir(path)) if n[0].isdigit()}


def leftovers(path) -> list[str]:
    return [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]


def kv(i: int) -> bytes:
    return b"key-%04d" % i


# --------------------------------------------------------------------------
# basic semantics


def test_latest_value_per_key_survives_and_offsets_are_kept(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=600)
    w = Writer(log)
    for round_ in range(6):
        for i in range(5):
            w.put([(kv(i), b"v%d-%d" % (round_, i))])
    log.roll()
    stats = LogCleaner().clean(log, T0, DAY)
    assert stats.cleaned and stats.end_offset == log.active_segment.base_offset
    records = check_consistent(log, w)
    assert [(r.offset, r.key) for r in records] == [(25 + i, kv(i)) for i in range(5)]
    assert stats.records_removed == 25 and stats.tombstones_removed == 0
    assert stats.bytes_after < stats.bytes_before and stats.bytes_after == log.size_bytes
    assert stats.segments_after < stats.segments_before
    assert log.log_start_offset == 0 and log.log_end_offset == 30
    assert leftovers(log.path) == []
    log.close()
    again = open_log(tmp_path / "p", segment_bytes=600)
    assert again.recovery.rebuilt_indexes == []
    check_consistent(again, w)


def test_reads_across_removed_offsets_and_list_offsets(tmp_path):
    log = open_log(tmp_path / "p")
    w = Writer(log)
    stamps = [T0 + 10 * i for i in range(7)]
    log.append(build_batch([(b"k1", b"a", (), stamps[0]), (b"k2", b"b", (), stamps[1]), (b"k3", b"x", (), stamps[2])]))
    w.original.update({0: (b"k1", b"a"), 1: (b"k2", b"b"), 2: (b"k3", b"x")})
    w.put([(b"k1", b"c")], ts=stamps[3])
    log.roll()
    w.put([(b"k2", b"d")], ts=stamps[4])
    w.put([(b"k4", b"e")], ts=stamps[5])
    log.roll()
    w.put([(b"k5", b"f")], ts=stamps[6])
    w.table.update({b"k3": b"x"})
    w.latest[b"k3"] = 2
    LogCleaner().clean(log, T0, DAY)
    survivors = [r.offset for r in check_consistent(log, w)]
    assert survivors == [2, 3, 4, 5, 6]
    assert log.log_start_offset == 0
    check_reads(log)
    assert log.read(0, 1 << 20).first_offset == 2
    rebuilt = BatchHeader.read(log.read(0, 1 << 20).data)
    assert (rebuilt.base_offset, rebuilt.last_offset, rebuilt.records_count) == (2, 2, 1)
    assert log.offset_for_timestamp(T0) == (2, stamps[2])
    assert log.offset_for_timestamp(stamps[3]) == (3, stamps[3])
    assert log.offset_for_timestamp(stamps[6] + 1) is None
    assert log.max_timestamp_offset() == (6, stamps[6])


def test_tombstones_stay_for_delete_retention_then_go(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path / "p", clock)
    w = Writer(log)
    w.put([(b"gone", b"1"), (b"kept", b"2")], ts=T0)
    w.put([(b"gone", None)], ts=T0 + 1000)
    log.roll()
    w.put([(b"other", b"3")], ts=T0 + 2000)
    log.roll()
    cleaner = LogCleaner()
    retention = 10 * HOUR
    stats = cleaner.clean(log, T0 + HOUR, retention)
    records = check_consistent(log, w)
    assert [(r.key, r.value) for r in records] == [(b"kept", b"2"), (b"gone", None), (b"other", b"3")]
    assert stats.tombstones_removed == 0 and stats.records_removed == 1
    assert read_cleaner_checkpoint(log.path).tombstone_timestamp == T0 + 2000  # the merged segment's
    # Nothing new was written: only the tombstone deadline makes a pass due.
    assert not cleaner.needs_cleaning(log, T0 + 2000 + retention - 1, delete_retention_ms=retention)
    assert not cleaner.needs_cleaning(log, T0 + 2000 + retention)  # no retention given: ratio only
    assert cleaner.needs_cleaning(log, T0 + 2000 + retention, delete_retention_ms=retention)
    stats = cleaner.clean(log, T0 + 2000 + retention, retention)
    assert stats.tombstones_removed == 1
    assert [(r.key, r.value) for r in check_consistent(log, w)] == [(b"kept", b"2"), (b"other", b"3")]
    assert read_cleaner_checkpoint(log.path).tombstone_timestamp == -1
    assert not cleaner.needs_cleaning(log, T0 + 100 * DAY, delete_retention_ms=retention)


def test_tombstone_age_is_its_segments_largest_timestamp(tmp_path):
    log = open_log(tmp_path / "p")
    w = Writer(log)
    w.put([(b"a", None)], ts=T0)
    w.put([(b"b", b"late")], ts=T0 + 5000)  # same segment, newer: the tombstone ages from here
    log.roll()
    cleaner = LogCleaner()
    cleaner.clean(log, T0 + 5000 + 999, 1000)
    assert [r.value for r in all_records(log)] == [None, b"late"]
    cleaner.clean(log, T0 + 5000 + 1000, 1000, force=True)
    assert [r.value for r in all_records(log)] == [b"late"]


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD, Compression.NONE]
)
def test_compression_is_preserved(tmp_path, codec):
    log = open_log(tmp_path / "p")
    w = Writer(log)
    for round_ in range(3):
        w.put([(kv(i), b"value-%d-%d" % (round_, i) * 5) for i in range(20)], compression=codec)
        w.put([(kv(i), b"extra-%d" % round_) for i in range(0, 20, 3)], compression=codec)
    log.roll()
    stats = LogCleaner().clean(log, T0, DAY)
    assert stats.records_removed > 0
    check_consistent(log, w)
    headers = [h for h, _ in log.scan()]
    assert headers and all(h.compression == codec for h in headers)
    assert any(h.records_count < h.last_offset_delta + 1 for h in headers)  # rebuilt with gaps


def test_many_small_segments_are_merged_and_indexes_rebuilt(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=4000, index_interval_bytes=64)
    w = Writer(log)
    for i in range(120):
        w.put([(kv(i % 30), b"value-%03d" % i)])
        if i % 3 == 2:
            log.roll()
    before = len(log.segments)
    assert before == 41
    stats = LogCleaner().clean(log, T0, DAY)
    check_consistent(log, w)
    assert stats.segments_before == before and stats.segments_after == len(log.segments) < 6
    for seg in log.segments:
        assert seg.size <= 4000
    for a, b in zip(log.segments, log.segments[1:]):
        assert a.next_offset <= b.base_offset
    indexes = [(s.base_offset, s.offset_index.entries(), s.time_index.entries()) for s in log.segments[:-1]]
    log.close()
    again = open_log(tmp_path / "p", segment_bytes=4000, index_interval_bytes=64)
    assert again.recovery.rebuilt_indexes == []
    assert [(s.base_offset, s.offset_index.entries(), s.time_index.entries()) for s in again.segments[:-1]] == indexes
    for seg in again.segments[:-1]:  # a rebuild from the data gives the same indexes
        entries = seg.offset_index.entries()
        seg.recover(seg.base_offset, T0, validate_from=0)
        assert seg.offset_index.entries() == entries
    check_consistent(again, w)
    check_reads(again)
    again.close()
    check_consistent(open_log(tmp_path / "p", clean=False, segment_bytes=4000, index_interval_bytes=64), w)


def test_group_that_does_not_fit_starts_a_new_segment(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=3000)
    w = Writer(log)
    for i in range(60):  # all distinct keys: nothing to remove, only merging
        w.put([(kv(i), bytes(100))])
        if i % 5 == 4:
            log.roll()
    stats = LogCleaner().clean(log, T0, DAY)
    check_consistent(log, w)
    assert stats.records_removed == 0
    closed = log.segments[:-1]
    assert 2 <= len(closed) < 12
    assert all(s.size <= 3000 for s in closed)
    assert all(s.size + closed[i + 1].size > 3000 for i, s in enumerate(closed[:-1]))


def test_cleaning_twice_changes_nothing(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=2000)
    w = Writer(log)
    for i in range(200):
        w.put([(kv(i % 17), b"v%d" % i)], ts=T0 + i)
    log.roll()
    cleaner = LogCleaner()
    cleaner.clean(log, T0, DAY)
    files = segment_files(log.path)
    inodes = {n: os.stat(os.path.join(log.path, n)).st_ino for n in files}
    stats = cleaner.clean(log, T0, DAY, force=True)
    assert stats.cleaned and stats.records_removed == 0 and stats.segments_rewritten == 0
    assert segment_files(log.path) == files
    assert {n: os.stat(os.path.join(log.path, n)).st_ino for n in files} == inodes
    assert not cleaner.needs_cleaning(log, T0, min_cleanable_ratio=0.0)
    assert not cleaner.clean(log, T0, DAY).cleaned
    check_consistent(log, w)


def test_null_keys_are_dropped_and_control_batches_kept(tmp_path):
    log = open_log(tmp_path / "p")
    w = Writer(log)
    w.put([(None, b"no key"), (b"a", b"1")])
    marker = build_control_batch(ControlType.COMMIT, producer_id=9, producer_epoch=2, coordinator_epoch=5)
    info = log.append(marker)
    w.put([(b"a", b"2")])
    log.roll()
    stats = LogCleaner().clean(log, T0, DAY)
    assert stats.records_removed == 2
    batches = [(h, bytes(d)) for h, d in log.scan()]
    assert [h.is_control for h, _ in batches] == [True, False]
    assert batches[0][1][8:] == marker[8:]  # byte for byte, but for the offset assigned at append
    assert batches[0][0].base_offset == info.first_offset
    control = batches[0][0].records()[0].control
    assert control.is_commit and control.coordinator_epoch == 5
    assert [(r.offset, r.key, r.value) for r in all_records(log)] == [(3, b"a", b"2")]


def test_producer_fields_and_sequences_are_preserved(tmp_path):
    log = open_log(tmp_path / "p")
    w = Writer(log)
    pairs = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")]
    w.put(pairs, producer_id=77, producer_epoch=3, base_sequence=2**31 - 2, compression=Compression.LZ4)
    w.put([(b"a", b"5")], producer_id=77, producer_epoch=3, base_sequence=2)
    log.roll()
    LogCleaner().clean(log, T0, DAY)
    check_consistent(log, w)
    first = next(iter(log.scan()))[0]
    assert (first.base_offset, first.last_offset, first.records_count) == (1, 3, 3)
    assert (first.producer_id, first.producer_epoch) == (77, 3)
    # Record at offset 1 had sequence 2**31 - 1; offset 3 had 1 (wrapped).
    assert first.base_sequence == 2**31 - 1 and first.last_sequence == 1
    assert first.compression == Compression.LZ4


def test_log_append_time_batches_keep_their_timestamp(tmp_path):
    log = open_log(tmp_path / "p", message_timestamp_type="LogAppendTime")
    w = Writer(log)
    log.append(build_batch([(b"a", b"1", (), 5), (b"b", b"2", (), 6)]), now_ms=T0 + 42)
    w.original.update({0: (b"a", b"1"), 1: (b"b", b"2")})
    w.put([(b"a", b"3")])
    w.table[b"b"] = b"2"
    w.latest[b"b"] = 1
    log.roll()
    LogCleaner().clean(log, T0 + HOUR, DAY)
    check_consistent(log, w)
    first = next(iter(log.scan()))[0]
    assert first.timestamp_type == TimestampType.LOG_APPEND_TIME and first.max_timestamp == T0 + 42
    assert [r.timestamp for r in first.records()] == [T0 + 42]


def test_active_segment_and_young_segments_are_not_cleaned(tmp_path):
    log = open_log(tmp_path / "p")
    w = Writer(log)
    w.put([(b"a", b"old")], ts=T0)
    log.roll()
    w.put([(b"a", b"young")], ts=T0 + HOUR)
    log.roll()
    w.put([(b"a", b"active")], ts=T0 + 2 * HOUR)
    cleaner = LogCleaner()
    rng = cleaner.cleanable_range(log, T0 + 2 * HOUR, min_compaction_lag_ms=HOUR + 1)
    assert (rng.first_dirty_offset, rng.first_uncleanable_offset) == (0, 1)
    cleaner.clean(log, T0 + 2 * HOUR, DAY, min_compaction_lag_ms=HOUR + 1)
    assert [r.value for r in all_records(log)] == [b"old", b"young", b"active"]  # nothing to compare with
    cleaner.clean(log, T0 + 2 * HOUR, DAY, min_compaction_lag_ms=0)
    assert [r.value for r in all_records(log)] == [b"young", b"active"]  # the active segment is never cleaned
    check_consistent(log, w)
    cleaner.clean(log, T0 + 2 * HOUR, DAY, roll_first=True, force=True)
    assert [r.value for r in all_records(log)] == [b"active"]
    check_consistent(log, w)


def test_dirty_ratio_and_checkpoint_survive_reopen(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=1000)
    w = Writer(log)
    for i in range(100):
        w.put([(kv(i % 4), b"x" * 20)])
    cleaner = LogCleaner()
    rng = cleaner.cleanable_range(log, T0)
    assert rng.clean_bytes == 0 and rng.dirty_ratio == 1.0 and rng.active_bytes == log.active_segment.size
    assert cleaner.needs_cleaning(log, T0)
    cleaner.clean(log, T0, DAY)
    end = read_cleaner_checkpoint(log.path).offset
    assert end == log.active_segment.base_offset
    assert not cleaner.needs_cleaning(log, T0, min_cleanable_ratio=0.0)
    log.close()
    log = w.log = open_log(tmp_path / "p", segment_bytes=1000)
    rng = cleaner.cleanable_range(log, T0)
    assert rng.first_dirty_offset == end and rng.dirty_bytes == 0 and rng.clean_bytes > 0
    for i in range(100, 200):
        w.put([(kv(i % 4), b"x" * 20)])
    rng = cleaner.cleanable_range(log, T0)
    assert rng.dirty_ratio > 0.5
    assert cleaner.needs_cleaning(log, T0, min_cleanable_ratio=0.5)
    assert not cleaner.needs_cleaning(log, T0, min_cleanable_ratio=rng.dirty_ratio + 0.01)
    cleaner.clean(log, T0, DAY)
    check_consistent(log, w)
    # An unreadable checkpoint or one past the log end means: everything is dirty.
    with open(os.path.join(log.path, CLEANER_CHECKPOINT_FILE), "r+b") as f:
        f.write(b"XXXX")
    assert read_cleaner_checkpoint(log.path) is None
    assert cleaner.cleanable_range(log, T0).first_dirty_offset == 0
    write_cleaner_checkpoint(log.path, CleanerCheckpoint(10**9))
    assert cleaner.cleanable_range(log, T0).first_dirty_offset == 0


@pytest.mark.slow
def test_bounded_offset_map_cleans_in_steps(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=800)
    w = Writer(log)
    for i in range(150):
        w.put([(kv(i % 40), b"v%d" % i)])
    log.roll()
    cleaner = LogCleaner(max_map_keys=15)
    stats = cleaner.clean(log, T0, DAY)
    assert 0 < stats.end_offset < log.active_segment.base_offset
    assert stats.map_keys <= 15
    check_consistent(log, w)
    for _ in range(60):
        stats = cleaner.clean(log, T0, DAY, min_cleanable_ratio=0.0)
        if not stats.cleaned:
            break
    assert read_cleaner_checkpoint(log.path).offset == log.active_segment.base_offset
    records = check_consistent(log, w)
    assert len(records) == 40


def test_policy_corruption_and_concurrent_changes(tmp_path):
    plain = open_log(tmp_path / "d", cleanup_policy="delete")
    with pytest.raises(ValueError):
        LogCleaner().clean(plain, T0, DAY)
    assert not LogCleaner().needs_cleaning(plain, T0)

    log = open_log(tmp_path / "p", cleanup_policy="compact,delete")
    w = Writer(log)
    for i in range(10):
        w.put([(kv(i % 3), b"v%d" % i)])
        log.roll()

    def truncate(step: str) -> None:
        if step.startswith("written"):
            log.truncate_to(5)

    with pytest.raises(CleaningAborted):
        LogCleaner(on_step=truncate).clean(log, T0, DAY)
    assert leftovers(log.path) == []
    assert [r.offset for r in all_records(log)] == [0, 1, 2, 3, 4]

    log2 = open_log(tmp_path / "q")
    w2 = Writer(log2)
    for i in range(10):
        w2.put([(kv(i % 3), b"v%d" % i)])
        log2.roll()
    seg = log2.segments[6]
    with open(seg.path(), "r+b") as f:
        f.seek(seg.size - 3)
        f.write(b"\xff")
    before = segment_files(log2.path)
    with pytest.raises(CorruptLog):
        LogCleaner().clean(log2, T0, DAY)
    assert segment_files(log2.path) == before and leftovers(log2.path) == []


# --------------------------------------------------------------------------
# crashes


class Crash(Exception):
    pass


def build_crash_log(path) -> tuple[PartitionLog, Writer]:
    log = open_log(path, segment_bytes=1500)
    w = Writer(log)
    for i in range(90):
        key = kv(i % 15)
        value = None if i % 11 == 5 else b"value-%03d-" % i + b"x" * 50
        w.put([(key, value), (kv(100 + i % 2), b"p%d" % i + b"y" * 50)], ts=T0 + i)
        if i % 6 == 5:
            log.roll()
    log.roll()
    w.put([(kv(0), b"active")], ts=T0 + 100)
    return log, w


@pytest.mark.slow
def test_crash_at_every_step_reopens_consistent(tmp_path):
    steps: list[str] = []
    log, w = build_crash_log(tmp_path / "dry")
    LogCleaner(chunk_bytes=300, on_step=steps.append).clean(log, T0 + 1000, 200)
    kinds = {s.split()[0] for s in steps}
    assert kinds == {"write", "written", "commit", "delete", "final", "checkpoint"}
    assert sum(s.startswith("written") for s in steps) >= 2  # several groups
    assert sum(s.startswith("write ") for s in steps) > sum(s.startswith("written") for s in steps)
    expected = replay(log)
    for k, step in enumerate(steps):
        path = tmp_path / f"run{k}"
        log, w = build_crash_log(path)
        seen = 0

        def crash(name: str, k=k, path=path) -> None:
            nonlocal seen
            if seen == k:
                shutil.copytree(path, tmp_path / f"crash{k}")
                raise Crash(name)
            seen += 1

        with pytest.raises(Crash):
            LogCleaner(chunk_bytes=300, on_step=crash).clean(log, T0 + 1000, 200)
        with contextlib.suppress(Exception):
            log.close()
        crashed = open_log(tmp_path / f"crash{k}", clean=False, segment_bytes=1500)
        assert leftovers(crashed.path) == [], step
        records = check_consistent(crashed, w)
        assert replay(crashed) == expected
        assert records[-1].value == b"active"
        LogCleaner().clean(crashed, T0 + 1000, 200, force=True)
        assert replay(crashed) == expected
        check_consistent(crashed, w)
        crashed.close()
        shutil.rmtree(path)


def test_leftover_files_at_open(tmp_path):
    log, w = build_crash_log(tmp_path / "p")
    directory = log.path
    log.close()
    # A committed swap whose old segments are half deleted: the first old
    # segment's log file is gone, its index files are still there.
    src = tmp_path / "side"
    shutil.copytree(directory, src)
    side = open_log(src, segment_bytes=1500)
    LogCleaner(chunk_bytes=300).clean(side, T0 + 1000, 200)
    expected = replay(side)
    cleaned_first = side.segments[0]
    side.close()
    base = cleaned_first.base_offset
    stem = f"{base:020d}"
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(os.path.join(src, stem + suffix), os.path.join(directory, stem + suffix + ".swap"))
    os.unlink(os.path.join(directory, stem + ".log"))
    open(os.path.join(directory, f"{7:020d}.log.cleaned"), "wb").write(b"junk")
    open(os.path.join(directory, f"{9:020d}.index.swap"), "wb").write(b"junk")
    log = open_log(directory, clean=False, segment_bytes=1500)
    assert leftovers(directory) == []
    notes = " ".join(log.recovery.notes)
    assert "interrupted cleaner swap" in notes and "unfinished cleaner output" in notes
    assert log.segments[0].size == cleaned_first.size
    check_consistent(log, w)
    assert replay(log) == expected


def test_failure_after_the_commit_point_is_completed_on_reopen(tmp_path):
    log, w = build_crash_log(tmp_path / "p")

    def fail(step: str) -> None:
        if step == "delete 12":
            raise OSError("disk trouble")

    with pytest.raises(OSError):
        LogCleaner(on_step=fail).clean(log, T0 + 1000, 200)
    assert log.segments[0].file_suffix == ".swap"
    check_consistent(log, w)  # the log keeps serving the committed output
    with pytest.raises(CleaningAborted):
        LogCleaner().clean(log, T0 + 1000, 200, force=True)
    expected = replay(log)
    log.close()
    log = open_log(tmp_path / "p", clean=False, segment_bytes=1500)
    assert leftovers(log.path) == [] and "interrupted cleaner swap" in " ".join(log.recovery.notes)
    check_consistent(log, w)
    assert replay(log) == expected
    LogCleaner().clean(log, T0 + 1000, 200, force=True)
    check_consistent(log, w)


def test_swap_that_ends_before_its_last_old_segment_leaves_only_stale_records(tmp_path):
    log = open_log(tmp_path / "p")
    w = Writer(log)
    w.put([(b"k1", b"a"), (b"k2", b"b")])  # segment 0: offsets 0, 1
    log.roll()
    w.put([(b"k1", b"c")])  # segment 2: superseded below
    log.roll()
    w.put([(b"k1", b"d")])  # segment 3
    log.roll()
    log.close()
    # A committed output for segments [0, 2] holding only k2@1; segment 2 was
    # not deleted yet, and recovery cannot know it belonged to the group.
    survivor = build_batch([(b"k2", b"b", (), T0)], base_offset=1)
    with open(os.path.join(log.path, f"{0:020d}.log.swap"), "wb") as f:
        f.write(survivor)
    log = w.log = open_log(tmp_path / "p", clean=False)
    assert [s.base_offset for s in log.segments] == [0, 2, 3, 4]
    assert [r.offset for r in check_consistent(log, w)] == [1, 2, 3]
    LogCleaner().clean(log, T0, DAY, force=True)
    assert [r.offset for r in check_consistent(log, w)] == [1, 3]


# --------------------------------------------------------------------------
# property test

KEYS = [b"a", b"b", b"c", b"d", b"e", b"", None]
put_op = st.tuples(
    st.just("put"),
    st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=12))), min_size=1, max_size=4),
    st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD]),
)
ops_strategy = st.lists(
    st.one_of(put_op, st.just(("roll",)), st.just(("clean",)), st.just(("tick",)), st.just(("reopen",))),
    max_size=60,
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(ops=ops_strategy, segment_bytes=st.sampled_from([200, 500, 100_000]))
def test_cleaning_matches_a_model(ops, segment_bytes):
    retention = 5000
    with tempfile.TemporaryDirectory() as tmp:
        clock = FakeClock()
        path = os.path.join(tmp, "p")
        log = open_log(path, clock, segment_bytes=segment_bytes)
        w = Writer(log)
        cleaner = LogCleaner(chunk_bytes=256)
        for op in ops:
            if op[0] == "put":
                w.put(op[1], ts=clock.now, compression=op[2])
            elif op[0] == "roll":
                log.roll()
            elif op[0] == "tick":
                clock.now += 3000
            elif op[0] == "reopen":
                log.close()
                log = open_log(path, clock, segment_bytes=segment_bytes)
                w.log = log
            else:
                cleaner.clean(log, clock.now, retention, min_cleanable_ratio=0.0)
                check_consistent(log, w)
                check_reads(log)
                assert leftovers(path) == []
        check_consistent(log, w)
        # Long after everything: roll, clean, and only live keys remain, once each.
        clock.now += 10 * retention
        cleaner.clean(log, clock.now, retention, roll_first=True, force=True)
        records = check_consistent(log, w)
        assert all(r.value is not None for r in records)
        assert sorted(r.key for r in records) == sorted(w.table)
        log.close()
        check_consistent(open_log(path, clock, clean=False, segment_bytes=segment_bytes), w)


# --------------------------------------------------------------------------
# replay cost


def timed_replay(log: PartitionLog) -> tuple[int, float]:
    start = time.perf_counter()
    n = sum(len(h.records()) for h, _ in log.scan())
    return n, time.perf_counter() - start


@pytest.mark.slow
def test_compacted_replay_is_bounded_by_live_keys(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=256 * 1024, index_interval_bytes=4096)
    w = Writer(log)
    updates, keys, per_batch = 100_000, 1000, 500
    for start in range(0, updates, per_batch):
        w.put([(kv(i % keys), b"value-%06d" % i) for i in range(start, start + per_batch)], ts=T0 + start)
    n_before, t_before = timed_replay(log)
    assert n_before == updates
    stats = LogCleaner().clean(log, T0 + DAY, DAY, roll_first=True)
    n_after, t_after = timed_replay(log)
    assert n_after == keys
    assert stats.records_removed == updates - keys
    assert stats.bytes_after * 50 < stats.bytes_before
    assert stats.segments_after <= 2 < stats.segments_before
    assert t_after * 10 < t_before
    check_consistent(log, w)
    assert [h.base_offset for h, _ in log.scan()][-1] >= updates - per_batch
