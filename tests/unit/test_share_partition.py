"""SharePartition, the sans-IO share-partition core: acquire, acknowledge, pending changes, locks.

Acquiring records (new, released, batch limits), acknowledging them (per
offset and whole ranges, every acknowledgement type, bad requests), pending
changes with commit and undo, lock expiry, the delivery count limit and member
release. Restore, gap windows, the start offset, the in-flight cap, control
batches and transactions are in tests/unit/test_share_partition_log.py, the
randomized state machine in tests/unit/test_share_partition_machine.py, the shared
helpers (``make``, ``check`` and the batch stand-ins) in
tests/support/share_partition.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from shoal.broker.share.share_partition import AcquiredRange
from shoal.protocol.constants import ACCEPT, ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, GAP, REJECT, RELEASE, RENEW

# check() asserts the invariants: let pytest rewrite its asserts (as it did when it lived in the test module).
pytest.register_assert_rewrite("tests.support.share_partition")

from tests.support.share_partition import (  # noqa: E402
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    LOCK,
    NONE,
    B,
    ack,
    batches,
    check,
    make,
    snap,
    states,
)


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
        if count < 3:
            assert got == [AcquiredRange(0, 1, count, now + LOCK)]
        else:  # the last delivery goes to each record alone (KAFKA-17541)
            assert got == [AcquiredRange(0, 0, 3, now + LOCK)]
            assert sp.acquire("m", batches(2), 100, now_ms=now) == [AcquiredRange(1, 1, 3, now + LOCK)]
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


def test_record_limit_reads_a_long_batch_only_as_far_as_it_takes(monkeypatch):
    """One 30,000-record log batch handed out 5 records at a time: each fetch reads the per-offset
    state from the first available offset and only as far as it takes, not the whole batch
    (it did, which made tiny records in 1 MiB batches crawl under 32 members)."""
    from shoal.broker.share.in_flight import OffsetStates

    n = 30_000
    sp = make(cap=n)
    big = batches(n)
    assert sp.acquire("m0", big, n, now_ms=0) == [AcquiredRange(0, n - 1, 1, LOCK)]
    # every 7th record accepted, the rest released: the batch is split per offset, with holes
    ack(sp, "m0", (0, n - 1, [ACCEPT if i % 7 == 0 else RELEASE for i in range(n)]))
    reads = []
    real_key = OffsetStates.key
    monkeypatch.setattr(OffsetStates, "key", lambda self, i: reads.append(i) or real_key(self, i))
    taken: list[int] = []
    for f in range(40):
        reads.clear()
        got = sp.acquire(f"m{f % 3}", big, 5, batch_optimized=False, now_ms=0)
        assert sum(r.last_offset - r.first_offset + 1 for r in got) == 5
        assert all(r.delivery_count == 2 for r in got)
        taken += [o for r in got for o in range(r.first_offset, r.last_offset + 1)]
        assert len(reads) < 50, f"fetch {f} read {len(reads)} offsets' state"
    assert taken == [o for o in range(n) if o % 7][: len(taken)]  # in order, accepted ones skipped
    monkeypatch.undo()
    check(sp)


def test_a_long_batch_near_the_poison_threshold_is_still_throttled_whole():
    """The bounded read is skipped when some offset of the batch may have reached the poison
    threshold: the throttle needs the counts of every acquirable run."""
    n = 64
    sp = make(cap=n, limit=4)  # threshold 2
    sp.acquire("m", batches(n), n, now_ms=0)
    ack(sp, "m", (0, n - 1, [ACCEPT] + [RELEASE] * (n - 1)))  # split per offset at count 1
    assert sp.acquire("m", batches(n), n, now_ms=0) == [AcquiredRange(1, n - 1, 2, LOCK)]
    ack(sp, "m", (1, n - 1, [RELEASE] * (n - 1)))  # counts 2 now: halves from here
    got = sp.acquire("m", batches(n), 100, now_ms=0)
    assert got == [AcquiredRange(1, 32, 3, LOCK)]  # half the range (64 >> 1), not all 63
    check(sp)
