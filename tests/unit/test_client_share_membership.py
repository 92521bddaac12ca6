"""ShareMembership (shoal/client/share/membership.py) driven directly with a fake clock:
joins, intervals, subscription changes, fencing, retries, fatal errors, the
poll timer and leaving; plus a hypothesis run of random answers checking the
protocol rules every heartbeat must follow."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.client.share.membership import MemberState, ShareMembership, new_member_id
from shoal.protocol.errors import ErrorCode

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def member(**kw) -> ShareMembership:
    kw.setdefault("max_poll_interval_ms", 10_000)
    return ShareMembership("g", "m", retry_backoff_ms=100, retry_backoff_max_ms=1000, jitter=lambda: 1.0, **kw)


def ok(m: ShareMembership, req, now: float, epoch: int = 1, interval: int = 200, assignment=None) -> bool:
    return m.on_response(req.token, 0, epoch, interval, assignment, now)


def test_member_ids_look_like_kafka_uuids() -> None:
    ids = {new_member_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    draws = iter([b"\xfb" + bytes(15), bytes(16)])  # the first would print with a leading '-'
    assert new_member_id(lambda n: next(draws)) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_join_then_heartbeat_at_the_servers_interval() -> None:
    m = member()
    assert m.next_request(0) is None  # not subscribed
    m.subscribe(["b", "a"], 0)
    join = m.next_request(0)
    assert (join.member_epoch, join.subscribed_topic_names) == (0, ["a", "b"])
    assert m.next_request(0) is None  # one in flight
    assert ok(m, join, 10, epoch=3, interval=200, assignment={T1: [0, 1]})
    assert m.state == MemberState.STABLE and m.assignment == {T1: frozenset({0, 1})}
    assert m.next_request(100) is None and m.wake_at(100) == 210
    beat = m.next_request(210)
    assert (beat.member_epoch, beat.subscribed_topic_names) == (3, None)  # unchanged subscription: null
    assert not ok(m, beat, 220, epoch=3)  # no assignment in the answer: nothing changed
    beat = m.next_request(420)
    assert ok(m, beat, 430, epoch=4, assignment={T1: [1], T2: [0]})
    assert m.assignment == {T1: frozenset({1}), T2: frozenset({0})}


def test_changed_subscription_is_sent_at_once() -> None:
    m = member()
    m.subscribe(["a"], 0)
    ok(m, m.next_request(0), 0)
    m.subscribe(["a", "c"], 50)
    beat = m.next_request(50)
    assert beat is not None and beat.subscribed_topic_names == ["a", "c"]
    ok(m, beat, 60)
    assert m.next_request(300).subscribed_topic_names is None


def test_fenced_or_unknown_member_rejoins_with_epoch_zero_after_dropping_its_assignment() -> None:
    for code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
        m = member()
        m.subscribe(["a"], 0)
        ok(m, m.next_request(0), 0, epoch=5, assignment={T1: [0]})
        beat = m.next_request(200)
        assert m.on_response(beat.token, code, 0, 0, None, 210)  # assignment dropped
        assert m.assignment == {} and m.state == MemberState.JOINING
        again = m.next_request(210)
        assert (again.member_epoch, again.subscribed_topic_names) == (0, ["a"])


def test_coordinator_trouble_is_retried_with_backoff_and_the_full_subscription() -> None:
    m = member()
    m.subscribe(["a"], 0)
    ok(m, m.next_request(0), 0, epoch=2)
    beat = m.next_request(200)
    assert not m.on_failure(beat.token, 200, ErrorCode.NOT_COORDINATOR)
    assert m.next_request(250) is None and m.wake_at(250) == 300
    beat = m.next_request(300)
    assert beat.member_epoch == 2 and beat.subscribed_topic_names == ["a"]  # resent after a miss
    m.on_failure(beat.token, 300)  # network
    assert m.wake_at(300) == 500  # doubled
    m.on_failure(m.next_request(500).token, 500)
    m.on_failure(m.next_request(900).token, 900)
    m.on_failure(m.next_request(1700).token, 1700)
    assert m.wake_at(1700) == 2700  # capped at retry.backoff.max.ms
    ok(m, m.next_request(2700), 2700, epoch=2)
    assert m.wake_at(2700) == 2900


def test_errors_no_retry_can_fix_are_fatal() -> None:
    m = member()
    m.subscribe(["a"], 0)
    join = m.next_request(0)
    m.on_response(join.token, ErrorCode.GROUP_MAX_SIZE_REACHED, 0, 0, None, 0, "full")
    assert m.state == MemberState.FATAL and m.fatal == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert m.next_request(10_000) is None and m.wake_at(0) is None


def test_answers_to_superseded_requests_are_ignored() -> None:
    m = member()
    m.subscribe(["a"], 0)
    ok(m, m.next_request(0), 0, epoch=1)
    beat = m.next_request(200)
    m.unsubscribe(210)  # leaving supersedes the heartbeat in flight
    assert not ok(m, beat, 220, epoch=1, assignment={T1: [0]})
    assert m.assignment == {}
    leave = m.next_request(220)
    assert leave.member_epoch == -1
    m.on_response(leave.token, 0, -1, 0, None, 230)
    assert m.state == MemberState.UNSUBSCRIBED and m.next_request(5000) is None


def test_poll_timer_leaves_and_the_next_poll_rejoins() -> None:
    m = member(max_poll_interval_ms=1000)
    m.subscribe(["a"], 0)
    ok(m, m.next_request(0), 0, epoch=4, interval=300, assignment={T1: [0]})
    m.on_poll(500)
    ok(m, m.next_request(600), 600, epoch=4, interval=300)
    ok(m, m.next_request(900), 900, epoch=4, interval=300)
    ok(m, m.next_request(1200), 1200, epoch=4, interval=300)
    assert m.wake_at(1200) == 1500  # the poll deadline comes before the next heartbeat
    leave = m.next_request(1500)
    assert leave.member_epoch == -1 and m.assignment == {}
    m.on_response(leave.token, 0, -1, 0, None, 1510)
    assert m.state == MemberState.STALE and m.next_request(9000) is None
    m.on_poll(9000)
    join = m.next_request(9000)
    assert (join.member_epoch, join.subscribed_topic_names) == (0, ["a"])


def test_close_leaves_only_when_in_the_group() -> None:
    m = member()
    m.close(0)
    assert m.next_request(0) is None
    m.subscribe(["a"], 0)
    ok(m, m.next_request(0), 0, epoch=1)
    m.close(10)
    assert m.next_request(10).member_epoch == -1


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("answer"), st.sampled_from([0, 0, 0, 22, 25, 15, 16, 14, 7])),
            st.tuples(st.just("fail"), st.none()),
            st.tuples(st.just("subscribe"), st.sampled_from([("a",), ("a", "b"), ()])),
            st.tuples(st.just("poll"), st.none()),
            st.tuples(st.just("wait"), st.integers(0, 3000)),
        ),
        max_size=40,
    )
)
@pytest.mark.slow
def test_every_heartbeat_follows_the_protocol(steps) -> None:
    """Whatever happens: joins carry the subscription, other beats carry the epoch last given,
    a null subscription only after the coordinator confirmed the current one, one request at a
    time, no assignment outside the group, and a heartbeat is never overdue without a reason."""
    m = member(max_poll_interval_ms=2000)
    now = 0.0
    epoch_given = 0
    pending = None
    confirmed: frozenset[str] | None = None  # subscription the coordinator has answered for
    for kind, arg in steps:
        if kind == "subscribe":
            m.subscribe(arg, now)
        elif kind == "poll":
            m.on_poll(now)
        elif kind == "wait":
            now += arg
        elif pending is not None and kind == "answer":
            code = arg
            if pending.member_epoch == -1:
                m.on_response(pending.token, code, -1, 0, None, now)
                confirmed = None
            else:
                new_epoch = epoch_given + 1
                m.on_response(pending.token, code, 0 if code else new_epoch, 100, None if code else {T1: [0]}, now)
                if not code:
                    epoch_given = new_epoch
                    if pending.subscribed_topic_names is not None:
                        confirmed = frozenset(pending.subscribed_topic_names)
                else:
                    confirmed = None
            pending = None
        elif pending is not None and kind == "fail":
            m.on_failure(pending.token, now)
            confirmed = None
            pending = None
        wake = m.wake_at(now)
        req = m.next_request(now)
        if req is not None:
            if req.member_epoch == 0:
                assert req.subscribed_topic_names  # a join says what it subscribes to
                epoch_given = 0
            elif req.member_epoch > 0:
                assert req.member_epoch == epoch_given
                if req.subscribed_topic_names is None:
                    assert confirmed == m.subscription
            pending = req
        elif wake is not None:
            assert wake > now or m.state in (MemberState.STALE, MemberState.UNSUBSCRIBED)
        if pending is not None:
            assert m.next_request(now) is None  # one at a time
        if m.state in (MemberState.UNSUBSCRIBED, MemberState.STALE, MemberState.FATAL, MemberState.LEAVING):
            assert m.assignment == {}
