"""One partition of __consumer_offsets: its groups and their committed offsets.

Sans-IO. Offsets are pure event sourcing: an OffsetCommit operation only
validates and returns records; `replay` applies them (live and at load). A
classic group's membership lives in memory (it is rebuilt by the members'
own rejoins); only its GroupMetadata image is persisted, and it is applied on
replay only while loading or for a group memory does not know.

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
from shoal.broker.groups.classic import ClassicGroup, GroupState, Member
from shoal.broker.groups.share.group import ShareGroup
from shoal.broker.groups.share.records import Image, ShareGroupReplayer, is_share_record
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
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.share_groups: dict[str, ShareGroup] = {}
        self.share_images: dict[str, Image] = {}  # what the log holds for each share group
        self._share_replayer = ShareGroupReplayer(self.share_groups, now_ms)
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
                if k.group not in self.groups:
                    self.groups[k.group] = self._new_group(k.group)
        elif is_share_record(name):
            if self.loading:  # live, the ShareGroup objects are already the truth
                self._share_replayer.replay(record)
        elif name == "GroupMetadata":
            gid = record.key.group
            if record.value is None:
                group = self.groups.pop(gid, None)
                if group is not None and group.state != GroupState.DEAD:
                    group.to_dead(self.now_ms())
                return
            if self.loading or gid not in self.groups:
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
        group.restore(v.protocol_type or None, v.generation, v.protocol, v.leader, members, now)
        self.groups[gid] = group

    def _new_group(self, gid: str) -> ClassicGroup:
        return ClassicGroup(gid, self.now_ms(), self.settings.initial_rebalance_delay_ms, self.settings.max_size)

    def finish_loading(self) -> None:
        self.loading = False
        self.share_images = self._share_replayer.finish(self.share_groups.values())

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

    # -- offsets -----------------------------------------------------------------
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
