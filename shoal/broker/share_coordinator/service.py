"""The share coordinator: where the delivery state of share-partitions lives.

Why it exists: a share-partition leader keeps its in-flight records in
memory, but which offsets are finished, released or archived (and how often
each was delivered) must outlive the leader. Kafka gives that state its own
coordinator on its own internal topic, `__share_group_state`, found with
FindCoordinator key type SHARE. Its callers are the group coordinator
(initialize when a share group starts consuming a partition, delete when the
group or topic goes), the share-partition leaders (read on first fetch,
write after acknowledgements and lock timeouts) and admin paths (the summary
for lag and offsets). All of them may call the async methods below in
process; remote callers use APIs 83-87 (shoal/broker/handlers/share_state.py).

Shape: the sans-IO `ShareStateShard` (one per partition of the topic) run by
the shared `CoordinatorRuntime`: each write is an operation of the shard
(initialize, read, write, delete) that validates against memory and returns
(records, result); the runtime (`submit`) appends the records as one batch
and replays them into the shard, and the answer waits until they are
durable (at most share.coordinator.write.timeout.ms, as Kafka). Load-in-progress and not-coordinator come back as error codes, never
as exceptions, so callers handle one kind of outcome.

Routing is Kafka's, so clients and tools agree on the coordinator: the key
is `group:topicId:partition` with the topic id in Kafka's text form
(URL-safe base64 without padding) and the partition is
`abs(javaHash(key)) % partitions`.

Rules applied here rather than in the shard (Kafka >= 4.1): a read or write
of a share-partition that was never initialized is INVALID_REQUEST (only
initialize creates state; the summary of an unknown key is the defaults),
and initializing, reading or writing a topic id or partition the broker
does not know is UNKNOWN_TOPIC_OR_PARTITION. Deleting state and reading a
summary skip that check (Kafka refuses a delete too): the state of a deleted
topic is tombstoned here when the topic goes, so the group coordinator's
later cleanup of it must succeed rather than retry forever.

Pruning instead of compaction: like Kafka, the topic is created with
cleanup.policy=delete and retention.ms=-1. Every
share.coordinator.state.topic.prune.interval.ms the coordinator asks each
shard for the lowest offset a replay still needs (each live key's latest
ShareSnapshot; the log end when no key is live), makes the log durable up
to its end, and moves the partition's log start there (DeleteRecords). A
restart then replays only what still matters.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from shoal.broker.coordinator.runtime import CoordinatorRuntime, OnDurable, Operation
from shoal.broker.coordinator.shard import Record, partition_for
from shoal.broker.errors import ErrorAnswer
from shoal.broker.log import LogError
from shoal.broker.share_coordinator.shard import (
    DEFAULT_STATE_EPOCH,
    UNINITIALIZED_START_OFFSET,
    ReadResult,
    ShareStateShard,
    SummaryResult,
)
from shoal.protocol.coordinator_records import serde
from shoal.protocol.errors import ErrorCode

log = logging.getLogger("shoal.share.coordinator")

TOPIC = "__share_group_state"

# Error text for the refusals Kafka explains in the response (our wording).
UNINITIALIZED_READ = "the share-partition has no state yet: it must be initialized before it is read"
UNINITIALIZED_WRITE = "the share-partition has no state yet: it must be initialized before it is written"
EMPTY_GROUP = "the group id must not be empty"
NEGATIVE_PARTITION = "the partition index must not be negative"
BAD_STATE = "the start offset or state batches are invalid (ranges must be ordered, disjoint, states 0/2/4)"

Outcome = tuple[ErrorCode, str | None]


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def coordinator_key(group: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey coordinator key: what FindCoordinator(SHARE) hashes."""
    return f"{group}:{kafka_uuid(topic_id)}:{partition}"


def state_partition(group: str, topic_id: uuid.UUID, partition: int, partitions: int) -> int:
    """The __share_group_state partition of a share-partition, given the topic's partition count."""
    return partition_for(coordinator_key(group, topic_id, partition), partitions)


def _error(code: int, message: str | None = None) -> Outcome:
    error = ErrorCode(code)
    return error, message if message is not None else error.message


class ShareCoordinator:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        cfg = broker.config
        self.snapshot_every: int = cfg.get("share.coordinator.snapshot.update.records.per.snapshot")
        self.write_timeout_s: float = cfg.get("share.coordinator.write.timeout.ms") / 1000
        self.prune_interval_ms: int = cfg.get("share.coordinator.state.topic.prune.interval.ms")
        self.runtime = CoordinatorRuntime(
            broker,
            TOPIC,
            cfg.get("share.coordinator.state.topic.num.partitions"),
            serde("share"),
            self._make_shard,
            {
                "cleanup.policy": "delete",
                "retention.ms": "-1",
                "segment.bytes": str(cfg.get("share.coordinator.state.topic.segment.bytes")),
                "compression.type": "producer",
            },
        )
        self._prune_task: asyncio.Task | None = None

    def _make_shard(self, partition: int) -> ShareStateShard:
        return ShareStateShard(partition, snapshot_every=self.snapshot_every, now_ms=self.broker.clock.now_ms)

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        """Create the topic if needed, load it in the background, start pruning."""
        self.runtime.start()
        self._prune_task = asyncio.create_task(self._prune_loop())

    def close(self) -> None:
        self.runtime.close()
        if self._prune_task is not None:
            self._prune_task.cancel()

    @property
    def loaded(self) -> asyncio.Event:
        return self.runtime.loaded

    # -- routing -----------------------------------------------------------------
    def key_partition(self, group: str, topic_id: uuid.UUID, partition: int) -> int:
        """The __share_group_state partition holding this share-partition's state."""
        return state_partition(group, topic_id, partition, self.runtime.num_partitions)

    def _check(self, group: str, topic_id: uuid.UUID, partition: int, *, exists: bool = True) -> Outcome | None:
        """Field checks, and (`exists`) that the topic-partition is known. None: fine."""
        if not group:
            return _error(ErrorCode.INVALID_REQUEST, EMPTY_GROUP)
        if partition < 0:
            return _error(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION)
        if not exists:
            return None
        topic = self.broker.topics.by_id(topic_id)
        if topic is None or partition >= len(topic.partitions):
            return _error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return None

    def _shard(self, group: str, topic_id: uuid.UUID, partition: int) -> tuple[int, ShareStateShard]:
        """(partition, loaded shard); raises COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR."""
        p = self.key_partition(group, topic_id, partition)
        return p, self.runtime.shard(p)

    async def _run(self, p: int, op: Operation) -> tuple[Any, Outcome | None]:
        """Run `op` through the runtime (append + replay now); wait (bounded) until durable.

        Returns (op's result, None) once its records are durable (at once
        without records), or (None, the error) when the write failed.
        """
        result, fut, failed = self._begin(p, op)
        if failed is not None:
            return None, failed
        return result, await self._durable(p, fut)

    def _begin(
        self, p: int, op: Operation, on_durable: OnDurable | None = None
    ) -> tuple[Any, asyncio.Future | None, Outcome | None]:
        """The synchronous half of `_run`: (result, durable future or None, error or None);
        `on_durable` as the runtime's ``submit`` takes it."""
        try:
            self.runtime.shard(p)
        except ErrorAnswer as e:  # loading, or not (any more) the coordinator: no write tried
            return None, None, _error(e.code)
        try:
            result, fut = self.runtime.submit(p, op, on_durable)
        except ErrorAnswer as e:
            log.error("%s-%d: append failed: %s", TOPIC, p, e)
            return None, None, _error(e.code, f"could not write share-group state: {e}")
        return result, fut, None

    async def _durable(self, p: int, fut: asyncio.Future | None) -> Outcome | None:
        """Wait (at most share.coordinator.write.timeout.ms) until `fut` says the write is durable."""
        if fut is None:
            return None
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.write_timeout_s)
        except TimeoutError:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "share-group state write timed out")
        except ErrorAnswer as e:
            log.error("%s-%d: state not made durable: %s", TOPIC, p, e)
            return _error(e.code, f"could not write share-group state: {e}")
        return None

    # -- operations, with the error text Kafka puts in responses --------------------
    async def initialize_state(
        self, group: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start_offset: int
    ) -> Outcome:
        """InitializeShareGroupState for one share-partition."""
        bad = self._check(group, topic_id, partition)
        if bad is not None:
            return bad
        p = self.key_partition(group, topic_id, partition)
        error, failed = await self._run(
            p, lambda s: s.initialize(group, topic_id, partition, state_epoch, start_offset)
        )
        if failed is not None:
            return failed
        if error != ErrorCode.NONE:
            return _error(error, BAD_STATE if error == ErrorCode.INVALID_REQUEST else None)
        return ErrorCode.NONE, None

    async def read_state(
        self, group: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> tuple[ReadResult, str | None]:
        """ReadShareGroupState: the state, recording a newer leader epoch durably."""

        def failed(outcome: Outcome) -> tuple[ReadResult, str | None]:
            return ReadResult(DEFAULT_STATE_EPOCH, UNINITIALIZED_START_OFFSET, [], outcome[0]), outcome[1]

        bad = self._check(group, topic_id, partition)
        if bad is not None:
            return failed(bad)

        def op(shard: ShareStateShard) -> tuple[list[Record], ReadResult | None]:
            if shard.state(group, topic_id, partition) is None:
                return [], None
            return shard.read(group, topic_id, partition, leader_epoch)

        p = self.key_partition(group, topic_id, partition)
        result, not_durable = await self._run(p, op)
        if not_durable is not None:
            return failed(not_durable)
        if result is None:
            return failed(_error(ErrorCode.INVALID_REQUEST, UNINITIALIZED_READ))
        if result.error != ErrorCode.NONE:
            return failed(_error(result.error))
        return result, None

    async def write_state(
        self,
        group: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Iterable[Any],
        delivery_complete_count: int = -1,
    ) -> Outcome:
        """WriteShareGroupState: merge the changed ranges (and a new start offset)."""
        return await self.submit_write(
            group, topic_id, partition, state_epoch, leader_epoch, start_offset, batches, delivery_complete_count
        )

    def submit_write(
        self,
        group: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Iterable[Any],
        delivery_complete_count: int = -1,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> asyncio.Future[Outcome]:
        """`write_state` whose append happens now: the records are in the log (and the shard)
        when this returns, and the future gives the outcome once they are durable (or the
        write timed out). A share partition leader pipelines its writes with it
        (``share.write_pipeline``): the next write is appended while this one's fsync runs,
        and they become durable in order. Plain callbacks, no task: each hop between the
        flusher and the waiter is one more turn of the loop; ``on_outcome`` is called with the
        outcome as the future gets it (in this call, when it is known at once), saving one more."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome] = loop.create_future()

        def settle(outcome: Outcome) -> None:  # the future, then on_outcome in the same turn
            if future.done():
                return
            future.set_result(outcome)
            if on_outcome is not None:
                on_outcome(outcome)

        bad = self._check(group, topic_id, partition)
        if bad is not None:
            settle(bad)
            return future

        def op(shard: ShareStateShard) -> tuple[list[Record], ErrorCode | None]:
            if shard.state(group, topic_id, partition) is None:
                return [], None
            return shard.write(
                group, topic_id, partition, state_epoch, leader_epoch, start_offset, batches, delivery_complete_count
            )

        p = self.key_partition(group, topic_id, partition)
        # The runtime reports durability through `hook` in the turn it is known; the future's
        # done-callback below (one loop turn later) is only the fallback for a cancelled future.
        hook: list[OnDurable] = []
        error, fut, failed = self._begin(p, op, lambda e: hook[0](e) if hook else None)
        if failed is not None:
            settle(failed)
            return future
        if error is None:
            written = _error(ErrorCode.INVALID_REQUEST, UNINITIALIZED_WRITE)
        elif error != ErrorCode.NONE:
            written = _error(error, BAD_STATE if error == ErrorCode.INVALID_REQUEST else None)
        else:
            written = (ErrorCode.NONE, None)
        if fut is None or (fut.done() and not fut.cancelled() and fut.exception() is None):
            settle(written)
            return future

        def timed_out() -> None:
            if not future.done():
                settle(_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "share-group state write timed out"))

        timer = loop.call_later(self.write_timeout_s, timed_out)

        def durable(e: BaseException | None) -> None:
            timer.cancel()
            if future.done():
                return
            if e is None:
                settle(written)
                return
            log.error("%s-%d: state not made durable: %s", TOPIC, p, e)
            code = e.code if isinstance(e, ErrorAnswer) else ErrorCode.UNKNOWN_SERVER_ERROR
            settle(_error(code, f"could not write share-group state: {e}"))

        def done(f: asyncio.Future) -> None:
            failure = None if f.cancelled() else f.exception()  # read, or asyncio logs it as never retrieved
            if future.done():
                return
            if f.cancelled():
                timer.cancel()
                settle(_error(ErrorCode.NOT_COORDINATOR, "share-group state write cancelled"))
                return
            durable(failure)

        hook.append(durable)
        fut.add_done_callback(done)
        return future

    async def delete_state(self, group: str, topic_id: uuid.UUID, partition: int) -> Outcome:
        """DeleteShareGroupState: tombstones (deleting unknown state succeeds)."""
        bad = self._check(group, topic_id, partition, exists=False)
        if bad is not None:
            return bad
        p = self.key_partition(group, topic_id, partition)
        error, failed = await self._run(p, lambda s: s.delete(group, topic_id, partition))
        if failed is not None:
            return failed
        if error != ErrorCode.NONE:
            return _error(error)
        return ErrorCode.NONE, None

    async def read_state_summary(
        self, group: str, topic_id: uuid.UUID, partition: int, leader_epoch: int = -1
    ) -> tuple[SummaryResult, str | None]:
        """ReadShareGroupStateSummary: epochs, start offset, completed count (writes nothing)."""

        def failed(outcome: Outcome) -> tuple[SummaryResult, str | None]:
            return SummaryResult(DEFAULT_STATE_EPOCH, -1, UNINITIALIZED_START_OFFSET, -1, outcome[0]), outcome[1]

        bad = self._check(group, topic_id, partition, exists=False)
        if bad is not None:
            return failed(bad)
        try:
            _, shard = self._shard(group, topic_id, partition)
        except ErrorAnswer as e:
            return failed(_error(e.code))
        _, result = shard.read_summary(group, topic_id, partition, leader_epoch)
        if result.error != ErrorCode.NONE:
            return failed(_error(result.error))
        return result, None

    # -- the in-process API (error codes only) ------------------------------------------
    async def initialize(
        self, group: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start_offset: int
    ) -> ErrorCode:
        return (await self.initialize_state(group, topic_id, partition, state_epoch, start_offset))[0]

    async def read(self, group: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ReadResult:
        return (await self.read_state(group, topic_id, partition, leader_epoch))[0]

    async def write(
        self,
        group: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Iterable[Any],
        delivery_complete_count: int = -1,
    ) -> ErrorCode:
        outcome = await self.write_state(
            group, topic_id, partition, state_epoch, leader_epoch, start_offset, batches, delivery_complete_count
        )
        return outcome[0]

    async def delete(self, group: str, topic_id: uuid.UUID, partition: int) -> ErrorCode:
        return (await self.delete_state(group, topic_id, partition))[0]

    async def read_summary(
        self, group: str, topic_id: uuid.UUID, partition: int, leader_epoch: int = -1
    ) -> SummaryResult:
        return (await self.read_state_summary(group, topic_id, partition, leader_epoch))[0]

    # -- topic deletion ------------------------------------------------------------------
    def on_topic_deleted(self, topic_id: uuid.UUID) -> None:
        """The state of every share-partition of a deleted topic goes (tombstones)."""
        for p in list(self.runtime.shards):
            try:
                _, fut = self.runtime.submit(p, lambda shard: shard.delete_topic(topic_id))
            except ErrorAnswer as e:
                log.error("%s-%d: tombstoning state of deleted topic %s failed: %s", TOPIC, p, topic_id, e)
                continue
            if fut is not None:
                fut.add_done_callback(_log_failure(f"tombstoning state of deleted topic {topic_id}"))

    # -- pruning -------------------------------------------------------------------------
    async def _prune_loop(self) -> None:
        await self.runtime.loaded.wait()
        while True:
            await asyncio.sleep(self.prune_interval_ms / 1000)
            await self.prune()

    async def prune(self) -> dict[int, int]:
        """Move each partition's log start up to its redundant offset.

        The log is made durable up to its end first: the snapshots that make
        the prefix redundant must be on disk before the prefix goes. Records
        appended meanwhile only supersede more. Returns {partition: new start}
        for the partitions that moved.
        """
        moved: dict[int, int] = {}
        for p, shard in list(self.runtime.shards.items()):
            partition = self.runtime.partition(p)
            end = partition.log.pending_end_offset  # writes on the log writer thread count
            target = shard.redundant_offset(end)
            if target <= partition.log_start_offset:
                continue
            try:
                await self.broker.flusher.flush(partition.log, end)
                if partition.advance_log_start(target):
                    moved[p] = partition.log_start_offset
            except (OSError, RuntimeError, LogError, ErrorAnswer) as e:
                log.error("%s-%d: pruning to %d failed: %s", TOPIC, p, target, e)
        if moved:
            log.info("pruned %s: %s", TOPIC, ", ".join(f"{p}->{o}" for p, o in sorted(moved.items())))
        return moved


def _log_failure(what: str) -> Callable[[asyncio.Future], None]:
    def done(fut: asyncio.Future) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("%s failed: %r", what, exc)

    return done
