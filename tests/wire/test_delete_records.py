"""DeleteRecords over a real socket: the new log start is what Fetch, ListOffsets and a restart see.

Kafka 4.2's answers per partition: -1 deletes up to the high watermark, past the
high watermark is OFFSET_OUT_OF_RANGE, an unknown topic or partition is
UNKNOWN_TOPIC_OR_PARTITION, internal and compact-only topics are refused, and
the low watermark answered is the partition's new log start.
"""

from __future__ import annotations

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ListOffsetsTimestamp
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch
from tests.support.brokers import InProcessBroker, RawClient, fetch_request
from tests.support.wire import create

P = api_by_name("Produce").request_class()
DR = api_by_name("DeleteRecords").request_class()
LO = api_by_name("ListOffsets").request_class()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("delete-records") / "data").start()
    yield b
    b.kill()


def produce(c: RawClient, topic: str, n: int, partition: int = 0) -> int:
    batch = build_batch([(b"k", b"v%d" % i, (), None) for i in range(n)])
    body = P(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])
        ],
    )
    r = c.call("Produce", 9, body).responses[0].partition_responses[0]
    assert r.error_code == 0, r
    return r.base_offset


def delete(c: RawClient, topic: str, offsets: dict[int, int], version: int = 2) -> dict[int, tuple[int, int]]:
    """{partition: (error_code, low_watermark)}"""
    parts = [DR.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets.items()]
    r = c.call("DeleteRecords", version, topics=[DR.DeleteRecordsTopic(name=topic, partitions=parts)], timeout_ms=5000)
    assert [t.name for t in r.topics] == [topic]
    return {p.partition_index: (p.error_code, p.low_watermark) for p in r.topics[0].partitions}


def earliest(c: RawClient, topic: str, partition: int = 0) -> int:
    r = c.call(
        "ListOffsets",
        7,
        replica_id=-1,
        isolation_level=0,
        topics=[
            LO.ListOffsetsTopic(
                name=topic,
                partitions=[
                    LO.ListOffsetsPartition(partition_index=partition, timestamp=ListOffsetsTimestamp.EARLIEST)
                ],
            )
        ],
    )
    pr = r.topics[0].partitions[0]
    assert pr.error_code == 0, pr
    return pr.offset


def fetch(c: RawClient, topic: str, offset: int):
    return c.call("Fetch", 12, fetch_request(topic, offset=offset)).responses[0].partitions[0]


def test_api_versions_advertises_delete_records(broker) -> None:
    with RawClient(broker.port) as c:
        keys = {k.api_key: (k.min_version, k.max_version) for k in c.call("ApiVersions", 3).api_keys}
    assert keys[21] == (0, 2)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_middle_offset_moves_the_start(broker, version: int) -> None:
    topic = f"dr-middle-v{version}"
    with RawClient(broker.port) as c:
        assert create(c, topic).error_code == 0
        produce(c, topic, 10)
        assert delete(c, topic, {0: 4}, version) == {0: (0, 4)}
        assert earliest(c, topic) == 4
        below = fetch(c, topic, 3)
        assert below.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert below.log_start_offset == 4
        at = fetch(c, topic, 4)
        assert at.error_code == 0 and at.log_start_offset == 4 and at.high_watermark == 10
        # a smaller offset changes nothing and answers the current start
        assert delete(c, topic, {0: 2}, version) == {0: (0, 4)}


def test_minus_one_means_the_high_watermark(broker) -> None:
    with RawClient(broker.port) as c:
        assert create(c, "dr-hw").error_code == 0
        produce(c, "dr-hw", 7)
        assert delete(c, "dr-hw", {0: -1}) == {0: (0, 7)}
        assert earliest(c, "dr-hw") == 7
        assert produce(c, "dr-hw", 2) == 7  # the log goes on from its end


def test_refusals(broker) -> None:
    with RawClient(broker.port) as c:
        assert create(c, "dr-refused", partitions=2).error_code == 0
        produce(c, "dr-refused", 5)
        out = delete(c, "dr-refused", {0: 6, 1: -2, 2: 0})
        assert out == {
            0: (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
            1: (ErrorCode.OFFSET_OUT_OF_RANGE, -1),
            2: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        }
        assert earliest(c, "dr-refused") == 0
        assert delete(c, "dr-no-such-topic", {0: 0}) == {0: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
        assert create(c, "dr-compact", cleanup_policy="compact").error_code == 0
        produce(c, "dr-compact", 3)
        assert delete(c, "dr-compact", {0: 1}) == {0: (ErrorCode.POLICY_VIOLATION, -1)}
        assert create(c, "dr-both", cleanup_policy="compact,delete").error_code == 0
        produce(c, "dr-both", 3)
        assert delete(c, "dr-both", {0: 1}) == {0: (0, 1)}
        assert delete(c, "__consumer_offsets", {0: 0}) == {0: (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)}


def test_the_start_survives_a_restart(tmp_path) -> None:
    data = tmp_path / "data"
    with InProcessBroker(data) as b, RawClient(b.port) as c:
        assert create(c, "dr-restart").error_code == 0
        produce(c, "dr-restart", 6)
        produce(c, "dr-restart", 6)
        assert delete(c, "dr-restart", {0: 8}) == {0: (0, 8)}
    # after a clean stop, then after a crash (the start is written durably before the answer)
    for stop, start, then in (("stop", 8, 10), ("kill", 10, 11)):
        b = InProcessBroker(data).start()
        try:
            with RawClient(b.port) as c:
                assert earliest(c, "dr-restart") == start
                assert fetch(c, "dr-restart", start - 1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
                assert delete(c, "dr-restart", {0: then}) == {0: (0, then)}
        finally:
            getattr(b, stop)()
    b = InProcessBroker(data).start()
    try:
        with RawClient(b.port) as c:
            assert earliest(c, "dr-restart") == 11
    finally:
        b.kill()
