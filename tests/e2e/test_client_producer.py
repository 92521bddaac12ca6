"""AsyncProducer against a real broker, judged by confluent-kafka (librdkafka).

* every codec, several partitions, keys/values/headers/timestamps read back
  byte-exact with contiguous offsets, and interleaved with confluent's records;
* idempotence: a kill -9 and restart mid-run, and a proxy that swallows produce
  responses after the broker stored the batch — no loss, no duplicates, order kept;
* buffer.memory backpressure and max.block.ms, delivery.timeout.ms with the
  broker gone, records too large (ours, and the broker's max.message.bytes with
  batch splitting), acks=0, unknown topics, invalid configuration, closing with
  records pending, and the future-compatible RecordFuture.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from shoal.client.core.errors import BrokerResponseError, ClientClosedError, ConfigError, KafkaTimeoutError
from shoal.client.producer.producer import AsyncProducer, RecordFuture, RecordMetadata
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import TimestampType
from tests.support.clients import QUIET, DroppingProxy, _free_port, create_topic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def consume(bootstrap: str, topic: str, partitions: int, count: int, timeout: float = 30.0) -> dict[int, list]:
    """partition -> [(offset, key, value, headers, timestamp)], read with confluent's Consumer (assign)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **QUIET})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list] = {p: [] for p in range(partitions)}
    n = 0
    deadline = time.monotonic() + timeout
    while n < count and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got[m.partition()].append((m.offset(), m.key(), m.value(), list(m.headers() or []), m.timestamp()[1]))
        n += 1
    # nothing more than expected
    extra = c.poll(0.5)
    assert extra is None or extra.error() is not None, f"unexpected record at offset {extra.offset()}"
    c.close()
    return got


def sample(tag: str, n: int = 60, partitions: int = 3) -> list[tuple]:
    """(partition, key, value, headers, timestamp): varied sizes, null keys and values, binary headers."""
    now = int(time.time() * 1000) - 10_000
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else f"{tag}-key-{i}".encode()
        value = None if i % 11 == 5 else bytes((i * 31 + j) % 256 for j in range(i * 37 % 3000)) + tag.encode()
        headers = [("n", str(i).encode()), ("bin", bytes([0, 255, i % 256])), ("null", None)] if i % 3 else []
        out.append((i % partitions, key, value, headers, now + i))
    return out


def check_log(expected: list[tuple], got: dict[int, list], partitions: int) -> None:
    for p in range(partitions):
        want = [(k, v, h, ts) for (pp, k, v, h, ts) in expected if pp == p]
        have = got[p]
        assert [o for o, *_ in have] == list(range(len(want))), f"offsets of partition {p}"
        assert [(k, v, h, ts) for _, k, v, h, ts in have] == want


@pytest.mark.parametrize("codec", CODECS)
async def test_round_trip_every_codec(shared_broker, topic_name, codec) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name, 3)
    expected = sample(codec)
    async with AsyncProducer(bootstrap_servers=bs, compression_type=codec, linger_ms=20) as p:
        futs = [
            await p.send(topic_name, v, key=k, partition=part, timestamp_ms=ts, headers=h)
            for part, k, v, h, ts in expected
        ]
        mds = await asyncio.gather(*futs)
    got = await asyncio.to_thread(consume, bs, topic_name, 3, len(expected))
    check_log(expected, got, 3)
    offsets = {p: iter(range(1000)) for p in range(3)}
    for (part, _, _, _, ts), md in zip(expected, mds, strict=True):
        assert (md.topic, md.partition, md.offset, md.timestamp) == (topic_name, part, next(offsets[part]), ts)


async def test_interleaved_with_confluent_producer(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name, 2)
    expected = []
    theirs = Producer({"bootstrap.servers": bs, "linger.ms": 1, "compression.type": "lz4", **QUIET})
    async with AsyncProducer(bootstrap_servers=bs, compression_type="zstd", linger_ms=1) as ours:
        for round_ in range(4):
            rows = sample(f"r{round_}", 20, 2)
            if round_ % 2 == 0:
                for part, k, v, h, ts in rows:
                    theirs.produce(topic_name, value=v, key=k, partition=part, headers=h, timestamp=ts)
                assert theirs.flush(30) == 0
            else:
                for part, k, v, h, ts in rows:
                    await ours.send(topic_name, v, key=k, partition=part, timestamp_ms=ts, headers=h)
                await ours.flush()
            expected += rows
    got = await asyncio.to_thread(consume, bs, topic_name, 2, len(expected))
    check_log(expected, got, 2)


async def test_acks_zero(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name, 2)
    async with AsyncProducer(bootstrap_servers=bs, acks=0, linger_ms=2) as p:
        assert p.config["enable.idempotence"] is False
        futs = [await p.send(topic_name, b"z%03d" % i, partition=i % 2) for i in range(200)]
        await p.flush()
        mds = await asyncio.gather(*futs)
    assert all(md.offset == -1 for md in mds)
    got = await asyncio.to_thread(consume, bs, topic_name, 2, 200)
    for part in range(2):
        assert [v for _, _, v, _, _ in got[part]] == [b"z%03d" % i for i in range(part, 200, 2)]


async def test_records_too_large(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs, **QUIET})
    for f in admin.create_topics([NewTopic(topic_name, 1, 1, config={"max.message.bytes": "3000"})]).values():
        f.result(15)
    async with AsyncProducer(bootstrap_servers=bs, max_request_size=10_000, linger_ms=50) as p:
        # never fits this producer: failed future, nothing sent
        fut = await p.send(topic_name, bytes(20_000))
        assert fut.done()
        with pytest.raises(BrokerResponseError) as info:
            await fut
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        # fits the producer but not the topic: the broker refuses it; the batch
        # around it is split until every other record is stored
        futs = [await p.send(topic_name, b"%04d" % i + bytes(900)) for i in range(12)]
        futs.insert(6, await p.send(topic_name, bytes(5000)))
        futs += [await p.send(topic_name, b"%04d" % i + bytes(900)) for i in range(12, 20)]
        results = await asyncio.gather(*futs, return_exceptions=True)
    bad = results.pop(6)
    assert isinstance(bad, BrokerResponseError) and bad.code == ErrorCode.MESSAGE_TOO_LARGE
    assert [md.offset for md in results] == list(range(20))
    got = await asyncio.to_thread(consume, bs, topic_name, 1, 20)
    assert [v[:4] for _, _, v, _, _ in got[0]] == [b"%04d" % i for i in range(20)]


async def test_unknown_topic_is_auto_created(shared_broker, topic_name) -> None:
    async with AsyncProducer(bootstrap_servers=shared_broker.bootstrap) as p:
        md = await p.send_and_wait(topic_name, b"first")
        assert (md.topic, md.offset) == (topic_name, 0)
        assert await p.partitions_for(topic_name) == list(range(len(await p.partitions_for(topic_name))))


async def test_invalid_topic_name_fails_at_once(shared_broker) -> None:
    async with AsyncProducer(bootstrap_servers=shared_broker.bootstrap, max_block_ms=20_000) as p:
        t0 = time.monotonic()
        with pytest.raises(BrokerResponseError) as info:
            await p.send("no spaces allowed!", b"x")
        assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION and time.monotonic() - t0 < 10


async def test_log_append_time_topics_report_the_broker_timestamp(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs, **QUIET})
    config = {"message.timestamp.type": "LogAppendTime"}
    for f in admin.create_topics([NewTopic(topic_name, 1, 1, config=config)]).values():
        f.result(15)
    before = int(time.time() * 1000)
    async with AsyncProducer(bootstrap_servers=bs) as p:
        md = await p.send_and_wait(topic_name, b"x", timestamp_ms=1000)
    assert md.timestamp_type == TimestampType.LOG_APPEND_TIME and md.timestamp >= before - 1000
    got = await asyncio.to_thread(consume, bs, topic_name, 1, 1)
    assert got[0][0][4] == md.timestamp


async def test_serializers_headers_and_explicit_partitions(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name, 2)
    async with AsyncProducer(
        bootstrap_servers=bs, key_serializer=lambda k: None if k is None else str(k).encode(), linger_ms=1
    ) as p:
        md = await p.send_and_wait(topic_name, "välue", key=17, partition=1, headers={"a": "x", "b": None})
        assert md.partition == 1
        with pytest.raises(TypeError):
            await p.send(topic_name, 12345)
        with pytest.raises(ValueError):
            await p.send(topic_name, b"x", partition=-1)
    async with AsyncProducer(bootstrap_servers=bs, max_block_ms=300) as p:
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            await p.send(topic_name, b"x", partition=2)
        assert time.monotonic() - t0 >= 0.25
    got = await asyncio.to_thread(consume, bs, topic_name, 2, 1)
    assert got[1][0][1:4] == (b"17", "välue".encode(), [("a", b"x"), ("b", None)])


async def test_record_future_is_asyncio_compatible(shared_broker, topic_name) -> None:
    create_topic(shared_broker.bootstrap, topic_name, 1)
    async with AsyncProducer(bootstrap_servers=shared_broker.bootstrap, linger_ms=200) as p:
        futs = [await p.send(topic_name, b"%d" % i) for i in range(3)]
        f = futs[0]
        assert isinstance(f, RecordFuture) and asyncio.isfuture(f) and not f.done()
        with pytest.raises(asyncio.InvalidStateError):
            f.result()
        seen: list = []
        f.add_done_callback(seen.append)
        dropped: list = []
        f.add_done_callback(dropped.append)
        assert f.remove_done_callback(dropped.append) == 1
        assert futs[1].cancel() and futs[1].cancelled()  # stops waiting, not the record
        done, pending = await asyncio.wait([f, futs[2]], timeout=30)
        assert done == {f, futs[2]}
        assert not pending
        await asyncio.sleep(0)
        assert seen == [f] and dropped == []
        md = f.result()
        assert isinstance(md, RecordMetadata) and md.offset == 0 and f.exception() is None
        assert (await asyncio.wait_for(futs[2], 5)).offset == 2
        with pytest.raises(asyncio.CancelledError):
            futs[1].result()
        # awaiting and being cancelled does not disturb the other waiters of the batch
        g, h = await p.send(topic_name, b"g"), await p.send(topic_name, b"h")
        assert asyncio.ensure_future(g) is g  # a future already: not wrapped in a task

        async def wait(x: RecordFuture) -> RecordMetadata:
            return await x

        waiter = asyncio.create_task(wait(g))
        await asyncio.sleep(0.01)
        waiter.cancel()
        assert (await h).offset == 4 and (await g).offset == 3


async def test_close_sends_what_is_buffered_and_refuses_new_records(shared_broker, topic_name) -> None:
    create_topic(shared_broker.bootstrap, topic_name, 1)
    p = AsyncProducer(bootstrap_servers=shared_broker.bootstrap, linger_ms=60_000)
    with pytest.raises(ClientClosedError):
        await p.send(topic_name, b"too early")
    await p.start()
    futs = [await p.send(topic_name, b"%d" % i) for i in range(10)]
    t0 = time.monotonic()
    await p.flush()
    assert time.monotonic() - t0 < 10  # flush does not linger
    futs += [await p.send(topic_name, b"%d" % i) for i in range(10, 20)]
    await p.close()
    assert [f.result().offset for f in futs] == list(range(20))
    with pytest.raises(ClientClosedError):
        await p.send(topic_name, b"late")
    await p.close()


def test_invalid_configuration_names_the_key() -> None:
    cases = [
        ({"linger_ms": -1}, "linger.ms"),
        ({"acks": "2"}, "acks"),
        ({"compression_type": "brotli"}, "compression.type"),
        ({"partitioner": "consistent"}, "partitioner"),
        ({"batch_size": 0}, "batch.size"),
        (
            {"max_in_flight_requests_per_connection": 6, "enable_idempotence": True},
            "max.in.flight.requests.per.connection",
        ),
        ({"acks": 1, "enable_idempotence": True}, "acks"),
        ({"retries": 0, "enable_idempotence": True}, "retries"),
        ({"delivery_timeout_ms": 1000, "request_timeout_ms": 2000}, "delivery.timeout.ms"),
        ({"buffer_memory": "lots"}, "buffer.memory"),
        ({"value_serializer": "json"}, "value.serializer"),
        ({"no_such_setting": 1}, "no.such.setting"),
        ({"bootstrap_servers": "nohostport"}, "bootstrap.servers"),
    ]
    for kwargs, key in cases:
        with pytest.raises(ConfigError) as info:
            AsyncProducer({"bootstrap.servers": "127.0.0.1:1", **{}}, **kwargs)
        assert info.value.key == key, kwargs
    with pytest.raises(ConfigError):
        AsyncProducer({"linger.ms": 1})  # bootstrap.servers is required
    # idempotence turns itself off when not asked for explicitly and acks is not all
    assert AsyncProducer(bootstrap_servers="h:1", acks=1).config["enable.idempotence"] is False
    assert AsyncProducer(bootstrap_servers="h:1", request_timeout_ms=200_000).config["delivery.timeout.ms"] == 200_005


# --------------------------------------------------------------------------
# brokers of their own


async def test_idempotent_producer_survives_kill9_and_restart(broker_factory, topic_name) -> None:
    b = broker_factory(process=True)  # kill -9 at an arbitrary instant is the point
    b.start()
    create_topic(b.bootstrap, topic_name, 2)
    total = 3000
    async with AsyncProducer(
        bootstrap_servers=b.bootstrap,
        acks="all",
        linger_ms=2,
        batch_size=512,
        reconnect_backoff_max_ms=200,
        retry_backoff_max_ms=200,
        delivery_timeout_ms=90_000,
    ) as p:
        assert p.config["enable.idempotence"] is True
        futs = []
        crash = None

        async def freeze_then_kill() -> None:
            # SIGSTOP first: whatever is in flight from then on is certainly unanswered (a kill alone
            # races with answers already on their way, and then nothing needs a retry).
            os.kill(b.proc.pid, signal.SIGSTOP)
            while not p.stats.in_flight:
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.02)
            b.kill()  # with produce requests unanswered
            await asyncio.to_thread(b.start)

        for i in range(total):
            futs.append(await p.send(topic_name, b"v%06d" % i, partition=i % 2))
            if i % 10 == 0:
                await asyncio.sleep(0.001)
            if crash is None and sum(f.done() for f in futs[:1000]) >= 400:
                crash = asyncio.create_task(freeze_then_kill())
        assert crash is not None
        await crash
        await p.flush(120)
        results = await asyncio.gather(*futs, return_exceptions=True)
        assert p.stats.retries > 0
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    got = await asyncio.to_thread(consume, b.bootstrap, topic_name, 2, total)
    for part in range(2):
        recs = got[part]
        assert [o for o, *_ in recs] == list(range(len(recs))), f"gap in partition {part}"
        assert [v for _, _, v, _, _ in recs] == [b"v%06d" % i for i in range(part, total, 2)], (
            "lost, duplicated or reordered"
        )
    for i, md in enumerate(results):
        assert (md.partition, got[md.partition][md.offset][2]) == (i % 2, b"v%06d" % i)


async def test_swallowed_produce_responses_are_retried_without_duplicates(broker_factory, topic_name) -> None:
    proxy_port = _free_port()
    b = broker_factory(f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}")
    b.start()
    proxy = DroppingProxy(b.port, drops=3, listen_port=proxy_port)
    bootstrap = f"127.0.0.1:{proxy_port}"
    try:
        create_topic(bootstrap, topic_name, 1)
        async with AsyncProducer(bootstrap_servers=bootstrap, linger_ms=5, reconnect_backoff_ms=10) as p:
            futs = []
            for i in range(300):
                futs.append(await p.send(topic_name, b"m%04d" % i, partition=0))
                if i % 20 == 0:
                    await asyncio.sleep(0.005)
            mds = await asyncio.gather(*futs)
        assert proxy.dropped == 3
        assert [md.offset for md in mds] == list(range(300))
        got = await asyncio.to_thread(consume, bootstrap, topic_name, 1, 300)
    finally:
        proxy.close()
    assert [o for o, *_ in got[0]] == list(range(300))
    assert [v for _, _, v, _, _ in got[0]] == [b"m%04d" % i for i in range(300)]


async def test_full_buffer_blocks_send_until_max_block_ms(broker_factory, topic_name) -> None:
    b = broker_factory("auto.create.topics.enable=false", process=True)  # SIGSTOP: a frozen broker
    b.start()
    create_topic(b.bootstrap, topic_name, 1)
    async with AsyncProducer(bootstrap_servers=b.bootstrap, max_block_ms=1000) as p:
        # a topic that does not exist and may not be created: the metadata wait times out
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="not present in metadata"):
            await p.send(topic_name + "-missing", b"x")
        assert 0.9 <= time.monotonic() - t0 < 30
    async with AsyncProducer(
        bootstrap_servers=b.bootstrap, buffer_memory=64 * 1024, batch_size=16384, linger_ms=0, max_block_ms=2500
    ) as p:
        await p.send_and_wait(topic_name, b"warm")
        os.kill(b.proc.pid, signal.SIGSTOP)  # the broker stops answering
        try:
            futs = []
            t0 = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match="allocate memory"):
                for i in range(1000):
                    futs.append(await p.send(topic_name, b"%04d" % i + bytes(1020)))
                    assert p.buffered_bytes <= 64 * 1024
            assert 2.4 <= time.monotonic() - t0 < 30
            assert 40 <= len(futs) <= 64  # four 16 KiB batches of 1 KiB records
            assert not any(f.done() for f in futs)
            late = asyncio.create_task(p.send(topic_name, b"late"))
            await asyncio.sleep(0.3)
            assert not late.done()
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)
        # room comes back as the broker answers: the waiting send gets in
        futs.append(await late)
        mds = await asyncio.gather(*futs)
    assert [md.offset for md in mds] == list(range(1, len(futs) + 1))


async def test_delivery_timeout_when_the_broker_is_gone(broker_factory, topic_name) -> None:
    b = broker_factory()
    b.start()
    create_topic(b.bootstrap, topic_name, 1)
    p = AsyncProducer(
        bootstrap_servers=b.bootstrap,
        linger_ms=0,
        request_timeout_ms=1000,
        delivery_timeout_ms=2000,
        reconnect_backoff_max_ms=200,
    )
    async with p:
        await p.send_and_wait(topic_name, b"before")
        b.kill()
        t0 = time.monotonic()
        fut = await p.send(topic_name, b"lost")
        with pytest.raises(KafkaTimeoutError, match=r"delivery\.timeout\.ms"):
            await asyncio.wait_for(fut, 30)
        assert 1.5 <= time.monotonic() - t0 < 20
        # closing with a record pending never drops it silently
        pending = await p.send(topic_name, b"pending")
        t0 = time.monotonic()
        await p.close(timeout=0.5)
        assert time.monotonic() - t0 < 10
    with pytest.raises(ClientClosedError):
        pending.result()
