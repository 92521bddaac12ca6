"""Sans-IO admin messages for groups: classic consumer groups and share groups.

The group half of ``client.admin.protocol`` (same conventions: ``build_*``
return ``callable(version) -> body``, ``parse_*`` return typed results with
per-entity ``BrokerResponseError``s). Kept apart because group calls differ in
one way that matters: they all go to one group's coordinator, and an error
about that group (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, UNKNOWN_MEMBER_ID on an
admin commit to a group with members) is raised for the whole call rather
than reported per partition, as Kafka's Admin fails the group's future.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from shoal.client.admin.protocol import Builder, _req, entity_error
from shoal.client.admin.types import (
    ConsumerGroupDescription,
    GroupListing,
    MemberDescription,
    OffsetAndMetadata,
    ShareGroupDescription,
    ShareMemberDescription,
    SharePartitionOffsetInfo,
)
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import BrokerResponseError, UnsupportedVersionError
from shoal.protocol.coordinator_records import decode_versioned
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError

AUTHORIZED_OPERATIONS_OMITTED = -(1 << 31)

GROUP_RETRY = frozenset(
    {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
)
# OffsetCommit codes that concern the whole group, not a partition (Kafka's
# AlterConsumerGroupOffsetsHandler fails the group's future on these).
COMMIT_GROUP_ERRORS = frozenset(
    {
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.GROUP_ID_NOT_FOUND,
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.STALE_MEMBER_EPOCH,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)


# -- groups ---------------------------------------------------------------------------------


def build_list_groups(types: Collection[str] | None, states: Collection[str] | None) -> Builder:
    cls = _req("ListGroups")

    def build(version: int) -> Any:
        body = cls()
        if states:
            if version < 4:
                raise UnsupportedVersionError("filtering groups by state needs ListGroups v4")
            body.states_filter = list(states)
        if types:
            if version < 5:
                raise UnsupportedVersionError("filtering groups by type needs ListGroups v5")
            body.types_filter = list(types)
        return body

    return build


def parse_list_groups(resp: Any) -> list[GroupListing]:
    if resp.error_code:
        raise BrokerResponseError(resp.error_code, "ListGroups")
    return [
        GroupListing(
            g.group_id,
            g.protocol_type or "",
            g.group_state or "",
            (g.group_type or "").lower(),
        )
        for g in resp.groups
    ]


def build_describe_groups(groups: Iterable[str]) -> Builder:
    cls = _req("DescribeGroups")
    names = list(groups)

    def build(version: int) -> Any:
        body = cls(groups=names)
        if version >= 3:
            body.include_authorized_operations = False
        return body

    return build


def _decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    if not data:
        return ()
    try:
        _, a = decode_versioned("ConsumerProtocolAssignment", data)
    except ProtocolError:
        return ()
    return tuple(TopicPartition(t.topic, p) for t in a.assigned_partitions for p in sorted(t.partitions))


def _decode_subscription(data: bytes) -> tuple[str, ...]:
    if not data:
        return ()
    try:
        _, s = decode_versioned("ConsumerProtocolSubscription", data)
    except ProtocolError:
        return ()
    return tuple(s.topics)


def parse_describe_group(g: Any, coordinator: int) -> ConsumerGroupDescription | BrokerResponseError:
    """One DescribedGroup. GROUP_ID_NOT_FOUND (v6+) and a Dead group with no protocol (older
    versions' way of saying "no such group") both become GROUP_ID_NOT_FOUND."""
    what = f"group {g.group_id!r}"
    if g.error_code:
        return entity_error(g.error_code, getattr(g, "error_message", None), what)
    if g.group_state == "Dead" and not g.protocol_type and not g.members:
        return entity_error(ErrorCode.GROUP_ID_NOT_FOUND, None, what)
    consumer = g.protocol_type == "consumer"
    members = tuple(
        MemberDescription(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            host=m.client_host,
            assignment=_decode_assignment(bytes(m.member_assignment)) if consumer else (),
            subscription=_decode_subscription(bytes(m.member_metadata)) if consumer else (),
            raw_assignment=bytes(m.member_assignment or b""),
            raw_metadata=bytes(m.member_metadata or b""),
        )
        for m in g.members
    )
    ops = g.authorized_operations
    return ConsumerGroupDescription(
        group_id=g.group_id,
        state=g.group_state,
        protocol_type=g.protocol_type,
        partition_assignor=g.protocol_data,
        members=members,
        coordinator=coordinator,
        authorized_operations=None if ops == AUTHORIZED_OPERATIONS_OMITTED else ops,
    )


def build_offset_fetch(group: str, partitions: Iterable[TopicPartition] | None, require_stable: bool) -> Builder:
    cls = _req("OffsetFetch")
    by_topic: dict[str, list[int]] | None = None
    if partitions is not None:
        by_topic = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)

    def build(version: int) -> Any:
        if version >= 8:
            topics = None
            if by_topic is not None:
                topics = [
                    cls.OffsetFetchRequestTopics(name=t, partition_indexes=sorted(ps)) for t, ps in by_topic.items()
                ]
            body = cls(groups=[cls.OffsetFetchRequestGroup(group_id=group, topics=topics)])
        else:
            topics = None
            if by_topic is not None:
                topics = [
                    cls.OffsetFetchRequestTopic(name=t, partition_indexes=sorted(ps)) for t, ps in by_topic.items()
                ]
            body = cls(group_id=group, topics=topics)
        if version >= 7:
            body.require_stable = require_stable
        return body

    return build


def offset_fetch_error(resp: Any) -> int:
    if resp.groups:
        return resp.groups[0].error_code
    return resp.error_code


def parse_offset_fetch(resp: Any, group: str) -> dict[TopicPartition, OffsetAndMetadata | BrokerResponseError]:
    """Committed offsets; partitions with no commit are left out (Kafka's Admin maps them to null)."""
    code = offset_fetch_error(resp)
    if code:
        raise entity_error(code, None, f"group {group!r}")
    topics = resp.groups[0].topics if resp.groups else resp.topics
    out: dict[TopicPartition, OffsetAndMetadata | BrokerResponseError] = {}
    for t in topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if p.error_code:
                out[tp] = entity_error(p.error_code, None, f"group {group!r} {tp}")
            elif p.committed_offset >= 0:
                epoch = p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None
                out[tp] = OffsetAndMetadata(p.committed_offset, p.metadata or "", epoch)
    return dict(sorted(out.items()))


def build_offset_commit(group: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> Builder:
    """An admin commit: generation -1, no member id (allowed only while the group is empty)."""
    cls = _req("OffsetCommit")
    by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
    for tp, om in offsets.items():
        by_topic.setdefault(tp.topic, []).append((tp.partition, om))

    def build(version: int) -> Any:
        topics = []
        for t, ps in by_topic.items():
            parts = []
            for p, om in sorted(ps, key=lambda x: x[0]):
                part = cls.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=om.offset, committed_metadata=om.metadata
                )
                if version >= 6 and om.leader_epoch is not None:
                    part.committed_leader_epoch = om.leader_epoch
                parts.append(part)
            topics.append(cls.OffsetCommitRequestTopic(name=t, partitions=parts))
        return cls(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=topics)

    return build


def offset_commit_error(resp: Any) -> int:
    """The first coordinator-level code in a commit response (coordinator errors come per partition)."""
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code in GROUP_RETRY:
                return p.error_code
    return 0


def parse_offset_commit(resp: Any, group: str) -> dict[TopicPartition, BrokerResponseError | None]:
    out: dict[TopicPartition, BrokerResponseError | None] = {}
    for t in resp.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if p.error_code in COMMIT_GROUP_ERRORS:
                raise entity_error(p.error_code, None, f"group {group!r}")
            out[tp] = entity_error(p.error_code, None, f"group {group!r} {tp}") if p.error_code else None
    return out


def build_offset_delete(group: str, partitions: Iterable[TopicPartition]) -> Builder:
    cls = _req("OffsetDelete")
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)

    def build(version: int) -> Any:
        return cls(
            group_id=group,
            topics=[
                cls.OffsetDeleteRequestTopic(
                    name=t, partitions=[cls.OffsetDeleteRequestPartition(partition_index=p) for p in sorted(ps)]
                )
                for t, ps in by_topic.items()
            ],
        )

    return build


def parse_offset_delete(resp: Any, group: str) -> dict[TopicPartition, BrokerResponseError | None]:
    if resp.error_code:
        raise entity_error(resp.error_code, None, f"group {group!r}")
    out: dict[TopicPartition, BrokerResponseError | None] = {}
    for t in resp.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            out[tp] = entity_error(p.error_code, None, f"group {group!r} {tp}") if p.error_code else None
    return out


def build_delete_groups(groups: Iterable[str]) -> Builder:
    cls = _req("DeleteGroups")
    names = list(groups)

    def build(version: int) -> Any:
        return cls(groups_names=names)

    return build


def parse_delete_groups(resp: Any) -> dict[str, BrokerResponseError | None]:
    return {
        r.group_id: entity_error(r.error_code, None, f"group {r.group_id!r}") if r.error_code else None
        for r in resp.results
    }


# -- share groups ---------------------------------------------------------------------------


def build_heartbeat_group_describe(api: str, groups: Iterable[str]) -> Builder:
    """ConsumerGroupDescribe or ShareGroupDescribe (``api``): both ask the same way."""
    cls = _req(api)
    names = list(groups)

    def build(version: int) -> Any:
        return cls(group_ids=names, include_authorized_operations=False)

    return build


def heartbeat_group_fields(g: Any, coordinator: int) -> dict[str, Any]:
    """What a described consumer-protocol or share group says about itself, beside its members."""
    ops = g.authorized_operations
    return {
        "group_id": g.group_id,
        "state": g.group_state,
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "assignor": g.assignor_name,
        "coordinator": coordinator,
        "authorized_operations": None if ops is None or ops == AUTHORIZED_OPERATIONS_OMITTED else ops,
    }


def heartbeat_member_fields(m: Any) -> dict[str, Any]:
    """What a described consumer-protocol or share group member says, beside its assignment."""
    return {
        "member_id": m.member_id,
        "member_epoch": m.member_epoch,
        "client_id": m.client_id,
        "host": m.client_host,
        "rack_id": m.rack_id,
        "subscribed_topics": tuple(m.subscribed_topic_names or ()),
    }


def described_partitions(
    assignment: Any, topic_names: Mapping[uuid.UUID, str] | None = None
) -> tuple[TopicPartition, ...]:
    """A described member's assignment, sorted; a topic the answer does not name is named from
    ``topic_names`` by id (or shown as its id)."""
    if assignment is None:
        return ()
    names = topic_names or {}
    return tuple(
        sorted(
            TopicPartition(t.topic_name or names.get(t.topic_id) or str(t.topic_id), p)
            for t in assignment.topic_partitions
            for p in t.partitions
        )
    )


def build_share_group_describe(groups: Iterable[str]) -> Builder:
    return build_heartbeat_group_describe("ShareGroupDescribe", groups)


def parse_share_group(
    g: Any, coordinator: int, topic_names: Mapping[uuid.UUID, str]
) -> ShareGroupDescription | BrokerResponseError:
    if g.error_code:
        return entity_error(g.error_code, g.error_message, f"share group {g.group_id!r}")
    members = tuple(
        ShareMemberDescription(assignment=described_partitions(m.assignment, topic_names), **heartbeat_member_fields(m))
        for m in g.members
    )
    return ShareGroupDescription(members=members, **heartbeat_group_fields(g, coordinator))


def build_describe_share_group_offsets(group: str, topics: Mapping[str, Iterable[int]] | None) -> Builder:
    cls = _req("DescribeShareGroupOffsets")
    wanted = None if topics is None else {t: sorted(ps) for t, ps in topics.items()}

    def build(version: int) -> Any:
        if wanted is None and version < 1:
            raise UnsupportedVersionError("describing every topic of a share group needs DescribeShareGroupOffsets v1")
        req_topics = (
            None
            if wanted is None
            else [cls.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps) for t, ps in wanted.items()]
        )
        return cls(groups=[cls.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=req_topics)])

    return build


def describe_share_offsets_error(resp: Any) -> int:
    return resp.groups[0].error_code if resp.groups else 0


def parse_describe_share_group_offsets(
    resp: Any, group: str
) -> dict[TopicPartition, SharePartitionOffsetInfo | BrokerResponseError]:
    """Start offset, leader epoch and lag per share-partition; -1 on the wire becomes None."""
    if not resp.groups:
        raise entity_error(ErrorCode.UNKNOWN_SERVER_ERROR, "empty response", f"share group {group!r}")
    g = resp.groups[0]
    if g.error_code:
        raise entity_error(g.error_code, g.error_message, f"share group {group!r}")
    out: dict[TopicPartition, SharePartitionOffsetInfo | BrokerResponseError] = {}
    for t in g.topics:
        for p in t.partitions:
            tp = TopicPartition(t.topic_name, p.partition_index)
            if p.error_code:
                out[tp] = entity_error(p.error_code, p.error_message, f"share group {group!r} {tp}")
                continue
            out[tp] = SharePartitionOffsetInfo(
                start_offset=p.start_offset if p.start_offset >= 0 else None,
                leader_epoch=p.leader_epoch if p.leader_epoch >= 0 else None,
                lag=p.lag if p.lag >= 0 else None,
            )
    return dict(sorted(out.items()))


def build_alter_share_group_offsets(group: str, offsets: Mapping[TopicPartition, int]) -> Builder:
    cls = _req("AlterShareGroupOffsets")
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for tp, off in offsets.items():
        by_topic.setdefault(tp.topic, []).append((tp.partition, off))

    def build(version: int) -> Any:
        return cls(
            group_id=group,
            topics=[
                cls.AlterShareGroupOffsetsRequestTopic(
                    topic_name=t,
                    partitions=[
                        cls.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
                        for p, o in sorted(ps)
                    ],
                )
                for t, ps in by_topic.items()
            ],
        )

    return build


def parse_alter_share_group_offsets(resp: Any, group: str) -> dict[TopicPartition, BrokerResponseError | None]:
    if resp.error_code:
        raise entity_error(resp.error_code, resp.error_message, f"share group {group!r}")
    out: dict[TopicPartition, BrokerResponseError | None] = {}
    for t in resp.responses:
        for p in t.partitions:
            tp = TopicPartition(t.topic_name, p.partition_index)
            out[tp] = (
                entity_error(p.error_code, p.error_message, f"share group {group!r} {tp}") if p.error_code else None
            )
    return out


def build_delete_share_group_offsets(group: str, topics: Iterable[str]) -> Builder:
    cls = _req("DeleteShareGroupOffsets")
    names = list(dict.fromkeys(topics))

    def build(version: int) -> Any:
        return cls(group_id=group, topics=[cls.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in names])

    return build


def parse_delete_share_group_offsets(resp: Any, group: str) -> dict[str, BrokerResponseError | None]:
    if resp.error_code:
        raise entity_error(resp.error_code, resp.error_message, f"share group {group!r}")
    return {
        t.topic_name: entity_error(t.error_code, t.error_message, f"share group {group!r} topic {t.topic_name!r}")
        if t.error_code
        else None
        for t in resp.responses
    }
