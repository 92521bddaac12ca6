"""Share-group dead-letter queues (KIP-1191, Kafka 4.4) and poison isolation (KAFKA-17541),
judged with librdkafka's ShareConsumer and Shoal's AsyncShareConsumer.

Rejected records and records past the delivery limit land on the group's dead-letter topic with
exactly Kafka's six ``__dlq.errors.*`` headers (and the original key and value when the group
copies them); a topic without the owner's opt-in, or outside the ``dlq.`` prefix, gets nothing;
records whose copy a kill -9 interrupted (ARCHIVING, persisted) are copied when the share
partition loads again; one bad record in a batch of 100 that the consumer keeps failing ends on
the dead-letter topic alone while the other 99 are accepted.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from shoal.broker.faults import HOLD_ENV
from shoal.client.share.consumer import AcknowledgeType, AsyncShareConsumer
from tests.support.brokers import BrokerProcess, InProcessBroker, RawClient
from tests.support.share_clients import FAST, acknowledged_up_to, poll_until, produce, setup
from tests.support.wire import create

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)
AckType = confluent_kafka.AcknowledgeType
kafka_admin = pytest.importorskip("confluent_kafka.admin")

HEADERS = [
    "__dlq.errors.topic",
    "__dlq.errors.partition",
    "__dlq.errors.offset",
    "__dlq.errors.group",
    "__dlq.errors.delivery.count",
    "__dlq.errors.message",
]
REJECTED = "Offset rejected by client."
EXCEEDED = "Offset delivery count exceeded the threshold."


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("dead-letter") / "data", FAST).start()
    yield b
    b.stop()


def share_consumer(bootstrap: str, group: str):
    return confluent_kafka.ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0, "share.acknowledgement.mode": "explicit"}
    )


def poll_records(sc, want: int, timeout: float = 20.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        for m in sc.poll(0.2):
            assert m.error() is None, m.error()
            out.append(m)
    return out


def dead_letters(bootstrap: str, topic: str, want: int, timeout: float = 15.0) -> list[tuple]:
    """(partition, key, value, [(header, value)]) of the first `want` records of `topic`, by offset."""
    reader = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}-{time.monotonic()}",
         "auto.offset.reset": "earliest", "log_level": 0}
    )  # fmt: skip
    # Assigned, not subscribed: a new classic group's join waits group.initial.rebalance.delay.ms
    # (3 s). The topic may not exist yet (the broker creates it with the first copy): wait for it.
    deadline = time.monotonic() + timeout
    partitions: dict = {}
    while not partitions and time.monotonic() < deadline:
        found = reader.list_topics(topic, timeout=10).topics.get(topic)
        partitions = found.partitions if found is not None and found.error is None else {}
        if not partitions:
            time.sleep(0.1)
    reader.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in partitions])
    got: list = []
    try:
        while len(got) < want and time.monotonic() < deadline:
            m = reader.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m)
    finally:
        reader.close()
    got.sort(key=lambda m: (m.partition(), m.offset()))
    return [(m.partition(), m.key(), m.value(), [(k, v.decode()) for k, v in m.headers() or []]) for m in got]


def end_offsets(bootstrap: str, topic: str, partitions: int = 1) -> list[int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "log_level": 0})
    try:
        return [c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), 10)[1] for p in range(partitions)]
    finally:
        c.close()


def expected_headers(topic: str, partition: int, offset: int, group: str, count: int, message: str) -> list:
    return list(zip(HEADERS, [topic, str(partition), str(offset), group, str(count), message], strict=True))


def test_librdkafka_rejected_and_exhausted_records_carry_kafkas_headers_and_the_record(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "dlq.d-rk", 1, errors_deadletterqueue_group_enable="true")
    setup(
        broker,
        "d-rk",
        "g-d-rk",
        share_delivery_count_limit="2",
        errors_deadletterqueue_topic_name="dlq.d-rk",
        errors_deadletterqueue_copy_record_enable="true",
    )
    produce(broker.bootstrap, "d-rk", 4)
    sc = share_consumer(broker.bootstrap, "g-d-rk")
    sc.subscribe(["d-rk"])
    try:
        # 0: reject; 1: release twice (the limit of 2); 2: release, then reject on its last delivery; 3: accept
        for m in poll_records(sc, 4):
            sc.acknowledge(m, {0: AckType.REJECT, 3: AckType.ACCEPT}.get(m.offset(), AckType.RELEASE))
        sc.commit_sync(10)
        again = poll_records(sc, 2)
        assert sorted((m.offset(), m.delivery_count()) for m in again) == [(1, 2), (2, 2)]
        for m in again:
            sc.acknowledge(m, AckType.RELEASE if m.offset() == 1 else AckType.REJECT)
        sc.commit_sync(10)
    finally:
        sc.close()
    assert dead_letters(broker.bootstrap, "dlq.d-rk", 3) == [
        (0, None, b"v0", expected_headers("d-rk", 0, 0, "g-d-rk", 1, REJECTED)),
        (0, None, b"v1", expected_headers("d-rk", 0, 1, "g-d-rk", 2, EXCEEDED)),
        (0, None, b"v2", expected_headers("d-rk", 0, 2, "g-d-rk", 2, REJECTED)),
    ]
    assert acknowledged_up_to(broker.port, "g-d-rk") == [(4, 0)]


def test_async_share_consumer_rejects_go_by_partition_without_the_record(broker) -> None:
    """Copying off (the default): headers only. Source partition p goes to p % 2 of the dead-letter topic."""
    with RawClient(broker.port) as c:
        create(c, "dlq.d-async", 2, errors_deadletterqueue_group_enable="true")
    setup(broker, "d-async", "g-d-async", 3, errors_deadletterqueue_topic_name="dlq.d-async")
    for p in range(3):
        produce(broker.bootstrap, "d-async", 1, partition=p, start=p)

    async def run() -> None:
        sc = AsyncShareConsumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "g-d-async"}, share_acknowledgement_mode="explicit"
        )
        await sc.start()
        try:
            sc.subscribe(["d-async"])
            got = await poll_until(sc, 3, ack=AcknowledgeType.REJECT)
            assert sorted(r.partition for r in got) == [0, 1, 2]
            assert set((await sc.commit_sync(10_000)).values()) == {None}
        finally:
            await sc.close()

    asyncio.run(run())
    assert dead_letters(broker.bootstrap, "dlq.d-async", 3) == [
        (0, None, None, expected_headers("d-async", 0, 0, "g-d-async", 1, REJECTED)),
        (0, None, None, expected_headers("d-async", 2, 0, "g-d-async", 1, REJECTED)),
        (1, None, None, expected_headers("d-async", 1, 0, "g-d-async", 1, REJECTED)),
    ]


@pytest.mark.parametrize(
    ("dlq", "opt_in", "why"),
    [
        ("dlq.d-closed", False, "does not have errors.deadletterqueue.group.enable=true"),
        ("d-unprefixed", True, "does not start with errors.deadletterqueue.topic.name.prefix"),
        ("dlq.d-missing", None, "does not exist and errors.deadletterqueue.auto.create.topics.enable is false"),
    ],
)
def test_a_topic_that_may_not_serve_gets_nothing_and_the_records_are_archived(broker, dlq, opt_in, why) -> None:
    topic, group = f"src-{dlq}", f"g-{dlq}"
    if opt_in is not None:
        with RawClient(broker.port) as c:
            create(c, dlq, 1, errors_deadletterqueue_group_enable=str(opt_in).lower())
    setup(broker, topic, group, errors_deadletterqueue_topic_name=dlq)
    produce(broker.bootstrap, topic, 3)
    sc = share_consumer(broker.bootstrap, group)
    sc.subscribe([topic])
    try:
        for m in poll_records(sc, 3):
            sc.acknowledge(m, AckType.REJECT)
        sc.commit_sync(10)
    finally:
        sc.close()
    deadline = time.monotonic() + 10
    while acknowledged_up_to(broker.port, group) != [(3, 0)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert acknowledged_up_to(broker.port, group) == [(3, 0)]  # archived all the same
    if opt_in is None:
        admin = kafka_admin.AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        assert dlq not in admin.list_topics(timeout=10).topics  # not created
    else:
        assert end_offsets(broker.bootstrap, dlq) == [0]
    assert why in broker.log_text()


def test_a_missing_topic_is_created_opted_in_when_the_broker_allows(tmp_path) -> None:
    b = InProcessBroker(tmp_path / "data", (*FAST, "errors.deadletterqueue.auto.create.topics.enable=true")).start()
    try:
        setup(b, "d-auto", "g-d-auto", errors_deadletterqueue_topic_name="dlq.d-auto")
        produce(b.bootstrap, "d-auto", 1)
        sc = share_consumer(b.bootstrap, "g-d-auto")
        sc.subscribe(["d-auto"])
        try:
            (m,) = poll_records(sc, 1)
            sc.acknowledge(m, AckType.REJECT)
            sc.commit_sync(10)
        finally:
            sc.close()
        assert dead_letters(b.bootstrap, "dlq.d-auto", 1) == [
            (0, None, None, expected_headers("d-auto", 0, 0, "g-d-auto", 1, REJECTED))
        ]
        admin = kafka_admin.AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        res = kafka_admin.ConfigResource(kafka_admin.ResourceType.TOPIC, "dlq.d-auto")
        configs = admin.describe_configs([res])[res].result(10)
        assert configs["errors.deadletterqueue.group.enable"].value == "true"
    finally:
        b.stop()


def test_archiving_records_are_copied_after_a_kill_9(tmp_path, monkeypatch) -> None:
    """The copy is held (fault point share.dead_letter) after ARCHIVING is durable; kill -9; the
    restarted broker copies them when the share partition loads, then archives them."""
    monkeypatch.setenv(HOLD_ENV, "share.dead_letter")
    b = BrokerProcess(tmp_path / "data", FAST).start()
    try:
        with RawClient(b.port) as c:
            create(c, "dlq.d-crash", 1, errors_deadletterqueue_group_enable="true")
        setup(
            b,
            "d-crash",
            "g-d-crash",
            errors_deadletterqueue_topic_name="dlq.d-crash",
            errors_deadletterqueue_copy_record_enable="true",
        )
        produce(b.bootstrap, "d-crash", 5)
        sc = share_consumer(b.bootstrap, "g-d-crash")
        sc.subscribe(["d-crash"])
        for m in poll_records(sc, 5):
            sc.acknowledge(m, AckType.REJECT if m.offset() in (1, 3) else AckType.ACCEPT)
        assert all(v is None for v in sc.commit_sync(10).values())
        deadline = time.monotonic() + 10
        while "dead-letter copies held" not in b.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "dead-letter copies held" in b.log_text()
        assert acknowledged_up_to(b.port, "g-d-crash") == [(1, 2)]  # the start waits at ARCHIVING 1
        assert end_offsets(b.bootstrap, "dlq.d-crash") == [0]
        b.kill()
        sc.close()
        monkeypatch.delenv(HOLD_ENV)
        b.start()
        again = share_consumer(b.bootstrap, "g-d-crash")
        again.subscribe(["d-crash"])  # its first ShareFetch loads the share partition
        try:
            deadline = time.monotonic() + 20
            while acknowledged_up_to(b.port, "g-d-crash") != [(5, 0)] and time.monotonic() < deadline:
                assert [m for m in again.poll(0.2) if m.error() is None] == []  # nothing is delivered again
        finally:
            again.close()
        assert acknowledged_up_to(b.port, "g-d-crash") == [(5, 0)]
        assert dead_letters(b.bootstrap, "dlq.d-crash", 2) == [
            (0, None, b"v1", expected_headers("d-crash", 0, 1, "g-d-crash", 1, REJECTED)),
            (0, None, b"v3", expected_headers("d-crash", 0, 3, "g-d-crash", 1, REJECTED)),
        ]
    finally:
        b.stop()


def test_one_poison_record_in_a_batch_of_100_is_dead_lettered_alone(broker) -> None:
    """The consumer RELEASEs everything a poll gave it whenever record 37 is among it, and accepts
    every other poll. With Kafka's halving the other 99 records are all accepted (none reaches
    the limit of 5) and record 37 alone reaches the dead-letter topic, at delivery count 5."""
    with RawClient(broker.port) as c:
        create(c, "dlq.d-poison", 1, errors_deadletterqueue_group_enable="true")
    setup(broker, "d-poison", "g-d-poison", errors_deadletterqueue_topic_name="dlq.d-poison")
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 100})
    for i in range(100):
        p.produce("d-poison", value=f"v{i}".encode(), partition=0)
    assert p.flush(10) == 0
    sc = share_consumer(broker.bootstrap, "g-d-poison")
    sc.subscribe(["d-poison"])
    counts: dict[int, list[int]] = {}
    try:
        deadline = time.monotonic() + 60
        while acknowledged_up_to(broker.port, "g-d-poison") != [(100, 0)] and time.monotonic() < deadline:
            got = [m for m in sc.poll(0.2) if m.error() is None]
            bad = any(m.offset() == 37 for m in got)
            for m in got:
                counts.setdefault(m.offset(), []).append(m.delivery_count())
                sc.acknowledge(m, AckType.RELEASE if bad else AckType.ACCEPT)
            if got:
                sc.commit_sync(10)
    finally:
        sc.close()
    assert acknowledged_up_to(broker.port, "g-d-poison") == [(100, 0)]
    assert counts[37] == [1, 2, 3, 4, 5]
    assert sorted(counts) == list(range(100)) and max(max(c) for c in counts.values()) == 5
    assert dead_letters(broker.bootstrap, "dlq.d-poison", 1) == [
        (0, None, None, expected_headers("d-poison", 0, 37, "g-d-poison", 5, EXCEEDED))
    ]
    assert end_offsets(broker.bootstrap, "dlq.d-poison") == [1]  # the 99 others were accepted
