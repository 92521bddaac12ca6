"""Tests for broker.log: appends, reads, rolls, indexes, timestamps, retention, flushing.

Everything runs on real files in a temporary directory; batches are built with
``protocol.records.build_batch`` and checked by decoding what the log returns.
"""

from __future__ import annotations

import itertools
import os
import random
import struct
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.broker.log import (
    RECOVERY_POINT_FILE,
    InvalidBatch,
    LogClosed,
    LogConfig,
    OffsetOutOfRange,
    PartitionLog,
    RecordBatchTooLarge,
    RecordTooLarge,
    SegmentStats,
    select_for_deletion,
)
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import BatchHeader, TimestampType, build_batch, iter_batches, set_base_offset

T0 = 1_700_000_000_000


class FakeClock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def batch(n: int = 1, value_size: int = 10, ts: int | list[int] = T0, key: bytes = b"k") -> bytes:
    stamps = ts if isinstance(ts, list) else [ts] * n
    return build_batch([(key, bytes([i % 251]) * value_size, (), stamps[i]) for i in range(n)])


def open_log(path, clock=None, clean=True, **cfg) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**cfg), clock or FakeClock(), clean)


def headers(data) -> list[BatchHeader]:
    return [h for h, _ in iter_batches(data)]


def all_batches(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    return [(h.base_offset, h.last_offset, bytes(d)) for h, d in log.scan()]


# --------------------------------------------------------------------------
# append and read


def test_append_assigns_contiguous_offsets_and_round_trips(tmp_path):
    log = open_log(tmp_path / "p0")
    rng = random.Random(1)
    expected_next = 0
    appended = []
    for _ in range(40):
        n = rng.randint(1, 6)
        info = log.append(batch(n, rng.randint(0, 300)))
        assert info.first_offset == expected_next
        assert info.last_offset == expected_next + n - 1
        assert info.num_records == n
        appended.append((info.first_offset, n))
        expected_next += n
    assert log.log_end_offset == log.high_watermark == expected_next
    assert log.log_start_offset == 0
    for first, n in appended:
        result = log.read(first, 1 << 20)
        h, records = headers(result.data)[0], headers(result.data)[0].records()
        assert h.base_offset == first and h.records_count == n
        assert [r.offset for r in records] == list(range(first, first + n))
        assert h.verify_crc()
    log.close()


def test_written_bytes_are_the_appended_bytes_with_offsets(tmp_path):
    log = open_log(tmp_path / "p")
    raw = batch(3, 50) + batch(2, 7)
    info = log.append(raw)  # immutable bytes: copied, not modified
    assert info.first_offset == 0 and info.last_offset == 4 and info.bytes == len(raw)
    buf = bytearray(batch(4, 20))
    log.append(buf)
    assert BatchHeader.read(buf).base_offset == 5  # a bytearray is rewritten in place
    data = log.read(0, 1 << 20).data
    assert bytes(data[len(raw) :]) == bytes(buf)
    hs = headers(data)
    assert [(h.base_offset, h.last_offset) for h in hs] == [(0, 2), (3, 4), (5, 8)]
    assert all(h.verify_crc() for h in hs)


def test_segment_files_are_named_by_zero_padded_base_offset(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=1000)
    for _ in range(12):
        log.append(batch(2, 100))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2 and bases[0] == 0
    names = sorted(n for n in os.listdir(tmp_path / "p") if n.endswith(".log"))
    assert names == [f"{b:020d}.log" for b in bases]
    for seg, nxt in zip(log.segments, log.segments[1:]):
        assert seg.size <= 1000
        assert seg.next_offset == nxt.base_offset
    assert log.size_bytes == sum(s.size for s in log.segments)


def test_roll_by_size_keeps_every_offset_readable(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=2048, index_interval_bytes=128)
    sizes = [10, 500, 1000, 1900, 3, 700] * 5
    for size in sizes:
        log.append(batch(1, size))
    assert len(log.segments) > 5
    for offset in range(log.log_end_offset):
        h = headers(log.read(offset, 1).data)[0]
        assert h.base_offset == offset
        assert len(h.records()[0].value) == sizes[offset]


def test_roll_by_time_with_fake_clock(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path / "p", clock, segment_ms=1000)
    clock.advance(5000)  # an empty segment does not roll however old it is
    log.append(batch())
    assert len(log.segments) == 1
    clock.advance(600)
    log.append(batch())
    assert len(log.segments) == 1
    clock.advance(401)  # 1001 ms since the first append into the segment
    log.append(batch())
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.append(batch(), now_ms=clock.now + 999)
    assert len(log.segments) == 2
    log.append(batch(), now_ms=clock.now + 1001)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]


def test_oversized_append_rolls_then_fills_a_segment_alone(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=1000)
    log.append(batch(1, 100))
    big = batch(1, 900)
    assert len(big) <= 1000
    log.append(big)
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_read_from_the_middle_of_a_batch_returns_that_batch(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(batch(5))
    log.append(batch(5))
    for offset in range(10):
        result = log.read(offset, 1)
        h = headers(result.data)[0]
        assert h.base_offset == result.first_offset == (0 if offset < 5 else 5)
        assert h.base_offset <= offset <= h.last_offset
        assert result.next_offset == h.next_offset


def test_read_max_bytes_returns_whole_batches(tmp_path):
    log = open_log(tmp_path / "p", index_interval_bytes=64)
    one = batch(1, 100)
    size = len(one)
    for _ in range(10):
        log.append(one)
    for max_bytes in (size, size + 1, 2 * size + size // 2, 3 * size, 7 * size - 1):
        result = log.read(2, max_bytes)
        count = max_bytes // size
        assert len(result.data) == count * size
        assert [h.base_offset for h in headers(result.data)] == list(range(2, 2 + count))
        assert result.next_offset == 2 + count
    everything = log.read(0, 1 << 30)
    assert len(everything.data) == 10 * size and everything.next_offset == 10


def test_kip74_first_batch_bigger_than_max_bytes(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(batch(3, 1000))
    log.append(batch(1, 10))
    result = log.read(1, 100)
    hs = headers(result.data)
    assert len(hs) == 1 and hs[0].records_count == 3 and len(result.data) > 100
    assert result.next_offset == 3
    empty = log.read(1, 100, min_one_message=False)
    assert len(empty.data) == 0 and empty.next_offset == 1
    assert log.read(0, 0).next_offset == 3  # max_bytes 0 still gets one batch


def test_read_returns_one_segment_at_most(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=1000)
    for _ in range(10):
        log.append(batch(1, 300))
    first, second = log.segments[0], log.segments[1]
    result = log.read(0, 1 << 20)
    assert len(result.data) == first.size
    assert result.next_offset == second.base_offset
    assert headers(log.read(result.next_offset, 1 << 20).data)[0].base_offset == second.base_offset


def test_read_bounds(tmp_path):
    log = open_log(tmp_path / "p")
    for _ in range(3):
        log.append(batch(2))
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read(7, 100)
    assert exc.value.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (exc.value.log_start_offset, exc.value.log_end_offset) == (0, 6)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    end = log.read(6, 100)
    assert len(end.data) == 0 and end.next_offset == 6 and end.high_watermark == 6


def test_read_max_offset_excludes_batches_at_or_past_it(tmp_path):
    log = open_log(tmp_path / "p")
    for _ in range(5):
        log.append(batch(2))
    result = log.read(0, 1 << 20, max_offset=4)
    assert [h.base_offset for h in headers(result.data)] == [0, 2]
    assert result.next_offset == 4
    assert len(log.read(4, 1 << 20, max_offset=4).data) == 0
    assert len(log.read(2, 1 << 20, max_offset=3).data) == 0  # batch 2..3 straddles it


def test_read_region_names_the_same_bytes(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=4000, index_interval_bytes=100)
    for i in range(30):
        log.append(batch(1 + i % 3, 50 + i * 7))
    for offset in range(0, log.log_end_offset, 3):
        result = log.read(offset, 700)
        region = log.read_region(offset, 700)
        assert region.length == len(result.data)
        assert os.pread(region.fd, region.length, region.position) == bytes(result.data)
        assert (region.first_offset, region.next_offset) == (result.first_offset, result.next_offset)
    assert log.read_region(log.log_end_offset, 100).length == 0


# --------------------------------------------------------------------------
# append validation


def test_append_rejects_bad_input_and_leaves_the_log_alone(tmp_path):
    log = open_log(tmp_path / "p", max_message_bytes=500, segment_bytes=2000)
    log.append(batch(2))
    size = log.size_bytes
    with pytest.raises(InvalidBatch) as exc:
        log.append(b"\x00" * 80)
    assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(InvalidBatch):
        log.append(batch() + b"\x00\x01")  # trailing partial batch
    with pytest.raises(RecordTooLarge):
        log.append(batch(1, 600))
    with pytest.raises(RecordBatchTooLarge):
        log.append(b"".join(batch(1, 400) for _ in range(6)))
    with pytest.raises(InvalidBatch):
        log.append(b"")
    assert log.size_bytes == size and log.log_end_offset == 2


def test_append_with_given_offsets(tmp_path):
    log = open_log(tmp_path / "p")
    given_ = bytearray(batch(3))
    set_base_offset(given_, 10)
    info = log.append(given_, assign_offsets=False)
    assert (info.first_offset, info.last_offset) == (10, 12)
    assert log.log_end_offset == 13
    assert headers(log.read(5, 100).data)[0].base_offset == 10  # an offset in a gap reads what follows
    stale = bytearray(batch())
    set_base_offset(stale, 12)
    with pytest.raises(InvalidBatch):
        log.append(stale, assign_offsets=False)


def test_log_append_time_is_stamped(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path / "p", clock, message_timestamp_type="LogAppendTime")
    info = log.append(batch(3, ts=[5, 6, 7]) + batch(1, ts=9), now_ms=T0 + 42)
    assert info.log_append_time == info.max_timestamp == T0 + 42
    for h in headers(log.read(0, 1 << 20).data):
        assert h.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert h.max_timestamp == T0 + 42 and h.verify_crc()
        assert all(r.timestamp == T0 + 42 for r in h.records())
    plain = open_log(tmp_path / "q", clock)
    assert plain.append(batch(2, ts=[5, 9])).log_append_time == -1
    assert plain.append(batch(2, ts=[5, 9])).max_timestamp == 9


# --------------------------------------------------------------------------
# indexes


def _check_indexes(log: PartitionLog, interval: int) -> None:
    for seg in log.segments:
        positions = [(pos, base, last) for pos, base, last in _batches_of(log, seg)]
        entries = seg.offset_index.entries()
        assert entries and entries[0] == (positions[0][1] - seg.base_offset, 0)
        by_pos = {pos: base for pos, base, _ in positions}
        for (_, p1), (_, p2) in itertools.pairwise(entries):
            assert p2 - p1 >= interval  # sparse: one entry per interval of log bytes
        for rel, pos in entries:
            assert by_pos[pos] == seg.base_offset + rel  # entries point at batch starts
        gaps = [p2 - p1 for (_, p1), (_, p2) in itertools.pairwise(entries)]
        biggest = max(last_pos_size for last_pos_size in _sizes(positions, seg.size))
        assert all(g <= interval + biggest for g in gaps)
        for pos, base, last in positions:
            for offset in range(base, last + 1):
                found = seg.index_lookup(offset)
                assert found <= pos  # never past the batch holding the offset
                assert by_pos[found] <= offset


def _batches_of(log, seg):
    out = []
    for h, _ in log.scan(seg.base_offset, end_offset=seg.next_offset):
        if h.base_offset >= seg.base_offset:
            out.append(h)
    pos = 0
    result = []
    for h in out:
        result.append((pos, h.base_offset, h.last_offset))
        pos += h.size
    assert pos == seg.size
    return result


def _sizes(positions, end):
    starts = [p for p, _, _ in positions] + [end]
    return [b - a for a, b in itertools.pairwise(starts)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(1, 8), st.integers(0, 140)), min_size=1, max_size=60),
    st.sampled_from([0, 64, 300, 1000]),
    st.sampled_from([1500, 4000, 1 << 20]),
)
def test_index_property(shapes, interval, segment_bytes):
    with tempfile.TemporaryDirectory() as d:
        log = open_log(os.path.join(d, "p"), index_interval_bytes=interval, segment_bytes=segment_bytes)
        for n, size in shapes:
            log.append(batch(n, size))
        assert log.log_end_offset == sum(n for n, _ in shapes)
        for offset in range(log.log_end_offset):
            result = log.read(offset, 1)
            h = headers(result.data)[0]
            assert h.base_offset <= offset <= h.last_offset
            assert result.next_offset == h.last_offset + 1
        _check_indexes(log, interval)
        before = [(s.offset_index.entries(), s.time_index.entries()) for s in log.segments]
        log.close()
        reopened = open_log(os.path.join(d, "p"), index_interval_bytes=interval, segment_bytes=segment_bytes)
        assert not reopened.recovery.rebuilt_indexes
        assert [(s.offset_index.entries(), s.time_index.entries()) for s in reopened.segments] == before
        reopened.close()


def test_index_files_use_kafkas_layout(tmp_path):
    log = open_log(tmp_path / "p", index_interval_bytes=100)
    for i in range(10):
        log.append(batch(2, 80, ts=T0 + i))
    seg = log.segments[0]
    entries, times = seg.offset_index.entries(), seg.time_index.entries()
    log.close()
    raw = (tmp_path / "p" / f"{0:020d}.index").read_bytes()
    assert [tuple(e) for e in struct.iter_unpack(">ii", raw)] == entries
    raw_time = (tmp_path / "p" / f"{0:020d}.timeindex").read_bytes()
    assert [tuple(e) for e in struct.iter_unpack(">qi", raw_time)] == times
    assert times[-1] == (T0 + 9, 18)  # the close records the final max timestamp


def test_full_index_rolls_the_segment(tmp_path):
    log = open_log(tmp_path / "p", index_interval_bytes=0, segment_index_bytes=24)  # 3 offset entries
    for _ in range(7):
        log.append(batch())
    assert [s.base_offset for s in log.segments] == [0, 3, 6]


# --------------------------------------------------------------------------
# timestamps


def _expected_offset_for(batches: list[list[int]], target: int):
    offset = 0
    for stamps in batches:
        if max(stamps) >= target:
            for i, ts in enumerate(stamps):
                if ts >= target:
                    return offset + i, ts
        offset += len(stamps)
    return None


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=5), min_size=1, max_size=40),
    st.sampled_from([0, 200]),
)
def test_offset_for_timestamp_matches_kafka_rule(stamps, interval):
    with tempfile.TemporaryDirectory() as d:
        log = open_log(os.path.join(d, "p"), index_interval_bytes=interval, segment_bytes=1200)
        for s in stamps:
            log.append(batch(len(s), 20, ts=[T0 + t for t in s]))
        for target in (-5, 0, 1, 250, 500, 999, 1000, 1001):
            want = _expected_offset_for(stamps, target)
            if want is not None:
                want = (want[0], T0 + want[1])
            assert log.offset_for_timestamp(T0 + target) == want
        flat = [t for s in stamps for t in s]
        top = max(flat)
        assert log.max_timestamp_offset() == (flat.index(top), T0 + top)
        log.close()


def test_timestamp_lookups_on_empty_log(tmp_path):
    log = open_log(tmp_path / "p")
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None


# --------------------------------------------------------------------------
# retention, truncation, deletion


def test_retention_by_time(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path / "p", clock, segment_bytes=600, retention_ms=10_000)
    for i in range(12):
        log.append(batch(1, 200, ts=T0 + i * 1000))
    segs = log.segments
    assert len(segs) >= 4
    assert log.enforce_retention(T0 + 10_000) == 0
    # segments whose newest record is older than 10 s go; the active one stays
    now = T0 + 14_500
    doomed = [s for s in segs[:-1] if now - s.max_timestamp > 10_000]
    assert doomed and doomed == list(segs[: len(doomed)])
    assert log.enforce_retention(now) == len(doomed)
    assert log.log_start_offset == segs[len(doomed)].base_offset
    for s in doomed:
        assert not os.path.exists(s.path()) and not os.path.exists(s.path(".index"))
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert headers(log.read(log.log_start_offset, 100).data)[0].base_offset == log.log_start_offset
    closed = len(log.segments) - 1
    assert log.enforce_retention(T0 + 10**9) == closed
    assert len(log.segments) == 1 and log.log_end_offset == 12


def test_retention_by_size(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=1000, retention_bytes=2500, retention_ms=-1)
    for _ in range(20):
        log.append(batch(1, 300))
    sizes = [s.size for s in log.segments]
    deleted = log.enforce_retention(T0)
    assert deleted > 0
    assert log.size_bytes >= 2500
    assert log.size_bytes - log.segments[0].size < 2500  # one more deletion would go below
    assert sum(sizes[deleted:]) == log.size_bytes


def test_retention_respects_cleanup_policy(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=500, retention_bytes=0, cleanup_policy="compact")
    for _ in range(5):
        log.append(batch(1, 300))
    assert log.enforce_retention(T0) == 0


def test_select_for_deletion_takes_a_prefix():
    segs = [
        SegmentStats(0, 100, 10),
        SegmentStats(1, 100, 50),
        SegmentStats(2, 100, 20),
        SegmentStats(3, 100, 90),
    ]
    by_time = select_for_deletion(segs, now_ms=100, retention_ms=60, retention_bytes=-1, total_bytes=500)
    assert (by_time.count, by_time.by_time) == (1, 1)  # segment 2 is old but segment 1 is not
    by_size = select_for_deletion(segs, now_ms=100, retention_ms=-1, retention_bytes=250, total_bytes=500)
    assert (by_size.count, by_size.by_size, by_size.bytes) == (2, 2, 200)
    both = select_for_deletion(segs, now_ms=100, retention_ms=60, retention_bytes=150, total_bytes=500)
    assert (both.count, both.by_time, both.by_size) == (3, 1, 2)
    assert select_for_deletion([], now_ms=0, retention_ms=0, retention_bytes=0, total_bytes=0).count == 0


def test_truncate_to_drops_the_straddling_batch(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=800)
    for _ in range(10):
        log.append(batch(3, 60))
    kept = all_batches(log)[:4]
    removed = log.truncate_to(13)  # inside the batch 12..14
    assert removed > 0
    assert log.log_end_offset == 12 and log.recovery_point <= 12
    assert all_batches(log) == kept
    assert log.append(batch()).first_offset == 12
    log.close()
    again = open_log(tmp_path / "p", clean=False, segment_bytes=800)
    assert again.log_end_offset == 13 and not again.recovery.truncated
    again.close()


def test_truncate_below_log_start_starts_over(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=500, retention_bytes=0)
    for _ in range(6):
        log.append(batch(1, 300))
    log.enforce_retention(T0)
    start = log.log_start_offset
    assert start > 0
    log.truncate_to(start - 1)
    assert log.log_start_offset == log.log_end_offset == start - 1
    assert len(log.segments) == 1 and log.size_bytes == 0


def test_delete_removes_the_directory(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(batch())
    log.delete()
    assert not (tmp_path / "p").exists()
    assert os.listdir(tmp_path) == []
    with pytest.raises(LogClosed):
        log.append(batch())


# --------------------------------------------------------------------------
# flushing


def test_flush_target_and_mark_flushed(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path / "p", clock, flush_interval_messages=5, flush_interval_ms=1000)
    assert not log.needs_flush()
    log.append(batch(2))
    assert log.unflushed_messages == 2 and not log.needs_flush()
    clock.advance(1000)
    assert log.needs_flush()
    fds, offset = log.flush_target()
    assert offset == 2 and log.active_segment.fd in fds
    for fd in fds:
        os.fsync(fd)
    log.mark_flushed(offset)
    assert log.recovery_point == 2 and not log.needs_flush()
    log.append(batch(5))
    assert log.needs_flush()  # by message count
    log.flush()
    assert log.recovery_point == 7
    raw = (tmp_path / "p" / RECOVERY_POINT_FILE).read_bytes()
    assert len(raw) == 16 and struct.unpack(">q", raw[4:12])[0] == 7
    fds, offset = log.flush_target()
    assert offset == 7 and log.active_segment.fd not in fds


def test_flush_after_roll_syncs_the_rolled_segment_and_its_indexes(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=500)
    log.append(batch(1, 300))
    log.append(batch(1, 300))  # rolls
    old, new = log.segments
    fds, offset = log.flush_target()
    assert old.fd in fds and new.fd in fds and offset == 2
    index_fds = [fd for fd in fds if fd not in (old.fd, new.fd)]
    assert index_fds  # the rolled segment's index files (and the directory)
    for fd in fds:
        os.fsync(fd)
    log.mark_flushed(offset)
    assert log.recovery_point == 2
    log.close()


def test_overlapping_flush_targets_keep_shared_descriptors_open(tmp_path):
    """Two rounds in flight (the flusher overlaps two) both hold the rolled segment's index files
    and the directory: the round that ends first must not close them under the other."""
    log = open_log(tmp_path / "p", segment_bytes=500)
    log.append(batch(1, 300))
    log.append(batch(1, 300))  # rolls: index files and the directory wait for an fsync
    old, new = log.segments
    first_fds, first = log.flush_target()
    log.append(batch(1, 10))
    second_fds, second = log.flush_target()
    shared = [fd for fd in first_fds if fd not in (old.fd, new.fd)]
    assert shared and all(fd in second_fds for fd in shared)
    for fd in second_fds:
        os.fsync(fd)
    log.mark_flushed(second, fds=second_fds)  # the later round ends first
    assert log.recovery_point == 3
    for fd in first_fds:
        os.fsync(fd)  # EBADF here if the first end closed them
    log.mark_flushed(first, fds=first_fds)
    assert log.recovery_point == 3
    for fd in shared:  # both rounds are done with them: closed now
        with pytest.raises(OSError):
            os.fstat(fd)
    log.close()


def test_truncation_caps_a_stale_flush_target(tmp_path):
    log = open_log(tmp_path / "p")
    for _ in range(4):
        log.append(batch())
    _, offset = log.flush_target()
    log.truncate_to(1)
    for _ in range(5):
        log.append(batch())
    log.mark_flushed(offset)  # taken before the truncation: covers only offset 0
    assert log.recovery_point == 1


# --------------------------------------------------------------------------
# scanning and lifecycle


def test_scan_reads_everything_in_chunks(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=3000, index_interval_bytes=200)
    expected = []
    for i in range(40):
        info = log.append(batch(1 + i % 4, 37 * (i % 9)))
        expected.append((info.first_offset, info.last_offset))
    for chunk in (64, 1000, 1 << 20):
        got = [(h.base_offset, h.last_offset) for h, d in log.scan(chunk_bytes=chunk)]
        assert got == expected
    middle = expected[17][0] + 1
    got = [(h.base_offset, h.last_offset) for h, _ in log.scan(middle, end_offset=expected[30][0])]
    assert got == expected[17:30]
    for h, data in log.scan():
        assert len(data) == h.size and h.verify_crc()
    with pytest.raises(OffsetOutOfRange):
        log.scan(log.log_end_offset + 1)
    assert list(log.scan(log.log_end_offset)) == []


def test_scan_meeting_a_segment_deleted_meanwhile_stops(tmp_path):
    log = open_log(tmp_path / "p", segment_bytes=500, retention_bytes=0)
    for _ in range(6):
        log.append(batch(1, 300))
    bases = [s.base_offset for s in log.segments]
    scan = log.scan()
    assert next(scan)[0].base_offset == 0
    log.enforce_retention(T0)
    with pytest.raises(OffsetOutOfRange):
        list(scan)
    names = os.listdir(tmp_path / "p")
    assert f"{bases[1]:020d}.log" not in names  # nothing was recreated


def test_closed_log_refuses_work(tmp_path):
    log = open_log(tmp_path / "p")
    log.append(batch())
    log.close()
    log.close()  # idempotent
    for call in (lambda: log.append(batch()), lambda: log.read(0, 10), log.flush_target):
        with pytest.raises(LogClosed):
            call()


def test_config_validation():
    with pytest.raises(ValueError):
        LogConfig(message_timestamp_type="Whenever")
    with pytest.raises(ValueError):
        LogConfig(cleanup_policy="shred")
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=2**31)
    assert LogConfig(cleanup_policy="compact,delete").deletes
    assert not LogConfig(cleanup_policy=("compact",)).deletes
