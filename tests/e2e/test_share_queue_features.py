"""Shoal's two queue features beyond Kafka, end to end with AsyncShareConsumer against a real
broker: redelivery back-off (a released record is not delivered again before its back-off) and
key-ordered delivery (8 members on one partition with 100 keys never hold two records of one key
at once, and accept each key's records in offset order). Both across a broker restart."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from shoal.client.share.consumer import AcknowledgeType, AsyncShareConsumer
from tests.support.brokers import InProcessBroker
from tests.support.share_clients import FAST, acknowledged_up_to, poll_until, setup

confluent_kafka = pytest.importorskip("confluent_kafka")


def consumer(b, group: str, **kw) -> AsyncShareConsumer:
    return AsyncShareConsumer(
        {"bootstrap.servers": b.bootstrap, "group.id": group},
        share_acknowledgement_mode="explicit",
        reconnect_backoff_max_ms=300,
        retry_backoff_max_ms=300,
        **kw,
    )


def produce_keyed(bootstrap: str, topic: str, keys: list[bytes | None]) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 20})
    for i, k in enumerate(keys):
        p.produce(topic, key=k, value=b"v%d" % i, partition=0)
    assert p.flush(10) == 0


async def released_then_redelivered(sc: AsyncShareConsumer, want: int) -> tuple[float, list]:
    """Release everything delivered, then wait for it to come back: (seconds it took, records)."""
    got = await poll_until(sc, want, ack=AcknowledgeType.RELEASE)
    assert len(got) == want
    await sc.commit_sync(10_000)
    released = time.monotonic()
    again = await poll_until(sc, want, timeout=30)
    return time.monotonic() - released, again


async def test_released_records_wait_for_their_backoff_also_after_a_restart(broker_factory) -> None:
    b = broker_factory(*FAST).start()
    topic, group = "q-backoff", "g-q-backoff"
    setup(
        b,
        topic,
        group,
        shoal_share_redelivery_backoff_ms="1500",
        shoal_share_redelivery_backoff_max_ms="2500",
        shoal_share_redelivery_backoff_multiplier="2.0",
        share_delivery_count_limit="10",
    )
    produce_keyed(b.bootstrap, topic, [None] * 5)
    sc = consumer(b, group)
    await sc.start()
    sc.subscribe([topic])
    try:
        waited, again = await released_then_redelivered(sc, 5)  # first failure: 1.5 s
        assert 1.45 <= waited < 4, waited
        assert sorted((r.offset, r.delivery_count) for r in again) == [(o, 2) for o in range(5)]
        for r in again:
            sc.acknowledge(r, AcknowledgeType.RELEASE)
        await sc.commit_sync(10_000)
        released = time.monotonic()
        third = await poll_until(sc, 5, timeout=30)  # second failure: 3 s, capped at 2.5 s
        assert 2.45 <= time.monotonic() - released < 5
        for r in third:
            sc.acknowledge(r, AcknowledgeType.RELEASE)
        await sc.commit_sync(10_000)
        await asyncio.to_thread(b.stop)
        await asyncio.to_thread(b.start)
        loaded = time.monotonic()
        fourth = await poll_until(sc, 5, timeout=30)
        # the delivery count survived; the back-off (2.5 s) restarted when the partition loaded
        assert sorted((r.offset, r.delivery_count) for r in fourth) == [(o, 4) for o in range(5)]
        assert time.monotonic() - loaded >= 2.45
        for r in fourth:
            sc.acknowledge(r, AcknowledgeType.ACCEPT)
        await sc.commit_sync(10_000)
    finally:
        await sc.close()
    assert acknowledged_up_to(b.port, group) == [(5, 0)]


@pytest.fixture
def ordered_broker(tmp_path):
    b = InProcessBroker(tmp_path / "data", FAST).start()
    yield b
    b.stop()


async def test_eight_members_100_keys_one_record_per_key_in_flight_in_offset_order(ordered_broker) -> None:
    b = ordered_broker
    topic, group = "q-keys", "g-q-keys"
    setup(b, topic, group, shoal_share_key_ordering="true")
    n_keys, per_key = 100, 12
    keys = [b"k%d" % (i % n_keys) for i in range(n_keys * per_key)]
    rng = random.Random(7)
    rng.shuffle(keys)
    keys += [None] * 50
    produce_keyed(b.bootstrap, topic, keys)
    offsets_of: dict[bytes, list[int]] = {}
    for o, k in enumerate(keys):
        if k is not None:
            offsets_of.setdefault(k, []).append(o)
    holder: dict[bytes, tuple[int, int]] = {}  # key -> (member, offset) delivered and not yet acknowledged
    accepted: dict[bytes, list[int]] = {}
    overlaps: list = []
    done = asyncio.Event()
    total = len(keys)
    accepted_count = [0]

    async def member(i: int) -> None:
        sc = consumer(b, group, max_poll_records=rng.choice([3, 7, 15]))
        await sc.start()
        sc.subscribe([topic])
        try:
            while not done.is_set():
                got = await sc.poll(100)
                for r in got:
                    if r.key is not None:
                        if r.key in holder:
                            overlaps.append((r.key, holder[r.key], (i, r.offset)))
                        holder[r.key] = (i, r.offset)
                await asyncio.sleep(rng.random() * 0.02)  # members hold their records a while
                for r in got:
                    release = rng.random() < 0.05 and r.delivery_count < 3
                    if r.key is not None:
                        if holder.get(r.key) == (i, r.offset):
                            del holder[r.key]
                        if not release:
                            accepted.setdefault(r.key, []).append(r.offset)
                    if not release:
                        accepted_count[0] += 1
                    sc.acknowledge(r, AcknowledgeType.RELEASE if release else AcknowledgeType.ACCEPT)
                if accepted_count[0] >= total:
                    done.set()
            await sc.commit_sync(10_000)
        finally:
            await sc.close()

    tasks = [asyncio.create_task(member(i)) for i in range(8)]
    try:
        await asyncio.wait_for(done.wait(), 90)
    finally:
        done.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert overlaps == [], overlaps[:5]
    assert accepted == offsets_of  # every key's records, each once, in offset order
    deadline = time.monotonic() + 10
    while acknowledged_up_to(b.port, group) != [(total, 0)] and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert acknowledged_up_to(b.port, group) == [(total, 0)]


async def test_key_order_is_rebuilt_after_a_restart(broker_factory) -> None:
    b = broker_factory(*FAST).start()
    topic, group = "q-keys-restart", "g-q-keys-restart"
    setup(b, topic, group, shoal_share_key_ordering="true")
    produce_keyed(b.bootstrap, topic, [b"a", b"b", b"a", None, b"b"])
    sc = consumer(b, group)
    await sc.start()
    sc.subscribe([topic])
    try:
        first = await poll_until(sc, 3)
        assert sorted(r.offset for r in first) == [0, 1, 3]
        for r in first:  # a@0 released (persisted AVAILABLE), b@1 and the null key accepted
            sc.acknowledge(r, AcknowledgeType.RELEASE if r.offset == 0 else AcknowledgeType.ACCEPT)
        await sc.commit_sync(10_000)
        await asyncio.to_thread(b.stop)
        await asyncio.to_thread(b.start)
        second = await poll_until(sc, 2)
        # a@0 comes back before a@2, which must wait; b@4 is free
        assert sorted((r.offset, r.delivery_count) for r in second) == [(0, 2), (4, 1)]
        other = consumer(b, group)  # while a@0 is held, nobody gets a@2
        await other.start()
        other.subscribe([topic])
        try:
            assert await poll_until(other, 1, timeout=2.0) == []
        finally:
            await other.close()
        for r in second:
            sc.acknowledge(r, AcknowledgeType.ACCEPT)
        await sc.commit_sync(10_000)
        third = await poll_until(sc, 1)
        assert [r.offset for r in third] == [2]
        sc.acknowledge(third[0], AcknowledgeType.ACCEPT)
        await sc.commit_sync(10_000)
    finally:
        await sc.close()
    assert acknowledged_up_to(b.port, group) == [(5, 0)]
