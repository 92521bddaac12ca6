"""The client core over real sockets: connections, metadata, coordinators, retries.

Most tests run against a real broker. A few need a peer that misbehaves on
purpose (never answers, hangs up mid-request, speaks an older ApiVersions);
`ScriptedPeer` is such a peer: a tiny server on our codec that answers
ApiVersions like a broker and then does what the test scripts. The socket-free
part of the client core is in tests/unit/test_client_core.py.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from shoal.client.core.client_core import ClientCore
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import build_config
from shoal.client.core.conn import BrokerConnection
from shoal.client.core.errors import (
    BrokerResponseError,
    ClientClosedError,
    KafkaConnectionError,
    KafkaTimeoutError,
)
from shoal.protocol.api import api_by_name, apis
from shoal.protocol.errors import ErrorCode
from shoal.protocol.frames import FrameReader, decode_request, encode_response

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
