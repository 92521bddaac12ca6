"""The queue itself, judged by librdkafka's ShareConsumer (confluent-kafka):
records shared between members exactly once, RELEASE / REJECT / lock expiry,
implicit acknowledgement, and a kill -9 that loses nothing accepted and
brings back everything that was not.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from shoal.protocol.api import api_by_name
from tests.support.brokers import BrokerProcess, InProcessBroker, RawClient
from tests.support.share_clients import FAST, group_config, produce
from tests.support.wire import create

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)
AckType = confluent_kafka.AcknowledgeType


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("share-fetch") / "data", FAST).start()
    yield b
    b.stop()


def consumer(bootstrap: str, group: str, explicit: bool = False):
    cfg = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0}
    if explicit:
        cfg["share.acknowledgement.mode"] = "explicit"
    return confluent_kafka.ShareConsumer(cfg)


def poll_records(sc, want: int, timeout: float = 20.0) -> list:
    """Poll until `want` records arrived (or time runs out); returns the messages."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        for m in sc.poll(0.2):
            assert m.error() is None, m.error()
            out.append(m)
    return out


def setup(broker, topic: str, group: str, partitions: int = 1, **configs: str) -> None:
    with RawClient(broker.port) as c:
        create(c, topic, partitions)
    group_config(broker.port, group, share_auto_offset_reset="earliest", **configs)


def test_two_members_get_every_record_exactly_once(broker) -> None:
    setup(broker, "q-once", "g-once")
    produce(broker.bootstrap, "q-once", 300)
    a, b = consumer(broker.bootstrap, "g-once"), consumer(broker.bootstrap, "g-once")
    a.subscribe(["q-once"])
    b.subscribe(["q-once"])
    seen: Counter = Counter()
    by_member: Counter = Counter()
    try:
        deadline = time.monotonic() + 30
        while sum(seen.values()) < 300 and time.monotonic() < deadline:
            for name, sc in (("a", a), ("b", b)):
                for m in sc.poll(0.1):
                    assert m.error() is None
                    seen[m.offset()] += 1
                    by_member[name] += 1
        # keep polling a little: nothing may come again once accepted (implicitly, on the next poll)
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            for sc in (a, b):
                for m in sc.poll(0.1):
                    seen[m.offset()] += 1
    finally:
        a.close()
        b.close()
    assert sorted(seen) == list(range(300))
    assert set(seen.values()) == {1}, [o for o, n in seen.items() if n > 1][:10]


def test_release_redelivers_with_count_two_and_reject_never(broker) -> None:
    setup(broker, "q-rel", "g-rel")
    produce(broker.bootstrap, "q-rel", 6)
    sc = consumer(broker.bootstrap, "g-rel", explicit=True)
    sc.subscribe(["q-rel"])
    try:
        first = poll_records(sc, 6)
        assert sorted(m.offset() for m in first) == list(range(6))
        assert {m.delivery_count() for m in first} == {1}
        for m in first:
            sc.acknowledge(m, AckType.RELEASE if m.offset() < 3 else AckType.REJECT)
        assert all(v is None for v in sc.commit_sync(10).values())
        again = poll_records(sc, 3)
        assert sorted(m.offset() for m in again) == [0, 1, 2]
        assert {m.delivery_count() for m in again} == {2}
        for m in again:
            sc.acknowledge(m, AckType.ACCEPT)
        sc.commit_sync(10)
        assert poll_records(sc, 1, timeout=2.0) == []  # rejected and accepted records stay gone
    finally:
        sc.close()


def test_lock_expiry_hands_records_to_another_member(broker) -> None:
    setup(broker, "q-lock", "g-lock", share_record_lock_duration_ms="1000")
    produce(broker.bootstrap, "q-lock", 5)
    holder = consumer(broker.bootstrap, "g-lock", explicit=True)
    holder.subscribe(["q-lock"])
    other = consumer(broker.bootstrap, "g-lock")
    try:
        held = poll_records(holder, 5)
        assert sorted(m.offset() for m in held) == list(range(5))
        started = time.monotonic()
        other.subscribe(["q-lock"])
        got = poll_records(other, 5, timeout=20)
        assert sorted(m.offset() for m in got) == list(range(5))
        assert {m.delivery_count() for m in got} == {2}
        assert time.monotonic() - started >= 0.5  # not before the lock ran out
    finally:
        other.close()
        holder.close()


def test_implicit_mode_accepts_on_the_next_poll(broker) -> None:
    setup(broker, "q-impl", "g-impl", share_record_lock_duration_ms="1000")
    produce(broker.bootstrap, "q-impl", 4)
    sc = consumer(broker.bootstrap, "g-impl")
    sc.subscribe(["q-impl"])
    try:
        assert sorted(m.offset() for m in poll_records(sc, 4)) == [0, 1, 2, 3]
        list(sc.poll(0.5))  # sends the implicit ACCEPTs
        time.sleep(1.5)  # past the lock: nothing comes back
        assert poll_records(sc, 1, timeout=1.5) == []
    finally:
        sc.close()
    DSO = api_by_name("DescribeShareGroupOffsets").request_class()
    with RawClient(broker.port) as c:
        req = [DSO.DescribeShareGroupOffsetsRequestGroup(group_id="g-impl", topics=None)]
        d = c.call("DescribeShareGroupOffsets", 1, groups=req).groups[0]
    (p,) = d.topics[0].partitions
    assert (p.start_offset, p.lag) == (4, 0)


@pytest.mark.parametrize("before_close", ["nothing", "commit_sync"])
def test_implicit_close_releases_the_last_poll_unless_committed(broker, before_close) -> None:
    """What the README says of implicit mode: close() does not ACCEPT the last poll's records
    (librdkafka, like Kafka's Java client): they go back to the group at once; commit_sync()
    before close() keeps them."""
    topic, group = f"q-close-{before_close}", f"g-close-{before_close}"
    setup(broker, topic, group)
    produce(broker.bootstrap, topic, 6)
    sc = consumer(broker.bootstrap, group)
    sc.subscribe([topic])
    try:
        assert sorted(m.offset() for m in poll_records(sc, 6)) == list(range(6))
        if before_close == "commit_sync":
            sc.commit_sync()
    finally:
        sc.close()
    other = consumer(broker.bootstrap, group)
    other.subscribe([topic])
    try:
        again = sorted(m.offset() for m in poll_records(other, 6, timeout=6 if before_close == "nothing" else 3))
    finally:
        other.close()
    assert again == (list(range(6)) if before_close == "nothing" else [])


def test_kill_nine_keeps_accepted_and_brings_back_the_rest(tmp_path) -> None:
    b = BrokerProcess(tmp_path / "data", FAST).start()
    try:
        setup(b, "q-crash", "g-crash")
        produce(b.bootstrap, "q-crash", 20)
        sc = consumer(b.bootstrap, "g-crash", explicit=True)
        sc.subscribe(["q-crash"])
        got = poll_records(sc, 20)
        assert len(got) == 20
        for m in got:
            if m.offset() % 2 == 0:
                sc.acknowledge(m, AckType.ACCEPT)
        assert all(v is None for v in sc.commit_sync(10).values())
        b.kill()
        sc.close()
        b.start()
        again = consumer(b.bootstrap, "g-crash")
        again.subscribe(["q-crash"])
        try:
            back = poll_records(again, 10, timeout=30)
            end = time.monotonic() + 2
            while time.monotonic() < end:  # nothing else may arrive
                back += [m for m in again.poll(0.2) if m.error() is None]
        finally:
            again.close()
        assert sorted(m.offset() for m in back) == list(range(1, 20, 2))
    finally:
        b.stop()


def test_rejected_and_exhausted_records_go_to_the_dead_letter_topic(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "dlq.q-dead", 1, errors_deadletterqueue_group_enable="true")  # the owner's opt-in
    setup(
        broker,
        "q-dead",
        "g-dead",
        share_delivery_count_limit="2",
        errors_deadletterqueue_topic_name="dlq.q-dead",
        errors_deadletterqueue_copy_record_enable="true",
    )
    produce(broker.bootstrap, "q-dead", 4)
    sc = consumer(broker.bootstrap, "g-dead", explicit=True)
    sc.subscribe(["q-dead"])
    try:
        first = poll_records(sc, 4)
        for m in first:  # 0: reject; 1: release twice (hits the limit of 2); 2, 3: accept
            sc.acknowledge(m, {0: AckType.REJECT, 1: AckType.RELEASE}.get(m.offset(), AckType.ACCEPT))
        sc.commit_sync(10)
        (m,) = poll_records(sc, 1)
        assert (m.offset(), m.delivery_count()) == (1, 2)
        sc.acknowledge(m, AckType.RELEASE)
        sc.commit_sync(10)
        assert poll_records(sc, 1, timeout=1.5) == []
    finally:
        sc.close()
    reader = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "dlq-reader",
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    # assigned: a subscription would join a new classic group, whose first join waits 3 s
    reader.assign([confluent_kafka.TopicPartition("dlq.q-dead", 0, confluent_kafka.OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 2 and time.monotonic() < deadline:
        m = reader.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m)
    reader.close()
    assert len(got) == 2
    meta = [{k: v.decode() for k, v in m.headers() if k.startswith("__dlq.errors.")} for m in got]
    assert [(h["__dlq.errors.offset"], h["__dlq.errors.message"], h["__dlq.errors.delivery.count"]) for h in meta] == [
        ("0", "Offset rejected by client.", "1"),
        ("1", "Offset delivery count exceeded the threshold.", "2"),
    ]
    assert all(h["__dlq.errors.group"] == "g-dead" and h["__dlq.errors.topic"] == "q-dead" for h in meta)
    assert all(h["__dlq.errors.partition"] == "0" and len(h) == 6 for h in meta)
    assert [m.value() for m in got] == [b"v0", b"v1"]  # copy.record.enable: the original values
