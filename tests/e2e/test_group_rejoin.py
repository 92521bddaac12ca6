"""Reusing a classic group id: a member that leaves must not hold up the next one.

A librdkafka consumer that closes cleanly sends LeaveGroup. When it was the
last member, the group's rebalance completes at once and the group is Empty
(Kafka's GroupCoordinator: the DelayedJoin's "all members joined" holds for an
empty group). The next consumer of the same group then joins an Empty group
and is assigned after group.initial.rebalance.delay.ms, not after a session or
rebalance timeout. Every test here reuses its group id, which the other group
tests never do.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer

from tests.support.brokers import RawClient
from tests.support.clients import QUIET, create_topic

INITIAL_DELAY_MS = 1000
SETTINGS = (f"group.initial.rebalance.delay.ms={INITIAL_DELAY_MS}",)


def group_state(port: int, gid: str) -> tuple[str, int]:
    with RawClient(port) as c:
        for _ in range(200):
            found = c.call("FindCoordinator", 4, key_type=0, coordinator_keys=[gid])
            if found.coordinators[0].error_code == 0:
                break
            time.sleep(0.05)  # COORDINATOR_LOAD_IN_PROGRESS right after a start
        for _ in range(200):
            g = c.call("DescribeGroups", 5, groups=[gid]).groups[0]
            if g.error_code == 0:
                return g.group_state, len(g.members)
            time.sleep(0.05)
    raise AssertionError(f"DescribeGroups({gid}) kept failing with {g.error_code}")


def join_and_leave(bootstrap: str, topic: str, gid: str) -> float:
    """Seconds from subscribe until the consumer holds partitions; then it closes (LeaveGroup)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": gid, "session.timeout.ms": 45000, **QUIET})
    try:
        c.subscribe([topic])
        start = time.monotonic()
        while not c.assignment():
            c.poll(0.05)
            assert time.monotonic() - start < 60, "never assigned"
        return time.monotonic() - start
    finally:
        c.close()


def test_a_consumer_rejoining_a_group_is_assigned_after_the_initial_delay(broker_factory, topic_name) -> None:
    b = broker_factory(*SETTINGS).start()
    create_topic(b.bootstrap, topic_name, 2)
    gid = f"{topic_name}-g"
    waits = []
    for _ in range(3):
        left_at = time.monotonic()
        waits.append(join_and_leave(b.bootstrap, topic_name, gid))
        assert time.monotonic() - left_at < 3.5 + waits[-1]  # each one joins right after the last left
    # Each waits about the initial delay; before the fix every rejoin waited ~45 s (the session timeout).
    assert max(waits) < INITIAL_DELAY_MS / 1000 + 8, waits


@pytest.mark.parametrize("restart", ["clean", "kill -9"])
def test_a_group_whose_last_member_left_is_empty_at_once_and_after_a_restart(
    broker_factory, topic_name, restart
) -> None:
    b = broker_factory(*SETTINGS).start()
    create_topic(b.bootstrap, topic_name, 2)
    gid = f"{topic_name}-g"
    join_and_leave(b.bootstrap, topic_name, gid)
    assert group_state(b.port, gid) == ("Empty", 0)
    time.sleep(0.3)  # the Empty group's record is written with the leave's answer; let an fsync pass too
    if restart == "clean":
        assert b.stop() == 0
    else:
        b.kill()
    b.start()
    assert group_state(b.port, gid) == ("Empty", 0)
    # And the group is usable at once after the restart.
    assert join_and_leave(b.bootstrap, topic_name, gid) < INITIAL_DELAY_MS / 1000 + 8
