"""Fetch: reads, incremental fetch sessions (KIP-227) and long polling.

A fetch reads every partition it names (or, incrementally, every partition of
its session) at once. If that yields fewer than MinBytes and nothing went
wrong, the request waits as a DelayedFetch in the fetch purgatory, watched
under each of its partitions; a produce to any of them calls
`check_and_complete`, which re-reads only if some partition's end moved past
its fetch offset. MaxWaitMs later the timer completes it with whatever there
is. The response is built once, by whichever of the two happens first.
A partition in an offline log directory answers KAFKA_STORAGE_ERROR (with
unknown offsets, -1, as Kafka does); a fetch waiting on one is completed as
soon as the directory goes offline (``Broker._answer_waiting``).

Record bytes come from the log with one pread and go into the response
untouched; the encoder hands them to the transport without another copy.
Fetch v0-v3 (old clients) get them down-converted to magic 0/1 message sets
instead (``legacy_wire``).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import READ, TopicChecks
from shoal.broker.handlers.contract import Broker
from shoal.broker.handlers.legacy_wire import FIRST_V2_FETCH, down_converted, refuse_old_fetch
from shoal.broker.net.contract import RequestContext
from shoal.broker.partition.fetch_session import PartitionKey, PartitionRequest, PartitionResult
from shoal.broker.partition.partition import LEADER_EPOCH, fetch_key
from shoal.broker.timing.purgatory import DelayedOperation
from shoal.protocol import messages
from shoal.protocol.constants import IsolationLevel
from shoal.protocol.errors import ErrorCode

ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class _Read:
    error: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Any = b""
    aborted: list | None = None


class FetchOperation:
    """One Fetch request: what to read, and how to turn reads into a response."""

    def __init__(
        self, broker: Broker, req: messages.FetchRequest, version: int, context: Any, request_ctx: RequestContext
    ) -> None:
        self.broker = broker
        self.req = req
        self.version = version
        self.context = context
        self.uses_ids = version >= 13
        self.read_committed = req.isolation_level == IsolationLevel.READ_COMMITTED
        # [(key, PartitionRequest)]; for an incremental fetch, the whole session
        self.partitions: list[tuple[tuple[Any, int], PartitionRequest]] = context.partitions()
        # READ on each topic (decided once per topic for the life of the request); None: no authorizer
        self.may_read = TopicChecks(broker, request_ctx, READ) if broker.authorizer is not None else None

    def _partition(self, key: tuple[Any, int]) -> tuple[Any, Any]:
        topic_ref, index = key
        topics = self.broker.topics
        topic = topics.by_id(topic_ref) if self.uses_ids else topics.get(topic_ref)
        if topic is None or not 0 <= index < len(topic.partitions):
            return topic, None
        return topic, topic.partitions[index]

    def watch_keys(self) -> list[tuple]:
        keys = []
        for key, _ in self.partitions:
            topic, partition = self._partition(key)
            if partition is not None:
                keys.append(fetch_key(topic.name, partition.index))
        return keys

    def has_new_data(self) -> bool:
        for key, preq in self.partitions:
            _, partition = self._partition(key)
            if partition is None or partition.offline:
                return True  # deleted meanwhile, or its log directory failed: answer now
            end = partition.last_stable_offset if self.read_committed else partition.high_watermark
            if end > preq.fetch_offset:
                return True
        return False

    def read_all(self) -> tuple[dict, int, bool]:
        """(key -> _Read, total record bytes, any error)."""
        remaining = self.req.max_bytes if self.version >= 3 else 0x7FFFFFFF
        total = 0
        any_error = False
        reads: dict = {}
        min_one = True
        for key, preq in self.partitions:
            r = self._read_one(key, preq, remaining, min_one)
            reads[key] = r
            if r.error:
                any_error = True
            n = len(r.records)
            if n:
                min_one = False
                total += n
                remaining = max(0, remaining - n)
        return reads, total, any_error

    def _read_one(self, key: tuple[Any, int], preq: PartitionRequest, remaining: int, min_one: bool) -> _Read:
        topic, partition = self._partition(key)
        if self.may_read is not None and (topic is not None or not self.uses_ids):
            # as Kafka: a name is checked before it is looked up; an unknown id cannot be
            if not self.may_read.ok(topic.name if topic is not None else key[0]):
                return _Read(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if partition is None:
            code = (
                ErrorCode.UNKNOWN_TOPIC_ID if self.uses_ids and topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return _Read(code)
        if preq.current_leader_epoch > LEADER_EPOCH:
            return _Read(ErrorCode.UNKNOWN_LEADER_EPOCH)
        if self.version < FIRST_V2_FETCH and (refused := refuse_old_fetch(partition, self.version)):
            return _Read(refused)
        limit = min(preq.max_bytes, remaining)
        try:
            got = partition.read(preq.fetch_offset, limit, read_committed=self.read_committed, min_one=min_one)
            records = got.records
            if self.version < FIRST_V2_FETCH:  # an old client: magic 0/1 message sets
                records = down_converted(records, self.version, preq.fetch_offset)
        except ErrorAnswer as e:
            if e.code in (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
                return _Read(e.code)
            return _Read(
                e.code,
                partition.high_watermark,
                partition.last_stable_offset,
                partition.log_start_offset,
            )
        return _Read(
            0,
            got.high_watermark,
            got.last_stable_offset,
            got.log_start_offset,
            records,
            got.aborted if self.read_committed else None,
        )

    def response(self, reads: dict) -> Any:
        cls = messages.FetchResponse
        results = {
            key: PartitionResult(
                high_watermark=r.high_watermark,
                log_start_offset=r.log_start_offset,
                last_stable_offset=r.last_stable_offset,
                error_code=r.error,
                records_size=len(r.records),
            )
            for key, r in reads.items()
        }
        plan = self.context.response(results, self.broker.clock.monotonic_ms())
        by_topic: dict[Any, Any] = {}
        out = []
        stats = self.broker.stats
        for key, _ in plan.partitions:
            topic_ref, index = key
            topic, _p = self._partition(key)
            if topic is not None:  # BrokerTopicMetrics (unknown names make no series)
                counts = stats.topic(topic.name)
                counts.fetch_requests += 1
                counts.bytes_out += len(reads[key].records)
                counts.failed_fetch += reads[key].error != 0
            tr = by_topic.get(topic_ref)
            if tr is None:
                if self.uses_ids:
                    tr = cls.FetchableTopicResponse(topic_id=topic_ref)
                else:
                    tr = cls.FetchableTopicResponse(topic=topic_ref)
                by_topic[topic_ref] = tr
                out.append(tr)
            r = reads[key]
            pd = cls.PartitionData(
                partition_index=index,
                error_code=r.error,
                high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset,
                log_start_offset=r.log_start_offset,
                aborted_transactions=[
                    cls.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in r.aborted
                ]
                if r.aborted is not None
                else None,
                records=r.records,
            )
            if r.error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH) and self.version >= 12:
                pd.current_leader = cls.LeaderIdAndEpoch(leader_id=self.broker.node_id, leader_epoch=LEADER_EPOCH)
            tr.partitions.append(pd)
        return cls(throttle_time_ms=0, error_code=plan.error_code, session_id=plan.session_id, responses=out)


class DelayedFetch(DelayedOperation):
    __slots__ = ("_reads", "future", "op")

    def __init__(self, op: FetchOperation, timeout_ms: int, future: asyncio.Future) -> None:
        super().__init__(timeout_ms)
        self.op = op
        self.future = future
        self._reads: dict | None = None

    def try_complete(self) -> bool:
        if self.future.done():  # the client went away
            return self.force_complete()
        if not self.op.has_new_data():
            return False
        reads, total, any_error = self.op.read_all()
        if total >= self.op.req.min_bytes or any_error:
            self._reads = reads
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if self.future.done():
            return
        try:
            reads = self._reads if self._reads is not None else self.op.read_all()[0]
            self.future.set_result(self.op.response(reads))
        except Exception as e:  # noqa: BLE001 - surfaces as a handler error
            self.future.set_exception(e)

    def on_expiration(self) -> None:
        pass


def handle_fetch(broker: Broker, ctx: RequestContext, req: messages.FetchRequest) -> Any:
    version = ctx.api_version
    uses_ids = version >= 13
    wanted: dict[PartitionKey, PartitionRequest] = {}
    for t in req.topics:
        ref = t.topic_id if uses_ids else t.topic
        for p in t.partitions:
            wanted[(ref, p.partition)] = PartitionRequest(
                fetch_offset=p.fetch_offset,
                max_bytes=p.partition_max_bytes,
                log_start_offset=p.log_start_offset,
                current_leader_epoch=p.current_leader_epoch,
                last_fetched_epoch=p.last_fetched_epoch,
            )
    forgotten: list[PartitionKey] = []
    for ft in req.forgotten_topics_data:
        ref = ft.topic_id if uses_ids else ft.topic
        forgotten.extend((ref, i) for i in ft.partitions)
    session_id, epoch = (req.session_id, req.session_epoch) if version >= 7 else (0, -1)
    context = broker.fetch_sessions.new_context(
        session_id, epoch, wanted, forgotten, uses_topic_ids=uses_ids, now_ms=broker.clock.monotonic_ms()
    )
    cls = messages.FetchResponse
    if context.error_code:
        return cls(throttle_time_ms=0, error_code=context.error_code, session_id=0, responses=[])
    op = FetchOperation(broker, req, version, context, ctx)
    reads, total, any_error = op.read_all()
    if req.max_wait_ms <= 0 or total >= req.min_bytes or any_error or not op.partitions:
        return op.response(reads)
    future = asyncio.get_running_loop().create_future()
    delayed = DelayedFetch(op, req.max_wait_ms, future)
    broker.fetch_purgatory.try_complete_else_watch(delayed, op.watch_keys())
    return future


def register(table: HandlerTable) -> None:
    table.add("Fetch", handle_fetch)
