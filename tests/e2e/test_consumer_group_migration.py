"""Online migration of a librdkafka group between the classic and the consumer protocol.

Two ``group.protocol=classic`` consumers read a topic, committing after each
record; a ``group.protocol=consumer`` member joins and the group becomes a
consumer group (ListGroups type, ConsumerGroupDescribe) holding the classic
two as classic members, with the committed offsets kept and no record read
twice (eager members with range, and cooperative-sticky ones, which revoke
only what moves and rejoin). The classic members then restart as consumer members one at a time
(a rolling upgrade), and every record is read once. Last the downgrade: a
classic member joins, the consumer members leave, and the group is a classic
group again whose member reads on from the committed offsets.
"""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException

from tests.e2e.test_consumer_group_protocol import (
    PARTITIONS,
    SETTINGS,
    Tally,
    committed,
    consumer_config,
    expected,
    produce,
    wait_for,
)
from tests.support.brokers import RawClient
from tests.support.clients import create_topic

TOPIC = "mig-e2e"
GROUP = "g-mig"
RETRY = {KafkaError.STALE_MEMBER_EPOCH, KafkaError.REBALANCE_IN_PROGRESS}


class Member(threading.Thread):
    """A librdkafka consumer of either protocol: records each value, then commits it synchronously."""

    def __init__(self, name: str, bootstrap: str, protocol: str, tally: Tally, strategy: str = "range") -> None:
        super().__init__(daemon=True)
        self.name_, self.tally = name, tally
        cfg = consumer_config(bootstrap, GROUP)
        cfg["group.protocol"] = protocol
        if protocol == "classic":
            cfg.update({"partition.assignment.strategy": strategy, "session.timeout.ms": 6000})
            cfg["heartbeat.interval.ms"] = 300
        self.c = Consumer(cfg)
        self.c.subscribe([TOPIC])
        self.running = True
        self.errors: list[str] = []
        self.start()

    def run(self) -> None:
        while self.running:
            m = self.c.poll(0.1)
            if m is None:
                continue
            if m.error():
                self.errors.append(str(m.error()))
                continue
            self.tally.add(self.name_, m.value())
            for _ in range(100):
                try:
                    self.c.commit(message=m, asynchronous=False)
                    break
                except KafkaException as e:
                    if e.args[0].code() not in RETRY:
                        self.errors.append(str(e))
                        break

    def close(self) -> None:
        self.running = False
        self.join(10)
        self.c.close()


def group_type(port: int) -> str | None:
    with RawClient(port) as c:
        groups = c.call("ListGroups", 5, states_filter=[], types_filter=[]).groups
    return {g.group_id: g.group_type for g in groups}.get(GROUP)


def classic_state(port: int) -> tuple[str, int]:
    with RawClient(port) as c:
        g = c.call("DescribeGroups", 5, groups=[GROUP], include_authorized_operations=False).groups[0]
    return g.group_state, len(g.members)


def members(port: int) -> tuple[str, list[int]]:
    """(state, member types) from ConsumerGroupDescribe: 0 classic, 1 consumer."""
    with RawClient(port) as c:
        g = c.call("ConsumerGroupDescribe", 1, group_ids=[GROUP], include_authorized_operations=False).groups[0]
    return g.group_state, sorted(m.member_type for m in g.members)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_rolling_upgrade_and_downgrade_with_librdkafka(broker_factory, strategy: str) -> None:
    b = broker_factory(*SETTINGS, process=True).start()
    bs = b.bootstrap
    create_topic(bs, TOPIC, PARTITIONS)
    tally = Tally()
    everyone = {"a", "b", "n", "a2", "b2", "z"}

    # 1. a classic group of two
    produce(bs, TOPIC, 0, 600)
    a = Member("a", bs, "classic", tally, strategy)
    bb = Member("b", bs, "classic", tally, strategy)
    want = expected(TOPIC, 0, 600)
    wait_for(lambda: tally.values() >= want, 60, "the classic members to read 600 records")
    assert group_type(b.port) == "classic"

    # 2. a consumer-protocol member joins: the group is upgraded, offsets and members kept
    n = Member("n", bs, "consumer", tally)
    wait_for(lambda: group_type(b.port) == "consumer", 30, "the upgrade")
    wait_for(lambda: members(b.port) == ("Stable", [0, 0, 1]), 30, "two classic and one consumer member")
    produce(bs, TOPIC, 600, 600)
    want |= expected(TOPIC, 600, 600)
    wait_for(lambda: tally.values() >= want, 60, "the mixed group to read 600 more")
    assert tally.read_twice_by(everyone) == []

    # 3. rolling upgrade: each classic member restarts with the consumer protocol
    a.close()
    a2 = Member("a2", bs, "consumer", tally)
    bb.close()
    b2 = Member("b2", bs, "consumer", tally)
    wait_for(lambda: members(b.port) == ("Stable", [1, 1, 1]), 30, "three consumer members")
    produce(bs, TOPIC, 1200, 600)
    want |= expected(TOPIC, 1200, 600)
    wait_for(lambda: tally.values() >= want, 60, "the upgraded group to read 600 more")
    assert tally.read_twice_by(everyone) == []

    # 4. downgrade: a classic member joins, the consumer members leave
    z = Member("z", bs, "classic", tally, strategy)
    wait_for(lambda: members(b.port) == ("Stable", [0, 1, 1, 1]), 30, "the classic member to join")
    for m in (a2, b2, n):
        m.close()
    wait_for(lambda: group_type(b.port) == "classic", 30, "the downgrade")
    # the downgrade starts a rebalance (a new generation): produce once z has rejoined
    wait_for(lambda: classic_state(b.port) == ("Stable", 1), 30, "z to rejoin the classic group")
    produce(bs, TOPIC, 1800, 300)
    want |= expected(TOPIC, 1800, 300)
    wait_for(lambda: tally.values() >= want, 60, "the classic member to read the last 300")
    z.close()
    assert tally.values() == want
    assert tally.read_twice_by(everyone) == []
    assert committed(b.port, GROUP) == {(TOPIC, p): 350 for p in range(PARTITIONS)}
    for m in (a, bb, n, a2, b2, z):
        assert not m.errors, (m.name_, m.errors)
