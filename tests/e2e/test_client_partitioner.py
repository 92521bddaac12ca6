"""Partition choice: Kafka's murmur2 (golden values from Kafka's own tests), the
sticky partitioner for null keys, and — over a real broker — the same partition
for every key as confluent-kafka's Producer with ``murmur2_random`` / ``murmur2``.
"""

from __future__ import annotations

import itertools
import random

import pytest
from confluent_kafka import Producer

from shoal.client.producer.partitioner import Partitioner, key_partition, murmur2
from shoal.client.producer.producer import AsyncProducer
from tests.support.clients import QUIET, create_topic

# Apache Kafka's UtilsTest.testMurmur2, plus short keys checked against Utils.murmur2 elsewhere.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
    b"": 275646681,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert murmur2(bytearray(key)) == expected and murmur2(memoryview(key)) == expected


def test_key_partition_is_to_positive_modulo() -> None:
    # toPositive(-790332482) = 1357151166
    assert key_partition(b"foobar", 50) == 1357151166 % 50
    assert all(0 <= key_partition(bytes([i % 256]) * i, 7) < 7 for i in range(300))


def _never_open(topic: str, partition: int, size: int) -> bool:
    return False


def test_null_keys_stick_to_one_partition_until_a_batch_worth_went_there() -> None:
    p = Partitioner(batch_size=1000, rng=random.Random(3))
    open_batch = {"room": True}
    chosen = [p.partition("t", None, 6, 100, lambda t: range(6), lambda t, q, s: open_batch["room"]) for _ in range(10)]
    assert len(set(chosen)) == 1  # 1000 bytes went there
    # the open batch still has room: stay (no half-empty batch is abandoned)
    assert p.partition("t", None, 6, 100, lambda t: range(6), lambda t, q, s: True) == chosen[0]
    # a new batch would be needed: draw again, among partitions with a leader only
    seen = set()
    for _ in range(200):
        for _ in range(11):
            seen.add(p.partition("t", None, 6, 100, lambda t: [1, 4], _never_open))
    assert seen <= {1, 4, chosen[0]} and {1, 4} <= seen


def test_sticky_state_is_per_topic_and_falls_back_to_all_partitions() -> None:
    p = Partitioner(batch_size=10, rng=random.Random(5))
    a = p.partition("a", None, 3, 1, lambda t: [], _never_open)
    assert 0 <= a < 3 and p.sticky_partition("a") == a and p.sticky_partition("b") is None


def test_strategies() -> None:
    rnd = random.Random(9)
    m = Partitioner("murmur2", rng=rnd)
    assert m.partition("t", b"foobar", 50, 10, lambda t: [], _never_open) == key_partition(b"foobar", 50)
    assert {m.partition("t", None, 50, 10, lambda t: [], _never_open) for _ in range(50)} == {key_partition(b"", 50)}
    r = Partitioner("random", rng=rnd)
    assert len({r.partition("t", b"same", 50, 10, lambda t: [], _never_open) for _ in range(200)}) > 10
    ignore = Partitioner("murmur2_random", ignore_keys=True, batch_size=100, rng=rnd)
    firsts = {ignore.partition("t", b"k%d" % i, 50, 10, lambda t: range(50), _never_open) for i in range(10)}
    assert len(firsts) == 1  # sticky, whatever the key
    with pytest.raises(ValueError):
        Partitioner("consistent")


def _confluent_partitions(bootstrap: str, topic: str, keys: list[bytes | None], partitioner: str) -> list[int]:
    got: dict[int, int] = {}
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": partitioner, "linger.ms": 5, **QUIET})
    for i, key in enumerate(keys):
        p.produce(topic, value=b"%d" % i, key=key, on_delivery=lambda e, m, i=i: got.__setitem__(i, m.partition()))
    assert p.flush(30) == 0
    return [got[i] for i in range(len(keys))]


async def test_keyed_records_land_where_confluent_puts_them(shared_broker, topic_name) -> None:
    create_topic(shared_broker.bootstrap, topic_name, 7)
    keys = [b"user-%d" % i for i in range(300)] + [k for k in KAFKA_VECTORS if k] + [bytes(range(i)) for i in range(40)]
    theirs = _confluent_partitions(shared_broker.bootstrap, topic_name, keys, "murmur2_random")
    async with AsyncProducer(bootstrap_servers=shared_broker.bootstrap, linger_ms=5) as p:
        futs = [await p.send(topic_name, b"%d" % i, key=k) for i, k in enumerate(keys)]
        ours = [(await f).partition for f in futs]
    assert ours == theirs
    assert ours == [key_partition(k, 7) for k in keys]
    assert len(set(ours)) == 7


async def test_murmur2_partitioner_puts_null_keys_where_librdkafka_does(shared_broker, topic_name) -> None:
    create_topic(shared_broker.bootstrap, topic_name, 5)
    keys: list[bytes | None] = [None, None, b"a", b"bb", None]
    theirs = _confluent_partitions(shared_broker.bootstrap, topic_name, keys, "murmur2")
    async with AsyncProducer(bootstrap_servers=shared_broker.bootstrap, partitioner="murmur2") as p:
        ours = [(await p.send_and_wait(topic_name, b"x", key=k)).partition for k in keys]
    assert ours == theirs


async def test_null_keys_fill_batches_one_partition_at_a_time(shared_broker, topic_name) -> None:
    create_topic(shared_broker.bootstrap, topic_name, 4)
    async with AsyncProducer(bootstrap_servers=shared_broker.bootstrap, linger_ms=5) as p:
        futs = [await p.send(topic_name, bytes(200)) for _ in range(3000)]
        parts = [(await f).partition for f in futs]
    runs = [1]
    for a, b in itertools.pairwise(parts):
        if a == b:
            runs[-1] += 1
        else:
            runs.append(1)
    assert len(set(parts)) >= 3  # spread over the topic ...
    # ... in runs of at least a batch.size worth (16384 / 220 bytes per record)
    assert min(runs[:-1]) >= 16384 // 220
