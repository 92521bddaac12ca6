"""Many members on one share partition (the queue-scaling issue), over real sockets:
record_limit never hands out more than MaxRecords, and a large batch of small records is
sent cut down to the acquired records (shoal/protocol/record_slice.py) with every record intact;
a member parked in a long ShareFetch gets records another member releases within
milliseconds, not at MaxWaitMs; acknowledgements of many members at once are all durable.

Rates are measured by benchmarks/share_scaling.py, not here."""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ACCEPT, RELEASE, ShareAcquireMode
from shoal.protocol.record_slice import RecordIndex
from shoal.protocol.records import build_batch, iter_batches
from tests.support.brokers import RawClient
from tests.support.clients import _produce_topic
from tests.support.share_wire import FAST, acknowledge, acquired, batch, fetch, part, ready_topic

CONFIG = tuple(c for c in FAST if not c.startswith("group.share.max.share.sessions"))  # 16 members


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.support.brokers import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("share-scaling") / "data", CONFIG).start()
    yield b
    b.stop()


def produce_batch(port: int, topic: str, values: list[bytes], compression: int = 0) -> None:
    """All `values` in ONE batch (the way a producer with a large batch.size writes small records)."""
    now = int(time.time() * 1000)
    data = build_batch([(None, v, [], now) for v in values], compression=compression)
    with RawClient(port) as c:
        r = c.call("Produce", 9, acks=-1, timeout_ms=5000, topic_data=[_produce_topic(topic, 0, data)])
    assert r.responses[0].partition_responses[0].error_code == 0


def records_of(p) -> dict[int, bytes]:
    out = {}
    for h, _ in iter_batches(p.records):
        assert h.verify_crc()
        for r in h.records():
            out[r.offset] = r.value
    return out


@pytest.mark.parametrize("compression", [0, 4], ids=["uncompressed", "zstd"])
def test_record_limit_hands_out_max_records_cut_from_a_large_batch(broker, compression) -> None:
    topic, group = f"rl-slice-{compression}", f"g-rl-slice-{compression}"
    tid = ready_topic(broker, topic, group, 0)
    values = [b"r%05d" % i for i in range(20_000)]  # ~270 KiB in one batch
    produce_batch(broker.port, topic, values, compression)
    seen: dict[int, bytes] = {}
    clients = [RawClient(broker.port) for _ in range(4)]
    try:
        epochs = [0] * 4
        for _ in range(6):
            for k, c in enumerate(clients):
                r = fetch(c, group, f"m{k}", epochs[k], [(tid, 0)], max_records=5, version=2,
                          share_acquire_mode=ShareAcquireMode.RECORD_LIMIT)  # fmt: skip
                epochs[k] += 1
                p = part(r)
                assert p.error_code == 0
                got = acquired(r)
                assert sum(last - first + 1 for first, last, _ in got) == 5, got  # never more than MaxRecords
                recs = records_of(p)
                # The answer is the acquired records' span, not the 270 KiB batch; each record intact.
                assert len(p.records) < 1024, len(p.records)
                for first, last, _ in got:
                    for o in range(first, last + 1):
                        assert recs[o] == values[o]
                        assert o not in seen
                        seen[o] = recs[o]
        assert sorted(seen) == list(range(len(seen))) and len(seen) == 4 * 6 * 5
    finally:
        for c in clients:
            c.close()


def test_batch_optimized_still_sends_whole_batches(broker) -> None:
    topic, group = "bo-whole", "g-bo-whole"
    tid = ready_topic(broker, topic, group, 0)
    produce_batch(broker.port, topic, [b"x%05d" % i for i in range(20_000)])
    with RawClient(broker.port) as c:
        r = fetch(
            c, group, "m", 0, [(tid, 0)], max_records=5, version=2, share_acquire_mode=ShareAcquireMode.BATCH_OPTIMIZED
        )
    assert acquired(r) == [(0, 19_999, 1)]  # Kafka's batch_optimized: the whole batch
    ((h, _),) = list(iter_batches(part(r).records))
    assert h.records_count == 20_000


def test_record_index_slices_only_batches_without_gaps() -> None:
    data = build_batch([(None, b"v", [], 0)] * 10, offset_deltas=[0, 1, 2, 5, 6, 7, 8, 9, 10, 12])
    ((h, _),) = list(iter_batches(data))
    assert not RecordIndex.sliceable(h)
    whole = build_batch([(None, b"v%d" % i, [], 1000 + i) for i in range(10)], base_offset=100)
    ((h, _),) = list(iter_batches(whole))
    idx = RecordIndex(h)
    ((s, _),) = list(iter_batches(idx.slice(103, 104)))
    assert s.verify_crc() and (s.base_offset, s.last_offset, s.records_count) == (100, 104, 2)
    assert [(r.offset, r.value, r.timestamp) for r in s.records()] == [(103, b"v3", 1003), (104, b"v4", 1004)]
    with pytest.raises(ValueError):
        idx.slice(200, 210)


def test_a_parked_member_gets_released_records_within_milliseconds(broker) -> None:
    """The holder releases; the other member waits in ShareFetch with MaxWaitMs 10 s and is
    answered when the release is durable, not when its wait runs out."""
    topic, group = "wake-release", "g-wake-release"
    # 5 deliveries each, whole: under the limit (the 5th RELEASE would archive them at the default 5)
    # and under its throttle threshold (5 of 10), from which poison isolation hands out halves.
    tid = ready_topic(broker, topic, group, 10, share_delivery_count_limit="10")
    conns = [RawClient(broker.port), RawClient(broker.port)]
    members, epochs = ["ma", "mb"], [0, 0]
    try:
        r = fetch(conns[0], group, "ma", 0, [(tid, 0)])
        epochs[0] = 1
        assert acquired(r) == [(0, 9, 1)]
        r = fetch(conns[1], group, "mb", 0, [(tid, 0)])  # opens its session; everything is held
        epochs[1] = 1
        assert acquired(r) == []
        holder, delays = 0, []
        for _ in range(4):
            waiter = 1 - holder
            out: dict = {}

            def wait(w=waiter, o=out) -> None:
                o["resp"] = fetch(conns[w], group, members[w], epochs[w], [(tid, 0)], max_wait=10_000)
                o["t"] = time.monotonic()

            t = threading.Thread(target=wait)
            t.start()
            time.sleep(0.2)  # parked in the purgatory
            released_at = time.monotonic()
            a = acknowledge(conns[holder], group, members[holder], epochs[holder], tid, 0, batch(0, 9, RELEASE))
            epochs[holder] += 1
            assert a.error_code == 0
            t.join(15)
            epochs[waiter] += 1
            assert [(f, last) for f, last, _ in acquired(out["resp"])] == [(0, 9)]
            delays.append(out["t"] - released_at)
            holder = waiter
    finally:
        for c in conns:
            c.close()
    assert statistics.median(delays) < 0.5, delays  # MaxWaitMs is 10 s; typically a few ms


def test_acknowledgements_of_many_members_at_once_are_all_durable(broker) -> None:
    topic, group = "many-acks", "g-many-acks"
    tid = ready_topic(broker, topic, group, 80)
    conns = [RawClient(broker.port) for _ in range(16)]
    try:
        got = []
        for k, c in enumerate(conns):
            r = fetch(
                c,
                group,
                f"m{k}",
                0,
                [(tid, 0)],
                max_records=5,
                version=2,
                share_acquire_mode=ShareAcquireMode.RECORD_LIMIT,
            )
            ((first, last, _),) = acquired(r)
            got.append((first, last))
        assert sorted(got) == [(i, i + 4) for i in range(0, 80, 5)]
        errors: list = []
        barrier = threading.Barrier(len(conns))

        def ack(k: int) -> None:
            barrier.wait()
            first, last = got[k]
            a = acknowledge(conns[k], group, f"m{k}", 1, tid, 0, batch(first, last, ACCEPT))
            errors.append((a.error_code, a.responses[0].partitions[0].error_code))

        threads = [threading.Thread(target=ack, args=(k,)) for k in range(len(conns))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        assert errors == [(0, 0)] * len(conns)
    finally:
        for c in conns:
            c.close()
    R = api_by_name("DescribeShareGroupOffsets").request_class()
    with RawClient(broker.port) as c:
        d = c.call(
            "DescribeShareGroupOffsets", 0,
            groups=[R.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)],
        )  # fmt: skip
    (p,) = d.groups[0].topics[0].partitions
    assert p.start_offset == 80  # every acknowledgement durable: the start moved past them all


async def test_record_limit_fetches_of_a_large_batch_read_the_log_once(tmp_path, monkeypatch) -> None:
    """In process: after the first record_limit fetch of a large batch has sliced it, later fetches
    that start inside it are cut from the kept record index, without reading the log again (each
    read was the whole 1 MiB batch for 5 tiny records); the records handed out stay exact, and
    past the kept batch the log is read again."""
    from shoal.broker.broker import Broker
    from shoal.broker.config.settings import BrokerConfig
    from shoal.broker.partition.partition import Partition

    config = BrokerConfig.from_sources(
        {}, [f"log.dirs={tmp_path}", "listeners=PLAINTEXT://127.0.0.1:0", "shoal.http.listeners="]
    )
    broker = Broker(config)
    await broker.start()
    try:
        await broker.share_coordinator.loaded.wait()
        topic = broker.topics.create("kept", 1, {})
        partition = topic.partitions[0]
        values = [b"k%05d" % i for i in range(1_500)]  # one batch, large by its record count
        partition.append(build_batch([(None, v, [], 1000) for v in values]), now_ms=1000)
        partition.append(build_batch([(None, b"tail", [], 1000)]), now_ms=1000)  # offset 1,500
        values.append(b"tail")
        mgr = broker.share_partitions
        assert await broker.share_coordinator.initialize("g", topic.topic_id, 0, 1, 0) == 0
        entry = await mgr.get("g", topic.topic_id, 0)
        reads: list[int] = []
        real_read = Partition.read

        def counted(self, offset, *args, **kwargs):
            if self is partition:
                reads.append(offset)
            return real_read(self, offset, *args, **kwargs)

        monkeypatch.setattr(Partition, "read", counted)
        seen: set[int] = set()

        def take(member: str, max_records: int) -> list:
            got = mgr.acquire(entry, member, max_records, 1 << 20, batch_optimized=False)
            assert got is not None
            recs = {r.offset: r.value for h, _ in iter_batches(got.records) for r in h.records()}
            for a, b, _n in got.ranges:
                for o in range(a, b + 1):
                    assert recs[o] == values[o] and o not in seen
                    seen.add(o)
            return got

        for f in range(40):
            got = take(f"m{f % 4}", 5)
            assert sum(b - a + 1 for a, b, _n in got.ranges) == 5 and len(got.records) < 1024
        assert seen == set(range(200))
        assert reads == [0], reads  # the first fetch read the batch; the other 39 were cut from its index
        take("m9", 2_000)  # the rest of the kept batch, then the small batch: read from the log
        assert seen == set(range(1_501))
        assert reads == [0, 1_500], reads
    finally:
        await broker.stop()
