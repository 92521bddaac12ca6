"""The client core: configuration checks, connections, metadata, coordinators, retries.

Most tests run against a real broker process. A few need a peer that
misbehaves on purpose (never answers, hangs up mid-request, speaks an older
ApiVersions); `ScriptedPeer` is such a peer: a tiny server on our codec that
answers ApiVersions like a broker and then does what the test scripts.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from shoal.client.core.client_core import Backoff, ClientCore
from shoal.client.core.cluster import ClusterMetadata, TopicPartition
from shoal.client.core.config import build_config, parse_bootstrap
from shoal.client.core.conn import BrokerConnection
from shoal.client.core.errors import (
    BrokerResponseError,
    ClientClosedError,
    ConfigError,
    KafkaConnectionError,
    KafkaTimeoutError,
)
from shoal.protocol.api import api_by_name, apis
from shoal.protocol.errors import ErrorCode
from shoal.protocol.frames import FrameReader, decode_request, encode_response

# -- configuration -----------------------------------------------------------------------


def test_unknown_key_names_the_key() -> None:
    with pytest.raises(ConfigError) as e:
        build_config("producer", {"bootstrap.servers": "h:1", "linger.msec": 5})
    assert e.value.key == "linger.msec"
    assert "linger.msec" in str(e.value)


def test_kwargs_use_underscores_and_merge_with_mapping() -> None:
    cfg = build_config("producer", {"bootstrap.servers": "h:1"}, {"linger_ms": "7", "compression_type": "ZSTD"})
    assert cfg["linger.ms"] == 7 and cfg.linger_ms == 7
    assert cfg.compression_type == "zstd"
    assert cfg.bootstrap_servers == (("h", 1),)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("linger.ms", "soon"),
        ("linger.ms", -1),
        ("linger.ms", True),
        ("enable.idempotence", "yes"),
        ("compression.type", "brotli"),
        ("acks", "2"),
        ("key.serializer", "str"),
        ("client.id", 7),
    ],
)
def test_bad_values_name_the_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as e:
        build_config("producer", {"bootstrap.servers": "h:1", key: value})
    assert e.value.key == key


@pytest.mark.parametrize("servers", ["", "localhost", "h:", ":9092", "h:0", "h:70000", "h:x", "a b:1", 42, [7]])
def test_bad_bootstrap_strings(servers: Any) -> None:
    with pytest.raises(ConfigError) as e:
        build_config("admin", {"bootstrap.servers": servers})
    assert e.value.key == "bootstrap.servers"


def test_bootstrap_forms() -> None:
    assert parse_bootstrap("a:1, b:2") == (("a", 1), ("b", 2))
    assert parse_bootstrap(["PLAINTEXT://a:1", "[::1]:3"]) == (("a", 1), ("::1", 3))


def test_required_and_unsupported_keys() -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        build_config("admin", {})
    with pytest.raises(ConfigError, match=r"group\.id"):
        build_config("share_consumer", {"bootstrap.servers": "h:1"})
    with pytest.raises(ConfigError, match="transactions are not supported"):
        build_config("producer", {"bootstrap.servers": "h:1", "transactional.id": "t"})


def test_idempotence_rules_follow_kafka() -> None:
    # Default idempotence quietly yields to settings it cannot work with ...
    cfg = build_config("producer", {"bootstrap.servers": "h:1", "acks": 1})
    assert cfg.enable_idempotence is False and cfg.acks == 1
    # ... but asked for explicitly, the conflict is an error.
    with pytest.raises(ConfigError) as e:
        build_config("producer", {"bootstrap.servers": "h:1", "acks": "1", "enable.idempotence": True})
    assert e.value.key == "acks"
    assert build_config("producer", {"bootstrap.servers": "h:1"}).acks == -1


def test_consumer_heartbeat_below_session() -> None:
    with pytest.raises(ConfigError) as e:
        build_config("consumer", {"bootstrap.servers": "h:1", "heartbeat.interval.ms": 50000})
    assert e.value.key == "heartbeat.interval.ms"


# -- sans-IO pieces ------------------------------------------------------------------------


def _metadata(topics: list[tuple[str | None, uuid.UUID, int, list[tuple[int, int]]]]) -> Any:
    M = api_by_name("Metadata").response_class()
    return M(
        brokers=[M.MetadataResponseBroker(node_id=1, host="h", port=1)],
        cluster_id="c",
        controller_id=1,
        topics=[
            M.MetadataResponseTopic(
                error_code=err,
                name=name,
                topic_id=tid,
                partitions=[M.MetadataResponsePartition(partition_index=p, leader_id=leader) for p, leader in parts],
            )
            for name, tid, err, parts in topics
        ],
    )


def test_cluster_metadata_partial_and_full_updates() -> None:
    m = ClusterMetadata()
    a, b = uuid.uuid4(), uuid.uuid4()
    m.update(_metadata([("a", a, 0, [(0, 1), (1, 1)]), ("b", b, 0, [(0, -1)])]), 1.0)
    assert m.partitions_for("a") == [0, 1]
    assert m.leader(TopicPartition("a", 1)) == 1
    assert m.leader(TopicPartition("b", 0)) is None  # leaderless
    assert m.leader(TopicPartition("a", 9)) is None
    assert m.topic_name(b) == "b"
    # A partial update naming only "a" keeps "b"; an error on "a" drops it.
    m.update(_metadata([("a", a, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])]), 2.0)
    assert "a" not in m.topics and m.topic_errors["a"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert m.topic_name(a) is None and m.partitions_for("b") == [0]
    # A recreated topic gets a new id; the old id no longer resolves.
    a2 = uuid.uuid4()
    m.update(_metadata([("a", a2, 0, [(0, 1)])]), 3.0)
    assert m.topic_id("a") == a2 and m.topic_name(a) is None
    # A full update forgets topics it does not name.
    m.update(_metadata([("a", a2, 0, [(0, 1)])]), 4.0, full=True)
    assert set(m.topics) == {"a"} and m.topic_name(b) is None
    # Topic named only by id (Metadata v12+ may answer name null).
    m.update(_metadata([(None, a2, 0, [(0, 1), (1, 1)])]), 5.0)
    assert m.partitions_for("a") == [0, 1]


def test_backoff_grows_with_jitter_and_caps() -> None:
    b = Backoff(100, 1000)
    waits = [b.next_ms() for _ in range(8)]
    assert 80 <= waits[0] <= 120
    assert 160 <= waits[1] <= 240
    assert all(w <= 1200 for w in waits) and waits[-1] >= 800
    b.reset()
    assert b.next_ms() <= 120


# -- a peer that misbehaves on purpose ---------------------------------------------------------


class ScriptedPeer:
    """Answers ApiVersions like a broker; every other request goes to `on_request`.

    `on_request(request, reply, transport)`: call `reply(body)` to answer,
    or do nothing (swallow), or `transport.close()` (hang up).
    """

    def __init__(self, on_request: Callable[..., None], api_versions_max: int | None = None) -> None:
        self.on_request = on_request
        self.api_versions_max = api_versions_max
        self.requests: list[Any] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> ScriptedPeer:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _PeerProtocol(self), "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]


class _PeerProtocol(asyncio.Protocol):
    def __init__(self, peer: ScriptedPeer) -> None:
        self.peer = peer
        self.reader = FrameReader()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for frame in self.reader.feed(data):
            key, version = int.from_bytes(frame[0:2], "big"), int.from_bytes(frame[2:4], "big")
            corr = int.from_bytes(frame[4:8], "big", signed=True)
            if key == 18 and self.peer.api_versions_max is not None and version > self.peer.api_versions_max:
                self._write(18, 0, corr, self._versions(ErrorCode.UNSUPPORTED_VERSION))
                continue
            req = decode_request(frame)
            self.peer.requests.append(req)
            if key == 18:
                self._write(18, version, corr, self._versions(0))
                continue

            def reply(body: Any, _req: Any = req) -> None:
                self._write(_req.api.key, _req.version, _req.correlation_id, body)

            self.peer.on_request(req, reply, self.transport)

    def _versions(self, code: int) -> Any:
        R = api_by_name("ApiVersions").response_class()
        keys = []
        for a in apis().values():
            hi = a.max_version
            if a.key == 18 and self.peer.api_versions_max is not None:
                hi = self.peer.api_versions_max
            keys.append(R.ApiVersion(api_key=a.key, min_version=a.min_version, max_version=hi))
        return R(error_code=code, api_keys=keys)

    def _write(self, key: int, version: int, corr: int, body: Any) -> None:
        self.transport.writelines(encode_response(key, version, corr, body))  # type: ignore[attr-defined]


def _metadata_reply(port: int) -> Any:
    M = api_by_name("Metadata").response_class()
    return M(brokers=[M.MetadataResponseBroker(node_id=7, host="127.0.0.1", port=port)], cluster_id="x")


async def test_older_api_versions_is_retried_at_the_peers_version() -> None:
    async with ScriptedPeer(lambda *a: None, api_versions_max=2) as peer:
        conn = await BrokerConnection.connect("127.0.0.1", peer.port)
        try:
            assert conn.api_versions[18] == (0, 2)
            assert conn.version("Metadata") == api_by_name("Metadata").max_version
        finally:
            conn.close()


async def test_request_timeout_fails_fast_and_closes_the_connection() -> None:
    async with ScriptedPeer(lambda req, reply, t: None) as peer:
        conn = await BrokerConnection.connect("127.0.0.1", peer.port, request_timeout_ms=300)
        start = time.monotonic()
        first = conn.send("Metadata", lambda v: api_by_name("Metadata").request_class()(topics=[]))
        second = conn.send("Metadata", lambda v: api_by_name("Metadata").request_class()(topics=[]))
        with pytest.raises(KafkaTimeoutError):
            await first
        with pytest.raises(KafkaConnectionError):
            await second
        assert time.monotonic() - start < 5
        assert conn.closed
        assert KafkaTimeoutError("x").retriable and KafkaConnectionError("x").retriable


async def test_hang_up_mid_request_is_a_retriable_error() -> None:
    async with ScriptedPeer(lambda req, reply, t: t.close()) as peer:
        conn = await BrokerConnection.connect("127.0.0.1", peer.port, request_timeout_ms=30000)
        start = time.monotonic()
        with pytest.raises(KafkaConnectionError) as e:
            await conn.request("Metadata", api_by_name("Metadata").request_class()(topics=[]))
        assert e.value.retriable
        assert time.monotonic() - start < 5
        with pytest.raises(KafkaConnectionError):
            await conn.request("Metadata", api_by_name("Metadata").request_class()(topics=[]))


async def test_bootstrap_to_nothing_fails_fast() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    core = ClientCore(build_config("admin", {"bootstrap.servers": f"127.0.0.1:{port}"}))
    start = time.monotonic()
    with pytest.raises(KafkaConnectionError, match="no bootstrap server reachable"):
        await core.start()
    assert time.monotonic() - start < 10


def _coordinator_reply(req: Any, port: int) -> Any:
    """FindCoordinator: group "g" is on node 7, at the scripted peer's own port."""
    R = req.api.response_class()
    if req.version >= 4:
        return R(coordinators=[R.Coordinator(key="g", node_id=7, host="127.0.0.1", port=port)])
    return R(node_id=7, host="127.0.0.1", port=port)


async def test_coordinator_moves_are_followed() -> None:
    """NOT_COORDINATOR drops the cached coordinator; the call is retried after a new lookup."""
    answers = {"find": 0, "describe": 0}
    peer_port = 0

    def on_request(req: Any, reply: Callable[[Any], None], transport: Any) -> None:
        name = req.api.name
        if name == "Metadata":
            reply(_metadata_reply(peer_port))
        elif name == "FindCoordinator":
            answers["find"] += 1
            reply(_coordinator_reply(req, peer_port))
        elif name == "DescribeGroups":
            answers["describe"] += 1
            R = req.api.response_class()
            code = ErrorCode.NOT_COORDINATOR if answers["describe"] == 1 else 0
            reply(R(groups=[R.DescribedGroup(error_code=code, group_id="g")]))

    async with ScriptedPeer(on_request) as peer:
        peer_port = peer.port
        core = ClientCore(
            build_config("admin", {"bootstrap.servers": f"127.0.0.1:{peer.port}", "retry.backoff.ms": 10})
        )
        await core.start()
        try:
            req = api_by_name("DescribeGroups").request_class()(groups=["g"])
            resp = await core.coordinator_call("g", "DescribeGroups", req, error_of=lambda r: r.groups[0].error_code)
            assert resp.groups[0].error_code == 0
            assert answers == {"find": 2, "describe": 2}
        finally:
            await core.close()


async def test_a_timeout_says_how_long_it_tried_and_the_last_error() -> None:
    """#27: a timeout error said "30000 ms" after a minute and dropped the cause."""
    peer_port = 0

    def on_request(req: Any, reply: Callable[[Any], None], transport: Any) -> None:
        name = req.api.name
        if name == "Metadata":
            reply(_metadata_reply(peer_port))
        elif name == "FindCoordinator":
            reply(_coordinator_reply(req, peer_port))
        elif name == "DescribeGroups":
            R = req.api.response_class()
            reply(R(groups=[R.DescribedGroup(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, group_id="g")]))

    async with ScriptedPeer(on_request) as peer:
        peer_port = peer.port
        core = ClientCore(
            build_config("admin", {"bootstrap.servers": f"127.0.0.1:{peer.port}", "retry.backoff.ms": 20})
        )
        await core.start()
        try:
            req = api_by_name("DescribeGroups").request_class()(groups=["g"])
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError) as e:
                await core.coordinator_call(
                    "g", "DescribeGroups", req, error_of=lambda r: r.groups[0].error_code, timeout_ms=400
                )
            took_ms = (time.monotonic() - started) * 1000
        finally:
            await core.close()
    text = str(e.value)
    assert "COORDINATOR_LOAD_IN_PROGRESS" in text and "budget 400 ms" in text and "attempts" in text, text
    said = int(re.search(r"did not succeed in (\d+) ms", text).group(1))
    assert 400 <= said <= took_ms + 1, (said, took_ms)


# -- against a real broker -----------------------------------------------------------------------


async def test_metadata_topics_and_pipelining(shared_broker, topic_name) -> None:
    core = ClientCore(build_config("admin", {"bootstrap.servers": shared_broker.bootstrap}))
    await core.start()
    try:
        # One socket: the bootstrap connection was adopted as the broker's.
        assert len(core._conns) == 1
        await core.wait_for_topics([topic_name], allow_auto_create=True)
        assert core.metadata.partitions_for(topic_name) == [0]
        assert core.metadata.topic_id(topic_name) != uuid.UUID(int=0)
        leader = await core.leader_for(TopicPartition(topic_name, 0))
        conn = await core.connection(leader)
        # Many requests in flight on one connection, answered in order.
        M = api_by_name("Metadata").request_class()
        futs = [conn.send("Metadata", M(topics=[M.MetadataRequestTopic(name=topic_name)])) for _ in range(200)]
        assert conn.in_flight == 200
        results = await asyncio.gather(*futs)
        assert all(r.topics[0].name == topic_name for r in results)
        # An invalid topic name is a non-retriable error, raised at once.
        start = time.monotonic()
        with pytest.raises(BrokerResponseError) as e:
            await core.wait_for_topics(["bad/name"], allow_auto_create=True, timeout_ms=20000)
        assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert time.monotonic() - start < 5
        # A topic that does not exist, without auto-creation: a timeout, not a hang.
        with pytest.raises(KafkaTimeoutError):
            await core.wait_for_topics([topic_name + "-absent"], timeout_ms=500)
        node = await core.find_coordinator("some-group")
        assert node == leader
    finally:
        await core.close()
    with pytest.raises(ClientClosedError):
        await core.connection(leader)


async def test_reconnects_after_broker_restart(broker_factory, topic_name) -> None:
    b = broker_factory()
    b.start()
    core = ClientCore(build_config("admin", {"bootstrap.servers": b.bootstrap, "request.timeout.ms": 5000}))
    await core.start()
    try:
        await core.wait_for_topics([topic_name], allow_auto_create=True)
        node = await core.leader_for(TopicPartition(topic_name, 0))
        await asyncio.to_thread(b.stop)
        M = api_by_name("Metadata").request_class()
        with pytest.raises(KafkaConnectionError):
            await core.send(node, "Metadata", M(topics=[]))
        await asyncio.to_thread(b.start)
        resp = await core.retry(
            lambda: core.send(node, "Metadata", M(topics=[M.MetadataRequestTopic(name=topic_name)]))
        )
        assert resp.topics[0].error_code == 0
    finally:
        await core.close()


def test_config_survives_pickling() -> None:
    # Spark ships a data source's settings to its workers with pickle.
    import pickle

    cfg = build_config("consumer", {"bootstrap.servers": "h:1", "fetch.max.wait.ms": 7})
    copy = pickle.loads(pickle.dumps(cfg))
    assert copy == cfg and copy.fetch_max_wait_ms == 7
    assert copy.with_overrides(client_id="x")["client.id"] == "x"
