"""AsyncShareConsumer against a real broker: records shared exactly once,
RELEASE / REJECT / RENEW, the acknowledgement modes and their misuse,
per-partition commit results and callbacks, close(), record limits, the poll
timer, and working side by side with librdkafka's ShareConsumer in one group.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter

import pytest

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import (
    BrokerResponseError,
    ClientClosedError,
    ConfigError,
    IllegalStateError,
    RecordDeserializationError,
)
from shoal.client.share.consumer import AcknowledgeType, AsyncShareConsumer
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import InProcessBroker, RawClient
from tests.support.share_clients import FAST, acknowledged_up_to, poll_until, produce, setup

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("client-share") / "data", FAST).start()
    yield b
    b.stop()


def consumer(broker, group: str, **cfg) -> AsyncShareConsumer:
    return AsyncShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group}, **cfg)


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({}, "group.id"),
        ({"group.id": ""}, "group.id"),
        ({"group.id": "g", "share.acknowledgement.mode": "manual"}, "share.acknowledgement.mode"),
        ({"group.id": "g", "share.acquire.mode": "greedy"}, "share.acquire.mode"),
        ({"group.id": "g", "max.poll.records": 0}, "max.poll.records"),
        ({"group.id": "g", "enable.auto.commit": True}, "enable.auto.commit"),
    ],
)
def test_bad_configuration_fails_at_construction_naming_the_key(config, key) -> None:
    with pytest.raises(ConfigError) as e:
        AsyncShareConsumer({"bootstrap.servers": "127.0.0.1:1", **config})
    assert e.value.key == key


async def test_misuse_of_the_consumer_object_raises(broker) -> None:
    sc = consumer(broker, "g-misuse-obj")
    with pytest.raises(IllegalStateError, match="not subscribed"):
        await sc.poll(10)
    await sc.start()
    await sc.close()
    with pytest.raises(ClientClosedError):
        await sc.poll(10)
    with pytest.raises(ClientClosedError):
        sc.subscribe(["t"])
    await sc.close()  # twice is fine


async def test_four_consumers_on_one_partition_get_every_record_exactly_once(broker) -> None:
    setup(broker, "cs-four", "g-four")
    n = 3000
    seen: Counter = Counter()
    per_member: Counter = Counter()
    counts: Counter = Counter()
    stop = asyncio.Event()
    consumers = [consumer(broker, "g-four", max_poll_records=100) for _ in range(4)]

    async def run(i: int, sc: AsyncShareConsumer) -> None:
        while not stop.is_set():
            for r in await sc.poll(100):
                seen[r.offset] += 1
                per_member[i] += 1
                counts[r.delivery_count] += 1
            await asyncio.sleep(0.005 * (i + 1))  # applications of different speeds

    for sc in consumers:
        await sc.start()
        sc.subscribe(["cs-four"])
    try:
        tasks = [asyncio.create_task(run(i, sc)) for i, sc in enumerate(consumers)]
        deadline = time.monotonic() + 20
        while not all(sc.assignment() for sc in consumers) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for chunk in range(10):
            await asyncio.to_thread(produce, broker.bootstrap, "cs-four", n // 10, None, chunk * (n // 10))
        deadline = time.monotonic() + 40
        while sum(seen.values()) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # anything accepted must not come back
        stop.set()
        await asyncio.gather(*tasks)
        results = [await sc.commit_sync(10_000) for sc in consumers]
    finally:
        stop.set()
        for sc in consumers:
            await sc.close()
    assert sorted(seen) == list(range(n))
    assert set(seen.values()) == {1}, [o for o, k in seen.items() if k > 1][:10]
    assert counts == {1: n}
    assert sum(1 for k in per_member.values() if k) >= 3, per_member  # the work was shared
    assert all(v is None for r in results for v in r.values())
    assert acknowledged_up_to(broker.port, "g-four") == [(n, 0)]  # every record durably accepted


async def test_release_comes_back_counted_twice_and_reject_never(broker) -> None:
    setup(broker, "cs-rel", "g-rel")
    produce(broker.bootstrap, "cs-rel", 6)
    async with consumer(broker, "g-rel", share_acknowledgement_mode="explicit") as sc:
        sc.subscribe(["cs-rel"])
        first = await poll_until(sc, 6)
        assert sorted(r.offset for r in first) == list(range(6))
        assert {r.delivery_count for r in first} == {1}
        for r in first:
            sc.acknowledge(r, AcknowledgeType.RELEASE if r.offset < 3 else AcknowledgeType.REJECT)
        assert await sc.commit_sync() == {TopicPartition("cs-rel", 0): None}
        again = await poll_until(sc, 3, ack=AcknowledgeType.ACCEPT)
        assert sorted(r.offset for r in again) == [0, 1, 2]
        assert {r.delivery_count for r in again} == {2}
        assert await sc.commit_sync() == {TopicPartition("cs-rel", 0): None}
        assert await poll_until(sc, 1, timeout=1.5) == []  # rejected and accepted records stay gone


async def test_released_records_can_go_to_another_member(broker) -> None:
    setup(broker, "cs-rel2", "g-rel2")
    produce(broker.bootstrap, "cs-rel2", 10)
    # a keeps 5 of its 10 records buffered, so it fetches nothing while b waits for the released ones
    a = consumer(broker, "g-rel2", share_acknowledgement_mode="explicit", max_poll_records=5)
    b = consumer(broker, "g-rel2")
    async with a, b:
        a.subscribe(["cs-rel2"])
        held = await poll_until(a, 5)
        assert len(held) == 5
        b.subscribe(["cs-rel2"])
        assert await poll_until(b, 1, timeout=1.5) == []  # a holds everything
        for r in held:
            a.acknowledge(r, AcknowledgeType.RELEASE)
        await a.commit_sync()
        got = await poll_until(b, 5, timeout=20)
    assert sorted(r.offset for r in got) == sorted(r.offset for r in held)
    assert {r.delivery_count for r in got} == {2}


async def test_renew_keeps_records_past_their_lock(broker) -> None:
    setup(broker, "cs-renew", "g-renew", share_record_lock_duration_ms="1500")
    produce(broker.bootstrap, "cs-renew", 3)
    holder = consumer(broker, "g-renew", share_acknowledgement_mode="explicit")
    other = consumer(broker, "g-renew")
    async with holder, other:
        holder.subscribe(["cs-renew"])
        held = await poll_until(holder, 3)
        assert sorted(r.offset for r in held) == [0, 1, 2]
        started = time.monotonic()
        first_deadline = held[0].acquisition_lock_deadline
        assert first_deadline is not None and 0.5 < first_deadline - started <= 1.6
        assert holder.acquisition_lock_timeout_ms == 1500
        other.subscribe(["cs-renew"])
        stolen: list = []
        while time.monotonic() - started < 4.0:  # well past the 1.5 s lock
            for r in held:
                holder.acknowledge(r, AcknowledgeType.RENEW)
            back = await holder.poll(2000)  # the renewed records come back, locks restarted
            assert sorted(r.offset for r in back) == [0, 1, 2]
            assert all(x is y for x, y in zip(sorted(back, key=lambda r: r.offset), held, strict=True))
            assert {r.delivery_count for r in back} == {1}
            stolen += await other.poll(300)
        assert stolen == []
        assert held[0].acquisition_lock_deadline > first_deadline + 1.0
        for r in held:
            holder.acknowledge(r, AcknowledgeType.ACCEPT)
        assert await holder.commit_sync() == {TopicPartition("cs-renew", 0): None}
        assert await poll_until(other, 1, timeout=2.0) == []


async def test_explicit_mode_refuses_to_poll_with_unacknowledged_records(broker) -> None:
    setup(broker, "cs-expl", "g-expl")
    produce(broker.bootstrap, "cs-expl", 4)
    async with consumer(broker, "g-expl", share_acknowledgement_mode="explicit") as sc:
        sc.subscribe(["cs-expl"])
        got = await poll_until(sc, 4)
        for r in got[:-1]:
            sc.acknowledge(r)
        with pytest.raises(IllegalStateError, match="explicit"):
            await sc.poll(100)
        sc.acknowledge(got[-1])
        assert await sc.poll(300) == []


async def test_acknowledging_twice_or_a_foreign_record_raises(broker) -> None:
    setup(broker, "cs-misuse", "g-misuse", 2)
    produce(broker.bootstrap, "cs-misuse", 3, partition=0)
    produce(broker.bootstrap, "cs-misuse", 3, partition=1)
    a = consumer(broker, "g-misuse", share_acknowledgement_mode="explicit")
    b = consumer(broker, "g-misuse", share_acknowledgement_mode="explicit")
    async with a, b:
        a.subscribe(["cs-misuse"])
        b.subscribe(["cs-misuse"])
        got_a: list = []
        got_b: list = []
        deadline = time.monotonic() + 20
        while (not got_a or not got_b) and time.monotonic() < deadline:
            # explicit mode: a consumer that holds unacknowledged records must not poll again
            if not got_a:
                got_a += await a.poll(100)
            if not got_b:
                got_b += await b.poll(100)
        assert got_a and got_b
        a.acknowledge(got_a[0])
        with pytest.raises(IllegalStateError, match="already acknowledged"):
            a.acknowledge(got_a[0], AcknowledgeType.REJECT)
        with pytest.raises(IllegalStateError, match="not returned by this consumer"):
            a.acknowledge(got_b[0])  # b's record
        for r in got_a[1:]:
            a.acknowledge(r)
        for r in got_b:
            b.acknowledge(r)
        assert all(v is None for v in (await a.commit_sync()).values())
        with pytest.raises(IllegalStateError):
            a.acknowledge(got_a[1])  # from a poll already settled


async def test_implicit_records_of_an_earlier_poll_cannot_be_acknowledged(broker) -> None:
    setup(broker, "cs-impl", "g-impl")
    produce(broker.bootstrap, "cs-impl", 4)
    async with consumer(broker, "g-impl", max_poll_records=2) as sc:
        sc.subscribe(["cs-impl"])
        first = await poll_until(sc, 1)
        await sc.poll(100)  # accepts the first poll's records
        with pytest.raises(IllegalStateError):
            sc.acknowledge(first[0])


async def test_commit_results_and_callback_per_partition(broker) -> None:
    setup(broker, "cs-commit", "g-commit", 2)
    produce(broker.bootstrap, "cs-commit", 4, partition=0)
    produce(broker.bootstrap, "cs-commit", 3, partition=1)
    calls: list = []
    async with consumer(broker, "g-commit", share_acknowledgement_mode="explicit") as sc:
        sc.set_acknowledgement_commit_callback(lambda offsets, exc: calls.append((offsets, exc)))
        sc.subscribe(["cs-commit"])
        got = await poll_until(sc, 7)
        for r in got:
            sc.acknowledge(r, AcknowledgeType.ACCEPT if r.offset % 2 == 0 else AcknowledgeType.REJECT)
        result = await sc.commit_sync()
    p0, p1 = TopicPartition("cs-commit", 0), TopicPartition("cs-commit", 1)
    assert result == {p0: None, p1: None}
    by_partition: dict = {}
    for offsets, exc in calls:
        assert exc is None
        for tp, offs in offsets.items():
            by_partition.setdefault(tp, set()).update(offs)
    assert by_partition == {p0: {0, 1, 2, 3}, p1: {0, 1, 2}}


async def test_a_failed_acknowledgement_is_reported_for_its_partition(broker) -> None:
    """The lock runs out and another member takes the records: the late ACCEPT fails with
    INVALID_RECORD_STATE in commit_sync's result and in the callback."""
    setup(broker, "cs-fail", "g-fail", share_record_lock_duration_ms="1000")
    produce(broker.bootstrap, "cs-fail", 3)
    calls: list = []
    tp = TopicPartition("cs-fail", 0)
    # max.poll.records=1 keeps two records buffered, so this consumer fetches nothing meanwhile
    async with consumer(broker, "g-fail", share_acknowledgement_mode="explicit", max_poll_records=1) as sc:
        sc.set_acknowledgement_commit_callback(lambda offsets, exc: calls.append((offsets, exc)))
        sc.subscribe(["cs-fail"])
        (late,) = await poll_until(sc, 1)
        await asyncio.sleep(1.5)
        with RawClient(broker.port) as thief:
            md = thief.call(
                "Metadata", 12, topics=[api_by_name("Metadata").request_class().MetadataRequestTopic(name="cs-fail")]
            )
            tid = md.topics[0].topic_id
            SF = api_by_name("ShareFetch").request_class()
            r = thief.call(
                "ShareFetch", 1, group_id="g-fail", member_id="thief", share_session_epoch=0, max_wait_ms=3000,
                min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10,
                topics=[SF.FetchTopic(topic_id=tid, partitions=[SF.FetchPartition(partition_index=0)])],
                forgotten_topics_data=[],
            )  # fmt: skip
            taken = [
                (a.first_offset, a.last_offset) for t in r.responses for p in t.partitions for a in p.acquired_records
            ]
            assert taken and taken[0][0] == 0
            sc.acknowledge(late)
            result = await sc.commit_sync()
    assert isinstance(result[tp], BrokerResponseError)
    assert result[tp].code == ErrorCode.INVALID_RECORD_STATE
    assert [(o, type(e)) for o, e in calls] == [({tp: {0}}, BrokerResponseError)]


async def test_close_sends_pending_acknowledgements_and_releases_the_rest(broker) -> None:
    setup(broker, "cs-close", "g-close")
    produce(broker.bootstrap, "cs-close", 10)
    sc = consumer(broker, "g-close", share_acknowledgement_mode="explicit")
    await sc.start()
    sc.subscribe(["cs-close"])
    got = await poll_until(sc, 10)
    assert len(got) == 10
    for r in got[:6]:
        sc.acknowledge(r)  # never committed: close() must send them
    await sc.close()
    async with consumer(broker, "g-close") as other:
        other.subscribe(["cs-close"])
        back = await poll_until(other, 4, timeout=15)
        back += await poll_until(other, 1, timeout=1.0)  # and nothing else
    assert sorted(r.offset for r in back) == sorted(r.offset for r in got[6:])


async def test_implicit_close_releases_the_last_poll_unless_committed(broker) -> None:
    """As Kafka's client: implicit acknowledgement happens on the next poll or commit, so close()
    releases the last poll's records; commit_sync before it accepts them."""
    setup(broker, "cs-iclose", "g-iclose")
    produce(broker.bootstrap, "cs-iclose", 4)
    async with consumer(broker, "g-iclose", max_poll_records=2) as sc:
        sc.subscribe(["cs-iclose"])
        first = await poll_until(sc, 2)
        assert await sc.commit_sync() == {TopicPartition("cs-iclose", 0): None}
        second = await poll_until(sc, 2)
    async with consumer(broker, "g-iclose") as other:
        other.subscribe(["cs-iclose"])
        back = await poll_until(other, 2, timeout=10)
        back += await poll_until(other, 1, timeout=1.0)
    assert len(first) == len(second) == 2
    assert sorted(r.offset for r in back) == sorted(r.offset for r in second)


async def test_a_record_the_deserializer_fails_on_is_raised_released_and_finally_archived(broker) -> None:
    setup(broker, "cs-deser", "g-deser", share_delivery_count_limit="2")
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 5})
    for v in (b"1", b"oops", b"3"):
        p.produce("cs-deser", value=v)
    assert p.flush(10) == 0
    raised: list[int] = []
    values: list[int] = []
    async with consumer(broker, "g-deser", value_deserializer=lambda b: int(b)) as sc:
        sc.subscribe(["cs-deser"])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (len(raised) < 2 or len(values) < 2):
            try:
                values += [r.value for r in await sc.poll(200)]
            except RecordDeserializationError as e:
                assert (e.partition, e.offset) == (TopicPartition("cs-deser", 0), 1)
                assert isinstance(e.__cause__, ValueError)
                raised.append(e.offset)
        values += [r.value for r in await poll_until(sc, 1, timeout=1.5)]  # archived now: nothing comes
        await sc.commit_sync()
    assert sorted(values) == [1, 3]
    assert raised == [1, 1]  # delivered twice (the group's limit), then archived


async def test_max_poll_records_in_both_acquire_modes(broker) -> None:
    for mode in ("record_limit", "batch_optimized"):
        topic, group = f"cs-limit-{mode}", f"g-limit-{mode}"
        setup(broker, topic, group)
        produce(broker.bootstrap, topic, 100)
        async with consumer(broker, group, max_poll_records=7, share_acquire_mode=mode) as sc:
            sc.subscribe([topic])
            sizes: list[int] = []
            offsets: list[int] = []
            deadline = time.monotonic() + 20
            while len(offsets) < 100 and time.monotonic() < deadline:
                got = await sc.poll(200)
                if got:
                    sizes.append(len(got))
                    offsets += [r.offset for r in got]
        assert sorted(offsets) == list(range(100)), mode
        assert max(sizes) <= 7, (mode, sizes)


async def test_acknowledgements_held_for_a_fetch_reach_the_broker_without_another_poll(broker) -> None:
    """After a prefetch found nothing the next poll does not prefetch (PrefetchGate), so the
    acknowledgements it makes wait for a fetch to ride on -- but only briefly (ACK_HOLD_S): an
    application busy with that poll's records does not keep them from the broker."""
    topic, group = "cs-ack-hold", "g-ack-hold"
    setup(broker, topic, group)
    produce(broker.bootstrap, topic, 6)
    async with consumer(broker, group, max_poll_records=5) as sc:
        sc.subscribe([topic])
        first = await poll_until(sc, 5)
        assert [r.offset for r in first] == [0, 1, 2, 3, 4]  # the sixth stays buffered
        await asyncio.sleep(0.5)  # the prefetch sent meanwhile finds nothing: the log is read to its end
        second = await sc.poll(1000)  # accepts the first five and hands out the sixth
        assert [r.offset for r in second] == [5]
        deadline = time.monotonic() + 5
        while acknowledged_up_to(broker.port, group)[0][0] != 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert acknowledged_up_to(broker.port, group)[0][0] == 5  # no further poll needed


def _share_fetch(c: RawClient, group: str, member: str, epoch: int) -> int:
    """A ShareFetch naming no partitions for ``member`` from another connection; its error code."""
    r = c.call(
        "ShareFetch", 1, group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=0, min_bytes=1,
        max_bytes=1 << 20, max_records=10, batch_size=10, topics=[], forgotten_topics_data=[],
    )  # fmt: skip
    return r.error_code


def _session_epoch(sc: AsyncShareConsumer) -> int:
    (session,) = [s for s in sc._fetcher._sessions.values() if s.is_open]
    return session.epoch


@pytest.mark.parametrize("meddling", ["out-of-step", "closed"])
async def test_share_session_errors_reopen_the_session(broker, caplog, meddling) -> None:
    """Another connection reopens (INVALID_SHARE_SESSION_EPOCH next) or closes
    (SHARE_SESSION_NOT_FOUND next) this member's share session: the consumer opens a new one and
    carries on. Out of step, the member still holds its records, so its acknowledgements are sent
    again and apply; closed, the broker released them, so they may fail (reported) and the
    records come back -- every record is accepted in the end and nothing accepted comes back."""
    caplog.set_level(logging.DEBUG, logger="shoal.client.share")
    topic, group = f"cs-sess-{meddling}", f"g-sess-{meddling}"
    setup(broker, topic, group)
    produce(broker.bootstrap, topic, 20)
    tp = TopicPartition(topic, 0)
    accepted: Counter = Counter()
    async with consumer(broker, group, share_acknowledgement_mode="explicit", max_poll_records=5) as sc:
        sc.subscribe([topic])
        first = await poll_until(sc, 5)
        ours = _session_epoch(sc)
        with RawClient(broker.port) as meddler:
            if meddling == "out-of-step":
                assert _share_fetch(meddler, group, sc.member_id, 0) == 0  # replaces the session: epoch 1 next
                if ours == 1:
                    assert _share_fetch(meddler, group, sc.member_id, 1) == 0
            else:
                assert _share_fetch(meddler, group, sc.member_id, -1) == 0  # closes it, releasing the records
            for r in first:
                sc.acknowledge(r)
            result = await sc.commit_sync()
            if meddling == "out-of-step":
                assert result == {tp: None}
            else:
                assert result[tp] is None or result[tp].code == ErrorCode.INVALID_RECORD_STATE
            if result[tp] is None:
                accepted.update(r.offset for r in first)
            deadline = time.monotonic() + 20
            while len(accepted) < 20 and time.monotonic() < deadline:
                got = await poll_until(sc, 1, timeout=1.0, ack=AcknowledgeType.ACCEPT)
                if got:
                    assert (await sc.commit_sync()) == {tp: None}
                    accepted.update(r.offset for r in got)
        assert await poll_until(sc, 1, timeout=1.0) == []
    assert sorted(accepted) == list(range(20)) and set(accepted.values()) == {1}
    assert any(r.getMessage().startswith("share session on broker") for r in caplog.records)


async def test_a_member_the_coordinator_forgot_rejoins_and_carries_on(broker, caplog) -> None:
    """Another connection makes the group forget this member (a leave heartbeat in its name): its
    next heartbeat gets UNKNOWN_MEMBER_ID, it rejoins with epoch 0 and keeps consuming."""
    caplog.set_level(logging.DEBUG, logger="shoal.client.share")
    setup(broker, "cs-fenced", "g-fenced")
    produce(broker.bootstrap, "cs-fenced", 10)
    async with consumer(broker, "g-fenced") as sc:
        sc.subscribe(["cs-fenced"])
        got = await poll_until(sc, 10)
        assert await sc.commit_sync() == {TopicPartition("cs-fenced", 0): None}
        with RawClient(broker.port) as c:
            r = c.call(
                "ShareGroupHeartbeat", 1, group_id="g-fenced", member_id=sc.member_id, member_epoch=-1,
                rack_id=None, subscribed_topic_names=None,
            )  # fmt: skip
            assert r.error_code == 0
        assert _members(broker.port, "g-fenced") == 0
        produce(broker.bootstrap, "cs-fenced", 5, start=10)
        deadline = time.monotonic() + 20
        while (len(got) < 15 or _members(broker.port, "g-fenced") != 1) and time.monotonic() < deadline:
            got += await sc.poll(200)
        assert _members(broker.port, "g-fenced") == 1
    assert sorted(r.offset for r in got) == list(range(15))
    assert any(f"error {int(ErrorCode.UNKNOWN_MEMBER_ID)}" in r.getMessage() for r in caplog.records)


async def test_a_rebalance_moves_partitions_without_duplicates(broker) -> None:
    """Alone, a member gets both partitions; when a second joins, each keeps one (members <=
    partitions: no sharing). The revoked partition leaves the first member's share session: while
    only the first member polls, records arriving on the other's partition are not touched by it."""
    setup(broker, "cs-moves", "g-moves", 2)
    for p in (0, 1):
        produce(broker.bootstrap, "cs-moves", 20, partition=p)
    seen: Counter = Counter()
    a, b = consumer(broker, "g-moves", max_poll_records=10), consumer(broker, "g-moves", max_poll_records=10)
    async with a, b:
        a.subscribe(["cs-moves"])
        seen.update((r.partition, r.offset) for r in await poll_until(a, 40))
        assert a.assignment() == {TopicPartition("cs-moves", 0), TopicPartition("cs-moves", 1)}
        b.subscribe(["cs-moves"])
        deadline = time.monotonic() + 20
        while len(a.assignment()) != 1 or len(b.assignment()) != 1 or a.assignment() == b.assignment():
            assert time.monotonic() < deadline, (a.assignment(), b.assignment())
            for sc in (a, b):
                seen.update((r.partition, r.offset) for r in await sc.poll(50))
        (theirs,) = b.assignment()
        # a fetch sent before a heard of the change may still name the partition: let it finish
        seen.update((r.partition, r.offset) for r in await poll_until(a, 100, timeout=0.7))
        polling = asyncio.create_task(poll_until(a, 100, timeout=1.5))  # only a polls meanwhile
        await asyncio.sleep(0.3)
        await asyncio.to_thread(produce, broker.bootstrap, "cs-moves", 10, theirs.partition, 20)
        assert [r for r in await polling if r.partition == theirs.partition] == []
        got = await poll_until(b, 10)
        assert sorted(r.offset for r in got) == list(range(20, 30))
        assert {r.delivery_count for r in got} == {1}  # a never acquired (and released) them
        for sc in (a, b):
            await sc.commit_sync()
    assert sorted(seen) == [(p, o) for p in (0, 1) for o in range(20)]
    assert set(seen.values()) == {1}


def _members(port: int, group: str) -> int:
    with RawClient(port) as c:
        d = c.call("ShareGroupDescribe", 1, group_ids=[group], include_authorized_operations=False).groups[0]
    return len(d.members)


async def test_a_consumer_that_stops_polling_leaves_and_rejoins_on_the_next_poll(broker) -> None:
    setup(broker, "cs-stall", "g-stall")
    produce(broker.bootstrap, "cs-stall", 3)
    async with consumer(broker, "g-stall", max_poll_interval_ms=1500) as sc:
        sc.subscribe(["cs-stall"])
        assert len(await poll_until(sc, 3)) == 3
        assert _members(broker.port, "g-stall") == 1
        await asyncio.sleep(3.0)  # not polling
        assert _members(broker.port, "g-stall") == 0
        assert sc.assignment() == set()
        produce(broker.bootstrap, "cs-stall", 2, start=3)
        again = await poll_until(sc, 2, timeout=15)
        assert _members(broker.port, "g-stall") == 1
    # The first three were accepted by the later poll, unless the broker had released them when
    # the member left (Shoal does): then that ACCEPT fails and they come back (at least once).
    assert {3, 4} <= {r.offset for r in again} <= {0, 1, 2, 3, 4}


async def test_shares_the_work_with_librdkafka_share_consumer(broker) -> None:
    setup(broker, "cs-mixed", "g-mixed")
    n = 2000
    seen: Counter = Counter()
    theirs: list[int] = []
    stop = threading.Event()
    rk = confluent_kafka.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-mixed", "log_level": 0})
    rk.subscribe(["cs-mixed"])

    def librdkafka() -> None:
        while not stop.is_set():
            for m in rk.poll(0.1):
                if m.error() is None:
                    theirs.append(m.offset())
                    time.sleep(0.0005)  # a slow-ish application

    thread = threading.Thread(target=librdkafka)
    thread.start()
    ours: list[int] = []
    try:
        async with consumer(broker, "g-mixed", max_poll_records=50) as sc:
            sc.subscribe(["cs-mixed"])
            await sc.poll(500)
            for chunk in range(10):  # spread over time so both members are in the group
                await asyncio.to_thread(produce, broker.bootstrap, "cs-mixed", n // 10, None, chunk * (n // 10))
                for _ in range(3):
                    ours += [r.offset for r in await sc.poll(50)]
                    await asyncio.sleep(0.02)
            deadline = time.monotonic() + 30
            while len(ours) + len(theirs) < n and time.monotonic() < deadline:
                ours += [r.offset for r in await sc.poll(100)]
                await asyncio.sleep(0.01)
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                ours += [r.offset for r in await sc.poll(100)]
            await sc.commit_sync()
    finally:
        stop.set()
        thread.join()
        rk.close()
    seen.update(ours)
    seen.update(theirs)
    assert sorted(seen) == list(range(n))
    assert set(seen.values()) == {1}, [o for o, k in seen.items() if k > 1][:10]
    assert ours and theirs, (len(ours), len(theirs))
    assert acknowledged_up_to(broker.port, "g-mixed") == [(n, 0)]
