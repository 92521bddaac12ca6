"""The removed request versions against a real broker: Produce v0-2 in, Fetch v0-3 out,
ListOffsets v0, message.downconversion.enable, and shoal.legacy.api.versions.enable=false
(Kafka 4.2's exact table, advertised and enforced)."""

from __future__ import annotations

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.compression import Compression
from shoal.protocol.errors import ErrorCode
from shoal.protocol.kafka4_versions import KAFKA4_ADVERTISED_MIN, KAFKA4_MIN_VERSIONS
from shoal.protocol.legacy_records import LegacyMessage, build_message_set
from shoal.protocol.record_sets import decode_message_set
from shoal.protocol.records import build_batch
from tests.support.brokers import RawClient, fetch_request
from tests.support.wire import create

P = api_by_name("Produce").request_class()
F = api_by_name("Fetch").request_class()
L = api_by_name("ListOffsets").request_class()


def produce(c: RawClient, version: int, topic: str, records: bytes):
    body = P(
        acks=1,
        timeout_ms=5000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=records)])],
    )
    return c.call("Produce", version, body).responses[0].partition_responses[0]


def fetch_old(c: RawClient, version: int, topic: str, offset: int = 0):
    body = F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            F.FetchTopic(
                topic=topic,
                partitions=[F.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)],
            )
        ],
    )
    return c.call("Fetch", version, body).responses[0].partitions[0]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.support.brokers import InProcessBroker

    b = InProcessBroker(tmp_path_factory.mktemp("legacy") / "data")
    b.start()
    yield b
    b.kill()


MESSAGES = [LegacyMessage(0, 1_700_000_000_000 + i, b"k%d" % i, b"value-%d" % i * 3) for i in range(6)]


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4])
@pytest.mark.parametrize(("produce_version", "magic"), [(0, 0), (1, 0), (2, 1)])
def test_produced_message_sets_fetch_back_at_every_version(broker, codec, produce_version, magic) -> None:
    topic = f"legacy-{produce_version}-{codec}"
    with RawClient(broker.port) as c:
        assert create(c, topic).error_code == 0
        first = produce(c, produce_version, topic, build_message_set(MESSAGES[:3], magic=magic, compression=codec))
        second = produce(c, produce_version, topic, build_message_set(MESSAGES[3:], magic=magic, compression=codec))
        assert (first.error_code, first.base_offset, second.error_code, second.base_offset) == (0, 0, 0, 3)
        if produce_version == 2:
            assert first.log_append_time_ms == -1  # CreateTime topic
        for version in range(4):
            part = fetch_old(c, version, topic)
            assert part.error_code == 0 and part.high_watermark == 6
            got = decode_message_set(bytes(part.records), allow_partial=False)
            assert [(r.offset, r.key, r.value) for r in got] == [(i, m.key, m.value) for i, m in enumerate(MESSAGES)]
            # magic 0 carries no timestamps; magic 1 what the producer sent (magic 1) or none (-1)
            expected_ts = [m.timestamp for m in MESSAGES] if magic == 1 else [-1] * len(MESSAGES)
            assert [r.timestamp for r in got] == (expected_ts if version >= 2 else [-1] * len(MESSAGES))
            assert {bytes(part.records)[16]} <= {0 if version < 2 else 1}  # first entry's magic
        # a v4+ fetch reads the stored magic 2 batches
        new = c.call("Fetch", 4, fetch_request(topic)).responses[0].partitions[0]
        assert bytes(new.records)[16] == 2


def test_headers_are_dropped_and_log_append_time_kept(broker) -> None:
    with RawClient(broker.port) as c:
        assert create(c, "legacy-lat", message_timestamp_type="LogAppendTime").error_code == 0
        batch = build_batch([(b"k", b"v", [("h", b"x")], 5)])
        r = produce(c, 3, "legacy-lat", batch)
        assert r.error_code == 0
        v2 = produce(c, 2, "legacy-lat", build_message_set([LegacyMessage(0, 7, b"a", b"b")], magic=1))
        assert v2.error_code == 0 and v2.log_append_time_ms > 0
        got = decode_message_set(bytes(fetch_old(c, 3, "legacy-lat").records))
        assert [(r.key, r.value, r.headers) for r in got] == [(b"k", b"v", []), (b"a", b"b", [])]
        assert got[0].timestamp == r.log_append_time_ms and got[1].timestamp == v2.log_append_time_ms


def test_downconversion_disabled_and_zstd(broker) -> None:
    with RawClient(broker.port) as c:
        assert create(c, "legacy-off", message_downconversion_enable="false").error_code == 0
        assert produce(c, 2, "legacy-off", build_message_set(MESSAGES, magic=1)).error_code == 0  # up: still fine
        part = fetch_old(c, 3, "legacy-off")
        assert (part.error_code, part.high_watermark) == (ErrorCode.UNSUPPORTED_VERSION, -1)
        assert c.call("Fetch", 4, fetch_request("legacy-off")).responses[0].partitions[0].error_code == 0
        assert create(c, "legacy-zstd").error_code == 0
        assert (
            produce(c, 3, "legacy-zstd", build_batch([(b"k", b"v", [], 1)], compression=Compression.ZSTD)).error_code
            == 0
        )
        assert fetch_old(c, 2, "legacy-zstd").error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_list_offsets_v0(broker) -> None:
    with RawClient(broker.port) as c:
        assert create(c, "legacy-lo").error_code == 0
        assert produce(c, 1, "legacy-lo", build_message_set(MESSAGES, magic=0)).error_code == 0

        def ask(ts: int, n: int) -> list[int]:
            body = L(
                replica_id=-1,
                topics=[
                    L.ListOffsetsTopic(
                        name="legacy-lo",
                        partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=ts, max_num_offsets=n)],
                    )
                ],
            )
            p = c.call("ListOffsets", 0, body).topics[0].partitions[0]
            assert p.error_code == 0
            return list(p.old_style_offsets)

        assert ask(-1, 10) == [6, 0]  # the log end, then the one segment's start, newest first
        assert ask(-1, 1) == [6]
        assert ask(-2, 10) == [0]
        assert ask(0, 10) == []  # nothing modified at or before the epoch


def test_metadata_v0_with_no_topics_lists_every_topic(broker) -> None:
    """v0 has no null list: an empty one means every topic (kafka-python 0.8/0.9 sends it before
    it subscribes, then waited five minutes when the answer named none); v1+ keep empty = none."""
    M = api_by_name("Metadata").request_class()
    with RawClient(broker.port) as c:
        assert create(c, "legacy-md").error_code == 0
        assert "legacy-md" in {t.name for t in c.call("Metadata", 0, M(topics=[])).topics}
        assert c.call("Metadata", 1, M(topics=[])).topics == []
        assert "legacy-md" in {t.name for t in c.call("Metadata", 1, M(topics=None)).topics}


def test_kafka4_table_advertised_and_enforced(broker_factory) -> None:
    b = broker_factory("shoal.legacy.api.versions.enable=false")
    b.start()
    with RawClient(b.port) as c:
        served = {k.api_key: (k.min_version, k.max_version) for k in c.call("ApiVersions", 3).api_keys}
        assert served
        for key, (lo, _hi) in served.items():
            assert lo == KAFKA4_ADVERTISED_MIN.get(key, KAFKA4_MIN_VERSIONS[key]), key
        assert served[api_by_name("Fetch").key][0] == 4 and served[api_by_name("Produce").key][0] == 0
        assert create(c, "k4").error_code == 0
    for api, version in (("Produce", 2), ("Fetch", 3), ("ListOffsets", 0)):
        with RawClient(b.port) as c:
            a = api_by_name(api)
            c.send(api, version, a.request_class()())
            with pytest.raises(ConnectionError):
                c.recv_frame()  # refused as any unsupported version: the connection closes
    with RawClient(b.port) as c:  # the Kafka 4 floor itself still works
        assert produce(c, 3, "k4", build_batch([(b"k", b"v", [], 1)])).error_code == 0


def test_default_serves_the_legacy_floor(broker) -> None:
    with RawClient(broker.port) as c:
        served = {k.api_key: k.min_version for k in c.call("ApiVersions", 0).api_keys}
    assert served[api_by_name("Produce").key] == 0
    assert served[api_by_name("Fetch").key] == 0
    assert served[api_by_name("ListOffsets").key] == 0


def test_every_api_has_a_kafka4_floor() -> None:
    from shoal.protocol.api import apis

    assert set(apis()) <= set(KAFKA4_MIN_VERSIONS)
    for key, a in apis().items():
        assert a.min_version <= KAFKA4_MIN_VERSIONS[key] <= a.max_version, a.name
