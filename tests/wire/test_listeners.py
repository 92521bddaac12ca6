"""Several listeners at once: each request is answered with its own listener's addresses.

Kafka brokers serve every entry of ``listeners`` and tell a client the
addresses of the listener its request came in on (Metadata, FindCoordinator,
DescribeCluster), so a client that bootstrapped on an internal name keeps using
it. Judged with a raw Metadata request and with librdkafka on each listener.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer

from shoal.protocol import messages
from shoal.testing import EmbeddedBroker
from tests.support.brokers import RawClient

_MAP = "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    eb = EmbeddedBroker(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map": _MAP,
            "listener.name.internal.max.connections": "3",
        },
        data_dir=tmp_path_factory.mktemp("two") / "d",
    )
    with eb:
        yield eb


def _brokers(port: int, api: str, version: int, body) -> list[tuple[str, int]]:
    with RawClient(port) as c:
        r = c.call(api, version, body)
    return [(b.host, b.port) for b in r.brokers]


def test_each_listener_advertises_itself(two) -> None:
    outer, inner = two.listener_port("PLAINTEXT"), two.listener_port("internal")
    assert outer != inner
    for port in (outer, inner):
        meta = messages.MetadataRequest(topics=None, allow_auto_topic_creation=False)
        assert _brokers(port, "Metadata", 12, meta) == [("127.0.0.1", port)]
        cluster = messages.DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1)
        assert _brokers(port, "DescribeCluster", 1, cluster) == [("127.0.0.1", port)]
        with RawClient(port) as c:
            found = c.call("FindCoordinator", 4, key_type=0, coordinator_keys=["g"])
        assert [(x.host, x.port) for x in found.coordinators] == [("127.0.0.1", port)]


def test_librdkafka_on_the_second_listener(two) -> None:
    port = two.listener_port("INTERNAL")
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
    for i in range(20):
        p.produce("via-internal", value=b"v%d" % i)
    assert p.flush(15) == 0
    c = Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "group.id": "g-internal",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.subscribe(["via-internal"])
        got: list[bytes] = []
        for _ in range(100):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) == 20:
                break
        assert got == [b"v%d" % i for i in range(20)]
        # the only client connected: every connection it opened (bootstrap, then the advertised
        # address) came in on INTERNAL, as the broker sees it
        assert {conn.listener for conn in two.broker.server.connections} == {"INTERNAL"}
    finally:
        c.close()


def test_listener_settings_apply_to_their_listener_only(two) -> None:
    import socket
    import time

    inner, outer = two.listener_port("INTERNAL"), two.listener_port("PLAINTEXT")
    held = []
    try:
        for port in [inner] * 5 + [outer] * 5:
            s = socket.create_connection(("127.0.0.1", port))
            held.append((port, s))
        time.sleep(0.3)
        counts = {"INTERNAL": 0, "PLAINTEXT": 0}
        for conn in list(two.broker.server.connections):
            counts[conn.listener] += 1
        assert counts["INTERNAL"] == 3  # listener.name.internal.max.connections
        assert counts["PLAINTEXT"] >= 5
    finally:
        for _, s in held:
            s.close()
