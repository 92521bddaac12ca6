"""Golden bytes for the request versions Kafka 4 removed and Shoal serves again (KIP-896).

Oracle: each vector is written field by field from Kafka 3.9's JSON specs
(clients/src/main/resources/common/message/{Produce,Fetch,ListOffsets}*.json at
3.9.0), whose layouts for these versions differ from Kafka 4's specs; kio 0.6.5
is generated from Kafka 4 and lacks them. When these vectors were written they
were also decoded with kio 0.5.0 (generated from Kafka 3.x specs) to the same
values; that package is not a test dependency, so the check is not repeated here.
Each vector is encoded by our codec, decoded whole, fed to the framer byte by
byte, and decoded with trailing bytes (which Kafka ignores).
"""

from __future__ import annotations

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.frames import FrameReader, decode_request, decode_response, encode_request, encode_response


def hx(*pieces: str) -> bytes:
    return bytes.fromhex("".join(p.replace(" ", "") for p in pieces))


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


BATCH = bytes(range(7))  # opaque to the codec
REQ_HEADER = "{key} {version} 00000001 0005 73686f616c"  # api key, version, correlation id 1, client id "shoal"
PRODUCE_BODY = hx(
    "0001",  # Acks 1
    "000003e8",  # TimeoutMs 1000
    "00000001",  # TopicData: 1 topic
    "0001 74",  # Name "t"
    "00000001",  # PartitionData: 1 partition
    "00000000",  # Index 0
    "00000007 00010203040506",  # Records: int32 length + bytes
)
FETCH_TOPICS = hx(
    "00000001",  # Topics: 1
    "0001 74",  # Topic "t"
    "00000001",  # Partitions: 1
    "00000000",  # Partition 0
    "0000000000000005",  # FetchOffset 5
    "00100000",  # PartitionMaxBytes 1 MiB
)
FETCH_HEAD = hx("ffffffff", "000001f4", "00000001")  # ReplicaId -1, MaxWaitMs 500, MinBytes 1


def _req(key: int, version: int, body: bytes) -> bytes:
    return hx(REQ_HEADER.format(key=f"{key:04x}", version=f"{version:04x}")) + body


PRODUCE_VALUES = dict(
    acks=1,
    timeout_ms=1000,
    topic_data=[
        ("TopicProduceData", dict(name="t", partition_data=[("PartitionProduceData", dict(index=0, records=BATCH))]))
    ],
)
FETCH_VALUES = dict(
    replica_id=-1,
    max_wait_ms=500,
    min_bytes=1,
    topics=[
        (
            "FetchTopic",
            dict(
                topic="t",
                partitions=[("FetchPartition", dict(partition=0, fetch_offset=5, partition_max_bytes=1 << 20))],
            ),
        )
    ],
)

REQUESTS = [
    *[("Produce", v, PRODUCE_VALUES, PRODUCE_BODY) for v in (0, 1, 2)],
    *[("Fetch", v, FETCH_VALUES, FETCH_HEAD + FETCH_TOPICS) for v in (0, 1, 2)],
    ("Fetch", 3, dict(FETCH_VALUES, max_bytes=0x3200000), FETCH_HEAD + hx("03200000") + FETCH_TOPICS),  # + MaxBytes
    (
        "ListOffsets",
        0,
        dict(
            replica_id=-1,
            topics=[
                (
                    "ListOffsetsTopic",
                    dict(
                        name="t",
                        partitions=[("ListOffsetsPartition", dict(partition_index=0, timestamp=-1, max_num_offsets=3))],
                    ),
                )
            ],
        ),
        hx(
            "ffffffff",  # ReplicaId -1
            "00000001 0001 74",  # Topics: 1, Name "t"
            "00000001 00000000",  # Partitions: 1, PartitionIndex 0
            "ffffffffffffffff",  # Timestamp -1 (latest)
            "00000003",  # MaxNumOffsets 3 (v0 only)
        ),
    ),
]

PRODUCE_PARTITION = hx(
    "0001 74", "00000001", "00000000", "0000", "000000000000002a"
)  # name, 1 partition, index, error, base offset 42
RESPONSES = [
    (
        "Produce",
        0,
        dict(
            responses=[
                (
                    "TopicProduceResponse",
                    dict(
                        name="t",
                        partition_responses=[("PartitionProduceResponse", dict(index=0, error_code=0, base_offset=42))],
                    ),
                )
            ]
        ),
        hx("00000001") + PRODUCE_PARTITION,
    ),
    (
        "Produce",
        1,
        dict(
            responses=[
                (
                    "TopicProduceResponse",
                    dict(
                        name="t",
                        partition_responses=[("PartitionProduceResponse", dict(index=0, error_code=0, base_offset=42))],
                    ),
                )
            ],
            throttle_time_ms=7,
        ),
        hx("00000001") + PRODUCE_PARTITION + hx("00000007"),  # ThrottleTimeMs after the responses (v1+)
    ),
    (
        "Produce",
        2,
        dict(
            responses=[
                (
                    "TopicProduceResponse",
                    dict(
                        name="t",
                        partition_responses=[
                            (
                                "PartitionProduceResponse",
                                dict(index=0, error_code=0, base_offset=42, log_append_time_ms=1700000000000),
                            )
                        ],
                    ),
                )
            ],
            throttle_time_ms=7,
        ),
        hx("00000001") + PRODUCE_PARTITION + hx("0000018bcfe56800", "00000007"),  # + LogAppendTimeMs (v2+)
    ),
    *[
        (
            "Fetch",
            v,
            dict(
                throttle_time_ms=3 if v >= 1 else 0,  # v0 has no ThrottleTimeMs
                responses=[
                    (
                        "FetchableTopicResponse",
                        dict(
                            topic="t",
                            partitions=[
                                (
                                    "PartitionData",
                                    dict(partition_index=0, error_code=0, high_watermark=10, records=BATCH),
                                )
                            ],
                        ),
                    )
                ],
            ),
            (hx("00000003") if v >= 1 else b"")  # ThrottleTimeMs first, from v1
            + hx(
                "00000001 0001 74",  # Responses: 1, Topic "t"
                "00000001 00000000 0000",  # Partitions: 1, PartitionIndex 0, ErrorCode 0
                "000000000000000a",  # HighWatermark 10
                "00000007 00010203040506",  # Records
            ),
        )
        for v in (0, 1, 2, 3)
    ],
    (
        "ListOffsets",
        0,
        dict(
            topics=[
                (
                    "ListOffsetsTopicResponse",
                    dict(
                        name="t",
                        partitions=[
                            (
                                "ListOffsetsPartitionResponse",
                                dict(partition_index=0, error_code=0, old_style_offsets=[10, 0]),
                            )
                        ],
                    ),
                )
            ]
        ),
        hx(
            "00000001 0001 74",  # Topics: 1, Name "t"
            "00000001 00000000 0000",  # Partitions: 1, PartitionIndex 0, ErrorCode 0
            "00000002 000000000000000a 0000000000000000",  # OldStyleOffsets [10, 0] (v0 only)
        ),
    ),
]


def build(cls, values: dict, top=None):
    """Instantiate a message from (struct name, dict) trees."""
    top = top or cls
    kwargs = {}
    for k, v in values.items():
        if isinstance(v, list) and v and isinstance(v[0], tuple):
            kwargs[k] = [build(getattr(top, name), d, top) for name, d in v]
        else:
            kwargs[k] = v
    return cls(**kwargs)


def _ids(cases):
    return [f"{c[0]}-v{c[1]}" for c in cases]


@pytest.mark.parametrize(("api_name", "version", "values", "body"), REQUESTS, ids=_ids(REQUESTS))
def test_request_golden(api_name, version, values, body) -> None:
    a = api_by_name(api_name)
    payload = _req(a.key, version, body)
    obj = build(a.request_class(), values)
    assert b"".join(encode_request(a.key, version, 1, "shoal", obj)) == frame(payload)
    req = decode_request(memoryview(payload))
    assert (req.api.key, req.version, req.correlation_id, req.client_id) == (a.key, version, 1, "shoal")
    assert req.body == obj
    reader = FrameReader()
    got = [bytes(f) for i in range(len(frame(payload))) for f in reader.feed(frame(payload)[i : i + 1])]
    assert got == [payload]
    assert decode_request(memoryview(payload + b"\x00\x01\x02")).body == obj


@pytest.mark.parametrize(("api_name", "version", "values", "body"), RESPONSES, ids=_ids(RESPONSES))
def test_response_golden(api_name, version, values, body) -> None:
    a = api_by_name(api_name)
    payload = hx("00000001") + body  # response header v0: correlation id
    obj = build(a.response_class(), values)
    assert b"".join(encode_response(a.key, version, 1, obj)) == frame(payload)
    correlation_id, decoded = decode_response(memoryview(payload), a.key, version)
    assert correlation_id == 1
    assert decoded == obj
    assert decode_response(memoryview(payload + b"\xff\xfe"), a.key, version)[1] == obj
