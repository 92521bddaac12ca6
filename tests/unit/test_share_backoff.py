"""Redelivery back-off (shoal.share.redelivery.backoff.*) of the sans-IO share partition, with a
fake clock: a released or timed-out record is not acquirable again before
min(max, base * multiplier^(deliveries - 1)) has passed, and the default (0) changes nothing."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("tests.support.share_partition")

from shoal.broker.share.backoff import BackoffPolicy, Holds  # noqa: E402
from shoal.protocol.constants import ACCEPT, ACQUIRED, AVAILABLE, RELEASE  # noqa: E402
from tests.support.share_partition import LOCK, batches, check, make  # noqa: E402


def ack(sp, member, *batches_, now=0):
    """Acknowledge and commit (the shared helper's check() expects no record to be waiting)."""
    errors, change = sp.acknowledge(member, list(batches_), now)
    assert not any(errors), errors
    change.commit()


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def backing_off(base: int = 100, max_ms: int = 1000, mult: float = 2.0):
    sp = make()
    clock = Clock()
    sp.clock = clock
    sp.backoff = BackoffPolicy(base, max_ms, mult)
    return sp, clock


def got(sp, clock, member="m", n=10, log=None):
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in sp.acquire(
        member, log or batches(10), n, now_ms=clock.now)]  # fmt: skip


def test_policy_grows_by_multiplier_and_stops_at_max() -> None:
    p = BackoffPolicy(100, 1000, 2.0)
    assert [p.delay(c) for c in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]
    assert BackoffPolicy(100, 1000, 1.0).delay(9) == 100
    assert BackoffPolicy(100, 50, 3.0).delay(1) == 100  # the max never cuts below the base
    assert BackoffPolicy(0).delay(5) == 0 and not BackoffPolicy().enabled
    assert BackoffPolicy(10, 10**9, 10.0).delay(10**6) == 10**9  # no overflow on huge counts


def test_holds_carve_and_end() -> None:
    h = Holds()
    h.hold(0, 9, 100)
    h.hold(3, 4, 50)
    assert h.free(0, 9, 10) == []
    assert h.free(0, 9, 60) == [(3, 4)]
    assert h.next_end(60) == 100
    assert h.free(0, 12, 100) == [(0, 12)] and not h and h.next_end(100) is None


def test_released_record_waits_for_its_backoff() -> None:
    sp, clock = backing_off()
    assert got(sp, clock) == [(0, 9, 1)]
    ack(sp, "m", (0, 9, [RELEASE] + [ACCEPT] * 9), now=clock.now)
    assert sp.state_of(0)[0] == AVAILABLE
    assert not sp.acquirable(10) and sp.next_fetch_offset() == 10
    assert sp.next_backoff_end() == 100
    clock.now = 99
    assert got(sp, clock, log=batches(10)) == []
    clock.now = 100
    assert sp.acquirable(10) and sp.next_fetch_offset() == 0 and sp.next_backoff_end() is None
    assert got(sp, clock) == [(0, 0, 2)]
    check(sp)


def test_backoff_grows_with_delivery_count_and_is_capped() -> None:
    sp, clock = backing_off(100, 300, 2.0)
    waits = []
    for _ in range(4):
        assert got(sp, clock, n=1)[0][0] == 0
        _e, change = sp.acknowledge("m", [(0, 0, [RELEASE])], clock.now)
        change.commit()
        released = clock.now
        while not sp.acquirable(10) or sp.next_fetch_offset() != 0:
            clock.now += 1
        waits.append(clock.now - released)
    assert waits == [100, 200, 300, 300]


def test_lock_timeout_backs_off_too_and_only_what_timed_out() -> None:
    sp, clock = backing_off(500, 10_000, 2.0)
    assert got(sp, clock, n=5, log=batches(5, 5)) == [(0, 4, 1)]  # to m at t=0
    clock.now = 10
    assert got(sp, clock, member="n", n=5, log=batches(5, 5)) == [(5, 9, 1)]
    clock.now = LOCK
    sp.expire_locks(clock.now).commit()  # 0..4 time out; 5..9 are still n's
    assert [sp.state_of(o)[0] for o in (0, 4, 5)] == [AVAILABLE, AVAILABLE, ACQUIRED]
    clock.now = LOCK + 499
    assert got(sp, clock, member="x") == [] and sp.next_backoff_end() == LOCK + 500
    clock.now = LOCK + 500
    assert got(sp, clock, member="x") == [(0, 4, 2)]


def test_session_close_release_does_not_back_off() -> None:
    sp, clock = backing_off()
    got(sp, clock)
    sp.release_member("m").commit()  # a share session closed normally: not a failure
    assert sp.acquirable(10) and got(sp, clock, member="n") == [(0, 9, 1)]


def test_part_of_a_range_in_backoff_leaves_the_rest_acquirable() -> None:
    sp, clock = backing_off()
    got(sp, clock)
    ack(sp, "m", (0, 9, [ACCEPT] * 3 + [RELEASE] * 2 + [ACCEPT] * 5), now=clock.now)
    clock.now = 50
    assert got(sp, clock, member="n", log=batches(10, 5)) == [(10, 14, 1)]
    clock.now = 100
    assert got(sp, clock, member="n", log=batches(10, 5)) == [(3, 4, 2)]


def test_default_is_kafkas_immediate_redelivery() -> None:
    sp = make()
    sp.acquire("m", batches(10), 10, now_ms=0)
    ack(sp, "m", (0, 9, [RELEASE]))
    assert sp.next_fetch_offset() == 0 and sp.next_backoff_end() is None
    assert [r.delivery_count for r in sp.acquire("n", batches(10), 10, now_ms=0)] == [2]


def test_restart_restarts_the_backoff_from_load_time() -> None:
    """Holds are not persisted, the delivery count is: a reloaded partition holds released records
    for their back-off again, counted from the load."""
    sp, clock = backing_off(100, 10_000, 2.0)
    got(sp, clock)
    got(sp, clock, log=batches(10, 5))  # 10..14 stay with m across the restart (lost: not persisted)
    ack(sp, "m", (0, 9, [RELEASE]), now=clock.now)
    persisted = [(a, b, s, c) for a, b, s, c, _m in sp.ranges() if s != ACQUIRED]
    clock.now = 5000  # the broker comes back later
    sp.initialize(4, sp.start_offset, persisted, log_start_offset=0, high_watermark=15)
    assert sp.next_backoff_end() == 5100 and sp.next_fetch_offset() == 10
    assert got(sp, clock, log=batches(10, 5)) == [(10, 14, 1)]
    clock.now = 5100
    assert got(sp, clock) == [(0, 9, 2)]
