"""``spark.read.format("shoal")``: a parallel batch reader over exact offset ranges.

Why it is built this way:

* **The driver plans, executors read.** ``partitions()`` runs once per query
  in Spark's planner process: it loads metadata, asks each partition leader
  for the earliest and latest offsets (and for offsets by timestamp when the
  options use times) with ListOffsets, resolves the options to exact ranges
  (``client.spark.offsets``) and splits them into tasks. Each task carries only
  ``topic, partition, start, end`` plus the options; executors open their own
  connection and read the range with Fetch from the partition's leader. This
  is the path for large backfills: the records never pass through the
  driver, and the parallelism is the number of tasks.
* **Exact ranges.** A task yields every record with ``start <= offset < end``
  and nothing else, whatever batches the broker returns (a fetch starts at the
  batch containing ``start`` and may run past ``end``). Offsets with no
  record (compaction, transaction markers) are skipped by batch bounds, so a
  task never waits for an offset that will not come. If the range cannot be
  read completely (records deleted by retention meanwhile, log truncated),
  the task fails naming ``failOnDataLoss`` unless it is false, in which case
  the missing records are skipped, as in Spark's Kafka source.
* **Arrow out.** Each fetch becomes one ``pyarrow.RecordBatch``
  (``client.spark.rows``); Spark takes it without per-row conversion.
* **One event loop per call.** Planner and executor code is synchronous
  (Spark calls it from plain threads); each call runs the bundled client's
  coroutines on a private event loop and closes it afterwards, so nothing
  outlives the task.

``kafka.isolation.level=read_committed`` ends ranges at the last stable
offset and drops records of aborted transactions, like a Kafka consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from shoal.client.core.client_core import ClientCore, metadata_stale
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import Config
from shoal.client.core.errors import (
    BrokerResponseError,
    ConfigError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
)
from shoal.client.spark.offsets import (
    OffsetRange,
    check_known_partitions,
    resolve_ranges,
    split_ranges,
    timestamps_to_look_up,
)
from shoal.client.spark.options import SourceOptions
from shoal.client.spark.rows import Piece, RowColumns, arrow_schema
from shoal.client.spark.worker import settle_worker
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import IsolationLevel, ListOffsetsTimestamp
from shoal.protocol.errors import ErrorCode

__all__ = [
    "DataLossError",
    "RangePartition",
    "ShoalBatchReader",
    "list_offsets",
    "plan_ranges",
    "range_chunks",
    "read_range",
]

log = logging.getLogger("shoal.spark")

_TOPIC_WAIT_MS = 10000


class DataLossError(KafkaClientError):
    """Records of a planned range are gone (deleted or truncated) and failOnDataLoss is true."""


class RangePartition(InputPartition):
    """One Spark task: the records ``start <= offset < end`` of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"RangePartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def run_sync(coro_fn: Any) -> Any:
    """Run ``await coro_fn()`` on a private event loop (Spark calls us from plain threads)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


class ShoalBatchReader(DataSourceReader):
    """The batch reader: ranges planned on the driver, read with Fetch on executors."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options.for_batch()
        self.config = self.options.batch_client_config()
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        ranges = run_sync(lambda: plan_ranges(opts, self.config))
        tasks = split_ranges(ranges, min_partitions=opts.min_partitions, max_records=opts.max_records_per_partition)
        return [RangePartition(r.topic, r.partition, r.start, r.end) for r in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, RangePartition):
            return  # Spark's placeholder task when nothing is to be read
        settle_worker()
        rng = OffsetRange(partition.topic, partition.partition, partition.start, partition.end)
        columns = RowColumns(arrow_schema(self.schema))
        for _ in range_chunks(self.config, rng, columns, fail_on_data_loss=self.options.fail_on_data_loss):
            yield columns.batch()


def range_chunks(
    config: Config,
    rng: OffsetRange,
    columns: RowColumns,
    pieces: Sequence[Piece] | None = None,
    *,
    fail_on_data_loss: bool = True,
    connect_ms: float = 0,
) -> Iterator[int]:
    """``read_range`` for synchronous callers (executor tasks): a private loop and connection,
    both closed when the iteration ends or is abandoned. ``connect_ms``: how long to keep trying
    to reach the cluster (a stream's task outlives a broker restart; a batch read fails fast)."""
    loop = asyncio.new_event_loop()
    core = ClientCore(config)
    chunks = read_range(core, rng, columns, pieces, fail_on_data_loss=fail_on_data_loss)
    try:
        loop.run_until_complete(_connect(core, connect_ms))
        while True:
            try:
                rows = loop.run_until_complete(anext(chunks))
            except StopAsyncIteration:
                break
            yield rows
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(chunks.aclose())
        with contextlib.suppress(Exception):
            loop.run_until_complete(core.close())
        loop.close()


async def _connect(core: ClientCore, budget_ms: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_ms / 1000
    delay = core.config["retry.backoff.ms"] / 1000
    while True:
        try:
            await core.start()
            return
        except KafkaConnectionError:
            if loop.time() + delay >= deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, core.config["retry.backoff.max.ms"] / 1000)


# -- planning (driver) --------------------------------------------------------------------
async def plan_ranges(opts: SourceOptions, config: Config) -> list[OffsetRange]:
    """Exact ranges for every partition of the subscribed topics."""
    assert opts.starting is not None and opts.ending is not None
    async with _started(config) as core:
        try:
            await core.wait_for_topics(opts.topics, timeout_ms=min(_TOPIC_WAIT_MS, config["default.api.timeout.ms"]))
        except (KafkaTimeoutError, BrokerResponseError) as e:
            missing = [t for t in opts.topics if not core.metadata.partitions_for(t)]
            raise ConfigError("subscribe", f"topics not found or without leaders: {', '.join(missing)} ({e})") from e
        partitions = [TopicPartition(t, p) for t in opts.topics for p in core.metadata.partitions_for(t) or ()]
        check_known_partitions(opts.starting, partitions)
        check_known_partitions(opts.ending, partitions)
        isolation = IsolationLevel.of_setting(config["isolation.level"])
        earliest = await list_offsets(core, dict.fromkeys(partitions, ListOffsetsTimestamp.EARLIEST), isolation)
        latest = await list_offsets(core, dict.fromkeys(partitions, ListOffsetsTimestamp.LATEST), isolation)
        start_times = timestamps_to_look_up(opts.starting, partitions)
        end_times = timestamps_to_look_up(opts.ending, partitions)
        start_by_time = await list_offsets(core, start_times, isolation) if start_times else None
        end_by_time = await list_offsets(core, end_times, isolation) if end_times else None
    return resolve_ranges(
        partitions,
        opts.starting,
        opts.ending,
        earliest=earliest,
        latest=latest,
        start_by_time=start_by_time,
        end_by_time=end_by_time,
        timestamp_strategy=opts.starting_timestamp_strategy,
        fail_on_data_loss=opts.fail_on_data_loss,
    )


@contextlib.asynccontextmanager
async def _started(config: Config) -> AsyncIterator[ClientCore]:
    core = ClientCore(config)
    try:
        await core.start()
        yield core
    finally:
        await core.close()


async def list_offsets(
    core: ClientCore, wanted: Mapping[TopicPartition, int], isolation: int = 0
) -> dict[TopicPartition, int]:
    """ListOffsets for ``{tp: timestamp}`` (-2 earliest, -1 latest), asking each leader once.

    Returns ``{tp: offset}``; -1 means no record at or after the timestamp.
    """
    cls = api_by_name("ListOffsets").request_class()
    result: dict[TopicPartition, int] = {}

    async def ask(node: int, tps: list[TopicPartition]) -> list[tuple[TopicPartition, int, int]]:
        by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp)

        def build(version: int) -> Any:
            return cls(
                replica_id=-1,
                isolation_level=isolation,
                topics=[
                    cls.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            cls.ListOffsetsPartition(
                                partition_index=tp.partition, current_leader_epoch=-1, timestamp=wanted[tp]
                            )
                            for tp in group
                        ],
                    )
                    for topic, group in by_topic.items()
                ],
                timeout_ms=core.config["request.timeout.ms"],
            )

        resp = await core.send(node, "ListOffsets", build)
        return [
            (TopicPartition(t.name, p.partition_index), p.error_code, p.offset)
            for t in resp.topics
            for p in t.partitions
        ]

    async def once() -> None:
        pending = [tp for tp in wanted if tp not in result]
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in pending:
            by_leader[await core.leader_for(tp)].append(tp)
        answers = await asyncio.gather(*(ask(n, tps) for n, tps in by_leader.items()))
        failed = None
        for tp, code, offset in (a for group in answers for a in group):
            if code == 0:
                result[tp] = offset
            elif failed is None or metadata_stale(code):
                failed = BrokerResponseError(code, f"ListOffsets {tp}")
        if failed is not None:
            if metadata_stale(failed.error.code):
                await core.refresh_metadata()
            raise failed
        missing = [tp for tp in wanted if tp not in result]
        if missing:
            raise BrokerResponseError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no ListOffsets answer for {missing}")

    await core.retry(once, what="ListOffsets")
    return result


# -- reading (executors) ------------------------------------------------------------------
async def read_range(
    core: ClientCore,
    rng: OffsetRange,
    columns: RowColumns,
    pieces: Sequence[Piece] | None = None,
    *,
    fail_on_data_loss: bool = True,
) -> AsyncIterator[int]:
    """Append the records of ``rng`` to ``columns`` fetch by fetch, yielding after each fetch
    that added rows (how many). ``pieces``: only these (first, last, delivery count) ranges
    of ``rng`` become rows, with their counts; by default all of it, without a count."""
    cfg = core.config
    check_crcs = cfg["check.crcs"]
    if pieces is None:
        pieces = ((rng.start, rng.end - 1, None),)
    F = api_by_name("Fetch").request_class()
    tp = rng.tp
    isolation = IsolationLevel.of_setting(cfg["isolation.level"])
    offset = rng.start
    while offset < rng.end:

        async def fetch_once(at: int = offset) -> Any:
            leader = await core.leader_for(tp)
            topic_id = core.metadata.topic_id(tp.topic)

            def build(version: int) -> Any:
                part = F.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=-1,
                    fetch_offset=at,
                    log_start_offset=-1,
                    partition_max_bytes=cfg["max.partition.fetch.bytes"],
                )
                topic = F.FetchTopic(topic=tp.topic, topic_id=topic_id, partitions=[part])
                return F(
                    replica_id=-1,
                    max_wait_ms=cfg["fetch.max.wait.ms"],
                    min_bytes=1,
                    max_bytes=cfg["fetch.max.bytes"],
                    isolation_level=isolation,
                    session_id=0,
                    session_epoch=-1,
                    topics=[topic],
                )

            resp = await core.send(leader, "Fetch", build)
            if resp.error_code:
                raise BrokerResponseError(resp.error_code, f"Fetch {tp}")
            part = resp.responses[0].partitions[0]
            if part.error_code and part.error_code != ErrorCode.OFFSET_OUT_OF_RANGE:
                if metadata_stale(part.error_code):
                    await core.refresh_metadata()
                raise BrokerResponseError(part.error_code, f"Fetch {tp} at {at}")
            return part

        part = await core.retry(fetch_once, what=f"Fetch {tp}")
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if part.log_start_offset > offset and not fail_on_data_loss:
                log.warning(
                    "%s: offsets %d..%d are gone (log start %d); skipped (failOnDataLoss=false)",
                    tp, offset, min(part.log_start_offset, rng.end) - 1, part.log_start_offset,
                )  # fmt: skip
                offset = min(part.log_start_offset, rng.end)
                continue
            if offset >= part.high_watermark >= 0 and not fail_on_data_loss:
                log.warning(
                    "%s: the log ends at %d, offsets %d..%d are gone; skipped (failOnDataLoss=false)",
                    tp, part.high_watermark, offset, rng.end - 1,
                )  # fmt: skip
                return
            raise DataLossError(
                f"{tp}: offset {offset} is out of range (log start {part.log_start_offset}, "
                f"high watermark {part.high_watermark}); set failOnDataLoss=false to skip missing records"
            )
        aborted = None
        if isolation and part.aborted_transactions:
            aborted = [(a.producer_id, a.first_offset) for a in part.aborted_transactions]
        todo = [p for p in pieces if p[1] >= offset]
        if todo and todo[0][0] < offset:
            todo[0] = (offset, todo[0][1], todo[0][2])
        rows, next_offset = columns.add_fetched(
            tp.topic, tp.partition, part.records, todo, check_crcs=check_crcs, aborted_transactions=aborted
        )
        limit = part.last_stable_offset if isolation and part.last_stable_offset >= 0 else part.high_watermark
        part = None  # its buffer goes back to the connection's pool for the next answer
        if next_offset <= offset:
            if limit <= offset:
                # The log no longer reaches the planned end: records were truncated away.
                if not fail_on_data_loss:
                    log.warning(
                        "%s: the log ends at %d, offsets up to %d are gone; skipped (failOnDataLoss=false)",
                        tp, limit, rng.end - 1,
                    )  # fmt: skip
                    return
                raise DataLossError(
                    f"{tp}: the log ends at {limit} but the read was planned up to {rng.end}; "
                    "set failOnDataLoss=false to skip missing records"
                )
            continue  # nothing in this answer (a fetch that waited): ask again
        offset = next_offset
        if rows:
            yield rows
