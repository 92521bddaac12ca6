"""ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups.

A partition in an offline log directory answers KAFKA_STORAGE_ERROR, as
Kafka's ReplicaManager does for every lookup on an offline partition.
"""

from __future__ import annotations

from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import DESCRIBE, TopicChecks
from shoal.broker.handlers.contract import Broker
from shoal.broker.handlers.legacy_wire import old_style_offsets
from shoal.broker.net.contract import RequestContext
from shoal.broker.partition.partition import LEADER_EPOCH
from shoal.protocol import messages
from shoal.protocol.constants import IsolationLevel, ListOffsetsTimestamp
from shoal.protocol.errors import ErrorCode


def handle_list_offsets(broker: Broker, ctx: RequestContext, req: messages.ListOffsetsRequest) -> Any:
    cls = messages.ListOffsetsResponse
    read_committed = req.isolation_level == IsolationLevel.READ_COMMITTED
    topics = []
    may = TopicChecks(broker, ctx, DESCRIBE) if broker.authorizer is not None else None
    for t in req.topics:
        tr = cls.ListOffsetsTopicResponse(name=t.name)
        topics.append(tr)
        topic = broker.topics.get(t.name)
        denied = may is not None and not may.ok(t.name)
        for p in t.partitions:
            pr = cls.ListOffsetsPartitionResponse(partition_index=p.partition_index)
            tr.partitions.append(pr)
            if denied:
                pr.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            partition = None
            if topic is not None and 0 <= p.partition_index < len(topic.partitions):
                partition = topic.partitions[p.partition_index]
            if partition is None:
                pr.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if partition.offline:
                pr.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            if p.current_leader_epoch > LEADER_EPOCH:
                pr.error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
                continue
            try:
                if ctx.api_version == 0:  # the old form: a list of segment start offsets
                    pr.old_style_offsets = old_style_offsets(
                        partition, p.timestamp, p.max_num_offsets, broker.clock.now_ms()
                    )
                    continue
                _lookup(partition, p.timestamp, read_committed, pr)
            except ErrorAnswer as e:  # a storage error met by the lookup
                pr.error_code, pr.offset, pr.timestamp, pr.leader_epoch = e.code, -1, -1, -1
    return cls(throttle_time_ms=0, topics=topics)


def _lookup(partition: Any, ts: int, read_committed: bool, pr: Any) -> None:
    pr.leader_epoch = LEADER_EPOCH
    if ts == ListOffsetsTimestamp.LATEST:
        pr.offset = partition.last_stable_offset if read_committed else partition.high_watermark
    elif ts in (ListOffsetsTimestamp.EARLIEST, ListOffsetsTimestamp.EARLIEST_LOCAL):
        pr.offset = partition.log_start_offset
    elif ts in (ListOffsetsTimestamp.LATEST_TIERED, ListOffsetsTimestamp.EARLIEST_PENDING_UPLOAD):
        pr.offset = -1  # no tiered storage: nothing was ever uploaded
    elif ts == ListOffsetsTimestamp.MAX_TIMESTAMP:
        found = partition.max_timestamp_offset()
        if found is not None:
            pr.offset, pr.timestamp = found
    elif ts < 0:
        pr.error_code = ErrorCode.INVALID_REQUEST
    else:
        found = partition.offset_for_timestamp(ts)
        if found is not None:
            offset, stamp = found
            limit = partition.last_stable_offset if read_committed else partition.high_watermark
            if offset < limit:
                pr.offset, pr.timestamp = offset, stamp


def register(table: HandlerTable) -> None:
    table.add("ListOffsets", handle_list_offsets)
