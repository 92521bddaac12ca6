"""The coordinator runtime: internal-topic partitions as event-sourced state.

Every coordinator (group coordinator on __consumer_offsets, share coordinator
on __share_group_state) keeps its state in shards, one per partition of its
internal topic. Every write goes through one path, `submit` (or `write`, its
awaiting form):

    operation(shard) -> (records, result)
    append the records to the shard's partition (one batch)
    replay the same records into the shard
    answer `result` once the append is durable (group-committed fsync)

Durable means what it means for an acks=-1 produce: fsynced while
log.flush.interval.ms is unset (Shoal's default, ``fsync_acks_all``; the
internal topics then have a log writer thread of their own that writes and
fsyncs each batch in one trip, ``Broker.coordinator_writer``), and
written to the log (the page cache) once the user chose periodic flushing;
the internal topic is then fsynced by the flush settings like any other.
That is Kafka's behaviour: its coordinators append to their partition's
leader and answer when the high watermark passes the batch, with no fsync of
their own (on one broker that is at once).

The records an operation returns are the whole durable change: a restart
replays them and nothing else. For committed offsets and share-partition
state the operation only validates, and memory changes by replay alone.
Group membership also keeps live objects, as Kafka's group metadata manager
does: pending joins, tokens of waiting requests and session deadlines live
only there, and a membership operation changes them before it returns its
records. Replaying those records live does not touch the live group objects:
it updates the shard's image of what the log holds for each group (the
record values), which is what a restart rebuilds the groups from. The
operations keep the two equal: a classic group at rest (Stable or Empty)
and every share group match the image their records left (the replay-
equivalence tests check this against fresh replays and real restarts).

Either way the log is the truth. At start-up each partition is read from its
log start and replayed, and until then the shard answers
COORDINATOR_LOAD_IN_PROGRESS. A write the log refuses reverts the shard to
its log (it is dropped and replayed again, as Kafka's runtime reverts its
in-memory state to the last written offset), so a failed write never leaves
a change in memory that a restart would not have. Operations on one shard
run to completion synchronously (asyncio is single-threaded), so writes to a
partition are serialized; only the durability wait is asynchronous, and
answers for one partition become durable in order. Replay is bounded by live
state: __consumer_offsets is compacted; __share_group_state (as in Kafka) is
not, its coordinator prunes the log below the oldest snapshot still needed.

A shard is any object with `replay(record, offset)` (``shard.Shard``);
coordinators define their shards as sans-IO classes, on ``shard``'s terms.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from shoal.broker.coordinator.shard import Record, Shard, partition_for
from shoal.broker.coordinator.write_errors import write_failure
from shoal.broker.errors import ErrorAnswer
from shoal.broker.log.flusher import Relay
from shoal.protocol.coordinator_records import CoordinatorRecord, RecordSerde
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.records import build_batch

if TYPE_CHECKING:
    from shoal.broker.partition.partition import Partition

log = logging.getLogger("shoal.coordinator")

# An operation: from the shard, the records to write (one batch) and the answer.
Operation = Callable[[Any], tuple[Sequence[Record], Any]]
# Told a write's outcome in the turn it is known: None (durable) or the error its future fails with.
OnDurable = Callable[[BaseException | None], None]


class CoordinatorRuntime:
    def __init__(
        self,
        broker: Any,
        topic: str,
        num_partitions: int,
        serde: RecordSerde,
        make_shard: Callable[[int], Shard],
        topic_configs: dict[str, str],
        on_loaded: Callable[[int, Any], None] | None = None,
        on_unloaded: Callable[[int, Any, int], None] | None = None,
    ) -> None:
        self.broker = broker
        self.topic = topic
        self.num_partitions = num_partitions
        self.serde = serde
        self._make_shard = make_shard
        self._on_loaded = on_loaded  # (p, shard): a shard was (re)loaded and serves from now on
        self._on_unloaded = on_unloaded  # (p, old shard, error): dropped after a failed write; fail its waiters
        self._topic_configs = topic_configs
        self.shards: dict[int, Shard] = {}
        self._loading: set[int] = set()
        self._load_task: asyncio.Task | None = None
        self.loaded = asyncio.Event()
        self.load_ms: dict[int, float] = {}  # partition -> ms its latest load (replay) took, for /metrics
        # Writes wait for an fsync only while acks=-1 produces do (log.flush.interval.ms unset).
        self._fsync: bool = bool(getattr(broker.config, "fsync_acks_all", True))

    # -- start-up --------------------------------------------------------------
    def start(self) -> None:
        """Create the internal topic if needed and replay every partition (in the background)."""
        topics = self.broker.topics
        topic = topics.get(self.topic)
        if topic is None:
            topic = topics.create(self.topic, self.num_partitions, self._topic_configs)
        elif len(topic.partitions) != self.num_partitions:
            log.warning(
                "%s has %d partitions, settings say %d: using the topic's",
                self.topic,
                len(topic.partitions),
                self.num_partitions,
            )
            self.num_partitions = len(topic.partitions)
        self._loading = set(range(self.num_partitions))
        self._load_task = asyncio.create_task(self._load_all())

    async def _load_all(self) -> None:
        loop = asyncio.get_running_loop()
        faults = getattr(self.broker, "faults", None)  # a test holding the load (FaultInjector.hold_loading)
        while faults is not None and faults.loading_held(self.topic):
            await asyncio.sleep(0.01)
        started = loop.time()
        records = 0
        for p in range(self.num_partitions):
            records += self._load(p)
            await asyncio.sleep(0)  # let other work run between partitions
        self.loaded.set()
        log.info("loaded %s: %d records replayed in %.3f s", self.topic, records, loop.time() - started)

    def _load(self, p: int) -> int:
        """Replay partition p into a new shard, which then serves; returns the records replayed."""
        started = time.perf_counter()
        shard = self._make_shard(p)
        n = self._replay_partition(p, shard)
        self.load_ms[p] = (time.perf_counter() - started) * 1000.0
        self.shards[p] = shard
        self._loading.discard(p)
        if self._on_loaded is not None:
            self._on_loaded(p, shard)
        return n

    def _revert(self, p: int, error: int) -> None:
        """Memory back to what the log holds, after a write that did not reach it.

        The operation that failed (and possibly others before it in this loop
        turn) changed the shard's objects before asking for the append. As
        Kafka's runtime reverts its in-memory state to the last written offset,
        the shard is dropped and replayed from its log; meanwhile it answers
        COORDINATOR_LOAD_IN_PROGRESS, and clients retry. Requests waiting on the
        dropped shard get the failed write's `error`, as Kafka fails the writes
        queued behind a failed batch.
        """
        old = self.shards.pop(p, None)
        if old is None:
            return
        self._loading.add(p)
        if self._on_unloaded is not None:
            self._on_unloaded(p, old, error)
        if self.partition(p).offline:
            self._loading.discard(p)  # its log failed: the partition stays resigned (NOT_COORDINATOR)
            return
        asyncio.get_running_loop().call_soon(self._reload, p)

    def _reload(self, p: int) -> None:
        if p not in self._loading or p in self.shards:
            return
        try:
            n = self._load(p)
        except Exception:
            log.exception("%s-%d: reloading after a failed write failed", self.topic, p)
            self._loading.discard(p)
            return
        log.info("%s-%d: reloaded from its log after a failed write (%d records)", self.topic, p, n)

    def _replay_partition(self, p: int, shard: Shard) -> int:
        partition = self.partition(p)
        n = 0
        for header, view in partition.log.scan(partition.log_start_offset):
            if header.is_control:
                continue
            for rec in header.records():
                try:
                    decoded = self.serde.decode(rec.key, rec.value)
                except ProtocolError as e:
                    log.error("%s-%d offset %d: skipping undecodable record: %s", self.topic, p, rec.offset, e)
                    continue
                shard.replay(decoded, rec.offset)
                n += 1
            view.release()
        return n

    def close(self) -> None:
        if self._load_task is not None:
            self._load_task.cancel()

    # -- routing ---------------------------------------------------------------
    def partition_of(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def partition(self, p: int) -> Partition:
        topic = self.broker.topics.get(self.topic)
        return topic.partitions[p]

    def shard(self, p: int) -> Any:
        """The loaded shard of partition p, or COORDINATOR_LOAD_IN_PROGRESS (NOT_COORDINATOR when offline)."""
        shard = self.shards.get(p)
        if shard is None:
            if p in self._loading:
                raise ErrorAnswer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            raise ErrorAnswer(ErrorCode.NOT_COORDINATOR)
        if self.partition(p).offline:  # its log directory failed: Kafka's coordinator resigns the partition
            raise ErrorAnswer(ErrorCode.NOT_COORDINATOR, f"{self.topic}-{p} is offline")
        return shard

    def shard_for(self, key: str) -> Any:
        return self.shard(self.partition_of(key))

    # -- writes ----------------------------------------------------------------
    def submit(self, p: int, op: Operation, on_durable: OnDurable | None = None) -> tuple[Any, asyncio.Future | None]:
        """Run `op` on partition p's shard and persist its records: (result, durable future).

        The records (if any) are appended as one batch and replayed into the
        shard before this returns; the future (None when there were no
        records) resolves once they are durable. A write the log refuses
        (records that cannot be encoded, a batch too large, a disk error)
        raises ErrorAnswer with the error a client of the coordinator
        gets, and reverts the shard to its log (`_revert`), so no change the
        operation made in memory outlives the failed write. The future fails
        the same way when the fsync fails; the log directory is then offline
        and the partition answers NOT_COORDINATOR until a restart, which
        replays the batch only if it reached the disk whole (a torn batch
        fails its CRC and is cut): never half an operation.

        `on_durable`, when given, is called with the outcome (None, or the
        error the future fails with) in the turn of the loop the outcome is
        known, right after the future is settled: a caller that only passes
        the outcome on saves the loop turn a future's done-callback waits for.
        """
        shard = self.shard(p)
        records, result = op(shard)
        if not records:
            return result, None
        return result, self._append(p, shard, records, on_durable)

    async def write(self, p: int, op: Operation) -> Any:
        """`submit`, answering `op`'s result once its records are durable."""
        result, durable = self.submit(p, op)
        if durable is not None:
            await durable
        return result

    def _append(self, p: int, shard: Shard, records: Sequence[Record], on_durable: OnDurable | None) -> asyncio.Future:
        partition = self.partition(p)
        plog = partition.log
        now = self.broker.clock.now_ms()
        serde = self.serde
        durable = asyncio.get_running_loop().create_future()
        try:
            encoded = [
                (
                    serde.encode_key(r.name, r.key),
                    serde.encode_value(r.name, r.value, r.value_version),
                    [],
                    now,
                )
                for r in records
            ]
            batch = build_batch(encoded)
            if plog.writer is not None:  # `end` is set below; completions come on a later loop turn
                info = plog.append_async(
                    batch, lambda error: self._written(p, partition, end, durable, error, on_durable), now_ms=now
                )
            else:
                info = plog.append(batch, now_ms=now)
        except Exception as e:
            log.error("%s-%d: a coordinator write failed: %r", self.topic, p, e)
            failure = write_failure(e)
            self._revert(p, failure.code)
            raise failure from e
        end = info.last_offset + 1
        for i, r in enumerate(records):
            rt = serde.record_type(r.name)
            version = r.value_version if r.value_version is not None else serde.latest_value_version(r.name)
            shard.replay(CoordinatorRecord(rt, r.key, r.value, version), info.first_offset + i)
        if plog.writer is None:
            self._written(p, partition, end, durable, None, on_durable)
        return durable

    def _written(
        self,
        p: int,
        partition: Partition,
        end: int,
        durable: asyncio.Future,
        error: BaseException | None,
        on_durable: OnDurable | None = None,
    ) -> None:
        """A coordinator batch reached the log (the page cache), or failed to: make `durable` follow."""
        if error is None and partition.log.failed is not None:  # written, but the directory went offline
            error = partition.log.failed
        if error is not None:
            log.error("%s-%d: a coordinator write failed: %r", self.topic, p, error)
            failure = write_failure(error)
            self._revert(p, failure.code)
            if not durable.done():
                durable.set_exception(failure)
                if on_durable is not None:
                    on_durable(failure)
            return
        self.broker.on_append(partition)
        if not self._fsync:
            _settle(durable, None, on_durable)
            return
        # straight into `durable` (no future between): each future is one more loop turn
        self.broker.flusher.flush(partition.log, end, into=Relay(lambda error: _settle(durable, error, on_durable)))

    def barrier(self, p: int) -> asyncio.Future | None:
        """A future for "everything written to partition p so far is durable", or None if it is.

        A read-only operation answers after this, so it never reports state
        whose records a crash could still lose. Writes still on the log writer
        thread count: the flusher waits for them (without fsync, only they are waited for).
        """
        log_ = self.partition(p).log
        end = log_.pending_end_offset
        if self._fsync:
            if log_.recovery_point >= end:
                return None
            return self.broker.flusher.flush(log_, end)
        if end <= log_.log_end_offset:
            return None
        fut = asyncio.get_running_loop().create_future()
        log_.when_written(end, lambda error: _settle(fut, error))
        return fut


def _settle(fut: asyncio.Future, error: BaseException | None, then: OnDurable | None = None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        error = write_failure(error)
        fut.set_exception(error)
    if then is not None:
        then(error)
