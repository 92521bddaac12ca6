"""Codec speed: our generated codec next to kio's, for the hot frames.

Run: python benchmarks/codec.py

For each message it prints microseconds per encode and per decode, ours and
kio's (kio: Apache Kafka's specs as Python types; pure-Python encoder, native
decoder), and the ratio. Produce and Fetch carry one record batch of 1 MiB
and of 1 KiB, to show that decoding does not touch the payload (ours returns a
memoryview slice; kio copies it into bytes).
"""

from __future__ import annotations

import io
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ACCEPT
from tests.support.kio_bridge import to_kio


def timeit(fn: Callable[[], object], budget: float = 0.4) -> float:
    """Median microseconds per call over several rounds filling `budget` seconds."""
    fn()
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt > 0.02:
            break
        n *= 4
    rounds = max(3, int(budget / dt))
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t) / n)
    return statistics.median(samples) * 1e6


def cases():
    tid = uuid.uuid4()
    for size in (1 << 20, 1 << 10):
        batch = os.urandom(size)
        label = "1 MiB" if size > 1024 else "1 KiB"
        produce = api_by_name("Produce")
        P = produce.request_class()
        req = P(
            acks=-1,
            timeout_ms=30000,
            topic_data=[
                P.TopicProduceData(
                    name="bench",
                    partition_data=[P.PartitionProduceData(index=0, records=batch)],
                )
            ],
        )
        yield f"Produce v10 request ({label})", produce, "request", 10, req
        yield f"Produce v7 request ({label})", produce, "request", 7, req

        fetch = api_by_name("Fetch")
        F = fetch.response_class()
        resp = F(
            responses=[
                F.FetchableTopicResponse(
                    topic="bench",
                    topic_id=tid,
                    partitions=[
                        F.PartitionData(
                            partition_index=0,
                            high_watermark=1000,
                            last_stable_offset=1000,
                            log_start_offset=0,
                            records=batch,
                        )
                    ],
                )
            ]
        )
        yield f"Fetch v16 response ({label})", fetch, "response", 16, resp
        yield f"Fetch v11 response ({label})", fetch, "response", 11, resp

    sf = api_by_name("ShareFetch")
    R = sf.request_class()
    req = R(
        group_id="queue",
        member_id="Zm9vYmFyYmF6cXV4cXV1eA",
        share_session_epoch=7,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        max_records=500,
        batch_size=500,
        topics=[
            R.FetchTopic(
                topic_id=tid,
                partitions=[
                    R.FetchPartition(
                        partition_index=p,
                        acknowledgement_batches=[
                            R.AcknowledgementBatch(
                                first_offset=100 * p, last_offset=100 * p + 49, acknowledge_types=[ACCEPT]
                            )
                        ],
                    )
                    for p in range(4)
                ],
            )
        ],
    )
    yield "ShareFetch v1 request (4 partitions, acks)", sf, "request", 1, req
    Q = sf.response_class()
    batch = os.urandom(64 * 1024)
    resp = Q(
        acquisition_lock_timeout_ms=30000,
        responses=[
            Q.ShareFetchableTopicResponse(
                topic_id=tid,
                partitions=[
                    Q.PartitionData(
                        partition_index=p,
                        records=batch,
                        acquired_records=[
                            Q.AcquiredRecords(first_offset=500 * p, last_offset=500 * p + 499, delivery_count=1)
                        ],
                    )
                    for p in range(4)
                ],
            )
        ],
    )
    yield "ShareFetch v1 response (4 x 64 KiB)", sf, "response", 1, resp

    sa = api_by_name("ShareAcknowledge")
    A = sa.request_class()
    req = A(
        group_id="queue",
        member_id="Zm9vYmFyYmF6cXV4cXV1eA",
        share_session_epoch=8,
        topics=[
            A.AcknowledgeTopic(
                topic_id=tid,
                partitions=[
                    A.AcknowledgePartition(
                        partition_index=p,
                        acknowledgement_batches=[
                            A.AcknowledgementBatch(first_offset=10 * i, last_offset=10 * i + 9, acknowledge_types=[1])
                            for i in range(10)
                        ],
                    )
                    for p in range(4)
                ],
            )
        ],
    )
    yield "ShareAcknowledge v1 request (40 batches)", sa, "request", 1, req

    hb = api_by_name("ShareGroupHeartbeat")
    H = hb.request_class()
    req = H(
        group_id="queue",
        member_id="Zm9vYmFyYmF6cXV4cXV1eA",
        member_epoch=3,
        rack_id=None,
        subscribed_topic_names=["orders", "payments"],
    )
    yield "ShareGroupHeartbeat v1 request", hb, "request", 1, req
    HR = hb.response_class()
    resp = HR(
        member_id="Zm9vYmFyYmF6cXV4cXV1eA",
        member_epoch=4,
        heartbeat_interval_ms=5000,
        assignment=HR.Assignment(topic_partitions=[HR.TopicPartitions(topic_id=tid, partitions=list(range(16)))]),
    )
    yield "ShareGroupHeartbeat v1 response", hb, "response", 1, resp


def run_case(label: str, a, kind: str, version: int, obj) -> None:
    codec = a.request_codec(version) if kind == "request" else a.response_codec(version)
    etype = EntityType.request if kind == "request" else EntityType.response
    kcls = getattr(load_payload_module(a.key, version, etype), codec.spec.name)
    kobj = to_kio(obj, kcls)
    writer = entity_writer(kcls)
    reader = entity_reader(kcls)

    def kio_encode() -> bytes:
        b = io.BytesIO()
        writer(b, kobj)
        return b.getvalue()

    data = codec.encode(obj)
    assert data == kio_encode(), label
    view = memoryview(data)

    def ours_encode() -> list:
        out: list = []
        codec.encode_into(obj, out)
        return out

    enc_ours = timeit(ours_encode)
    enc_kio = timeit(kio_encode)
    dec_ours = timeit(lambda: codec.decode(view))
    dec_kio = timeit(lambda: reader(view, 0))
    print(
        f"{label:44} {enc_ours:9.2f} {enc_kio:9.2f} {enc_kio / enc_ours:7.1f}x "
        f"{dec_ours:9.2f} {dec_kio:9.2f} {dec_ours / dec_kio:7.1f}x"
    )


def main() -> None:
    print(
        f"{'message':44} {'enc ours':>9} {'enc kio':>9} {'kio/ours':>8} "
        f"{'dec ours':>9} {'dec kio':>9} {'ours/kio':>8}   (microseconds)"
    )
    for case in cases():
        run_case(*case)
    construct_comparison()


def construct_comparison() -> None:
    """Why the hot path is generated code: construct's own parsers, same layout."""
    from shoal.protocol import construct_codec

    print("\nconstruct vs compiled codegen, decode, microseconds:")
    for label, a, _kind, version, obj in cases():
        if "1 MiB" in label or "response" in label:
            continue
        codec = a.request_codec(version)
        data = codec.encode(obj)
        st = construct_codec.structure(codec.spec, version)
        compiled = st.compile()
        view = memoryview(data)
        interp = timeit(lambda st=st, data=data: st.parse(data), 0.2)
        comp = timeit(lambda c=compiled, data=data: c.parse(data), 0.2)
        ours = timeit(lambda c=codec, v=view: c.decode(v), 0.2)
        print(
            f"  {label:44} construct {interp:8.1f}  construct.compile() {comp:8.1f}  "
            f"ours {ours:6.1f}  ({interp / ours:.0f}x)"
        )


if __name__ == "__main__":
    main()
