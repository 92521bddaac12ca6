"""``spark.readStream.format("shoal")``: a share group as a Spark stream, acknowledged after Spark commits.

The guarantee: **at-least-once**. A record is ACCEPTed (gone from the share
group for good) only after the micro-batch that carried it is in Spark's
commit log, i.e. after the sink finished it. If anything fails before that --
the sink raises, the query is stopped or killed, the driver dies, a lock runs
out -- the record is released or its lock expires, and the broker delivers it
again, to this query after a restart or to any other member of the group,
with ``deliveryCount`` >= 2. With an idempotent sink keyed by
(topic, partition, offset), such as a MERGE on those columns, the result is
**exactly-once**. When nothing fails, every record is delivered once. Two
edges: a query stopped after a batch's commit but before its next trigger
releases that batch too (the acceptance is sent by the next trigger), and
after a broker restart redelivered records may still say ``deliveryCount``
1 (Kafka persists delivery counts only with acknowledgements).

Where records are read. A share group hands records to a group *member*,
with a lock held by that member; Spark's executors are not members and
cannot acknowledge, so the driver-side runner is the member. Its consumer is
an acquire-only one (``client.share.acquirer``): it keeps the
AcquiredRecords ranges of each ShareFetch answer -- (first, last, delivery
count) -- and never decodes a record. A batch's tasks are those ranges
(``client.spark.acquired``: a few numbers per task, identical on every
retry); each executor task fetches its ranges from the partition leader with
plain Fetch, keeps exactly the acquired offsets with their delivery counts
and builds Arrow. The driver's cost per batch does not grow with its rows,
and executors add throughput. A record deleted between the acquire and the
read follows ``failOnDataLoss``. An earlier driver read path (the runner
decoded the records and shipped each task's rows as Arrow IPC bytes) was
removed (issue #22): measured with ``benchmarks/spark_stream.py`` it lost
everywhere, e.g. 23,098 against 30,939 steady rows/s on ``local[2]`` and
20,748 against 27,619 on ``local-cluster[2,1,1024]``, with 19-20 us of
driver time per row against 2.4-2.5.

A micro-batch is at most what one poll returns: one ShareFetch
answer, i.e. at most ``kafka.fetch.max.bytes`` (the broker splits it evenly
across the partitions) and at most the group's
``share.partition.max.record.locks`` records per partition (the in-flight
limit: 2,000 by default, up to the broker's
``group.share.max.partition.max.record.locks``). Spark's cost per
micro-batch is a few tenths of a second whatever its size, so rows/s grow
with rows per batch: raise the group's in-flight limit for throughput.

How it maps onto Spark's Python stream-reader protocol (pyspark 4.x):

* Spark calls ``initialOffset``, ``latestOffset``, ``partitions`` and
  ``commit`` on the driver, in one long-lived "runner" process per query run,
  from its main thread. ``ShareRunner`` holds the ``AsyncShareAcquirer``
  (explicit acknowledgement) on its own asyncio loop in a daemon thread and
  the ``BatchLedger`` (shoal/client/spark/ledger.py); Spark's calls are submitted
  to that loop and waited for.
* ``latestOffset(start, limit)``: batches up to ``start`` are in the commit
  log (Spark calls it right after writing the log), so their records are
  ACCEPTed; then, when nothing else is held, one poll acquires records and up
  to ``limit`` of them become the next batch, whose counter is returned as
  the offset ``{"batch": n, "run": id}`` (the rest waits in the pool for the
  next batch). No records: ``start`` is returned and Spark plans nothing.
  ``commit(end)`` accepts the same way. Acceptances ride on that poll's
  ShareFetch or go out at once, unawaited: one that fails leaves the record
  with the broker, which delivers it again.
* ``partitions(start, end)`` returns the batch's tasks: its acquired ranges
  per partition (up to 64k offsets a task, at least ``minPartitions``
  tasks), so retries and repeated actions see identical rows. The tasks are
  built on a thread as soon as ``latestOffset`` planned the batch, while
  Spark writes its offset log. A
  replayed batch that this process does not hold (a restarted query
  re-running its last planned batch) yields nothing: its records were
  released when the old process ended and the broker delivers them again.
* A task of the loop RENEWs every held record once a third of the earliest
  lock has passed, so a slow batch keeps its records (``share.lock.renew``,
  default true). KIP-1222's renewed records come back from the next poll,
  which the task makes at once; that poll also takes in what the consumer
  fetched ahead meanwhile (into the pool), so those locks are renewed too.
* Spark ends the runner with SIGTERM, twice (``stop()`` is in practice not
  called): the first RELEASEs everything held and closes the consumer
  (closing the share sessions releases whatever was not acknowledged), so the
  broker redelivers at once instead of after the lock duration; the second
  waits for the first.

Options: ``kafka.bootstrap.servers``, ``subscribe``, ``kafka.group.id`` (the
share group), ``maxRecordsPerTrigger``, ``includeHeaders``, ``minPartitions``,
``share.lock.renew``, ``share.poll.timeout.ms`` (how long one trigger waits
for records, default 500), ``failOnDataLoss`` (default true),
``startingOffsets`` (earliest | latest: sets the group's
``share.auto.offset.reset``, which applies to partitions the group has no
state for yet), and ``kafka.*`` share consumer settings. ``shoal.read.path``
is accepted only as ``executor`` (see ``client.spark.options``).
``Trigger.AvailableNow`` is supported (the reader mixes in
SupportsTriggerAvailableNow): a share group has no end offset to aim at, so
the query ends at the first trigger whose poll finds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from shoal.client.core.config import ADMIN_OPTIONS, Config
from shoal.client.core.errors import IllegalStateError
from shoal.client.spark.ledger import BatchLedger, key_of, make_offset, parse_offset
from shoal.client.spark.options import SourceOptions

__all__ = ["ShareRunner", "ShoalStreamReader"]

log = logging.getLogger("shoal.spark")

_DEFAULT_LOCK_MS = 30000
_ROWS_PER_TASK = 65536  # a task fetches its own records: few, large tasks
_CLOSE_BUDGET_S = 10.0

# Runners alive in this process, for the SIGTERM handler (a signal handler is
# per process by nature; nothing else reads this).
_RUNNERS: weakref.WeakSet[ShareRunner] = weakref.WeakSet()
_previous_sigterm: Any = None
_terminating = False


class ShareRunner:
    """The share consumer of one stream reader, on its own loop thread (see module doc)."""

    def __init__(self, options: SourceOptions, config: Config) -> None:
        self.options = options
        self.config = config
        self.run_id = uuid.uuid4().hex
        self.ledger = BatchLedger()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="shoal-share-runner", daemon=True)
        self._consumer: Any = None
        self._lock: asyncio.Lock | None = None
        self._renew_task: asyncio.Task | None = None
        self._closed = False
        self.renewals = 0
        self.lost = 0

    # -- lifecycle (called from Spark's thread) ------------------------------------------
    def start(self) -> None:
        """Connect, set the group's start position if asked, subscribe; fails fast if the broker is down."""
        self._thread.start()
        try:
            self._call(self._start(), self.config["default.api.timeout.ms"] / 1000 + 5)
        except BaseException:
            self._stop_loop()
            raise
        _RUNNERS.add(self)
        _install_sigterm_handler()

    async def _start(self) -> None:
        from shoal.client.share.acquirer import AsyncShareAcquirer

        self._lock = asyncio.Lock()
        if self.options.starting is not None:
            await self._set_auto_offset_reset(self.options.starting.kind)
        # Ranges are acquired here; the records are read and decoded by the executors.
        consumer = AsyncShareAcquirer(dict(self.config))
        consumer.set_acknowledgement_commit_callback(self._on_acknowledged)
        await consumer.start()
        consumer.subscribe(list(self.options.topics))
        self._consumer = consumer
        if self.options.lock_renew:
            self._renew_task = asyncio.get_running_loop().create_task(self._renew_loop())

    async def _set_auto_offset_reset(self, where: str) -> None:
        from shoal.client.admin.client import AsyncAdmin
        from shoal.client.admin.types import AlterConfigOp, ConfigResource

        common = {o.name for o in ADMIN_OPTIONS}
        settings = {k: v for k, v in self.config.items() if k in common}
        resource = ConfigResource.group(self.options.group_id or "")
        async with AsyncAdmin(settings) as admin:
            result = await admin.incremental_alter_configs(
                {resource: [AlterConfigOp("share.auto.offset.reset", where)]}
            )
        error = result.get(resource)
        if error is not None:
            raise error

    def shutdown(self, timeout: float = _CLOSE_BUDGET_S) -> None:
        """RELEASE everything held and close the consumer (idempotent)."""
        if self._closed:
            return
        self._closed = True
        _RUNNERS.discard(self)
        if self._thread.is_alive():
            try:
                self._call(self._release_and_close(timeout), timeout + 2)
            except Exception as e:  # noqa: BLE001 - shutting down: report, never raise
                log.warning("shoal stream: releasing held records failed: %s", e)
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def _call(self, coro: Any, timeout: float) -> Any:
        fut: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise

    # -- Spark's calls ---------------------------------------------------------------------
    def latest(self, after: int, limit: int | None, wait_for_assignment: bool) -> int | None:
        budget = (self.options.poll_timeout_ms + self.config["request.timeout.ms"]) / 1000 + 10
        if wait_for_assignment:
            budget += self.config["default.api.timeout.ms"] / 1000
        return self._call(self._latest(after, limit, wait_for_assignment), budget)

    def commit(self, upto: int) -> None:
        self._call(self._commit(upto), 30)

    def records(self, after: int, upto: int) -> dict[int, list[Any]]:
        return self._call(self._records(after, upto), 30)

    # -- on the loop -----------------------------------------------------------------------
    async def _latest(self, after: int, limit: int | None, wait_for_assignment: bool) -> int | None:
        assert self._lock is not None
        async with self._lock:
            c = self._consumer
            self.ledger.unplan_after(after)
            accepted = self._accept(self.ledger.take_committed(after))
            if len(self.ledger) == 0:
                if wait_for_assignment:
                    await self._await_assignment()
                # Nothing held: poll (the acceptances ride on the next ShareFetch).
                self.ledger.add(await c.poll(self.options.poll_timeout_ms))
            elif accepted:
                c.commit_async()  # nothing to poll for: send the acceptances now
            return self.ledger.plan(after, limit)

    async def _await_assignment(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config["default.api.timeout.ms"] / 1000
        while not self._consumer.assignment() and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def _commit(self, upto: int) -> None:
        assert self._lock is not None
        async with self._lock:
            if self._accept(self.ledger.take_committed(upto)):
                self._consumer.commit_async()

    async def _records(self, after: int, upto: int) -> dict[int, list[Any]]:
        return {bid: self.ledger.batch(bid) or [] for bid in self.ledger.batches_between(after, upto)}

    def _accept(self, records: list[Any]) -> int:
        from shoal.client.share.consumer import AcknowledgeType

        n = 0
        for r in records:
            try:
                self._consumer.acknowledge(r, AcknowledgeType.ACCEPT)
                n += 1
            except IllegalStateError as e:
                # Its lock was lost (a failed renewal, a broker restart): the broker redelivers it.
                log.warning("shoal stream: cannot accept %s-%s@%s: %s", r.topic, r.partition, r.offset, e)
        return n

    @staticmethod
    def _on_acknowledged(offsets: dict[Any, set[int]], error: BaseException | None) -> None:
        # Acceptances are not waited for: one that fails leaves its records with the broker,
        # which delivers them again (at-least-once), so a failure is worth a warning only.
        if error is not None:
            tps = ", ".join(str(tp) for tp in offsets)
            log.warning("shoal stream: acknowledgements of %s failed (the broker redelivers them): %s", tps, error)

    # -- lock renewal ----------------------------------------------------------------------
    def _lock_s(self) -> float:
        ms = self._consumer.acquisition_lock_timeout_ms if self._consumer is not None else None
        return (ms or _DEFAULT_LOCK_MS) / 1000

    async def _renew_loop(self) -> None:
        assert self._lock is not None
        while True:
            lock_s = self._lock_s()
            await asyncio.sleep(max(0.05, min(1.0, lock_s / 10)))
            # Renew once a third of the lock has passed: the same cycle takes in records the
            # consumer fetched ahead meanwhile, which must join the pool before their own
            # (conservatively counted) locks run out.
            if not len(self.ledger) or not self.ledger.renewal_due(time.monotonic(), lock_s * 2 / 3):
                continue
            try:
                async with self._lock:
                    await self._renew_all()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the loop must outlive one failed renewal
                log.warning("shoal stream: lock renewal failed: %s", e)

    async def _renew_all(self) -> None:
        from shoal.client.share.consumer import AcknowledgeType

        held = self.ledger.held()
        if not held:
            return
        c = self._consumer
        for r in held:
            c.acknowledge(r, AcknowledgeType.RENEW)
        # Bounded well inside the lock: a renewal answered later than that is no use anyway.
        wait_ms = min(self.config["request.timeout.ms"], max(1000, int(self._lock_s() * 1000 / 3)))
        results = await c.commit_sync(wait_ms)
        failed = {tp for tp, e in results.items() if e is not None}
        if failed:
            self.lost += self.ledger.drop_partitions(failed)
            log.warning("shoal stream: renewing locks of %s failed; the broker will redeliver those records", failed)
        expected = self.ledger.keys()
        # Renewed records are handed out again by the next poll (KIP-1222); take them back now.
        back = await c.poll(0)
        self.ledger.add(back)
        missing = expected - {key_of(r) for r in back}
        if missing:
            self.lost += self.ledger.drop(missing)
            log.warning("shoal stream: %d held records did not come back from renewal", len(missing))
        self.renewals += 1

    # -- shutdown --------------------------------------------------------------------------
    async def _release_and_close(self, timeout: float) -> None:
        from shoal.client.share.consumer import AcknowledgeType

        if self._renew_task is not None:
            self._renew_task.cancel()
            with contextlib.suppress(BaseException):
                await self._renew_task
        c = self._consumer
        if c is None:
            return
        held = self.ledger.release_all()
        for r in held:
            with contextlib.suppress(IllegalStateError):
                c.acknowledge(r, AcknowledgeType.RELEASE)
        # close() sends the acknowledgements on the final request of each share session,
        # which also releases anything not acknowledged, then leaves the group.
        await c.close(int(timeout * 1000))
        if held:
            log.info("shoal stream: released %d held records", len(held))


def _install_sigterm_handler() -> None:
    """SIGTERM: release what every runner holds, then die as SIGTERM would have made us."""
    global _previous_sigterm
    if threading.current_thread() is not threading.main_thread() or _previous_sigterm is not None:
        return
    _previous_sigterm = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: Any) -> None:
    global _terminating
    if _terminating:
        return  # Spark signals twice (stopWorker, then the factory's stop): finish the first one
    _terminating = True
    for runner in list(_RUNNERS):
        runner.shutdown()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    if previous == signal.SIG_IGN:
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


class ShoalStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader Spark talks to; the runner exists only in Spark's runner process."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options.for_stream()
        self.config = self.options.stream_client_config()
        # what executor tasks connect with
        self.fetch_config = self.options.stream_fetch_config()
        self.schema = schema
        self._runner: ShareRunner | None = None
        # batch id -> its tasks, or the Future of their build (started when the batch is planned)
        self._payloads: dict[int, list[InputPartition] | Future] = {}
        self._available_now = False
        self._first = True

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the reader pickled; connections and held records stay in the runner process.
        state = self.__dict__.copy()
        state["_runner"] = None
        state["_payloads"] = {}
        return state

    def _get_runner(self) -> ShareRunner:
        if self._runner is None:
            runner = ShareRunner(self.options, self.config)
            runner.start()
            self._runner = runner
        return self._runner

    # -- Spark's driver-side calls ------------------------------------------------------------
    def initialOffset(self) -> dict:
        return make_offset(0, self._get_runner().run_id)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        runner = self._get_runner()
        after, _ = parse_offset(start)
        # Batches up to `after` are in the commit log, later ones were never recorded (the
        # runner puts their records back in the pool): no payload is needed any more.
        self._payloads.clear()
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        batch_id = runner.latest(after, max_rows, wait_for_assignment=self._first or self._available_now)
        self._first = False
        if batch_id is None:
            return start
        self._payloads[batch_id] = self._build_soon(runner, batch_id)
        return make_offset(batch_id, runner.run_id)

    def _build_soon(self, runner: ShareRunner, batch_id: int) -> Future:
        """Build the new batch's tasks on a thread: Spark writes its offset log before it asks
        for ``partitions``, and that time is better spent planning than waiting."""
        fut: Future = Future()

        def build() -> None:
            try:
                records = runner.records(batch_id - 1, batch_id).get(batch_id, [])
                fut.set_result(self._build(batch_id, records))
            except BaseException as e:  # noqa: BLE001 - handed to partitions(), which raises it
                fut.set_exception(e)

        threading.Thread(target=build, name="shoal-build", daemon=True).start()
        return fut

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        runner = self._get_runner()
        after, _ = parse_offset(start)
        upto, run = parse_offset(end)
        if run != runner.run_id:
            # A batch planned by an earlier run of the query: its records were released
            # when that process ended and the broker delivers them again.
            return []
        out: list[InputPartition] = []
        missing = [bid for bid in range(after + 1, upto + 1) if bid not in self._payloads]
        if missing:
            for bid, records in runner.records(after, upto).items():
                self._payloads.setdefault(bid, self._build(bid, records))
        for bid in range(after + 1, upto + 1):
            tasks = self._payloads.get(bid, [])
            if isinstance(tasks, Future):
                tasks = self._payloads[bid] = tasks.result()
            out += tasks
        return out

    def _build(self, batch_id: int, ranges: list[Any]) -> list[InputPartition]:
        """The batch's tasks: its acquired ranges, about ``_ROWS_PER_TASK`` offsets a task and at
        least ``minPartitions`` tasks (per-task overhead, not rows, dominates small tasks)."""
        from shoal.client.spark.acquired import plan_acquired

        return list(plan_acquired(batch_id, ranges, self.options.min_partitions or 1, _ROWS_PER_TASK))

    def _forget_payloads(self, upto: int) -> None:
        for bid in [b for b in self._payloads if b <= upto]:
            del self._payloads[bid]

    def commit(self, end: dict) -> None:
        if self._runner is None:
            return
        upto, _ = parse_offset(end)
        self._forget_payloads(upto)
        self._runner.commit(upto)

    def stop(self) -> None:
        if self._runner is not None:
            self._runner.shutdown()

    # -- executors ----------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[Any]:
        from shoal.client.spark.acquired import AcquiredPartition, read_acquired
        from shoal.client.spark.worker import settle_worker

        assert isinstance(partition, AcquiredPartition), partition
        settle_worker()
        yield from read_acquired(
            self.fetch_config, partition, self.schema, fail_on_data_loss=self.options.fail_on_data_loss
        )
