"""AsyncConsumer without the group machinery: positions, fetching, offsets, decoding.

Sans-IO parts first (subscription state, buffered-fetch draining, transaction
filtering), then a real broker: assign() without a group, seek/position,
offset resets (earliest/latest/none, out of range), commits and committed
offsets, auto commit, and a byte-exact read of what confluent-kafka produced
with every codec.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from shoal.client.consumer.consumer import AsyncConsumer, OffsetAndMetadata, OffsetAndTimestamp
from shoal.client.consumer.fetcher import CompletedFetch, Fetcher, next_fetch_offset
from shoal.client.consumer.subscription_state import SubscriptionState
from shoal.client.core.client_core import ClientCore
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import build_config
from shoal.client.core.errors import (
    ConfigError,
    IllegalStateError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RecordDeserializationError,
)
from shoal.client.core.records import ConsumerRecord, decode_record_set_for
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.records import ControlType, build_batch, build_control_batch

QUIET = {"log_level": 0}
TP = TopicPartition("t", 0)


# -- sans-IO ------------------------------------------------------------------------------


def test_subscribe_and_assign_are_exclusive_and_seek_bumps_the_version() -> None:
    s = SubscriptionState("earliest")
    s.assign_from_user([TP, TopicPartition("t", 1)])
    with pytest.raises(IllegalStateError):
        s.subscribe(["t"])
    st = s.state(TP)
    assert st.position is None and s.needing_position() == [TP, TopicPartition("t", 1)]
    v = st.version
    s.seek(TP, 5)
    assert (st.position, st.fetch_offset, st.version) == (5, 5, v + 1)
    s.request_reset(TP, "latest")
    assert st.position is None and st.reset_to == "latest" and st.version == v + 2
    with pytest.raises(IllegalStateError):
        s.seek(TopicPartition("other", 0), 1)
    s.seek(TopicPartition("t", 1), 7)
    assert s.all_consumed() == {TopicPartition("t", 1): (7, -1)}
    s.unsubscribe()
    assert s.subscribe(["b", "a"]) and s.topics == ("a", "b")
    with pytest.raises(IllegalStateError):
        s.assign_from_user([TP])


def records(tp: TopicPartition, offsets: range) -> list[ConsumerRecord]:
    return [ConsumerRecord(tp.topic, tp.partition, o, 0, 0, None, b"%d" % o) for o in offsets]


def fetcher_with(subs: SubscriptionState) -> Fetcher:
    cfg = build_config("consumer", {"bootstrap.servers": "127.0.0.1:1"})
    return Fetcher(ClientCore(cfg), cfg, subs, None)


def test_drain_hands_out_in_order_and_advances_positions() -> None:
    a, b = TP, TopicPartition("t", 1)
    subs = SubscriptionState("earliest")
    subs.assign_from_user([a, b])
    subs.seek(a, 0)
    subs.seek(b, 10)
    f = fetcher_with(subs)
    va, vb = subs.state(a).version, subs.state(b).version
    # chunk 1 of a ends in a control batch (next offset 6 > last record 4); b's first chunk
    f._completed = deque(
        [
            CompletedFetch(a, va, 0, 6, records=records(a, range(0, 5))),
            CompletedFetch(b, vb, 10, 12, records=records(b, range(10, 12))),
            CompletedFetch(a, va, 6, 8, records=records(a, range(6, 8))),
        ]
    )
    got = f.drain(None, 3)
    assert {tp: [r.offset for r in rs] for tp, rs in got.items()} == {a: [0, 1, 2]}
    assert subs.state(a).position == 3
    got = f.drain(None, 10)
    assert [r.offset for r in got[a]] == [3, 4, 6, 7] and [r.offset for r in got[b]] == [10, 11]
    assert subs.state(a).position == 8 and subs.state(b).position == 12
    # a chunk of control batches only (a transaction marker): nothing to return, the position moves past it
    f._completed = deque([CompletedFetch(a, va, 8, 10, records=[])])
    assert f.drain(None, 10) == {} and subs.state(a).position == 10
    # a seek drops what was fetched for the old position; a paused partition keeps its data
    f._completed = deque([CompletedFetch(a, subs.state(a).version, 8, 9, records=records(a, range(8, 9)))])
    subs.seek(a, 2)
    assert f.drain(None, 10) == {} and not f.has_buffered()
    f._completed = deque([CompletedFetch(b, subs.state(b).version, 12, 13, records=records(b, range(12, 13)))])
    subs.pause([b])
    assert f.drain(None, 10) == {} and f.has_buffered()
    assert f.drain({a}, 10) == {}
    subs.resume([b])
    assert [r.offset for r in f.drain({b}, 10)[b]] == [12]


def test_a_failing_deserializer_stops_at_its_record_and_corrupt_data_raises() -> None:
    subs = SubscriptionState("earliest")
    subs.assign_from_user([TP])
    subs.seek(TP, 0)

    def value(v: bytes) -> int:
        return int(v)  # b"bad" fails

    cfg = build_config("consumer", {"bootstrap.servers": "127.0.0.1:1", "value.deserializer": value})
    f = Fetcher(ClientCore(cfg), cfg, subs, None)
    data = build_batch([(None, v, (), 1) for v in (b"1", b"2", b"bad", b"4")], base_offset=0)
    f._completed = deque([CompletedFetch(TP, subs.state(TP).version, 0, 4, data)])
    assert [r.value for r in f.drain(None, 10)[TP]] == [1, 2]  # what comes before the bad record
    for _ in range(2):  # every poll raises until the application seeks past it
        with pytest.raises(RecordDeserializationError) as e:
            f.raise_pending_error()
            f._completed = deque([CompletedFetch(TP, subs.state(TP).version, 2, 4, data)])
            f.drain(None, 10)
        assert (e.value.partition, e.value.offset) == (TP, 2) and isinstance(e.value.__cause__, ValueError)
        assert subs.state(TP).position == 2 and subs.state(TP).fetch_offset == 2
    subs.seek(TP, 3)
    f._completed = deque([CompletedFetch(TP, subs.state(TP).version, 3, 4, data)])
    assert [r.value for r in f.drain(None, 10)[TP]] == [4]
    # a corrupted batch (CRC) raises, position unchanged
    bad = bytearray(build_batch([(None, b"5", (), 1)], base_offset=4))
    bad[-1] ^= 0xFF
    f._completed = deque([CompletedFetch(TP, subs.state(TP).version, 4, 5, bytes(bad))])
    with pytest.raises(ProtocolError, match="CRC"):
        f.drain(None, 10)
    assert subs.state(TP).position == 4


def test_next_fetch_offset_from_headers_and_partial_batches() -> None:
    one = build_batch([(b"k", b"v", (), 1)] * 3, base_offset=10)
    two = build_batch([(b"k", b"w", (), 1)] * 2, base_offset=13)
    assert next_fetch_offset(one + two, 10) == 15
    assert next_fetch_offset(one + two[:-5], 10) == 13  # a cut-off trailing batch is fetched again
    assert next_fetch_offset(b"", 7) == 7
    assert next_fetch_offset(None, 7) == 7


def test_read_committed_skips_aborted_transactions() -> None:
    data = b"".join(
        [
            build_batch(
                [(b"k", b"aborted", (), 1)], base_offset=0, producer_id=7, producer_epoch=0, transactional=True
            ),
            build_batch(
                [(b"k", b"committed", (), 1)], base_offset=1, producer_id=8, producer_epoch=0, transactional=True
            ),
            build_control_batch(ControlType.ABORT, producer_id=7, producer_epoch=0, base_offset=2),
            build_control_batch(ControlType.COMMIT, producer_id=8, producer_epoch=0, base_offset=3),
            build_batch([(b"k", b"later", (), 1)], base_offset=4, producer_id=7, producer_epoch=0, transactional=True),
            build_batch([(b"k", b"plain", (), 1)], base_offset=5),
        ]
    )
    everything, nxt = decode_record_set_for("t", 0, data)
    assert [r.value for r in everything] == [b"aborted", b"committed", b"later", b"plain"] and nxt == 6
    committed, nxt = decode_record_set_for("t", 0, data, aborted_transactions=[(7, 0)])
    assert [r.value for r in committed] == [b"committed", b"later", b"plain"] and nxt == 6


def test_invalid_configuration_fails_at_construction_naming_the_key() -> None:
    with pytest.raises(ConfigError) as e:
        AsyncConsumer({"bootstrap.servers": "h:1"}, fetch_max_wait_ms=-1)
    assert e.value.key == "fetch.max.wait.ms"
    with pytest.raises(ConfigError) as e:
        AsyncConsumer({"bootstrap.servers": "h:1", "auto.offset.reset": "smallest"})
    assert e.value.key == "auto.offset.reset"
    with pytest.raises(ConfigError) as e:
        AsyncConsumer({"bootstrap.servers": "h:1", "partition.assignment.strategy": "range,fancy"})
    assert e.value.key == "partition.assignment.strategy"
    with pytest.raises(ConfigError) as e:
        AsyncConsumer({"bootstrap.servers": "h:1", "session.timeout.ms": 1000, "heartbeat.interval.ms": 1000})
    assert e.value.key == "heartbeat.interval.ms"
    # valid settings construct fine outside any event loop (this test is not async)
    AsyncConsumer({"bootstrap.servers": "h:1", "group.id": "g"}, enable_auto_commit=False)


# -- a real broker --------------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


def produce_sync(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, **extra) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **QUIET, **extra})
    for v in values:
        p.produce(topic, value=v, partition=partition)
    assert p.flush(30) == 0


async def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, **extra) -> None:
    await asyncio.to_thread(produce_sync, bootstrap, topic, values, partition, **extra)


async def take(c: AsyncConsumer, n: int, timeout: float = 30, **kw) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"only {len(out)} of {n} records"
        for recs in (await c.getmany(timeout_ms=200, **kw)).values():
            out += recs
    return out


def config(bootstrap: str, **extra) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        **{k.replace("_", "."): v for k, v in extra.items()},
    }


async def test_assign_without_a_group_seek_and_position(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name, 2)
    await produce(bs, topic_name, [b"%d" % i for i in range(20)])
    tp = TopicPartition(topic_name, 0)
    async with AsyncConsumer(config(bs)) as c:
        with pytest.raises(IllegalStateError):
            c.subscribe([topic_name])  # needs a group.id
        c.assign([tp, TopicPartition(topic_name, 1)])
        assert c.assignment() == {tp, TopicPartition(topic_name, 1)} and c.subscription() == set()
        got = await take(c, 20)
        assert [r.offset for r in got] == list(range(20)) and got[0].value == b"0"
        assert await c.position(tp) == 20 and c.highwater(tp) == 20
        c.seek(tp, 15)
        assert await c.position(tp) == 15
        assert [r.value for r in await take(c, 5)] == [b"15", b"16", b"17", b"18", b"19"]
        await c.seek_to_beginning(tp)
        assert await c.position(tp) == 0
        one = await c.getone()
        assert (one.offset, one.value) == (0, b"0")
        await c.seek_to_end()
        assert await c.position(tp) == 20 and await c.position(TopicPartition(topic_name, 1)) == 0
        many = await c.getmany(timeout_ms=100)
        assert many == {}
        with pytest.raises(IllegalStateError):
            await c.commit()  # no group.id
        with pytest.raises(IllegalStateError):
            c.seek(TopicPartition(topic_name, 5), 0)  # not assigned


async def test_beginning_end_offsets_and_offsets_for_times(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name, 2)
    a, b = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    base = 1_700_000_000_000

    def fill() -> None:
        p = Producer({"bootstrap.servers": bs, **QUIET})
        for i in range(5):
            p.produce(topic_name, value=b"%d" % i, partition=0, timestamp=base + i * 1000)
        assert p.flush(30) == 0

    await asyncio.to_thread(fill)
    async with AsyncConsumer(config(bs)) as c:
        assert await c.beginning_offsets([a, b]) == {a: 0, b: 0}
        assert await c.end_offsets([a, b]) == {a: 5, b: 0}
        found = await c.offsets_for_times({a: base + 2500, b: base})
        assert found == {a: OffsetAndTimestamp(3, base + 3000), b: None}
        assert (await c.offsets_for_times({a: base + 99_000}))[a] is None
        assert c.assignment() == set()  # nothing was assigned or moved


async def test_offset_reset_latest_none_and_out_of_range(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name)
    tp = TopicPartition(topic_name, 0)
    await produce(bs, topic_name, [b"old"] * 5)
    async with AsyncConsumer(config(bs, auto_offset_reset="latest")) as c:
        c.assign([tp])
        assert await c.position(tp) == 5
        await produce(bs, topic_name, [b"new"])
        assert [(r.offset, r.value) for r in await take(c, 1)] == [(5, b"new")]
        # beyond the end: OFFSET_OUT_OF_RANGE, reset by auto.offset.reset (latest)
        c.seek(tp, 100)
        await asyncio.wait_for(_until(lambda: c._subs.state(tp).position == 6, c), 30)
    async with AsyncConsumer(config(bs, auto_offset_reset="none", group_id="g-" + topic_name)) as c:
        c.assign([tp])
        with pytest.raises(NoOffsetForPartitionError) as e:
            await c.getmany(timeout_ms=5000)
        assert e.value.partitions == {tp}
        c.seek(tp, 4)
        assert [r.offset for r in await take(c, 2)] == [4, 5]
        c.seek(tp, 50)
        with pytest.raises(OffsetOutOfRangeError):
            await asyncio.wait_for(_until(lambda: False, c), 30)


async def _until(cond, c: AsyncConsumer) -> None:
    while not cond():
        await c.getmany(timeout_ms=100)


async def test_commit_committed_and_commit_async(shared_broker, topic_name) -> None:
    bs, group = shared_broker.bootstrap, "g-" + topic_name
    create_topic(bs, topic_name, 2)
    a, b = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    await produce(bs, topic_name, [b"%d" % i for i in range(10)], partition=0)
    await produce(bs, topic_name, [b"%d" % i for i in range(4)], partition=1)
    async with AsyncConsumer(config(bs, group_id=group, enable_auto_commit=False)) as c:
        c.assign([a, b])
        assert await c.committed(a) is None
        await take(c, 14)
        await c.commit()  # the positions: everything returned
        assert (await c.committed(a), await c.committed(b)) == (10, 4)
        await c.commit({a: OffsetAndMetadata(3, "meta"), b: 1})
        assert (await c.committed(a), await c.committed(b)) == (3, 1)
        results = []
        await c.commit_async({a: 7}, callback=lambda offsets, error: results.append((dict(offsets), error)))
        assert results == [({a: OffsetAndMetadata(7)}, None)] and await c.committed(a) == 7
        with pytest.raises(ValueError):
            await c.commit({a: -1})
    # a new consumer of the group starts at the committed offsets
    async with AsyncConsumer(config(bs, group_id=group, enable_auto_commit=False)) as c:
        c.assign([a, b])
        assert (await c.position(a), await c.position(b)) == (7, 1)
        got = await take(c, 6)
        assert sorted((r.partition, r.offset) for r in got) == [(0, 7), (0, 8), (0, 9), (1, 1), (1, 2), (1, 3)]


async def test_auto_commit_periodically_and_at_close(shared_broker, topic_name) -> None:
    bs, group = shared_broker.bootstrap, "g-" + topic_name
    create_topic(bs, topic_name)
    tp = TopicPartition(topic_name, 0)
    await produce(bs, topic_name, [b"x"] * 10)
    cfg = config(bs, group_id=group, enable_auto_commit=True, auto_commit_interval_ms=200)
    async with AsyncConsumer(cfg) as c:
        c.subscribe([topic_name])
        await take(c, 10)
        deadline = time.monotonic() + 30
        while await c.committed(tp) != 10:  # polls commit what they returned, every 200 ms
            assert time.monotonic() < deadline, "no auto commit"
            await c.getmany(timeout_ms=100)
        await produce(bs, topic_name, [b"y"] * 3)
        await take(c, 3)
        # closing right away: the final commit covers the last three
    async with AsyncConsumer(config(bs, group_id=group)) as check:
        check.assign([tp])
        assert await check.committed(tp) == 13


CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
async def test_byte_exact_read_of_confluent_records(shared_broker, topic_name, codec) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name)
    base = 1_700_000_000_000
    rows = [
        (b"k0", b"plain value", [("h", b"1")], base),
        (None, b"no key", [], base + 1),
        (b"tombstone", None, [("empty", b""), ("none", None)], base + 2),
        (b"", b"", [("dup", b"a"), ("dup", b"b"), ("\u00fcml", b"\x00\xff")], base + 3),
        (bytes(range(256)), bytes(range(256)) * 40, [("bin", bytes(range(256)))], base + 5000),
        (b"k5", b"x" * 100_000, [], base - 1000),
    ]

    def produce_rows() -> None:
        p = Producer({"bootstrap.servers": bs, "compression.type": codec, "linger.ms": 50, **QUIET})
        for key, value, headers, ts in rows:
            p.produce(topic_name, key=key, value=value, headers=headers, timestamp=ts, partition=0)
        assert p.flush(30) == 0

    await asyncio.to_thread(produce_rows)
    async with AsyncConsumer(config(bs, check_crcs=True)) as c:
        c.assign([TopicPartition(topic_name, 0)])
        got = await take(c, len(rows))
    assert [r.offset for r in got] == list(range(len(rows)))
    for r, (key, value, headers, ts) in zip(got, rows, strict=True):
        assert (r.topic, r.partition, r.key, r.value, r.timestamp, r.timestamp_type) == (
            topic_name, 0, key, value, ts, 0)  # fmt: skip
        assert r.headers == [(n, v) for n, v in headers]


async def test_deserializers_pause_resume_and_max_records(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name, 2)
    a, b = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    await produce(bs, topic_name, [b"%d" % i for i in range(10)], partition=0)
    await produce(bs, topic_name, [b"%d" % i for i in range(10)], partition=1)
    cfg = config(bs, value_deserializer=lambda v: int(v), key_deserializer=lambda k: k)
    async with AsyncConsumer(cfg) as c:
        c.assign([a, b])
        c.pause(b)
        assert c.paused() == {b}
        got = await take(c, 10, max_records=3)
        assert {r.partition for r in got} == {0} and [r.value for r in got] == list(range(10))
        assert await c.getmany(timeout_ms=300) == {}
        c.resume(b)
        batch = await c.getmany(b, timeout_ms=5000, max_records=4)
        assert [r.value for r in batch[b]] == [0, 1, 2, 3]
        rest = []
        async for r in c:
            rest.append(r.value)
            if len(rest) == 6:
                break
        assert rest == [4, 5, 6, 7, 8, 9]
        assert await c.position(b) == 10


async def test_assigned_topic_created_later_is_fetched_once_it_exists(shared_broker, topic_name) -> None:
    """Leader unknown (UNKNOWN_TOPIC_OR_PARTITION): metadata is refreshed until it appears."""
    bs = shared_broker.bootstrap
    tp = TopicPartition(topic_name, 0)
    async with AsyncConsumer(config(bs, retry_backoff_ms=50, retry_backoff_max_ms=200)) as c:
        c.assign([tp])
        assert await c.getmany(timeout_ms=300) == {}
        await asyncio.to_thread(create_topic, bs, topic_name)
        await produce(bs, topic_name, [b"late"])
        assert [r.value for r in await take(c, 1)] == [b"late"]


async def test_closed_consumer_refuses_and_async_for_stops(shared_broker, topic_name) -> None:
    bs = shared_broker.bootstrap
    create_topic(bs, topic_name)
    c = AsyncConsumer(config(bs))
    with pytest.raises(IllegalStateError):
        await c.getmany()  # not started
    await c.start()
    with pytest.raises(IllegalStateError):
        await c.getmany()  # neither subscribed nor assigned
    c.assign([TopicPartition(topic_name, 0)])

    async def loop() -> int:
        n = 0
        async for _ in c:
            n += 1
        return n

    task = asyncio.ensure_future(loop())
    await asyncio.sleep(0.3)
    await c.close()
    assert await asyncio.wait_for(task, 10) == 0
    with pytest.raises(IllegalStateError):
        await c.getmany()
