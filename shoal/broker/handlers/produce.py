"""Produce and InitProducerId.

Small appends are synchronous writes to the OS while writes are quick (and
go to the writer thread for a while after a slow one,
``broker.log.inline_writes``); large ones are copied into the page cache by
the log writer thread while the loop reads the next request
(``broker.log.writer``), and the handler waits for that write.
Durability is separate: with acks=-1 the response waits for the group-commit
fsync of every partition written (unless log.flush.interval.ms says
otherwise), with acks=1 it is sent once the bytes reach the OS, with acks=0
nothing is sent at all — and, as in Kafka, an acks=0 request that hit an
error closes the connection so the producer notices.

Storage errors answer KAFKA_STORAGE_ERROR for the partition they hit, never
a closed connection: a write that fails inline or on the writer thread, an
fsync that fails, and a partition whose log directory went offline before or
while the request waited (``broker.log.log_dir``). A partition is confirmed
only once what it was sent is durable (acks=-1) or written (acks=1).

Every append wakes fetches (and share fetches) waiting on the partition once
its bytes are written.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import IDEMPOTENT_WRITE, TOPIC, WRITE, TopicChecks, allowed_on_cluster
from shoal.broker.handlers.contract import Broker
from shoal.broker.handlers.legacy_wire import FIRST_V2_PRODUCE, upconvert
from shoal.broker.net.contract import NO_RESPONSE, RequestContext
from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode

ZERO_UUID = uuid.UUID(int=0)


def handle_produce(broker: Broker, ctx: RequestContext, req: messages.ProduceRequest) -> Any:
    cls = messages.ProduceResponse
    acks = req.acks
    now = broker.clock.now_ms()
    version = ctx.api_version
    responses = []
    written: list[tuple[Any, Any, int]] = []  # (partition response, partition, end offset to make durable)
    pending: list[tuple[Any, asyncio.Future]] = []  # (partition response, write in flight)
    any_error = False
    may_write = TopicChecks(broker, ctx, WRITE) if broker.authorizer is not None else None
    for td in req.topic_data:
        if version >= 13:
            topic = broker.topics.by_id(td.topic_id) if td.topic_id != ZERO_UUID else None
            missing = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            topic = broker.topics.get(td.name)
            missing = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        tr = cls.TopicProduceResponse(name=td.name, topic_id=td.topic_id)
        responses.append(tr)
        # As Kafka: a name is checked before it is looked up (an unknown id cannot be checked)
        denied = may_write is not None and (topic is not None or version < 13)
        denied = denied and not may_write.ok(topic.name if topic is not None else td.name)  # type: ignore[union-attr]
        for pd in td.partition_data:
            pr = cls.PartitionProduceResponse(index=pd.index)
            tr.partition_responses.append(pr)
            if denied:
                pr.error_code, pr.base_offset = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1
                any_error = True
                continue
            if topic is None or not 0 <= pd.index < len(topic.partitions):
                pr.error_code = missing if topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                pr.base_offset = -1
                any_error = True
                continue
            partition = topic.partitions[pd.index]
            counts = broker.stats.topic(topic.name)
            counts.produce_requests += 1
            if acks not in (0, 1, -1):
                pr.error_code, pr.base_offset = ErrorCode.INVALID_REQUIRED_ACKS, -1
                any_error = True
                counts.failed_produce += 1
                continue
            if topic.internal:
                pr.error_code, pr.error_message = (
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"cannot produce to internal topic {topic.name}",
                )
                pr.base_offset = -1
                any_error = True
                continue
            if req.transactional_id is not None:
                pr.error_code, pr.error_message = (
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "Shoal does not support transactions",
                )
                pr.base_offset = -1
                any_error = True
                continue
            try:
                records = pd.records if version >= FIRST_V2_PRODUCE else upconvert(partition, pd.records)
                result = partition.append(records, now)
            except ErrorAnswer as e:  # the partition refused the batch (validation, storage)
                pr.error_code, pr.error_message, pr.base_offset = e.code, e.message, -1
                any_error = True
                counts.failed_produce += 1
                continue
            if result.appended:
                counts.messages_in += result.end_offset - result.base_offset
                counts.bytes_in += len(pd.records) if pd.records is not None else 0
            pr.base_offset = result.base_offset
            pr.log_append_time_ms = result.log_append_time
            pr.log_start_offset = partition.log_start_offset
            if result.written is not None:
                pending.append((pr, result.written))
            elif result.appended:
                broker.on_append(partition)  # written already (an async write wakes fetches itself)
            # A retried duplicate waits for durability up to its original's end too: the
            # original may still be waiting for its fsync, and "stored" must mean durable.
            written.append((pr, partition, result.end_offset))
    body = cls(responses=responses, throttle_time_ms=0)
    if acks == 0:
        if any_error:
            ctx.connection.abort("acks=0 produce failed")
        return NO_RESPONSE
    flush = acks == -1 and broker.config.fsync_acks_all
    if pending or (flush and written):
        return _after_write(broker, pending, written if flush else [], body)
    return body


def _storage_error(pr: Any, error: BaseException) -> None:
    pr.error_code, pr.error_message, pr.base_offset = ErrorCode.KAFKA_STORAGE_ERROR, str(error), -1
    pr.log_append_time_ms, pr.log_start_offset = -1, -1


def _after_write(
    broker: Broker, pending: list[tuple[Any, asyncio.Future]], written: list[tuple[Any, Any, int]], body: Any
) -> asyncio.Future:
    """A future of the response, set once the writes in flight are done and, for
    acks=-1, fsynced. Chained callbacks rather than a coroutine: no Task per request.
    A partition whose write or fsync failed gets KAFKA_STORAGE_ERROR; the others
    are answered as usual."""
    answer = asyncio.get_running_loop().create_future()
    left = len(pending)
    flushing = 0

    def finish() -> None:
        if not answer.done():  # else the connection went away
            answer.set_result(body)

    def one_flushed(pr: Any, done: asyncio.Future) -> None:
        nonlocal flushing
        error = done.exception()
        if error is not None:
            _storage_error(pr, error)
        flushing -= 1
        if flushing == 0:
            finish()

    def all_written() -> None:
        nonlocal flushing
        durable = [(pr, p, end) for pr, p, end in written if pr.error_code == ErrorCode.NONE]
        flushing = len(durable)
        for pr, p, end in durable:
            broker.flusher.flush(p.log, end).add_done_callback(functools.partial(one_flushed, pr))
        if not durable:
            finish()

    def one_written(pr: Any, fut: asyncio.Future) -> None:
        nonlocal left
        error = fut.result()
        if error is not None:
            _storage_error(pr, error)
        left -= 1
        if left == 0:
            all_written()

    for pr, fut in pending:
        fut.add_done_callback(functools.partial(one_written, pr))
    if not pending:
        all_written()
    return answer


def handle_init_producer_id(broker: Broker, ctx: RequestContext, req: messages.InitProducerIdRequest) -> Any:
    cls = messages.InitProducerIdResponse
    if req.transactional_id is not None:
        return cls(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    az = broker.authorizer
    if (
        az is not None
        and not allowed_on_cluster(broker, ctx, IDEMPOTENT_WRITE)
        and not az.authorize_any(ctx.principal, ctx.client_host, WRITE, TOPIC)
    ):
        # Kafka: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
        return cls(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    pid, epoch = broker.producer_ids.init(req.producer_id, req.producer_epoch)
    return cls(error_code=0, producer_id=pid, producer_epoch=epoch)


def register(table: HandlerTable) -> None:
    table.add("Produce", handle_produce)
    table.add("InitProducerId", handle_init_producer_id)
