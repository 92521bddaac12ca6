"""Replay equivalence of the group coordinator: what the log holds is what memory holds.

Every write of the group coordinator is an operation of its shard that
returns records; the runtime appends them and replays them into the shard.
Classic and share groups also live in objects that change before their
records are written, so the records could silently fall short of the
objects. These tests drive one __consumer_offsets shard with random
sequences of operations (classic joins, syncs, heartbeats, leaves, session
and sync expiries, leaders' assignments made durable later, offset commits,
deletes and expiry, group deletion; share-group joins, heartbeats with new
subscriptions, leaves, expiries, state initializations and deletions) and,
after every step, build a fresh shard from the encoded records alone and
compare a canonical dump of the durable state, computed from the live
objects, with the same dump of the fresh shard. A classic group in the
middle of a rebalance has no durable form of its own (Kafka writes a group
when a generation's assignment is stored or the group empties); its dump is
the image of the log, and once at rest (Stable or Empty) its live objects
must equal that image. tests/wire/test_coordinator_restart.py does the same through a
real broker and a real restart.

The harness below plays the part of the coordinator's asyncio shell
(``groups/coordinator.py`` ``after``; ``groups/share/service.py``
``heartbeat``) with a fake clock: it calls the same shard operations the
shell submits to the runtime and appends their records to an in-memory log
the way the runtime does (encoded, then replayed into the shard).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shoal.broker.groups.classic import AssignmentWrite, ClassicGroup, GroupState, JoinParams
from shoal.broker.groups.shard import GroupShard
from shoal.broker.groups.share.group import ShareGroup
from shoal.protocol.errors import ErrorCode
from tests.support.coordinator_state import (
    CLASSIC,
    INSTANCES,
    PROTOCOLS,
    RETENTION,
    SESSION,
    SETTINGS,
    SHARE,
    SHARE_MEMBERS,
    SHARE_SESSION,
    TOPICS,
    Clock,
    Log,
    check_equivalent,
)


class ShardMachine(RuleBasedStateMachine):
    """One __consumer_offsets shard, its log and a fake clock; the property after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.shard = GroupShard(0, SETTINGS, self.clock)
        self.shard.finish_loading()
        self.log = Log()
        self.writes: list[tuple[ClassicGroup, AssignmentWrite]] = []  # assignments written, not yet durable
        self.inits: list[tuple[ShareGroup, dict]] = []  # InitializeShareGroupState calls under way
        self.deletes: list[tuple[ShareGroup, dict]] = []
        self.topics = {"a": (uuid.UUID(int=1), 2), "b": (uuid.UUID(int=2), 1)}
        self.serial = 0

    @property
    def now(self) -> int:
        return self.clock.now

    def tick(self, ms: int = 1) -> None:
        self.clock.now += ms

    # the coordinator's after(): writes, then the DelayedJoin check
    def after(self, g: ClassicGroup) -> None:
        g.take_outbox()
        for w in g.take_assignment_writes():
            if self.log.write(self.shard, lambda s, w=w: s.store_assignment(g, w)) is not None:
                self.writes.append((g, w))
        self.log.write(self.shard, lambda s: s.store_group(g))
        if g.state == GroupState.PREPARING_REBALANCE and g.can_complete_join(self.now):
            g.complete_join(self.now)
            self.after(g)

    def classic(self, i: int, state: GroupState | None = None) -> ClassicGroup | None:
        """The i-th (modulo) of the classic groups with members (and in `state`), if any."""
        groups = [
            g for gid, g in sorted(self.shard.groups.items()) if g.members and (state is None or g.state == state)
        ]
        return groups[i % len(groups)] if groups else None

    def has_groups(self, state: GroupState | None = None) -> bool:
        return self.classic(0, state) is not None

    @staticmethod
    def member_of(g: ClassicGroup | None, i: int) -> Any:
        if g is None or not g.members:
            return None
        return list(g.members.values())[i % len(g.members)]  # (insertion order: ids are random)

    # -- the property ----------------------------------------------------------------------
    @invariant()
    def replay_is_equivalent(self) -> None:
        check_equivalent(self.shard, self.log)


class ClassicGroupsReplay(ShardMachine):
    """Classic groups and committed offsets."""

    @rule(
        gi=st.integers(0, 2),
        instance=st.sampled_from(INSTANCES),
        protocols=st.sampled_from(PROTOCOLS),
        known=st.booleans(),
        client=st.sampled_from(["app", "other"]),
    )
    def join_new(self, gi: int, instance: str | None, protocols: list, known: bool, client: str) -> None:
        gid = CLASSIC[gi]
        g = self.shard.group(gid, create=True)
        assert g is not None
        params = JoinParams("", instance, client, "/10.0.0.1", SESSION, 5_000, "consumer", protocols, known)
        g.join(params, object(), self.now)
        for mid in list(g.pending_members):  # the MEMBER_ID_REQUIRED round: join again with the id
            if g.pending_members.get(mid) is not None and known:
                g.join(
                    JoinParams(mid, None, client, "/10.0.0.1", SESSION, 5_000, "consumer", protocols, True),
                    object(),
                    self.now,
                )
        self.after(g)
        self.tick()

    @rule(gi=st.integers(0, 2), instances=st.lists(st.sampled_from(INSTANCES), min_size=1, max_size=3, unique=True))
    def group_forms(self, gi: int, instances: list[str | None]) -> None:
        """Members join a group with nobody in it, sync, and the assignment is durable: Stable."""
        g = self.shard.group(CLASSIC[gi], create=True)
        assert g is not None
        if g.members or g.pending_members or g.state == GroupState.DEAD:
            return
        for instance in instances:
            params = JoinParams("", instance, "app", "/10.0.0.3", SESSION, 5_000, "consumer", PROTOCOLS[0], False)
            g.join(params, object(), self.now)
        self.rebalance_times_out_in(g)
        self.sync_in(g, True, True, b"f")

    @precondition(lambda self: self.has_groups())
    @rule(gi=st.integers(0, 2), mi=st.integers(0, 3), protocols=st.sampled_from(PROTOCOLS))
    def rejoin(self, gi: int, mi: int, protocols: list) -> None:
        g = self.classic(gi)
        m = self.member_of(g, mi)
        if m is None:
            return
        assert g is not None
        params = JoinParams(
            m.member_id, m.group_instance_id, m.client_id, m.client_host, SESSION, 5_000, "consumer", protocols, True
        )
        g.join(params, object(), self.now)
        self.after(g)
        self.tick()

    @precondition(lambda self: self.has_groups())
    @rule(gi=st.integers(0, 2), mi=st.integers(0, 3), client=st.sampled_from(["app", "other"]))
    def static_member_restarts(self, gi: int, mi: int, client: str) -> None:
        """A static member comes back with a new process: same instance id and protocols, no member id."""
        g = self.classic(gi, GroupState.STABLE) or self.classic(gi)  # (Stable is where it is written at once)
        assert g is not None
        static = [m for m in g.members.values() if m.group_instance_id is not None]
        if not static:
            return
        m = static[mi % len(static)]
        params = JoinParams("", m.group_instance_id, client, "/10.0.0.2", SESSION, 5_000, "consumer", m.protocols, True)
        g.join(params, object(), self.now)
        self.after(g)
        self.tick()

    @precondition(lambda self: self.has_groups(GroupState.PREPARING_REBALANCE))
    @rule(gi=st.integers(0, 2))
    def rebalance_times_out(self, gi: int) -> None:
        g = self.classic(gi, GroupState.PREPARING_REBALANCE)
        if g is not None:
            self.rebalance_times_out_in(g)

    def rebalance_times_out_in(self, g: ClassicGroup) -> None:
        if g.state != GroupState.PREPARING_REBALANCE or g.join_deadline_ms is None:
            return
        self.clock.now = max(self.now, g.join_deadline_ms)
        g.complete_join(self.now)
        self.after(g)

    @precondition(lambda self: self.has_groups(GroupState.COMPLETING_REBALANCE))
    @rule(gi=st.integers(0, 2), everyone=st.booleans(), durable=st.booleans(), data=st.binary(max_size=4))
    def sync(self, gi: int, everyone: bool, durable: bool, data: bytes) -> None:
        """The leader's SyncGroup with an assignment (and, with `everyone`, the others' too);
        `durable`: its write becomes durable at once (else later, in `assignment_durable`)."""
        g = self.classic(gi, GroupState.COMPLETING_REBALANCE)
        if g is not None:
            self.sync_in(g, everyone, durable, data)

    def sync_in(self, g: ClassicGroup, everyone: bool, durable: bool, data: bytes) -> None:
        if g.state != GroupState.COMPLETING_REBALANCE or g.leader_id not in g.members:
            return
        assignments = {mid: data + mid.encode()[-2:] for mid in g.members}
        for m in list(g.members.values()):
            if everyone or m.member_id == g.leader_id:
                g.sync(m.member_id, m.group_instance_id, g.generation_id, None, None, assignments, object(), self.now)
        self.after(g)
        if durable and self.writes:
            self.assignment_durable(False)
        self.tick()

    @precondition(lambda self: self.has_groups())
    @rule(gi=st.integers(0, 2))
    def everyone_rejoins(self, gi: int) -> None:
        g = self.classic(gi)
        if g is None:
            return
        for m in list(g.members.values()):
            protocols = list(m.protocols)
            params = JoinParams(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                SESSION,
                5_000,
                "consumer",
                protocols,
                True,
            )
            g.join(params, object(), self.now)
        self.after(g)
        self.tick()

    @precondition(lambda self: bool(self.writes))
    @rule(first=st.booleans())
    def assignment_durable(self, first: bool) -> None:
        g, w = self.writes.pop(0 if first else -1)
        g.assignment_stored(w, ErrorCode.NONE, self.now)
        if self.shard.groups.get(g.group_id) is g:
            self.after(g)

    @precondition(lambda self: self.has_groups())
    @rule(gi=st.integers(0, 2), mi=st.integers(0, 3), stale=st.booleans())
    def heartbeat(self, gi: int, mi: int, stale: bool) -> None:
        g = self.classic(gi)
        m = self.member_of(g, mi)
        if m is None:
            return
        assert g is not None
        g.heartbeat(m.member_id, m.group_instance_id, g.generation_id - stale, self.now)
        self.after(g)
        self.tick()

    @precondition(lambda self: self.has_groups())
    @rule(gi=st.integers(0, 2), mi=st.integers(0, 3))
    def leave(self, gi: int, mi: int) -> None:
        g = self.classic(gi)
        m = self.member_of(g, mi)
        if m is None:
            return
        assert g is not None
        g.leave(m.member_id, m.group_instance_id, self.now)
        self.after(g)
        self.tick()

    @precondition(lambda self: self.has_groups())
    @rule(gi=st.integers(0, 2), mi=st.integers(0, 3))
    def session_expires(self, gi: int, mi: int) -> None:
        g = self.classic(gi)
        m = self.member_of(g, mi)
        if m is None:
            return
        assert g is not None
        self.clock.now = max(self.now, m.heartbeat_deadline_ms)
        g.expire_member(m.member_id, self.now)
        self.after(g)

    @precondition(lambda self: self.has_groups(GroupState.COMPLETING_REBALANCE))
    @rule(gi=st.integers(0, 2))
    def sync_expires(self, gi: int) -> None:
        g = self.classic(gi, GroupState.COMPLETING_REBALANCE)
        if g is None or g.sync_deadline_ms is None:
            return
        self.clock.now = max(self.now, g.sync_deadline_ms)
        g.expire_sync(self.now)
        self.after(g)

    @rule(gi=st.integers(0, 2))
    def delete_group(self, gi: int) -> None:
        gid = CLASSIC[gi]
        g = self.shard.group(gid)
        if g is None and gid not in self.shard.offsets:
            return
        if g is not None and g.state not in (GroupState.EMPTY, GroupState.DEAD):
            return  # NON_EMPTY_GROUP
        dead = self.log.write(self.shard, lambda s: s.delete_group(gid, self.now))
        if dead is not None:
            dead.take_outbox()

    # -- offsets ----------------------------------------------------------------------
    @rule(
        gi=st.integers(0, 2),
        mi=st.integers(0, 3),
        simple=st.booleans(),
        offsets=st.lists(
            st.tuples(st.sampled_from(TOPICS), st.integers(0, 2), st.integers(0, 10**6), st.integers(-1, 3)),
            min_size=1,
            max_size=3,
        ),
        metadata=st.none() | st.text(max_size=5),
    )
    def commit(self, gi: int, mi: int, simple: bool, offsets: list, metadata: str | None) -> None:
        g = None if simple else self.classic(gi)
        gid = CLASSIC[gi] if g is None else g.group_id
        g = self.shard.group(gid)
        m = None if simple else self.member_of(g, mi)
        generation = -1 if m is None else g.generation_id  # type: ignore[union-attr]
        error, _ = self.shard.validate_commit(
            gid, generation, "" if m is None else m.member_id, None if m is None else m.group_instance_id, self.now
        )
        if g is not None:
            self.after(g)
        if error:
            return
        accepted = [(t, p, o, e, metadata) for t, p, o, e in offsets]
        self.log.write(self.shard, lambda s: s.commit_offsets(gid, accepted, self.now))
        self.tick()

    @rule(gi=st.integers(0, 2), parts=st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 2)), max_size=3))
    def delete_offsets(self, gi: int, parts: list) -> None:
        gid = CLASSIC[gi]
        g = self.shard.group(gid)
        if g is None and gid not in self.shard.offsets:
            return
        if g is not None and g.state not in (GroupState.EMPTY, GroupState.DEAD):
            return  # (the coordinator refuses subscribed topics; here: every topic)
        self.log.write(self.shard, lambda s: s.delete_offsets(gid, parts))

    @rule(topic=st.sampled_from(TOPICS))
    def topic_deleted(self, topic: str) -> None:
        self.log.write(self.shard, lambda s: s.delete_topic_offsets(topic))

    @rule(now=st.booleans())
    def offsets_expire(self, now: bool) -> None:
        if not now:
            return
        self.tick(RETENTION)
        self.log.write(self.shard, lambda s: s.expire(self.now))


class ShareGroupsReplay(ShardMachine):
    """Share groups: heartbeats, leaves, expiries, state initialization and deletion, topic changes."""

    def persist(self, g: ShareGroup) -> None:
        self.log.write(self.shard, lambda s: s.store_share_group(g))

    def share_heartbeat(self, gid: str, mid: str, epoch: int, subs: list[str] | None) -> None:
        shard = self.shard
        g = shard.share_groups.get(gid)
        if g is None:
            if epoch != 0:
                return
            g = shard.share_groups[gid] = ShareGroup(gid, self.now)
        names = set(subs or ()) | g.subscribed_names()
        topics = {n: self.topics[n] for n in names if n in self.topics}
        result = g.heartbeat(mid, epoch, None, subs, topics, self.now, SHARE_SESSION, 3, client_id="c", client_host="h")
        inits: dict = {}
        deletes: dict = {}
        if result.error == ErrorCode.NONE:
            inits = g.to_initialize(topics, self.now, 30_000)
            if subs is not None and epoch != -1:
                deletes = g.to_delete(topics)
        if not g.members and not shard.share_images.get(gid) and g.group_epoch == 0:
            shard.share_groups.pop(gid, None)
            return
        self.persist(g)
        if inits:
            self.inits.append((g, inits))
        if deletes:
            self.deletes.append((g, deletes))
        self.tick()

    @rule(gi=st.integers(0, 1), mi=st.integers(0, 2), subs=st.sets(st.sampled_from(["a", "b", "c"]), min_size=1))
    def share_join(self, gi: int, mi: int, subs: set[str]) -> None:
        self.share_heartbeat(SHARE[gi], SHARE_MEMBERS[mi], 0, sorted(subs))

    @rule(
        gi=st.integers(0, 1),
        mi=st.integers(0, 2),
        subs=st.none() | st.sets(st.sampled_from(["a", "b", "c"]), min_size=1),
        leave=st.booleans(),
    )
    def share_heartbeat_or_leave(self, gi: int, mi: int, subs: set[str] | None, leave: bool) -> None:
        g = self.shard.share_groups.get(SHARE[gi])
        m = g.members.get(SHARE_MEMBERS[mi]) if g is not None else None
        if m is None:
            return
        if leave:
            self.share_heartbeat(SHARE[gi], m.member_id, -1, None)
        else:
            self.share_heartbeat(SHARE[gi], m.member_id, m.member_epoch, None if subs is None else sorted(subs))

    @precondition(lambda self: bool(self.inits))
    @rule(ok=st.booleans())
    def share_initialized(self, ok: bool) -> None:
        g, inits = self.inits.pop(0)
        if self.shard.share_groups.get(g.group_id) is not g:
            return
        for tid, state in inits.items():
            if ok:
                g.initialized_partitions(tid, state.name, state.partitions)
            else:
                g.initialize_failed(tid, state.partitions)
        self.persist(g)

    @precondition(lambda self: bool(self.deletes))
    @rule()
    def share_state_deleted(self) -> None:
        g, deletes = self.deletes.pop(0)
        if self.shard.share_groups.get(g.group_id) is not g:
            return
        g.deleted_topics(list(deletes))
        self.persist(g)

    @rule(gi=st.integers(0, 1))
    def share_sessions_expire(self, gi: int) -> None:
        g = self.shard.share_groups.get(SHARE[gi])
        if g is None or not g.members:
            return
        deadline = g.next_deadline_ms()
        assert deadline is not None
        self.clock.now = max(self.now, deadline)
        if g.expire(self.now):
            self.persist(g)

    @rule(name=st.sampled_from(["a", "b", "c"]), grow=st.booleans())
    def topic_changes(self, name: str, grow: bool) -> None:
        """A topic grows, or is deleted and created again under a new id (the groups forget its state)."""
        tid, count = self.topics.get(name, (uuid.UUID(int=100 + self.serial), 0))
        self.serial += 1
        if grow:
            self.topics[name] = (tid, count + 1)
            return
        for g in list(self.shard.share_groups.values()):
            if g.forget_offsets(tid) is not None:
                self.persist(g)
        self.topics[name] = (uuid.UUID(int=100 + self.serial), 1)

    @rule(gi=st.integers(0, 1))
    def share_group_deleted(self, gi: int) -> None:
        g = self.shard.share_groups.get(SHARE[gi])
        if g is None or g.members:
            return
        self.log.write(self.shard, lambda s: s.delete_share_group(g, self.now))


MACHINE_SETTINGS = settings(
    max_examples=80,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
ClassicGroupsReplay.TestCase.settings = MACHINE_SETTINGS
ShareGroupsReplay.TestCase.settings = MACHINE_SETTINGS
test_classic_groups_and_offsets_replay = ClassicGroupsReplay.TestCase
test_classic_groups_and_offsets_replay.pytestmark = [pytest.mark.slow]
test_share_groups_replay = ShareGroupsReplay.TestCase
test_share_groups_replay.pytestmark = [pytest.mark.slow]


# -- the same through a real broker and a real restart ---------------------------------------
