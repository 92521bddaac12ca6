"""What every client shares: connections per broker, metadata, coordinators, retries.

``ClientCore`` is the one asyncio shell under AsyncProducer, AsyncConsumer,
AsyncShareConsumer and AsyncAdmin:

* **Connections.** At most one ``BrokerConnection`` per broker, opened on
  first use (concurrent callers share one attempt), reopened after a loss
  with exponential reconnect backoff. The bootstrap connection is adopted as
  the broker's own once metadata names it, so a one-broker cluster uses one
  socket.
* **Metadata.** ``ClusterMetadata`` (sans-IO) is refreshed for the topics the
  application uses: on demand (a leader is unknown, a broker said
  NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION), and at least every
  ``metadata.max.age.ms``. Concurrent refreshes coalesce into one request.
* **Coordinators.** FindCoordinator answers are cached per (key type, key)
  and forgotten on NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE;
  ``coordinator_call`` re-discovers and retries with backoff, and waits out
  COORDINATOR_LOAD_IN_PROGRESS.
* **Retries.** ``Backoff`` is Kafka's exponential backoff with ±20% jitter;
  ``retry`` repeats an operation while its error is retriable and the
  deadline allows, so a broker that disappears yields a transparent retry or
  a typed error, never a hang past the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from shoal.client.core.cluster import BrokerInfo, ClusterMetadata, TopicPartition
from shoal.client.core.config import Config
from shoal.client.core.conn import BrokerConnection
from shoal.client.core.errors import (
    BrokerResponseError,
    ClientClosedError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    SaslAuthenticationError,
)
from shoal.client.core.sasl import login_from_config
from shoal.client.core.tls import client_ssl_context
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import CoordinatorType
from shoal.protocol.errors import ErrorCode

__all__ = ["Backoff", "ClientCore", "is_retriable"]

log = logging.getLogger("shoal.client")

T = TypeVar("T")

_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_METADATA_STALE = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


def is_retriable(exc: BaseException) -> bool:
    if isinstance(exc, BrokerResponseError):
        return exc.retriable
    return bool(getattr(exc, "retriable", False))


def metadata_stale(code: int) -> bool:
    """Whether an error code means our picture of leaders or topics is out of date."""
    return code in _METADATA_STALE


class Backoff:
    """Exponential backoff with jitter: base * 2**attempt, capped, ±20%."""

    __slots__ = ("attempt", "base_ms", "max_ms")

    def __init__(self, base_ms: int, max_ms: int) -> None:
        self.base_ms = max(base_ms, 1)
        self.max_ms = max(max_ms, self.base_ms)
        self.attempt = 0

    def next_ms(self) -> float:
        raw = min(self.base_ms * (2 ** min(self.attempt, 30)), self.max_ms)
        self.attempt += 1
        return raw * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.attempt = 0


class ClientCore:
    """Connections, metadata and coordinator discovery shared by one client object."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.ssl_context = client_ssl_context(config)  # None for PLAINTEXT; shared by every connection
        self.metadata = ClusterMetadata()
        self.wanted_topics: set[str] = set()
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Future] = {}
        self._reconnect: dict[int, tuple[float, Backoff]] = {}
        self._coordinators: dict[tuple[int, str], int] = {}
        self._refresh: asyncio.Future | None = None
        self._refresh_all = False
        self._closed = False
        self._started = False
        self._maintenance: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # The latest retriable error a retry saw: a call cut off by its own deadline (the admin's
        # hard cap) names it instead of only saying that time ran out.
        self.last_retry_error: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def now_ms(self) -> float:
        return asyncio.get_running_loop().time() * 1000

    async def start(self) -> None:
        """Reach a bootstrap server and load metadata; fails fast with KafkaConnectionError."""
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        errors: list[str] = []
        deadline = self.now_ms() + self.config["default.api.timeout.ms"]
        backoff = Backoff(self.config["reconnect.backoff.ms"], self.config["reconnect.backoff.max.ms"])
        servers = list(self.config["bootstrap.servers"])
        conn: BrokerConnection | None = None
        for round_ in range(3):
            for i, (host, port) in enumerate(servers):
                try:
                    conn = await self._open(host, port, -1 - i)
                    break
                except SaslAuthenticationError:
                    raise  # a refused login fails the same way on every server: not retried
                except KafkaClientError as e:
                    errors.append(str(e))
            if conn is not None or self.now_ms() + backoff.base_ms > deadline or round_ == 2:
                break
            await asyncio.sleep(backoff.next_ms() / 1000)
        if conn is None:
            where = ", ".join(f"{h}:{p}" for h, p in servers)
            raise KafkaConnectionError(f"no bootstrap server reachable ({where}): {errors[-1] if errors else ''}")
        self._started = True
        try:
            resp = await conn.request("Metadata", self._metadata_request(list(self.wanted_topics), False))
        except KafkaClientError:
            conn.close()
            raise
        self.metadata.update(resp, self.now_ms())
        self._adopt(conn)
        self._maintenance = asyncio.get_running_loop().create_task(self._refresh_loop())

    def _adopt(self, conn: BrokerConnection) -> None:
        for b in self.metadata.brokers.values():
            if (b.host, b.port) == (conn.host, conn.port) and b.node_id not in self._conns:
                conn.node_id = b.node_id
                self._track(conn)
                return
        conn.close()

    def _track(self, conn: BrokerConnection) -> None:
        self._conns[conn.node_id] = conn
        conn.on_close.append(self._on_conn_closed)

    def _on_conn_closed(self, conn: BrokerConnection) -> None:
        if self._conns.get(conn.node_id) is conn:
            del self._conns[conn.node_id]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
        for conn in list(self._conns.values()):
            conn.close()
        self._conns.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the client is closed")
        if not self._started:
            raise ClientClosedError("the client was not started (use 'async with' or await start())")

    # -- connections ---------------------------------------------------------------
    async def _open(self, host: str, port: int, node_id: int) -> BrokerConnection:
        cfg = self.config
        return await BrokerConnection.connect(
            host,
            port,
            node_id=node_id,
            client_id=cfg["client.id"],
            request_timeout_ms=cfg["request.timeout.ms"],
            connect_timeout_ms=cfg["socket.connection.setup.timeout.ms"],
            ssl=self.ssl_context,
            sasl=login_from_config(cfg),
        )

    async def connection(self, node_id: int) -> BrokerConnection:
        """The open connection to broker ``node_id``, connecting if needed."""
        self._check_open()
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(node_id)
        if pending is None:
            pending = asyncio.ensure_future(self._connect(node_id))
            self._connecting[node_id] = pending
            pending.add_done_callback(lambda _f, n=node_id: self._connecting.pop(n, None))
        return await asyncio.shield(pending)

    async def _connect(self, node_id: int) -> BrokerConnection:
        info = self.metadata.broker(node_id)
        if info is None:
            await self.refresh_metadata()
            info = self.metadata.broker(node_id)
            if info is None:
                raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        now = self.now_ms()
        not_before, backoff = self._reconnect.get(
            node_id, (0.0, Backoff(self.config["reconnect.backoff.ms"], self.config["reconnect.backoff.max.ms"]))
        )
        if not_before > now:
            await asyncio.sleep((not_before - now) / 1000)
        try:
            conn = await self._open(info.host, info.port, node_id)
        except KafkaClientError:
            self._reconnect[node_id] = (self.now_ms() + backoff.next_ms(), backoff)
            raise
        self._reconnect.pop(node_id, None)
        if self._closed:
            conn.close()
            raise ClientClosedError("the client is closed")
        self._track(conn)
        return conn

    def least_loaded_node(self) -> int | None:
        """An open connection with the fewest requests in flight, else any known broker."""
        best = None
        for node_id, conn in self._conns.items():
            if not conn.closed and (best is None or conn.in_flight < self._conns[best].in_flight):
                best = node_id
        if best is not None:
            return best
        nodes = list(self.metadata.brokers)
        return random.choice(nodes) if nodes else None

    async def send(self, node_id: int, which: str | int, body: Any, **kw: Any) -> Any:
        """One request to one broker, one attempt."""
        conn = await self.connection(node_id)
        return await conn.request(which, body, **kw)

    async def send_any(self, which: str | int, body: Any, **kw: Any) -> Any:
        """One request to the least loaded broker, one attempt."""
        node = self.least_loaded_node()
        if node is None:
            await self.refresh_metadata()
            node = self.least_loaded_node()
            if node is None:
                raise KafkaConnectionError("no broker known")
        return await self.send(node, which, body, **kw)

    # -- retries -------------------------------------------------------------------
    async def retry(
        self,
        op: Callable[[], Awaitable[T]],
        *,
        timeout_ms: float | None = None,
        on_error: Callable[[BaseException], Awaitable[None] | None] | None = None,
        what: str = "request",
    ) -> T:
        """Run ``op`` until it succeeds, its error is not retriable, or time runs out."""
        budget = self.config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms
        started = self.now_ms()
        deadline = started + budget
        backoff = Backoff(self.config["retry.backoff.ms"], self.config["retry.backoff.max.ms"])
        attempts = 0
        while True:
            self._check_open()
            attempts += 1
            try:
                return await op()
            except KafkaClientError as e:
                if not is_retriable(e):
                    raise
                self.last_retry_error = e
                now = self.now_ms()
                remaining = deadline - now
                if remaining <= 0:
                    raise KafkaTimeoutError(
                        f"{what} did not succeed in {now - started:.0f} ms ({attempts} attempts, "
                        f"budget {budget:.0f} ms); last error: {e}"
                    ) from e
                # The last pause is cut short so that one more attempt runs at the deadline.
                pause = min(backoff.next_ms(), remaining)
                log.debug("%s failed (%s); retrying in %.0f ms", what, e, pause)
                if on_error is not None:
                    res = on_error(e)
                    if res is not None:
                        await res
                await asyncio.sleep(pause / 1000)

    # -- metadata ------------------------------------------------------------------
    def _metadata_request(self, topics: list[str] | None, allow_auto_create: bool) -> Callable[[int], Any]:
        cls = api_by_name("Metadata").request_class()

        def build(version: int) -> Any:
            body = cls(allow_auto_topic_creation=allow_auto_create if version >= 4 else True)
            if topics is None:
                body.topics = None if version >= 1 else []
            else:
                body.topics = [cls.MetadataRequestTopic(name=t) for t in topics]
            return body

        return build

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, *, allow_auto_create: bool = False, all_topics: bool = False
    ) -> ClusterMetadata:
        """Fetch metadata for ``topics`` (plus every wanted topic), or for all topics."""
        self._check_open()
        if topics is not None:
            self.wanted_topics.update(topics)
        if allow_auto_create or all_topics:
            # Not coalesced: the request differs from the routine one.
            await self._do_refresh(all_topics, allow_auto_create)
            return self.metadata
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(self._do_refresh(False, False))
        await asyncio.shield(self._refresh)
        return self.metadata

    async def _do_refresh(self, all_topics: bool, allow_auto_create: bool) -> None:
        topics = None if all_topics else sorted(self.wanted_topics)

        async def once() -> Any:
            node = self.least_loaded_node()
            if node is None:
                raise KafkaConnectionError("no broker known")
            return await self.send(node, "Metadata", self._metadata_request(topics, allow_auto_create))

        resp = await self.retry(once, what="Metadata")
        self.metadata.update(resp, self.now_ms(), full=all_topics)

    async def wait_for_topics(
        self, topics: Iterable[str], *, allow_auto_create: bool = False, timeout_ms: float | None = None
    ) -> None:
        """Refresh until every topic is known with a leader for each partition.

        Raises BrokerResponseError for a topic error that is not retriable
        (an invalid name), KafkaTimeoutError when time runs out.
        """
        topics = set(topics)
        self.wanted_topics.update(topics)

        async def check() -> None:
            await self.refresh_metadata(allow_auto_create=allow_auto_create)
            for t in topics:
                code = self.metadata.topic_errors.get(t)
                if code:
                    raise BrokerResponseError(code, f"topic {t!r}")
                info = self.metadata.topics.get(t)
                if info is None:
                    raise BrokerResponseError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t!r}")
                for p in info.partitions:
                    if self.metadata.leader(TopicPartition(t, p)) is None:
                        raise BrokerResponseError(ErrorCode.LEADER_NOT_AVAILABLE, f"{t}-{p}")

        await self.retry(check, timeout_ms=timeout_ms, what=f"metadata for {sorted(topics)}")

    async def leader_for(self, tp: TopicPartition) -> int:
        """Node id of ``tp``'s leader, refreshing metadata when it is not known."""
        leader = self.metadata.leader(tp)
        if leader is None:
            await self.wait_for_topics([tp.topic])
            leader = self.metadata.leader(tp)
            if leader is None:
                raise BrokerResponseError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(tp))
        return leader

    async def _refresh_loop(self) -> None:
        age = self.config["metadata.max.age.ms"]
        while not self._closed:
            await asyncio.sleep(max(age, 1000) / 1000)
            if self.wanted_topics and self.now_ms() - self.metadata.updated_ms >= age:
                try:
                    await self.refresh_metadata()
                except KafkaClientError as e:
                    log.debug("periodic metadata refresh failed: %s", e)

    # -- coordinators --------------------------------------------------------------
    async def find_coordinator(
        self, key: str, key_type: int = CoordinatorType.GROUP, *, timeout_ms: float | None = None
    ) -> int:
        """Node id of the coordinator for ``key`` (cached until invalidated).

        Retries within ``timeout_ms`` (default: ``default.api.timeout.ms``).
        """
        cached = self._coordinators.get((key_type, key))
        if cached is not None:
            return cached

        async def once() -> int:
            node = self.least_loaded_node()
            if node is None:
                await self.refresh_metadata()
                node = self.least_loaded_node()
                if node is None:
                    raise KafkaConnectionError("no broker known")
            conn = await self.connection(node)
            version = conn.version("FindCoordinator")
            cls = api_by_name("FindCoordinator").request_class()
            if version >= 4:
                body = cls(key_type=key_type, coordinator_keys=[key])
            else:
                body = cls(key=key, key_type=key_type)
            resp = await conn.request("FindCoordinator", body, version=version)
            if version >= 4:
                entry = resp.coordinators[0] if resp.coordinators else None
                if entry is None:
                    raise BrokerResponseError(ErrorCode.COORDINATOR_NOT_AVAILABLE, key)
                code, msg, node_id, host, port = (
                    entry.error_code,
                    entry.error_message,
                    entry.node_id,
                    entry.host,
                    entry.port,
                )
            else:
                code, msg, node_id, host, port = resp.error_code, resp.error_message, resp.node_id, resp.host, resp.port
            if code:
                raise BrokerResponseError(code, msg)
            self.metadata.add_broker(BrokerInfo(node_id, host, port))
            return node_id

        node_id = await self.retry(once, timeout_ms=timeout_ms, what=f"FindCoordinator({key!r})")
        self._coordinators[(key_type, key)] = node_id
        return node_id

    def coordinator_dead(self, key: str, key_type: int = CoordinatorType.GROUP) -> None:
        self._coordinators.pop((key_type, key), None)

    async def coordinator_call(
        self,
        key: str,
        which: str | int,
        body: Any,
        *,
        key_type: int = CoordinatorType.GROUP,
        error_of: Callable[[Any], int] = lambda r: r.error_code,
        timeout_ms: float | None = None,
        request_timeout_ms: int | None = None,
        retry: bool = True,
        max_version: int | None = None,
    ) -> Any:
        """Send to ``key``'s coordinator; re-discover on NOT_COORDINATOR and retry.

        Returns the response; an error code ``error_of(response)`` that is not
        about the coordinator is left for the caller to interpret.
        ``max_version`` caps the negotiated version (for a caller that does not
        build the newest layout, e.g. OffsetFetch v10's topic ids).
        """

        async def once() -> Any:
            # The lookup shares the call's deadline instead of starting its own.
            left = max(deadline - self.now_ms(), 1.0)
            node = await self.find_coordinator(key, key_type, timeout_ms=left)
            try:
                kw: dict[str, Any] = {}
                if max_version is not None:
                    kw["version"] = (await self.connection(node)).version(which, hi=max_version)
                resp = await self.send(node, which, body, timeout_ms=request_timeout_ms, **kw)
            except KafkaConnectionError:
                self.coordinator_dead(key, key_type)
                raise
            code = error_of(resp)
            if code in _COORDINATOR_MOVED:
                self.coordinator_dead(key, key_type)
                raise BrokerResponseError(code)
            if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise BrokerResponseError(code)
            return resp

        budget = self.config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms
        deadline = self.now_ms() + budget
        if not retry:
            return await once()
        return await self.retry(once, timeout_ms=timeout_ms, what=f"{which} to the coordinator of {key!r}")
