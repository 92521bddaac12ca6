"""Real clients against a real broker process: confluent-kafka (librdkafka),
aiokafka and kafka-python produce with every compression codec across several
partitions and read back byte-exact records with contiguous offsets."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.support.clients import PARTITIONS, QUIET, create_topic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 60


def records(tag: str) -> list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]], int]]:
    """(partition, key, value, headers, timestamp ms) — varied sizes, null keys, binary."""
    now = int(time.time() * 1000) - 10_000
    out = []
    for i in range(N):
        key = None if i % 7 == 0 else f"{tag}-key-{i}".encode()
        value = bytes((i * 31 + j) % 256 for j in range(i * 37 % 3000)) + tag.encode()
        headers = [("n", str(i).encode()), ("bin", bytes([0, 255, i % 256]))] if i % 3 else []
        out.append((i % PARTITIONS, key, value, headers, now + i))
    return out


def check(expected, got) -> None:
    """got: partition -> list of (offset, key, value, headers, timestamp)."""
    for p in range(PARTITIONS):
        want = [(k, v, h, ts) for (pp, k, v, h, ts) in expected if pp == p]
        have = got.get(p, [])
        assert [o for o, *_ in have] == list(range(len(want))), f"offsets of partition {p}"
        assert [(k, v, h, ts) for _, k, v, h, ts in have] == want


def consume_confluent(bootstrap: str, topic: str, count: int) -> dict:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **QUIET})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list] = {}
    n = 0
    deadline = time.monotonic() + 30
    while n < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.setdefault(m.partition(), []).append(
            (m.offset(), m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])], m.timestamp()[1])
        )
        n += 1
    c.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_round_trip(shared_broker, topic_name, codec) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name)
    expected = records(codec)
    p = Producer({"bootstrap.servers": bs, "compression.type": codec, "linger.ms": 5, **QUIET})
    for part, k, v, h, ts in expected:
        p.produce(topic_name, key=k, value=v, partition=part, headers=h, timestamp=ts)
    assert p.flush(30) == 0
    check(expected, consume_confluent(bs, topic_name, N))


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(shared_broker, topic_name, codec) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    bs = shared_broker.bootstrap
    create_topic(bs, topic_name)
    expected = records("aio" + codec)

    async def run() -> dict:
        prod = AIOKafkaProducer(bootstrap_servers=bs, compression_type=None if codec == "none" else codec)
        await prod.start()
        try:
            futs = [
                await prod.send(topic_name, key=k, value=v, partition=part, headers=h, timestamp_ms=ts)
                for part, k, v, h, ts in expected
            ]
            await asyncio.gather(*futs)
        finally:
            await prod.stop()
        cons = AIOKafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
        await cons.start()
        got: dict[int, list] = {}
        try:
            tps = [ATP(topic_name, p) for p in range(PARTITIONS)]
            cons.assign(tps)
            for tp in tps:
                cons.seek(tp, 0)
            n = 0
            deadline = time.monotonic() + 30
            while n < N and time.monotonic() < deadline:
                batch = await cons.getmany(timeout_ms=500)
                for tp, msgs in batch.items():
                    for m in msgs:
                        got.setdefault(tp.partition, []).append(
                            (m.offset, m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp)
                        )
                        n += 1
        finally:
            await cons.stop()
        return got

    check(expected, asyncio.run(run()))


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(shared_broker, topic_name, codec) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    bs = shared_broker.bootstrap
    create_topic(bs, topic_name)
    expected = records("kp" + codec)
    prod = KafkaProducer(bootstrap_servers=bs, compression_type=None if codec == "none" else codec)
    for part, k, v, h, ts in expected:
        prod.send(topic_name, key=k, value=v, partition=part, headers=h, timestamp_ms=ts)
    prod.flush(30)
    prod.close()
    cons = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, consumer_timeout_ms=5000)
    cons.assign([KTP(topic_name, p) for p in range(PARTITIONS)])
    for p in range(PARTITIONS):
        cons.seek(KTP(topic_name, p), 0)
    got: dict[int, list] = {}
    for m in cons:
        got.setdefault(m.partition, []).append((m.offset, m.key, m.value, list(m.headers), m.timestamp))
        if sum(map(len, got.values())) == N:
            break
    cons.close()
    check(expected, got)


def test_clients_read_each_others_records(shared_broker, topic_name) -> None:
    """librdkafka writes, kafka-python reads; kafka-python writes, librdkafka reads."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    bs = shared_broker.bootstrap
    create_topic(bs, topic_name, 1)
    p = Producer({"bootstrap.servers": bs, **QUIET})
    p.produce(topic_name, key=b"from-rdkafka", value=b"1", partition=0)
    p.flush(10)
    kp = KafkaProducer(bootstrap_servers=bs)
    kp.send(topic_name, key=b"from-kafka-python", value=b"2", partition=0)
    kp.flush(10)
    kp.close()
    cons = KafkaConsumer(bootstrap_servers=bs, consumer_timeout_ms=3000)
    cons.assign([KTP(topic_name, 0)])
    cons.seek(KTP(topic_name, 0), 0)
    assert [(m.offset, m.key) for m in cons] == [(0, b"from-rdkafka"), (1, b"from-kafka-python")]
    cons.close()
    c = Consumer({"bootstrap.servers": bs, "group.id": "x", **QUIET})
    c.assign([TopicPartition(topic_name, 0, 0)])
    seen = []
    deadline = time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen.append(m.key())
    c.close()
    assert seen == [b"from-rdkafka", b"from-kafka-python"]


def test_admin_create_describe_delete(shared_broker, topic_name) -> None:
    from confluent_kafka.admin import ConfigResource

    bs = shared_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs, **QUIET})
    fut = admin.create_topics([NewTopic(topic_name, 2, 1, config={"retention.ms": "3600000"})])[topic_name]
    fut.result(15)
    md = admin.list_topics(topic_name, timeout=10)
    assert len(md.topics[topic_name].partitions) == 2
    # already exists
    with pytest.raises(Exception) as e:
        admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(15)
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    # bad config value
    with pytest.raises(Exception) as e:
        admin.create_topics([NewTopic(topic_name + "-bad", 1, 1, config={"retention.ms": "soon"})])[
            topic_name + "-bad"
        ].result(15)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    # replication factor 3 cannot be met by one node
    with pytest.raises(Exception) as e:
        admin.create_topics([NewTopic(topic_name + "-rf", 1, 3)])[topic_name + "-rf"].result(15)
    assert e.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
    # configs
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    configs = admin.describe_configs([res])[res].result(15)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"
    # more partitions
    admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(15)
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 4
    # delete
    admin.delete_topics([topic_name])[topic_name].result(15)
    deadline = time.monotonic() + 10
    while topic_name in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_a_topic_with_a_249_character_name_deletes_and_comes_back_empty(shared_broker) -> None:
    """#28: '<dir>.<32 hex>-delete' of a 249-character topic is 289 bytes, over the 255 a path
    component may have; the rename failed, the directory stayed, and re-creating the topic
    brought the deleted records back. The deleted directory's name is cut as Kafka cuts it."""
    name = "long-" + "x" * 244
    assert len(name) == 249
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "log_level": 0})
    for i in range(5):
        p.produce(name, value=b"old-%d" % i)
    assert p.flush(15) == 0
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "long-name", "log_level": 0})
    try:
        assert c.get_watermark_offsets(TopicPartition(name, 0), timeout=10) == (0, 5)
        admin.delete_topics([name])[name].result(15)
        deadline = time.monotonic() + 10
        while name in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers = [d.name for d in shared_broker.data_dir.iterdir() if d.name.startswith("long-x")]
        assert leftovers == [], leftovers
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                lo_hi = c.get_watermark_offsets(TopicPartition(name, 0), timeout=5)
                break
            except Exception:  # noqa: BLE001 - metadata of the new topic not there yet
                time.sleep(0.1)
        assert lo_hi == (0, 0)  # empty: nothing of the deleted topic came back
    finally:
        c.close()


@pytest.mark.parametrize("internal", ["__consumer_offsets", "__share_group_state"])
def test_partitions_are_not_added_to_internal_topics(broker_factory, internal) -> None:
    """Kafka would add them, and every group hashed onto a different partition then loses its
    committed offsets at the next start; Shoal answers POLICY_VIOLATION and changes nothing."""
    b = broker_factory("offsets.topic.num.partitions=2", "share.coordinator.state.topic.num.partitions=2").start()
    create_topic(b.bootstrap, "orders", 1)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "keeper", "log_level": 0})
    c.commit(offsets=[TopicPartition("orders", 0, 7)], asynchronous=False)
    c.close()
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
    admin.list_topics(internal, timeout=10)  # exists once a group used the coordinator
    with pytest.raises(Exception) as e:
        admin.create_partitions([NewPartitions(internal, 8)])[internal].result(15)
    assert e.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert len(admin.list_topics(internal, timeout=10).topics[internal].partitions) == 2
    b.stop()
    b.start()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "keeper", "log_level": 0})
    try:
        assert c.committed([TopicPartition("orders", 0)], timeout=15)[0].offset == 7
    finally:
        c.close()
