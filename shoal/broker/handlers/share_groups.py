"""Share-group APIs: ShareGroupHeartbeat, ShareGroupDescribe, and the share-offset
admin APIs DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets.

Thin on membership (the logic is in shoal/broker/groups/share/group.py behind
ShareGroupService); the offset APIs combine the group's record of which
partitions it initialized with the share coordinator's state of each:

* Describe reads each initialized partition's start offset through
  ReadShareGroupStateSummary and, from v1, the lag: records between the start
  offset and the high watermark not yet in a final state (-1 when unknown).
* Alter (group must be empty) re-initializes each partition's state at the
  requested start offset with a newer state epoch, so a partition leader
  still holding the old state is fenced and reloads it. As in Kafka 4.2
  (KAFKA-19662) a group id nobody uses becomes an empty share group whose
  offsets are seeded before its first member arrives (the group's records are
  written as a heartbeat would write them); an id held by a classic group is
  GROUP_ID_NOT_FOUND, an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION
  per partition (and a group that got nothing is not created).
* Delete (group must be empty) deletes the state of whole topics and forgets
  them, so the next member to subscribe starts from share.auto.offset.reset.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import DELETE, DESCRIBE, GROUP, READ, TopicChecks, allowed, authorized_operations
from shoal.broker.handlers.contract import Broker
from shoal.broker.handlers.limits import id_error
from shoal.broker.net.contract import RequestContext
from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from shoal.broker.share_coordinator.service import ShareCoordinator

log = logging.getLogger("shoal.share.groups")


NO_TOPIC_ID = uuid.UUID(int=0)


def _may(broker: Broker, ctx: RequestContext, op: Any, gid: str) -> bool:
    return broker.authorizer is None or allowed(broker, ctx, op, GROUP, gid)


AUTHORIZED_OPERATIONS_OMITTED = -(1 << 31)
ASSIGNOR_NAME = "simple"


async def handle_share_group_heartbeat(
    broker: Broker, ctx: RequestContext, req: messages.ShareGroupHeartbeatRequest
) -> Any:
    cls = messages.ShareGroupHeartbeatResponse
    if broker.authorizer is not None:
        if not _may(broker, ctx, READ, req.group_id):
            return cls(
                throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id=None, member_epoch=0
            )
        # KIP-932: DESCRIBE on every subscribed topic
        may_describe = TopicChecks(broker, ctx, DESCRIBE)
        hidden = sorted({n for n in req.subscribed_topic_names or () if not may_describe.ok(n)})
        if hidden:  # as Kafka: the code alone (the names are what may not be described)
            return cls(
                throttle_time_ms=0, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, member_id=None, member_epoch=0
            )
    bad = id_error(req.group_id, req.member_id)
    if bad is not None:
        return cls(throttle_time_ms=0, error_code=bad[0], error_message=bad[1], member_id=None, member_epoch=0)
    a = await broker.groups.share.heartbeat(
        req.group_id,
        req.member_id,
        req.member_epoch,
        req.rack_id,
        None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
        ctx.client_id or "",
        "/" + ctx.peer.rsplit(":", 1)[0],
    )
    if a.error:
        return cls(throttle_time_ms=0, error_code=a.error, error_message=a.message, member_id=None, member_epoch=0)
    assignment = None
    if a.assignment is not None:
        assignment = cls.Assignment(
            topic_partitions=[
                cls.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(a.assignment.items())
            ]
        )
    return cls(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        member_id=a.member_id,
        member_epoch=a.member_epoch,
        heartbeat_interval_ms=a.heartbeat_interval_ms,
        assignment=assignment,
    )


def _topic_name(broker: Broker, topic_id: Any) -> str:
    t = broker.topics.by_id(topic_id)
    return t.name if t is not None else ""


async def handle_share_group_describe(
    broker: Broker, ctx: RequestContext, req: messages.ShareGroupDescribeRequest
) -> Any:
    cls = messages.ShareGroupDescribeResponse
    out = []
    for gid in req.group_ids:
        d = cls.DescribedGroup(group_id=gid, authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
        out.append(d)
        if not _may(broker, ctx, DESCRIBE, gid):
            d.error_code, d.group_state = ErrorCode.GROUP_AUTHORIZATION_FAILED, ""
            continue
        try:
            g = await broker.groups.share.describe(gid)
        except ErrorAnswer as e:
            d.error_code, d.error_message, d.group_state = e.code, e.message, "Dead"
            continue
        d.group_state = g.state
        d.group_epoch = g.group_epoch
        d.assignment_epoch = g.assignment_epoch
        d.assignor_name = ASSIGNOR_NAME
        d.members = [
            cls.Member(
                member_id=m.member_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=sorted(m.subscribed_topic_names),
                assignment=cls.Assignment(
                    topic_partitions=[
                        cls.TopicPartitions(topic_id=t, topic_name=_topic_name(broker, t), partitions=sorted(ps))
                        for t, ps in sorted(m.assigned.items())
                        if ps
                    ]
                ),
            )
            for m in sorted(g.members.values(), key=lambda m: m.member_id)
        ]
        if req.include_authorized_operations:
            d.authorized_operations = authorized_operations(broker, ctx, GROUP, gid)
    if broker.authorizer is not None:
        _hide_undescribable(broker, ctx, out)
    return cls(throttle_time_ms=0, groups=out)


def _hide_undescribable(broker: Broker, ctx: RequestContext, groups: list) -> None:
    """As Kafka 4.2: a group whose members are assigned a topic the caller may not describe is
    answered TOPIC_AUTHORIZATION_FAILED, without its members."""
    may_describe = TopicChecks(broker, ctx, DESCRIBE)
    for d in groups:
        if any(not may_describe.ok(tp.topic_name) for m in d.members for tp in m.assignment.topic_partitions):
            d.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            d.error_message = "The group has described topic(s) that the client is not authorized to describe."
            d.members = []


# -- share offsets admin ------------------------------------------------------------------


async def handle_describe_share_group_offsets(
    broker: Broker, ctx: RequestContext, req: messages.DescribeShareGroupOffsetsRequest
) -> Any:
    cls = messages.DescribeShareGroupOffsetsResponse
    service = broker.groups.share
    sc = broker.share_coordinator
    groups = []
    may_describe = TopicChecks(broker, ctx, DESCRIBE) if broker.authorizer is not None else None
    for rg in req.groups:
        g_out = cls.DescribeShareGroupOffsetsResponseGroup(group_id=rg.group_id, error_message=None)
        groups.append(g_out)
        if not _may(broker, ctx, DESCRIBE, rg.group_id):
            g_out.error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            continue
        try:
            _, _, g = service.find(rg.group_id)
        except ErrorAnswer as e:
            g_out.error_code, g_out.error_message = e.code, e.message
            continue
        if rg.topics is None:  # v1: every topic the group has state for (that the caller may describe)
            wanted = [
                (st.name, sorted(st.partitions))
                for st in g.initialized.values()
                if may_describe is None or may_describe.ok(st.name)
            ]
        else:
            wanted = [(t.topic_name, list(t.partitions)) for t in rg.topics]
        for name, partitions in sorted(wanted):
            if may_describe is not None and not may_describe.ok(name):
                g_out.topics.append(_topic_refused(cls, name, partitions))
                continue
            topic = broker.topics.get(name)
            t_out = cls.DescribeShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=topic.topic_id if topic is not None else NO_TOPIC_ID
            )
            g_out.topics.append(t_out)
            done = g.initialized.get(topic.topic_id) if topic is not None else None
            for i in partitions:
                p_out = cls.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=i, start_offset=-1, leader_epoch=-1, lag=-1, error_message=None
                )
                t_out.partitions.append(p_out)
                if topic is None or not 0 <= i < len(topic.partitions):
                    p_out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    p_out.error_message = "This server does not host this topic-partition."
                    continue
                if done is None or i not in done.partitions or sc is None:
                    continue  # no state yet: nothing consumed
                summary = await sc.read_summary(rg.group_id, topic.topic_id, i)
                if summary.error:
                    p_out.error_code = summary.error
                    continue
                p_out.start_offset = summary.start_offset
                p_out.leader_epoch = summary.leader_epoch
                count = summary.delivery_complete_count
                if summary.start_offset >= 0 and count >= 0:
                    hwm = topic.partitions[i].log.high_watermark
                    p_out.lag = max(0, hwm - summary.start_offset - count)
    return cls(throttle_time_ms=0, groups=groups)


def _topic_refused(cls: Any, name: str, partitions: list[int]) -> Any:
    """A DescribeShareGroupOffsets topic the caller may not describe: TOPIC_AUTHORIZATION_FAILED per
    partition, and no topic id (nothing about the topic is shown)."""
    return cls.DescribeShareGroupOffsetsResponseTopic(
        topic_name=name,
        topic_id=NO_TOPIC_ID,
        partitions=[
            cls.DescribeShareGroupOffsetsResponsePartition(
                partition_index=i,
                start_offset=-1,
                leader_epoch=-1,
                lag=-1,
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message=None,
            )
            for i in partitions
        ],
    )


def _empty_group(broker: Broker, gid: str) -> tuple[ShareCoordinator, int, Any, Any]:
    """The share group `gid` for an offsets change: it must be empty, and a share coordinator must exist
    (returned first)."""
    p, shard, g = broker.groups.share.find(gid)
    if g.members:
        raise ErrorAnswer(ErrorCode.NON_EMPTY_GROUP, f"Share group {gid} is not empty.")
    if broker.share_coordinator is None:
        raise ErrorAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "No share coordinator.")
    return broker.share_coordinator, p, shard, g


def _group_to_alter(broker: Broker, gid: str) -> tuple[ShareCoordinator, int, Any, Any, bool]:
    """The share group whose offsets AlterShareGroupOffsets sets: existing and empty, or created now
    (with the share coordinator, first)."""
    if not gid:
        raise ErrorAnswer(ErrorCode.INVALID_GROUP_ID, "The group id must not be empty.")
    sc = broker.share_coordinator
    if sc is None:
        raise ErrorAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "No share coordinator.")
    p, shard, g, created = broker.groups.share.find_or_create(gid)
    if g.members:
        raise ErrorAnswer(ErrorCode.NON_EMPTY_GROUP, f"Share group {gid} is not empty.")
    return sc, p, shard, g, created


async def _persist_if_current(broker: Broker, p: int, shard: Any, g: Any) -> None:
    """Write what changed in `g`, unless the group was deleted meanwhile."""
    if shard.share_groups.get(g.group_id) is g:
        fut = broker.groups.share.persist(p, g)
        if fut is not None:
            await fut


async def handle_alter_share_group_offsets(
    broker: Broker, ctx: RequestContext, req: messages.AlterShareGroupOffsetsRequest
) -> Any:
    cls = messages.AlterShareGroupOffsetsResponse
    if not _may(broker, ctx, READ, req.group_id):
        return cls(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None)
    may_read = TopicChecks(broker, ctx, READ) if broker.authorizer is not None else None
    try:
        sc, p, shard, g, created = _group_to_alter(broker, req.group_id)
    except ErrorAnswer as e:
        return cls(throttle_time_ms=0, error_code=e.code, error_message=e.message)
    responses = []
    for rt in req.topics:
        refused = may_read is not None and not may_read.ok(rt.topic_name)
        topic = None if refused else broker.topics.get(rt.topic_name)
        t_out = cls.AlterShareGroupOffsetsResponseTopic(
            topic_name=rt.topic_name, topic_id=topic.topic_id if topic is not None else NO_TOPIC_ID
        )
        responses.append(t_out)
        ok = []
        for rp in rt.partitions:
            p_out = cls.AlterShareGroupOffsetsResponsePartition(partition_index=rp.partition_index, error_message=None)
            t_out.partitions.append(p_out)
            if refused:
                p_out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if topic is None or not 0 <= rp.partition_index < len(topic.partitions):
                p_out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                p_out.error_message = "This server does not host this topic-partition."
                continue
            if rp.start_offset < 0:
                p_out.error_code, p_out.error_message = ErrorCode.INVALID_REQUEST, "StartOffset must be >= 0."
                continue
            summary = await sc.read_summary(req.group_id, topic.topic_id, rp.partition_index)
            if summary.error:
                p_out.error_code = summary.error
                continue
            epoch = max(g.group_epoch, summary.state_epoch + 1)
            error = await sc.initialize(req.group_id, topic.topic_id, rp.partition_index, epoch, rp.start_offset)
            p_out.error_code = error
            if not error:
                ok.append(rp.partition_index)
        if topic is None or not ok:
            continue
        broker.share_partitions.forget(req.group_id, topic.topic_id, ok)
        if shard.share_groups.get(req.group_id) is g:
            g.initialized_partitions(topic.topic_id, topic.name, ok)
    if created and broker.groups.share.drop_if_unused(shard, g):
        return cls(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)
    try:
        await _persist_if_current(broker, p, shard, g)
    except Exception as e:  # noqa: BLE001 - the group's records were not written: the admin must retry
        log.error("share group %s: persisting altered offsets failed: %r", req.group_id, e)
        return cls(throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR, error_message=None, responses=[])
    if created:
        log.info("share group %s created by AlterShareGroupOffsets", req.group_id)
    return cls(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)


async def handle_delete_share_group_offsets(
    broker: Broker, ctx: RequestContext, req: messages.DeleteShareGroupOffsetsRequest
) -> Any:
    cls = messages.DeleteShareGroupOffsetsResponse
    if not _may(broker, ctx, DELETE, req.group_id):
        return cls(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None)
    may_read = TopicChecks(broker, ctx, READ) if broker.authorizer is not None else None
    try:
        sc, p, shard, g = _empty_group(broker, req.group_id)
    except ErrorAnswer as e:
        return cls(throttle_time_ms=0, error_code=e.code, error_message=e.message)
    responses = []
    for rt in req.topics:
        refused = may_read is not None and not may_read.ok(rt.topic_name)
        topic = None if refused else broker.topics.get(rt.topic_name)
        t_out = cls.DeleteShareGroupOffsetsResponseTopic(
            topic_name=rt.topic_name,
            topic_id=topic.topic_id if topic is not None else NO_TOPIC_ID,
            error_message=None,
        )
        responses.append(t_out)
        if refused:
            t_out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        if topic is None:
            t_out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            t_out.error_message = "The topic does not exist."
            continue
        if topic.topic_id not in g.initialized and topic.topic_id not in g.initializing:
            t_out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            t_out.error_message = f"The topic is not part of share group {req.group_id}."
            continue
        parts = sorted(
            (g.initialized[topic.topic_id].partitions if topic.topic_id in g.initialized else frozenset())
            | (g.initializing[topic.topic_id].partitions if topic.topic_id in g.initializing else frozenset())
        )
        errors = await asyncio.gather(*(sc.delete(req.group_id, topic.topic_id, i) for i in parts))
        broker.share_partitions.forget(req.group_id, topic.topic_id)
        bad = next((e for e in errors if e), 0)
        if bad:
            t_out.error_code = bad
            continue
        if shard.share_groups.get(req.group_id) is g:
            g.forget_offsets(topic.topic_id)
    await _persist_if_current(broker, p, shard, g)
    return cls(throttle_time_ms=0, error_code=0, error_message=None, responses=responses)


def register(table: HandlerTable) -> None:
    table.add("ShareGroupHeartbeat", handle_share_group_heartbeat)
    table.add("ShareGroupDescribe", handle_share_group_describe)
    table.add("DescribeShareGroupOffsets", handle_describe_share_group_offsets)
    table.add("AlterShareGroupOffsets", handle_alter_share_group_offsets)
    table.add("DeleteShareGroupOffsets", handle_delete_share_group_offsets)
