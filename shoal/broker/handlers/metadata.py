"""Metadata and DescribeCluster: this node is the whole cluster.

Every partition is led by this node with a constant leader epoch (0), so
clients never need OffsetForLeaderEpoch. Topic ids are real and stable
(librdkafka fetches by id from Fetch v13 and its share consumer resolves
assignments by id). Unknown topics are auto-created when
auto.create.topics.enable is on and the request allows it (v4+), as Kafka
does; internal topics are never auto-created by a client.

A partition whose log directory is offline is shown as Kafka shows the
partitions of a failed log dir once the controller has moved leadership off
it (KRaftMetadataCache over ReplicationControlManager.handleDirectoriesOffline):
error LEADER_NOT_AVAILABLE, leader -1, this node still the replica and in the
ISR, and listed in offline_replicas. Clients then stop sending it produce and
fetch requests and wait for a leader, instead of retrying against this node.
Kafka also bumps the leader epoch; Shoal keeps its constant epoch, because
its logs come back at the same epoch after the restart that brings the
directory back, and clients ignore metadata whose epoch goes backwards.
"""

from __future__ import annotations

import uuid
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import (
    CLUSTER,
    CREATE,
    DESCRIBE,
    TOPIC,
    TopicChecks,
    allowed,
    allowed_on_cluster,
    authorized_operations,
)
from shoal.broker.handlers.contract import Broker
from shoal.broker.net.contract import RequestContext
from shoal.broker.partition.partition import LEADER_EPOCH
from shoal.broker.partition.topics import INTERNAL_TOPICS, validate_topic_name
from shoal.broker.security.acl import CLUSTER_NAME
from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode

NO_LEADER = -1
ZERO_UUID = uuid.UUID(int=0)


def topic_metadata(broker: Broker, topic: Any, cls: Any) -> Any:
    node = broker.node_id
    return cls.MetadataResponseTopic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=[
            cls.MetadataResponsePartition(
                error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=p.index,
                leader_id=NO_LEADER,
                leader_epoch=LEADER_EPOCH,
                replica_nodes=[node],
                isr_nodes=[node],
                offline_replicas=[node],
            )
            if p.offline
            else cls.MetadataResponsePartition(
                error_code=0,
                partition_index=p.index,
                leader_id=node,
                leader_epoch=LEADER_EPOCH,
                replica_nodes=[node],
                isr_nodes=[node],
                offline_replicas=[],
            )
            for p in topic.partitions
        ],
    )


def _unauthorized(cls: Any, name: str | None, topic_id: Any = ZERO_UUID) -> Any:
    return cls.MetadataResponseTopic(
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=topic_id, is_internal=False
    )


def handle_metadata(broker: Broker, ctx: RequestContext, req: messages.MetadataRequest) -> Any:
    cls = messages.MetadataResponse
    topics = broker.topics
    out = []
    # DESCRIBE on each topic, as Kafka: a listing of all topics leaves out what the caller may not
    # describe; a topic asked for by name is refused without saying whether it exists.
    may = TopicChecks(broker, ctx, DESCRIBE) if broker.authorizer is not None else None
    # v0 has no null list: an empty one asks for every topic (Kafka's MetadataRequest.isAllTopics)
    if req.topics is None or (ctx.api_version == 0 and not req.topics):
        out = [topic_metadata(broker, t, cls) for t in topics if may is None or may.ok(t.name)]
    else:
        allow_create = broker.config.get("auto.create.topics.enable") and (
            ctx.api_version < 4 or req.allow_auto_topic_creation
        )
        for rt in req.topics:
            if rt.name is None:
                if ctx.api_version < 10 or rt.topic_id == ZERO_UUID:
                    out.append(cls.MetadataResponseTopic(error_code=ErrorCode.INVALID_REQUEST, name=None))
                    continue
                t = topics.by_id(rt.topic_id)
                if t is None:
                    out.append(
                        cls.MetadataResponseTopic(
                            error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=rt.topic_id
                        )
                    )
                elif may is not None and not may.ok(t.name):
                    out.append(_unauthorized(cls, None, t.topic_id))  # ids are not secret; the name is
                else:
                    out.append(topic_metadata(broker, t, cls))
                continue
            if may is not None and not may.ok(rt.name):
                out.append(_unauthorized(cls, rt.name))
                continue
            t = topics.get(rt.name)
            if t is None:
                try:
                    validate_topic_name(rt.name)
                except ErrorAnswer as e:
                    out.append(cls.MetadataResponseTopic(error_code=e.code, name=rt.name))
                    continue
                creating = allow_create and rt.name not in INTERNAL_TOPICS
                if creating and may is not None and not _may_create(broker, ctx, rt.name):
                    out.append(_unauthorized(cls, rt.name))
                    continue
                if allow_create and rt.name not in INTERNAL_TOPICS:
                    from shoal.broker.handlers.admin import create_topic

                    try:
                        t = create_topic(broker, rt.name, -1, {})
                    except ErrorAnswer as e:
                        out.append(cls.MetadataResponseTopic(error_code=e.code, name=rt.name))
                        continue
                else:
                    out.append(cls.MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=rt.name))
                    continue
            out.append(topic_metadata(broker, t, cls))
    host, port = broker.endpoint(ctx)
    resp = cls(
        throttle_time_ms=0,
        brokers=[cls.MetadataResponseBroker(node_id=broker.node_id, host=host, port=port, rack=None)],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=out,
    )
    if ctx.api_version >= 8:
        _authorized_operations(broker, ctx, req, resp)
    return resp


def _may_create(broker: Broker, ctx: RequestContext, name: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic."""
    return allowed_on_cluster(broker, ctx, CREATE) or allowed(broker, ctx, CREATE, TOPIC, name)


def _authorized_operations(broker: Broker, ctx: RequestContext, req: Any, resp: Any) -> None:
    """The authorized-operations bit fields asked for (v8+), as Kafka fills them: every topic that
    was described, and (v8-v10) the cluster's, 0 without DESCRIBE on it."""
    if req.include_topic_authorized_operations:
        for t in resp.topics:
            if t.error_code != ErrorCode.TOPIC_AUTHORIZATION_FAILED and t.name:
                t.topic_authorized_operations = authorized_operations(broker, ctx, TOPIC, t.name)
    if ctx.api_version <= 10 and req.include_cluster_authorized_operations:
        resp.cluster_authorized_operations = _cluster_operations(broker, ctx)


def _cluster_operations(broker: Broker, ctx: RequestContext) -> int:
    if not allowed_on_cluster(broker, ctx, DESCRIBE):
        return 0
    return authorized_operations(broker, ctx, CLUSTER, CLUSTER_NAME)


def handle_describe_cluster(broker: Broker, ctx: RequestContext, req: messages.DescribeClusterRequest) -> Any:
    cls = messages.DescribeClusterResponse
    if ctx.api_version >= 1 and req.endpoint_type != 1:
        # Shoal has no separate controller listener: only brokers (type 1) are described.
        return cls(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="Shoal only describes broker endpoints",
            endpoint_type=req.endpoint_type,
            cluster_id=broker.cluster_id,
        )
    host, port = broker.endpoint(ctx)
    resp = cls(
        error_code=0,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[cls.DescribeClusterBroker(broker_id=broker.node_id, host=host, port=port, rack=None)],
    )
    # Kafka refuses no one here: the caller without DESCRIBE on the cluster is told it may do nothing
    if req.include_cluster_authorized_operations:
        resp.cluster_authorized_operations = _cluster_operations(broker, ctx)
    return resp


def register(table: HandlerTable) -> None:
    table.add("Metadata", handle_metadata)
    table.add("DescribeCluster", handle_describe_cluster)
