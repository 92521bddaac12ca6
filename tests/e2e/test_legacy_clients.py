"""kafka-python pinned to old protocol versions (it then sends Produce v1/v2, Fetch v1/v3,
ListOffsets v0/v1, Metadata v0-v2 and magic 0/1 message sets) against Shoal: records read
back byte-exact (keys, values, offsets, timestamps) for every codec, without a group."""

from __future__ import annotations

import pytest

from tests.support.clients import create_topic

VERSIONS = [(0, 9), (0, 10, 1), (1, 0, 0)]
CODECS = ["none", "gzip", "snappy", "lz4"]
N = 30


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("api_version", VERSIONS, ids=lambda v: ".".join(map(str, v)))
def test_old_kafka_python_round_trip(shared_broker, topic_name, api_version, codec) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    bs = shared_broker.bootstrap
    create_topic(bs, topic_name, 1)
    timestamps = api_version >= (0, 10)  # magic 1 and up carry them
    expected = [
        (None if i % 7 == 0 else b"key-%d" % i, b"" if i == 3 else bytes(range(256)) * (i % 5) + b"v%d" % i)
        for i in range(N)
    ]
    prod = KafkaProducer(
        bootstrap_servers=bs, api_version=api_version, compression_type=None if codec == "none" else codec, linger_ms=5
    )
    for i, (k, v) in enumerate(expected):
        prod.send(topic_name, key=k, value=v, partition=0, timestamp_ms=1_700_000_000_000 + i if timestamps else None)
    prod.flush(30)
    prod.close()
    cons = KafkaConsumer(
        bootstrap_servers=bs,
        api_version=api_version,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    cons.assign([KTP(topic_name, 0)])
    got = []
    for m in cons:
        got.append((m.offset, m.key, m.value, m.timestamp))
        if len(got) == N:
            break
    cons.close()
    assert [(o, k, v) for o, k, v, _ in got] == [(i, k, v) for i, (k, v) in enumerate(expected)]
    if timestamps:
        assert [t for *_, t in got] == [1_700_000_000_000 + i for i in range(N)]
