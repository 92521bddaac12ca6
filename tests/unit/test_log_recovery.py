"""Crash recovery of broker.log: torn tails, corrupt batches, lost indexes.

A crash is simulated by copying the partition directory while the log is
still open: the copy holds exactly what a killed process leaves behind (the
page cache contents, no final index files, a stale recovery point).  The copy
is then damaged on purpose and opened with ``clean_shutdown=False``.
"""

from __future__ import annotations

import os
import shutil
import struct

import pytest

from shoal.broker.log import RECOVERY_POINT_FILE, LogConfig, PartitionLog
from shoal.protocol.records import build_batch, iter_batches

T0 = 1_700_000_000_000


def clock() -> int:
    return T0


def batch(n: int, value_size: int, seed: int) -> bytes:
    return build_batch([(b"key", bytes([(seed + i) % 256]) * value_size, (), T0 + seed) for i in range(n)])


def config(**overrides) -> LogConfig:
    base = {"segment_bytes": 4096, "index_interval_bytes": 256}
    base.update(overrides)
    return LogConfig(**base)


def make_log(path, count: int = 30, **overrides) -> PartitionLog:
    log = PartitionLog.open(path, config(**overrides), clock, True)
    for i in range(count):
        log.append(batch(1 + i % 3, 40 + (i * 37) % 300, i))
    return log


def contents(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    return [(h.base_offset, h.last_offset, bytes(d)) for h, d in log.scan()]


def crash_copy(log: PartitionLog, dest) -> str:
    shutil.copytree(log.path, dest)
    return str(dest)


def reopen(path, clean: bool = False, **overrides) -> PartitionLog:
    return PartitionLog.open(path, config(**overrides), clock, clean)


def seg_file(path, base: int, suffix: str = ".log") -> str:
    return os.path.join(path, f"{base:020d}{suffix}")


def batch_positions(file: str) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of every batch in a segment file."""
    data = open(file, "rb").read()
    out, pos = [], 0
    for h, _ in iter_batches(data):
        out.append((pos, h.base_offset, h.size))
        pos += h.size
    return out


def flip_byte(file: str, position: int) -> None:
    with open(file, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0x5A]))


# --------------------------------------------------------------------------


def test_clean_reopen_keeps_everything_and_loads_indexes(tmp_path):
    log = make_log(tmp_path / "p")
    before = contents(log)
    indexes = [(s.offset_index.entries(), s.time_index.entries()) for s in log.segments]
    assert len(log.segments) > 2
    log.close()
    again = reopen(tmp_path / "p", clean=True)
    report = again.recovery
    assert report.clean_shutdown and not report.truncated and not report.rebuilt_indexes
    assert not report.recovered_segments
    assert contents(again) == before
    assert [(s.offset_index.entries(), s.time_index.entries()) for s in again.segments] == indexes
    assert again.recovery_point == again.log_end_offset
    assert again.append(batch(1, 10, 99)).first_offset == before[-1][1] + 1
    again.close()


def test_unclean_reopen_of_an_intact_log_keeps_everything(tmp_path):
    log = make_log(tmp_path / "p")
    log.flush()
    rp = log.recovery_point
    for i in range(10):
        log.append(batch(2, 100, 50 + i))
    before = contents(log)
    crashed = reopen(crash_copy(log, tmp_path / "crash"))
    report = crashed.recovery
    assert not report.truncated and report.recovery_point == rp
    assert contents(crashed) == before
    rp_segment = max(s.base_offset for s in crashed.segments if s.base_offset <= rp - 1)
    assert report.recovered_segments == [s.base_offset for s in crashed.segments if s.base_offset >= rp_segment]
    after_rp = sum(len(d) for first, last, d in before if last >= rp)
    assert report.validated_bytes == after_rp
    assert crashed.recovery_point == rp  # recovery itself made nothing more durable
    log.close()
    crashed.close()


@pytest.mark.parametrize("cut_into", [1, 11, 12, 30, 61, "middle", "last"])
def test_torn_batch_is_cut_exactly_after_the_last_whole_batch(tmp_path, cut_into):
    log = make_log(tmp_path / "p")
    before = contents(log)
    path = crash_copy(log, tmp_path / "crash")
    last = log.segments[-1].base_offset
    pos, base, size = batch_positions(seg_file(path, last))[-1]
    cut = {"middle": size // 2, "last": size - 1}.get(cut_into, cut_into)
    os.truncate(seg_file(path, last), pos + cut)
    crashed = reopen(path)
    report = crashed.recovery
    assert [(t.segment_base_offset, t.position, t.bytes) for t in report.truncations] == [(last, pos, cut)]
    assert "torn" in report.truncations[0].reason
    assert crashed.log_end_offset == base
    assert contents(crashed) == [b for b in before if b[0] < base]
    assert os.path.getsize(seg_file(path, last)) == pos
    assert crashed.append(batch(1, 5, 7)).first_offset == base
    log.close()
    crashed.close()


def test_crc_corruption_cuts_at_the_bad_batch(tmp_path):
    log = make_log(tmp_path / "p")
    before = contents(log)
    path = crash_copy(log, tmp_path / "crash")
    last = log.segments[-1].base_offset
    positions = batch_positions(seg_file(path, last))
    pos, base, size = positions[len(positions) // 2]
    flip_byte(seg_file(path, last), pos + size - 3)  # inside a record value
    crashed = reopen(path)
    (t,) = crashed.recovery.truncations
    assert (t.position, t.bytes) == (pos, os.path.getsize(seg_file(log.path, last)) - pos)
    assert "CRC" in t.reason
    assert crashed.log_end_offset == base
    assert contents(crashed) == [b for b in before if b[0] < base]
    log.close()
    crashed.close()


@pytest.mark.parametrize("garbage", [b"\x00" * 100, b"\xab" * 7, os.urandom(300), b"\x00" * 12])
def test_garbage_after_the_last_batch_is_removed(tmp_path, garbage):
    log = make_log(tmp_path / "p")
    before = contents(log)
    path = crash_copy(log, tmp_path / "crash")
    last = log.segments[-1].base_offset
    size = os.path.getsize(seg_file(path, last))
    with open(seg_file(path, last), "ab") as f:
        f.write(garbage)
    crashed = reopen(path)
    (t,) = crashed.recovery.truncations
    assert (t.segment_base_offset, t.position, t.bytes) == (last, size, len(garbage))
    assert contents(crashed) == before
    assert crashed.log_end_offset == log.log_end_offset
    log.close()
    crashed.close()


def test_a_valid_batch_with_offsets_going_back_is_cut(tmp_path):
    log = make_log(tmp_path / "p")
    before = contents(log)
    path = crash_copy(log, tmp_path / "crash")
    last = log.segments[-1].base_offset
    size = os.path.getsize(seg_file(path, last))
    with open(seg_file(path, last), "ab") as f:
        f.write(before[-2][2])  # a whole batch with a good CRC, but old offsets
    crashed = reopen(path)
    (t,) = crashed.recovery.truncations
    assert (t.position, t.bytes) == (size, len(before[-2][2]))
    assert "offset" in t.reason
    assert contents(crashed) == before
    log.close()
    crashed.close()


def test_corruption_in_an_earlier_segment_deletes_the_later_ones(tmp_path):
    log = make_log(tmp_path / "p", count=60)  # never flushed: the recovery point is 0
    before = contents(log)
    path = crash_copy(log, tmp_path / "crash")
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    victim = bases[1]
    pos, base, _ = batch_positions(seg_file(path, victim))[2]
    flip_byte(seg_file(path, victim), pos + 30)  # inside the CRC'd header part
    crashed = reopen(path)
    report = crashed.recovery
    assert report.truncations[0].segment_base_offset == victim
    assert report.truncations[0].position == pos
    assert report.deleted_segments == bases[2:]
    assert report.deleted_bytes == sum(os.path.getsize(seg_file(log.path, b)) for b in bases[2:])
    assert [s.base_offset for s in crashed.segments] == bases[:2]
    for b in bases[2:]:
        assert not os.path.exists(seg_file(path, b))
        assert not os.path.exists(seg_file(path, b, ".index"))
    assert contents(crashed) == [b for b in before if b[0] < base]
    assert report.truncated_bytes == report.truncations[0].bytes + report.deleted_bytes
    assert "truncated segment" in report.summary()
    log.close()
    crashed.close()


def test_a_segment_emptied_by_recovery_is_dropped(tmp_path):
    log = make_log(tmp_path / "p")
    log.roll()
    log.append(batch(2, 500, 1))
    before = contents(log)
    path = crash_copy(log, tmp_path / "crash")
    last = log.segments[-1].base_offset
    os.truncate(seg_file(path, last), 100)
    crashed = reopen(path)
    assert crashed.recovery.deleted_segments == [last]
    assert crashed.log_end_offset == last
    assert contents(crashed) == before[:-1]
    crashed.append(batch(1, 10, 2))
    assert crashed.log_end_offset == last + 1
    log.close()
    crashed.close()


def test_recovery_point_skips_already_validated_data(tmp_path):
    log = make_log(tmp_path / "p", count=12, segment_bytes=1 << 20)
    log.flush()
    rp = log.recovery_point
    for i in range(6):
        log.append(batch(1, 80, 100 + i))
    before = contents(log)
    path = crash_copy(log, tmp_path / "crash")
    positions = batch_positions(seg_file(path, 0))
    early_pos, early_base, early_size = positions[3]
    assert early_base < rp
    flip_byte(seg_file(path, 0), early_pos + early_size - 2)  # before the recovery point
    late_pos, late_base, _ = next(p for p in positions if p[1] >= rp + 2)
    shutil.copytree(path, tmp_path / "late")
    flip_byte(seg_file(tmp_path / "late", 0), late_pos + 40)  # and past it in another copy

    skipped = reopen(path)
    assert not skipped.recovery.truncated  # data below the recovery point is not re-checked
    assert skipped.log_end_offset == log.log_end_offset
    assert skipped.recovery.validated_bytes == sum(len(d) for f, last, d in before if last >= rp)
    skipped.close()

    late = reopen(tmp_path / "late")
    assert [t.position for t in late.recovery.truncations] == [late_pos]
    assert late.log_end_offset == late_base
    late.close()

    os.unlink(os.path.join(path, RECOVERY_POINT_FILE))  # without it everything is checked
    full = reopen(path)
    assert [t.position for t in full.recovery.truncations] == [early_pos]
    assert full.log_end_offset == early_base
    assert any("recovery-point" in note for note in full.recovery.notes)
    full.close()
    log.close()


def test_flush_taken_before_a_roll_does_not_vouch_for_its_index_files(tmp_path):
    log = make_log(tmp_path / "p", count=5, segment_bytes=1 << 20)
    fds, offset = log.flush_target()
    rolled = log.roll()  # writes the old segment's index files, not yet synced
    for fd in fds:
        os.fsync(fd)
    log.mark_flushed(offset)
    assert log.recovery_point == offset == rolled.base_offset
    fds, _ = log.flush_target()
    index_fds = [fd for fd in fds if fd not in (log.segments[0].fd, rolled.fd)]
    assert len(index_fds) >= 2  # still owed an fsync
    crashed = reopen(crash_copy(log, tmp_path / "crash"), segment_bytes=1 << 20)
    # the recovery point sits exactly at the old segment's end: it is re-walked
    assert crashed.recovery.recovered_segments == [0, rolled.base_offset]
    assert contents(crashed) == contents(log)
    crashed.close()
    log.append(batch(1, 10, 1))
    log.flush()
    assert log.recovery_point == rolled.base_offset + 1
    crashed = reopen(crash_copy(log, tmp_path / "crash2"), segment_bytes=1 << 20)
    assert crashed.recovery.recovered_segments == [rolled.base_offset]
    crashed.close()
    log.close()


def test_unreadable_recovery_point_means_check_everything(tmp_path):
    log = make_log(tmp_path / "p")
    log.flush()
    path = crash_copy(log, tmp_path / "crash")
    with open(os.path.join(path, RECOVERY_POINT_FILE), "r+b") as f:
        f.seek(6)
        f.write(b"\xff")
    crashed = reopen(path)
    assert crashed.recovery.recovery_point == 0
    assert crashed.recovery.recovered_segments == [s.base_offset for s in crashed.segments]
    assert crashed.recovery.validated_bytes == crashed.size_bytes
    assert contents(crashed) == contents(log)
    log.close()
    crashed.close()


def test_missing_index_files_are_rebuilt(tmp_path):
    log = make_log(tmp_path / "p")
    before = contents(log)
    log.close()
    again = reopen(tmp_path / "p", clean=True)
    indexes = [(s.offset_index.entries(), s.time_index.entries()) for s in again.segments]
    again.close()
    for name in os.listdir(tmp_path / "p"):
        if name.endswith((".index", ".timeindex")):
            os.unlink(tmp_path / "p" / name)
    rebuilt = reopen(tmp_path / "p", clean=True)
    assert [b for b, _ in rebuilt.recovery.rebuilt_indexes] == [s.base_offset for s in rebuilt.segments]
    assert not rebuilt.recovery.truncated
    assert [(s.offset_index.entries(), s.time_index.entries()) for s in rebuilt.segments] == indexes
    assert contents(rebuilt) == before
    for offset in range(rebuilt.log_end_offset):
        first = next(iter_batches(rebuilt.read(offset, 1).data))[0]
        assert first.base_offset <= offset <= first.last_offset
    rebuilt.close()
    assert all(os.path.exists(seg_file(tmp_path / "p", b, ".index")) for b, _, _ in before[:1])


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[:-3],  # not a whole number of entries
        lambda raw: raw[8:16] + raw[:8] + raw[16:],  # entries out of order
        lambda raw: raw[:-8] + struct.pack(">ii", 10**6, 10**8),  # points past the log
        lambda raw: raw[:4] + struct.pack(">i", 5) + raw[8:],  # first entry not at position 0
        lambda raw: b"",  # empty index for a non-empty log
    ],
)
def test_inconsistent_offset_index_is_rebuilt(tmp_path, damage):
    log = make_log(tmp_path / "p", count=20, segment_bytes=1 << 20, index_interval_bytes=64)
    before = contents(log)
    entries = log.segments[0].offset_index.entries()
    assert len(entries) > 3
    log.close()
    index = seg_file(tmp_path / "p", 0, ".index")
    raw = open(index, "rb").read()
    open(index, "wb").write(damage(raw))
    again = reopen(tmp_path / "p", clean=True, segment_bytes=1 << 20, index_interval_bytes=64)
    assert [b for b, _ in again.recovery.rebuilt_indexes] == [0]
    assert again.segments[0].offset_index.entries() == entries
    assert contents(again) == before
    again.close()


@pytest.mark.slow
def test_every_cut_position_recovers_a_prefix(tmp_path):
    log = make_log(tmp_path / "p", count=8, segment_bytes=1 << 20)
    before = contents(log)
    ends = [(first, len(d)) for first, _, d in before]
    path = log.segments[0].path()
    size = os.path.getsize(path)
    log.close()
    for cut in range(0, size + 1, 13):
        work = tmp_path / f"cut{cut}"
        shutil.copytree(tmp_path / "p", work)
        os.unlink(os.path.join(work, RECOVERY_POINT_FILE))
        os.truncate(seg_file(work, 0), cut)
        crashed = reopen(work)
        whole, total = 0, 0
        for _, length in ends:
            if total + length > cut:
                break
            total += length
            whole += 1
        assert contents(crashed) == before[:whole]
        assert crashed.size_bytes == total
        expected_end = before[whole][0] if whole < len(before) else before[-1][1] + 1
        assert crashed.log_end_offset == expected_end
        crashed.close()
        shutil.rmtree(work)


def test_recovered_log_continues_and_reopens_cleanly(tmp_path):
    log = make_log(tmp_path / "p")
    path = crash_copy(log, tmp_path / "crash")
    last = log.segments[-1].base_offset
    os.truncate(seg_file(path, last), os.path.getsize(seg_file(path, last)) - 5)
    log.close()
    crashed = reopen(path)
    for i in range(20):
        crashed.append(batch(2, 150, 200 + i))
    after = contents(crashed)
    crashed.close()
    again = reopen(path, clean=True)
    assert not again.recovery.rebuilt_indexes and not again.recovery.truncated
    assert contents(again) == after
    again.close()
    unclean = reopen(path, clean=False)  # close() left the recovery point at the end
    assert not unclean.recovery.recovered_segments or unclean.recovery.validated_bytes == 0
    assert contents(unclean) == after
    unclean.close()


def test_leftover_files_are_cleaned_on_open(tmp_path):
    log = make_log(tmp_path / "p", count=3)
    log.close()
    orphan = seg_file(tmp_path / "p", 12345, ".index")
    open(orphan, "wb").write(b"\x00" * 8)
    open(tmp_path / "p" / "00000000000000000007.log.deleted", "wb").write(b"x")
    open(tmp_path / "p" / "partition.metadata", "wb").write(b"keep me")
    again = reopen(tmp_path / "p", clean=True)
    names = os.listdir(tmp_path / "p")
    assert os.path.basename(orphan) not in names
    assert not any(n.endswith(".deleted") for n in names)
    assert "partition.metadata" in names
    again.close()


def test_empty_directory_and_missing_directory(tmp_path):
    log = reopen(tmp_path / "new" / "t-0", clean=False)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert os.path.exists(seg_file(tmp_path / "new" / "t-0", 0))
    log.close()
    again = reopen(tmp_path / "new" / "t-0", clean=False)
    assert not again.recovery.truncated and again.log_end_offset == 0
    again.close()
