"""HeartbeatMembership (shoal/client/core/heartbeat_membership.py), the base both heartbeat
members share, driven through both real subclasses (KIP-848 consumer and share) with a fake
clock: the same error classes, backoff, stale answers and poll timer must hold for each."""

from __future__ import annotations

import pytest

from shoal.client.consumer.group.membership_848 import ConsumerMembership
from shoal.client.core.heartbeat_membership import HeartbeatMembership, MemberState
from shoal.client.share.membership import ShareMembership
from shoal.protocol.errors import ErrorCode


def consumer() -> ConsumerMembership:
    m = ConsumerMembership(
        "g", "m", rebalance_timeout_ms=10_000, retry_backoff_ms=100, retry_backoff_max_ms=1000, jitter=lambda: 1.0
    )
    m.subscribe(["t"], None, 0)
    return m


def share() -> ShareMembership:
    m = ShareMembership(
        "g", "m", max_poll_interval_ms=10_000, retry_backoff_ms=100, retry_backoff_max_ms=1000, jitter=lambda: 1.0
    )
    m.subscribe(["t"], 0)
    return m


members = pytest.mark.parametrize("make", [consumer, share], ids=["consumer", "share"])


@members
def test_retries_back_off_doubling_to_the_cap_and_reset_on_success(make) -> None:
    m: HeartbeatMembership = make()
    now = 0.0
    waits = []
    for _ in range(6):
        req = m.next_request(now)
        assert req is not None
        assert not m.on_failure(req.token, now, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        due = m.wake_at(now)
        waits.append(due - now)
        assert m.next_request(due - 1) is None
        now = due
    assert waits == [100, 200, 400, 800, 1000, 1000]
    req = m.next_request(now)
    assert not m.on_response(req.token, 0, 5, 300, None, now)
    assert m.state is MemberState.STABLE and m.member_epoch == 5 and m.wake_at(now) == now + 300
    req = m.next_request(now + 300)
    m.on_failure(req.token, now + 300, None)  # a network failure: backoff starts over
    assert m.wake_at(now + 300) == now + 400


@members
def test_coordinator_moves_are_flagged_until_the_next_answer(make) -> None:
    m: HeartbeatMembership = make()
    req = m.next_request(0)
    m.on_response(req.token, ErrorCode.NOT_COORDINATOR, 0, 0, None, 0)
    assert m.coordinator_gone and m.state is MemberState.JOINING
    req = m.next_request(100)
    m.on_failure(req.token, 100, ErrorCode.REQUEST_TIMED_OUT)
    assert not m.coordinator_gone
    req = m.next_request(300)
    m.on_failure(req.token, 300, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert m.coordinator_gone
    req = m.next_request(700)
    m.on_response(req.token, 0, 1, 200, None, 700)
    assert not m.coordinator_gone and m.state is MemberState.STABLE


@members
def test_answers_to_an_earlier_request_are_ignored_and_fencing_rejoins(make) -> None:
    m: HeartbeatMembership = make()
    first = m.next_request(0)
    m.on_response(first.token, 0, 4, 200, None, 0)
    beat = m.next_request(200)
    m.on_response(beat.token, ErrorCode.FENCED_MEMBER_EPOCH, 0, 0, None, 210)
    assert m.state is MemberState.JOINING and m.member_epoch == 0 and m.wake_at(210) == 210
    assert not m.on_response(beat.token, 0, 9, 200, None, 220)  # already answered
    assert not m.on_response(first.token, 0, 9, 200, None, 220)
    assert m.member_epoch == 0
    rejoin = m.next_request(210)
    assert rejoin.member_epoch == 0 and rejoin.token > beat.token


@members
def test_errors_a_retry_cannot_fix_are_fatal_and_silence_the_member(make) -> None:
    m: HeartbeatMembership = make()
    req = m.next_request(0)
    m.on_response(req.token, ErrorCode.GROUP_AUTHORIZATION_FAILED, 0, 0, None, 0, "no")
    assert (m.state, m.fatal, m.fatal_message) == (MemberState.FATAL, ErrorCode.GROUP_AUTHORIZATION_FAILED, "no")
    assert m.next_request(10_000) is None and m.wake_at(10_000) is None


@members
def test_the_poll_timer_leaves_then_the_next_poll_rejoins(make) -> None:
    m: HeartbeatMembership = make()
    req = m.next_request(0)
    m.on_response(req.token, 0, 3, 5000, None, 0)
    assert m.poll_deadline() == 10_000 and m.wake_at(6000) == 5000
    beat = m.next_request(5000)
    m.on_response(beat.token, 0, 3, 5000, None, 5000)
    assert m.wake_at(9000) == 10_000
    leave = m.next_request(10_000)
    assert leave.member_epoch < 0 and m.state is MemberState.LEAVING
    m.on_response(leave.token, 0, -1, 0, None, 10_010)
    assert m.state is MemberState.STALE and m.next_request(20_000) is None
    m.on_poll(20_000)
    assert m.state is MemberState.JOINING and m.next_request(20_000).member_epoch == 0
