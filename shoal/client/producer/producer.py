"""AsyncProducer: Kafka's producer semantics on asyncio, on the project's own codec.

    async with AsyncProducer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as p:
        fut = await p.send("events", b"value", key=b"k")   # buffered: a future of RecordMetadata
        md = await fut                                      # or: await p.send_and_wait(...)
        await p.flush()

Why it is shaped this way:

* **A thin shell.** Batching, memory accounting, readiness, draining, retry
  and idempotence rules live in ``client.producer.accumulator`` (sans-IO); partition
  choice in ``client.producer.partitioner``. This module only serializes, waits
  (metadata, memory), moves bytes and runs timers: one sender task per
  producer, woken when a batch is started or a response arrives, sleeping
  until the next linger or backoff deadline otherwise.
* **A cheap hot path.** ``send`` appends a tuple to the partition's open
  batch and returns a ``RecordFuture`` — a small future-compatible object
  (``asyncio.isfuture`` is true; ``await``, ``gather``, ``wait`` and
  callbacks work) that reads its result lazily from the batch. No task,
  ``asyncio.Future`` or ``RecordMetadata`` is made per record unless the
  application asks for one. Each batch's bytes are built in one pass by
  ``protocol.records.build_batch`` when it is drained, and each produce
  request is encoded once by the connection.
* **Failure is never silent.** Every record either completes with its offset
  or fails its future: broker errors that cannot be retried, ``delivery.timeout.ms``,
  a record too large, a forced close. Retriable errors (a lost connection,
  NOT_LEADER_OR_FOLLOWER, ...) are retried with backoff after a metadata
  refresh; with idempotence (the default) retries never duplicate records.
* **Backpressure.** ``send`` waits up to ``max.block.ms`` for metadata of an
  unknown topic (auto-created through Metadata when the broker allows it) and
  for room in ``buffer.memory``, then raises ``KafkaTimeoutError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shoal.client.core.client_core import ClientCore, metadata_stale
from shoal.client.core.cluster import TopicInfo
from shoal.client.core.config import build_config
from shoal.client.core.conn import BrokerConnection
from shoal.client.core.errors import (
    BrokerResponseError,
    ClientClosedError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
)
from shoal.client.producer.accumulator import (
    BATCH_OVERHEAD,
    RECORD_OVERHEAD,
    Outcome,
    ProducerBatch,
    RecordAccumulator,
)
from shoal.client.producer.partitioner import Partitioner, murmur2
from shoal.client.producer.record_future import RecordFuture, RecordMetadata, failed_future, wake_listeners
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.messages import ZERO_UUID
from shoal.protocol.records import Compression, build_batch

__all__ = ["AsyncProducer", "ProducerStats", "RecordFuture", "RecordMetadata"]

log = logging.getLogger("shoal.client.producer.producer")

_PRODUCE = api_by_name("Produce")
_ProduceRequest = _PRODUCE.request_class()
_TopicData = _ProduceRequest.TopicProduceData
_PartitionData = _ProduceRequest.PartitionProduceData
_InitProducerId = api_by_name("InitProducerId").request_class()
_CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
_INT32_MAX = 0x7FFFFFFF


@dataclass(slots=True)
class ProducerStats:
    """Counters for tests, benchmarks and curious operators."""

    requests: int = 0  # produce requests sent
    batches: int = 0  # batches sent (retries included)
    records: int = 0  # records sent (retries included)
    retries: int = 0  # batches queued again after an error
    splits: int = 0  # batches split because the broker found them too large
    expired: int = 0  # batches failed by delivery.timeout.ms
    failed: int = 0  # batches failed by an error
    in_flight: int = 0  # produce requests awaiting an answer now


def _to_bytes(obj: Any, what: str) -> bytes | None:
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, str):
        return obj.encode()
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    raise TypeError(f"{what} must be bytes, str or None (or use a serializer), got {type(obj).__name__}")


def _headers(headers: Any) -> list[tuple[str, bytes | None]] | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for item in items:
        name, value = item
        if not isinstance(name, str):
            raise TypeError(f"header names must be str, got {type(name).__name__}")
        out.append((name, _to_bytes(value, "header value")))
    return out


class AsyncProducer:
    """Kafka producer for asyncio. Settings by Kafka's names (see ``client.core.config``)."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        cfg = self.config = build_config("producer", config, kwargs)
        self._acks: int = cfg["acks"]
        self._idempotent: bool = cfg["enable.idempotence"]
        self._codec = _CODECS[cfg["compression.type"]]
        self._level = cfg["compression.level"]
        self._max_request_size: int = cfg["max.request.size"]
        self._buffer_memory: int = cfg["buffer.memory"]
        self._max_block_ms: int = cfg["max.block.ms"]
        self._max_in_flight: int = cfg["max.in.flight.requests.per.connection"]
        self._request_timeout_ms: int = cfg["request.timeout.ms"]
        self._key_serializer = cfg["key.serializer"]
        self._value_serializer = cfg["value.serializer"]
        self._hash_keys = cfg["partitioner"] != "random" and not cfg["partitioner.ignore.keys"]
        self._partitioner = Partitioner(
            cfg["partitioner"],
            ignore_keys=cfg["partitioner.ignore.keys"],
            batch_size=cfg["batch.size"],
        )
        self._core = ClientCore(cfg)
        self._md = self._core.metadata
        self._acc: RecordAccumulator | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closing = False
        self._closed = False
        self._closer: asyncio.Future | None = None
        self._fatal: BaseException | None = None
        self._sender: asyncio.Task | None = None
        self._wakeup: asyncio.Future | None = None
        self._dirty = False
        self._in_flight: dict[int, int] = {}
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Task] = {}
        self._topic_waits: dict[str, asyncio.Task] = {}
        self._md_task: asyncio.Task | None = None
        self._md_last = 0.0
        self._pid_task: asyncio.Task | None = None
        self._drain_tasks: dict[int, asyncio.Task] = {}
        self._mem_waiters: deque[tuple[int, asyncio.Future]] = deque()
        self.stats = ProducerStats()

    # -- lifecycle -------------------------------------------------------------------
    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect, load metadata and (with idempotence) get a producer id."""
        if self._started:
            return
        if self._closed:
            raise ClientClosedError("the producer is closed")
        loop = self._loop = asyncio.get_running_loop()
        cfg = self.config
        self._acc = RecordAccumulator(
            batch_size=cfg["batch.size"],
            linger_ms=cfg["linger.ms"],
            buffer_memory=cfg["buffer.memory"],
            delivery_timeout_ms=cfg["delivery.timeout.ms"],
            retry_backoff_ms=cfg["retry.backoff.ms"],
            retry_backoff_max_ms=cfg["retry.backoff.max.ms"],
            retries=cfg["retries"],
            idempotent=self._idempotent,
            guarantee_order=self._max_in_flight == 1,
            clock=lambda: loop.time() * 1000,
        )
        await self._core.start()
        try:
            if self._idempotent:
                pid, epoch = await self._fetch_producer_id(self._max_block_ms)
                self._acc.set_producer_id(pid, epoch)
        except BaseException:
            await self._core.close()
            raise
        self._started = True
        self._sender = loop.create_task(self._run_sender(), name="shoal-producer-sender")

    async def close(self, timeout: float | None = None) -> None:
        """Send what is buffered (waiting at most ``timeout`` seconds, default
        ``delivery.timeout.ms``), fail whatever is left, and close connections."""
        if self._closer is None:
            self._closer = asyncio.ensure_future(self._close(timeout))
        await asyncio.shield(self._closer)

    async def _close(self, timeout: float | None) -> None:
        self._closing = True
        if not self._started:
            self._closed = True
            await self._core.close()
            return
        acc = self._acc
        assert acc is not None
        acc.closing = True
        self._fail_memory_waiters(ClientClosedError("the producer was closed while send() waited for memory"))
        self._wake()
        if timeout is None:
            timeout = self.config["delivery.timeout.ms"] / 1000
        sender = self._sender
        if sender is not None and not sender.done():
            try:
                await asyncio.wait_for(asyncio.shield(sender), timeout)
            except TimeoutError:
                log.warning("producer closed with records undelivered after %.1f s; failing them", timeout)
            except Exception:  # noqa: BLE001 - the sender failed and already failed the records
                pass
        for b in acc.abort_all(ClientClosedError("the producer was closed before the record was acknowledged")):
            self._finished(b)
        self._closed = True
        tasks = [sender, self._md_task, self._pid_task, *self._connecting.values(), *self._topic_waits.values()]
        tasks = [t for t in (*tasks, *self._drain_tasks.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._core.close()

    def _check_usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closing or self._closed:
            raise ClientClosedError("the producer is closed")
        if not self._started:
            raise ClientClosedError("the producer was not started (use 'async with' or await start())")

    # -- sending ---------------------------------------------------------------------
    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
    ) -> RecordFuture:
        """Buffer one record; returns once it is buffered, with a future of its ``RecordMetadata``.

        Waits (at most ``max.block.ms`` in all) for the topic's metadata and
        for room in ``buffer.memory``, then raises ``KafkaTimeoutError``. A
        record that could never be sent (larger than ``max.request.size`` or
        ``buffer.memory``) gets a future failed with MESSAGE_TOO_LARGE.
        """
        if self._closing or not self._started or self._fatal is not None:
            self._check_usable()
        ser = self._key_serializer
        kb = key if ser is None else ser(key)
        if kb is not None and type(kb) is not bytes:
            kb = _to_bytes(kb, "key")
        ser = self._value_serializer
        vb = value if ser is None else ser(value)
        if vb is not None and type(vb) is not bytes:
            vb = _to_bytes(vb, "value")
        hdrs = _headers(headers) if headers else None
        if timestamp_ms is not None and (type(timestamp_ms) is not int or timestamp_ms < 0):
            raise TypeError(f"timestamp_ms must be a non-negative int, got {timestamp_ms!r}")
        deadline = 0.0
        info = self._md.topics.get(topic)
        if info is None:
            deadline = self._loop.time() * 1000 + self._max_block_ms  # type: ignore[union-attr]
            info = await self._wait_topic(topic, deadline)
        count = len(info.partitions)
        size = RECORD_OVERHEAD
        if kb is not None:
            size += len(kb)
        if vb is not None:
            size += len(vb)
        if hdrs:
            for name, hv in hdrs:
                size += 10 + len(name) + (len(hv) if hv is not None else 0)
        if partition is None:
            if kb is not None and self._hash_keys:
                partition = (murmur2(kb) & 0x7FFFFFFF) % count
            else:
                partition = self._partitioner.partition(topic, kb, count, size, self._available, self._has_room)
        elif not 0 <= partition < count:
            if not deadline:
                deadline = self._loop.time() * 1000 + self._max_block_ms  # type: ignore[union-attr]
            await self._wait_partition(topic, partition, deadline)
        if size + BATCH_OVERHEAD > self._max_request_size or size + BATCH_OVERHEAD > self._buffer_memory:
            limit = "max.request.size" if size + BATCH_OVERHEAD > self._max_request_size else "buffer.memory"
            err = BrokerResponseError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"the record is {size + BATCH_OVERHEAD} bytes when serialized, more than {limit}",
            )
            return failed_future(self._loop, topic, partition, err)  # type: ignore[arg-type]
        rec = (kb, vb, hdrs, timestamp_ms if timestamp_ms is not None else time.time_ns() // 1_000_000)
        if deadline and self._closing:  # closed while this send waited
            self._check_usable()
        b = self._acc.append(topic, partition, rec, size)  # type: ignore[union-attr]
        if b is None:
            if not deadline:
                deadline = self._loop.time() * 1000 + self._max_block_ms  # type: ignore[union-attr]
            b = await self._append_blocking(topic, partition, rec, size, deadline)
        index = len(b.records) - 1
        if index == 0:
            self._wake()
        return RecordFuture(self._loop, b, index)  # type: ignore[arg-type]

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
    ) -> RecordMetadata:
        """``send`` and wait for the broker's acknowledgement."""
        fut = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await fut

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now, without lingering, and wait until each record completed."""
        self._check_usable()
        acc = self._acc
        assert acc is not None
        pending = list(acc.incomplete)
        if not pending:
            return
        acc.flushing += 1
        self._wake()
        try:
            async with asyncio.timeout(timeout):
                for b in pending:
                    if not b.done:
                        await self._batch_done(b)
        except TimeoutError:
            raise KafkaTimeoutError(f"flush did not finish within {timeout} s") from None
        finally:
            acc.flushing -= 1

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition numbers (waiting, like send, for its metadata)."""
        self._check_usable()
        info = self._md.topics.get(topic)
        if info is None:
            info = await self._wait_topic(topic, self._loop.time() * 1000 + self._max_block_ms)  # type: ignore[union-attr]
        return sorted(info.partitions)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of ``buffer.memory`` in use (batches not yet acknowledged)."""
        return self._acc.used if self._acc is not None else 0

    # -- waiting for metadata and memory ----------------------------------------------------
    async def _wait_topic(self, topic: str, deadline: float) -> TopicInfo:
        """Wait (until ``deadline``) for the topic's metadata, asking the broker to create it."""
        loop = self._loop
        assert loop is not None
        while True:
            remaining = deadline - loop.time() * 1000
            if remaining <= 0:
                raise KafkaTimeoutError(f"topic {topic!r} not present in metadata after {self._max_block_ms} ms")
            task = self._topic_waits.get(topic)
            if task is None or task.done():
                task = loop.create_task(
                    self._core.wait_for_topics([topic], allow_auto_create=True, timeout_ms=remaining)
                )
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
                self._topic_waits[topic] = task
            try:
                async with asyncio.timeout(remaining / 1000):
                    await asyncio.shield(task)
            except KafkaTimeoutError:
                # the core gives up when its next backoff would pass its
                # deadline; ours may still allow another round
                await asyncio.sleep(min(self.config["retry.backoff.ms"], max(remaining, 0)) / 1000)
                continue
            except TimeoutError:
                continue
            info = self._md.topics.get(topic)
            if info is not None:
                return info

    async def _wait_partition(self, topic: str, partition: int, deadline: float) -> None:
        if partition < 0:
            raise ValueError(f"invalid partition {partition}")
        loop = self._loop
        assert loop is not None
        while True:
            info = self._md.topics.get(topic)
            count = len(info.partitions) if info is not None else 0
            if partition < count:
                return
            remaining = deadline - loop.time() * 1000
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"partition {partition} of topic {topic!r} with partition count {count} "
                    f"is not present in metadata after {self._max_block_ms} ms"
                )
            with contextlib.suppress(KafkaClientError, TimeoutError):
                async with asyncio.timeout(remaining / 1000):
                    await self._core.refresh_metadata([topic])
            await asyncio.sleep(min(self.config["retry.backoff.ms"], max(remaining, 0)) / 1000)

    async def _append_blocking(self, topic: str, partition: int, rec: tuple, size: int, deadline: float) -> Any:
        acc = self._acc
        loop = self._loop
        assert acc is not None and loop is not None
        amount = acc.alloc_for(size)
        while True:
            self._check_usable()
            remaining = deadline - loop.time() * 1000
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"failed to allocate memory within the configured max blocking time {self._max_block_ms} ms"
                )
            fut = loop.create_future()
            entry = (amount, fut)
            self._mem_waiters.append(entry)
            acc.memory_waiters = len(self._mem_waiters)
            self._release_memory()
            self._wake()  # a full buffer makes every batch ready
            timer = loop.call_later(remaining / 1000, _time_out, fut, self._max_block_ms)
            try:
                granted = await fut
            except BaseException:
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    acc.ungrant(fut.result())
                with contextlib.suppress(ValueError):
                    self._mem_waiters.remove(entry)
                acc.memory_waiters = len(self._mem_waiters)
                self._release_memory()
                raise
            finally:
                timer.cancel()
            acc.memory_waiters = len(self._mem_waiters)
            b = acc.append(topic, partition, rec, size, reserved=granted)
            if b is not None:
                self._release_memory()
                return b

    def _release_memory(self) -> None:
        acc = self._acc
        waiters = self._mem_waiters
        while waiters:
            amount, fut = waiters[0]
            if fut.done():
                waiters.popleft()
                continue
            if not acc.grant(amount):  # type: ignore[union-attr]
                break
            waiters.popleft()
            fut.set_result(amount)
        acc.memory_waiters = len(waiters)  # type: ignore[union-attr]

    def _fail_memory_waiters(self, error: BaseException) -> None:
        while self._mem_waiters:
            _, fut = self._mem_waiters.popleft()
            if not fut.done():
                fut.set_exception(error)
        if self._acc is not None:
            self._acc.memory_waiters = 0

    async def _batch_done(self, b: ProducerBatch) -> None:
        waiter = self._loop.create_future()  # type: ignore[union-attr]
        if b.listeners is None:
            b.listeners = []
        b.listeners.append(waiter)
        await waiter

    # -- partition helpers (called by the partitioner) ------------------------------------
    def _available(self, topic: str) -> list[int]:
        return [p for p in self._md.partitions_for(topic) or () if self._leader_of(topic, p) is not None]

    def _has_room(self, topic: str, partition: int, size: int) -> bool:
        return self._acc.has_room(topic, partition, size)  # type: ignore[union-attr]

    def _leader_of(self, topic: str, partition: int) -> int | None:
        md = self._md
        t = md.topics.get(topic)
        if t is None:
            return None
        p = t.partitions.get(partition)
        if p is None or p.leader < 0 or p.leader not in md.brokers:
            return None
        return p.leader

    # -- the sender ------------------------------------------------------------------
    def _wake(self) -> None:
        self._dirty = True
        w = self._wakeup
        if w is not None and not w.done():
            w.set_result(None)

    async def _sleep(self, delay_ms: float | None) -> None:
        if self._dirty:
            self._dirty = False
            if delay_ms is None or delay_ms > 0:
                delay_ms = 0
        loop = self._loop
        assert loop is not None
        w = self._wakeup = loop.create_future()
        timer = None
        if delay_ms is not None:
            timer = loop.call_later(max(delay_ms, 0) / 1000, _set_none, w)
        try:
            await w
        finally:
            self._wakeup = None
            if timer is not None:
                timer.cancel()

    async def _run_sender(self) -> None:
        acc = self._acc
        assert acc is not None
        try:
            while True:
                self._dirty = False
                expired = acc.expire()
                for b in expired:
                    self._finished(b)
                if expired:
                    self.stats.expired += len(expired)
                    self._release_memory()
                acc.prepare()
                if acc.need_producer_id:
                    self._ensure_producer_id()
                check = acc.ready(self._leader_of)
                if check.unknown_leaders:
                    self._request_metadata()
                sent = False
                for node, queues in check.nodes.items():
                    if self._in_flight.get(node, 0) >= self._max_in_flight:
                        continue
                    conn = self._connection(node)
                    if conn is None:
                        continue
                    if conn.write_paused:
                        self._wait_writable(node, conn)
                        continue
                    batches = acc.drain(node, queues, self._max_request_size)
                    if batches:
                        self._send_batches(node, conn, batches)
                        sent = True
                if self._closing and not acc.incomplete:
                    return
                delay = 0.0 if sent else check.next_check_ms
                if acc.incomplete:
                    first = next(iter(acc.incomplete))
                    until_expiry = first.created_ms + acc.delivery_timeout_ms - acc.clock() + 1
                    delay = until_expiry if delay is None else min(delay, until_expiry)
                await self._sleep(delay)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # a bug: fail loudly rather than hang every send
            log.exception("producer sender failed")
            self._fatal = KafkaClientError(f"the producer's sender failed: {e!r}")
            for b in acc.abort_all(self._fatal):
                self._finished(b)
            self._fail_memory_waiters(self._fatal)

    def _connection(self, node: int) -> BrokerConnection | None:
        conn = self._conns.get(node)
        if conn is not None and not conn.closed:
            return conn
        if node not in self._connecting:
            self._connecting[node] = self._loop.create_task(self._connect(node))  # type: ignore[union-attr]
        return None

    async def _connect(self, node: int) -> None:
        try:
            self._conns[node] = await self._core.connection(node)
        except KafkaClientError as e:
            log.debug("cannot connect to broker %s: %s", node, e)
            self._request_metadata()
        finally:
            self._connecting.pop(node, None)
            self._wake()

    def _wait_writable(self, node: int, conn: BrokerConnection) -> None:
        if node in self._drain_tasks:
            return

        async def drained() -> None:
            try:
                await conn.drain()
            finally:
                self._drain_tasks.pop(node, None)
                self._wake()

        self._drain_tasks[node] = self._loop.create_task(drained())  # type: ignore[union-attr]

    def _request_metadata(self) -> None:
        if self._md_task is not None and not self._md_task.done():
            return
        if self._closed:
            return
        self._md_task = self._loop.create_task(self._refresh_metadata())  # type: ignore[union-attr]

    async def _refresh_metadata(self) -> None:
        loop = self._loop
        assert loop is not None
        pause = self._md_last + self.config["retry.backoff.ms"] - loop.time() * 1000
        if pause > 0:
            await asyncio.sleep(pause / 1000)
        self._md_last = loop.time() * 1000
        try:
            await self._core.refresh_metadata()
        except KafkaClientError as e:
            log.debug("metadata refresh failed: %s", e)
        finally:
            self._wake()

    def _send_batches(self, node: int, conn: BrokerConnection, batches: list[ProducerBatch]) -> None:
        acc = self._acc
        assert acc is not None
        try:
            version = conn.version(_PRODUCE.key)
        except KafkaClientError as e:
            for b in batches:
                acc.returned(b)
                acc.fail(b, e, maybe_written=False)
                self._settle(b, Outcome.FAILED)
            return
        md = self._md
        by_topic: dict[str, list[Any]] = {}
        for b in list(batches):
            if b.built is None:
                try:
                    b.built = build_batch(
                        b.records,
                        compression=self._codec,
                        compression_level=self._level,
                        producer_id=b.producer_id,
                        producer_epoch=b.producer_epoch,
                        base_sequence=b.base_sequence,
                    )
                except ProtocolError as e:  # a record the codec cannot encode: fail its batch alone
                    batches.remove(b)
                    acc.returned(b)
                    acc.fail(b, e, maybe_written=False)
                    self._settle(b, Outcome.FAILED)
                    continue
            parts = by_topic.get(b.topic)
            if parts is None:
                parts = by_topic[b.topic] = []
            parts.append(_PartitionData(index=b.partition, records=b.built))
        topic_ids = {t: md.topic_id(t) for t in by_topic}
        if version >= 13 and any(tid == ZERO_UUID for tid in topic_ids.values()):
            version = 12
        body = _ProduceRequest(
            transactional_id=None,
            acks=self._acks,
            timeout_ms=self._request_timeout_ms,
            topic_data=[_TopicData(name=t, topic_id=topic_ids[t], partition_data=ps) for t, ps in by_topic.items()],
        )
        if not batches:
            return
        stats = self.stats
        stats.requests += 1
        stats.batches += len(batches)
        stats.records += sum(len(b.records) for b in batches)
        if self._acks == 0:
            fut = conn.send(_PRODUCE.key, body, version=version, expect_response=False)
            error = fut.exception() if fut.done() else None
            for b in batches:
                if error is None:
                    acc.complete(b, -1)
                    self._finished(b)
                else:
                    self._settle(b, acc.on_request_failed(b, error))
            self._release_memory()
            return
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        stats.in_flight += 1
        fut = conn.send(_PRODUCE.key, body, version=version)
        fut.add_done_callback(functools.partial(self._on_response, node, batches, topic_ids))

    def _on_response(self, node: int, batches: list[ProducerBatch], topic_ids: dict, fut: asyncio.Future) -> None:
        self._in_flight[node] -= 1
        self.stats.in_flight -= 1
        acc = self._acc
        assert acc is not None
        if fut.cancelled():
            error: BaseException | None = KafkaConnectionError("the produce request was cancelled")
        else:
            error = fut.exception()
        refresh = False
        if error is not None:
            refresh = True
            for b in batches:
                self._settle(b, acc.on_request_failed(b, error))
        else:
            resp = fut.result()
            names = {tid: t for t, tid in topic_ids.items()}
            answers: dict[tuple[str, int], Any] = {}
            for tr in resp.responses:
                name = tr.name if tr.name else names.get(tr.topic_id, "")
                for pr in tr.partition_responses:
                    answers[(name, pr.index)] = pr
            for b in batches:
                pr = answers.get((b.topic, b.partition))
                if pr is None:
                    missing = KafkaConnectionError(f"the produce response did not mention {b.topic}-{b.partition}")
                    self._settle(b, acc.on_request_failed(b, missing))
                    continue
                code = pr.error_code
                if code == 0:
                    if acc.complete(b, pr.base_offset, pr.log_append_time_ms, pr.log_start_offset):
                        self._finished(b)
                elif code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                    # Kafka: a retry of something stored so long ago the broker forgot its offset
                    if acc.complete(b, -1, -1, pr.log_start_offset):
                        self._finished(b)
                else:
                    if metadata_stale(code):
                        refresh = True
                    self._settle(b, acc.on_error(b, code, pr.log_start_offset, pr.error_message))
        if refresh:
            self._request_metadata()
        self._release_memory()
        self._wake()

    def _settle(self, b: ProducerBatch, outcome: str) -> None:
        if outcome == Outcome.FAILED:
            self.stats.failed += 1
            self._finished(b)
        elif outcome == Outcome.DONE:
            self._finished(b)
        elif outcome == Outcome.RETRY:
            self.stats.retries += 1
        elif outcome == Outcome.SPLIT:
            self.stats.splits += 1

    def _finished(self, b: ProducerBatch) -> None:
        wake_listeners(self._loop, b)  # type: ignore[arg-type]

    # -- producer id -------------------------------------------------------------------
    async def _fetch_producer_id(self, timeout_ms: float | None = None) -> tuple[int, int]:
        core = self._core

        async def once() -> tuple[int, int]:
            node = core.least_loaded_node()
            if node is None:
                await core.refresh_metadata()
                node = core.least_loaded_node()
                if node is None:
                    raise KafkaConnectionError("no broker known")
            conn = await core.connection(node)
            version = conn.version("InitProducerId", hi=5)
            body = _InitProducerId(transactional_id=None, transaction_timeout_ms=_INT32_MAX)
            resp = await conn.request("InitProducerId", body, version=version)
            if resp.error_code:
                raise BrokerResponseError(resp.error_code, "InitProducerId")
            return resp.producer_id, resp.producer_epoch

        return await core.retry(once, timeout_ms=timeout_ms, what="InitProducerId")

    def _ensure_producer_id(self) -> None:
        if self._pid_task is not None and not self._pid_task.done():
            return

        async def run() -> None:
            try:
                pid, epoch = await self._fetch_producer_id()
                self._acc.set_producer_id(pid, epoch)  # type: ignore[union-attr]
            except KafkaClientError as e:
                log.warning("InitProducerId failed: %s", e)
                await asyncio.sleep(self.config["retry.backoff.max.ms"] / 1000)
            finally:
                self._wake()

        self._pid_task = self._loop.create_task(run())  # type: ignore[union-attr]


def _set_none(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _time_out(fut: asyncio.Future, max_block_ms: int) -> None:
    if not fut.done():
        fut.set_exception(
            KafkaTimeoutError(f"failed to allocate memory within the configured max blocking time {max_block_ms} ms")
        )
