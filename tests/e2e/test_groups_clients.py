"""Classic consumer groups with real clients against a real broker process.

For confluent-kafka, aiokafka and kafka-python: three consumers in one group
split a 6-partition topic and read every record exactly once while
committing; one leaves and the other two take over its partitions within the
session timeout; after a broker restart a new member resumes exactly from the
committed offsets.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Producer

from tests.support.brokers import RawClient
from tests.support.clients import QUIET, create_topic

PARTITIONS = 6
GROUP_SETTINGS = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000")


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(start, start + count):
        p.produce(topic, key=b"k%d" % i, value=b"%d" % i, partition=i % PARTITIONS)
    assert p.flush(30) == 0


class Tally:
    """Which consumer saw which value, and what each one holds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[bytes, list[str]] = {}
        self.assignments: dict[str, set[int]] = {}

    def add(self, who: str, value: bytes) -> None:
        with self.lock:
            self.seen.setdefault(value, []).append(who)

    def values(self) -> set[bytes]:
        with self.lock:
            return set(self.seen)

    def duplicates(self) -> list[bytes]:
        with self.lock:
            return [v for v, who in self.seen.items() if len(who) > 1]


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


# -- confluent-kafka -------------------------------------------------------------------


class ConfluentMember(threading.Thread):
    def __init__(self, name: str, bootstrap: str, topic: str, group: str, tally: Tally) -> None:
        super().__init__(daemon=True)
        self.name_, self.tally = name, tally
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 30000,
                "heartbeat.interval.ms": 500,
                "partition.assignment.strategy": "range",
                **QUIET,
            }
        )
        self.c.subscribe([topic])
        self.stop = threading.Event()
        self.holding: set[int] = set()

    def run(self) -> None:
        # The consumer is only ever touched from this thread.
        while not self.stop.is_set():
            m = self.c.poll(0.1)
            self.holding = {tp.partition for tp in self.c.assignment()}
            if m is None or m.error():
                continue
            self.tally.add(self.name_, m.value())
            try:
                self.c.commit(m, asynchronous=False)
            except KafkaException:
                pass  # a rebalance started: the next owner resumes from the last good commit
        with self.tally.lock:
            self.tally.assignments[self.name_] = {tp.partition for tp in self.c.assignment()}
        self.c.close()


def threaded_group_scenario(broker_factory, topic_name: str, make_member: Callable) -> None:
    """The whole scenario for a client whose consumers run in threads.

    make_member(name, bootstrap, topic, tally) -> a started-later Thread with
    `.stop` (Event) and `.holding` (partitions it is assigned).
    """
    b = broker_factory(*GROUP_SETTINGS)
    b.start()
    bs = b.bootstrap
    create_topic(bs, topic_name, PARTITIONS)
    tally = Tally()
    members = [make_member(f"m{i}", bs, topic_name, tally) for i in range(3)]
    for m in members:
        m.start()
    wait_for(lambda: sorted(len(m.holding) for m in members) == [2, 2, 2], 60, "a stable 3-way split")
    produce(bs, topic_name, 0, 600)
    wait_for(lambda: len(tally.values()) == 600, 60, "600 records")
    assert tally.duplicates() == []
    # one member leaves; the other two take over its partitions
    members[2].stop.set()
    members[2].join(20)
    assert len(tally.assignments["m2"]) == 2
    taken = wait_for(lambda: members[0].holding | members[1].holding == set(range(PARTITIONS)), 30, "takeover")
    assert taken < 10.0  # within the session timeout (it left explicitly, so much sooner)
    produce(bs, topic_name, 600, 300)
    wait_for(lambda: len(tally.values()) == 900, 60, "900 records")
    assert tally.duplicates() == []
    for m in members[:2]:
        m.stop.set()
        m.join(20)
    # restart the broker: committed offsets survive; a new member resumes exactly there
    assert b.stop() == 0
    b.start()
    produce(b.bootstrap, topic_name, 900, 60)
    tally2 = Tally()
    newcomer = make_member("n", b.bootstrap, topic_name, tally2)
    newcomer.start()
    wait_for(lambda: len(tally2.values()) >= 60, 60, "records after restart")
    time.sleep(1.0)
    newcomer.stop.set()
    newcomer.join(20)
    assert tally2.values() == {b"%d" % i for i in range(900, 960)}


def test_confluent_group(broker_factory, topic_name) -> None:
    threaded_group_scenario(
        broker_factory, topic_name, lambda name, bs, topic, tally: ConfluentMember(name, bs, topic, "grp", tally)
    )


# -- aiokafka ---------------------------------------------------------------------------


def test_aiokafka_group(broker_factory, topic_name) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import CommitFailedError
    from aiokafka.structs import OffsetAndMetadata

    b = broker_factory(*GROUP_SETTINGS)
    b.start()
    create_topic(b.bootstrap, topic_name, PARTITIONS)

    async def member(name: str, tally: Tally, stop: asyncio.Event, holder: dict) -> None:
        c = AIOKafkaConsumer(
            topic_name,
            bootstrap_servers=b.bootstrap,
            group_id="agrp",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=30000,
            heartbeat_interval_ms=500,
        )
        await c.start()
        holder[name] = c
        try:
            while not stop.is_set():
                batch = await c.getmany(timeout_ms=100)
                for tp, msgs in batch.items():
                    for m in msgs:
                        tally.add(name, m.value)
                    try:
                        await c.commit({tp: OffsetAndMetadata(msgs[-1].offset + 1, "")})
                    except CommitFailedError:
                        pass  # rebalancing: the next owner resumes from the last good commit
        finally:
            tally.assignments[name] = {tp.partition for tp in c.assignment()}
            await c.stop()

    async def scenario() -> None:
        tally = Tally()
        holder: dict = {}
        stops = [asyncio.Event() for _ in range(3)]
        tasks = [asyncio.create_task(member(f"a{i}", tally, stops[i], holder)) for i in range(3)]
        await _await(lambda: len(holder) == 3 and sorted(len(c.assignment()) for c in holder.values()) == [2, 2, 2], 60)
        await asyncio.to_thread(produce, b.bootstrap, topic_name, 0, 600)
        await _await(lambda: len(tally.values()) == 600, 60)
        assert tally.duplicates() == []
        stops[2].set()
        await tasks[2]
        await _await(
            lambda: {tp.partition for n in ("a0", "a1") for tp in holder[n].assignment()} == set(range(PARTITIONS)),
            30,
        )
        await asyncio.to_thread(produce, b.bootstrap, topic_name, 600, 300)
        await _await(lambda: len(tally.values()) == 900, 60)
        assert tally.duplicates() == []
        for s in stops[:2]:
            s.set()
        await asyncio.gather(*tasks[:2])

    asyncio.run(scenario())
    assert b.stop() == 0
    b.start()
    produce(b.bootstrap, topic_name, 900, 60)

    async def resume() -> set[bytes]:
        tally, stop, holder = Tally(), asyncio.Event(), {}
        task = asyncio.create_task(member("n", tally, stop, holder))
        await _await(lambda: len(tally.values()) >= 60, 60)
        await asyncio.sleep(1.0)
        stop.set()
        await task
        return tally.values()

    assert asyncio.run(resume()) == {b"%d" % i for i in range(900, 960)}


async def _await(cond: Callable[[], bool], timeout: float) -> None:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)


# -- kafka-python -----------------------------------------------------------------------


from kafka.errors import CommitFailedError  # noqa: E402


class KafkaPythonMember(threading.Thread):
    def __init__(self, name: str, bootstrap: str, topic: str, group: str, tally: Tally) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaConsumer

        self.name_, self.tally, self.topic = name, tally, topic
        self.c = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=30000,
            heartbeat_interval_ms=500,
        )
        self.stop = threading.Event()
        self.holding: set[int] = set()

    def run(self) -> None:
        # kafka-python 3.0.12 sends its first JoinGroup before its metadata
        # refresh (held back by its ~100 ms backoff) has the subscribed topic,
        # so a leader assigns nothing ("No partition metadata") and rejoins
        # when the metadata arrives. That rejoin is the one path where it can
        # lose its own join: `need_rejoin()` is true only because the metadata
        # snapshot changed, the leader's assignment (run on its IO thread)
        # makes the snapshots equal again, and if poll()'s timer ran out while
        # the join was in flight, the next poll() sees need_rejoin() false and
        # never collects the finished join: no heartbeats, no assignment, and
        # after the session timeout it is out of the group for good. The
        # broker's side of that rejoin completes normally (Kafka answers the
        # same sequence the same way); the client just never reads the result.
        # Fetching the topic's metadata first makes the first assignment
        # complete, so that rejoin never happens.
        while not self.c.partitions_for_topic(self.topic) and not self.stop.is_set():
            time.sleep(0.05)
        while not self.stop.is_set():
            batch = self.c.poll(timeout_ms=100)
            for _tp, msgs in batch.items():
                for m in msgs:
                    self.tally.add(self.name_, m.value)
            if batch:
                try:
                    self.c.commit()
                except CommitFailedError:
                    pass  # rebalancing: the next owner resumes from the last good commit
            self.holding = {tp.partition for tp in self.c.assignment()}
        with self.tally.lock:
            self.tally.assignments[self.name_] = self.holding
        self.c.close()


def test_kafka_python_group(broker_factory, topic_name, caplog) -> None:
    threaded_group_scenario(
        broker_factory, topic_name, lambda name, bs, topic, tally: KafkaPythonMember(name, bs, topic, "kgrp", tally)
    )
    # Every leader assigned with the topic's partitions, so no member took
    # kafka-python's stall-prone metadata-change rejoin (see KafkaPythonMember.run).
    blind = [r for r in caplog.records if "No partition metadata" in r.getMessage()]
    assert not blind, "a kafka-python leader assigned before it had the topic's metadata"


# -- commits survive kill -9 ---------------------------------------------------------------


def test_acknowledged_commits_survive_kill9(broker_factory, topic_name) -> None:
    from shoal.protocol.api import api_by_name

    b = broker_factory(*GROUP_SETTINGS)
    b.start()
    create_topic(b.bootstrap, topic_name, PARTITIONS)
    OC = api_by_name("OffsetCommit").request_class()
    with RawClient(b.port) as c:
        for round_ in range(20):
            resp = c.call(
                "OffsetCommit",
                8,
                group_id="kgroup",
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    OC.OffsetCommitRequestTopic(
                        name=topic_name,
                        partitions=[
                            OC.OffsetCommitRequestPartition(partition_index=p, committed_offset=round_ * 10 + p)
                            for p in range(PARTITIONS)
                        ],
                    )
                ],
            )
            assert all(p.error_code == 0 for t in resp.topics for p in t.partitions)
    b.kill()
    b.start()
    with RawClient(b.port) as c:
        OF = api_by_name("OffsetFetch").request_class()
        deadline = time.monotonic() + 20
        while True:
            resp = c.call(
                "OffsetFetch",
                8,
                groups=[OF.OffsetFetchRequestGroup(group_id="kgroup", topics=None)],
                require_stable=False,
            )
            if resp.groups[0].error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    got = {(t.name, p.partition_index): p.committed_offset for t in resp.groups[0].topics for p in t.partitions}
    assert got == {(topic_name, p): 190 + p for p in range(PARTITIONS)}
