"""Classic group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups,
ListGroups, DeleteGroups.

Thin: decode the request's fields, call the group coordinator, shape the
answer for the request's version. All group logic lives in shoal/broker/groups/.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.groups.classic import GroupState, JoinParams
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import (
    CLUSTER_ACTION,
    DELETE,
    DESCRIBE,
    GROUP,
    READ,
    TRANSACTIONAL_ID,
    TopicChecks,
    allowed,
    allowed_on_cluster,
    authorized_operations,
)
from shoal.broker.handlers.contract import Broker
from shoal.broker.handlers.limits import id_error
from shoal.broker.net.contract import RequestContext
from shoal.protocol import messages
from shoal.protocol.constants import CoordinatorType
from shoal.protocol.error_responses import error_response
from shoal.protocol.errors import ErrorCode

AUTHORIZED_OPERATIONS_OMITTED = -(1 << 31)  # the field's default: "not asked for"


def _refused(ctx: RequestContext, req: Any, code: int = ErrorCode.GROUP_AUTHORIZATION_FAILED) -> Any:
    """The API's error response with ``code`` everywhere (Kafka's getErrorResponse)."""
    return error_response(ctx.api_key, ctx.api_version, req, code, None)


def _may(broker: Broker, ctx: RequestContext, op: Any, group_id: str) -> bool:
    return broker.authorizer is None or allowed(broker, ctx, op, GROUP, group_id)


def handle_find_coordinator(broker: Broker, ctx: RequestContext, req: messages.FindCoordinatorRequest) -> Any:
    cls = messages.FindCoordinatorResponse
    keys = req.coordinator_keys if ctx.api_version >= 4 else [req.key]
    az = broker.authorizer
    if az is not None and req.key_type == CoordinatorType.SHARE and not allowed_on_cluster(broker, ctx, CLUSTER_ACTION):
        return _refused(ctx, req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)  # brokers' own lookups (KIP-932)
    results = []
    for key in keys:
        c = cls.Coordinator(key=key, error_message=None)
        if az is not None and req.key_type == CoordinatorType.GROUP and not allowed(broker, ctx, DESCRIBE, GROUP, key):
            c.error_code, c.node_id, c.port, c.host = ErrorCode.GROUP_AUTHORIZATION_FAILED, -1, -1, ""
        elif (
            az is not None
            and req.key_type == CoordinatorType.TRANSACTION
            and not allowed(broker, ctx, DESCRIBE, TRANSACTIONAL_ID, key)
        ):
            c.error_code, c.node_id, c.port, c.host = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1, ""
        elif req.key_type == CoordinatorType.GROUP and key and _offline(broker.groups.runtime, key):
            c.error_code, c.node_id, c.port, c.host = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1, ""
        elif req.key_type == CoordinatorType.GROUP and key:
            c.node_id, (c.host, c.port) = broker.node_id, broker.endpoint(ctx)
        elif req.key_type == CoordinatorType.GROUP:
            c.error_code, c.node_id, c.port, c.host = ErrorCode.INVALID_REQUEST, -1, -1, ""
            c.error_message = "empty group id"
        elif req.key_type == CoordinatorType.SHARE and broker.share_coordinator is not None:
            if _valid_share_key(key) and _offline(broker.share_coordinator.runtime, key):
                c.error_code, c.node_id, c.port, c.host = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1, ""
            elif _valid_share_key(key):
                c.node_id, (c.host, c.port) = broker.node_id, broker.endpoint(ctx)
            else:
                c.error_code, c.node_id, c.port, c.host = ErrorCode.INVALID_REQUEST, -1, -1, ""
                c.error_message = f"Share coordinator key {key!r} is not groupId:topicId:partition."
        else:
            c.error_code, c.node_id, c.port, c.host = ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1, ""
            c.error_message = "Shoal does not coordinate this key type"
        results.append(c)
    if ctx.api_version >= 4:
        return cls(throttle_time_ms=0, coordinators=results)
    c = results[0]
    return cls(
        throttle_time_ms=0,
        error_code=c.error_code,
        error_message=c.error_message,
        node_id=c.node_id,
        host=c.host,
        port=c.port,
    )


def _offline(runtime: Any, key: str) -> bool:
    """Whether the internal-topic partition coordinating `key` is in an offline log directory:
    Kafka then has no leader for it, and FindCoordinator answers COORDINATOR_NOT_AVAILABLE."""
    return runtime.partition(runtime.partition_of(key)).offline


def _valid_share_key(key: str) -> bool:
    """A share-partition key: "group:topicId:partition", topic id in Kafka's base64 form."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return False
    _, tid, partition = parts
    try:
        raw = base64.urlsafe_b64decode(tid + "==")
    except (ValueError, binascii.Error):
        return False
    return len(tid) == 22 and len(raw) == 16 and partition.isdigit()


async def handle_join_group(broker: Broker, ctx: RequestContext, req: messages.JoinGroupRequest) -> Any:
    cls = messages.JoinGroupResponse
    if not _may(broker, ctx, READ, req.group_id):
        return _refused(ctx, req)
    bad = id_error(req.group_id, req.member_id, req.group_instance_id)
    if bad is not None:
        return cls(
            throttle_time_ms=0,
            error_code=bad[0],
            generation_id=-1,
            protocol_name=None if ctx.api_version >= 7 else "",  # nullable from v7
            leader="",
            member_id="",
        )
    rebalance_timeout = req.rebalance_timeout_ms if ctx.api_version >= 1 else req.session_timeout_ms
    params = JoinParams(
        member_id=req.member_id,
        group_instance_id=req.group_instance_id,
        client_id=ctx.client_id or "",
        client_host="/" + ctx.peer.rsplit(":", 1)[0],
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout,
        protocol_type=req.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        require_known_member_id=ctx.api_version >= 4,
    )
    r = await broker.groups.join(req.group_id, params)
    resp = cls(
        throttle_time_ms=0,
        error_code=r.error,
        generation_id=r.generation_id,
        protocol_type=r.protocol_type if ctx.api_version >= 7 else None,
        protocol_name=r.protocol_name,
        leader=r.leader,
        member_id=r.member_id,
        members=[
            cls.JoinGroupResponseMember(member_id=m, group_instance_id=i if ctx.api_version >= 5 else None, metadata=md)
            for m, i, md in r.members
        ],
    )
    if ctx.api_version < 7:
        resp.protocol_name = resp.protocol_name or ""
    return resp


async def handle_sync_group(broker: Broker, ctx: RequestContext, req: messages.SyncGroupRequest) -> Any:
    cls = messages.SyncGroupResponse
    if not _may(broker, ctx, READ, req.group_id):
        return _refused(ctx, req)
    bad = id_error(req.group_id, req.member_id, req.group_instance_id)
    if bad is not None:
        return cls(throttle_time_ms=0, error_code=bad[0], assignment=b"")
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
    r = await broker.groups.sync(
        req.group_id,
        req.member_id,
        req.group_instance_id,
        req.generation_id,
        req.protocol_type if ctx.api_version >= 5 else None,
        req.protocol_name if ctx.api_version >= 5 else None,
        assignments,
    )
    v5 = ctx.api_version >= 5
    return cls(
        throttle_time_ms=0,
        error_code=r.error,
        protocol_type=r.protocol_type if v5 else None,
        protocol_name=r.protocol_name if v5 else None,
        assignment=r.assignment,
    )


def handle_heartbeat(broker: Broker, ctx: RequestContext, req: messages.HeartbeatRequest) -> Any:
    if not _may(broker, ctx, READ, req.group_id):
        return messages.HeartbeatResponse(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = broker.groups.heartbeat(req.group_id, req.member_id, req.group_instance_id, req.generation_id)
    return messages.HeartbeatResponse(throttle_time_ms=0, error_code=error)


def handle_leave_group(broker: Broker, ctx: RequestContext, req: messages.LeaveGroupRequest) -> Any:
    cls = messages.LeaveGroupResponse
    if not _may(broker, ctx, READ, req.group_id):
        return cls(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if ctx.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        members = [(req.member_id, None)]
    error, errors = broker.groups.leave(req.group_id, members)
    if ctx.api_version < 3:
        return cls(throttle_time_ms=0, error_code=error or (errors[0] if errors else 0))
    return cls(
        throttle_time_ms=0,
        error_code=error,
        members=[
            cls.MemberResponse(member_id=m, group_instance_id=i, error_code=e) for (m, i), e in zip(members, errors)
        ],
    )


async def handle_offset_commit(broker: Broker, ctx: RequestContext, req: messages.OffsetCommitRequest) -> Any:
    cls = messages.OffsetCommitResponse
    if not _may(broker, ctx, READ, req.group_id):
        return _refused(ctx, req)
    by_id = ctx.api_version >= 10
    may_read = TopicChecks(broker, ctx, READ) if broker.authorizer is not None else None
    wanted: list[tuple[str, int, int, int, str | None]] = []
    stamps: list[int] = []  # v1: each partition's commit time (-1: the broker's clock)
    names: list[tuple[Any, Any]] = []  # every partition of the request, in order
    committed: list[tuple[Any, Any]] = []  # those sent to the coordinator
    unknown_ids = set()
    denied: set[int] = set()  # id() of the topics the caller may not READ
    for t in req.topics:
        name = t.name
        if by_id:
            topic = broker.topics.by_id(t.topic_id)
            if topic is None:
                unknown_ids.add(t.topic_id)
            name = topic.name if topic is not None else ""
        if may_read is not None and not (by_id and not name) and not may_read.ok(name):
            denied.add(id(t))
        for p in t.partitions:
            names.append((t, p))
            if id(t) in denied:
                continue
            committed.append((t, p))
            wanted.append((name, p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata))
            stamps.append(p.commit_timestamp)
    bad = id_error(req.group_id, req.member_id, req.group_instance_id)
    if bad is not None:
        errors = [bad[0]] * len(wanted)
    elif not wanted and denied:
        errors = []  # nothing the caller may commit: the coordinator is not asked
    else:
        try:
            _, errors = await broker.groups.commit(
                req.group_id,
                req.generation_id_or_member_epoch,
                req.member_id,
                req.group_instance_id,
                wanted,
                ctx.api_version,
                stamps if ctx.api_version == 1 else None,
            )
        except ErrorAnswer as e:  # not (or not yet) the coordinator, a share group's id, a refused write
            errors = [e.code] * len(wanted)
    code_of = {(id(t), id(p)): code for (t, p), code in zip(committed, errors)}
    topics: dict[int, Any] = {}
    out = []
    for t, p in names:
        code = code_of.get((id(t), id(p)), ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        tr = topics.get(id(t))
        if tr is None:
            tr = cls.OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id)
            topics[id(t)] = tr
            out.append(tr)
        if by_id and t.topic_id in unknown_ids:
            code = ErrorCode.UNKNOWN_TOPIC_ID
        tr.partitions.append(cls.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code))
    return cls(throttle_time_ms=0, topics=out)


def handle_offset_fetch(broker: Broker, ctx: RequestContext, req: messages.OffsetFetchRequest) -> Any:
    cls = messages.OffsetFetchResponse
    v = ctx.api_version
    groups: list[tuple[str, list[tuple[str, list[int]]] | None]]  # (group, [(topic, partitions)] or None: all)
    members: dict[str, tuple[str | None, int]] = {}  # v9+: the member a consumer group checks
    if v >= 8:
        groups = [(g.group_id, _wanted_in_group(broker, g.topics, v)) for g in req.groups]
        if v >= 9:
            members = {g.group_id: (g.member_id, g.member_epoch) for g in req.groups}
    else:
        topics = req.topics
        groups = [(req.group_id, None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics])]
    az = broker.authorizer
    if az is not None and v < 8 and not _may(broker, ctx, DESCRIBE, req.group_id):
        return _refused(ctx, req)
    may_describe = TopicChecks(broker, ctx, DESCRIBE) if az is not None else None
    results: list[tuple[str, int, dict, list[tuple[str, list[int]]]]] = []
    for gid, wanted in groups:
        hidden: list[tuple[str, list[int]]] = []  # asked for, but the caller may not DESCRIBE the topic
        if az is not None and not _may(broker, ctx, DESCRIBE, gid):
            results.append((gid, ErrorCode.GROUP_AUTHORIZATION_FAILED, {}, hidden))
            continue
        if may_describe is not None and wanted is not None:
            hidden = [(n, ps) for n, ps in wanted if n and not may_describe.ok(n)]
            wanted = [(n, ps) for n, ps in wanted if not n or may_describe.ok(n)]
        try:
            error, found = broker.groups.fetch_offsets(gid, wanted, members.get(gid, (None, -1)))
        except ErrorAnswer as e:
            error, found = e.code, {}
        if may_describe is not None:  # every committed topic (a null list): only what may be described
            found = {k: c for k, c in found.items() if may_describe.ok(k[0])}
        results.append((gid, error, found, hidden))
    if v >= 8:
        return cls(
            throttle_time_ms=0,
            groups=[
                cls.OffsetFetchResponseGroup(
                    group_id=gid,
                    error_code=error,
                    topics=_fetched_topics(cls, broker, found, v, True) + _hidden(cls, broker, hidden, v, True),
                )
                for gid, error, found, hidden in results
            ],
        )
    gid, error, found, hidden = results[0]
    if error and v < 2 and groups[0][1] is not None:
        # no top-level error before v2: Kafka puts it on every partition asked for
        found = {(n, i): None for n, parts in groups[0][1] for i in parts}
        answered = _fetched_topics(cls, broker, found, v, False)
        for tr in answered:
            for pr in tr.partitions:
                pr.error_code = error
        return cls(throttle_time_ms=0, error_code=error, topics=answered)
    if v == 0:
        # Kafka 3.x read v0 offsets from ZooKeeper, which kept no metadata: v0 answers an empty one
        found = {k: None if c is None else dataclasses.replace(c, metadata="") for k, c in found.items()}
    answered = _fetched_topics(cls, broker, found, v, False) + _hidden(cls, broker, hidden, v, False)
    return cls(throttle_time_ms=0, error_code=error, topics=answered)


def _hidden(cls: Any, broker: Broker, hidden: list[tuple[str, list[int]]], v: int, grouped: bool) -> list:
    """The topics asked for that the caller may not describe: TOPIC_AUTHORIZATION_FAILED per partition."""
    topic_cls = cls.OffsetFetchResponseTopics if grouped else cls.OffsetFetchResponseTopic
    part_cls = cls.OffsetFetchResponsePartitions if grouped else cls.OffsetFetchResponsePartition
    out = []
    for name, partitions in hidden:
        tr = topic_cls(name=name)
        if v >= 10:
            t = broker.topics.get(name)
            tr.name = ""
            if t is not None:
                tr.topic_id = t.topic_id
        tr.partitions = [
            part_cls(
                partition_index=i, committed_offset=-1, metadata="", error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
            )
            for i in partitions
        ]
        out.append(tr)
    return out


def _wanted_in_group(
    broker: Broker, topics: list[messages.OffsetFetchRequest.OffsetFetchRequestTopics] | None, v: int
) -> list[tuple[str, list[int]]] | None:
    """The partitions one group of an OffsetFetch (v8+) asks for, by topic name; None asks for all."""
    if topics is None:
        return None
    if v < 10:
        return [(t.name, list(t.partition_indexes)) for t in topics]
    wanted = []
    for t in topics:
        topic = broker.topics.by_id(t.topic_id)
        wanted.append((topic.name if topic else "", list(t.partition_indexes)))
    return wanted


def _fetched_topics(cls: Any, broker: Broker, found: dict, v: int, grouped: bool) -> list:
    by_topic: dict[str, Any] = {}
    topic_cls = cls.OffsetFetchResponseTopics if grouped else cls.OffsetFetchResponseTopic
    part_cls = cls.OffsetFetchResponsePartitions if grouped else cls.OffsetFetchResponsePartition
    for (name, index), c in sorted(found.items(), key=lambda kv: kv[0]):
        tr = by_topic.get(name)
        if tr is None:
            tr = topic_cls(name=name)
            if v >= 10:
                t = broker.topics.get(name)
                tr.name = ""
                if t is not None:
                    tr.topic_id = t.topic_id
            by_topic[name] = tr
        if c is None:
            tr.partitions.append(part_cls(partition_index=index, committed_offset=-1, metadata="", error_code=0))
        else:
            tr.partitions.append(
                part_cls(
                    partition_index=index,
                    committed_offset=c.offset,
                    committed_leader_epoch=c.leader_epoch,
                    metadata=c.metadata,
                    error_code=0,
                )
            )
    return list(by_topic.values())


async def handle_offset_delete(broker: Broker, ctx: RequestContext, req: messages.OffsetDeleteRequest) -> Any:
    cls = messages.OffsetDeleteResponse
    if not _may(broker, ctx, DELETE, req.group_id):
        return cls(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0)
    may_read = TopicChecks(broker, ctx, READ) if broker.authorizer is not None else None
    asked = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    partitions = [(n, i) for n, i in asked if may_read is None or may_read.ok(n)]
    try:
        error, errors = await broker.groups.delete_offsets(req.group_id, partitions)
    except ErrorAnswer as e:
        return cls(error_code=e.code, throttle_time_ms=0)
    if error:
        return cls(error_code=error, throttle_time_ms=0)
    code_of = dict(zip(partitions, errors))
    out: dict[str, Any] = {}
    for name, index in asked:
        code = code_of.get((name, index), ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        tr = out.setdefault(name, cls.OffsetDeleteResponseTopic(name=name))
        tr.partitions.append(cls.OffsetDeleteResponsePartition(partition_index=index, error_code=code))
    return cls(error_code=0, throttle_time_ms=0, topics=list(out.values()))


def handle_describe_groups(broker: Broker, ctx: RequestContext, req: messages.DescribeGroupsRequest) -> Any:
    cls = messages.DescribeGroupsResponse
    out = []
    az = broker.authorizer
    for gid in req.groups:
        d = cls.DescribedGroup(group_id=gid)
        out.append(d)
        if az is not None and not _may(broker, ctx, DESCRIBE, gid):
            d.error_code, d.group_state, d.protocol_type, d.protocol_data = (
                ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "",
                "",
                "",
            )
            continue
        if ctx.api_version >= 3 and req.include_authorized_operations:
            d.authorized_operations = authorized_operations(broker, ctx, GROUP, gid)  # reset below on an error
        try:
            _, shard = broker.groups._route(gid)
        except ErrorAnswer as e:
            if e.code == ErrorCode.GROUP_ID_NOT_FOUND:  # another type of group: unknown to this API
                d.group_state = GroupState.DEAD.value
                if ctx.api_version < 6:
                    continue
            d.error_code, d.error_message = e.code, e.message
            continue
        g = shard.group(gid)
        if g is None:
            d.group_state = GroupState.DEAD.value
            if ctx.api_version >= 6:
                d.error_code = ErrorCode.GROUP_ID_NOT_FOUND
                d.error_message = f"Group {gid} not found."
            continue
        d.group_state = g.state.value
        d.protocol_type = g.protocol_type or ""
        d.protocol_data = g.protocol_name or ""
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.PREPARING_REBALANCE):
            stable = g.state == GroupState.STABLE
            d.members = [
                cls.DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata(g.protocol_name) if stable and g.protocol_name else b"",
                    member_assignment=m.assignment if stable else b"",
                )
                for m in g.members.values()
            ]
    for d in out:
        if d.error_code:  # Kafka fills the field only for groups described without error
            d.authorized_operations = AUTHORIZED_OPERATIONS_OMITTED
    return cls(throttle_time_ms=0, groups=out)


def handle_list_groups(broker: Broker, ctx: RequestContext, req: messages.ListGroupsRequest) -> Any:
    cls = messages.ListGroupsResponse
    states = {s.lower() for s in req.states_filter} if ctx.api_version >= 4 else set()
    types = {t.lower() for t in req.types_filter} if ctx.api_version >= 5 else set()
    out: list[Any] = []
    for shard in broker.groups.loaded_shards():
        for gid, g in shard.groups.items():
            if g.state == GroupState.DEAD:
                continue
            if states and g.state.value.lower() not in states:
                continue
            if types and "classic" not in types:
                continue
            out.append(
                cls.ListedGroup(
                    group_id=gid, protocol_type=g.protocol_type or "", group_state=g.state.value, group_type="classic"
                )
            )
    if not types or "consumer" in types:
        for cg in broker.groups.consumer.list_groups():
            if states and cg.state.lower() not in states:
                continue
            out.append(
                cls.ListedGroup(
                    group_id=cg.group_id, protocol_type="consumer", group_state=cg.state, group_type="consumer"
                )
            )
    if not types or "share" in types:
        for sg in broker.groups.share.list_groups():
            if states and sg.state.lower() not in states:
                continue
            out.append(
                cls.ListedGroup(group_id=sg.group_id, protocol_type="share", group_state=sg.state, group_type="share")
            )
    # As Kafka: DESCRIBE on the cluster lists every group; without it, the groups the caller may describe
    if broker.authorizer is not None and not allowed_on_cluster(broker, ctx, DESCRIBE):
        out = [g for g in out if allowed(broker, ctx, DESCRIBE, GROUP, g.group_id)]
    return cls(throttle_time_ms=0, error_code=0, groups=out)


async def handle_delete_groups(broker: Broker, ctx: RequestContext, req: messages.DeleteGroupsRequest) -> Any:
    cls = messages.DeleteGroupsResponse
    names = list(req.groups_names)
    ok = [_may(broker, ctx, DELETE, g) for g in names]
    permitted = [g for g, yes in zip(names, ok) if yes]
    done = iter(await broker.groups.delete_groups(permitted) if permitted else [])
    return cls(
        throttle_time_ms=0,
        results=[
            cls.DeletableGroupResult(group_id=g, error_code=next(done) if yes else ErrorCode.GROUP_AUTHORIZATION_FAILED)
            for g, yes in zip(names, ok)
        ],
    )


def register(table: HandlerTable) -> None:
    table.add("FindCoordinator", handle_find_coordinator)
    table.add("JoinGroup", handle_join_group)
    table.add("SyncGroup", handle_sync_group)
    table.add("Heartbeat", handle_heartbeat)
    table.add("LeaveGroup", handle_leave_group)
    table.add("OffsetCommit", handle_offset_commit)
    table.add("OffsetFetch", handle_offset_fetch)
    table.add("OffsetDelete", handle_offset_delete)
    table.add("DescribeGroups", handle_describe_groups)
    table.add("ListGroups", handle_list_groups)
    table.add("DeleteGroups", handle_delete_groups)
