"""DeleteRecords (API key 21): move a partition's log start forward on request.

Kafka's AdminClient.deleteRecords, kafka-delete-records.sh and librdkafka's
``delete_records`` land here. The work itself is ``Partition.advance_log_start``,
the path the share coordinator already prunes ``__share_group_state`` with: it
writes the new start durably before answering (so TimeoutMs never has to be
waited on) and trims the producers' idempotence state. Reads below the start
then answer OFFSET_OUT_OF_RANGE as after retention, and share partitions catch
up on their next fetch (``on_log_start_advanced``), as they do after retention.

Per partition, as Kafka 4.2 answers: -1 asks for the high watermark; a negative
offset or one past the high watermark is OFFSET_OUT_OF_RANGE; an offset at or
below the current start changes nothing and answers the current start. Kafka
refuses internal topics (INVALID_TOPIC_EXCEPTION) and topics whose
cleanup.policy lacks ``delete`` (POLICY_VIOLATION). Authorization needs DELETE
on the topic, checked before existence so a refused caller learns nothing.
"""

from __future__ import annotations

from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import DELETE, TopicChecks
from shoal.broker.handlers.contract import Broker
from shoal.broker.net.contract import RequestContext
from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode

HIGH_WATERMARK = -1  # the request's Offset for "everything below the high watermark"


def handle_delete_records(broker: Broker, ctx: RequestContext, req: messages.DeleteRecordsRequest) -> Any:
    cls = messages.DeleteRecordsResponse
    may = TopicChecks(broker, ctx, DELETE) if broker.authorizer is not None else None
    topics = []
    for t in req.topics:
        tr = cls.DeleteRecordsTopicResult(name=t.name)
        topics.append(tr)
        denied = may is not None and not may.ok(t.name)
        topic = None if denied else broker.topics.get(t.name)
        for p in t.partitions:
            pr = cls.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1)
            tr.partitions.append(pr)
            if denied:
                pr.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if topic is None or not 0 <= p.partition_index < len(topic.partitions):
                pr.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if topic.internal:
                pr.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
                continue
            try:
                pr.low_watermark = _delete_below(topic.partitions[p.partition_index], p.offset)
            except ErrorAnswer as e:
                pr.error_code = e.code
    return cls(throttle_time_ms=0, topics=topics)


def _delete_below(partition: Any, offset: int) -> int:
    """Advance `partition`'s log start to `offset`; the start afterwards (ErrorAnswer if refused)."""
    if partition.offline:
        raise ErrorAnswer(ErrorCode.KAFKA_STORAGE_ERROR, "partition is in an offline log directory")
    if "delete" not in partition.log.config.cleanup_policy:
        raise ErrorAnswer(ErrorCode.POLICY_VIOLATION, "records cannot be deleted under cleanup.policy=compact")
    hw = partition.high_watermark
    target = hw if offset == HIGH_WATERMARK else offset
    if target < 0 or target > hw:
        raise ErrorAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {target} is outside [0, {hw}]")
    partition.advance_log_start(target)
    return int(partition.log_start_offset)


def register(table: HandlerTable) -> None:
    table.add("DeleteRecords", handle_delete_records)
