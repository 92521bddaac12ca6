"""AsyncShareAcquirer against a real broker: ranges instead of records, acknowledged by range.

Records are produced by librdkafka; the broker's view (what another member
of the group gets, the group's persisted start offset and lag) judges what
the acquirer's acknowledgements did.
"""

from __future__ import annotations

import time

import pytest

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import ConfigError, IllegalStateError
from shoal.client.share.acquirer import AcknowledgeType, AcquiredRange, AsyncShareAcquirer
from shoal.client.share.consumer import AsyncShareConsumer
from tests.support.brokers import InProcessBroker
from tests.support.share_clients import FAST, acknowledged_up_to, poll_until, produce, setup

pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("client-acquirer") / "data", FAST).start()
    yield b
    b.stop()


def acquirer(broker, group: str, **cfg) -> AsyncShareAcquirer:
    return AsyncShareAcquirer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}, **cfg
    )


async def acquire(a: AsyncShareAcquirer, want: int, timeout: float = 20.0) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    deadline = time.monotonic() + timeout
    while sum(r.size for r in out) < want and time.monotonic() < deadline:
        out += await a.poll(200)
    return out


def offsets(ranges: list[AcquiredRange]) -> list[tuple[int, int]]:
    return sorted((r.partition, o) for r in ranges for o in range(r.first, r.last + 1))


def test_only_explicit_mode_and_no_deserializers() -> None:
    base = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}
    with pytest.raises(ConfigError) as e:
        AsyncShareAcquirer(base)
    assert e.value.key == "share.acknowledgement.mode"
    with pytest.raises(ConfigError) as e:
        AsyncShareAcquirer({**base, "share.acknowledgement.mode": "explicit", "value.deserializer": bytes.decode})
    assert e.value.key == "value.deserializer"


async def test_ranges_cover_every_record_once_and_accepting_them_settles_the_group(broker) -> None:
    setup(broker, "acq-all", "g-acq-all", partitions=2)
    produce(broker.bootstrap, "acq-all", 400)
    async with acquirer(broker, "g-acq-all") as a:
        a.subscribe(["acq-all"])
        got = await acquire(a, 400)
        # A few ranges, not 400 objects: the records were never decoded.
        assert len(got) <= 8, got
        assert {r.delivery_count for r in got} == {1}
        assert all(r.acquisition_lock_deadline is not None for r in got)
        assert len(offsets(got)) == 400 and len(set(offsets(got))) == 400
        with pytest.raises(IllegalStateError, match="explicit"):
            await a.poll(100)
        for r in got:
            a.acknowledge(r, AcknowledgeType.ACCEPT)
        with pytest.raises(IllegalStateError, match="already acknowledged"):
            a.acknowledge(got[0], AcknowledgeType.ACCEPT)
        results = await a.commit_sync()
        assert set(results.values()) == {None}
        with pytest.raises(IllegalStateError, match="cannot be acknowledged"):
            a.acknowledge(got[0], AcknowledgeType.ACCEPT)  # settled: no longer this consumer's
        assert await acquire(a, 1, timeout=1.5) == []
    assert sum(lag for _, lag in acknowledged_up_to(broker.port, "g-acq-all")) == 0


async def test_pieces_of_a_range_released_come_back_counted_twice(broker) -> None:
    setup(broker, "acq-pieces", "g-acq-pieces")
    produce(broker.bootstrap, "acq-pieces", 10, partition=0)
    async with acquirer(broker, "g-acq-pieces") as a:
        a.subscribe(["acq-pieces"])
        got = await acquire(a, 10)
        assert offsets(got) == [(0, o) for o in range(10)]
        whole = got[0] if len(got) == 1 else None
        assert whole is not None and (whole.first, whole.last) == (0, 9)
        # Cut it in three: accept the ends, release the middle.
        head, rest = whole.split(3)
        middle, tail = rest.split(4)
        with pytest.raises(IllegalStateError, match="cannot be acknowledged"):
            a.acknowledge(AcquiredRange("acq-pieces", 0, 8, 12, 1))  # past what was delivered
        a.acknowledge(head, AcknowledgeType.ACCEPT)
        a.acknowledge(middle, AcknowledgeType.RELEASE)
        a.acknowledge(tail, AcknowledgeType.ACCEPT)
        assert await a.commit_sync() == {TopicPartition("acq-pieces", 0): None}
        again = await acquire(a, 4)
        assert offsets(again) == [(0, o) for o in range(3, 7)]
        assert {r.delivery_count for r in again} == {2}
        for r in again:
            a.acknowledge(r, AcknowledgeType.RELEASE)
        await a.commit_sync()
    # A record consumer of the same group gets what was released, decoded.
    async with AsyncShareConsumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "g-acq-pieces"}, share_acknowledgement_mode="explicit"
    ) as sc:
        sc.subscribe(["acq-pieces"])
        recs = await poll_until(sc, 4, ack=AcknowledgeType.ACCEPT)
        await sc.commit_sync()
    assert sorted((r.offset, r.value, r.delivery_count) for r in recs) == [
        (o, f"v{o}".encode(), 3) for o in range(3, 7)
    ]


async def test_renew_keeps_ranges_past_their_lock_and_close_sends_their_release(broker) -> None:
    setup(broker, "acq-renew", "g-acq-renew", share_record_lock_duration_ms="1500")
    produce(broker.bootstrap, "acq-renew", 5, partition=0)
    holder = acquirer(broker, "g-acq-renew")
    other = AsyncShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-acq-renew"})
    async with other:
        async with holder:
            holder.subscribe(["acq-renew"])
            held = await acquire(holder, 5)
            first_deadline = held[0].acquisition_lock_deadline
            other.subscribe(["acq-renew"])
            started = time.monotonic()
            stolen: list = []
            while time.monotonic() - started < 4.0:  # well past the 1.5 s lock
                for r in held:
                    holder.acknowledge(r, AcknowledgeType.RENEW)
                back = await holder.poll(2000)
                assert [id(r) for r in back] == [id(r) for r in held]  # the same ranges come back
                stolen += await other.poll(300)
            assert stolen == []
            assert held[0].acquisition_lock_deadline > first_deadline + 1.0
            for r in held:
                holder.acknowledge(r, AcknowledgeType.RELEASE)
        # close() sent the RELEASE on the session's final request: the records come back at once
        got = await poll_until(other, 5, timeout=10)
    assert sorted(r.offset for r in got) == list(range(5))
    assert {r.delivery_count for r in got} == {2}
