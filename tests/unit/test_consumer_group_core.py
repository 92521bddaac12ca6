"""The KIP-848 consumer group core (shoal/broker/groups/consumer/group.py) with a fake clock,
and its records (records.py) replayed through the real serde.

The state machine drives members that join, heartbeat with what they hold,
leave, go away statically, come back and time out, and checks after every
step that no partition is held (assigned or still being revoked) by two
members, that a member's epoch never passes the assignment epoch, and that
the group's records replayed from the log rebuild the same group. Once
everyone heartbeats for a while the group is Stable on its target.
"""

from __future__ import annotations

import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shoal.broker.coordinator.shard import Record
from shoal.broker.groups.consumer.group import (
    M_STABLE,
    M_UNREVOKED,
    ConsumerGroup,
    HeartbeatParams,
)
from shoal.broker.groups.consumer.records import (
    ConsumerGroupReplayer,
    apply_to_images,
    diff_records,
    image,
    tombstones,
)
from shoal.protocol.coordinator_records import serde
from shoal.protocol.errors import ErrorCode

SERDE = serde("group")
SESSION = 10_000
T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def wire(records: list[Record]):
    return [
        SERDE.decode(SERDE.encode_key(r.name, r.key), SERDE.encode_value(r.name, r.value, r.value_version))
        for r in records
    ]


class Harness:
    def __init__(self) -> None:
        self.now = 0
        self.topics = {"t1": (T1, 6), "t2": (T2, 3)}
        self.g = ConsumerGroup("g", 0)
        self.images: dict[str, dict] = {}
        self.log: list = []

    def hb(self, member: str, epoch: int, subs=None, owned=None, **kw):
        p = HeartbeatParams(member, epoch, subscribed_names=subs, owned=owned, rebalance_timeout_ms=5000, **kw)
        r = self.g.heartbeat(p, self.topics, self.now, SESSION, 100)
        self.persist()
        return r

    def persist(self) -> None:
        for rec in wire(diff_records(self.g, self.images.get("g", {}))):
            apply_to_images(self.images, rec)
            self.log.append(rec)
        self.g.dirty = False
        assert image(self.g) == self.images.get("g", {})

    def replayed(self) -> ConsumerGroup:
        groups: dict[str, ConsumerGroup] = {}
        r = ConsumerGroupReplayer(groups, lambda: 0)
        for rec in self.log:
            r.replay(rec)
        r.finish(groups.values())
        return groups["g"]


def test_join_revoke_then_assign() -> None:
    h = Harness()
    a = h.hb("a", 0, ["t1"], {})
    assert (a.member_epoch, a.assignment) == (1, {T1: frozenset(range(6))})
    b = h.hb("b", 0, ["t1"], {})
    assert (b.member_epoch, b.assignment) == (2, {})
    a = h.hb("a", 1, owned={T1: frozenset(range(6))})
    assert a.member_epoch == 1 and h.g.members["a"].state == M_UNREVOKED
    kept = a.assignment[T1]
    # b waits: the partitions are still a's
    assert not h.hb("b", 2, owned={}).assignment
    # a reports the revocation done: epoch 2; then b gets the rest
    assert h.hb("a", 1, owned={T1: kept}).member_epoch == 2
    b = h.hb("b", 2, owned={})
    assert b.assignment == {T1: frozenset(range(6)) - kept}
    assert h.g.state == "Stable"
    assert image(h.replayed()) == image(h.g)


def test_fencing_rules() -> None:
    h = Harness()
    h.hb("a", 0, ["t1"], {})
    assert h.hb("a", 5).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.hb("x", 1).error == ErrorCode.UNKNOWN_MEMBER_ID
    h.hb("b", 0, ["t1"], {})
    a2 = h.hb("a", 1, owned={T1: frozenset(range(6))})
    h.hb("a", 1, owned=a2.assignment)  # now at epoch 2, previous epoch 1
    # the previous epoch is still accepted when what it owns is a subset of the assignment
    assert h.hb("a", 1, owned=a2.assignment).error == ErrorCode.NONE
    assert h.hb("a", 1, owned={T1: frozenset(range(6))}).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.hb("a", 1).error == ErrorCode.FENCED_MEMBER_EPOCH  # previous epoch with owned unknown


def test_session_and_rebalance_timeouts() -> None:
    h = Harness()
    h.hb("a", 0, ["t1"], {})
    h.hb("b", 0, ["t1"], {})
    a = h.hb("a", 1, owned={T1: frozenset(range(6))})  # asked to revoke, never answers
    assert h.g.members["a"].revocation_deadline_ms == 5000
    h.now = 4000
    h.hb("b", 2, owned={})
    assert h.g.next_deadline_ms() == 5000
    h.now = 5000
    assert h.g.expire(h.now) == ["a"]
    h.persist()
    b = h.hb("b", 2, owned={})
    assert b.member_epoch == 3 and b.assignment == {T1: frozenset(range(6))}
    del a
    h.now = 5000 + SESSION
    assert h.g.expire(h.now) == ["b"] and h.g.state == "Empty"


def test_static_member_leave_and_return() -> None:
    h = Harness()
    a = h.hb("a", 0, ["t1"], {}, instance_id="i")
    assert h.hb("a", -2, instance_id="i").member_epoch == -2
    assert h.g.group_epoch == 1 and h.g.members["a"].assigned == {T1: frozenset(range(6))}
    n = h.hb("n", 0, ["t1"], {}, instance_id="i")
    assert (n.error, n.member_epoch, n.assignment) == (0, a.member_epoch, {T1: frozenset(range(6))})
    assert list(h.g.members) == ["n"] and h.g.group_epoch == 1
    assert h.hb("a", 1, instance_id="i").error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.hb("x", 0, ["t1"], {}, instance_id="i").error == ErrorCode.UNRELEASED_INSTANCE_ID
    assert image(h.replayed()) == image(h.g)


def test_metadata_changes_bump_the_epoch() -> None:
    h = Harness()
    a = h.hb("a", 0, None, {}, regex="t.*")
    assert a.assignment == {T1: frozenset(range(6)), T2: frozenset(range(3))}
    h.topics["t1"] = (T1, 8)  # partitions added
    a2 = h.hb("a", a.member_epoch, owned=a.assignment)
    assert a2.member_epoch == 2 and a2.assignment[T1] == frozenset(range(8))
    h.topics["t3"] = (uuid.UUID(int=3), 1)  # a new matching topic
    a3 = h.hb("a", 2, owned=a2.assignment)
    assert a3.member_epoch == 3 and uuid.UUID(int=3) in a3.assignment
    assert h.hb("a", 3, regex="t[").error == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_tombstones_remove_the_group() -> None:
    h = Harness()
    h.hb("a", 0, ["t1"], {})
    images = dict(h.images)
    for rec in wire(tombstones(images["g"])):
        apply_to_images(images, rec)
    assert "g" not in images


class GroupMachine(RuleBasedStateMachine):
    NAMES = ["m0", "m1", "m2", "m3", "m4"]

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness()
        self.owned: dict[str, dict] = {}  # what each live member holds, as it would report it

    @rule(m=st.sampled_from(NAMES), subs=st.sampled_from([["t1"], ["t2"], ["t1", "t2"]]))
    def join(self, m: str, subs: list[str]) -> None:
        if m in self.h.g.members:
            return
        r = self.h.hb(m, 0, subs, {})
        assert r.error == 0
        self.owned[m] = dict(r.assignment or {})

    @rule(m=st.sampled_from(NAMES), report=st.booleans())
    def heartbeat(self, m: str, report: bool) -> None:
        mem = self.h.g.members.get(m)
        if mem is None or mem.member_epoch < 0:
            return
        r = self.h.hb(m, mem.member_epoch, owned=dict(self.owned[m]) if report else None)
        assert r.error == 0, r
        if r.assignment is not None:
            self.owned[m] = dict(r.assignment)  # revokes at once what it is no longer given

    @rule(m=st.sampled_from(NAMES))
    def leave(self, m: str) -> None:
        mem = self.h.g.members.get(m)
        if mem is None or mem.member_epoch < 0:
            return
        assert self.h.hb(m, -1).error == 0
        self.owned.pop(m, None)

    @rule(ms=st.integers(0, 12_000))
    def time_passes(self, ms: int) -> None:
        self.h.now += ms
        for m in self.h.g.expire(self.h.now):
            self.owned.pop(m, None)
        self.h.persist()

    @invariant()
    def nobody_shares_a_partition(self) -> None:
        seen: dict = {}
        for m in self.h.g.members.values():
            for parts in (m.assigned, m.revoking):
                for t, ps in parts.items():
                    for p in ps:
                        assert (t, p) not in seen, f"{(t, p)} held by {seen.get((t, p))} and {m.member_id}"
                        seen[(t, p)] = m.member_id
        # and what members believe they hold never overlaps either
        held: dict = {}
        for m, parts in self.owned.items():
            for t, ps in parts.items():
                for p in ps:
                    assert (t, p) not in held
                    held[(t, p)] = m

    @invariant()
    def epochs_and_replay(self) -> None:
        g = self.h.g
        for m in g.members.values():
            assert m.member_epoch <= g.assignment_epoch <= g.group_epoch
        if self.h.log:
            assert image(self.h.replayed()) == image(g)

    def teardown(self) -> None:
        # everyone heartbeats with what it holds until nothing moves: Stable on the target
        g = self.h.g
        for _ in range(6):
            for m in list(g.members):
                self.heartbeat(m, True)
        if g.members:
            assert g.state == "Stable", g.state
            for mid, m in g.members.items():
                assert m.assigned == {t: ps for t, ps in g.target.get(mid, {}).items() if ps}
                assert m.state == M_STABLE


GroupMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_group_machine = GroupMachine.TestCase
