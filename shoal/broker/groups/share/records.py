"""Share groups as records in __consumer_offsets: write the changes, replay them.

Why a diff: a share group's durable image is spread over six record types
(Kafka's ShareGroup* records), keyed by group or by (group, member). Rather
than have every mutation of :class:`~broker.share.group.ShareGroup` name the
records it touches, the coordinator keeps the image it last wrote -- one
hashable tuple per record key -- and after each operation writes only the keys
whose tuple changed, plus tombstones for keys that disappeared. A steady
heartbeat changes nothing and writes nothing; a join writes the member's
metadata, the new epochs and the target/current assignments that moved.

Records within one batch are ordered as Kafka orders them (member metadata,
group epoch, target assignment, current assignment, state partitions) and a
deleted group's ShareGroupMetadata tombstone comes last, so a replay that
stops between batches sees a consistent group.

The image the diff starts from is itself built by replay: every record
written (live or at load) updates it (:func:`apply_to_images`), so it is what
the log holds, not what the writer believed it wrote. Replay
(:class:`ShareGroupReplayer`) also rebuilds ShareGroup objects at load time;
once loaded, the live objects have made each change before their records are
written, and records written live update only the image (as for classic
groups). A loaded group's image(group) equals the replayed image, and after
every write a live group's does too: that is the replay-equivalence the
coordinator tests check.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from shoal.broker.coordinator.shard import Record
from shoal.broker.groups.share.group import InitState, ShareGroup, ShareMember
from shoal.protocol.coordinator_records import CoordinatorRecord, serde

__all__ = [
    "Image",
    "ShareGroupReplayer",
    "apply_to_images",
    "diff_records",
    "image",
    "is_share_record",
    "tombstones",
]

_SERDE = serde("group")

META = "ShareGroupMetadata"
MEMBER = "ShareGroupMemberMetadata"
TARGET_META = "ShareGroupTargetAssignmentMetadata"
TARGET_MEMBER = "ShareGroupTargetAssignmentMember"
CURRENT = "ShareGroupCurrentMemberAssignment"
STATE_PARTITIONS = "ShareGroupStatePartitionMetadata"

# write order within a batch; tombstones go in reverse (metadata last)
_ORDER = {MEMBER: 0, META: 1, TARGET_MEMBER: 2, TARGET_META: 3, CURRENT: 4, STATE_PARTITIONS: 5}
_NAMES = frozenset(_ORDER)

_K = {n: _SERDE.key_class(n) for n in _NAMES}
_V = {n: _SERDE.value_class(n) for n in _NAMES}

MEMBER_STATE_STABLE = 0

# (record name, group id[, member id]) -> a hashable summary of the record's value
Image = dict[tuple[str, ...], tuple]


def is_share_record(name: str) -> bool:
    return name in _NAMES


def _parts(assignment: dict[uuid.UUID, frozenset[int]]) -> tuple:
    return tuple(sorted((tid, tuple(sorted(ps))) for tid, ps in assignment.items() if ps))


def _init_tuple(states: dict[uuid.UUID, InitState]) -> tuple:
    return tuple(sorted((tid, s.name, tuple(sorted(s.partitions))) for tid, s in states.items()))


def image(group: ShareGroup) -> Image:
    """Every record key of `group` with the summary of its current value."""
    gid = group.group_id
    out: Image = {(META, gid): (group.group_epoch, group.metadata_hash)}
    for mid, m in group.members.items():
        out[(MEMBER, gid, mid)] = (m.rack_id, m.client_id, m.client_host, tuple(sorted(m.subscribed_topic_names)))
        out[(CURRENT, gid, mid)] = (m.member_epoch, m.previous_member_epoch, _parts(m.assigned))
    for mid, target in group.target.items():
        out[(TARGET_MEMBER, gid, mid)] = (_parts(target),)
    out[(TARGET_META, gid)] = (group.assignment_epoch, group.assignment_timestamp_ms)
    if group.initializing or group.initialized or group.deleting:
        out[(STATE_PARTITIONS, gid)] = (
            _init_tuple(group.initializing),
            _init_tuple(group.initialized),
            tuple(sorted(group.deleting.items())),
        )
    return out


def _key(k: tuple[str, ...]) -> Any:
    name = k[0]
    if len(k) == 3:
        return _K[name](group_id=k[1], member_id=k[2])
    return _K[name](group_id=k[1])


def _value(k: tuple[str, ...], v: tuple) -> Any:
    name = k[0]
    cls = _V[name]
    if name == META:
        return cls(epoch=v[0], metadata_hash=v[1])
    if name == MEMBER:
        rack, client_id, host, subs = v
        return cls(rack_id=rack, client_id=client_id, client_host=host, subscribed_topic_names=list(subs))
    if name == TARGET_META:
        return cls(assignment_epoch=v[0], assignment_timestamp=v[1])
    if name == TARGET_MEMBER:
        return cls(topic_partitions=[cls.TopicPartition(topic_id=t, partitions=list(ps)) for t, ps in v[0]])
    if name == CURRENT:
        epoch, previous, parts = v
        return cls(
            member_epoch=epoch,
            previous_member_epoch=previous,
            state=MEMBER_STATE_STABLE,
            assigned_partitions=[cls.TopicPartitions(topic_id=t, partitions=list(ps)) for t, ps in parts],
        )
    initializing, initialized, deleting = v
    info = cls.TopicPartitionsInfo
    return cls(
        initializing_topics=[info(topic_id=t, topic_name=n, partitions=list(ps)) for t, n, ps in initializing],
        initialized_topics=[info(topic_id=t, topic_name=n, partitions=list(ps)) for t, n, ps in initialized],
        deleting_topics=[cls.TopicInfo(topic_id=t, topic_name=n) for t, n in deleting],
    )


def diff_records(group: ShareGroup, previous: Image) -> tuple[list[Record], Image]:
    """Records that turn `previous` into the group's current image, and that image."""
    now = image(group)
    changed = [k for k, v in now.items() if previous.get(k) != v]
    gone = [k for k in previous if k not in now]
    changed.sort(key=lambda k: (_ORDER[k[0]], k))
    gone.sort(key=lambda k: (-_ORDER[k[0]], k))
    records = [Record(k[0], _key(k), None) for k in gone]
    records += [Record(k[0], _key(k), _value(k, now[k])) for k in changed]
    return records, now


def tombstones(previous: Image) -> list[Record]:
    """Delete a group: a tombstone for every key it wrote, ShareGroupMetadata last."""
    keys = sorted(previous, key=lambda k: (-_ORDER[k[0]] if k[0] != META else 1, k))
    return [Record(k[0], _key(k), None) for k in keys]


_MEMBER_KEYED = frozenset({MEMBER, TARGET_MEMBER, CURRENT})


def _record_parts(entries: Iterable[Any]) -> tuple:
    return _parts({e.topic_id: frozenset(e.partitions) for e in entries})


def _record_tuple(name: str, v: Any) -> tuple:
    """The image summary of a record value (the inverse of `_value`)."""
    if name == META:
        return (v.epoch, v.metadata_hash)
    if name == MEMBER:
        return (v.rack_id, v.client_id, v.client_host, tuple(sorted(v.subscribed_topic_names)))
    if name == TARGET_META:
        return (v.assignment_epoch, v.assignment_timestamp)
    if name == TARGET_MEMBER:
        return (_record_parts(v.topic_partitions),)
    if name == CURRENT:
        return (v.member_epoch, v.previous_member_epoch, _record_parts(v.assigned_partitions))

    def infos(entries: Iterable[Any]) -> tuple:
        return tuple(sorted((t.topic_id, t.topic_name, tuple(sorted(t.partitions))) for t in entries))

    return (
        infos(v.initializing_topics),
        infos(v.initialized_topics),
        tuple(sorted((t.topic_id, t.topic_name) for t in v.deleting_topics)),
    )


def apply_to_images(images: dict[str, Image], record: CoordinatorRecord) -> None:
    """Replay one share-group record into the per-group images of what the log holds."""
    name = record.type.name
    k = record.key
    gid = k.group_id
    key = (name, gid, k.member_id) if name in _MEMBER_KEYED else (name, gid)
    if record.value is None:
        if name == META:
            images.pop(gid, None)  # written last when a group is deleted
            return
        img = images.get(gid)
        if img is not None:
            img.pop(key, None)
        return
    images.setdefault(gid, {})[key] = _record_tuple(name, record.value)


class ShareGroupReplayer:
    """Rebuilds share groups from their records (at load)."""

    def __init__(self, groups: dict[str, ShareGroup], now_ms: Callable[[], int]) -> None:
        self.groups = groups
        self.now_ms = now_ms

    def _group(self, gid: str) -> ShareGroup:
        g = self.groups.get(gid)
        if g is None:
            g = self.groups[gid] = ShareGroup(gid, self.now_ms())
        return g

    def replay(self, record: CoordinatorRecord) -> None:
        name = record.type.name
        k, v = record.key, record.value
        gid = k.group_id
        if name == META:
            if v is None:
                self.groups.pop(gid, None)
                return
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
            m = g.members.setdefault(k.member_id, ShareMember(k.member_id))
            m.rack_id, m.client_id, m.client_host = v.rack_id, v.client_id, v.client_host
            m.subscribed_topic_names = frozenset(v.subscribed_topic_names)
        elif name == CURRENT:
            if v is None:
                return
            m = g.members.setdefault(k.member_id, ShareMember(k.member_id))
            m.member_epoch, m.previous_member_epoch = v.member_epoch, v.previous_member_epoch
            m.assigned = {tp.topic_id: frozenset(tp.partitions) for tp in v.assigned_partitions}
        elif name == TARGET_MEMBER:
            if v is None:
                g.target.pop(k.member_id, None)
            else:
                g.target[k.member_id] = {tp.topic_id: frozenset(tp.partitions) for tp in v.topic_partitions}
        elif name == TARGET_META:
            if v is not None:
                g.assignment_epoch, g.assignment_timestamp_ms = v.assignment_epoch, v.assignment_timestamp
        elif name == STATE_PARTITIONS:
            now = self.now_ms()
            if v is None:
                g.initializing, g.initialized, g.deleting = {}, {}, {}
                return
            g.initializing = {
                t.topic_id: InitState(t.topic_name, frozenset(t.partitions), now) for t in v.initializing_topics
            }
            g.initialized = {t.topic_id: InitState(t.topic_name, frozenset(t.partitions)) for t in v.initialized_topics}
            g.deleting = {t.topic_id: t.topic_name for t in v.deleting_topics}

    def finish(self, groups: Iterable[ShareGroup]) -> None:
        """After load: settle each group's state (nothing is left to write)."""
        now = self.now_ms()
        for g in groups:
            g.refresh_state(now)
            g.dirty = g.state_dirty = False
