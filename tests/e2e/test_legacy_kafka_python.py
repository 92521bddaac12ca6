"""kafka-python pinned to old brokers' ``api_version`` against Shoal: the request versions
Kafka 4 removed (KIP-896), from a real client.

With ``api_version`` set, kafka-python does not negotiate: it sends the versions that broker
release had (read from kafka/protocol/broker_version_data.py, and checked here through a
recording proxy in front of the broker). For each pinned version a producer writes records
with every codec that message format can carry, a consumer in a group reads half of each
partition and commits, the broker is killed and restarted, and a new consumer of the group
resumes from the committed offsets; every record read back is byte-exact (key, value,
timestamp where the format has one, headers where it has them).

Produce v0-2 and Fetch v0-3 come from the other half of this work (branch h/legacy-wire); a
pinned version that needs a request version the broker's ApiVersions does not advertise skips.
"""

from __future__ import annotations

import time

import pytest

from shoal.protocol.api import api_by_name
from tests.support.brokers import RawClient
from tests.support.recording_proxy import RecordingProxy
from tests.support.wire import create

PARTITIONS = 2
PER_CODEC = 12  # records per codec, spread over the partitions
GROUP_SETTINGS = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000")
K = {name: api_by_name(name).key for name in ("Produce", "Fetch", "OffsetCommit", "OffsetFetch", "JoinGroup")}

# zstd needs magic 2 and Produce v7 (Kafka 2.1): none of these formats carries it
CODECS = ["none", "gzip", "snappy", "lz4"]
# api_version -> (message format, {api: the one version kafka-python sends}); 0.8.x has no
# group membership (the consumer takes every partition), so no JoinGroup
PINNED = {
    (0, 8, 1): (0, dict(Produce=0, Fetch=0, OffsetCommit=0, OffsetFetch=0)),
    (0, 8, 2): (0, dict(Produce=0, Fetch=0, OffsetCommit=1, OffsetFetch=1)),
    (0, 9): (0, dict(Produce=1, Fetch=1, OffsetCommit=2, OffsetFetch=1, JoinGroup=0)),
    (0, 10, 1): (1, dict(Produce=2, Fetch=3, OffsetCommit=2, OffsetFetch=1, JoinGroup=1)),
    (1, 0, 0): (2, dict(Produce=5, Fetch=6, OffsetCommit=3, OffsetFetch=3, JoinGroup=2)),
}


def _records(magic: int, codecs: list[str]) -> dict[str, list[tuple[int, bytes | None, bytes, list, int | None]]]:
    """Per codec: (partition, key, value, headers, timestamp) as the format can carry them."""
    now = int(time.time() * 1000) - 5_000
    out = {}
    for c, codec in enumerate(codecs):
        rows = []
        for i in range(PER_CODEC):
            key = None if i % 5 == 0 else f"{codec}-{i}".encode()
            value = bytes((i * 29 + j) % 256 for j in range((i * 53) % 700)) + codec.encode()
            headers = [("n", str(i).encode()), ("b", b"\x00\xff")] if magic == 2 and i % 2 else []
            ts = now + c * 100 + i if magic >= 1 else None
            rows.append((i % PARTITIONS, key, value, headers, ts))
        out[codec] = rows
    return out


def _refused(port: int, sends: dict[str, int]) -> list[str]:
    """The (api, version) pairs of `sends` below what the broker's ApiVersions advertises."""
    with RawClient(port) as c:
        floor = {k.api_key: k.min_version for k in c.call("ApiVersions", 0).api_keys}
    return [f"{api} v{v}" for api, v in sends.items() if v < floor[K[api]]]


def _consume(bootstrap: str, topic: str, group: str, version: tuple, want: int, commit_at: int | None):
    """A group member reading until it has `want` records; commits offset `commit_at` on every
    partition when given. Returns (partition -> [(offset, key, value, headers, timestamp)], committed)."""
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        api_version=version,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1_000,
    )
    try:
        got: dict[int, list] = {}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < want and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=500).items():
                got.setdefault(tp.partition, []).extend(
                    (m.offset, m.key, m.value, list(m.headers or []), m.timestamp if m.timestamp != -1 else None)
                    for m in msgs
                )
        committed = {}
        if commit_at is not None:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            c.commit({tp: OffsetAndMetadata(commit_at, "half", -1) for tp in tps})
            committed = {tp.partition: c.committed(tp) for tp in tps}
        return got, committed
    finally:
        c.close()


@pytest.mark.parametrize("version", list(PINNED), ids=lambda v: "api_version=" + ".".join(map(str, v)))
def test_pinned_kafka_python_produces_consumes_commits_and_resumes(broker_factory, topic_name, version) -> None:
    from kafka import KafkaProducer

    magic, sends = PINNED[version]
    proxy = RecordingProxy(upstream_port=1)
    b = broker_factory(*GROUP_SETTINGS, f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy.port}", process=True)
    b.start()
    proxy.upstream = ("127.0.0.1", b.port)
    try:
        refused = _refused(b.port, sends)
        if refused:  # Produce v0-2 and Fetch v0-3 come with h/legacy-wire
            pytest.skip(f"the broker does not advertise {', '.join(refused)}")
        with RawClient(b.port) as c:
            assert create(c, topic_name, PARTITIONS).error_code == 0
        bootstrap = f"127.0.0.1:{proxy.port}"
        # kafka-python writes lz4 into magic 0 only with xxhash installed (not here)
        expected = _records(magic, CODECS if magic >= 1 else CODECS[:3])
        for codec, rows in expected.items():
            p = KafkaProducer(
                bootstrap_servers=bootstrap,
                api_version=version,
                acks="all",
                linger_ms=20,
                compression_type=None if codec == "none" else codec,
            )
            sent = []
            for part, key, value, headers, ts in rows:
                extra = {"headers": headers} if headers else {}
                sent.append(p.send(topic_name, key=key, value=value, partition=part, timestamp_ms=ts, **extra))
            p.flush(30)
            for f in sent:
                f.get(30)  # raises what the broker (or the client) refused
            p.close()
        by_partition: dict[int, list] = {}
        for rows in expected.values():
            for part, key, value, headers, ts in rows:
                by_partition.setdefault(part, []).append((key, value, headers, ts))
        per_partition = len(expected) * PER_CODEC // PARTITIONS
        half = per_partition // 2

        group = f"g-{topic_name}"
        got, committed = _consume(bootstrap, topic_name, group, version, PARTITIONS * per_partition, half)
        for part in range(PARTITIONS):
            assert [o for o, *_ in got[part]] == list(range(per_partition))
            assert [tuple(r) for _, *r in got[part]] == by_partition[part], f"records of partition {part}"
            assert committed[part] == half

        b.kill()  # a crash: the commits must already be durable
        b.start()
        got, _ = _consume(bootstrap, topic_name, group, version, PARTITIONS * (per_partition - half), None)
        for part in range(PARTITIONS):
            assert [o for o, *_ in got[part]] == list(range(half, per_partition)), "resumed at the commit"
            assert [tuple(r) for _, *r in got[part]] == by_partition[part][half:]

        for api, v in sends.items():
            assert proxy.versions(K[api]) == {v}, f"{api} versions kafka-python sent"
    finally:
        proxy.close()
