"""``EmbeddedBroker``: a whole Shoal broker inside the test process.

Why: a test of Kafka code needs a broker that speaks the real protocol, to
any client, and starts in milliseconds; mocking a client tests the mock, and a
JVM broker in Docker costs seconds per start and a daemon. This is the real
broker (``shoal.broker.broker.Broker``, the object ``shoal-broker`` runs) on
an ephemeral 127.0.0.1 port, with a temporary data directory it removes at
the end (``log.dirs=":memory:"`` puts it in RAM, see ``memory_root``), plus helpers a test wants: topics, records in and out, waiting for a
group, a share partition's state, a crash, and request fault injection
(``faults``, see ``shoal.broker.faults``).

Two ways to run it:

- ``with EmbeddedBroker() as b:`` runs the broker on its own event loop in a
  thread, so that blocking clients (confluent-kafka, kafka-python) and plain
  synchronous tests work; the helpers block.
- ``async with EmbeddedBroker() as b:`` runs it on the caller's loop; the
  helpers are the ``a``-prefixed coroutines (``acreate_topic``, ``aproduce``...).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from shoal.broker.broker import Broker
from shoal.broker.config.settings import BrokerConfig
from shoal.broker.faults import FaultInjector
from shoal.broker.share.in_flight import STATE_NAMES

__all__ = ["EMBEDDED_DEFAULTS", "FAST_TIMERS", "MEMORY", "EmbeddedBroker", "SharePartitionState", "memory_root"]

MEMORY = ":memory:"  # log.dirs value: the data directory lives in RAM
_RAM_FILESYSTEMS = ("tmpfs", "ramfs")

T = TypeVar("T")

# Defaults of an embedded broker that differ from shoal-broker's: one partition per internal
# topic (a test broker creates them in ~1 ms instead of 100 directories), nothing else.
EMBEDDED_DEFAULTS: dict[str, Any] = {
    "offsets.topic.num.partitions": 1,
    "share.coordinator.state.topic.num.partitions": 1,
}

# fast_timers=True: groups form at once and members may ask for short timeouts, so a test of a
# rebalance or a lock timeout takes a fraction of a second rather than Kafka's production seconds.
# A share group's target is recomputed on every change (Kafka 4.3's 1 s assignment interval would
# hold a member that joins just after another without partitions for a second or more).
FAST_TIMERS: dict[str, Any] = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 500,
    "group.consumer.min.session.timeout.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 50,
    "group.consumer.heartbeat.interval.ms": 250,
    "group.share.min.session.timeout.ms": 500,
    "group.share.min.heartbeat.interval.ms": 50,
    "group.share.heartbeat.interval.ms": 250,
    "group.share.assignment.interval.ms": 0,
    "group.share.min.record.lock.duration.ms": 1000,
}


@dataclass(frozen=True, slots=True)
class SharePartitionState:
    """A share partition as its leader holds it: start and end of the in-flight window, and
    each tracked range as (first offset, last offset, state, delivery count, member holding it)."""

    group_id: str
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    ranges: tuple[tuple[int, int, str, int, str | None], ...]

    def state_of(self, offset: int) -> str | None:
        """AVAILABLE / ACQUIRED / ACKNOWLEDGED / ARCHIVING / ARCHIVED, or None for an offset not tracked."""
        for first, last, state, _count, _member in self.ranges:
            if first <= offset <= last:
                return state
        return None


def memory_root(mounts: str = "/proc/mounts") -> str:
    """Where ``log.dirs=":memory:"`` puts its data directory: a RAM-backed filesystem.

    Not a second storage engine: the broker's one log implementation runs
    unchanged on a tmpfs directory, so what a test exercises is what runs in
    production, while nothing touches a disk, fsync costs nothing and the data
    vanishes with the directory at ``stop()``. Linux mounts a tmpfs at
    /dev/shm; a system without one (macOS, Windows) is refused with a clear
    error instead of silently writing to disk. Mind the size: Docker gives
    containers a 64 MiB /dev/shm unless told otherwise (``--shm-size``).
    """
    root = "/dev/shm"
    try:
        with open(mounts) as f:
            kinds = {fields[1]: fields[2] for fields in (line.split() for line in f) if len(fields) > 2}
    except OSError:
        kinds = {}
    if kinds.get(root) not in _RAM_FILESYSTEMS or not os.access(root, os.W_OK | os.X_OK):
        raise ValueError(
            f'log.dirs="{MEMORY}" needs a writable RAM filesystem (tmpfs) at {root}, which this system '
            "does not have; leave log.dirs unset for a temporary directory on disk"
        )
    return root


class EmbeddedBroker:
    """A Shoal broker in this process. Settings by Kafka's names (a mapping, or keyword
    arguments with underscores for dots: ``num_partitions=3``)."""

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        fast_timers: bool = False,
        data_dir: str | Path | None = None,
        **settings: Any,
    ) -> None:
        merged: dict[str, Any] = dict(EMBEDDED_DEFAULTS)
        if fast_timers:
            merged.update(FAST_TIMERS)
        merged.update(config or {})
        merged.update({k.replace("_", "."): v for k, v in settings.items()})
        for name in ("log.dirs", "log.dir"):
            if name in merged:
                path = merged.pop(name)
                data_dir = data_dir if data_dir is not None else path
        self._memory = str(data_dir) == MEMORY
        if self._memory:
            memory_root()  # refused here, not at start
            data_dir = None
        merged.setdefault("listeners", "PLAINTEXT://127.0.0.1:0")
        # The operations listener (/metrics, /health) on a free port, never 9644: tests run brokers side by side.
        merged.setdefault("shoal.http.listeners", "http://127.0.0.1:0")
        self._settings = {k: _text(v) for k, v in merged.items()}
        BrokerConfig.from_sources(self._with_dir("/nonexistent-check"))  # ConfigError now, not at start
        self._own_dir = data_dir is None
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self.faults = FaultInjector()  # kept across restarts
        self._broker: Broker | None = None
        self._port = 0
        self._ports: dict[str, int] = {}  # listener name -> its port, once started
        self._http_port = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the broker runs on
        self._thread: threading.Thread | None = None  # set in synchronous use
        self._helpers: dict[str, Any] = {}

    # -- where it is ------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>``, for any Kafka client."""
        if self._port == 0:
            raise RuntimeError("the embedded broker is not started")
        return f"127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    def listener_port(self, name: str) -> int:
        """The port listener ``name`` (as in ``listeners``, any case) was bound to."""
        if not self._ports:
            raise RuntimeError("the embedded broker is not started")
        return self._ports[name.upper()]

    @property
    def http_port(self) -> int:
        """The operations listener's port (``http://127.0.0.1:<port>/metrics``); 0 when it is off."""
        return self._http_port

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise RuntimeError("the embedded broker is not started")
        return self._data_dir

    @property
    def broker(self) -> Broker:
        """The running ``Broker`` (touch it only on its loop: in synchronous use, via ``call``)."""
        if self._broker is None:
            raise RuntimeError("the embedded broker is not running")
        return self._broker

    @property
    def running(self) -> bool:
        return self._broker is not None

    def _with_dir(self, path: str) -> dict[str, str]:
        return {**self._settings, "log.dirs": path}

    # -- async lifecycle (the caller's loop) --------------------------------------------
    async def astart(self) -> EmbeddedBroker:
        if self._broker is not None:
            raise RuntimeError("the embedded broker is already running")
        if self._data_dir is None:
            where = memory_root() if self._memory else None
            self._data_dir = Path(tempfile.mkdtemp(prefix="shoal-embedded-", dir=where))
        self._loop = asyncio.get_running_loop()
        await self._boot()
        return self

    async def _boot(self) -> None:
        settings = self._with_dir(str(self._data_dir))
        if self._port:  # a restart keeps its port, so clients reconnect to the same address
            settings["listeners"] = f"PLAINTEXT://127.0.0.1:{self._port}"
            if self._http_port and settings["shoal.http.listeners"] == "http://127.0.0.1:0":
                settings["shoal.http.listeners"] = f"http://127.0.0.1:{self._http_port}"
        broker = Broker(BrokerConfig.from_sources(settings))
        broker.faults = self.faults
        await broker.start()
        self._broker = broker
        self._port = broker.server.bound[0][1]
        self._ports = {name: addrs[0][1] for name, addrs in broker.server.bound_by_listener.items()}
        self._http_port = broker.ops.port if broker.ops is not None else 0

    async def astop(self, clean: bool = True, *, lose_unflushed: bool = True) -> None:
        """Stop (cleanly, or as a crash would: see ``arestart``) and remove the data directory
        this object created."""
        try:
            await self._close_helpers()
            if self._broker is not None:
                broker, self._broker = self._broker, None
                if clean:
                    await broker.stop()
                else:
                    await broker.halt(lose_unflushed=lose_unflushed)
        finally:
            if self._own_dir and self._data_dir is not None:
                shutil.rmtree(self._data_dir, ignore_errors=True)
                self._data_dir = None
            self._port = 0

    async def arestart(self, clean: bool = True, *, lose_unflushed: bool = True) -> None:
        """Stop and start again on the same port and data.

        ``clean=False`` stops as a crash would (no flush, no clean-shutdown
        marker), so the broker recovers its logs as after ``kill -9``; with
        ``lose_unflushed`` (the default) every record not yet fsynced is gone
        too, as after a power cut (acks=all records included: Kafka, too,
        acknowledges before fsync). ``lose_unflushed=False`` is a process
        crash: the page cache keeps what was written.
        """
        await self._close_helpers()
        broker, self._broker = self.broker, None
        if clean:
            await broker.stop()
        else:
            await broker.halt(lose_unflushed=lose_unflushed)
        await self._boot()

    async def __aenter__(self) -> EmbeddedBroker:
        return await self.astart()

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    # -- synchronous lifecycle (a loop in a thread) ---------------------------------------
    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        if self._thread is not None or self._broker is not None:
            raise RuntimeError("the embedded broker is already running")
        loop = _new_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="shoal-embedded-broker", daemon=True)
        self._thread.start()
        ready.wait()
        self._loop = loop
        try:
            self._run(self.astart(), timeout)
        except BaseException:
            self._end_thread(loop)
            raise
        return self

    def stop(self, clean: bool = True, *, lose_unflushed: bool = True, timeout: float = 30.0) -> None:
        if self._thread is None:
            return
        loop = self._loop
        assert loop is not None
        try:
            self._run(self.astop(clean, lose_unflushed=lose_unflushed), timeout)
        finally:
            self._end_thread(loop)

    def _end_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        async def finish() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_asyncgens()
            await loop.shutdown_default_executor()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(finish(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        assert self._thread is not None
        self._thread.join(30)
        loop.close()
        self._thread = None
        self._loop = None

    def restart(self, clean: bool = True, *, lose_unflushed: bool = True, timeout: float = 60.0) -> None:
        self._run(self.arestart(clean, lose_unflushed=lose_unflushed), timeout)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Callable[[], T | Awaitable[T]], timeout: float = 30.0) -> T:
        """Run ``fn()`` on the broker's loop and return its result (awaited if it is a coroutine):
        how synchronous code touches ``broker`` safely."""

        async def run() -> T:
            result = fn()
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                return await result
            return result  # type: ignore[return-value]

        return self._run(run(), timeout)

    def _run(self, coro: Awaitable[T], timeout: float) -> T:
        if self._thread is None or self._loop is None:
            close = getattr(coro, "close", None)
            if close is not None:
                close()
            raise RuntimeError(
                "this EmbeddedBroker runs on your event loop (async with): use the a-prefixed coroutines"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    # -- helpers: async ------------------------------------------------------------------
    async def _helper(self, kind: str) -> Any:
        client = self._helpers.get(kind)
        if client is None:
            from shoal.client.admin.client import AsyncAdmin
            from shoal.client.producer.producer import AsyncProducer

            if kind == "admin":
                client = AsyncAdmin(bootstrap_servers=self.bootstrap_servers, client_id="shoal-embedded")
            else:
                client = AsyncProducer(
                    bootstrap_servers=self.bootstrap_servers, client_id="shoal-embedded", acks="all", linger_ms=0
                )
            await client.start()
            self._helpers[kind] = client
        return client

    async def _close_helpers(self) -> None:
        helpers, self._helpers = self._helpers, {}
        for client in helpers.values():
            with contextlib.suppress(Exception):
                await client.close()

    async def acreate_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> None:
        """Create a topic (CreateTopics through the bundled admin client; errors raise)."""
        from shoal.client.admin.types import NewTopic

        admin = await self._helper("admin")
        topic = NewTopic(name, partitions, 1, {k: _text(v) for k, v in (config or {}).items()})
        results = await admin.create_topics([topic])
        error = results.get(name) if isinstance(results, Mapping) else None
        if isinstance(error, BaseException):
            raise error

    async def aset_group_config(self, group_id: str, settings: Mapping[str, Any]) -> None:
        """Set group configs (IncrementalAlterConfigs on the GROUP resource), e.g.
        ``{"share.auto.offset.reset": "earliest"}`` so a new share group reads from the start."""
        from shoal.client.admin.types import AlterConfigOp, ConfigResource

        admin = await self._helper("admin")
        resource = ConfigResource.group(group_id)
        ops = [AlterConfigOp.set(k, _text(v)) for k, v in settings.items()]
        error = (await admin.incremental_alter_configs({resource: ops})).get(resource)
        if isinstance(error, BaseException):
            raise error

    async def aproduce(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        *,
        partition: int | None = None,
        headers: Iterable[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """Produce one record (acks=all) and return its offset."""
        producer = await self._helper("producer")
        meta = await producer.send_and_wait(
            topic,
            _bytes(value),
            key=_bytes(key),
            partition=partition,
            headers=list(headers or ()),
            timestamp_ms=timestamp_ms,
        )
        return meta.offset

    async def aread(
        self, topic: str, partition: int = 0, offset: int = 0, *, max_records: int | None = None, timeout: float = 10.0
    ) -> list[Any]:
        """The records of one partition from ``offset`` up to the end it has now (``ConsumerRecord``s)."""
        from shoal.client.consumer.consumer import AsyncConsumer
        from shoal.client.core.cluster import TopicPartition

        tp = TopicPartition(topic, partition)
        out: list[Any] = []
        async with AsyncConsumer(bootstrap_servers=self.bootstrap_servers, client_id="shoal-embedded") as consumer:
            end = (await consumer.end_offsets([tp]))[tp]
            if offset >= end:
                return out
            consumer.assign([tp])
            consumer.seek(tp, offset)
            deadline = asyncio.get_running_loop().time() + timeout
            while (max_records is None or len(out) < max_records) and await consumer.position(tp) < end:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    raise TimeoutError(f"{topic}-{partition}: read {len(out)} records, end {end} not reached")
                batch = await consumer.getmany(tp, timeout_ms=int(min(left, 1.0) * 1000))
                for records in batch.values():
                    out.extend(r for r in records if r.offset < end)
        return out if max_records is None else out[:max_records]

    async def await_group_stable(self, group_id: str, *, members: int | None = None, timeout: float = 30.0) -> Any:
        """Wait until a classic or share group is Stable (with ``members`` members, if given);
        returns its description."""
        admin = await self._helper("admin")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: Any = None
        while loop.time() < deadline:
            for describe in (admin.describe_consumer_groups, admin.describe_share_groups):
                found = (await describe([group_id])).get(group_id)
                if isinstance(found, BaseException) or found is None:
                    continue
                last = found
                if str(found.state).lower() == "stable" and (members is None or len(found.members) == members):
                    return found
            await asyncio.sleep(0.02)
        state = getattr(last, "state", "unknown")
        raise TimeoutError(f"group {group_id!r} not stable after {timeout} s (state {state})")

    async def ashare_partition_state(self, group_id: str, topic: str, partition: int = 0) -> SharePartitionState | None:
        """The share partition's in-flight state as its leader holds it; None until a member fetched it."""
        return self._share_state(group_id, topic, partition)

    def _share_state(self, group_id: str, topic: str, partition: int) -> SharePartitionState | None:
        b = self.broker
        t = b.topics.get(topic) if b.topics is not None else None
        if t is None or b.share_partitions is None:
            return None
        entry = b.share_partitions.entries.get((group_id, t.topic_id, partition))
        if entry is None or entry.sp is None:
            return None
        sp = entry.sp
        ranges = tuple((a, z, STATE_NAMES[s], n, m) for a, z, s, n, m in sp.ranges())
        return SharePartitionState(group_id, topic, partition, sp.start_offset, sp.end_offset, ranges)

    # -- helpers: synchronous --------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> None:
        self._run(self.acreate_topic(name, partitions, config), 30)

    def set_group_config(self, group_id: str, settings: Mapping[str, Any]) -> None:
        self._run(self.aset_group_config(group_id, settings), 30)

    def produce(self, topic: str, value: bytes | str | None, key: bytes | str | None = None, **kw: Any) -> int:
        return self._run(self.aproduce(topic, value, key, **kw), 30)

    def read(self, topic: str, partition: int = 0, offset: int = 0, **kw: Any) -> list[Any]:
        return self._run(self.aread(topic, partition, offset, **kw), kw.get("timeout", 10.0) + 10)

    def wait_group_stable(self, group_id: str, *, members: int | None = None, timeout: float = 30.0) -> Any:
        return self._run(self.await_group_stable(group_id, members=members, timeout=timeout), timeout + 10)

    def share_partition_state(self, group_id: str, topic: str, partition: int = 0) -> SharePartitionState | None:
        return self._run(self.ashare_partition_state(group_id, topic, partition), 30)


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value
