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
must equal that image. The last test does the same through a real broker
and a real restart.

The harness below plays the part of the coordinator's asyncio shell
(``groups/coordinator.py`` ``after``; ``groups/share/service.py``
``heartbeat``) with a fake clock: it calls the same shard operations the
shell submits to the runtime and appends their records to an in-memory log
the way the runtime does (encoded, then replayed into the shard).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shoal.broker.groups.classic import AssignmentWrite, ClassicGroup, GroupState, JoinParams
from shoal.broker.groups.shard import GroupSettings, GroupShard
from shoal.broker.groups.share.group import ShareGroup
from shoal.broker.groups.share.records import image
from shoal.protocol.coordinator_records import CoordinatorRecord, serde
from shoal.protocol.errors import ErrorCode
from shoal.testing import EmbeddedBroker

SERDE = serde("group")
CLASSIC = ["c0", "c1", "c2"]
SHARE = ["s0", "s1"]
SHARE_MEMBERS = ["m0", "m1", "m2"]
INSTANCES = [None, "i0", "i1"]
PROTOCOLS = [[("range", b"r")], [("range", b"r"), ("roundrobin", b"rr")], [("roundrobin", b"rr2")]]
TOPICS = ["t0", "t1"]
SESSION = 10_000
SHARE_SESSION = 45_000
RETENTION = 3_600_000
SETTINGS = GroupSettings(
    min_session_timeout_ms=1_000,
    max_session_timeout_ms=60_000,
    max_size=4,
    initial_rebalance_delay_ms=0,
    offset_metadata_max_bytes=4096,
    offsets_retention_ms=RETENTION,
)


# -- the canonical dump -----------------------------------------------------------------
def _opt(x: Any) -> Any:
    return x or None


def group_from_value(v: Any) -> tuple:
    """A GroupMetadata value as (type, generation, protocol, leader, members)."""
    members = tuple(
        sorted(
            (
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout,
                m.session_timeout,
                bytes(m.subscription),
                bytes(m.assignment),
            )
            for m in v.members
        )
    )
    return (_opt(v.protocol_type), v.generation, _opt(v.protocol), _opt(v.leader), members)


def group_from_object(g: ClassicGroup) -> tuple:
    """The same, read off a live (or restored) ClassicGroup."""
    members = tuple(
        sorted(
            (
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                bytes(m.metadata(g.protocol_name)) if g.protocol_name else b"",
                bytes(m.assignment),
            )
            for m in g.members.values()
        )
    )
    return (_opt(g.protocol_type), g.generation_id, _opt(g.protocol_name), _opt(g.leader_id), members)


def at_rest(g: ClassicGroup) -> bool:
    return g.state in (GroupState.STABLE, GroupState.EMPTY)


def blank(g: ClassicGroup) -> bool:
    """A group with nothing durable (made by a failed join, or by replaying a commit)."""
    return g.state == GroupState.EMPTY and not g.members and g.generation_id == 0 and not g.protocol_type


def dump(shard: GroupShard) -> dict[str, Any]:
    """The durable state of a group shard, from its objects.

    A classic group at rest is read off its object; one in the middle of a
    rebalance has only the last state it wrote (the log's image of it).
    """
    classic: dict[str, Any] = {}
    for gid, g in shard.groups.items():
        if blank(g):
            continue
        if at_rest(g):
            classic[gid] = (g.state.value, group_from_object(g))
        elif gid in shard.group_images:
            v = shard.group_images[gid]
            classic[gid] = ("Stable" if v.members else "Empty", group_from_value(v))
    offsets = {
        gid: {tp: (c.offset, c.leader_epoch, c.metadata, c.commit_timestamp) for tp, c in tps.items()}
        for gid, tps in shard.offsets.items()
    }
    share = {gid: (g.state, image(g)) for gid, g in shard.share_groups.items()}
    return {"classic": classic, "offsets": offsets, "share": share}


# -- a log, as the runtime keeps it -------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Log:
    """Operations -> records, encoded as the runtime appends them and replayed into the shard."""

    def __init__(self) -> None:
        self.entries: list[tuple[bytes, bytes | None]] = []

    def write(self, shard: GroupShard, op: Any) -> Any:
        records, result = op(shard)
        for r in records:
            self.entries.append((SERDE.encode_key(r.name, r.key), SERDE.encode_value(r.name, r.value, r.value_version)))
            version = r.value_version if r.value_version is not None else SERDE.latest_value_version(r.name)
            shard.replay(CoordinatorRecord(SERDE.record_type(r.name), r.key, r.value, version), len(self.entries) - 1)
        return result

    def replayed(self) -> GroupShard:
        """A fresh shard loaded from the encoded records only (a restart)."""
        fresh = GroupShard(0, SETTINGS, Clock())
        for offset, (key, value) in enumerate(self.entries):
            fresh.replay(SERDE.decode(key, value), offset)
        fresh.finish_loading()
        return fresh


def check_equivalent(shard: GroupShard, log: Log) -> GroupShard:
    # What was written says everything memory holds durably ...
    for gid, g in shard.groups.items():
        if at_rest(g) and not blank(g):
            assert gid in shard.group_images, f"{gid} at rest but never written"
            assert group_from_object(g) == group_from_value(shard.group_images[gid]), gid
        if blank(g):
            assert gid not in shard.group_images, gid
    for gid, g in shard.share_groups.items():
        assert image(g) == shard.share_images.get(gid), gid
    # ... and replaying it yields the same durable state.
    fresh = log.replayed()
    assert dump(fresh) == dump(shard)
    assert {gid: group_from_value(v) for gid, v in fresh.group_images.items()} == {
        gid: group_from_value(v) for gid, v in shard.group_images.items()
    }
    assert fresh.share_images == shard.share_images
    for gid, g in fresh.share_groups.items():
        assert image(g) == fresh.share_images[gid], gid
    return fresh


# -- the state machines ---------------------------------------------------------------------
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
test_share_groups_replay = ShareGroupsReplay.TestCase


# -- the same through a real broker and a real restart ---------------------------------------
def _params(member_id: str = "", instance: str | None = None, meta: bytes = b"r") -> JoinParams:
    return JoinParams(member_id, instance, "app", "/127.0.0.1", 10_000, 300, "consumer", [("range", meta)], False)


async def _form(coord: Any, gid: str, *joiners: JoinParams) -> list[str]:
    """Members join `gid` together, the leader assigns, everyone syncs: returns their ids."""
    results = await asyncio.gather(*(coord.join(gid, p) for p in joiners))
    assert all(r.error == ErrorCode.NONE for r in results), results
    leader = results[0].leader
    assignments = {r.member_id: f"{gid}/{r.member_id[-4:]}".encode() for r in results}
    syncs = await asyncio.gather(
        *(
            coord.sync(
                gid,
                r.member_id,
                p.group_instance_id,
                r.generation_id,
                None,
                None,
                assignments if r.member_id == leader else {},
            )
            for r, p in zip(results, joiners)
        )
    )
    assert all(s.error == ErrorCode.NONE for s in syncs), syncs
    return [r.member_id for r in results]


def _broker_dump(coord: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {"classic": {}, "offsets": {}, "share": {}}
    for shard in coord.runtime.shards.values():
        for part, value in dump(shard).items():
            merged[part].update(value)
    return merged


async def _durable(coord: Any) -> None:
    for p in list(coord.runtime.shards):
        fut = coord.runtime.barrier(p)
        if fut is not None:
            await fut


async def test_group_coordinator_state_survives_a_real_restart() -> None:
    async with EmbeddedBroker(
        fast_timers=True, offsets_topic_num_partitions=3, share_coordinator_state_topic_num_partitions=2
    ) as eb:
        await eb.acreate_topic("t0", 3)
        await eb.acreate_topic("a", 2)
        coord = eb.broker.groups
        await coord.runtime.loaded.wait()

        # c0: two members, a second generation, offsets
        first = await _form(coord, "c0", _params())
        await _form(
            coord, "c0", _params(), _params(first[0])
        )  # (the newcomer first: the leader then completes the join)
        c0 = coord.runtime.shard_for("c0").groups["c0"]
        assert len(c0.members) == 2 and c0.generation_id == 2
        m = next(iter(c0.members.values()))
        error, errors = await coord.commit(
            "c0", c0.generation_id, m.member_id, None, [("t0", 0, 42, 1, "x"), ("t0", 2, 7, 1, None)]
        )
        assert (error, errors) == (ErrorCode.NONE, [ErrorCode.NONE, ErrorCode.NONE])
        # c1: a static member restarts in Stable (its new member id is written at once)
        await _form(coord, "c1", _params(instance="i0"))
        again = await coord.join("c1", _params(instance="i0"))
        assert again.error == ErrorCode.NONE
        # c2: its only member leaves: Empty, next generation
        (solo,) = await _form(coord, "c2", _params())
        assert coord.leave("c2", [(solo, None)]) == (ErrorCode.NONE, [ErrorCode.NONE])
        # c3: standalone commits, one deleted; c4: commits, then the group deleted
        await coord.commit("c3", -1, "", None, [("t0", 0, 1, -1, None), ("t0", 1, 2, -1, "m")])
        assert await coord.delete_offsets("c3", [("t0", 1)]) == (ErrorCode.NONE, [ErrorCode.NONE])
        await coord.commit("c4", -1, "", None, [("t0", 0, 5, -1, None)])
        assert await coord.delete_groups(["c4"]) == [ErrorCode.NONE]
        # c5: Stable, then a new member's join leaves it preparing a rebalance (nothing written for it)
        await _form(coord, "c5", _params())
        pending = asyncio.create_task(coord.join("c5", _params()))
        await asyncio.sleep(0.05)
        assert coord.runtime.shard_for("c5").groups["c5"].state == GroupState.PREPARING_REBALANCE
        # s0: a share group of two members, its partitions initialized and assigned, one leaves
        share = coord.share
        answers = [await share.heartbeat("s0", mid, 0, None, ["a"], "c", "h") for mid in ("sm0", "sm1")]
        assert all(a.error == ErrorCode.NONE for a in answers)
        g = share.find("s0")[2]
        for _ in range(100):
            if g.initialized:
                break
            await asyncio.sleep(0.02)
        assert g.initialized
        epoch = g.members["sm0"].member_epoch
        assert (await share.heartbeat("s0", "sm0", epoch, None, None, "c", "h")).error == ErrorCode.NONE
        assert (await share.heartbeat("s0", "sm1", -1, None, None, "c", "h")).error == ErrorCode.NONE
        await _durable(coord)

        before = _broker_dump(coord)
        assert set(before["classic"]) == {"c0", "c1", "c2", "c5"}
        assert before["classic"]["c2"][0] == "Empty" and before["classic"]["c5"][0] == "Stable"
        assert set(before["offsets"]) == {"c0", "c3"} and set(before["share"]) == {"s0"}
        # the log of each partition, replayed into a fresh shard, holds all of it
        for p, shard in coord.runtime.shards.items():
            fresh = GroupShard(p, coord.settings, Clock())
            coord.runtime._replay_partition(p, fresh)
            fresh.finish_loading()
            assert dump(fresh) == dump(shard)

        pending.cancel()
        await eb.arestart(clean=False)  # as kill -9 (and a power cut: unflushed bytes are lost)
        coord = eb.broker.groups
        await coord.runtime.loaded.wait()
        assert _broker_dump(coord) == before
