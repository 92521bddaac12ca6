"""shoal.testing.EmbeddedBroker and its pytest fixtures, judged by clients we did not write.

Each test uses the fixtures (or the class) as a user of the test kit would:
confluent-kafka (Producer, Consumer, ShareConsumer), aiokafka, kafka-python
and the bundled client talk to the in-process broker over real sockets; fault
injection makes a real client retry through NOT_LEADER_OR_FOLLOWER,
COORDINATOR_NOT_AVAILABLE and a dropped connection; 200 brokers started and
stopped leave no thread, descriptor or task behind.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import aiokafka
import confluent_kafka
import kafka
import pytest

from shoal import AsyncProducer, AsyncShareConsumer, EmbeddedBroker
from shoal.testing import FAST_TIMERS
from shoal.testing.embedded import memory_root

QUIET = {"log_level": 0}


def rdk_consume(bootstrap: str, topic: str, n: int, group: str, timeout: float = 20.0) -> list[bytes]:
    c = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **QUIET}
    )
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def kp_consume(bootstrap: str, topic: str, n: int, group: str, timeout_ms: int = 20000) -> list[bytes]:
    consumer = kafka.KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", consumer_timeout_ms=timeout_ms
    )
    try:
        return [m.value for _, m in zip(range(n), consumer)]
    finally:
        consumer.close()


# -- the fixtures, with every client --------------------------------------------------------
def test_confluent_producer_and_consumer_on_the_fixture(shoal_broker, shoal_bootstrap_servers) -> None:
    shoal_broker.create_topic("rdk", 1)
    p = confluent_kafka.Producer({"bootstrap.servers": shoal_bootstrap_servers, "enable.idempotence": True, **QUIET})
    for i in range(20):
        p.produce("rdk", value=b"v%d" % i, key=b"k")
    assert p.flush(20) == 0
    assert rdk_consume(shoal_bootstrap_servers, "rdk", 20, "g-rdk") == [b"v%d" % i for i in range(20)]
    assert [r.value for r in shoal_broker.read("rdk")] == [b"v%d" % i for i in range(20)]


@pytest.mark.skipif(not hasattr(confluent_kafka, "ShareConsumer"), reason="no ShareConsumer in this confluent-kafka")
@pytest.mark.shoal_config(fast_timers=True)
def test_confluent_share_consumer_and_the_share_partition_state(shoal_broker) -> None:
    shoal_broker.create_topic("queue", 1)
    shoal_broker.set_group_config("sg", {"share.auto.offset.reset": "earliest"})
    for i in range(5):
        shoal_broker.produce("queue", b"job-%d" % i)
    sc = confluent_kafka.ShareConsumer({"bootstrap.servers": shoal_broker.bootstrap_servers, "group.id": "sg", **QUIET})
    got: list[bytes] = []
    try:
        sc.subscribe(["queue"])
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            for m in sc.poll(0.5) or ():
                if m.error() is None:
                    got.append(m.value())
        assert sorted(got) == [b"job-%d" % i for i in range(5)]
        sc.commit_sync()
        state = shoal_broker.share_partition_state("sg", "queue", 0)
        assert state is not None and state.start_offset == 5
        assert shoal_broker.wait_group_stable("sg", members=1).state.lower() == "stable"
    finally:
        t = threading.Thread(target=sc.close, daemon=True)
        t.start()
        t.join(30)


def test_kafka_python_on_the_fixture(shoal_broker, shoal_bootstrap_servers) -> None:
    shoal_broker.create_topic("kp", 1)
    producer = kafka.KafkaProducer(bootstrap_servers=shoal_bootstrap_servers, acks="all")
    for i in range(10):
        producer.send("kp", b"m%d" % i)
    producer.flush(20)
    producer.close()
    assert kp_consume(shoal_bootstrap_servers, "kp", 10, "g-kp", 10000) == [b"m%d" % i for i in range(10)]


async def test_aiokafka_on_the_fixture(shoal_broker, shoal_bootstrap_servers) -> None:
    await asyncio.to_thread(shoal_broker.create_topic, "aio", 1)
    async with aiokafka.AIOKafkaProducer(bootstrap_servers=shoal_bootstrap_servers, acks="all") as p:
        for i in range(10):
            await p.send_and_wait("aio", b"a%d" % i)
    consumer = aiokafka.AIOKafkaConsumer(
        "aio", bootstrap_servers=shoal_bootstrap_servers, group_id="g-aio", auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        got: list[bytes] = []
        async with asyncio.timeout(20):
            while len(got) < 10:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
    finally:
        await consumer.stop()
    assert got == [b"a%d" % i for i in range(10)]


@pytest.mark.shoal_config({"group.share.record.lock.duration.ms": 1000}, fast_timers=True)
async def test_bundled_client_on_the_fixture(shoal_broker, shoal_bootstrap_servers) -> None:
    assert shoal_broker.broker.config.get("group.initial.rebalance.delay.ms") == 0
    await asyncio.to_thread(shoal_broker.create_topic, "own", 1)
    await asyncio.to_thread(shoal_broker.set_group_config, "own-sg", {"share.auto.offset.reset": "earliest"})
    async with AsyncProducer(bootstrap_servers=shoal_bootstrap_servers) as p:
        for i in range(5):
            await p.send_and_wait("own", b"o%d" % i)
    async with AsyncShareConsumer(bootstrap_servers=shoal_bootstrap_servers, group_id="own-sg") as sc:
        sc.subscribe(["own"])
        got: list[bytes] = []
        async with asyncio.timeout(20):
            while len(got) < 5:
                got += [r.value for r in await sc.poll(timeout_ms=500)]
        await sc.commit_sync()
    assert sorted(got) == [b"o%d" % i for i in range(5)]


@pytest.mark.shoal_config(num_partitions=3)
def test_marker_settings_reach_the_broker(shoal_broker) -> None:
    assert shoal_broker.broker.config.get("num.partitions") == 3
    shoal_broker.produce("auto-created", b"x")  # auto-created with the marker's partition count
    assert len(shoal_broker.call(lambda: shoal_broker.broker.topics.get("auto-created").partitions)) == 3


def test_module_and_session_brokers_are_shared(shoal_broker_module, shoal_broker_session) -> None:
    assert shoal_broker_module is not shoal_broker_session
    assert shoal_broker_module.running and shoal_broker_session.running
    assert shoal_broker_module.bootstrap_servers != shoal_broker_session.bootstrap_servers


# -- fault injection: real clients retrying ---------------------------------------------------
def test_librdkafka_producer_retries_through_not_leader_or_follower(shoal_broker) -> None:
    shoal_broker.create_topic("nl", 1)
    shoal_broker.faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER", times=3)
    p = confluent_kafka.Producer(
        {"bootstrap.servers": shoal_broker.bootstrap_servers, "enable.idempotence": True, **QUIET}
    )
    reports: list = []
    p.produce("nl", b"through", on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(30) == 0
    assert reports == [(None, 0)]
    assert shoal_broker.faults.injected["Produce:fail"] == 3 and shoal_broker.faults.pending() == {}
    assert [r.value for r in shoal_broker.read("nl")] == [b"through"]  # retried, written once


def test_kafka_python_consumer_retries_through_coordinator_not_available(shoal_broker) -> None:
    shoal_broker.create_topic("cna", 1)
    shoal_broker.produce("cna", b"one")
    shoal_broker.faults.fail("FindCoordinator", "COORDINATOR_NOT_AVAILABLE", times=3)
    assert kp_consume(shoal_broker.bootstrap_servers, "cna", 1, "g-cna") == [b"one"]
    assert shoal_broker.faults.injected["FindCoordinator:fail"] == 3


async def test_bundled_producer_survives_a_dropped_connection(shoal_broker) -> None:
    await asyncio.to_thread(shoal_broker.create_topic, "drop", 1)
    shoal_broker.faults.drop("Produce", times=1)
    async with AsyncProducer(bootstrap_servers=shoal_broker.bootstrap_servers, enable_idempotence=True) as p:
        meta = await p.send_and_wait("drop", b"again")
    assert meta.offset == 0
    assert shoal_broker.faults.injected["Produce:drop"] == 1
    assert [r.value for r in await asyncio.to_thread(shoal_broker.read, "drop")] == [b"again"]


def test_librdkafka_consumer_rides_out_a_delayed_fetch_and_an_intercepted_metadata(shoal_broker) -> None:
    shoal_broker.create_topic("slow", 1)
    shoal_broker.produce("slow", b"late")
    seen: list[str] = []

    def watch(request):
        seen.append(request.client_id or "")
        return None  # let the broker answer

    shoal_broker.faults.intercept("Metadata", watch)
    shoal_broker.faults.delay("Fetch", 300, times=2)
    started = time.monotonic()
    assert rdk_consume(shoal_broker.bootstrap_servers, "slow", 1, "g-slow") == [b"late"]
    assert time.monotonic() - started >= 0.3
    assert seen and "rdkafka" in seen


# -- the class itself --------------------------------------------------------------------
async def test_async_use_runs_on_the_callers_loop() -> None:
    async with EmbeddedBroker(fast_timers=True) as b:
        assert b.broker._loop is asyncio.get_running_loop()
        await b.acreate_topic("a", 2)
        assert await b.aproduce("a", "v", partition=1) == 0
        assert [r.value for r in await b.aread("a", 1)] == [b"v"]
        with pytest.raises(RuntimeError, match="a-prefixed"):
            b.produce("a", b"blocking call on the caller's loop")
    assert not b.running


def test_settings_are_checked_at_construction() -> None:
    from shoal.broker.config.keys import ConfigError

    with pytest.raises(ConfigError, match=r"num\.partitions"):
        EmbeddedBroker(num_partitions=0)
    assert FAST_TIMERS["group.initial.rebalance.delay.ms"] == 0


def acks1(bootstrap: str, topic: str, value: bytes) -> None:
    """One record with acks=1: acknowledged once written, before any fsync (as Kafka does)."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1, **QUIET})
    p.produce(topic, value)
    assert p.flush(20) == 0


def test_restart_clean_keeps_everything_and_a_crash_drops_what_was_not_fsynced() -> None:
    with EmbeddedBroker(fast_timers=True) as b:
        b.create_topic("r", 1)
        port = b.port
        b.produce("r", b"kept")  # acks=all: Shoal fsyncs before it answers
        acks1(b.bootstrap_servers, "r", b"page cache only")
        b.restart(clean=False, lose_unflushed=False)  # a process crash: the page cache keeps it
        assert b.port == port and b.call(lambda: b.broker.clean_start) is False
        assert [r.value for r in b.read("r")] == [b"kept", b"page cache only"]
        acks1(b.bootstrap_servers, "r", b"lost")
        b.restart(clean=False)  # a power cut: the record never fsynced is gone
        assert [r.value for r in b.read("r")] == [b"kept", b"page cache only"]
        b.produce("r", b"after")
        b.restart(clean=True)
        assert b.call(lambda: b.broker.clean_start) is True
        assert [r.value for r in b.read("r")] == [b"kept", b"page cache only", b"after"]
        data = b.data_dir
    assert not data.exists()  # the temporary directory went with the broker


def test_an_unarmed_broker_counts_nothing_and_clear_disarms() -> None:
    with EmbeddedBroker() as b:
        b.faults.fail("Produce", 6, times=None)
        b.faults.delay("Fetch", 10)
        assert b.faults.pending() == {"Produce:fail": None, "Fetch:delay": 1}
        b.faults.clear()
        assert b.faults.pending() == {} and not b.faults.armed
        assert b.produce("fine", b"x") == 0
        assert b.faults.injected == {}


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_200_brokers_leak_no_threads_descriptors_or_tasks() -> None:
    def one() -> None:
        with EmbeddedBroker() as b:
            b.produce("t", b"x")

    one()  # imports, codecs and pools warmed once
    threads, fds = threading.active_count(), _fds()
    for _ in range(200):
        one()
    assert threading.active_count() == threads
    assert _fds() <= fds

    async def many() -> int:
        before = len(asyncio.all_tasks())
        for _ in range(200):
            async with EmbeddedBroker() as b:
                await b.aproduce("t", b"x")
        await asyncio.sleep(0)
        return len(asyncio.all_tasks()) - before

    assert asyncio.run(many()) == 0
    assert threading.active_count() == threads
    assert _fds() <= fds


def test_a_failed_acks0_produce_closes_the_connection_as_kafka_does() -> None:
    from shoal.protocol.api import api_by_name
    from tests.support.brokers import RawClient

    P = api_by_name("Produce").request_class()
    body = P(acks=0, timeout_ms=1000, topic_data=[P.TopicProduceData(name="z", partition_data=[])])
    with EmbeddedBroker() as b:
        b.faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER")
        with RawClient(b.port) as c:
            c.send("Produce", 9, body)  # acks=0: there is no answer to carry the error
            assert c.sock.recv(1) == b""  # closed instead
        assert b.faults.injected == {"Produce:fail": 1}


def test_in_memory_storage_lives_on_a_ram_filesystem_and_goes_at_stop() -> None:
    with open("/proc/mounts") as f:
        ram = {line.split()[1] for line in f if line.split()[2] in ("tmpfs", "ramfs")}
    with EmbeddedBroker(log_dirs=":memory:") as b:
        data = b.data_dir
        assert str(data.parent) in ram  # the data directory is on tmpfs, not on a disk
        b.create_topic("mem", partitions=1)
        for v in (b"a", b"b"):
            b.produce("mem", v)
        assert any(p.name.startswith("mem-0") for p in data.iterdir())
        b.restart(clean=False)  # a crash keeps what was fsynced (acks=all waits for it)
        assert [r.value for r in b.read("mem")] == [b"a", b"b"]
    assert not data.exists()


def test_in_memory_storage_is_refused_without_a_ram_filesystem(tmp_path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\n/dev/vda /dev/shm ext4 rw 0 0\n")
    with pytest.raises(ValueError, match="RAM filesystem"):
        memory_root(str(mounts))
    mounts.write_text("tmpfs /dev/shm tmpfs rw 0 0\n")
    assert memory_root(str(mounts)) == "/dev/shm"
