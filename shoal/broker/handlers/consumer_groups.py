"""Consumer-group (KIP-848) APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Thin: the request-level checks Kafka 4.2 makes before a heartbeat reaches the
group (which fields a first heartbeat must carry, which values are invalid),
the ACL checks (READ on the group and DESCRIBE on each subscribed topic for a
heartbeat; DESCRIBE on the group to describe it), and the translation to and
from :class:`~shoal.broker.groups.consumer.group.ConsumerGroup` through the
coordinator's ConsumerGroupService. Registered only when
``group.coordinator.rebalance.protocols`` holds "consumer".
"""

from __future__ import annotations

import uuid
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.groups.consumer.group import HeartbeatParams
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import DESCRIBE, GROUP, READ, TopicChecks, allowed, authorized_operations
from shoal.broker.handlers.contract import Broker
from shoal.broker.handlers.limits import id_error
from shoal.broker.net.contract import RequestContext
from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode

AUTHORIZED_OPERATIONS_OMITTED = -(1 << 31)
MEMBER_TYPE_CLASSIC, MEMBER_TYPE_CONSUMER = 0, 1


def _may(broker: Broker, ctx: RequestContext, op: Any, gid: str) -> bool:
    return broker.authorizer is None or allowed(broker, ctx, op, GROUP, gid)


def _invalid(req: Any, version: int) -> str | None:
    """Kafka 4.2's checks of a heartbeat's fields; the message of the first one that fails."""
    if not req.group_id:
        return "GroupId can't be empty."
    if req.instance_id is not None and not req.instance_id:
        return "InstanceId can't be empty."
    if req.rack_id is not None and not req.rack_id:
        return "RackId can't be empty."
    if version >= 1 and not req.member_id:
        return "MemberId can't be empty."
    if req.member_epoch < -2:
        return f"MemberEpoch {req.member_epoch} is invalid."
    if req.member_epoch == -2 and req.instance_id is None:
        return "InstanceId can't be null."
    regex = (req.subscribed_topic_regex or None) if version >= 1 else None  # "" clears it, as librdkafka sends
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if req.topic_partitions is None or len(req.topic_partitions) > 0:
            return "TopicPartitions must be empty when (re-)joining."
        if req.subscribed_topic_names is None and regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif version == 0 and not req.member_id:
        return "MemberId can't be empty."
    return None


async def handle_consumer_group_heartbeat(
    broker: Broker, ctx: RequestContext, req: messages.ConsumerGroupHeartbeatRequest
) -> Any:
    cls = messages.ConsumerGroupHeartbeatResponse

    def error(code: int, message: str | None = None) -> Any:
        return cls(throttle_time_ms=0, error_code=code, error_message=message, member_id=None, member_epoch=0)

    if not _may(broker, ctx, READ, req.group_id):
        return error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if broker.authorizer is not None and req.subscribed_topic_names:
        may_describe = TopicChecks(broker, ctx, DESCRIBE)
        if any(not may_describe.ok(n) for n in req.subscribed_topic_names):
            return error(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    v = ctx.api_version
    problem = _invalid(req, v)
    if problem is not None:
        return error(ErrorCode.INVALID_REQUEST, problem)
    bad = id_error(req.group_id, req.member_id, req.instance_id)
    if bad is not None:
        return error(*bad)
    member_id = req.member_id or str(uuid.uuid4())  # v0 lets the coordinator choose it
    owned = None
    if req.topic_partitions is not None:
        owned = {tp.topic_id: frozenset(tp.partitions) for tp in req.topic_partitions if tp.partitions}
    params = HeartbeatParams(
        member_id=member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_names=None if req.subscribed_topic_names is None else list(req.subscribed_topic_names),
        regex=req.subscribed_topic_regex if v >= 1 else None,
        server_assignor=req.server_assignor,
        owned=owned,
        client_id=ctx.client_id or "",
        client_host="/" + ctx.peer.rsplit(":", 1)[0],
    )
    a = await broker.groups.consumer.heartbeat(req.group_id, params)
    if a.error:
        return error(a.error, a.message)
    assignment = None
    if a.assignment is not None:
        assignment = cls.Assignment(
            topic_partitions=[
                cls.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(a.assignment.items()) if ps
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


async def handle_consumer_group_describe(
    broker: Broker, ctx: RequestContext, req: messages.ConsumerGroupDescribeRequest
) -> Any:
    cls = messages.ConsumerGroupDescribeResponse

    def parts(assignment: dict) -> Any:
        out = []
        for t, ps in sorted(assignment.items()):
            topic = broker.topics.by_id(t)
            if ps:
                out.append(
                    cls.TopicPartitions(topic_id=t, topic_name=topic.name if topic else "", partitions=sorted(ps))
                )
        return cls.Assignment(topic_partitions=out)

    out = []
    for gid in req.group_ids:
        d = cls.DescribedGroup(group_id=gid, authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
        out.append(d)
        if not _may(broker, ctx, DESCRIBE, gid):
            d.error_code, d.group_state = ErrorCode.GROUP_AUTHORIZATION_FAILED, ""
            continue
        try:
            g = await broker.groups.consumer.describe(gid)
        except ErrorAnswer as e:
            d.error_code, d.error_message, d.group_state = e.code, e.message, "Dead"
            if e.code == ErrorCode.GROUP_ID_NOT_FOUND and _other_type(broker, gid):
                d.error_message = f"Group {gid} is not a consumer group."
            continue
        d.group_state = g.state
        d.group_epoch = g.group_epoch
        d.assignment_epoch = g.assignment_epoch
        d.assignor_name = g.assignor_name
        d.members = [
            cls.Member(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=sorted(m.subscribed_names),
                subscribed_topic_regex=m.regex,
                assignment=parts(m.assigned),
                target_assignment=parts(g.target.get(m.member_id, {})),
                member_type=MEMBER_TYPE_CONSUMER if m.classic is None else MEMBER_TYPE_CLASSIC,
            )
            for m in sorted(g.members.values(), key=lambda m: m.member_id)
        ]
        if req.include_authorized_operations:
            d.authorized_operations = authorized_operations(broker, ctx, GROUP, gid)
    if broker.authorizer is not None:
        may_describe = TopicChecks(broker, ctx, DESCRIBE)
        for d in out:
            if any(
                not may_describe.ok(tp.topic_name)
                for m in d.members
                for a in (m.assignment, m.target_assignment)
                for tp in a.topic_partitions
            ):
                d.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                d.error_message = "The group has described topic(s) that the client is not authorized to describe."
                d.members = []
    return cls(throttle_time_ms=0, groups=out)


def _other_type(broker: Broker, gid: str) -> bool:
    try:
        shard = broker.groups.runtime.shard(broker.groups.runtime.partition_of(gid))
    except ErrorAnswer:
        return False
    return gid in shard.groups or gid in shard.share_groups


def register(table: HandlerTable) -> None:
    table.add("ConsumerGroupHeartbeat", handle_consumer_group_heartbeat)
    table.add("ConsumerGroupDescribe", handle_consumer_group_describe)
