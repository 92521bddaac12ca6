"""Small appends are written off the event loop when the page cache is slow.

A ``write()`` into a page cache that throttles dirty pages can block for
100 ms and more; written on the loop, that stalled every client. Small
produce appends are written on the loop only while writes are quick (one
slow write sends them to the writer thread for a while); coordinator
appends always go to their thread. Here the broker's segment writes are
held (``FileOps.stall``, a hung disk) and the loop must keep answering other
requests, while the held produce or offset commit is answered only once its
bytes are in. Also: small and large
batches pipelined on one partition keep their offset order on disk and in
fetches, and an acks=-1 produce is answered only after its fsync.

In process (the test holds the broker's file operations), real sockets.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from shoal.broker.broker import Broker
from shoal.broker.config.settings import BrokerConfig
from shoal.broker.log import LogConfig, PartitionLog
from shoal.broker.metrics.collector import BrokerCollector
from shoal.client.core.conn import BrokerConnection
from shoal.protocol.api import api_by_name
from shoal.protocol.records import build_batch, iter_batches

TOPIC = "off-loop"
PR = api_by_name("Produce").request_class()
FR = api_by_name("Fetch").request_class()
OCR = api_by_name("OffsetCommit").request_class()
OFR = api_by_name("OffsetFetch").request_class()
AVR = api_by_name("ApiVersions").request_class()


def produce_body(batch: bytes, acks: int, partition: int = 0) -> PR:
    return PR(
        acks=acks,
        timeout_ms=30000,
        topic_data=[
            PR.TopicProduceData(name=TOPIC, partition_data=[PR.PartitionProduceData(index=partition, records=batch)])
        ],
    )


def one_batch(value: bytes, count: int = 1) -> bytes:
    return build_batch([(None, value, (), int(time.time() * 1000)) for _ in range(count)])


async def start_broker(tmp_path: Path, *extra: str) -> tuple[Broker, int]:
    config = BrokerConfig.from_sources(
        {},
        [f"log.dirs={tmp_path / 'data'}", "listeners=PLAINTEXT://127.0.0.1:0", "shoal.http.listeners=", *extra],
    )
    broker = Broker(config)
    await broker.start()
    broker.topics.create(TOPIC, 2, {})
    return broker, broker.server.bound[0][1]


def slow_writes_metric(broker: Broker) -> float:
    """``shoal_log_slow_writes_total`` as the broker's /metrics collector reports it."""
    (value,) = [
        sample.value
        for family in BrokerCollector(broker, broker.stats).collect()
        for sample in family.samples
        if sample.name == "shoal_log_slow_writes_total"
    ]
    return value


async def answered_within(conn: BrokerConnection, seconds: float) -> float:
    """Seconds an ApiVersions took (it needs nothing but the loop)."""
    started = time.perf_counter()
    await asyncio.wait_for(conn.request("ApiVersions", AVR(), version=3), seconds)
    return time.perf_counter() - started


async def test_small_appends_leave_the_loop_once_a_write_was_slow(tmp_path: Path) -> None:
    broker, port = await start_broker(tmp_path)
    producer = await BrokerConnection.connect("127.0.0.1", port)
    other = await BrokerConnection.connect("127.0.0.1", port)
    log = broker.topics.partition(TOPIC, 0).log
    assert broker.log_writer is not None
    release = lambda: None  # noqa: E731 - replaced by each stall's own
    safety = threading.Timer(0, release)
    # A slow write here is one held 0.2 s or more: a loaded machine's preemption stays well below.
    broker.inline_writes.slow_s = 0.2
    try:
        # Quick writes: a small append is written on the loop, nothing goes to the writer thread.
        r = await producer.request("Produce", produce_body(one_batch(b"a" * 1024), acks=1), version=9)
        assert r.responses[0].partition_responses[0].base_offset == 0
        assert broker.log_writer.submitted_bytes == 0 and broker.inline_writes.pauses == 0
        assert slow_writes_metric(broker) == 0

        # The page cache holds the next one for 0.5 s: written on the loop, answered after it, and
        # small appends stop being written on the loop.
        release = broker.file_ops.stall("write")
        threading.Timer(0.5, release).start()
        started = time.perf_counter()
        r = await producer.request("Produce", produce_body(one_batch(b"b" * 1024), acks=1), version=9)
        assert time.perf_counter() - started >= 0.45
        assert r.responses[0].partition_responses[0].base_offset == 1
        assert broker.inline_writes.pauses == 1 and not broker.inline_writes.allowed()
        assert slow_writes_metric(broker) == 1  # what /metrics shows operators

        # Now writes hang: the next small append goes to the thread and the loop stays free.
        release = broker.file_ops.stall("write")
        # A broker that writes on the loop would block on the stall for good: let go after 5 s anyway.
        safety = threading.Timer(5.0, release)
        safety.start()
        held = producer.send("Produce", produce_body(one_batch(b"c" * 1024), acks=1), version=9)
        await asyncio.sleep(0.1)
        assert not held.done(), "answered before its bytes were written"
        assert await answered_within(other, 3.0) < 1.0, "the loop waited for a segment write"
        assert log.high_watermark == 2 and log.writes_in_flight == 1  # not visible before it is written
        assert broker.log_writer.submitted_bytes > 0
        release()
        resp = await asyncio.wait_for(held, 5)
        pr = resp.responses[0].partition_responses[0]
        assert pr.error_code == 0 and pr.base_offset == 2
        assert log.high_watermark == 3
        producer.close()
        other.close()
    finally:
        safety.cancel()
        release()
        await broker.stop()


async def test_a_held_offset_commit_leaves_the_loop_free(tmp_path: Path) -> None:
    broker, port = await start_broker(tmp_path)
    conn = await BrokerConnection.connect("127.0.0.1", port)
    other = await BrokerConnection.connect("127.0.0.1", port)
    commit = OCR(
        group_id="g-off-loop",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[OCR.OffsetCommitRequestTopic(name=TOPIC, partitions=[OCR.OffsetCommitRequestPartition(0, 42)])],
    )
    # The first commit loads nothing new; wait until the coordinator is up.
    for _ in range(100):
        r = await conn.request("OffsetCommit", commit, version=8)
        if r.topics[0].partitions[0].error_code == 0:
            break
        await asyncio.sleep(0.05)
    assert r.topics[0].partitions[0].error_code == 0
    release = broker.file_ops.stall("write")
    safety = threading.Timer(5.0, release)
    safety.start()
    try:
        commit.topics[0].partitions[0].committed_offset = 77
        held = conn.send("OffsetCommit", commit, version=8)
        await asyncio.sleep(0.1)
        assert not held.done(), "a commit was answered before its record was written"
        assert await answered_within(other, 3.0) < 1.0, "the loop waited for a coordinator write"
        release()
        r = await asyncio.wait_for(held, 5)
        assert r.topics[0].partitions[0].error_code == 0
        fetched = await conn.request(
            "OffsetFetch",
            OFR(group_id="g-off-loop", topics=[OFR.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])]),
            version=7,
        )
        assert fetched.topics[0].partitions[0].committed_offset == 77
        conn.close()
        other.close()
    finally:
        safety.cancel()
        release()
        await broker.stop()


async def test_an_acks_all_produce_is_answered_only_after_its_fsync(tmp_path: Path) -> None:
    broker, port = await start_broker(tmp_path)
    release = broker.file_ops.stall("fsync")
    try:
        conn = await BrokerConnection.connect("127.0.0.1", port)
        other = await BrokerConnection.connect("127.0.0.1", port)  # answers are in order per connection
        durable = conn.send("Produce", produce_body(one_batch(b"d" * 1024), acks=-1), version=9)
        written = other.send("Produce", produce_body(one_batch(b"w" * 1024), acks=1, partition=1), version=9)
        r1 = await asyncio.wait_for(written, 5)
        assert r1.responses[0].partition_responses[0].error_code == 0
        await asyncio.sleep(0.3)
        log = broker.topics.partition(TOPIC, 0).log
        assert log.log_end_offset == 1 and log.recovery_point == 0
        assert not durable.done(), "acks=-1 answered before the fsync completed"
        release()
        r = await asyncio.wait_for(durable, 5)
        assert r.responses[0].partition_responses[0].error_code == 0
        assert log.recovery_point >= 1
        conn.close()
        other.close()
    finally:
        release()
        await broker.stop()


async def test_small_and_large_batches_pipelined_keep_their_order(tmp_path: Path) -> None:
    broker, port = await start_broker(tmp_path, "log.segment.bytes=2000000")
    try:
        conns = [await BrokerConnection.connect("127.0.0.1", port) for _ in range(3)]
        sizes = [100, 300_000, 1024, 50, 200_000, 10, 70_000, 5, 1024, 400_000] * 4
        counts = {i: 1 + i % 3 if size < 60_000 else 1 for i, size in enumerate(sizes)}
        sent: list[tuple[int, bytes, asyncio.Future]] = []
        for i, size in enumerate(sizes):
            value = bytes([i % 251]) * size
            batch = one_batch(value, count=counts[i])
            fut = conns[i % 3].send("Produce", produce_body(batch, acks=1 if i % 2 else -1), version=9)
            sent.append((i, value, fut))
        results = await asyncio.wait_for(asyncio.gather(*(f for _, _, f in sent)), 30)
        base_of = {}
        for (i, _, _), resp in zip(sent, results):
            pr = resp.responses[0].partition_responses[0]
            assert pr.error_code == 0, pr
            base_of[i] = pr.base_offset
        # Offsets follow the order each connection sent in, and together cover 0..end without a gap.
        for c in range(3):
            mine = [base_of[i] for i in range(len(sizes)) if i % 3 == c]
            assert mine == sorted(mine)
        spans = sorted((base_of[i], base_of[i] + counts[i], i) for i in base_of)
        end = 0
        for base, nxt, _ in spans:
            assert base == end, f"gap or overlap at {base}"
            end = nxt
        expected = [(base, sizes[i], i % 251) for base, _, i in spans]
        fetched = await fetch_everything(conns[0], end)
        assert fetched == expected
        for c in conns:
            c.close()
    finally:
        await broker.stop()
    log = PartitionLog.open(tmp_path / "data" / f"{TOPIC}-0", LogConfig(), lambda: 0, True)
    try:
        on_disk = [(h.base_offset, *_first_value(d)) for h, d in log.scan()]
        assert on_disk == expected
        assert os.path.getsize(log.active_segment.path()) == log.active_segment.size
    finally:
        log.close()


def _first_value(data: memoryview) -> tuple[int, int]:
    header, _ = next(iter(iter_batches(memoryview(bytes(data)))))
    value = next(iter(header.records())).value
    return len(value), value[0] if value else -1


async def fetch_everything(conn: BrokerConnection, end: int) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    offset = 0
    while offset < end:
        r = await conn.request(
            "Fetch",
            FR(
                replica_id=-1,
                max_wait_ms=100,
                min_bytes=1,
                max_bytes=64 << 20,
                isolation_level=0,
                topics=[
                    FR.FetchTopic(
                        topic=TOPIC,
                        partitions=[FR.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=64 << 20)],
                    )
                ],
            ),
            version=11,
        )
        part = r.responses[0].partitions[0]
        assert part.error_code == 0 and part.high_watermark == end
        for header, data in iter_batches(memoryview(bytes(part.records))):
            if header.base_offset < offset:
                continue
            out.append((header.base_offset, *_first_value(data)))
            offset = header.last_offset + 1
    return out
