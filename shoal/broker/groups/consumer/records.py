"""Consumer groups (KIP-848) as records in __consumer_offsets: write the changes, replay them.

Same design as the share groups' records (see broker/groups/share/records.py):
the shard keeps, per group, the image its records left in the log (one
hashable summary per record key); after an operation only the keys whose
summary changed are written, plus tombstones for keys that went away, in
Kafka's order (member metadata, group epoch, target assignment, current
assignment) with a deleted group's ConsumerGroupMetadata tombstone last.
At load, :class:`ConsumerGroupReplayer` rebuilds ConsumerGroup objects from
the same records; afterwards records only update the image.

Not written: ConsumerGroupPartitionMetadata (Kafka 4.1+ keeps the metadata
hash in ConsumerGroupMetadata instead) and ConsumerGroupRegularExpression
(regexes are resolved against the broker's topics on each heartbeat).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from shoal.broker.coordinator.shard import Record
from shoal.broker.groups.consumer.group import ClassicMeta, ConsumerGroup, ConsumerMember
from shoal.protocol.coordinator_records import CoordinatorRecord, serde

__all__ = ["ConsumerGroupReplayer", "apply_to_images", "diff_records", "image", "is_consumer_record", "tombstones"]

_SERDE = serde("group")
META = "ConsumerGroupMetadata"
MEMBER = "ConsumerGroupMemberMetadata"
TARGET_META = "ConsumerGroupTargetAssignmentMetadata"
TARGET_MEMBER = "ConsumerGroupTargetAssignmentMember"
CURRENT = "ConsumerGroupCurrentMemberAssignment"
_ORDER = {MEMBER: 0, META: 1, TARGET_MEMBER: 2, TARGET_META: 3, CURRENT: 4}
# Read at load, never written by us (another broker version may have written them).
_IGNORED = frozenset({"ConsumerGroupPartitionMetadata", "ConsumerGroupRegularExpression"})
_K = {n: _SERDE.key_class(n) for n in _ORDER}
_V = {n: _SERDE.value_class(n) for n in _ORDER}
_MEMBER_KEYED = frozenset({MEMBER, TARGET_MEMBER, CURRENT})

Image = dict[tuple[str, ...], tuple]


def is_consumer_record(name: str) -> bool:
    return name in _ORDER or name in _IGNORED


def _parts(a: dict[uuid.UUID, frozenset[int]]) -> tuple:
    return tuple(sorted((t, tuple(sorted(ps))) for t, ps in a.items() if ps))


def image(g: ConsumerGroup) -> Image:
    gid = g.group_id
    out: Image = {(META, gid): (g.group_epoch, g.metadata_hash)}
    for mid, m in g.members.items():
        out[(MEMBER, gid, mid)] = (
            m.instance_id,
            m.rack_id,
            m.client_id,
            m.client_host,
            tuple(sorted(m.subscribed_names)),
            m.regex,
            m.rebalance_timeout_ms,
            m.server_assignor,
            _classic(m),
        )
        out[(CURRENT, gid, mid)] = (
            m.member_epoch,
            m.previous_member_epoch,
            m.state,
            _parts(m.assigned),
            _parts(m.revoking),
        )
    for mid, t in g.target.items():
        out[(TARGET_MEMBER, gid, mid)] = (_parts(t),)
    out[(TARGET_META, gid)] = (g.assignment_epoch,)
    return out


def _key(k: tuple[str, ...]) -> Any:
    if len(k) == 3:
        return _K[k[0]](group_id=k[1], member_id=k[2])
    return _K[k[0]](group_id=k[1])


def _value(k: tuple[str, ...], v: tuple) -> Any:
    name, cls = k[0], _V[k[0]]
    if name == META:
        return cls(epoch=v[0], metadata_hash=v[1])
    if name == MEMBER:
        iid, rack, client_id, host, names, regex, rebalance, assignor, classic = v
        meta = None
        if classic is not None:
            ccls = cls.ClassicMemberMetadata
            meta = ccls(
                session_timeout_ms=classic[0],
                supported_protocols=[cls.ClassicProtocol(name=n, metadata=md) for n, md in classic[1]],
            )
        return cls(
            instance_id=iid,
            rack_id=rack,
            client_id=client_id,
            client_host=host,
            subscribed_topic_names=list(names),
            subscribed_topic_regex=regex,
            rebalance_timeout_ms=rebalance,
            server_assignor=assignor,
            classic_member_metadata=meta,
        )
    if name == TARGET_META:
        return cls(assignment_epoch=v[0])
    if name == TARGET_MEMBER:
        return cls(topic_partitions=[cls.TopicPartition(topic_id=t, partitions=list(ps)) for t, ps in v[0]])
    epoch, previous, state, assigned, revoking = v
    tp = cls.TopicPartitions
    return cls(
        member_epoch=epoch,
        previous_member_epoch=previous,
        state=state,
        assigned_partitions=[tp(topic_id=t, partitions=list(ps)) for t, ps in assigned],
        partitions_pending_revocation=[tp(topic_id=t, partitions=list(ps)) for t, ps in revoking],
    )


def diff_records(g: ConsumerGroup, previous: Image) -> list[Record]:
    now = image(g)
    changed = sorted((k for k, v in now.items() if previous.get(k) != v), key=lambda k: (_ORDER[k[0]], k))
    gone = sorted((k for k in previous if k not in now), key=lambda k: (-_ORDER[k[0]], k))
    return [Record(k[0], _key(k), None) for k in gone] + [Record(k[0], _key(k), _value(k, now[k])) for k in changed]


def tombstones(previous: Image) -> list[Record]:
    keys = sorted(previous, key=lambda k: (1 if k[0] == META else -_ORDER[k[0]], k))
    return [Record(k[0], _key(k), None) for k in keys]


def _classic(m: ConsumerMember) -> tuple | None:
    c = m.classic
    return None if c is None else (c.session_timeout_ms, tuple((n, bytes(md)) for n, md in c.protocols))


def _rclassic(c: Any) -> tuple | None:
    if c is None:
        return None
    return (c.session_timeout_ms, tuple((e.name, bytes(e.metadata)) for e in c.supported_protocols))


def _rparts(entries: Iterable[Any]) -> tuple:
    return _parts({e.topic_id: frozenset(e.partitions) for e in entries})


def _summary(name: str, v: Any) -> tuple:
    if name == META:
        return (v.epoch, v.metadata_hash)
    if name == MEMBER:
        return (
            v.instance_id,
            v.rack_id,
            v.client_id,
            v.client_host,
            tuple(sorted(v.subscribed_topic_names)),
            v.subscribed_topic_regex,
            v.rebalance_timeout_ms,
            v.server_assignor,
            _rclassic(v.classic_member_metadata),
        )
    if name == TARGET_META:
        return (v.assignment_epoch,)
    if name == TARGET_MEMBER:
        return (_rparts(v.topic_partitions),)
    return (
        v.member_epoch,
        v.previous_member_epoch,
        v.state,
        _rparts(v.assigned_partitions),
        _rparts(v.partitions_pending_revocation),
    )


def apply_to_images(images: dict[str, Image], record: CoordinatorRecord) -> None:
    name = record.type.name
    if name in _IGNORED:
        return
    k = record.key
    gid = k.group_id
    key = (name, gid, k.member_id) if name in _MEMBER_KEYED else (name, gid)
    if record.value is None:
        if name == META:
            images.pop(gid, None)
        elif gid in images:
            images[gid].pop(key, None)
        return
    images.setdefault(gid, {})[key] = _summary(name, record.value)


class ConsumerGroupReplayer:
    """Rebuilds consumer groups from their records (at load)."""

    def __init__(self, groups: dict[str, ConsumerGroup], now_ms: Callable[[], int]) -> None:
        self.groups, self.now_ms = groups, now_ms

    def _group(self, gid: str) -> ConsumerGroup:
        g = self.groups.get(gid)
        if g is None:
            g = self.groups[gid] = ConsumerGroup(gid, self.now_ms())
        return g

    def replay(self, record: CoordinatorRecord) -> None:
        name = record.type.name
        if name in _IGNORED:
            return
        k, v = record.key, record.value
        gid = k.group_id
        if name == META:
            if v is None:
                self.groups.pop(gid, None)
            else:
                meta = self._group(gid)
                meta.group_epoch, meta.metadata_hash = v.epoch, v.metadata_hash
            return
        g = self.groups.get(gid) if v is None else self._group(gid)
        if g is None:
            return
        if name == MEMBER:
            if v is None:
                g.members.pop(k.member_id, None)
                return
            m = g.members.setdefault(k.member_id, ConsumerMember(k.member_id))
            m.instance_id, m.rack_id = v.instance_id, v.rack_id
            m.client_id, m.client_host = v.client_id, v.client_host
            m.subscribed_names = frozenset(v.subscribed_topic_names)
            m.regex, m.rebalance_timeout_ms, m.server_assignor = (
                v.subscribed_topic_regex,
                v.rebalance_timeout_ms,
                v.server_assignor,
            )
            c = v.classic_member_metadata
            m.classic = None
            if c is not None:
                protocols = [(e.name, bytes(e.metadata)) for e in c.supported_protocols]
                m.classic = ClassicMeta(c.session_timeout_ms, protocols)
        elif name == CURRENT:
            if v is None:
                return
            m = g.members.setdefault(k.member_id, ConsumerMember(k.member_id))
            m.member_epoch, m.previous_member_epoch, m.state = v.member_epoch, v.previous_member_epoch, v.state
            m.assigned = {e.topic_id: frozenset(e.partitions) for e in v.assigned_partitions}
            m.revoking = {e.topic_id: frozenset(e.partitions) for e in v.partitions_pending_revocation}
        elif name == TARGET_MEMBER:
            if v is None:
                g.target.pop(k.member_id, None)
            else:
                g.target[k.member_id] = {e.topic_id: frozenset(e.partitions) for e in v.topic_partitions}
        elif name == TARGET_META and v is not None:
            g.assignment_epoch = v.assignment_epoch

    def finish(self, groups: Iterable[ConsumerGroup]) -> None:
        now = self.now_ms()
        for g in groups:
            g.rebuild(now)
            g.dirty = False
