"""The share-group membership state machine (shoal/broker/groups/share/group.py), driven with a fake clock."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.broker.groups.share.group import HeartbeatResult, InitState, ShareGroup
from shoal.protocol.errors import ErrorCode

SESSION = 45_000
MAX = 200
T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def init_all(g: ShareGroup, topics: dict[str, tuple[uuid.UUID, int]]) -> None:
    """Stand-in for a share coordinator that already holds state for every partition."""
    g.initialized = {tid: InitState(name, frozenset(range(count))) for name, (tid, count) in topics.items()}


class Harness:
    def __init__(self) -> None:
        self.now = 1_000
        self.g = ShareGroup("g", self.now)
        self.topics: dict[str, tuple[uuid.UUID, int]] = {"a": (T1, 1)}

    def hb(
        self, member: str, epoch: int, subs: list[str] | None = None, max_size: int = MAX, rack: str | None = None
    ) -> HeartbeatResult:
        init_all(self.g, self.topics)
        return self.g.heartbeat(member, epoch, rack, subs, self.topics, self.now, SESSION, max_size)

    def join(self, member: str, subs: list[str] | None = None) -> HeartbeatResult:
        r = self.hb(member, 0, subs if subs is not None else ["a"])
        assert r.error == ErrorCode.NONE
        return r

    def snapshot(self) -> tuple[object, ...]:
        g = self.g
        return (
            g.group_epoch,
            g.assignment_epoch,
            g.state,
            {m: (x.member_epoch, dict(x.assigned), x.subscribed_topic_names) for m, x in g.members.items()},
            dict(g.target),
        )


def test_join_gets_epoch_and_assignment() -> None:
    h = Harness()
    assert h.g.state == "Empty"
    r = h.join("m1")
    assert (r.member_epoch, r.assignment) == (1, {T1: {0}})
    assert h.g.group_epoch == h.g.assignment_epoch == 1
    assert h.g.state == "Stable"
    assert h.g.dirty
    assert h.g.members["m1"].session_deadline_ms == h.now + SESSION


def test_two_members_share_one_partition() -> None:
    h = Harness()
    h.join("m1")
    r2 = h.join("m2")
    assert (r2.member_epoch, r2.assignment) == (2, {T1: {0}})
    r1 = h.hb("m1", 1)
    assert r1.member_epoch == 2
    assert r1.assignment is None  # unchanged: still partition 0
    assert h.g.members["m1"].assigned == {T1: frozenset({0})}


def test_steady_heartbeat_has_no_assignment_and_is_not_dirty() -> None:
    h = Harness()
    h.join("m1")
    h.g.dirty = False
    h.now += 5_000
    r = h.hb("m1", 1)
    assert (r.error, r.member_epoch, r.assignment) == (ErrorCode.NONE, 1, None)
    assert not h.g.dirty
    assert h.g.members["m1"].session_deadline_ms == h.now + SESSION
    # A full request gets the assignment again.
    assert h.hb("m1", 1, ["a"]).assignment == {T1: {0}}


def test_stale_and_future_epochs_are_fenced() -> None:
    h = Harness()
    h.join("m1")
    h.join("m2")
    before = h.snapshot()
    for epoch in (1, 3, 99):
        r = h.hb("m2", epoch, ["a", "b"])
        assert r.error == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.snapshot() == before


def test_unknown_member() -> None:
    h = Harness()
    h.join("m1")
    before = h.snapshot()
    assert h.hb("nobody", 1).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb("nobody", -1).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.snapshot() == before


def test_join_requires_subscription_and_member_id() -> None:
    h = Harness()
    assert h.hb("m1", 0, None).error == ErrorCode.INVALID_REQUEST
    assert h.hb("", 0, ["a"]).error == ErrorCode.INVALID_REQUEST
    assert not h.g.members and h.g.group_epoch == 0


def test_leave_bumps_epoch_and_remaining_member_takes_over() -> None:
    h = Harness()
    h.topics = {"a": (T1, 2)}
    h.join("m1")
    h.join("m2")
    assert h.hb("m1", 1).member_epoch == 2
    held = {m: set(h.g.members[m].assigned[T1]) for m in ("m1", "m2")}
    assert held["m1"] | held["m2"] == {0, 1} and len(held["m1"]) == len(held["m2"]) == 1
    r = h.hb("m2", -1)
    assert (r.error, r.member_epoch) == (ErrorCode.NONE, -1)
    assert h.g.group_epoch == 3 and "m2" not in h.g.members and "m2" not in h.g.target
    r1 = h.hb("m1", 2)
    assert r1.member_epoch == 3
    assert r1.assignment == {T1: {0, 1}}
    r = h.hb("m1", -1)
    assert h.g.state == "Empty" and h.g.group_epoch == 4


def test_session_expiry() -> None:
    h = Harness()
    h.topics = {"a": (T1, 2)}
    h.join("m1")  # deadline 1_000 + SESSION
    h.now += 10_000
    h.join("m2")  # deadline 11_000 + SESSION
    h.now += 20_000
    assert h.hb("m1", 1).member_epoch == 2  # deadline 31_000 + SESSION
    assert h.g.next_deadline_ms() == 11_000 + SESSION
    h.now = 11_000 + SESSION - 1
    assert h.g.expire(h.now) == []
    h.now += 1
    epoch = h.g.group_epoch
    assert h.g.expire(h.now) == ["m2"]
    assert h.g.group_epoch == epoch + 1 and list(h.g.members) == ["m1"] and h.g.dirty
    assert h.hb("m2", 2).error == ErrorCode.UNKNOWN_MEMBER_ID
    r = h.hb("m1", 2)
    assert (r.member_epoch, r.assignment) == (epoch + 1, {T1: {0, 1}})
    h.now += SESSION
    assert h.g.expire(h.now) == ["m1"]
    assert h.g.state == "Empty" and h.g.next_deadline_ms() is None


def test_max_size() -> None:
    h = Harness()
    h.join("m1")
    h.join("m2")
    before = h.snapshot()
    assert h.hb("m3", 0, ["a"], max_size=2).error == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert h.snapshot() == before
    # A known member may still rejoin at the limit.
    r = h.hb("m2", 0, ["a"], max_size=2)
    assert r.error == ErrorCode.NONE and r.assignment == {T1: {0}}


def test_partition_growth_bumps_epoch_and_reassigns() -> None:
    h = Harness()
    h.join("m1")
    h.join("m2")
    assert h.hb("m1", 1).member_epoch == 2
    h.topics = {"a": (T1, 4)}
    r = h.hb("m1", 2)
    assert r.member_epoch == 3 and h.g.group_epoch == 3
    r2 = h.hb("m2", 2)
    assert r2.member_epoch == 3
    got = [h.g.members[m].assigned[T1] for m in ("m1", "m2")]
    assert got[0] | got[1] == {0, 1, 2, 3} and not got[0] & got[1]
    assert r.assignment == {T1: set(got[0])} and r2.assignment == {T1: set(got[1])}


def test_topic_recreation_with_new_id_reassigns() -> None:
    h = Harness()
    h.join("m1")
    h.topics = {"a": (T2, 1)}
    r = h.hb("m1", 1)
    assert (r.member_epoch, r.assignment) == (2, {T2: {0}})
    # Deleting the topic also changes the hash and empties the assignment.
    h.topics = {}
    r = h.hb("m1", 2)
    assert (r.member_epoch, r.assignment) == (3, {})


def test_unsubscribed_topic_changes_do_not_bump() -> None:
    h = Harness()
    h.join("m1")
    h.topics = {"a": (T1, 1), "other": (T2, 8)}
    assert h.hb("m1", 1).member_epoch == 1
    assert h.g.group_epoch == 1


def test_subscription_change() -> None:
    h = Harness()
    h.topics = {"a": (T1, 1), "b": (T2, 2)}
    h.join("m1")
    r = h.hb("m1", 1, ["a", "b"])
    assert (r.member_epoch, r.assignment) == (2, {T1: {0}, T2: {0, 1}})
    r = h.hb("m1", 2, ["b"])
    assert (r.member_epoch, r.assignment) == (3, {T2: {0, 1}})
    # Same subscription sent again: no bump, assignment still returned (full request).
    r = h.hb("m1", 3, ["b"])
    assert (r.member_epoch, r.assignment) == (3, {T2: {0, 1}})
    assert h.g.describe()["members"][0]["subscribed_topic_names"] == ["b"]
    # Subscribing to a topic that does not exist yet, then it appears.
    h.hb("m1", 3, ["b", "c"])
    assert h.g.group_epoch == 4
    h.topics["c"] = (uuid.UUID(int=3), 1)
    r = h.hb("m1", 4)
    assert r.member_epoch == 5 and r.assignment is not None and r.assignment[uuid.UUID(int=3)] == {0}


def test_member_id_reused_after_leave() -> None:
    h = Harness()
    h.join("m1")
    h.join("m2")
    h.hb("m1", -1)
    r = h.join("m1")
    assert r.member_epoch == 4 and r.assignment == {T1: {0}}
    assert h.hb("m1", 2).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.hb("m1", 4).error == ErrorCode.NONE


def test_describe_and_dead() -> None:
    h = Harness()
    h.join("m1")
    h.hb("m1", 1, ["a"], rack="r1")
    d = h.g.describe()
    assert d["state"] == "Stable" and d["group_epoch"] == 1
    assert d["members"] == [
        {
            "member_id": "m1",
            "member_epoch": 1,
            "rack_id": "r1",
            "client_id": "",
            "client_host": "",
            "subscribed_topic_names": ["a"],
            "assignment": {T1: [0]},
        }
    ]
    h.g.mark_dead(h.now)
    assert h.hb("m1", 1).error == ErrorCode.COORDINATOR_NOT_AVAILABLE


# -- random sequences ----------------------------------------------------------

MEMBERS = ["m0", "m1", "m2", "m3", "m4"]
NAMES = ["a", "b", "c"]

op = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(MEMBERS), st.sets(st.sampled_from(NAMES), max_size=3)),
    st.tuples(st.just("hb"), st.sampled_from(MEMBERS), st.none() | st.sets(st.sampled_from(NAMES), max_size=3)),
    st.tuples(st.just("bad_epoch"), st.sampled_from(MEMBERS), st.integers(-3, 3)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS), st.none()),
    st.tuples(st.just("tick"), st.integers(0, 60_000), st.none()),
    st.tuples(st.just("grow"), st.sampled_from(NAMES), st.integers(1, 6)),
    st.tuples(st.just("recreate"), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("delete"), st.sampled_from(NAMES), st.none()),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=60))
def test_random_sequences_keep_invariants(ops: list[tuple[str, object, object]]) -> None:
    now = 0
    g = ShareGroup("g", now)
    topics: dict[str, tuple[uuid.UUID, int]] = {"a": (uuid.uuid4(), 2), "b": (uuid.uuid4(), 1)}
    known: dict[str, int] = {}  # the client's view: member -> epoch last given
    max_epoch: dict[str, int] = {}
    group_epoch = assignment_epoch = 0

    def heartbeat(member: str, epoch: int, subs: object) -> HeartbeatResult:
        names = None if subs is None else sorted(subs)  # type: ignore[call-overload]
        init_all(g, topics)
        return g.heartbeat(member, epoch, None, names, topics, now, SESSION, 4)

    for kind, x, y in ops:
        if kind == "tick":
            now += x  # type: ignore[operator]
            gone = g.expire(now)
            for m in gone:
                known.pop(m, None)
            assert all(mem.session_deadline_ms > now for mem in g.members.values())
        elif kind in ("grow", "recreate", "delete"):
            name = str(x)
            if kind == "delete":
                topics.pop(name, None)
            elif kind == "recreate":
                topics[name] = (uuid.uuid4(), topics.get(name, (None, 1))[1])
            else:
                tid, count = topics.get(name, (uuid.uuid4(), 0))
                topics[name] = (tid, max(count, int(y)))  # type: ignore[call-overload]
        else:
            member = str(x)
            if kind == "join":
                full = len(g.members) >= 4 and member not in g.members
                r = heartbeat(member, 0, y)
                if full:
                    assert r.error == ErrorCode.GROUP_MAX_SIZE_REACHED
                    assert member not in g.members
                else:
                    assert r.error == ErrorCode.NONE and r.assignment is not None
            elif kind == "leave":
                r = heartbeat(member, -1, None)
                if member in known:
                    assert (r.error, r.member_epoch) == (ErrorCode.NONE, -1)
                    assert member not in g.members
                    del known[member]
                else:
                    assert r.error == ErrorCode.UNKNOWN_MEMBER_ID
                continue
            elif kind == "bad_epoch":
                if member not in known:
                    continue
                epoch = known[member] + int(y)  # type: ignore[call-overload]
                if epoch in (0, -1, known[member]):
                    continue
                before = (g.group_epoch, g.assignment_epoch, g.members[member].member_epoch)
                r = heartbeat(member, epoch, None)
                assert r.error == ErrorCode.FENCED_MEMBER_EPOCH
                assert (g.group_epoch, g.assignment_epoch, g.members[member].member_epoch) == before
                continue
            else:
                if member not in known:
                    assert heartbeat(member, 5, y).error == ErrorCode.UNKNOWN_MEMBER_ID
                    continue
                r = heartbeat(member, known[member], y)
                assert r.error == ErrorCode.NONE
            if r.error != ErrorCode.NONE:
                continue
            known[member] = r.member_epoch
            mem = g.members[member]
            # The sender reached the (fresh) target.
            assert g.group_epoch == g.assignment_epoch == r.member_epoch == mem.member_epoch
            assert mem.assigned == g.target.get(member, {})
            if r.assignment is not None:
                assert r.assignment == {t: set(ps) for t, ps in mem.assigned.items()}
            # Every existing subscribed partition is held by somebody.
            assert set(g.target) <= set(g.members)
            held = {(t, p) for by_id in g.target.values() for t, ps in by_id.items() for p in ps}
            for name in {t for m in g.members.values() for t in m.subscribed_topic_names}:
                if name in topics:
                    tid, count = topics[name]
                    assert {(tid, p) for p in range(count)} <= held
            # Members only hold partitions of topics they subscribe to.
            ids = {name: tid for name, (tid, _) in topics.items()}
            for m, by_id in g.target.items():
                allowed = {ids[n] for n in g.members[m].subscribed_topic_names if n in ids}
                assert set(by_id) <= allowed

        # Epochs never decrease; the state follows the membership.
        assert g.group_epoch >= group_epoch and g.assignment_epoch >= assignment_epoch
        assert g.assignment_epoch <= g.group_epoch
        group_epoch, assignment_epoch = g.group_epoch, g.assignment_epoch
        for m, mem in g.members.items():
            assert mem.member_epoch >= max_epoch.get(m, 0)
            assert mem.member_epoch <= g.group_epoch
            max_epoch[m] = mem.member_epoch
        assert g.state == ("Stable" if g.members else "Empty")
        assert set(known) == set(g.members)


# -- share state initialization ---------------------------------------------------

RETRY = 30_000


def raw_join(g: ShareGroup, topics: dict, now: int, member: str = "m1", subs: list[str] | None = None):
    return g.heartbeat(member, 0, None, subs or ["a"], topics, now, SESSION, MAX)


def test_uninitialized_partitions_are_not_assigned_until_initialized() -> None:
    g = ShareGroup("g", 0)
    topics = {"a": (T1, 2)}
    r = raw_join(g, topics, 0)
    assert r.error == ErrorCode.NONE and r.assignment == {}
    todo = g.to_initialize(topics, 0, RETRY)
    assert todo == {T1: InitState("a", frozenset({0, 1}), 0)}
    assert g.initializing[T1].partitions == {0, 1} and g.state_dirty
    assert g.to_initialize(topics, 1, RETRY) == {}  # already asked, not yet stale
    epoch = g.group_epoch
    g.initialized_partitions(T1, "a", [0, 1])
    assert g.group_epoch == epoch + 1 and T1 not in g.initializing
    r = g.heartbeat("m1", r.member_epoch, None, None, topics, 2, SESSION, MAX)
    assert r.assignment == {T1: {0, 1}} and r.member_epoch == epoch + 1


def test_stuck_initialization_is_retried_after_the_interval_and_failure_at_once() -> None:
    g = ShareGroup("g", 0)
    topics = {"a": (T1, 1)}
    raw_join(g, topics, 0)
    assert g.to_initialize(topics, 0, RETRY)
    assert g.to_initialize(topics, RETRY - 1, RETRY) == {}
    again = g.to_initialize(topics, RETRY, RETRY)
    assert again == {T1: InitState("a", frozenset({0}), RETRY)}
    g.initialize_failed(T1, [0])
    assert T1 not in g.initializing
    assert g.to_initialize(topics, RETRY + 1, RETRY) == {T1: InitState("a", frozenset({0}), RETRY + 1)}


def test_partition_growth_initializes_only_the_new_partitions() -> None:
    g = ShareGroup("g", 0)
    topics = {"a": (T1, 1)}
    raw_join(g, topics, 0)
    g.to_initialize(topics, 0, RETRY)
    g.initialized_partitions(T1, "a", [0])
    topics["a"] = (T1, 3)
    assert g.to_initialize(topics, 1, RETRY) == {T1: InitState("a", frozenset({1, 2}), 1)}
    g.initialized_partitions(T1, "a", [1])
    assert g.initialized[T1].partitions == {0, 1} and g.initializing[T1].partitions == {2}


def test_unsubscribed_or_recreated_topics_move_to_deleting() -> None:
    g = ShareGroup("g", 0)
    topics = {"a": (T1, 1), "b": (T2, 1)}
    r = raw_join(g, topics, 0, subs=["a", "b"])
    for tid, st_ in g.to_initialize(topics, 0, RETRY).items():
        g.initialized_partitions(tid, st_.name, st_.partitions)
    assert g.to_delete(topics) == {}
    r = g.heartbeat("m1", r.member_epoch, None, ["a"], topics, 1, SESSION, MAX)
    assert g.to_delete(topics) == {T2: InitState("b", frozenset({0}))}
    assert g.deleting == {T2: "b"} and T2 not in g.initialized
    g.deleted_topics([T2])
    assert g.deleting == {}
    t3 = uuid.UUID(int=3)
    topics["a"] = (t3, 1)  # re-created under a new id
    assert g.to_delete(topics) == {T1: InitState("a", frozenset({0}))}
    assert g.to_initialize(topics, 2, RETRY) == {t3: InitState("a", frozenset({0}), 2)}


def test_forget_offsets() -> None:
    g = ShareGroup("g", 0)
    topics = {"a": (T1, 2)}
    raw_join(g, topics, 0)
    g.to_initialize(topics, 0, RETRY)
    g.initialized_partitions(T1, "a", [0])
    assert g.forget_offsets(T1) == InitState("a", frozenset({0, 1}))
    assert g.forget_offsets(T1) is None
    assert not g.initialized and not g.initializing
