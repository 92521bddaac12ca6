"""ConsumerMembership (shoal/client/consumer/group/membership_848.py) driven with a fake clock:
joining with every field, later heartbeats with only what changed, reconciliation
(revoke first, then assign, acknowledged at once), fencing, static leave, the
poll timer, retries and fatal errors; plus a hypothesis run of random answers
checking rules every heartbeat must follow."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.client.consumer.group.membership_848 import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerMembership,
    MemberState,
    random_member_id,
)
from shoal.protocol.errors import ErrorCode

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def member(**kw) -> ConsumerMembership:
    kw.setdefault("rebalance_timeout_ms", 10_000)
    return ConsumerMembership("g", "m", retry_backoff_ms=100, retry_backoff_max_ms=1000, jitter=lambda: 1.0, **kw)


def ok(m: ConsumerMembership, req, now: float, epoch: int = 1, interval: int = 200, assignment=None) -> bool:
    return m.on_response(req.token, 0, epoch, interval, assignment, now)


def joined(m: ConsumerMembership, now: float = 0, epoch: int = 1, assignment=None):
    m.subscribe(["t"], None, now)
    req = m.next_request(now)
    ok(m, req, now, epoch=epoch, assignment=assignment)
    return req


def test_member_ids_are_random_kafka_style_uuids() -> None:
    ids = {random_member_id() for _ in range(300)}
    assert len(ids) == 300 and all(len(i) == 22 and i[0] != "-" for i in ids)


def test_join_sends_everything_then_only_changes() -> None:
    m = member(instance_id="i1", rack_id="r1", server_assignor="range")
    assert m.next_request(0) is None  # not subscribed
    m.subscribe(["b", "a"], None, 0)
    join = m.next_request(0)
    assert (join.member_epoch, join.subscribed_topic_names, join.subscribed_topic_regex) == (0, ["a", "b"], None)
    assert (join.instance_id, join.rack_id, join.rebalance_timeout_ms, join.server_assignor) == (
        "i1",
        "r1",
        10_000,
        "range",
    )
    assert join.topic_partitions == {}  # owns nothing: an empty list, not null
    assert m.next_request(0) is None  # one in flight
    assert ok(m, join, 10, epoch=5, interval=300, assignment={T1: [0, 1]})
    assert m.state is MemberState.STABLE and m.member_epoch == 5
    assert m.next_request(100) is None and m.wake_at(100) == 310
    step = m.reconciliation()
    assert (step.revoke, step.assign) == (frozenset(), {(T1, 0), (T1, 1)})
    assert m.reconciliation() is None  # one step at a time
    assert m.reconciled(step, 20)
    ack = m.next_request(20)  # acknowledged at once
    assert ack.member_epoch == 5 and ack.topic_partitions == {T1: [0, 1]}
    assert (ack.subscribed_topic_names, ack.server_assignor, ack.rack_id, ack.rebalance_timeout_ms) == (
        None,
        None,
        None,
        -1,
    )
    assert ack.instance_id == "i1"  # always sent when set
    assert not ok(m, ack, 30, epoch=5)
    beat = m.next_request(330)
    assert beat.topic_partitions is None  # unchanged
    ok(m, beat, 340, epoch=5)
    m.subscribe(["a", "b", "c"], None, 350)
    change = m.next_request(350)  # a changed subscription goes out at once
    assert change.subscribed_topic_names == ["a", "b", "c"]


def test_reconciliation_revokes_before_assigning_and_skips_unresolved_topics() -> None:
    m = member()
    joined(m, assignment={T1: [0, 1, 2]})
    step = m.reconciliation()
    m.reconciled(step, 1)
    ok(m, m.next_request(1), 2, epoch=2, assignment={T1: [0], T2: [0, 1]})
    step = m.reconciliation(lambda t: t != T2)  # T2 not named yet
    assert step.revoke == {(T1, 1), (T1, 2)} and step.assign == frozenset()
    assert m.unresolved(lambda t: t != T2) == {T2}
    m.reconciled(step, 3)
    assert m.owned == {(T1, 0)}
    ack = m.next_request(3)
    assert ack.topic_partitions == {T1: [0]}
    ok(m, ack, 4, epoch=2)
    step = m.reconciliation()
    assert step.assign == {(T2, 0), (T2, 1)} and not step.revoke
    m.reconciled(step, 5)
    assert m.owned == {(T1, 0), (T2, 0), (T2, 1)}
    assert m.commit_identity() == (2, "m")


def test_fenced_member_loses_everything_and_rejoins_with_epoch_zero() -> None:
    for code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
        m = member()
        joined(m, epoch=4, assignment={T1: [0, 1]})
        step = m.reconciliation()
        m.reconciled(step, 1)
        ok(m, m.next_request(1), 2, epoch=4)
        pending = m.reconciliation()
        assert pending is None
        beat = m.next_request(300)
        assert m.on_response(beat.token, code, 0, 0, None, 301)
        assert m.take_lost() == {(T1, 0), (T1, 1)} and m.take_lost() == frozenset()
        assert m.owned == frozenset() and m.commit_identity() is None
        rejoin = m.next_request(301)
        assert rejoin.member_epoch == 0 and rejoin.subscribed_topic_names == ["t"] and rejoin.topic_partitions == {}
        assert m.member_id == "m"  # the same id


def test_a_step_overtaken_by_fencing_is_dropped() -> None:
    m = member()
    joined(m, assignment={T1: [0]})
    step = m.reconciliation()
    beat = m.next_request(500)
    m.on_response(beat.token, ErrorCode.FENCED_MEMBER_EPOCH, 0, 0, None, 501)
    assert not m.reconciled(step, 502)
    assert m.owned == frozenset()


def test_leaving_uses_minus_one_or_minus_two_for_static_members() -> None:
    for instance, epoch in ((None, LEAVE_EPOCH), ("i", STATIC_LEAVE_EPOCH)):
        m = member(instance_id=instance)
        joined(m)
        m.close(10)
        leave = m.next_request(10)
        assert leave.member_epoch == epoch
        m.on_response(leave.token, 0, epoch, 0, None, 11)
        assert m.state is MemberState.UNSUBSCRIBED and m.next_request(20) is None


def test_poll_timer_leaves_then_the_next_poll_rejoins() -> None:
    m = member(rebalance_timeout_ms=1000)
    joined(m, assignment={T1: [0]})
    m.reconciled(m.reconciliation(), 1)
    ok(m, m.next_request(1), 2)
    assert m.wake_at(500) == 202
    leave = None
    now = 0.0
    while leave is None or leave.member_epoch != LEAVE_EPOCH:
        now += 100
        leave = m.next_request(now)
        if leave is not None and leave.member_epoch != LEAVE_EPOCH:
            ok(m, leave, now)
            leave = None
    assert now >= 1000 and m.take_lost() == {(T1, 0)}
    ok(m, leave, now + 1, epoch=LEAVE_EPOCH)
    assert m.state is MemberState.STALE and m.next_request(now + 2) is None
    m.on_poll(now + 3)
    assert m.next_request(now + 3).member_epoch == 0


def test_retriable_errors_back_off_and_resend_everything() -> None:
    m = member()
    joined(m, epoch=2)
    beat = m.next_request(200)
    assert not m.on_response(beat.token, ErrorCode.COORDINATOR_NOT_AVAILABLE, 0, 0, None, 201)
    assert m.coordinator_gone and m.next_request(250) is None
    again = m.next_request(301)
    assert again.member_epoch == 2 and again.subscribed_topic_names == ["t"] and again.topic_partitions == {}
    assert not m.on_failure(again.token, 302)  # a network failure: doubled backoff
    assert m.next_request(450) is None and m.next_request(502) is not None


def test_fatal_errors_stop_the_member() -> None:
    m = member()
    m.subscribe(["t"], None, 0)
    req = m.next_request(0)
    m.on_response(req.token, ErrorCode.GROUP_AUTHORIZATION_FAILED, 0, 0, None, 1, "no")
    assert m.state is MemberState.FATAL and m.fatal == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert m.next_request(10_000) is None and m.wake_at(10_000) is None


def test_regex_subscription_and_switching_back_to_names() -> None:
    m = member()
    m.subscribe([], "^t.*", 0)
    join = m.next_request(0)
    assert (join.subscribed_topic_regex, join.subscribed_topic_names) == ("^t.*", None)
    ok(m, join, 1)
    m.subscribe(["x"], None, 2)
    change = m.next_request(2)
    assert (change.subscribed_topic_names, change.subscribed_topic_regex) == (["x"], "")  # the regex is cleared


def test_stale_answers_are_ignored() -> None:
    m = member()
    m.subscribe(["t"], None, 0)
    first = m.next_request(0)
    m.on_failure(first.token, 1)
    second = m.next_request(200)
    assert not m.on_response(first.token, 0, 9, 100, {T1: [0]}, 201)  # an answer to the old request
    assert m.member_epoch == 0 and m.target is None
    assert ok(m, second, 202, epoch=3, assignment={T1: [0]})


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["ok", "fence", "retry", "fail", "reconcile", "poll"]),
            st.frozensets(st.tuples(st.sampled_from([T1, T2]), st.integers(0, 3)), max_size=5),
        ),
        max_size=40,
    )
)
def test_random_answers_keep_the_rules(events) -> None:
    """Whatever comes back: one request in flight; epoch 0 exactly when joining; owned partitions
    only ever come from targets; a heartbeat after a reconciliation acknowledges what is owned."""
    m = member()
    m.subscribe(["t"], None, 0)
    now, epoch = 0.0, 0
    targets: set = set()
    for kind, parts in events:
        now += 50
        req = m.next_request(now + 5000)
        if req is None:
            if kind == "reconcile":
                step = m.reconciliation()
                if step is not None:
                    assert not (step.revoke & step.assign)
                    m.reconciled(step, now)
            elif kind == "poll":
                m.on_poll(now)
            continue
        assert m.next_request(now + 5000) is None
        assert (req.member_epoch == 0) == (m.state is MemberState.JOINING)
        if req.member_epoch == 0:
            assert req.subscribed_topic_names == ["t"] and req.topic_partitions == {}
        if kind == "fence":
            m.on_response(req.token, ErrorCode.FENCED_MEMBER_EPOCH, 0, 0, None, now)
            assert m.owned == frozenset()
        elif kind == "retry":
            m.on_response(req.token, ErrorCode.NOT_COORDINATOR, 0, 0, None, now)
        elif kind == "fail":
            m.on_failure(req.token, now)
        else:
            epoch += 1
            assignment = {}
            for t, p in parts:
                assignment.setdefault(t, []).append(p)
            targets |= parts
            m.on_response(req.token, 0, epoch, 100, assignment, now)
        assert m.owned <= targets
        m.on_poll(now)
