"""Tests for broker.producer_state: sequence rules, fencing, transactions, snapshots, rebuild."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.broker.partition.producer_state import (
    APPEND,
    INT32_MAX,
    AbortedTxn,
    BatchInfo,
    CheckResult,
    CompletedTxn,
    CorruptSnapshotError,
    Duplicate,
    ProducerStateManager,
    Reject,
    TxnMarker,
    in_sequence,
    last_sequence_of,
)
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import BatchHeader, ControlType, build_batch, build_control_batch, iter_batches

PID = 1000


class Log:
    """A tiny leader: validates with check, assigns offsets, updates, and keeps what it wrote."""

    def __init__(self, state: ProducerStateManager | None = None) -> None:
        self.state = state if state is not None else ProducerStateManager()
        self.next_offset = 0
        # (BatchInfo, first, last, timestamp, marker)
        self.entries: list[tuple[BatchInfo, int, int, int, TxnMarker | None]] = []

    def produce(
        self,
        pid: int,
        epoch: int,
        seq: int,
        count: int = 1,
        *,
        txn: bool = False,
        ts: int = 0,
    ) -> CheckResult:
        last = last_sequence_of(seq, count)
        result = self.state.check(pid, epoch, seq, last, txn)
        if result is APPEND:
            first = self.next_offset
            self.next_offset += count
            self.state.update(pid, epoch, seq, last, txn, first, first + count - 1, ts)
            self.entries.append((BatchInfo(pid, epoch, seq, last, txn), first, first + count - 1, ts, None))
        return result

    def marker(
        self, pid: int, epoch: int, commit: bool, *, coordinator_epoch: int = 0, ts: int = 0
    ) -> Reject | CompletedTxn | None:
        rejected = self.state.check_marker(pid, epoch, coordinator_epoch)
        if rejected is not None:
            return rejected
        offset = self.next_offset
        self.next_offset += 1
        completed = self.state.update_marker(pid, epoch, coordinator_epoch, commit, offset, ts)
        marker = TxnMarker(commit, coordinator_epoch)
        self.entries.append((BatchInfo(pid, epoch, -1, -1, True), offset, offset, ts, marker))
        return completed

    def rebuild(self, start: int = 0, state: ProducerStateManager | None = None) -> ProducerStateManager:
        fresh = state if state is not None else ProducerStateManager()
        for info, first, last, ts, marker in self.entries:
            if last < start:
                continue
            fresh.replay_batch(
                info.producer_id,
                info.producer_epoch,
                info.base_sequence,
                info.last_sequence,
                info.is_transactional,
                first,
                last,
                ts,
                marker,
            )
        return fresh


def rejected(result: object, code: ErrorCode) -> bool:
    return isinstance(result, Reject) and result.error == code


# --------------------------------------------------------------------------
# sequence arithmetic


def test_last_sequence_wraps_at_int32_max() -> None:
    assert last_sequence_of(0, 1) == 0
    assert last_sequence_of(10, 5) == 14
    assert last_sequence_of(INT32_MAX, 1) == INT32_MAX
    assert last_sequence_of(INT32_MAX, 2) == 0
    assert last_sequence_of(INT32_MAX - 1, 4) == 1
    assert last_sequence_of(-1, 3) == -1


def test_in_sequence() -> None:
    assert in_sequence(-1, 0)
    assert in_sequence(4, 5)
    assert in_sequence(INT32_MAX, 0)
    assert not in_sequence(4, 4)
    assert not in_sequence(4, 6)
    assert not in_sequence(INT32_MAX, INT32_MAX + 1)


# --------------------------------------------------------------------------
# idempotence


def test_non_idempotent_batches_skip_everything() -> None:
    log = Log()
    for _ in range(3):
        assert log.produce(-1, -1, -1, 3) is APPEND
    assert len(log.state) == 0
    assert log.state.next_offset == 9
    assert rejected(log.state.check(-1, -1, -1, -1, True), ErrorCode.INVALID_RECORD)


def test_in_order_batches_append_and_gaps_are_out_of_order() -> None:
    log = Log()
    assert log.produce(PID, 0, 0, 3) is APPEND
    assert log.produce(PID, 0, 3, 2) is APPEND
    assert rejected(log.produce(PID, 0, 6, 1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)  # gap
    assert rejected(log.produce(PID, 0, 4, 1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)  # overlap
    assert rejected(log.produce(PID, 0, 3, 1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)  # not an exact retry
    assert log.produce(PID, 0, 5, 1) is APPEND
    entry = log.state.entry(PID)
    assert entry is not None and entry.last_seq == 5 and entry.last_data_offset == 5


def test_check_does_not_change_state() -> None:
    log = Log()
    log.produce(PID, 0, 0, 1)
    before = log.state.snapshot()
    assert log.state.check(PID, 0, 1, 1) is APPEND
    assert log.state.check(PID + 1, 0, 0, 0) is APPEND
    assert log.state.snapshot() == before


def test_duplicate_of_each_of_last_five_batches_returns_original_offsets() -> None:
    log = Log()
    for i in range(6):
        assert log.produce(PID, 0, i * 2, 2, ts=100 + i) is APPEND
    # Batch 0 (sequences 0-1) has dropped out of the window of five.
    assert rejected(log.produce(PID, 0, 0, 2), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    for i in range(1, 6):
        assert log.produce(PID, 0, i * 2, 2) == Duplicate(i * 2, i * 2 + 1, 100 + i)
    assert log.next_offset == 12  # nothing was written by the retries
    entry = log.state.entry(PID)
    assert entry is not None and len(entry.batches) == 5


def test_duplicate_needs_exact_sequence_range_and_epoch() -> None:
    log = Log()
    log.produce(PID, 0, 0, 4)
    assert rejected(log.produce(PID, 0, 0, 3), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert rejected(log.produce(PID, 0, 1, 3), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    # Same sequences under a newer epoch are a new batch, not a retry.
    assert log.produce(PID, 1, 0, 4) is APPEND
    assert log.next_offset == 8


def test_unknown_producer_accepts_any_sequence_by_default_like_kafka() -> None:
    log = Log()
    assert log.produce(PID, 3, 17, 2) is APPEND
    assert log.produce(PID, 3, 19, 1) is APPEND
    assert rejected(log.produce(PID, 3, 21, 1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)


def test_strict_mode_requires_sequence_zero_for_unknown_producer() -> None:
    log = Log(ProducerStateManager(strict_new_producer_sequence=True))
    assert rejected(log.produce(PID, 0, 5, 1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert log.produce(PID, 0, 0, 1) is APPEND
    assert len(log.state) == 1


def test_negative_epoch_or_sequence_for_a_real_producer_is_invalid() -> None:
    state = ProducerStateManager()
    assert rejected(state.check(PID, -1, 0, 0), ErrorCode.INVALID_RECORD)
    assert rejected(state.check(PID, 0, -1, -1), ErrorCode.INVALID_RECORD)


# --------------------------------------------------------------------------
# epochs


def test_older_epoch_is_fenced() -> None:
    log = Log()
    log.produce(PID, 5, 0, 1)
    assert rejected(log.produce(PID, 4, 1, 1), ErrorCode.INVALID_PRODUCER_EPOCH)
    assert rejected(log.produce(PID, 4, 0, 1), ErrorCode.INVALID_PRODUCER_EPOCH)


def test_epoch_bump_must_restart_at_sequence_zero_and_clears_retry_cache() -> None:
    log = Log()
    log.produce(PID, 0, 0, 1)
    log.produce(PID, 0, 1, 1)
    assert rejected(log.produce(PID, 1, 2, 1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert log.produce(PID, 1, 0, 1) is APPEND
    entry = log.state.entry(PID)
    assert entry is not None and entry.epoch == 1 and len(entry.batches) == 1
    # A late retry from the old epoch is now fenced rather than acknowledged.
    assert rejected(log.produce(PID, 0, 1, 1), ErrorCode.INVALID_PRODUCER_EPOCH)
    assert log.produce(PID, 1, 1, 1) is APPEND


def test_sequence_wraps_from_int32_max_to_zero() -> None:
    log = Log()
    assert log.produce(PID, 0, INT32_MAX - 1, 2) is APPEND  # unknown producer: any start
    assert rejected(log.produce(PID, 0, INT32_MAX + 1, 1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert log.produce(PID, 0, 0, 1) is APPEND
    # A batch that itself straddles the wrap.
    log2 = Log()
    assert log2.produce(PID, 0, INT32_MAX - 1, 4) is APPEND  # sequences MAX-1, MAX, 0, 1
    entry = log2.state.entry(PID)
    assert entry is not None and entry.last_seq == 1
    assert log2.produce(PID, 0, INT32_MAX - 1, 4) == Duplicate(0, 3, 0)
    assert log2.produce(PID, 0, 2, 1) is APPEND


def test_check_batches_validates_a_request_as_a_sequence() -> None:
    log = Log()
    log.produce(PID, 0, 0, 2)
    batches = [
        BatchInfo(PID, 0, 2, 3),
        BatchInfo(PID, 0, 4, 4),
        BatchInfo(-1, -1, -1, -1),
        BatchInfo(PID + 1, 0, 0, 0),
        BatchInfo(PID, 0, 6, 6),  # gap after the 2nd batch of this request
    ]
    results = log.state.check_batches(batches)
    assert results[:4] == [APPEND, APPEND, APPEND, APPEND]
    assert rejected(results[4], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    # An epoch bump inside one request forgets the old epoch's retry cache.
    results = log.state.check_batches([BatchInfo(PID, 1, 0, 0), BatchInfo(PID, 1, 0, 1)])
    assert results[0] is APPEND
    assert rejected(results[1], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert log.state.check_batches([BatchInfo(PID, 0, 0, 1)]) == [Duplicate(0, 1, 0)]


def test_batch_info_from_a_real_header() -> None:
    raw = build_batch(
        [(b"k", b"v", (), 1), (b"k", b"v", (), 2), (b"k", b"v", (), 3)],
        producer_id=PID,
        producer_epoch=2,
        base_sequence=INT32_MAX - 1,
        transactional=True,
    )
    info = BatchInfo.from_header(BatchHeader.read(raw))
    assert info == BatchInfo(PID, 2, INT32_MAX - 1, 0, True)


# --------------------------------------------------------------------------
# expiry


def test_idle_producers_expire_but_not_with_an_open_transaction() -> None:
    state = ProducerStateManager(expiration_ms=1_000)
    state.update(1, 0, 0, 0, False, 0, 0, 5_000)
    state.update(2, 0, 0, 0, False, 1, 1, 5_500)
    state.update(3, 0, 0, 0, True, 2, 2, 5_000)
    assert state.remove_expired(5_999) == []
    assert state.remove_expired(6_000) == [1]
    assert state.producer_ids() == [2, 3]
    assert state.remove_expired(10_000) == [2]
    assert state.producer_ids() == [3]
    # After expiry the producer is unknown again: any sequence is accepted.
    assert state.check(1, 0, 9, 9) is APPEND


# --------------------------------------------------------------------------
# transactions


def test_non_transactional_batch_inside_open_transaction_is_invalid() -> None:
    log = Log()
    assert log.produce(PID, 0, 0, 1, txn=True) is APPEND
    assert rejected(log.produce(PID, 0, 1, 1), ErrorCode.INVALID_TXN_STATE)
    assert log.produce(PID, 0, 1, 1, txn=True) is APPEND


def test_lso_waits_for_open_and_unreplicated_transactions() -> None:
    log = Log()
    log.produce(1, 0, 0, 2)  # 0-1
    log.produce(2, 0, 0, 2, txn=True)  # 2-3 opens txn at 2
    log.produce(1, 0, 2, 1)  # 4
    log.produce(3, 0, 0, 1, txn=True)  # 5 opens txn at 5
    state = log.state
    assert state.ongoing_transactions() == [(2, 2), (3, 5)]
    assert state.last_stable_offset(1) == 1
    assert state.last_stable_offset(6) == 2
    completed = log.marker(2, 0, commit=True)  # marker at 6
    assert completed == CompletedTxn(2, 2, 6, aborted=False)
    # The marker is written but not replicated: still unstable from 2.
    assert state.last_stable_offset(6) == 2
    assert state.last_stable_offset(7) == 5
    log.marker(3, 0, commit=False)  # marker at 7
    assert state.last_stable_offset(7) == 5
    assert state.last_stable_offset(8) == 8
    assert state.first_unstable_offset() is None


def test_aborted_transaction_index_answers_fetch_ranges() -> None:
    log = Log()
    log.produce(1, 0, 0, 3, txn=True)  # 0-2
    log.produce(2, 0, 0, 2, txn=True)  # 3-4
    log.marker(2, 0, commit=False)  # 5: abort pid 2 [3..5]
    log.produce(3, 0, 0, 1, txn=True)  # 6
    log.marker(1, 0, commit=False)  # 7: abort pid 1 [0..7]
    log.marker(3, 0, commit=True)  # 8: commit pid 3
    log.produce(2, 0, 2, 1, txn=True)  # 9
    log.marker(2, 0, commit=False)  # 10: abort pid 2 [9..10]
    state = log.state
    assert state.aborted_index() == [AbortedTxn(2, 3, 5), AbortedTxn(1, 0, 7), AbortedTxn(2, 9, 10)]
    assert state.aborted_transactions(0, 11) == [(1, 0), (2, 3), (2, 9)]
    assert state.aborted_transactions(0, 1) == [(1, 0)]
    assert state.aborted_transactions(6, 9) == [(1, 0)]
    assert state.aborted_transactions(6, 10) == [(1, 0), (2, 9)]
    assert state.aborted_transactions(8, 11) == [(2, 9)]
    assert state.aborted_transactions(11, 20) == []
    state.truncate_head(6)
    assert state.aborted_index() == [AbortedTxn(1, 0, 7), AbortedTxn(2, 9, 10)]


def test_markers_are_checked_for_epoch_and_coordinator_epoch() -> None:
    log = Log()
    log.produce(PID, 3, 0, 1, txn=True)
    assert rejected(log.state.check_marker(PID, 2, 0), ErrorCode.INVALID_PRODUCER_EPOCH)
    assert log.state.check_marker(PID, 3, 0) is None
    log.marker(PID, 3, commit=True, coordinator_epoch=7)
    assert rejected(log.state.check_marker(PID, 3, 6), ErrorCode.TRANSACTION_COORDINATOR_FENCED)
    # Transactions v2: the marker must bump the epoch, unless it is a retry of a finished one.
    assert log.state.check_marker(PID, 3, 7, transaction_version=2) is None
    log.produce(PID, 3, 1, 1, txn=True)
    assert rejected(log.state.check_marker(PID, 3, 7, transaction_version=2), ErrorCode.INVALID_PRODUCER_EPOCH)
    assert log.state.check_marker(PID, 4, 7, transaction_version=2) is None
    # Markers of unknown producers are accepted.
    assert log.state.check_marker(PID + 1, 0, 0) is None


def test_marker_with_bumped_epoch_resets_sequences() -> None:
    log = Log()
    log.produce(PID, 0, 0, 3, txn=True)
    log.marker(PID, 1, commit=True)
    entry = log.state.entry(PID)
    assert entry is not None and entry.epoch == 1 and not entry.batches and not entry.has_open_txn
    assert rejected(log.produce(PID, 1, 3, 1, txn=True), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert log.produce(PID, 1, 0, 1, txn=True) is APPEND


def test_truncate_head_forgets_producers_whose_data_is_gone() -> None:
    log = Log()
    log.produce(1, 0, 0, 2)  # 0-1
    log.produce(2, 0, 0, 1, txn=True)  # 2
    log.produce(3, 0, 0, 2)  # 3-4
    log.state.truncate_head(3)
    assert log.state.producer_ids() == [2, 3]  # 2 keeps its open transaction


# --------------------------------------------------------------------------
# snapshots and rebuild


def busy_log() -> Log:
    log = Log()
    log.produce(1, 0, 0, 2, ts=10)
    log.produce(2, 4, 0, 1, txn=True, ts=11)
    for i in range(7):
        log.produce(1, 0, 2 + i, 1, ts=12 + i)
    log.produce(-1, -1, -1, 3)
    log.marker(2, 4, commit=False, coordinator_epoch=3, ts=30)
    log.produce(3, 1, INT32_MAX, 2, txn=True, ts=31)
    log.produce(2, 5, 0, 1, ts=32)
    return log


def test_snapshot_round_trip() -> None:
    log = busy_log()
    state = log.state
    data = state.snapshot()
    loaded = ProducerStateManager()
    loaded.load(data)
    assert loaded.snapshot() == data
    assert loaded.next_offset == state.next_offset == log.next_offset
    assert list(loaded.iter_entries()) == list(state.iter_entries())
    assert loaded.aborted_index() == state.aborted_index()
    assert loaded.ongoing_transactions() == state.ongoing_transactions() == [(3, 14)]
    for probe in [(1, 0, 8, 8), (1, 0, 9, 9), (2, 5, 1, 1), (3, 1, 1, 1), (1, 0, 3, 3)]:
        assert loaded.check(*probe, probe[0] == 3) == state.check(*probe, probe[0] == 3)
    assert loaded.last_stable_offset(100) == state.last_stable_offset(100) == 14


def test_snapshot_of_empty_state_round_trips() -> None:
    data = ProducerStateManager().snapshot()
    loaded = ProducerStateManager()
    loaded.load(data)
    assert len(loaded) == 0 and loaded.next_offset == 0


def _reseal(body: bytes) -> bytes:
    """Re-sign a snapshot body so that checks past the checksum are reached."""
    magic, version, flags, _ = struct.unpack_from(">4sHHI", body)
    return struct.pack(">4sHHI", magic, version, flags, crc32c.crc32c(body[12:])) + body[12:]


@pytest.mark.parametrize(
    ("mangle", "match"),
    [
        (lambda d: d[:5], "too short"),
        (lambda d: b"XXXX" + d[4:], "magic"),
        (lambda d: d[:4] + b"\x00\x09" + d[6:], "version"),
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "checksum"),
        (lambda d: d[:40], "checksum"),
        (lambda d: _reseal(d + b"\x00"), "trailing"),
        (lambda d: _reseal(d[:-100]), "truncated"),
        (lambda d: _reseal(d[:20] + b"\xff\xff\xff\xff" + d[24:]), "claims"),
    ],
)
def test_corrupt_snapshot_raises_and_keeps_old_state(mangle, match) -> None:
    good = busy_log().state.snapshot()
    target = Log()
    target.produce(77, 0, 0, 1)
    before = target.state.snapshot()
    with pytest.raises(CorruptSnapshotError, match=match):
        target.state.load(mangle(good))
    assert target.state.snapshot() == before


def test_rebuild_by_replay_equals_incremental_state() -> None:
    log = busy_log()
    assert log.rebuild().snapshot() == log.state.snapshot()


def test_snapshot_then_replay_of_the_rest_equals_incremental_state() -> None:
    log = busy_log()
    midway = Log()
    for entry in log.entries[:6]:
        midway.entries.append(entry)
    partial = midway.rebuild()
    snap = partial.snapshot()
    resumed = ProducerStateManager()
    resumed.load(snap)
    log.rebuild(start=resumed.next_offset, state=resumed)
    assert resumed.snapshot() == log.state.snapshot()
    # Replaying batches the state already covers changes nothing.
    log.rebuild(start=0, state=resumed)
    assert resumed.snapshot() == log.state.snapshot()


def test_rebuild_from_real_log_bytes() -> None:
    """Replay a log of encoded batches, the way the log layer would after a restart."""
    live = ProducerStateManager()
    segment = bytearray()
    offset = 0

    def write(raw: bytes) -> None:
        nonlocal offset
        header = BatchHeader.read(raw)
        segment.extend(raw)
        offset += header.last_offset_delta + 1

    for seq in range(0, 6, 2):
        raw = build_batch(
            [(None, b"a", (), 5), (None, b"b", (), 6)],
            base_offset=offset,
            producer_id=PID,
            producer_epoch=1,
            base_sequence=seq,
            transactional=True,
        )
        assert live.check(PID, 1, seq, seq + 1, True) is APPEND
        live.update(PID, 1, seq, seq + 1, True, offset, offset + 1, 6)
        write(raw)
    write(build_control_batch(ControlType.ABORT, producer_id=PID, producer_epoch=1, base_offset=offset, timestamp=9))
    live.update_marker(PID, 1, 0, False, offset - 1, 9)

    rebuilt = ProducerStateManager()
    for header, _ in iter_batches(segment):
        marker = None
        if header.is_control:
            records = header.records()
            control = records[0].control
            assert control is not None
            marker = TxnMarker(control.is_commit, control.coordinator_epoch or 0)
        info = BatchInfo.from_header(header)
        rebuilt.replay_batch(
            info.producer_id,
            info.producer_epoch,
            info.base_sequence,
            info.last_sequence,
            info.is_transactional,
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
            marker,
        )
    assert rebuilt.snapshot() == live.snapshot()
    assert rebuilt.aborted_transactions(0, 100) == [(PID, 0)]


# --------------------------------------------------------------------------
# properties


@dataclass(slots=True)
class _Sent:
    seq: int
    count: int
    first: int
    last: int


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(0, 6)), max_size=60))
def test_retrying_producer_never_duplicates_or_loses(steps: list[tuple[int, int, int]]) -> None:
    """Producers that retry any of their last five batches: retries are acked, new batches land once."""
    log = Log()
    sent: dict[int, list[_Sent]] = {}
    next_seq: dict[int, int] = {}
    start = INT32_MAX - 5  # cross the wrap on the way
    for producer, count, retry in steps:
        pid = 10 + producer
        history = sent.setdefault(pid, [])
        if retry < len(history) and retry < 5:
            old = history[-1 - retry]
            assert log.produce(pid, 0, old.seq, old.count) == Duplicate(old.first, old.last, 0)
            continue
        seq = next_seq.get(pid, start)
        first = log.next_offset
        assert log.produce(pid, 0, seq, count) is APPEND
        history.append(_Sent(seq, count, first, first + count - 1))
        next_seq[pid] = (seq + count) % (INT32_MAX + 1)
    assert log.next_offset == sum(s.count for h in sent.values() for s in h)
    assert log.rebuild().snapshot() == log.state.snapshot()


_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("data"),
            st.integers(1, 3),
            st.integers(0, 2),
            st.integers(0, 4),
            st.integers(1, 3),
            st.booleans(),
        ),
        st.tuples(st.just("marker"), st.integers(1, 3), st.integers(0, 2), st.booleans()),
        st.tuples(st.just("plain"), st.integers(1, 3)),
    ),
    max_size=50,
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_ops, st.integers(0, 50))
def test_any_history_rebuilds_to_the_same_state(ops: list[tuple], cut: int) -> None:
    """Whatever was accepted, replay (whole, or snapshot at any point plus the tail) gives the same state."""
    log = Log()
    for op in ops:
        if op[0] == "data":
            _, pid, epoch, skew, count, txn = op
            entry = log.state.entry(pid)
            in_epoch = entry is not None and entry.epoch == epoch and entry.batches
            seq = (entry.last_seq + 1 if in_epoch and entry else 0) + (skew if skew in (1, 2) else 0)
            log.produce(pid, epoch, seq, count, txn=txn, ts=len(log.entries))
        elif op[0] == "marker":
            _, pid, epoch, commit = op
            log.marker(pid, epoch, commit, ts=len(log.entries))
        else:
            log.produce(-1, -1, -1, op[1])
    full = log.state.snapshot()
    assert log.rebuild().snapshot() == full
    head = Log()
    head.entries = log.entries[: min(cut, len(log.entries))]
    resumed = ProducerStateManager()
    resumed.load(head.rebuild().snapshot())
    log.rebuild(start=resumed.next_offset, state=resumed)
    assert resumed.snapshot() == full
    # LSO and the aborted index agree with a brute-force reading of the log.
    opened: dict[int, int] = {}
    aborted: list[tuple[int, int, int]] = []
    for info, first, last, _, marker in log.entries:
        if marker is not None:
            if info.producer_id in opened:
                start = opened.pop(info.producer_id)
                if not marker.commit:
                    aborted.append((info.producer_id, start, last))
        elif info.is_transactional and info.producer_id not in opened:
            opened[info.producer_id] = first
    end = log.next_offset
    assert log.state.last_stable_offset(end) == min([end, *opened.values()])
    for lo in range(0, end + 1, 3):
        for hi in range(lo, end + 2, 4):
            expect = sorted(((p, f) for p, f, last in aborted if last >= lo and f < hi), key=lambda x: x[1])
            assert log.state.aborted_transactions(lo, hi) == expect
