"""ShareFetch / ShareAcknowledge over a real socket with our codec: share
sessions, acknowledgement errors that change nothing, long polling, release
on connection close, RENEW, session limits, and how much one ShareFetch
hands out (MaxRecords, MaxBytes split across partitions, the in-flight cap)."""

from __future__ import annotations

import threading
import time
import uuid

import confluent_kafka
import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ACCEPT, REJECT, RELEASE, RENEW, ShareAcquireMode
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import iter_batches
from tests.support.brokers import RawClient
from tests.support.share_clients import produce
from tests.support.share_wire import FAST, SF, acknowledge, acquired, batch, fetch, part, ready_topic
from tests.support.wire import create


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.support.brokers import InProcessBroker

    b = InProcessBroker(tmp_path_factory.mktemp("share-fetch-proto") / "data", FAST).start()
    yield b
    b.stop()


def test_session_errors(broker) -> None:
    tid = ready_topic(broker, "sf-sess", "g-sess", 3)
    with RawClient(broker.port) as c:
        assert fetch(c, "", "m", 0, [(tid, 0)]).error_code == ErrorCode.INVALID_REQUEST
        assert fetch(c, "g-sess", "m", 5, [(tid, 0)]).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        r = fetch(c, "g-sess", "m", 0, [(tid, 0)], acks={(tid, 0): [batch(0, 0, ACCEPT)]})
        assert r.error_code == ErrorCode.INVALID_REQUEST  # acks are never sent at epoch 0
        assert fetch(c, "g-sess", "m", 0, [(tid, 0)], max_records=0).error_code == ErrorCode.INVALID_REQUEST
        r = fetch(c, "g-sess", "m", 0, [(tid, 0)])
        assert r.error_code == 0 and acquired(r) == [(0, 2, 1)]
        assert part(r).records  # the raw batches come along
        assert fetch(c, "g-sess", "m", 3).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        a = acknowledge(c, "g-sess", "m", 0, tid, 0, batch(0, 2, ACCEPT))
        assert a.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        # the session remembers its partitions: epoch 1 names none and still fetches (nothing left)
        r = fetch(c, "g-sess", "m", 1, acks={(tid, 0): [batch(0, 2, ACCEPT)]})
        assert r.error_code == 0
        assert part(r).acknowledge_error_code == 0 and part(r).records is not None
        unknown = uuid.uuid4()
        r = fetch(c, "g-sess", "m", 2, [(unknown, 0)])
        errs = {(t.topic_id, p.partition_index): p.error_code for t in r.responses for p in t.partitions}
        assert errs[(unknown, 0)] == ErrorCode.UNKNOWN_TOPIC_ID
        assert fetch(c, "g-sess", "m", -1).error_code == 0
        assert fetch(c, "g-sess", "m", 3).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_bad_acknowledgements_change_nothing(broker) -> None:
    tid = ready_topic(broker, "sf-bad", "g-bad", 10)
    with RawClient(broker.port) as a, RawClient(broker.port) as b:
        r = fetch(
            a, "g-bad", "ma", 0, [(tid, 0)], max_records=5, version=2, share_acquire_mode=ShareAcquireMode.RECORD_LIMIT
        )
        assert acquired(r) == [(0, 4, 1)]
        rb = fetch(
            b, "g-bad", "mb", 0, [(tid, 0)], max_records=5, version=2, share_acquire_mode=ShareAcquireMode.RECORD_LIMIT
        )
        assert acquired(rb) == [(5, 9, 1)]
        cases = [
            ([batch(5, 6, ACCEPT)], ErrorCode.INVALID_RECORD_STATE),  # held by another member
            ([batch(20, 21, ACCEPT)], ErrorCode.INVALID_REQUEST),  # past every acquired record (as Kafka)
            ([batch(0, 2, ACCEPT), batch(2, 3, ACCEPT)], ErrorCode.INVALID_REQUEST),  # overlapping
            ([batch(3, 4, ACCEPT), batch(0, 1, ACCEPT)], ErrorCode.INVALID_REQUEST),  # out of order
            ([batch(0, 1, 9)], ErrorCode.INVALID_REQUEST),  # unknown type
            ([batch(0, 2, ACCEPT, ACCEPT)], ErrorCode.INVALID_REQUEST),  # types do not match the range
            ([batch(0, 1, RENEW)], ErrorCode.INVALID_REQUEST),  # RENEW without IsRenewAck
        ]
        epoch = 1
        for batches, want in cases:
            got = acknowledge(a, "g-bad", "ma", epoch, tid, 0, *batches, version=2)
            epoch += 1
            assert got.error_code == 0
            assert part(got).error_code == want, (batches, part(got))
        # nothing changed: both members can still accept exactly what they hold
        ok = acknowledge(a, "g-bad", "ma", epoch, tid, 0, batch(0, 4, ACCEPT))
        assert part(ok).error_code == 0
        ok = acknowledge(b, "g-bad", "mb", 1, tid, 0, batch(5, 9, ACCEPT))
        assert part(ok).error_code == 0
        assert acquired(fetch(a, "g-bad", "ma", epoch + 1)) == []


def test_release_reject_and_renew(broker) -> None:
    tid = ready_topic(broker, "sf-rr", "g-rr", 6, share_record_lock_duration_ms="1500")
    with RawClient(broker.port) as c:
        r = fetch(c, "g-rr", "m", 0, [(tid, 0)])
        assert acquired(r) == [(0, 5, 1)]
        per_offset = [RELEASE, RELEASE, REJECT, REJECT, ACCEPT, ACCEPT]
        r = fetch(c, "g-rr", "m", 1, acks={(tid, 0): [batch(0, 5, *per_offset)]})
        assert part(r).acknowledge_error_code == 0
        assert acquired(r) == [(0, 1, 2)]  # released ones come straight back, counted twice
        # RENEW keeps them past the 1.5 s lock
        for epoch in (2, 3, 4):
            time.sleep(0.7)
            renewed = acknowledge(c, "g-rr", "m", epoch, tid, 0, batch(0, 1, RENEW), version=2, is_renew_ack=True)
            assert part(renewed).error_code == 0
        with RawClient(broker.port) as other:
            assert acquired(fetch(other, "g-rr", "m2", 0, [(tid, 0)])) == []
        done = acknowledge(c, "g-rr", "m", 5, tid, 0, batch(0, 1, ACCEPT))
        assert part(done).error_code == 0


def test_long_poll_wakes_on_produce(broker) -> None:
    tid = ready_topic(broker, "sf-wait", "g-wait", 0)
    with RawClient(broker.port) as c:
        timer = threading.Timer(0.4, lambda: produce(broker.bootstrap, "sf-wait", 1))
        timer.start()
        started = time.monotonic()
        r = fetch(c, "g-wait", "m", 0, [(tid, 0)], max_wait=5000)
        took = time.monotonic() - started
        timer.join()
    assert acquired(r) == [(0, 0, 1)]
    assert 0.3 < took < 4.0, took


def test_closing_the_connection_releases_records(broker) -> None:
    tid = ready_topic(broker, "sf-close", "g-close", 4)
    with RawClient(broker.port) as c:
        assert acquired(fetch(c, "g-close", "leaver", 0, [(tid, 0)])) == [(0, 3, 1)]
    time.sleep(0.2)
    with RawClient(broker.port) as c:
        got = acquired(fetch(c, "g-close", "stayer", 0, [(tid, 0)], max_wait=3000))
    assert [(f, last) for f, last, _ in got] == [(0, 3)]


def _until_session_gone(broker, group: str, member: str) -> None:
    """Until the broker has dropped the member's session (a fetch at its next epoch is refused)."""
    deadline = time.monotonic() + 5
    with RawClient(broker.port) as c:
        while fetch(c, group, member, 1).error_code != ErrorCode.SHARE_SESSION_NOT_FOUND:
            assert time.monotonic() < deadline
            time.sleep(0.02)


@pytest.mark.parametrize("how", ["connection closed", "final epoch"])
def test_a_long_poll_of_a_closed_session_acquires_nothing(broker, how) -> None:
    """A ShareFetch waiting in the purgatory when its session goes (its connection closed, or
    the member closed the session from another connection, or was removed from the group)
    must not acquire records when a produce wakes it: they would stay locked for a member that
    has left, until the lock timeout. Before, the final-epoch case handed all 5 records to the
    closed session (a closed connection already cancelled its waiting fetch). Nothing is
    acquired, so no error code is involved; the records go to the next member, delivery count 1."""
    group, topic = f"g-gone-{how[0]}", f"sf-gone-{how[0]}"
    tid = ready_topic(broker, topic, group, 0)
    waiting = RawClient(broker.port)
    try:
        assert fetch(waiting, group, "gone", 0, [(tid, 0)]).error_code == 0  # session at epoch 1
        waiting.send(
            "ShareFetch",
            1,
            SF(group_id=group, member_id="gone", share_session_epoch=1, max_wait_ms=10_000, min_bytes=1,
               max_bytes=MIB, max_records=500, batch_size=500, topics=[], forgotten_topics_data=[]),
        )  # fmt: skip
        time.sleep(0.2)  # it waits in the purgatory
        if how == "connection closed":
            waiting.close()
        else:
            with RawClient(broker.port) as other:
                assert acknowledge(other, group, "gone", -1, tid, 0).error_code == 0
        _until_session_gone(broker, group, "gone")
        produce(broker.bootstrap, topic, 5)
        with RawClient(broker.port) as c:
            got = acquired(fetch(c, group, "next", 0, [(tid, 0)], max_wait=2000))
        assert got == [(0, 4, 1)]
    finally:
        waiting.close()


def test_session_limit(broker) -> None:
    tid = ready_topic(broker, "sf-limit", "g-limit", 0)
    clients = [RawClient(broker.port) for _ in range(4)]
    try:
        codes = [fetch(c, "g-limit", f"m{i}", 0, [(tid, 0)]).error_code for i, c in enumerate(clients)]
    finally:
        for c in clients:
            c.close()
    assert codes.count(ErrorCode.SHARE_SESSION_LIMIT_REACHED) >= 1
    assert codes[0] == 0


# -- how much one ShareFetch hands out -------------------------------------------------------
KIB_VALUE = b"x" * 1024
MIB = 1 << 20


def produce_kib(bootstrap: str, topic: str, per_partition: int, partitions: int = 1) -> None:
    """`per_partition` records of 1 KiB on each partition (64 KiB producer batches)."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5, "batch.size": 65536})
    for i in range(per_partition * partitions):
        while True:
            try:
                p.produce(topic, value=KIB_VALUE, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(30) == 0


def by_partition(resp) -> dict[int, tuple[list, int, int]]:
    """partition -> (acquired ranges, records in the acquired ranges that the Records hold, Records bytes)."""
    out = {}
    for t in resp.responses:
        for p in t.partitions:
            assert p.error_code == 0, p
            ranges = [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
            wanted = {o for f, last, _ in ranges for o in range(f, last + 1)}
            held = set()
            for h, _ in iter_batches(p.records):
                held.update(o for o in range(h.base_offset, h.last_offset + 1) if o in wanted)
            out[p.partition_index] = (ranges, len(held), len(p.records))
    return out


def count(ranges) -> int:
    return sum(last - f + 1 for f, last, _ in ranges)


def test_one_fetch_returns_max_records_across_reads(broker) -> None:
    """MaxRecords 20,000 is served in one answer as far as the in-flight cap (10,000 per share
    partition, the highest allowed) lets it: 10,000 of one partition's 30,000 1 KiB records (many
    1 MiB reads' worth), and 20,000 over two partitions, every acquired record in the Records."""
    tid = ready_topic(broker, "sf-many", "g-many", 0, share_partition_max_record_locks="10000")
    produce_kib(broker.bootstrap, "sf-many", 30_000)
    with RawClient(broker.port, timeout=30) as c:
        r = fetch(c, "g-many", "m", 0, [(tid, 0)], max_records=20_000, max_bytes=100 * MIB,
                  version=2, share_acquire_mode=ShareAcquireMode.RECORD_LIMIT)  # fmt: skip
        ((ranges, held, size),) = by_partition(r).values()
        assert ranges[0][0] == 0 and count(ranges) == 10_000 == held, ranges  # the cap, not 1 MiB
        assert size > 10_000 * 1024
        # acknowledging frees the cap: the next answer carries the next 10,000
        acks = {(tid, 0): [batch(f, last, ACCEPT) for f, last, _ in ranges]}
        r = fetch(c, "g-many", "m", 1, acks=acks, max_records=20_000, max_bytes=100 * MIB,
                  version=2, share_acquire_mode=ShareAcquireMode.RECORD_LIMIT)  # fmt: skip
        ((ranges, held, _),) = by_partition(r).values()
        assert ranges[0][0] == 10_000 and count(ranges) == 10_000 == held

    tid = ready_topic(broker, "sf-many2", "g-many2", 0, partitions=2, share_partition_max_record_locks="10000")
    produce_kib(broker.bootstrap, "sf-many2", 15_000, partitions=2)
    with RawClient(broker.port, timeout=30) as c:
        r = fetch(c, "g-many2", "m", 0, [(tid, 0), (tid, 1)], max_records=20_000, max_bytes=100 * MIB,
                  version=2, share_acquire_mode=ShareAcquireMode.RECORD_LIMIT)  # fmt: skip
        got = by_partition(r)
        assert {p: count(v[0]) for p, v in got.items()} == {0: 10_000, 1: 10_000}
        assert all(v[1] == 10_000 for v in got.values())


def test_max_bytes_is_split_across_partitions(broker) -> None:
    """MaxBytes 8 MiB over two partitions holding ~6 MiB each: each answers with about its
    half (Kafka's uniform strategy), not 1 MiB each, nor all of the first partition."""
    tid = ready_topic(broker, "sf-split", "g-split", 0, partitions=2, share_partition_max_record_locks="10000")
    produce_kib(broker.bootstrap, "sf-split", 6_000, partitions=2)
    with RawClient(broker.port, timeout=30) as c:
        r = fetch(c, "g-split", "m", 0, [(tid, 0), (tid, 1)], max_records=10_000, max_bytes=8 * MIB)
        got = by_partition(r)
    assert set(got) == {0, 1}
    for p, (ranges, held, size) in got.items():
        assert 3 * MIB < size <= 4 * MIB, (p, size)
        assert held == count(ranges), p  # whole batches: every acquired record is in the Records


def test_small_max_records_and_the_in_flight_cap(broker) -> None:
    """The librdkafka case is unchanged -- MaxRecords 500 with MaxBytes 50 MiB acquires 500 records
    (rounded up to the end of their log batch) and sends only their batches -- and the default
    in-flight cap (2,000) bounds a fetch asking for 20,000."""
    tid = ready_topic(broker, "sf-small", "g-small", 0)
    produce_kib(broker.bootstrap, "sf-small", 30_000)
    # The first member's connection stays open while the second fetches: closing it would
    # release its records (as Kafka releases a disconnected client's share session), and
    # whether that release came before the second fetch was a race (the test was flaky).
    with RawClient(broker.port, timeout=30) as c, RawClient(broker.port, timeout=30) as c2:
        r = fetch(c, "g-small", "m", 0, [(tid, 0)], max_records=500, max_bytes=50 * MIB)
        ((ranges, held, size),) = by_partition(r).values()
        first = count(ranges)
        assert ranges[0][0] == 0 and 500 <= first < 500 + 64 and held == first
        assert size < 600 * 1024
        r = fetch(c2, "g-small", "m2", 0, [(tid, 0)], max_records=20_000, max_bytes=50 * MIB)
        ((ranges, held, _),) = by_partition(r).values()
        # batch-optimized acquisition may cross the cap by less than one log batch
        assert ranges[0][0] == first and 2_000 <= first + count(ranges) < 2_000 + 64 and held == count(ranges)


def test_the_durable_start_follows_a_start_moved_by_the_log_start(broker_factory) -> None:
    """Retention moved the log start past records the group never read: the share partition's
    start moves there when it next reads, with no Change to carry it. Before, nothing wrote
    that start (the group's durable start stayed at 0 while the records were long gone, and
    a restart would have started from there); now the move is written like any other."""
    b = broker_factory(*FAST, "log.retention.check.interval.ms=100").start()
    group, topic = "g-retained", "sf-retained"
    with RawClient(b.port) as c:
        create(c, topic, 1, segment_bytes="1024", retention_ms="1")
    tid = ready_topic(b, topic, group, 0)
    with RawClient(b.port) as c:
        assert acquired(fetch(c, group, "m", 0, [(tid, 0)])) == []  # loads the share partition at 0
        assert persisted_start(b.port, group) == 0
        for _ in range(10):
            produce(b.bootstrap, topic, 5)  # one batch each: segments of ~1 KiB, all but the last expire
        deadline = time.monotonic() + 10
        while (log_start := earliest(c, topic)) == 0:
            assert time.monotonic() < deadline, "retention never ran"
            time.sleep(0.05)
        got = acquired(fetch(c, group, "m", 1, [(tid, 0)]))
        assert got and got[0][0] == log_start  # the records below it are gone
        while persisted_start(b.port, group) != log_start:
            assert time.monotonic() < deadline, persisted_start(b.port, group)
            time.sleep(0.05)


def earliest(c: RawClient, topic: str) -> int:
    LO = api_by_name("ListOffsets").request_class()
    r = c.call(
        "ListOffsets",
        7,
        replica_id=-1,
        isolation_level=0,
        topics=[LO.ListOffsetsTopic(name=topic, partitions=[LO.ListOffsetsPartition(partition_index=0, timestamp=-2)])],
    )
    return r.topics[0].partitions[0].offset


def persisted_start(port: int, group: str) -> int:
    R = api_by_name("DescribeShareGroupOffsets").request_class()
    with RawClient(port) as c:
        g = c.call(
            "DescribeShareGroupOffsets",
            1,
            groups=[R.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)],
        ).groups[0]
    (t,) = g.topics
    (p,) = t.partitions
    return p.start_offset
