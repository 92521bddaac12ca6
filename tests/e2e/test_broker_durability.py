"""Crashes and restarts of a real broker process: nothing acknowledged is lost."""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from shoal.protocol.records import build_batch
from tests.support.brokers import RawClient
from tests.support.clients import QUIET, _produce_topic, consume_all, create_topic
from tests.support.wire import fetch_body


@pytest.mark.parametrize(
    ("value_bytes", "acks"),
    [
        (0, "all"),  # small batches: on the log writer thread too, joined per loop turn
        (20_000, "all"),  # ~1 MiB batches: written on the log writer thread, acks after write + fsync
        (20_000, "1"),  # the same, acked once written: the page cache outlives the process
    ],
)
def test_kill9_keeps_every_acknowledged_record(broker_factory, topic_name, value_bytes, acks) -> None:
    b = broker_factory(process=True)
    b.start()
    create_topic(b.bootstrap, topic_name, 2)
    acked: set[bytes] = set()
    lock = threading.Lock()
    pad = os.urandom(value_bytes)
    idempotent = acks == "all"

    def on_delivery(err, msg) -> None:
        if err is None:
            with lock:
                acked.add(msg.value())

    p = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "acks": acks,
            "enable.idempotence": idempotent,
            "linger.ms": 2 if not value_bytes else 20,
            "batch.size": 1 << 20,
            "message.timeout.ms": 120000,
            **QUIET,
        }
    )
    i = 0
    deadline = time.monotonic() + 30
    while len(acked) < 400 and time.monotonic() < deadline:
        p.produce(topic_name, value=b"v%06d" % i + pad, partition=i % 2, on_delivery=on_delivery)
        i += 1
        p.poll(0)
        if i % 50 == 0:
            p.poll(0.01)
    # keep producing while the broker is killed
    for _ in range(200):
        p.produce(topic_name, value=b"v%06d" % i + pad, partition=i % 2, on_delivery=on_delivery)
        i += 1
    p.poll(0)
    b.kill()
    with lock:
        acked_before_crash = set(acked)
    assert len(acked_before_crash) >= 400
    b.start()
    assert p.flush(60) == 0  # the producer finishes against the restarted broker
    got = consume_all(b.bootstrap, topic_name, 2)
    values = []
    for part, recs in got.items():
        assert [o for o, _ in recs] == list(range(len(recs))), f"gap in partition {part}"
        values += [v for _, v in recs]
    assert acked_before_crash <= set(values)
    assert acked <= set(values)  # and every later acknowledgement too
    if idempotent:
        assert len(values) == len(set(values)), "duplicates after retries"
        assert set(values) == acked
    assert "recover" in b.log_text()


def _segment(data_dir: Path, topic: str, partition: int) -> Path:
    logs = sorted((data_dir / f"{topic}-{partition}").glob("*.log"))
    assert logs
    return logs[-1]


def produce_raw(port: int, topic: str, values: list[bytes], partition: int = 0) -> list[int]:
    offsets = []
    with RawClient(port) as c:
        for v in values:
            batch = build_batch([(None, v, [], int(time.time() * 1000))])
            req = c.call(
                "Produce",
                9,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    _produce_topic(topic, partition, batch),
                ],
            )
            pr = req.responses[0].partition_responses[0]
            assert pr.error_code == 0, pr
            offsets.append(pr.base_offset)
    return offsets


def test_torn_tail_is_cut_and_broker_starts(broker_factory, topic_name) -> None:
    b = broker_factory(process=True)
    b.start()
    create_topic(b.bootstrap, topic_name, 1)
    assert produce_raw(b.port, topic_name, [b"a" * 100, b"b" * 100, b"c" * 100]) == [0, 1, 2]
    b.kill()  # crash: no clean-shutdown marker
    seg = _segment(b.data_dir, topic_name, 0)
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(size - 40)  # cut into the middle of the last batch
    b.start()
    got = consume_all(b.bootstrap, topic_name, 1)
    assert [v for _, v in got[0]] == [b"a" * 100, b"b" * 100]
    # the log continues right after the last whole batch
    assert produce_raw(b.port, topic_name, [b"d"]) == [2]
    assert "trunc" in b.log_text().lower()


def test_corrupt_tail_bytes_are_cut(broker_factory, topic_name) -> None:
    b = broker_factory(process=True)
    b.start()
    create_topic(b.bootstrap, topic_name, 1)
    produce_raw(b.port, topic_name, [b"x" * 50, b"y" * 50])
    b.kill()
    seg = _segment(b.data_dir, topic_name, 0)
    with open(seg, "r+b") as f:
        f.seek(-10, os.SEEK_END)
        f.write(b"\xff" * 10)  # flip bytes inside the last batch: CRC no longer matches
    b.start()
    got = consume_all(b.bootstrap, topic_name, 1)
    assert [v for _, v in got[0]] == [b"x" * 50]


def test_clean_restart_keeps_data_and_topic_ids(broker_factory, topic_name) -> None:
    b = broker_factory(process=True)
    b.start()
    create_topic(b.bootstrap, topic_name, 2)
    produce_raw(b.port, topic_name, [b"one", b"two"], partition=1)
    with RawClient(b.port) as c:
        before = c.call("Metadata", 12, topics=None)
    ids_before = {t.name: t.topic_id for t in before.topics}
    assert b.stop() == 0
    assert "shutdown complete" in b.log_text()
    b.start()
    assert "recovering" not in b.log_text().split("shutdown complete")[-1]
    with RawClient(b.port) as c:
        after = c.call("Metadata", 12, topics=None)
    assert {t.name: t.topic_id for t in after.topics} == ids_before
    assert before.cluster_id == after.cluster_id
    got = consume_all(b.bootstrap, topic_name, 2)
    assert got[1] == [(0, b"one"), (1, b"two")] and got[0] == []


def test_a_failed_write_answers_storage_error_and_loses_nothing_acknowledged(broker_factory, topic_name) -> None:
    """A disk that fills up under ~1 MiB batches (written on the log writer thread)."""
    b = broker_factory(process=True)
    b.start()
    create_topic(b.bootstrap, topic_name, 1)
    soft, hard = resource.prlimit(b.proc.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(b.proc.pid, resource.RLIMIT_FSIZE, (3_500_000, hard))  # writes past this fail: EFBIG
    codes, acked = [], []
    with RawClient(b.port) as c:
        for i in range(6):
            value = bytes([i]) * 1_000_000
            batch = build_batch([(None, value, [], int(time.time() * 1000))])
            for acks in (1, -1):
                pr = c.call("Produce", 9, acks=acks, timeout_ms=5000, topic_data=[_produce_topic(topic_name, 0, batch)])
                pr = pr.responses[0].partition_responses[0]
                codes.append(pr.error_code)
                if pr.error_code == 0:
                    acked.append(value)
    assert codes[:3] == [0, 0, 0]
    assert set(codes[3:]) == {56}  # KAFKA_STORAGE_ERROR, then the partition stays offline
    assert "partition offline until restart" in b.log_text()
    with RawClient(b.port) as c:  # its log directory is offline: fetches are refused too, as in Kafka
        fetched = c.call("Fetch", 12, body=fetch_body(topic_name)).responses[0].partitions[0]
        assert fetched.error_code == 56
    resource.prlimit(b.proc.pid, resource.RLIMIT_FSIZE, (soft, hard))
    b.kill()
    seg = _segment(b.data_dir, topic_name, 0)
    assert seg.stat().st_size == 3 * (len(build_batch([(None, b"x" * 1_000_000, [], 0)])))  # no stray bytes
    b.start()
    got = consume_all(b.bootstrap, topic_name, 1)
    assert [v for _, v in got[0]] == acked
    assert produce_raw(b.port, topic_name, [b"after"]) == [3]
