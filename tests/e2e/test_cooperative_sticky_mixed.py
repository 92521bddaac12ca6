"""cooperative-sticky (KIP-429) in one classic group of bundled AsyncConsumers and librdkafka consumers.

A bundled member and a librdkafka member split a 6-partition topic; then a
second bundled member joins, then a second librdkafka member. At each join
the rebalance callbacks of every member, of both kinds, show that only the
partitions that moved were revoked (nothing a member kept was ever revoked,
and no member lost everything as an eager rebalance would), that each moved
partition went to the newcomer, and the group ends balanced with every
partition held once. Records keep flowing to everyone throughout.
"""

from __future__ import annotations

import asyncio
import threading

from confluent_kafka import Consumer

from shoal.client import AsyncConsumer
from shoal.client.core.cluster import TopicPartition
from tests.e2e.test_consumer_group_protocol import Tally, produce, wait_for
from tests.e2e.test_kip848_bundled_consumer import Recorder
from tests.support.clients import QUIET, create_topic

PARTITIONS = 6


class BundledCooperative(threading.Thread):
    def __init__(self, name: str, bootstrap: str, group: str, topic: str, tally: Tally) -> None:
        super().__init__(daemon=True)
        self.name_, self.tally, self.topic = name, tally, topic
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "partition.assignment.strategy": ["cooperative-sticky"],
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
        self.listener = Recorder()
        self.running = True
        self.errors: list[BaseException] = []

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        try:
            async with AsyncConsumer(self.config) as c:
                c.subscribe([self.topic], self.listener)
                while self.running:
                    for records in (await c.getmany(timeout_ms=100)).values():
                        for r in records:
                            self.tally.add(self.name_, r.value)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.errors.append(e)

    def close(self) -> None:
        self.running = False
        self.join(30)


class RdkCooperative(threading.Thread):
    def __init__(self, name: str, bootstrap: str, group: str, topic: str, tally: Tally) -> None:
        super().__init__(daemon=True)
        self.name_, self.tally = name, tally
        self.listener = Recorder()
        self.c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "partition.assignment.strategy": "cooperative-sticky",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 300,
                **QUIET,
            }
        )

        def tps(parts) -> set[TopicPartition]:
            return {TopicPartition(p.topic, p.partition) for p in parts}

        self.c.subscribe(
            [topic],
            on_assign=lambda _c, parts: self.listener.on_partitions_assigned(tps(parts)),
            on_revoke=lambda _c, parts: self.listener.on_partitions_revoked(tps(parts)),
            on_lost=lambda _c, parts: self.listener.on_partitions_lost(tps(parts)),
        )
        self.running = True
        self.errors: list[str] = []

    def run(self) -> None:
        while self.running:
            m = self.c.poll(0.1)
            if m is None:
                continue
            if m.error():
                self.errors.append(str(m.error()))
                continue
            self.tally.add(self.name_, m.value())

    def close(self) -> None:
        self.running = False
        self.join(10)
        self.c.close()


def revoked(member) -> set[TopicPartition]:
    return set().union(*(p for kind, p in member.listener.events if kind in ("revoked", "lost")))


def balanced(members, per_member: int) -> bool:
    held = [m.listener.held for m in members]
    union = set().union(*held)
    return len(union) == PARTITIONS == sum(map(len, held)) and all(len(h) == per_member for h in held)


def check_join(before: list, newcomer, per_member: int) -> None:
    """Since the marks: only moved partitions were revoked, and they all went to the newcomer."""
    everyone = [*before, newcomer]
    wait_for(lambda: balanced(everyone, per_member), 60, f"{len(everyone)} balanced members")
    moved: set[TopicPartition] = set()
    for m in before:
        new_events = m.listener.events[m.mark :]
        gone = set().union(*(p for kind, p in new_events if kind in ("revoked", "lost")))
        assert not any(kind == "lost" and p for kind, p in new_events), f"{m.name_} lost partitions"
        assert gone.isdisjoint(m.listener.held), f"{m.name_} revoked partitions it kept: {gone & m.listener.held}"
        assert len(m.listener.held) == per_member
        assert len(gone) == m.held_at_mark - per_member, f"{m.name_} revoked more than it had to: {gone}"
        moved |= gone
    assert moved == newcomer.listener.held  # each moved partition went to the newcomer, nothing else moved
    assert revoked(newcomer) == set()


def mark(members) -> None:
    for m in members:
        m.mark = len(m.listener.events)
        m.held_at_mark = len(m.listener.held)


def test_cooperative_sticky_with_librdkafka_members(broker_factory) -> None:
    b = broker_factory("offsets.topic.num.partitions=1", "group.initial.rebalance.delay.ms=0", process=True).start()
    bs = b.bootstrap
    topic = "coop-mixed"
    group = "g-coop"
    create_topic(bs, topic, PARTITIONS)
    tally = Tally()
    s1 = BundledCooperative("s1", bs, group, topic, tally)
    s1.start()
    wait_for(lambda: len(s1.listener.held) == PARTITIONS, 30, "the first member to take everything")
    mark([s1])
    a1 = RdkCooperative("a1", bs, group, topic, tally)  # librdkafka joins as soon as it subscribes
    a1.start()
    check_join([s1], a1, 3)

    mark([s1, a1])
    s2 = BundledCooperative("s2", bs, group, topic, tally)
    s2.start()
    check_join([s1, a1], s2, 2)

    mark([s1, a1, s2])
    a2 = RdkCooperative("a2", bs, group, topic, tally)
    a2.start()
    members = [s1, a1, s2, a2]
    wait_for(lambda: set().union(*(m.listener.held for m in members)) == {TopicPartition(topic, p) for p in range(6)}
             and sum(len(m.listener.held) for m in members) == PARTITIONS
             and sorted(len(m.listener.held) for m in members) == [1, 1, 2, 2], 60, "four balanced members")  # fmt: skip
    for m in (s1, a1, s2):
        gone = set().union(*(p for kind, p in m.listener.events[m.mark :] if kind in ("revoked", "lost")))
        assert gone.isdisjoint(m.listener.held)
        assert not any(kind == "lost" for kind, _ in m.listener.events[m.mark :])
    assert revoked(a2) == set()

    # records still reach every member after the last rebalance
    produce(bs, topic, 0, 600)
    wait_for(lambda: len(tally.values()) == 600, 60, "all records")
    assert {who for names in tally.seen.values() for who in names} == {"s1", "a1", "s2", "a2"}
    for m in members:
        m.close()
    assert s1.errors == [] and s2.errors == [] and not a1.errors and not a2.errors
