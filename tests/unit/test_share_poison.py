"""Poison isolation (KAFKA-17541) and the ARCHIVING state (KIP-1191) of the sans-IO share
partition, driven with a plain-int clock.

A consumer that fails a whole batch whenever it holds one bad record must not drag the good
records of that batch to the delivery limit: from the throttle threshold on, a range is handed
out alone and in halves, and each record's last delivery is its own.
"""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("tests.support.share_partition")

from shoal.broker.share import poison  # noqa: E402
from shoal.broker.share.share_partition import AcquiredRange  # noqa: E402
from shoal.protocol.constants import (  # noqa: E402
    ACCEPT,
    ACKNOWLEDGED,
    ARCHIVED,
    ARCHIVING,
    AVAILABLE,
    REJECT,
    RELEASE,
)
from tests.support.share_partition import LOCK, ack, batches, check, make  # noqa: E402

BAD = 37


@pytest.mark.parametrize(("limit", "threshold"), [(2, 2), (3, 2), (4, 2), (5, 3), (6, 3), (10, 5)])
def test_threshold_is_half_the_limit_rounded_up_at_least_two(limit: int, threshold: int) -> None:
    assert poison.threshold(limit) == threshold


@pytest.mark.parametrize("failure", ["release", "lock expiry"])
def test_one_bad_record_in_a_batch_of_100_is_archived_alone(failure: str) -> None:
    """The consumer fails (RELEASEs, or lets the lock run out on) every range that holds offset 37
    and accepts every other. Deliveries follow Kafka's halving: the whole batch three times,
    then halves at delivery count 3 (the threshold of limit 5), then the last attempt of each
    record alone; 37 ends ARCHIVED alone at count 5 and the other 99 are ACKNOWLEDGED."""
    sp = make(limit=5)
    now = 0
    log = batches(100)
    seen: list[tuple[int, int, int]] = []
    for _ in range(200):
        got = sp.acquire("m", log, 500, now_ms=now)
        if not got:
            break
        for r in got:
            seen.append((r.first_offset, r.last_offset, r.delivery_count))
            if r.first_offset <= BAD <= r.last_offset:
                if failure == "release":
                    ack(sp, "m", (r.first_offset, r.last_offset, [RELEASE]), now=now)
                else:
                    now = r.lock_deadline_ms
                    sp.expire_locks(now).commit()
                    check(sp)
            else:
                ack(sp, "m", (r.first_offset, r.last_offset, [ACCEPT]), now=now)
        now += 1
    # fetches start at the first available offset: the failed half's last attempts come first
    alone = [(o, o, 5) for o in range(50)]
    assert seen == [(0, 99, 1), (0, 99, 2), (0, 99, 3), (0, 49, 4), *alone, (50, 99, 4)]
    assert sp.start_offset == 100 and sp.acquire("m", log, 500, now_ms=now) == []


def test_the_bad_record_ends_archived_and_every_other_acknowledged() -> None:
    sp = make(limit=5)
    log = batches(100)
    outcome: dict[int, int] = {}
    for _ in range(200):
        got = sp.acquire("m", log, 500, now_ms=0)
        if not got:
            break
        for r in got:
            t = RELEASE if r.first_offset <= BAD <= r.last_offset else ACCEPT
            change = ack(sp, "m", (r.first_offset, r.last_offset, [t]))
            for first, last, state, count in change.batches:
                for o in range(first, last + 1):
                    outcome[o] = (state, count)
    assert outcome[BAD] == (ARCHIVED, 5)
    assert {o: s for o, (s, _c) in outcome.items() if o != BAD} == {o: ACKNOWLEDGED for o in range(100) if o != BAD}
    # the good records of the bad half were delivered 5 times, those of the good half 4 times
    assert {outcome[o][1] for o in range(50) if o != BAD} == {5}
    assert {outcome[o][1] for o in range(50, 100)} == {4}


@pytest.mark.parametrize("count", [5, 6, 7, 8])
def test_each_further_failure_halves_again(count: int) -> None:
    """Limit 10 (threshold 5): a range of 100 delivered `count` times goes out 100 >> (count - 4)."""
    sp = make(0, [(0, 99, AVAILABLE, count)], limit=10)
    got = sp.acquire("m", batches(100), 500, now_ms=0)
    assert got == [AcquiredRange(0, (100 >> (count - 4)) - 1, count + 1, LOCK)]
    check(sp)


def test_the_last_delivery_is_alone_and_below_the_threshold_nothing_is_throttled() -> None:
    sp = make(0, [(0, 99, AVAILABLE, 9)], limit=10)
    assert sp.acquire("m", batches(100), 500, now_ms=0) == [AcquiredRange(0, 0, 10, LOCK)]
    assert sp.acquire("m", batches(100), 500, now_ms=0) == [AcquiredRange(1, 1, 10, LOCK)]
    sp = make(0, [(0, 99, AVAILABLE, 4)], limit=10)
    assert sp.acquire("m", batches(100), 500, now_ms=0) == [AcquiredRange(0, 99, 5, LOCK)]


def test_a_throttled_range_is_never_fetched_with_other_records() -> None:
    sp = make(0, [(0, 9, AVAILABLE, 1), (10, 19, AVAILABLE, 3), (20, 29, AVAILABLE, 1)], limit=5)
    log = batches(30)
    assert sp.acquire("m", log, 500, now_ms=0) == [AcquiredRange(0, 9, 2, LOCK)]  # ends before it
    assert sp.acquire("m", log, 500, now_ms=0) == [AcquiredRange(10, 14, 4, LOCK)]  # half, then ends
    assert sp.acquire("m", log, 500, now_ms=0) == [AcquiredRange(15, 19, 4, LOCK)]
    assert sp.acquire("m", log, 500, now_ms=0) == [AcquiredRange(20, 29, 2, LOCK)]
    check(sp)


# -- ARCHIVING (KIP-1191) ------------------------------------------------------------------
def test_with_a_dead_letter_topic_reject_and_the_limit_go_through_archiving() -> None:
    sp = make(limit=2)
    sp.archive_to = ARCHIVING
    sp.acquire("m", batches(4), 100, now_ms=0)
    change = ack(sp, "m", (0, 0, [REJECT]), (1, 1, [RELEASE]), (2, 3, [ACCEPT]))
    assert change.batches == [(0, 0, ARCHIVING, 1), (1, 1, AVAILABLE, 1), (2, 3, ACKNOWLEDGED, 1)]
    assert sp.start_offset == 0 and sp.delivery_complete_count() == 2  # ARCHIVING is not done
    assert sp.acquire("m", batches(4), 100, now_ms=0) == [AcquiredRange(1, 1, 2, LOCK)]
    sp.expire_locks(LOCK).commit()  # the lock ran out at the limit
    check(sp)
    assert sp.state_of(1) == (ARCHIVING, 2, None) and sp.start_offset == 0
    done = sp.finish_archiving(0, 1)
    assert done.batches == [(0, 0, ARCHIVED, 1), (1, 1, ARCHIVED, 2)]
    assert done.start_offset == 4
    done.commit()
    check(sp)
    assert sp.start_offset == 4
    assert not sp.finish_archiving(0, 3).needs_write  # nothing ARCHIVING is left


def test_archiving_survives_a_restore_and_is_neither_delivered_nor_done() -> None:
    sp = make(0, [(0, 1, ARCHIVING, 3), (2, 3, AVAILABLE, 1)], limit=5)
    assert sp.state_of(0) == (ARCHIVING, 3, None) and sp.start_offset == 0
    assert sp.acquire("m", batches(4), 100, now_ms=0) == [AcquiredRange(2, 3, 2, LOCK)]
    assert [(a, b, s) for a, b, s, _c, _m in sp.ranges() if s == ARCHIVING] == [(0, 1, ARCHIVING)]
    ack(sp, "m", (2, 3, [ACCEPT]))
    assert sp.start_offset == 0  # waits for the copy
    change = sp.finish_archiving(0, 1)
    assert change.batches == [(0, 1, ARCHIVED, 3)] and change.start_offset == 4
    change.undo()  # a failed write leaves them ARCHIVING
    assert sp.state_of(1) == (ARCHIVING, 3, None)
    check(sp)


def test_without_a_dead_letter_topic_records_are_archived_at_once() -> None:
    sp = make(limit=5)
    sp.acquire("m", batches(2), 100, now_ms=0)
    assert ack(sp, "m", (0, 1, [REJECT])).batches == [(0, 1, ARCHIVED, 1)]
    assert sp.start_offset == 2
