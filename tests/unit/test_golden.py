"""Golden byte vectors for the hot APIs, assembled by hand from the protocol rules.

Each vector is written field by field (the comment names the field) from the
Kafka protocol guide's layout rules, not produced by our encoder. We check
that our encoder produces exactly these bytes, that we decode them to the
expected object, and that kio (Kafka's own specs) decodes them too.
"""

from __future__ import annotations

import uuid

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.frames import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tests.support import kio_bridge as kb

TOPIC_ID = uuid.UUID("6b1f2a3c-4d5e-4f60-8172-93a4b5c6d7e8")
TID = TOPIC_ID.hex


def hx(*pieces: str) -> bytes:
    """Join hex pieces (spaces allowed) into bytes."""
    return bytes.fromhex("".join(p.replace(" ", "") for p in pieces))


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


BATCH = bytes(range(7))  # opaque to the codec: any bytes stand for a record batch

REQUESTS = [
    # ---- ApiVersions v3 request (flexible body, request header v2)
    (
        "ApiVersions",
        3,
        dict(client_software_name="shoal", client_software_version="0.1"),
        hx(
            "0012",  # api key 18
            "0003",  # api version 3
            "00000001",  # correlation id
            "0005 73686f616c",  # client id: classic int16 string even in header v2
            "00",  # header tagged fields: none
            "06 73686f616c",  # ClientSoftwareName: compact string, length+1 = 6
            "04 302e31",  # ClientSoftwareVersion "0.1"
            "00",  # body tagged fields
        ),
    ),
    # ---- Produce v3 request (classic encoding, header v1)
    (
        "Produce",
        3,
        dict(
            transactional_id=None,
            acks=-1,
            timeout_ms=30000,
            topic_data=[
                (
                    "TopicProduceData",
                    dict(name="t", partition_data=[("PartitionProduceData", dict(index=2, records=BATCH))]),
                )
            ],
        ),
        hx(
            "0000 0003 00000001 0005 73686f616c",  # header v1: key 0, v3, corr 1, client id
            "ffff",  # TransactionalId: null string
            "ffff",  # Acks -1
            "00007530",  # TimeoutMs 30000
            "00000001",  # TopicData: 1 entry
            "0001 74",  # Name "t"
            "00000001",  # PartitionData: 1 entry
            "00000002",  # Index 2
            "00000007 00010203040506",  # Records: int32 length + bytes
        ),
    ),
    # ---- Produce v9 request (first flexible version)
    (
        "Produce",
        9,
        dict(
            transactional_id=None,
            acks=1,
            timeout_ms=1500,
            topic_data=[
                (
                    "TopicProduceData",
                    dict(name="t", partition_data=[("PartitionProduceData", dict(index=0, records=BATCH))]),
                )
            ],
        ),
        hx(
            "0000 0009 00000001 0005 73686f616c 00",  # header v2
            "00",  # TransactionalId: compact null
            "0001",  # Acks 1
            "000005dc",  # TimeoutMs 1500
            "02",  # TopicData: compact array, 1 entry
            "02 74",  # Name "t"
            "02",  # PartitionData: 1 entry
            "00000000",  # Index 0
            "08 00010203040506",  # Records: compact bytes, length+1 = 8
            "00",  # partition tags
            "00",  # topic tags
            "00",  # body tags
        ),
    ),
    # ---- ShareFetch v1 request with piggy-backed acknowledgements
    (
        "ShareFetch",
        1,
        dict(
            group_id="q",
            member_id="m1",
            share_session_epoch=2,
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=52428800,
            max_records=500,
            batch_size=500,
            topics=[
                (
                    "FetchTopic",
                    dict(
                        topic_id=TOPIC_ID,
                        partitions=[
                            (
                                "FetchPartition",
                                dict(
                                    partition_index=0,
                                    acknowledgement_batches=[
                                        (
                                            "AcknowledgementBatch",
                                            dict(first_offset=10, last_offset=12, acknowledge_types=[1, 2, 3]),
                                        )
                                    ],
                                ),
                            )
                        ],
                    ),
                )
            ],
        ),
        hx(
            "004e 0001 00000001 0005 73686f616c 00",  # header v2, api key 78
            "02 71",  # GroupId "q"
            "03 6d31",  # MemberId "m1"
            "00000002",  # ShareSessionEpoch
            "000001f4",  # MaxWaitMs 500
            "00000001",  # MinBytes
            "03200000",  # MaxBytes 50 MiB
            "000001f4",  # MaxRecords 500
            "000001f4",  # BatchSize 500
            "02",  # Topics: 1
            TID,  # TopicId
            "02",  # Partitions: 1
            "00000000",  # PartitionIndex
            "02",  # AcknowledgementBatches: 1
            "000000000000000a",  # FirstOffset 10
            "000000000000000c",  # LastOffset 12
            "04 010203",  # AcknowledgeTypes: accept, release, reject
            "00 00 00",  # batch, partition, topic tags
            "01",  # ForgottenTopicsData: empty compact array
            "00",  # body tags
        ),
    ),
    # ---- ShareAcknowledge v1 request
    (
        "ShareAcknowledge",
        1,
        dict(
            group_id="q",
            member_id="m1",
            share_session_epoch=3,
            topics=[
                (
                    "AcknowledgeTopic",
                    dict(
                        topic_id=TOPIC_ID,
                        partitions=[
                            (
                                "AcknowledgePartition",
                                dict(
                                    partition_index=5,
                                    acknowledgement_batches=[
                                        (
                                            "AcknowledgementBatch",
                                            dict(first_offset=0, last_offset=99, acknowledge_types=[1]),
                                        )
                                    ],
                                ),
                            )
                        ],
                    ),
                )
            ],
        ),
        hx(
            "004f 0001 00000001 0005 73686f616c 00",  # header v2, api key 79
            "02 71",  # GroupId
            "03 6d31",  # MemberId
            "00000003",  # ShareSessionEpoch
            "02",  # Topics: 1
            TID,
            "02",  # Partitions: 1
            "00000005",  # PartitionIndex 5
            "02",  # AcknowledgementBatches: 1
            "0000000000000000 0000000000000063",  # offsets 0..99
            "02 01",  # AcknowledgeTypes [accept]: one type for the whole range
            "00 00 00 00",  # batch, partition, topic, body tags
        ),
    ),
    # ---- ShareGroupHeartbeat v1 request: a join (epoch 0, full subscription)
    (
        "ShareGroupHeartbeat",
        1,
        dict(group_id="q", member_id="m1", member_epoch=0, rack_id=None, subscribed_topic_names=["orders"]),
        hx(
            "004c 0001 00000001 0005 73686f616c 00",  # header v2, api key 76
            "02 71",  # GroupId
            "03 6d31",  # MemberId
            "00000000",  # MemberEpoch 0 = join
            "00",  # RackId null
            "02 07 6f7264657273",  # SubscribedTopicNames ["orders"]
            "00",  # tags
        ),
    ),
]

RESPONSES = [
    # ---- ApiVersions v0 response: always header v0; error 35 + our list
    (
        "ApiVersions",
        0,
        dict(error_code=35, api_keys=[("ApiVersion", dict(api_key=18, min_version=0, max_version=4))]),
        hx(
            "00000001",  # correlation id (header v0)
            "0023",  # ErrorCode 35 UNSUPPORTED_VERSION
            "00000001",  # ApiKeys: 1 entry
            "0012 0000 0004",  # ApiVersions 0..4
        ),
    ),
    # ---- ApiVersions v3 response: flexible body, but still header v0
    (
        "ApiVersions",
        3,
        dict(
            error_code=0,
            api_keys=[("ApiVersion", dict(api_key=0, min_version=3, max_version=13))],
            throttle_time_ms=0,
        ),
        hx(
            "00000001",  # correlation id, no header tags
            "0000",  # ErrorCode
            "02",  # ApiKeys: compact, 1 entry
            "0000 0003 000d 00",  # Produce 3..13, entry tags
            "00000000",  # ThrottleTimeMs
            "00",  # body tags (no features)
        ),
    ),
    # ---- Fetch v4 response (classic), one partition with a batch
    (
        "Fetch",
        4,
        dict(
            throttle_time_ms=0,
            responses=[
                (
                    "FetchableTopicResponse",
                    dict(
                        topic="t",
                        partitions=[
                            (
                                "PartitionData",
                                dict(
                                    partition_index=0,
                                    error_code=0,
                                    high_watermark=7,
                                    last_stable_offset=7,
                                    aborted_transactions=None,
                                    records=BATCH,
                                ),
                            )
                        ],
                    ),
                )
            ],
        ),
        hx(
            "00000001",  # correlation id
            "00000000",  # ThrottleTimeMs
            "00000001",  # Responses: 1
            "0001 74",  # Topic "t"
            "00000001",  # Partitions: 1
            "00000000 0000",  # PartitionIndex, ErrorCode
            "0000000000000007 0000000000000007",  # HighWatermark, LastStableOffset
            "ffffffff",  # AbortedTransactions: null
            "00000007 00010203040506",  # Records
        ),
    ),
    # ---- ShareFetch v1 response with acquired records
    (
        "ShareFetch",
        1,
        dict(
            acquisition_lock_timeout_ms=30000,
            responses=[
                (
                    "ShareFetchableTopicResponse",
                    dict(
                        topic_id=TOPIC_ID,
                        partitions=[
                            (
                                "PartitionData",
                                dict(
                                    partition_index=0,
                                    records=BATCH,
                                    acquired_records=[
                                        (
                                            "AcquiredRecords",
                                            dict(first_offset=0, last_offset=6, delivery_count=1),
                                        )
                                    ],
                                ),
                            )
                        ],
                    ),
                )
            ],
        ),
        hx(
            "00000001 00",  # correlation id, header v1 tags
            "00000000",  # ThrottleTimeMs
            "0000",  # ErrorCode
            "00",  # ErrorMessage null
            "00007530",  # AcquisitionLockTimeoutMs 30000
            "02",  # Responses: 1
            TID,
            "02",  # Partitions: 1
            "00000000 0000 00",  # PartitionIndex, ErrorCode, ErrorMessage null
            "0000 00",  # AcknowledgeErrorCode, AcknowledgeErrorMessage null
            "00000000 00000000 00",  # CurrentLeader: spec defaults (0, 0), tags
            "08 00010203040506",  # Records (never null for share fetch)
            "02 0000000000000000 0000000000000006 0001 00",  # AcquiredRecords [0..6, count 1]
            "00 00",  # partition, topic tags
            "01",  # NodeEndpoints: empty
            "00",  # body tags
        ),
    ),
    # ---- ShareGroupHeartbeat v1 response carrying an assignment
    (
        "ShareGroupHeartbeat",
        1,
        dict(
            member_id="m1",
            member_epoch=5,
            heartbeat_interval_ms=5000,
            assignment=(
                "Assignment",
                dict(topic_partitions=[("TopicPartitions", dict(topic_id=TOPIC_ID, partitions=[0, 1]))]),
            ),
        ),
        hx(
            "00000001 00",  # correlation id, header tags
            "00000000 0000 00",  # ThrottleTimeMs, ErrorCode, ErrorMessage null
            "03 6d31",  # MemberId
            "00000005",  # MemberEpoch
            "00001388",  # HeartbeatIntervalMs 5000
            "01",  # Assignment present (nullable struct marker)
            "02",  # TopicPartitions: 1
            TID,
            "03 00000000 00000001",  # Partitions [0, 1]
            "00 00",  # topic-partitions tags, assignment tags
            "00",  # body tags
        ),
    ),
]


def build(cls, values: dict, top=None):
    """Instantiate a generated dataclass from (struct name, dict) trees."""
    top = top or cls
    kwargs = {}
    for k, v in values.items():
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], dict):
            kwargs[k] = build(getattr(top, v[0]), v[1], top)
        elif isinstance(v, list) and v and isinstance(v[0], tuple):
            kwargs[k] = [build(getattr(top, name), d, top) for name, d in v]
        else:
            kwargs[k] = v
    return cls(**kwargs)


def _ids(cases):
    return [f"{c[0]}-v{c[1]}" for c in cases]


@pytest.mark.parametrize(("api_name", "version", "values", "payload"), REQUESTS, ids=_ids(REQUESTS))
def test_request_golden(api_name, version, values, payload) -> None:
    a = api_by_name(api_name)
    body = build(a.request_class(), values)
    ours = b"".join(encode_request(a.key, version, 1, "shoal", body))
    assert ours == frame(payload)
    req = decode_request(memoryview(payload))
    assert (req.api.key, req.version, req.correlation_id, req.client_id) == (a.key, version, 1, "shoal")
    assert req.body == body
    # kio (Kafka's own specs) reads the same body bytes to the same values.
    header_len = len(payload) - len(a.request_codec(version).encode(body))
    kcls = kb.kio_class(a.request.name, version)
    kobj, size = kb.kio_decode(kcls, payload[header_len:])
    assert size == len(payload) - header_len
    assert kobj == kb.to_kio(body, kcls)


@pytest.mark.parametrize(("api_name", "version", "values", "payload"), RESPONSES, ids=_ids(RESPONSES))
def test_response_golden(api_name, version, values, payload) -> None:
    a = api_by_name(api_name)
    body = build(a.response_class(), values)
    ours = b"".join(encode_response(a.key, version, 1, body))
    assert ours == frame(payload)
    correlation_id, decoded = decode_response(memoryview(payload), a.key, version)
    assert correlation_id == 1
    assert decoded == body
    kcls = kb.kio_class(a.response.name, version)
    body_bytes = a.response_codec(version).encode(body)
    assert payload.endswith(body_bytes)
    kobj, _ = kb.kio_decode(kcls, body_bytes)
    assert kobj == kb.to_kio(body, kcls)


def test_fetch_records_are_zero_copy() -> None:
    """Decoding hands out the record batch as a view of the frame, not a copy."""
    a = api_by_name("Fetch")
    payload = RESPONSES[2][3]
    frame_view = memoryview(bytearray(payload))
    _, body = decode_response(frame_view, a.key, 4)
    records = body.responses[0].partitions[0].records
    assert isinstance(records, memoryview)
    assert records.obj is frame_view.obj
