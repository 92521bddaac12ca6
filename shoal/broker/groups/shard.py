"""One partition of __consumer_offsets: its groups and their committed offsets.

Sans-IO. Every write is an operation of this shard (``commit_offsets``,
``store_group``, ``store_share_group``, ...) returning (records, result) for
the coordinator runtime, which appends the records and replays them here.

Offsets are pure event sourcing: the operation only builds records, and
`replay` applies them (live and at load). Group membership also lives in
objects (``ClassicGroup``, ``ShareGroup``) that hold what is never written:
pending joins, waiting requests, session deadlines. Their durable part is
what their records say, and replay keeps it per group as the image of what
the log holds (``group_images``: the last GroupMetadata value of each classic
group; ``share_images``: one summary per share-group record key). Replaying
live changes the images only (the objects already moved); at load the
records also rebuild the objects. A classic group at rest (Stable or Empty)
and every share group equal their image: the operations below write every
durable change, so a restart rebuilds what memory holds.

Offsets expire (offsets.retention.minutes after the group became Empty, or
after the commit for a group that never had members) through tombstones;
an Empty group with no offsets left is deleted with a GroupMetadata
tombstone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shoal.broker.coordinator.shard import Record
from shoal.broker.groups.classic import AssignmentWrite, ClassicGroup, GroupState, Member
from shoal.broker.groups.consumer import records as consumer_records
from shoal.broker.groups.consumer.group import ConsumerGroup
from shoal.broker.groups.share.group import ShareGroup
from shoal.broker.groups.share.records import (
    Image,
    ShareGroupReplayer,
    apply_to_images,
    diff_records,
    is_share_record,
    tombstones,
)
from shoal.protocol.coordinator_records import CoordinatorRecord, serde
from shoal.protocol.errors import ErrorCode

_SERDE = serde("group")
OffsetCommitKey = _SERDE.key_class("OffsetCommit")
OffsetCommitValue = _SERDE.value_class("OffsetCommit")
GroupMetadataKey = _SERDE.key_class("GroupMetadata")
GroupMetadataValue = _SERDE.value_class("GroupMetadata")


@dataclass(slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(slots=True)
class GroupSettings:
    min_session_timeout_ms: int
    max_session_timeout_ms: int
    max_size: int
    initial_rebalance_delay_ms: int
    offset_metadata_max_bytes: int
    offsets_retention_ms: int


class GroupShard:
    def __init__(self, partition: int, settings: GroupSettings, now_ms: Any) -> None:
        self.partition = partition
        self.settings = settings
        self.now_ms = now_ms  # callable: wall-clock ms (records carry timestamps)
        self.groups: dict[str, ClassicGroup] = {}
        self.group_images: dict[str, Any] = {}  # the last GroupMetadata value the log holds per group
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.share_groups: dict[str, ShareGroup] = {}
        self.share_images: dict[str, Image] = {}  # what the log holds for each share group
        self._share_replayer = ShareGroupReplayer(self.share_groups, now_ms)
        self.consumer_groups: dict[str, ConsumerGroup] = {}  # KIP-848 groups
        self.consumer_images: dict[str, Image] = {}  # what the log holds for each consumer group
        self._consumer_replayer = consumer_records.ConsumerGroupReplayer(self.consumer_groups, now_ms)
        self.loading = True

    # -- replay ----------------------------------------------------------------
    def replay(self, record: CoordinatorRecord, offset: int) -> None:
        name = record.type.name
        if name == "OffsetCommit":
            k = record.key
            offsets = self.offsets.setdefault(k.group, {})
            if record.value is None:
                offsets.pop((k.topic, k.partition), None)
                if not offsets:
                    del self.offsets[k.group]
            else:
                v = record.value
                offsets[(k.topic, k.partition)] = CommittedOffset(
                    v.offset, v.leader_epoch, v.metadata, v.commit_timestamp
                )
                if k.group not in self.groups and k.group not in self.consumer_groups:
                    self.groups[k.group] = self._new_group(k.group)
        elif consumer_records.is_consumer_record(name):
            consumer_records.apply_to_images(self.consumer_images, record)
            if self.loading:  # live, the ConsumerGroup objects already made the change
                self._consumer_replayer.replay(record)
        elif is_share_record(name):
            apply_to_images(self.share_images, record)
            if self.loading:  # live, the ShareGroup objects already made the change
                self._share_replayer.replay(record)
        elif name == "GroupMetadata":
            gid = record.key.group
            if record.value is None:
                self.group_images.pop(gid, None)
                group = self.groups.pop(gid, None)
                if group is not None and group.state != GroupState.DEAD:
                    group.to_dead(self.now_ms())
                return
            self.group_images[gid] = record.value
            if self.loading or gid not in self.groups:  # live, the ClassicGroup already made the change
                self._restore(gid, record.value)

    def _restore(self, gid: str, v: Any) -> None:
        group = self._new_group(gid)
        now = self.now_ms()
        members = [
            Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout,
                m.session_timeout,
                v.protocol_type,
                [(v.protocol, bytes(m.subscription))] if v.protocol else [],
                bytes(m.assignment),
            )
            for m in v.members
        ]
        group.restore(
            v.protocol_type or None, v.generation, v.protocol, v.leader, members, now, v.current_state_timestamp
        )
        self.groups[gid] = group

    def _new_group(self, gid: str) -> ClassicGroup:
        return ClassicGroup(
            gid, self.now_ms(), self.settings.initial_rebalance_delay_ms, self.settings.max_size, wall_ms=self.now_ms
        )

    def finish_loading(self) -> None:
        self.loading = False
        self._share_replayer.finish(self.share_groups.values())
        self._consumer_replayer.finish(self.consumer_groups.values())
        for gid in self.consumer_groups:  # offsets replayed before the group's records made a placeholder
            g = self.groups.get(gid)
            if g is not None and not g.members and gid not in self.group_images:
                del self.groups[gid]

    # -- groups ------------------------------------------------------------------
    def group(self, gid: str, create: bool = False) -> ClassicGroup | None:
        g = self.groups.get(gid)
        if g is None and create:
            g = self.groups[gid] = self._new_group(gid)
        return g

    def group_record(self, group: ClassicGroup, assignments: dict[str, bytes] | None = None) -> Record:
        """The GroupMetadata image of a group (tombstone when Dead).

        `assignments` (member id -> bytes) replaces the members' current ones:
        a leader's assignment is written before the group installs it.
        """
        key = GroupMetadataKey(group=group.group_id)
        if group.state == GroupState.DEAD:
            return Record("GroupMetadata", key, None)
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp,
            members=[
                GroupMetadataValue.MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(group.protocol_name) if group.protocol_name else b"",
                    assignment=m.assignment if assignments is None else assignments.get(m.member_id, b""),
                )
                for m in group.members.values()
            ],
        )
        return Record("GroupMetadata", key, value)

    # -- membership operations (records for the runtime) ------------------------------
    def store_group(self, group: ClassicGroup) -> tuple[list[Record], None]:
        """Write the group's GroupMetadata image if the group marked a durable change (`dirty`)."""
        if not group.dirty or self.groups.get(group.group_id) is not group:
            return [], None  # nothing changed, or a group object of a shard since reloaded
        group.dirty = False
        return [self.group_record(group)], None

    def store_assignment(self, group: ClassicGroup, write: AssignmentWrite) -> tuple[list[Record], AssignmentWrite]:
        """Write a leader's assignment (the group installs it once the write is durable)."""
        if self.groups.get(group.group_id) is not group:
            return [], write
        return [self.group_record(group, write.assignments)], write

    def delete_group(self, gid: str, now_ms: int) -> tuple[list[Record], ClassicGroup | None]:
        """DeleteGroups of a classic group (checked by the caller): tombstones for its offsets and
        metadata; the group object, now Dead, is the result (its waiting requests are in its outbox)."""
        records = self.delete_offsets_records(gid, list(self.committed(gid)))
        records.append(Record("GroupMetadata", GroupMetadataKey(group=gid), None))
        group = self.groups.get(gid)
        if group is not None:
            group.to_dead(now_ms)
        return records, group

    def store_share_group(self, group: ShareGroup) -> tuple[list[Record], None]:
        """Write what changed in a share group: the records that turn its image into the group."""
        gid = group.group_id
        if self.share_groups.get(gid) is not group:
            return [], None
        records, _ = diff_records(group, self.share_images.get(gid, {}))
        group.dirty = group.state_dirty = False
        return records, None

    def delete_share_group(self, group: ShareGroup, now_ms: int) -> tuple[list[Record], None]:
        """Forget a share group (checked by the caller): a tombstone for every record it has."""
        gid = group.group_id
        if self.share_groups.get(gid) is not group:
            return [], None
        del self.share_groups[gid]
        group.mark_dead(now_ms)
        return tombstones(self.share_images.get(gid, {})), None

    def store_consumer_group(self, group: ConsumerGroup) -> tuple[list[Record], None]:
        """Write what changed in a consumer group (the diff between the log's image and the group)."""
        gid = group.group_id
        if self.consumer_groups.get(gid) is not group:
            return [], None
        records = consumer_records.diff_records(group, self.consumer_images.get(gid, {}))
        group.dirty = False
        return records, None

    def delete_consumer_group(self, group: ConsumerGroup, now_ms: int) -> tuple[list[Record], None]:
        """Forget a consumer group (checked by the caller): its offsets and every record it has."""
        gid = group.group_id
        if self.consumer_groups.get(gid) is not group:
            return [], None
        del self.consumer_groups[gid]
        group.mark_dead(now_ms)
        records = self.delete_offsets_records(gid, list(self.committed(gid)))
        return records + consumer_records.tombstones(self.consumer_images.get(gid, {})), None

    def convert_empty_classic(self, gid: str) -> list[Record]:
        """An empty classic group gives way to a consumer group (offsets stay): its GroupMetadata goes."""
        self.groups.pop(gid, None)
        if gid in self.group_images:
            return [Record("GroupMetadata", GroupMetadataKey(group=gid), None)]
        return []

    # -- offsets -----------------------------------------------------------------
    def commit_offsets(
        self,
        gid: str,
        offsets: Iterable[tuple[str, int, int, int, str | None]],
        now_ms: int,
        stamps: list[int] | None = None,
    ) -> tuple[list[Record], None]:
        """OffsetCommit (validated by the caller): (topic, partition, offset, leader epoch, metadata);
        `stamps` the commit time of each (OffsetCommit v1 lets the client give it), else now."""
        offsets = list(offsets)
        times = stamps if stamps is not None else [now_ms] * len(offsets)
        return [self.commit_record(gid, t, p, o, e, m, at) for (t, p, o, e, m), at in zip(offsets, times)], None

    def delete_offsets(self, gid: str, partitions: Iterable[tuple[str, int]]) -> tuple[list[Record], None]:
        """OffsetDelete (checked by the caller): tombstones for the committed ones."""
        return self.delete_offsets_records(gid, partitions), None

    def delete_topic_offsets(self, topic: str) -> tuple[list[Record], None]:
        """Every group's committed offsets of a deleted topic go."""
        records: list[Record] = []
        for gid, offsets in self.offsets.items():
            records += self.delete_offsets_records(gid, [tp for tp in offsets if tp[0] == topic])
        return records, None

    def expire(self, now_ms: int) -> tuple[list[Record], int]:
        """Offsets past retention and groups left empty: (tombstones, how many)."""
        records = self.expired_records(now_ms)
        return records, len(records)

    def validate_commit(
        self, gid: str, generation: int, member_id: str, instance_id: str | None, now_ms: int
    ) -> tuple[int, bool]:
        """(error, is_simple) for an OffsetCommit of a classic group."""
        group = self.groups.get(gid)
        simple = generation < 0 and member_id == ""
        if group is None or (group.state == GroupState.EMPTY and not group.members):
            if simple:
                return ErrorCode.NONE, True
            if group is None:
                return ErrorCode.ILLEGAL_GENERATION if generation >= 0 else ErrorCode.UNKNOWN_MEMBER_ID, False
            return ErrorCode.UNKNOWN_MEMBER_ID, False
        if group.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, False
        if simple:
            # A standalone commit for a group with live members is not allowed.
            return ErrorCode.UNKNOWN_MEMBER_ID, False
        if instance_id is not None:
            holder = group.static_members.get(instance_id)
            if holder is None:
                return ErrorCode.UNKNOWN_MEMBER_ID, False
            if holder != member_id:
                return ErrorCode.FENCED_INSTANCE_ID, False  # replaced by a newer instance, as in Kafka
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, False
        if member.group_instance_id != instance_id:
            return ErrorCode.FENCED_INSTANCE_ID, False
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION, False
        if group.state == GroupState.COMPLETING_REBALANCE:
            # As Kafka: a member of the current generation may still commit while the group
            # prepares a rebalance (what consumers do in onPartitionsRevoked); only between
            # JoinGroup and SyncGroup is the commit refused.
            return ErrorCode.REBALANCE_IN_PROGRESS, False
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms  # a commit counts as a heartbeat
        return ErrorCode.NONE, False

    def commit_record(
        self, gid: str, topic: str, partition: int, offset: int, leader_epoch: int, metadata: str | None, now: int
    ) -> Record:
        return Record(
            "OffsetCommit",
            OffsetCommitKey(group=gid, topic=topic, partition=partition),
            OffsetCommitValue(offset=offset, leader_epoch=leader_epoch, metadata=metadata or "", commit_timestamp=now),
            3,
        )

    def committed(self, gid: str) -> dict[tuple[str, int], CommittedOffset]:
        return self.offsets.get(gid, {})

    def delete_offsets_records(self, gid: str, partitions: Iterable[tuple[str, int]]) -> list[Record]:
        have = self.offsets.get(gid, {})
        return [
            Record("OffsetCommit", OffsetCommitKey(group=gid, topic=t, partition=p), None)
            for t, p in partitions
            if (t, p) in have
        ]

    def expired_records(self, now_ms: int) -> list[Record]:
        """Tombstones for offsets past retention, and for groups left empty and offset-less."""
        out: list[Record] = []
        retention = self.settings.offsets_retention_ms
        for gid, offsets in list(self.offsets.items()):
            group = self.groups.get(gid)
            if group is not None and group.state != GroupState.EMPTY:
                continue  # offsets of live groups never expire
            cg = self.consumer_groups.get(gid)
            if cg is not None and cg.members:
                continue
            base = group.state_timestamp if group is not None and group.protocol_type else None
            gone = [
                (t, p)
                for (t, p), c in offsets.items()
                if now_ms - (base if base is not None else c.commit_timestamp) >= retention
            ]
            out += self.delete_offsets_records(gid, gone)
        for gid, group in list(self.groups.items()):
            if group.state == GroupState.EMPTY and not group.members:
                remaining = set(self.offsets.get(gid, {})) - {
                    (r.key.topic, r.key.partition) for r in out if r.key.group == gid
                }
                if not remaining:
                    out.append(Record("GroupMetadata", GroupMetadataKey(group=gid), None))
        return out
