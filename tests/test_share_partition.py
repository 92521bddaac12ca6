"""SharePartition, the sans-IO share-partition core.

Clocks are plain ints. "Log batches" are tiny stand-ins for record batch
headers (base/last offset, control flag, producer id). `check()` verifies
the internal invariants after every step: ranges ordered and disjoint,
locks exactly on ACQUIRED offsets, the start offset as far as it can go,
next fetch offset, lock deadline and completed count equal to brute force.
The state machine at the end drives random fetches, acknowledgements, lock
expiry, member release, commits, undos, log-start moves and restarts from
the persisted state accumulated the way the share coordinator merges it.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from shoal.broker.share.in_flight import InFlightBatch
from shoal.broker.share.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    AcquiredRange,
    Change,
    SharePartition,
)
from shoal.broker.share.state import merge_batches
from shoal.protocol.errors import ErrorCode

NONE = ErrorCode.NONE
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
INVALID_RECORD_STATE = ErrorCode.INVALID_RECORD_STATE
LOCK = 1000


@dataclass(frozen=True)
class B:
    """A log batch header as the shell passes it."""

    base_offset: int
    last_offset: int
    is_control: bool = False
    producer_id: int = -1
    is_transactional: bool = False


def batches(*sizes: int, start: int = 0) -> list[B]:
    out, o = [], start
    for n in sizes:
        out.append(B(o, o + n - 1))
        o += n
    return out


def make(start: int = 0, persisted=(), *, cap: int = 2000, limit: int = 5, log_start: int = 0, hw: int = 10**9):
    sp = SharePartition("g", "topic", 0, max_in_flight_records=cap, delivery_count_limit=limit, lock_duration_ms=LOCK)
    sp.initialize(3, start, list(persisted), log_start_offset=log_start, high_watermark=hw)
    return sp


def snap(sp: SharePartition) -> tuple:
    """Everything observable plus the lock and pending marks of each run."""
    runs = tuple(
        (a, b, s, c, m, d, id(p)) for u in sp._batches.values() for a, b, s, c, m, d, p in u.runs(u.first, u.last)
    )
    return (sp.start_offset, sp.end_offset, runs, sp.next_fetch_offset(), sp.next_lock_deadline(), sp.pending_changes)


def states(sp: SharePartition, first: int, last: int) -> list:
    return [sp.state_of(o) for o in range(first, last + 1)]


def check(sp: SharePartition) -> None:
    """Structural invariants and brute-force agreement of the derived values."""
    start, end = sp.start_offset, sp.end_offset
    assert start <= end + 1
    prev: InFlightBatch | None = None
    deadlines, per_offset = [], {}
    for key, u in sp._batches.items():
        assert key == u.first <= u.last
        assert prev is None or prev.last < u.first
        prev = u
        if u.offsets is not None:
            o = u.offsets
            assert len(o.states) == len(o.counts) == len(o.members) == len(o.deadlines) == len(o.pending) == u.size
        if u.last < start:
            assert not u.all_done(), "a finished range below the start was not dropped"
        for a, b, s, c, m, d, p in u.runs(u.first, u.last):
            assert s in (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED)
            assert (s == ACQUIRED) == (d != -1) == (m is not None)
            assert 0 <= c <= sp.delivery_count_limit
            if p is not None:
                assert p in sp._outstanding and s != ACQUIRED
            if s == ACQUIRED:
                deadlines.append(d)
            if a < start:
                assert not (s == AVAILABLE and p is None), "an available record below the start"
            for o in range(a, b + 1):
                per_offset[o] = (s, p)
    assert sp._advance(None) == start, "start offset could move further"
    assert sp.next_lock_deadline() == (min(deadlines) if deadlines else None)
    assert sp.delivery_complete_count() == sum(
        1 for o, (s, _p) in per_offset.items() if start <= o <= end and s in (ACKNOWLEDGED, ARCHIVED)
    )
    gap = sp._gap_start if sp._gap_active() else None
    expected = end + 1
    for o in range(start, end + 1):
        s_p = per_offset.get(o)
        if (s_p is None and gap is not None and o >= gap) or s_p == (AVAILABLE, None):
            expected = o
            break
    assert sp.next_fetch_offset() == expected


def ack(sp, member, *batches_, now=0, commit=True):
    errors, change = sp.acknowledge(member, list(batches_), now)
    assert errors == [NONE] * len(batches_), errors
    if commit:
        change.commit()
    check(sp)
    return change


# -- acquire -----------------------------------------------------------------------
def test_acquire_new_records():
    sp = make(100, log_start=100)
    assert sp.next_fetch_offset() == 100 and sp.acquirable(110) and not sp.acquirable(100)
    got = sp.acquire("m1", batches(3, 2, start=100), 500, now_ms=7)
    assert got == [AcquiredRange(100, 104, 1, 7 + LOCK)]
    assert sp.end_offset == 104 and sp.in_flight_count == 5 and sp.next_fetch_offset() == 105
    assert states(sp, 100, 104) == [(ACQUIRED, 1, "m1")] * 5
    assert len(sp._batches) == 1, "consecutive new log batches share one in-flight range"
    assert sp.next_lock_deadline() == 7 + LOCK
    check(sp)


def test_batch_optimized_rounds_up_to_log_batch_record_limit_is_exact():
    sp = make()
    assert sp.acquire("m", batches(4, 4), 5, now_ms=0) == [AcquiredRange(0, 7, 1, LOCK)]
    sp = make()
    assert sp.acquire("m", batches(4, 4), 5, batch_optimized=False, now_ms=0) == [AcquiredRange(0, 4, 1, LOCK)]
    assert sp.end_offset == 4 and sp.next_fetch_offset() == 5
    # the next read returns the straddling batch again; only the rest is new
    assert sp.acquire("m", batches(4, 4)[1:], 5, batch_optimized=False, now_ms=0) == [AcquiredRange(5, 7, 1, LOCK)]
    check(sp)


def test_batch_size_splits_new_ranges_at_log_batch_boundaries():
    sp = make()
    got = sp.acquire("m", batches(2, 2, 2, 2), 100, now_ms=0, batch_size=4)
    assert got == [AcquiredRange(0, 7, 1, LOCK)]  # returned ranges coalesce
    assert [(u.first, u.last) for u in sp._batches.values()] == [(0, 3), (4, 7)]
    check(sp)


def test_reacquire_released_increments_delivery_count():
    sp = make()
    sp.acquire("m1", batches(5), 10, now_ms=0)
    ack(sp, "m1", (0, 4, [RELEASE]))
    assert states(sp, 0, 4) == [(AVAILABLE, 1, None)] * 5
    assert sp.next_fetch_offset() == 0 and sp.end_offset == 4
    assert sp.acquire("m2", batches(5, 3), 10, now_ms=5) == [
        AcquiredRange(0, 4, 2, 5 + LOCK),
        AcquiredRange(5, 7, 1, 5 + LOCK),
    ]
    assert states(sp, 0, 4) == [(ACQUIRED, 2, "m2")] * 5
    check(sp)


def test_record_limit_reacquires_part_of_a_released_range():
    sp = make()
    sp.acquire("m1", batches(6), 10, now_ms=0)
    ack(sp, "m1", (0, 5, [RELEASE]))
    got = sp.acquire("m2", batches(6), 4, batch_optimized=False, now_ms=0)
    assert got == [AcquiredRange(0, 3, 2, LOCK)]
    assert states(sp, 3, 5) == [(ACQUIRED, 2, "m2"), (AVAILABLE, 1, None), (AVAILABLE, 1, None)]
    assert sp.next_fetch_offset() == 4
    check(sp)


def test_acquire_skips_records_held_or_done():
    sp = make()
    sp.acquire("m1", batches(4), 10, now_ms=0)
    ack(sp, "m1", (0, 3, [ACCEPT, RELEASE, ACCEPT, RELEASE]))
    # a fetch from 0 re-reads the same log batch; only the released offsets are acquired
    assert sp.acquire("m2", batches(4), 10, now_ms=0, fetch_offset=1) == [
        AcquiredRange(1, 1, 2, LOCK),
        AcquiredRange(3, 3, 2, LOCK),
    ]
    assert sp.acquire("m3", batches(4), 10, now_ms=0) == []
    check(sp)


# -- acknowledge ---------------------------------------------------------------------
def test_per_offset_acknowledgement_splits_then_collapses():
    sp = make()
    sp.acquire("m", batches(10), 100, now_ms=0)
    types = [ACCEPT, ACCEPT, RELEASE, REJECT, GAP, ACCEPT, RELEASE, RELEASE, ACCEPT, ACCEPT]
    change = ack(sp, "m", (0, 9, types), commit=False)
    assert change.batches == [
        (0, 1, ACKNOWLEDGED, 1),
        (2, 2, AVAILABLE, 1),
        (3, 4, ARCHIVED, 1),
        (5, 5, ACKNOWLEDGED, 1),
        (6, 7, AVAILABLE, 1),
        (8, 9, ACKNOWLEDGED, 1),
    ]
    assert change.start_offset == 2 and change.delivery_complete_count == 5
    assert sp.start_offset == 0, "the start moves only once the write is committed"
    change.commit()
    assert sp.start_offset == 2 and sp.next_fetch_offset() == 2
    assert sp._batches[0].offsets is not None
    sp.acquire("m", batches(10), 100, now_ms=0, fetch_offset=2)
    ack(sp, "m", (2, 2, [ACCEPT]), (6, 7, [ACCEPT]))
    assert sp.start_offset == 10 and sp.end_offset == 9 and not sp._batches
    sp = make()
    sp.acquire("m", batches(4), 100, now_ms=0)
    ack(sp, "m", (0, 1, [RENEW]), now=5)
    assert sp._batches[0].offsets is not None
    ack(sp, "m", (2, 3, [RENEW]), now=5)
    assert sp._batches[0].offsets is None, "uniform offsets collapse back into one range"


def test_acknowledge_whole_range_stays_one_range():
    sp = make()
    sp.acquire("m", batches(50), 100, now_ms=0)
    change = ack(sp, "m", (0, 49, [RELEASE]))
    assert change.batches == [(0, 49, AVAILABLE, 1)] and change.start_offset == -1
    assert sp._batches[0].offsets is None


def test_gap_and_reject_archive_accept_acknowledges():
    sp = make()
    sp.acquire("m", batches(3), 100, now_ms=0)
    ack(sp, "m", (0, 0, [GAP]), (1, 1, [REJECT]), (2, 2, [ACCEPT]))
    assert sp.start_offset == 3 and sp.in_flight_count == 0 and sp.state_of(1) is None


def test_renew_restarts_the_lock_and_writes_nothing():
    sp = make()
    sp.acquire("m", batches(4), 100, now_ms=0)
    errors, change = sp.acknowledge("m", [(0, 3, [RENEW])], 600)
    assert errors == [NONE] and not change.needs_write and not change.pending
    assert sp.next_lock_deadline() == 600 + LOCK
    assert not sp.expire_locks(LOCK).needs_write
    assert states(sp, 0, 3) == [(ACQUIRED, 1, "m")] * 4
    assert sp.renew("m", 1, 1, 900) == NONE
    assert sp.next_lock_deadline() == 600 + LOCK
    expired = sp.expire_locks(600 + LOCK)
    assert expired.batches == [(0, 0, AVAILABLE, 1), (2, 3, AVAILABLE, 1)]
    assert sp.state_of(1) == (ACQUIRED, 1, "m")
    check(sp)
    # a renewal never leaves a change pending, even when the start moved meanwhile
    sp = make()
    sp.acquire("m", batches(4), 100, now_ms=0)
    sp.on_log_start_advanced(2)
    assert sp.renew("m", 2, 3, 10) == NONE and sp.pending_changes == 0


def test_renew_mixed_with_accept_in_one_batch():
    sp = make()
    sp.acquire("m", batches(3), 100, now_ms=0)
    change = ack(sp, "m", (0, 2, [ACCEPT, RENEW, ACCEPT]), now=50)
    assert change.batches == [(0, 0, ACKNOWLEDGED, 1), (2, 2, ACKNOWLEDGED, 1)]
    assert sp.state_of(1) == (ACQUIRED, 1, "m") and sp.next_lock_deadline() == 50 + LOCK


BAD_ACKS = [
    ("not acquired", "m1", [(4, 4, [ACCEPT])], [INVALID_RECORD_STATE]),
    ("held by another member", "m2", [(0, 1, [ACCEPT])], [INVALID_RECORD_STATE]),
    ("already acknowledged", "m1", [(2, 2, [ACCEPT])], [INVALID_RECORD_STATE]),
    ("overlapping", "m1", [(0, 1, [ACCEPT]), (1, 1, [ACCEPT])], [NONE, INVALID_REQUEST]),
    ("unordered", "m1", [(1, 1, [ACCEPT]), (0, 0, [ACCEPT])], [NONE, INVALID_REQUEST]),
    ("unknown type", "m1", [(0, 1, [5])], [INVALID_REQUEST]),
    ("length mismatch", "m1", [(0, 1, [ACCEPT, ACCEPT, ACCEPT])], [INVALID_REQUEST]),
    ("no types", "m1", [(0, 1, [])], [INVALID_REQUEST]),
    ("last before first", "m1", [(1, 0, [ACCEPT])], [INVALID_REQUEST]),
    ("past the end", "m1", [(0, 9, [ACCEPT])], [INVALID_REQUEST]),
    ("one good one bad", "m1", [(0, 1, [ACCEPT]), (3, 3, [ACCEPT])], [INVALID_RECORD_STATE] * 2),
]


@pytest.mark.parametrize(("name", "member", "request_", "expected"), BAD_ACKS, ids=[b[0] for b in BAD_ACKS])
def test_bad_acknowledgements_change_nothing(name, member, request_, expected):
    sp = make()
    sp.acquire("m1", batches(4), 100, now_ms=0)  # 0-3 held by m1
    ack(sp, "m1", (2, 2, [ACCEPT]), (3, 3, [RELEASE]))  # 2 done, 3 available
    sp.acquire("m1", [B(4, 4)], 100, now_ms=0)  # 3 and 4 held again
    ack(sp, "m1", (4, 4, [RELEASE]))
    before = snap(sp)
    errors, change = sp.acknowledge(member, request_, 10)
    # batches valid on their own inherit the request's error: nothing of the request applies
    first_error = next(e for e in expected if e)
    assert errors == [e or first_error for e in expected]
    assert not change.needs_write and snap(sp) == before
    change.undo()  # harmless on an empty change
    assert snap(sp) == before


def test_acknowledgement_below_start_is_ignored():
    sp = make()
    sp.acquire("m", batches(4), 100, now_ms=0)
    ack(sp, "m", (0, 1, [ACCEPT]))
    errors, change = sp.acknowledge("m", [(0, 2, [ACCEPT])], 0)
    assert errors == [NONE] and change.batches == [(2, 2, ACKNOWLEDGED, 1)]


def test_a_late_acknowledgement_wholly_below_the_start_is_invalid_record_state():
    """Kafka: an acknowledgement batch whose offsets are no longer in the in-flight cache gets
    INVALID_RECORD_STATE ("batch record not found"). Here: member a's lock ran out, b got the
    records again and accepted them, the start moved past them; a's ACCEPT arrives late.
    Before, it was answered NONE, so a believed its acknowledgement had counted."""
    sp = make()
    sp.acquire("a", batches(3), 100, now_ms=0)
    sp.expire_locks(LOCK).commit()
    assert [r.delivery_count for r in sp.acquire("b", batches(3), 100, now_ms=LOCK)] == [2]
    ack(sp, "b", (0, 2, [ACCEPT]))
    assert sp.start_offset == 3
    before = snap(sp)
    errors, change = sp.acknowledge("a", [(0, 2, [ACCEPT])], LOCK)
    assert errors == [INVALID_RECORD_STATE] and not change.needs_write and snap(sp) == before


def test_acknowledgement_objects_with_protocol_field_names():
    @dataclass
    class AckBatch:
        first_offset: int
        last_offset: int
        acknowledge_types: list[int]

    sp = make()
    sp.acquire("m", batches(2), 100, now_ms=0)
    errors, change = sp.acknowledge("m", [AckBatch(0, 1, [ACCEPT])], 0)
    assert errors == [NONE] and change.batches == [(0, 1, ACKNOWLEDGED, 1)]


# -- pending changes, commit, undo ------------------------------------------------
def test_undo_restores_exact_state():
    sp = make()
    sp.acquire("m1", batches(3, 3), 100, now_ms=0)
    sp.acquire("m2", batches(3, start=6), 100, now_ms=5)
    before = snap(sp)
    _e, change = sp.acknowledge("m1", [(0, 4, [ACCEPT, RELEASE, REJECT, GAP, ACCEPT])], 20)
    assert change.pending and snap(sp) != before
    change.undo()
    assert snap(sp) == before and not change.pending
    change.undo()  # idempotent
    with pytest.raises(RuntimeError):
        change.commit()
    expired = sp.expire_locks(5 + LOCK)
    assert snap(sp) != before
    expired.undo()
    assert snap(sp) == before
    released = sp.release_member("m2")
    released.undo()
    assert snap(sp) == before
    check(sp)


def test_pending_records_are_not_acquirable_or_acknowledgeable_and_block_the_start():
    sp = make()
    sp.acquire("m", batches(4), 100, now_ms=0)
    _e, release = sp.acknowledge("m", [(0, 1, [RELEASE])], 0)
    _e, accept = sp.acknowledge("m", [(2, 3, [ACCEPT])], 0)
    assert sp.next_fetch_offset() == 4 and sp.acquire("x", batches(4), 100, now_ms=0) == []
    assert sp.acknowledge("m", [(2, 2, [REJECT])], 0)[0] == [INVALID_RECORD_STATE]
    assert accept.start_offset == -1, "cannot pass 0-1, whose write is still pending"
    accept.commit()
    assert sp.start_offset == 0
    release.commit()
    assert sp.next_fetch_offset() == 0
    assert sp.acquire("x", batches(4), 100, now_ms=0) == [AcquiredRange(0, 1, 2, LOCK)]
    check(sp)


def test_outstanding_changes_undo_independently():
    sp = make()
    sp.acquire("m", batches(6), 100, now_ms=0)
    _e, first = sp.acknowledge("m", [(0, 2, [ACCEPT])], 0)
    _e, second = sp.acknowledge("m", [(3, 5, [ACCEPT])], 0)
    assert first.start_offset == 3 and second.start_offset == -1
    first.undo()
    assert states(sp, 0, 2) == [(ACQUIRED, 1, "m")] * 3
    assert states(sp, 3, 5) == [(ACKNOWLEDGED, 1, None)] * 3
    second.commit()
    assert sp.start_offset == 0
    _e, third = sp.acknowledge("m", [(0, 2, [ACCEPT])], 0)
    assert third.start_offset == 6, "the start the write establishes, over committed 3-5"
    third.commit()
    assert sp.start_offset == 6
    check(sp)


def test_committed_change_cannot_be_undone():
    sp = make()
    sp.acquire("m", batches(2), 100, now_ms=0)
    change = ack(sp, "m", (0, 1, [ACCEPT]))
    change.commit()  # idempotent
    with pytest.raises(RuntimeError):
        change.undo()


# -- locks, delivery limit, member release -----------------------------------------
def test_lock_expiry_makes_records_available_again():
    sp = make()
    sp.acquire("m", batches(3), 100, now_ms=0)
    sp.acquire("m", batches(2, start=3), 100, now_ms=500)
    assert sp.next_lock_deadline() == LOCK
    assert not sp.expire_locks(LOCK - 1).needs_write
    change = sp.expire_locks(LOCK)
    assert change.batches == [(0, 2, AVAILABLE, 1)] and change.start_offset == -1
    change.commit()
    assert sp.next_lock_deadline() == 500 + LOCK and sp.next_fetch_offset() == 0
    assert states(sp, 0, 4) == [(AVAILABLE, 1, None)] * 3 + [(ACQUIRED, 1, "m")] * 2
    check(sp)


def test_acknowledged_locks_disappear():
    sp = make()
    sp.acquire("m", batches(3), 100, now_ms=0)
    ack(sp, "m", (0, 2, [RELEASE]))
    assert sp.next_lock_deadline() is None
    assert not sp.expire_locks(10 * LOCK).needs_write


def test_delivery_limit_archives():
    sp = make(limit=3)
    now = 0
    for count in (1, 2, 3):
        got = sp.acquire("m", batches(2), 100, now_ms=now)
        assert got == [AcquiredRange(0, 1, count, now + LOCK)]
        now += LOCK
        change = sp.expire_locks(now)
        change.commit()
        check(sp)
    assert change.batches == [(0, 1, ARCHIVED, 3)]
    assert sp.start_offset == 2 and sp.acquire("m", batches(2), 100, now_ms=now) == []
    sp = make(limit=2)
    sp.acquire("m", batches(1), 100, now_ms=0)
    ack(sp, "m", (0, 0, [RELEASE]))
    sp.acquire("m", batches(1), 100, now_ms=0)
    assert ack(sp, "m", (0, 0, [RELEASE])).batches == [(0, 0, ARCHIVED, 2)]


def test_restored_records_at_the_limit_are_archived_not_sent():
    sp = make(0, [(0, 1, AVAILABLE, 5), (2, 3, AVAILABLE, 2)], limit=5)
    assert sp.acquire("m", batches(4), 100, now_ms=0) == [AcquiredRange(2, 3, 3, LOCK)]
    assert sp.start_offset == 2
    check(sp)


def test_release_member_gives_everything_back():
    sp = make(limit=2)
    sp.acquire("m1", batches(2), 100, now_ms=0)
    sp.acquire("m2", batches(2, start=2), 100, now_ms=0)
    ack(sp, "m1", (0, 0, [ACCEPT]))
    change = sp.release_member("m1")
    assert change.batches == [(1, 1, AVAILABLE, 0)], "closed session: delivery count decreases"
    change.commit()
    assert states(sp, 2, 3) == [(ACQUIRED, 1, "m2")] * 2
    assert not sp.release_member("m1").needs_write
    sp.acquire("m2", batches(2), 100, now_ms=0)  # offset 1 again, count 1
    sp.acquire("m3", [B(4, 5)], 100, now_ms=0)
    ack(sp, "m3", (4, 5, [RELEASE]))
    sp.acquire("m3", [B(4, 5)], 100, now_ms=0)  # count 2 = limit
    change = sp.release_member("m3", decrease_delivery_count=False)
    assert change.batches == [(4, 5, ARCHIVED, 2)]
    check(sp)


# -- restore, gap windows, start offset ------------------------------------------------
def test_restore_keeps_counts_and_terminal_states():
    persisted = [(10, 14, ACKNOWLEDGED, 1), (15, 19, AVAILABLE, 3), (20, 21, ARCHIVED, 5)]
    sp = make(10, persisted)
    assert sp.start_offset == 15 and sp.end_offset == 21 and sp.next_fetch_offset() == 15
    assert sp.state_of(12) is None and sp.state_of(15) == (AVAILABLE, 3, None)
    assert sp.acquire("m", batches(5, 7, start=15), 100, now_ms=0) == [
        AcquiredRange(15, 19, 4, LOCK),
        AcquiredRange(22, 26, 1, LOCK),
    ]
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


# -- the state machine ---------------------------------------------------------------------
MEMBERS = ("a", "b", "c")


class Model:
    """The semantics written per offset, independently of ranges, splits and caches:
    offset -> [state, delivery count, member, lock deadline, pending change]."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.rec: dict[int, list] = {}
        self.saved: dict[Change, list[tuple[int, list]]] = {}

    def restore(self, batches_) -> None:
        self.rec = {o: [s, c, None, -1, None] for f, last, s, c in batches_ for o in range(f, last + 1)}
        self.saved = {}

    def change(self, change: Change, o: int, new: list) -> None:
        self.saved.setdefault(change, []).append((o, list(self.rec[o])))
        self.rec[o] = new

    def held(self, member: str, first: int, last: int, start: int, end: int) -> bool:
        if last > end:
            return False
        return all(
            (r := self.rec.get(o)) is not None and r[0] == ACQUIRED and r[2] == member
            for o in range(max(first, start), last + 1)
        )

    def release(self, change: Change, o: int, start: int, *, decrease: bool, now: int | None = None) -> None:
        _s, c, _m, _d, _p = self.rec[o]
        if o < start:
            self.change(change, o, [ARCHIVED, c, None, -1, change])
        elif decrease:
            self.change(change, o, [AVAILABLE, max(c - 1, 0), None, -1, change])
        else:
            self.change(change, o, [ARCHIVED if c >= self.limit else AVAILABLE, c, None, -1, change])

    def settle(self, start: int) -> None:
        for o, r in self.rec.items():
            if o < start and r[0] == AVAILABLE and r[4] is None:
                r[0] = ARCHIVED

    def resolve(self, change: Change, commit: bool) -> None:
        for o, old in reversed(self.saved.pop(change, [])):
            if commit:
                self.rec[o][4] = None
            else:
                self.rec[o] = old

    def compare(self, sp: SharePartition) -> None:
        start = sp.start_offset
        tracked = {o for a, b, *_ in sp.ranges() for o in range(max(a, start), b + 1)}
        for o in tracked | {o for o in self.rec if o >= start}:
            r = self.rec.get(o)
            assert sp.state_of(o) == (None if r is None else tuple(r[:3])), o
        for o, r in self.rec.items():
            if r[0] == ACQUIRED:
                assert sp.state_of(o) == tuple(r[:3]), o
        deadlines = [r[3] for r in self.rec.values() if r[0] == ACQUIRED]
        assert sp.next_lock_deadline() == (min(deadlines) if deadlines else None)


class SharePartitionMachine(RuleBasedStateMachine):
    """Random traffic against one share partition, checked against `Model`, with a model of
    the persisted state: writes land in order (commit), or fail in any order (undo)."""

    @initialize(limit=st.integers(1, 4), cap=st.sampled_from([4, 12, 50]))
    def setup(self, limit: int, cap: int) -> None:
        self.limit, self.cap = limit, cap
        self.now = 0
        self.log: list[B] = []
        self.log_end = 0
        self.log_start = 0
        self.aborted: list[tuple[int, int, int]] = []
        self.deliverable: set[int] = set()
        self.max_batch = 1
        self.store_start = 0
        self.store_batches: list = []
        self.queue: list[Change] = []  # outstanding changes, in creation order
        self.done: set[int] = set()  # offsets made ACKNOWLEDGED / ARCHIVED for good
        self.model = Model(self.limit)
        self.sp = self._fresh()

    def _fresh(self) -> SharePartition:
        sp = SharePartition(
            "g", "t", 0, max_in_flight_records=self.cap, delivery_count_limit=self.limit, lock_duration_ms=LOCK
        )
        sp.initialize(1, self.store_start, self.store_batches, log_start_offset=self.log_start, high_watermark=0)
        self.model.restore(self.store_batches)
        self.model.settle(sp.start_offset)
        return sp

    def _queue(self, change: Change) -> None:
        if change.needs_write:
            assert change.pending
            self.queue.append(change)
        else:
            assert not change.pending
            self.model.resolve(change, commit=True)
        self.model.settle(self.sp.start_offset)

    # -- log ----------------------------------------------------------------------------
    @rule(
        what=st.lists(
            st.tuples(st.sampled_from(["data", "data", "data", "control", "aborted", "hole"]), st.integers(1, 4)),
            min_size=1,
            max_size=4,
        )
    )
    def produce(self, what: list[tuple[str, int]]) -> None:
        for kind, size in what:
            self._produce(kind, size)

    def _produce(self, kind: str, size: int) -> None:
        o = self.log_end
        if kind == "data":
            self.log.append(B(o, o + size - 1))
            self.deliverable.update(range(o, o + size))
        elif kind == "control":
            self.log.append(B(o, o, is_control=True, producer_id=9))
            size = 1
        elif kind == "aborted":
            self.log.append(B(o, o + size - 1, producer_id=7, is_transactional=True))
            self.log.append(B(o + size, o + size, is_control=True, producer_id=7))
            self.aborted.append((7, o, o + size))
            size += 1
        else:  # offsets compaction removed (no batch holds them), then a record
            self.log.append(B(o + size, o + size))
            self.deliverable.add(o + size)
            size += 1
        self.log_end = o + size
        self.max_batch = max(self.max_batch, size)

    @rule(n=st.integers(1, 6), rare=st.integers(0, 7))
    def retention(self, n: int, rare: int) -> None:
        if rare:
            return
        self.log_start = min(self.log_end, self.log_start + n)
        self.sp.on_log_start_advanced(self.log_start)
        self.model.settle(self.sp.start_offset)

    # -- consumers --------------------------------------------------------------------------
    @rule(
        member=st.sampled_from(MEMBERS),
        max_records=st.integers(1, 8),
        batch_optimized=st.booleans(),
        read_batches=st.integers(1, 5),
        explicit=st.booleans(),
    )
    def fetch(self, member: str, max_records: int, batch_optimized: bool, read_batches: int, explicit: bool) -> None:
        sp, model = self.sp, self.model
        if not sp.acquirable(self.log_end):
            return
        offset = sp.next_fetch_offset()
        fetched = [b for b in self.log if b.last_offset >= offset][:read_batches]
        if not fetched:
            return
        lo, hi = min(offset, fetched[0].base_offset), fetched[-1].last_offset
        before = {o: (list(model.rec[o]) if o in model.rec else None) for o in range(lo, hi + 1)}
        in_flight = sp.in_flight_count
        got = sp.acquire(
            member,
            fetched,
            max_records,
            batch_optimized=batch_optimized,
            now_ms=self.now,
            aborted=self.aborted,
            fetch_offset=offset if explicit else None,
        )
        total = 0
        for r in got:
            assert r.first_offset <= r.last_offset and r.lock_deadline_ms == self.now + LOCK
            for o in range(r.first_offset, r.last_offset + 1):
                old = before[o]
                assert old is None or (old[0] == AVAILABLE and old[4] is None), "acquired twice / while pending"
                assert o not in self.done, "a finished record was delivered again"
                assert o in self.deliverable and o >= sp.start_offset
                assert r.delivery_count == (0 if old is None else old[1]) + 1 <= self.limit
                model.rec[o] = [ACQUIRED, r.delivery_count, member, r.lock_deadline_ms, None]
                total += 1
        for o, old in before.items():  # what the fetch archived instead of delivering
            if old is not None and old[0] == AVAILABLE and sp.state_of(o) == (ARCHIVED, old[1], None):
                assert old[4] is None and (o not in self.deliverable or old[1] >= self.limit or o < sp.start_offset)
                model.rec[o][0] = ARCHIVED
                self.done.add(o)
        if not batch_optimized:
            assert total <= max_records
        assert sp.in_flight_count <= max(in_flight, self.cap + self.max_batch - 1)
        model.settle(sp.start_offset)

    def _held(self, member: str) -> list[tuple[int, int]]:
        return [(a, b) for a, b, s, _c, m in self.sp.ranges() if s == ACQUIRED and m == member]

    def _acknowledge(self, member: str, request: list, *, undo_at_once: bool = False) -> None:
        sp, model = self.sp, self.model
        start, end = sp.start_offset, sp.end_offset
        cached = [(a, b) for a, b, *_rest in sp.ranges()]

        def held(f: int, last: int) -> bool:
            if max(f, start) > last:
                # Wholly below the start: accepted (and skipped) only while a range still in the
                # cache holds some of it; once dropped, Kafka answers INVALID_RECORD_STATE.
                return any(a <= last and b >= f for a, b in cached)
            return model.held(member, f, last, start, end)

        ok = all(0 <= t <= 4 for _f, _l, types in request for t in types) and all(
            held(f, last) for f, last, _t in request
        )
        before = snap(sp)
        errors, change = sp.acknowledge(member, request, self.now)
        if not ok:
            assert all(errors) and snap(sp) == before and not change.needs_write
            return
        assert errors == [NONE] * len(request)
        for f, last, types in request:
            for o in range(max(f, start), last + 1):
                t = types[0] if len(types) == 1 else types[o - f]
                r = model.rec[o]
                if t == RENEW:
                    r[3] = self.now + LOCK
                    continue
                state = {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, RELEASE: AVAILABLE, REJECT: ARCHIVED}[t]
                if state == AVAILABLE and r[1] >= self.limit:
                    state = ARCHIVED
                model.change(change, o, [state, r[1], None, -1, change])
        if undo_at_once and change.needs_write:
            change.undo()  # the write failed at once: exactly as before (renewals aside)
            model.resolve(change, commit=False)
            if not any(RENEW in t for _f, _l, t in request):
                assert snap(sp) == before
            return
        self._queue(change)

    @rule(data=st.data())
    def acknowledge(self, data) -> None:
        holders = [m for m in MEMBERS if self._held(m)]
        if not holders:
            return
        member = data.draw(st.sampled_from(holders))
        held = self._held(member)
        picks = sorted(set(data.draw(st.lists(st.integers(0, len(held) - 1), min_size=1, max_size=3))))
        request = []
        for i in picks:
            a, b = held[i]
            first = data.draw(st.integers(a, b))
            last = data.draw(st.integers(first, b))
            if data.draw(st.booleans()):
                types = [data.draw(st.sampled_from([GAP, ACCEPT, RELEASE, REJECT, RENEW]))]
            else:
                types = data.draw(st.lists(st.sampled_from([ACCEPT, RELEASE, REJECT, RENEW]), min_size=last - first + 1,
                                           max_size=last - first + 1))  # fmt: skip
            request.append((first, last, types))
        self._acknowledge(member, request, undo_at_once=data.draw(st.booleans()))

    @rule(member=st.sampled_from(MEMBERS), first=st.integers(0, 40), n=st.integers(0, 3), t=st.integers(0, 5))
    def random_acknowledge(self, member: str, first: int, n: int, t: int) -> None:
        """Mostly invalid: not held, held by another member, done, past the end, bad type."""
        self._acknowledge(member, [(first, first + n, [t])])

    @rule(
        member=st.sampled_from(MEMBERS),
        max_records=st.integers(1, 8),
        batch_optimized=st.booleans(),
        data=st.data(),
    )
    def consume(self, member: str, max_records: int, batch_optimized: bool, data) -> None:
        """Fetch, then acknowledge what this member holds with one random type per offset."""
        self.fetch(member, max_records, batch_optimized, 3, False)
        request = []
        for a, b in self._held(member):
            kinds = [GAP, ACCEPT, ACCEPT, ACCEPT, RELEASE, REJECT, RENEW]
            request.append((a, b, data.draw(st.lists(st.sampled_from(kinds), min_size=b - a + 1, max_size=b - a + 1))))
        if request:
            self._acknowledge(member, request, undo_at_once=data.draw(st.booleans()))

    @rule(ms=st.sampled_from([1, 10, 100, LOCK // 2, LOCK, 2 * LOCK]))
    def tick(self, ms: int) -> None:
        self.now += ms
        start = self.sp.start_offset
        change = self.sp.expire_locks(self.now)
        for o, r in sorted(self.model.rec.items()):
            if r[0] == ACQUIRED and r[3] <= self.now:
                self.model.release(change, o, start, decrease=False)
        self._queue(change)

    @rule(member=st.sampled_from(MEMBERS), decrease=st.booleans())
    def member_leaves(self, member: str, decrease: bool) -> None:
        start = self.sp.start_offset
        change = self.sp.release_member(member, decrease_delivery_count=decrease)
        for o, r in sorted(self.model.rec.items()):
            if r[0] == ACQUIRED and r[2] == member:
                self.model.release(change, o, start, decrease=decrease)
        self._queue(change)
        assert not self._held(member)

    # -- persistence ---------------------------------------------------------------------------
    @precondition(lambda self: self.queue)
    @rule()
    def write_succeeds(self) -> None:
        """The oldest write reached the share coordinator: merge it as the shard does."""
        change = self.queue.pop(0)
        if change.start_offset != -1:
            assert change.start_offset >= self.store_start, "persisted start offset went back"
            self.store_start = change.start_offset
        self.store_batches = merge_batches(self.store_batches, change.batches, self.store_start)
        for first, last, state, _count in change.batches:
            if state in (ACKNOWLEDGED, ARCHIVED):
                self.done.update(range(first, last + 1))
        change.commit()
        self.model.resolve(change, commit=True)
        self.model.settle(self.sp.start_offset)

    @precondition(lambda self: self.queue)
    @rule(data=st.data())
    def write_fails(self, data) -> None:
        change = self.queue.pop(data.draw(st.integers(0, len(self.queue) - 1)))
        change.undo()
        self.model.resolve(change, commit=False)
        self.model.settle(self.sp.start_offset)

    @rule()
    def restart(self) -> None:
        """The leader moves: outstanding writes are lost, the state comes from the store."""
        self.queue.clear()
        self.sp = self._fresh()

    @invariant()
    def consistent(self) -> None:
        if hasattr(self, "sp"):
            check(self.sp)
            self.model.compare(self.sp)

    def teardown(self) -> None:
        """Once everyone accepts everything, every record ends up done, none skipped."""
        if not hasattr(self, "sp"):
            return
        stalled = 0
        while self.sp.start_offset < self.log_end and stalled < 5:
            while self.queue:
                self.write_succeeds()
            sp = self.sp
            before = (sp.start_offset, sp.end_offset)
            for member in MEMBERS:
                held = self._held(member)
                if held:
                    self._acknowledge(member, [(a, b, [ACCEPT]) for a, b in held])
            while self.queue:
                self.write_succeeds()
            self.fetch("a", 50, True, 10, True)
            if not sp.acquirable(self.log_end):
                self.tick(2 * LOCK)
            self.consistent()
            stalled = stalled + 1 if (sp.start_offset, sp.end_offset) == before else 0
        sp = self.sp
        assert sp.start_offset == self.log_end, (
            f"stuck at {sp.start_offset} (log end {self.log_end}, end {sp.end_offset}, next fetch "
            f"{sp.next_fetch_offset()}, in flight {sp.in_flight_count}/{self.cap}): {list(sp.ranges())[:6]}"
        )
        missed = {o for o in self.deliverable if o >= self.log_start} - self.done
        assert not missed, f"records never finished: {sorted(missed)}"


SharePartitionMachine.TestCase.settings = settings(
    max_examples=400, stateful_step_count=80, deadline=None, suppress_health_check=list(HealthCheck)
)
TestSharePartitionMachine = SharePartitionMachine.TestCase
