"""Operations through a real broker (issue 19): readiness turning off with an offline log
directory, the listener off when configured empty, and log.format=json's lines."""

from __future__ import annotations

import errno
import json
import time

from shoal.protocol.records import build_batch
from shoal.testing import EmbeddedBroker
from tests.support.brokers import BrokerProcess, RawClient
from tests.support.clients import _produce_topic
from tests.support.http import http_get
from tests.support.share_clients import produce
from tests.support.wire import create


def test_ready_turns_503_when_the_log_directory_goes_offline() -> None:
    with EmbeddedBroker() as b:
        assert b.http_port
        assert http_get(b.http_port, "/health/ready")[0] == 200
        b.create_topic("t")
        b.call(lambda: b.broker.file_ops.fail_next("write", errno.ENOSPC, times=None))
        data = build_batch([(None, b"x" * 100, [], int(time.time() * 1000))])
        with RawClient(b.port) as c:
            r = c.call("Produce", 9, acks=1, timeout_ms=5000, topic_data=[_produce_topic("t", 0, data)])
        assert r.responses[0].partition_responses[0].error_code == 56  # KAFKA_STORAGE_ERROR
        status, text = http_get(b.http_port, "/health/ready")
        assert status == 503 and "offline" in text
        assert http_get(b.http_port, "/health/live")[0] == 200  # still serving: not dead, not ready


def test_an_empty_listener_setting_turns_http_off() -> None:
    with EmbeddedBroker({"shoal.http.listeners": ""}) as b:
        assert b.http_port == 0 and b.call(lambda: b.broker.ops.bound) == []


def test_json_logs_parse_line_by_line(tmp_path) -> None:
    b = BrokerProcess(tmp_path / "data", ["log.format=json", "offsets.topic.num.partitions=1"]).start()
    try:
        with RawClient(b.port) as c:
            create(c, "j")
        produce(b.bootstrap, "j", 5)
        assert http_get(b.http_port, "/health/ready")[0] == 200
    finally:
        assert b.stop() == 0
    lines = [line for line in b.log_text().splitlines() if line.strip()]
    assert len(lines) >= 4
    objects = [json.loads(line) for line in lines]  # every line is one JSON object
    for o in objects:
        assert {"time", "level", "logger", "message"} <= set(o), o
    messages = [o["message"] for o in objects]
    assert any(m.startswith("shoal broker listening on") for m in messages)
    # the operations listener's line comes first: whoever waits for the broker's line (as
    # BrokerProcess does) has then read both, never half of the pair
    first_http = min(i for i, m in enumerate(messages) if m.startswith("shoal http listening on"))
    first_broker = min(i for i, m in enumerate(messages) if m.startswith("shoal broker listening on"))
    assert first_http < first_broker
    assert any(m.startswith("shutdown complete") for m in messages)


def wait_status(port: int, want: int, timeout: float = 15.0) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    while True:
        status, text = http_get(port, "/health/ready")
        if status == want or time.monotonic() > deadline:
            return status, text
        time.sleep(0.05)


def test_ready_is_503_while_coordinators_load_then_200() -> None:
    """Coordinator loading held (FaultInjector.hold_loading): the Kafka port answers and
    /health/live says 200, but /health/ready says 503 naming what it waits for, until both
    coordinators have loaded."""
    b = EmbeddedBroker()
    b.faults.hold_loading("__consumer_offsets")
    b.faults.hold_loading("__share_group_state")
    with b:
        with RawClient(b.port) as c:
            assert c.call("ApiVersions", 3, client_software_name="t", client_software_version="1").error_code == 0
        assert http_get(b.http_port, "/health/live")[0] == 200
        time.sleep(0.3)  # held, not merely slow: still not ready a while later
        status, text = http_get(b.http_port, "/health/ready")
        assert (status, text.strip()) == (503, "loading the group coordinator")
        assert "shoal_broker_ready 0.0" in http_get(b.http_port, "/metrics")[1]
        b.faults.release_loading("__consumer_offsets")
        status, text = wait_status(b.http_port, 200, timeout=2.0)
        assert (status, text.strip()) == (503, "loading the share coordinator")
        b.faults.release_loading("__share_group_state")
        status, text = wait_status(b.http_port, 200)
        assert (status, text.strip()) == (200, "ready")
        assert "shoal_broker_ready 1.0" in http_get(b.http_port, "/metrics")[1]
