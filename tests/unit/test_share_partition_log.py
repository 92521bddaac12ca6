"""SharePartition against the log: restore, gap windows, start offset, in-flight cap, control batches.

Restarting from persisted state (counts and terminal states kept, the gap
window), how the start offset moves (gap-window holes, trimming, the log start
moving), the in-flight cap, control batches, read-committed transactions and
compaction, and the counters and memory per in-flight record. Helpers are in
tests/support/share_partition.py.
"""

from __future__ import annotations

import tracemalloc

import pytest

from shoal.broker.share.share_partition import AcquiredRange, SharePartition
from shoal.protocol.constants import ACCEPT, ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, REJECT, RELEASE, RENEW

# check() asserts the invariants: let pytest rewrite its asserts (as it did when it lived in the test module).
pytest.register_assert_rewrite("tests.support.share_partition")

from tests.support.share_partition import (  # noqa: E402
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    LOCK,
    B,
    ack,
    batches,
    check,
    make,
    states,
)


# -- restore, gap windows, start offset ------------------------------------------------
def test_restore_keeps_counts_and_terminal_states():
    persisted = [(10, 14, ACKNOWLEDGED, 1), (15, 19, AVAILABLE, 3), (20, 21, ARCHIVED, 5)]
    sp = make(10, persisted)
    assert sp.start_offset == 15 and sp.end_offset == 21 and sp.next_fetch_offset() == 15
    assert sp.state_of(12) is None and sp.state_of(15) == (AVAILABLE, 3, None)
    # delivered 3 times of 5 (the throttle threshold, KAFKA-17541): half the range per fetch, alone
    assert sp.acquire("m", batches(5, 7, start=15), 100, now_ms=0) == [AcquiredRange(15, 16, 4, LOCK)]
    assert sp.acquire("m", batches(5, 7, start=15), 100, now_ms=0) == [AcquiredRange(17, 18, 4, LOCK)]
    assert sp.acquire("m", batches(5, 7, start=15), 100, now_ms=0) == [AcquiredRange(19, 19, 4, LOCK)]
    assert sp.acquire("m", batches(5, 7, start=15), 100, now_ms=0) == [AcquiredRange(22, 26, 1, LOCK)]
    assert sp.state_epoch == 3
    check(sp)


def test_gap_window_after_restore():
    persisted = [(5, 9, AVAILABLE, 2), (15, 19, ACKNOWLEDGED, 1), (25, 26, ARCHIVED, 1)]
    sp = make(0, persisted)
    assert sp.next_fetch_offset() == 0 and sp.start_offset == 0 and sp.end_offset == 26
    check(sp)
    log = batches(*[1] * 30)
    got = sp.acquire("m", log, 7, batch_optimized=False, now_ms=0)
    assert got == [AcquiredRange(0, 4, 1, LOCK), AcquiredRange(5, 6, 3, LOCK)]
    assert sp.next_fetch_offset() == 7
    check(sp)
    got = sp.acquire("m", log[7:], 100, now_ms=0)
    assert got == [
        AcquiredRange(7, 9, 3, LOCK),
        AcquiredRange(10, 14, 1, LOCK),
        AcquiredRange(20, 24, 1, LOCK),
        AcquiredRange(27, 29, 1, LOCK),
    ]
    assert sp._gap_start is None and sp.end_offset == 29
    ack(sp, "m", (0, 14, [ACCEPT]), (20, 24, [ACCEPT]), (27, 29, [ACCEPT]))
    assert sp.start_offset == 30 and not sp._batches


def test_start_offset_stops_at_gap_window_holes():
    sp = make(0, [(3, 4, ACKNOWLEDGED, 1)])
    assert sp.start_offset == 0 and sp.next_fetch_offset() == 0
    sp.acquire("m", batches(1, 1, 1, 1, 1, 1), 2, now_ms=0)
    ack(sp, "m", (0, 1, [ACCEPT]))
    assert sp.start_offset == 2 and sp.next_fetch_offset() == 2
    sp.acquire("m", batches(1, 1, 1, 1, 1, 1)[2:], 100, now_ms=0)
    ack(sp, "m", (2, 2, [ACCEPT]), (5, 5, [ACCEPT]))
    assert sp.start_offset == 6


def test_gap_window_holes_without_data_are_passed():
    """A restored gap that the log no longer holds (compacted) must not be fetched forever."""
    sp = make(0, [(10, 11, AVAILABLE, 1)])
    fetched = [B(10, 11), B(12, 12)]
    got = sp.acquire("m", fetched, 100, now_ms=0, fetch_offset=0)
    assert got == [AcquiredRange(10, 11, 2, LOCK), AcquiredRange(12, 12, 1, LOCK)]
    assert sp.start_offset == 10 and sp._gap_start is None
    check(sp)
    sp = make(0, [(10, 11, AVAILABLE, 1)])
    assert sp.acquire("m", [B(5, 6)], 100, now_ms=0, fetch_offset=0) == [AcquiredRange(5, 6, 1, LOCK)]
    assert sp.next_fetch_offset() == 7
    ack(sp, "m", (5, 6, [ACCEPT]))
    assert sp.start_offset == 7


def test_start_advance_trims_finished_ranges():
    sp = make()
    for i in range(5):
        sp.acquire("m", [B(i * 10, i * 10 + 9)], 100, now_ms=0)
    ack(sp, "m", (10, 19, [ACCEPT]), (30, 39, [REJECT]))
    assert sp.start_offset == 0 and len(sp._batches) == 5
    ack(sp, "m", (0, 9, [ACCEPT]))
    assert sp.start_offset == 20 and list(sp._batches) == [20, 30, 40]
    ack(sp, "m", (20, 24, [ACCEPT]))
    assert sp.start_offset == 25 and list(sp._batches) == [20, 30, 40]
    ack(sp, "m", (25, 29, [ACCEPT]), (40, 49, [ACCEPT]))
    assert sp.start_offset == 50 and sp.end_offset == 49 and not sp._batches and sp.in_flight_count == 0
    assert sp.next_fetch_offset() == 50


def test_log_start_advance():
    sp = make()
    sp.acquire("m", batches(5, 5, 5), 100, now_ms=0)
    ack(sp, "m", (0, 4, [RELEASE]))
    sp.on_log_start_advanced(7)
    assert sp.start_offset == 7 and sp.state_of(0) == (ARCHIVED, 1, None)
    assert states(sp, 5, 8) == [(ACQUIRED, 1, "m")] * 4
    assert sp.next_fetch_offset() == 15
    change = sp.expire_locks(LOCK)
    assert change.batches == [(5, 6, ARCHIVED, 1), (7, 14, AVAILABLE, 1)]
    assert change.start_offset == 7, "the next write carries the moved start"
    change.commit()
    check(sp)
    sp.on_log_start_advanced(100)
    assert sp.start_offset == 100 and sp.end_offset == 99 and not sp._batches
    sp.on_log_start_advanced(50)
    assert sp.start_offset == 100
    # acquired records wholly below the new start stay held until their lock ends
    sp = make()
    sp.acquire("m", batches(20), 100, now_ms=0)
    sp.acquire("m", batches(20, start=20), 100, now_ms=10)
    sp.on_log_start_advanced(27)
    assert states(sp, 0, 19) == [(ACQUIRED, 1, "m")] * 20 and sp.next_lock_deadline() == LOCK
    assert sp.acknowledge("m", [(0, 19, [ACCEPT])], 0)[1].batches == [], "acknowledging below the start: no-op"
    sp.expire_locks(LOCK).commit()
    assert sp.state_of(0) is None and sp.next_lock_deadline() == 10 + LOCK
    check(sp)


def test_initialize_clips_and_validates():
    sp = make(5, [(0, 6, AVAILABLE, 1), (8, 9, ACKNOWLEDGED, 1)], log_start=2)
    assert sp.start_offset == 5 and sp.state_of(5) == (AVAILABLE, 1, None) and sp.state_of(4) is None
    sp = make(5, [(5, 6, AVAILABLE, 1)], log_start=6)
    assert sp.start_offset == 6 and sp.state_of(5) == (ARCHIVED, 1, None) and sp.state_of(6) == (AVAILABLE, 1, None)
    with pytest.raises(ValueError):
        make(0, [(0, 5, AVAILABLE, 1), (5, 6, AVAILABLE, 1)])
    with pytest.raises(ValueError):
        make(0, [(0, 5, ACQUIRED, 1)])
    with pytest.raises(ValueError):
        make(-1)
    with pytest.raises(RuntimeError):
        SharePartition("g", "t", 0).acquirable(1)


# -- in-flight cap -------------------------------------------------------------------------
def test_in_flight_cap():
    sp = make(cap=10)
    assert sp.acquire("m", batches(4, 4, 4, 4), 100, now_ms=0) == [AcquiredRange(0, 11, 1, LOCK)]
    assert sp.in_flight_count == 12, "the cap is crossed by less than one log batch"
    assert not sp.acquirable(100)
    assert sp.acquire("m", batches(4, start=12), 100, now_ms=0) == []
    ack(sp, "m", (4, 7, [RELEASE]))
    assert sp.acquirable(100), "released records can be re-acquired at the cap"
    assert sp.acquire("m", batches(4, 4, 4, 4)[1:], 100, now_ms=0) == [AcquiredRange(4, 7, 2, LOCK)]
    ack(sp, "m", (0, 3, [ACCEPT]))
    assert sp.in_flight_count == 8 and sp.acquirable(100)
    assert sp.acquire("m", batches(4, 4, start=12), 100, batch_optimized=False, now_ms=0) == [
        AcquiredRange(12, 13, 1, LOCK)
    ]
    assert sp.in_flight_count == 10
    check(sp)


# -- control batches, transactions, compaction -------------------------------------------
def test_control_batches_are_not_delivered():
    sp = make()
    log = [B(0, 1), B(2, 2, is_control=True), B(3, 4), B(5, 5, is_control=True)]
    assert sp.acquire("m", log, 100, now_ms=0) == [AcquiredRange(0, 1, 1, LOCK), AcquiredRange(3, 4, 1, LOCK)]
    assert sp.end_offset == 5 and sp.state_of(2) is None and sp.next_fetch_offset() == 6
    ack(sp, "m", (0, 1, [ACCEPT]), (3, 4, [ACCEPT]))
    assert sp.start_offset == 6
    errors, _c = sp.acknowledge("m", [(6, 6, [ACCEPT])], 0)
    assert errors == [INVALID_REQUEST]
    # a control batch alone still moves the fetch position
    sp = make()
    assert sp.acquire("m", [B(0, 0, is_control=True)], 100, now_ms=0) == []
    assert sp.start_offset == 1 and sp.next_fetch_offset() == 1


def test_control_offsets_inside_a_restored_range_are_archived():
    sp = make(0, [(0, 3, AVAILABLE, 1)])
    log = [B(0, 1), B(2, 2, is_control=True), B(3, 3)]
    assert sp.acquire("m", log, 100, now_ms=0) == [AcquiredRange(0, 1, 2, LOCK), AcquiredRange(3, 3, 2, LOCK)]
    assert sp.state_of(2) == (ARCHIVED, 1, None)
    errors, _c = sp.acknowledge("m", [(0, 3, [ACCEPT])], 0)
    assert errors == [INVALID_RECORD_STATE], "offset 2 was never acquired"
    check(sp)


def test_read_committed_filters_aborted_transactions():
    log = [
        B(0, 1, producer_id=7, is_transactional=True),  # aborted
        B(2, 3, producer_id=8),  # another producer, plain
        B(4, 4, producer_id=7, is_transactional=True),  # aborted
        B(5, 5, is_control=True, producer_id=7),  # abort marker
        B(6, 7, producer_id=7, is_transactional=True),  # next transaction: committed
        B(8, 8, is_control=True, producer_id=7),  # commit marker
    ]
    for aborted in ([(7, 0, 5)], [(7, 0)]):
        sp = make()
        got = sp.acquire("m", log, 100, now_ms=0, aborted=aborted)
        assert got == [AcquiredRange(2, 3, 1, LOCK), AcquiredRange(6, 7, 1, LOCK)]
        assert sp.state_of(0) is None and sp.end_offset == 8
        ack(sp, "m", (2, 3, [ACCEPT]), (6, 7, [ACCEPT]))
        assert sp.start_offset == 9
    sp = make()  # read_uncommitted: everything but control batches
    assert sp.acquire("m", log, 100, now_ms=0) == [AcquiredRange(0, 4, 1, LOCK), AcquiredRange(6, 7, 1, LOCK)]


def test_aborted_records_in_released_ranges_are_archived():
    sp = make(0, [(0, 3, AVAILABLE, 1)])
    log = [B(0, 1, producer_id=7, is_transactional=True), B(2, 3, producer_id=9, is_transactional=True)]
    assert sp.acquire("m", log, 100, now_ms=0, aborted=[(7, 0)]) == [AcquiredRange(2, 3, 2, LOCK)]
    assert states(sp, 0, 1) == [(ARCHIVED, 1, None)] * 2 and sp.start_offset == 2


def test_compacted_away_records_are_archived():
    sp = make()
    sp.acquire("m", batches(3, 3, 3), 100, now_ms=0)
    ack(sp, "m", (0, 8, [RELEASE]))
    # the log now starts at 4 (0-3 compacted away); the shell read from offset 0
    got = sp.acquire("m", [B(4, 5), B(7, 8)], 100, now_ms=0, fetch_offset=0)
    assert got == [AcquiredRange(4, 5, 2, LOCK), AcquiredRange(7, 8, 2, LOCK)]
    assert sp.start_offset == 4 and sp.state_of(6) == (ARCHIVED, 1, None)
    check(sp)
    # by default the read is taken to start at the next fetch offset
    sp = make()
    sp.acquire("m", batches(3, 3), 100, now_ms=0)
    ack(sp, "m", (0, 5, [RELEASE]))
    assert sp.acquire("m", [B(4, 5)], 100, now_ms=0) == [AcquiredRange(4, 5, 2, LOCK)]
    assert sp.start_offset == 4
    # an explicit offset keeps what lies before it
    sp = make()
    sp.acquire("m", batches(3, 3), 100, now_ms=0)
    ack(sp, "m", (0, 5, [RELEASE]))
    assert sp.acquire("m", [B(4, 5)], 100, now_ms=0, fetch_offset=4) == [AcquiredRange(4, 5, 2, LOCK)]
    assert sp.start_offset == 0 and sp.next_fetch_offset() == 0


# -- misc --------------------------------------------------------------------------------------
def test_delivery_complete_count_and_ranges():
    sp = make()
    sp.acquire("m", batches(6), 100, now_ms=0)
    ack(sp, "m", (1, 3, [ACCEPT, REJECT, RELEASE]))
    assert sp.delivery_complete_count() == 2
    assert list(sp.ranges()) == [
        (0, 0, ACQUIRED, 1, "m"),
        (1, 1, ACKNOWLEDGED, 1, None),
        (2, 2, ARCHIVED, 1, None),
        (3, 3, AVAILABLE, 1, None),
        (4, 5, ACQUIRED, 1, "m"),
    ]


def test_memory_per_in_flight_record():
    """Well under 200 bytes per record, even with every range split per offset."""
    tracemalloc.start()
    try:
        base = tracemalloc.take_snapshot()
        sp = make()
        for i in range(4):
            sp.acquire(f"m{i}", batches(*[5] * 100, start=i * 500), 500, now_ms=0)
        whole = tracemalloc.take_snapshot().compare_to(base, "filename")
        per_record = sum(s.size_diff for s in whole) / 2000
        for i in range(4):  # renew every other offset: every range splits, nothing persists
            types = [RENEW, RELEASE] * 250
            sp.acknowledge(f"m{i}", [(i * 500, i * 500 + 499, types)], 0)[1].commit()
        split = tracemalloc.take_snapshot().compare_to(base, "filename")
        per_record_split = sum(s.size_diff for s in split) / 2000
    finally:
        tracemalloc.stop()
    assert sp.in_flight_count == 2000
    assert per_record < 20, per_record
    assert per_record_split < 200, per_record_split


@pytest.mark.slow
def test_one_record_fetches_share_ranges():
    """Fetching one record at a time must not cost a range (and a lock entry) per record."""
    tracemalloc.start()
    try:
        base = tracemalloc.take_snapshot()
        sp = make()
        for o in range(2000):
            got = sp.acquire(("a", "b", "c")[o % 3], [B(o, o)], 1, now_ms=o)
            assert got == [AcquiredRange(o, o, 1, o + LOCK)]
        per_record = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(base, "filename")) / 2000
    finally:
        tracemalloc.stop()
    assert per_record < 200, per_record
    assert len(sp._batches) <= 2000 // 16 + 1
    assert [sp.state_of(o) for o in (0, 1, 2, 1999)] == [
        (ACQUIRED, 1, "a"),
        (ACQUIRED, 1, "b"),
        (ACQUIRED, 1, "c"),
        (ACQUIRED, 1, "b"),
    ]
    assert sp.next_lock_deadline() == LOCK
    change = sp.expire_locks(LOCK + 5)
    assert change.batches == [(0, 5, AVAILABLE, 1)]
    check(sp)
