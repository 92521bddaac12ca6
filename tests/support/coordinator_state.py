"""Canonical dumps of coordinator state (group and share-state shards) and the in-memory log
that the replay-equivalence tests (tests/unit/test_*coordinator_replay.py) and the restart
tests (tests/wire/test_coordinator_restart*.py) compare."""

from __future__ import annotations

from typing import Any

from shoal.broker.groups.classic import ClassicGroup, GroupState
from shoal.broker.groups.shard import GroupSettings, GroupShard
from shoal.broker.groups.share.records import image
from shoal.protocol.coordinator_records import CoordinatorRecord, serde

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
