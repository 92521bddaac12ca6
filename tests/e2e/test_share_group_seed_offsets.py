"""AlterShareGroupOffsets for a share group that does not exist yet (Kafka 4.2, KAFKA-19662).

The admin seeds the offsets first; the group is created empty, its share
state initialized at the given offsets; the first member -- librdkafka's
ShareConsumer, with share.auto.offset.reset at its default (latest) so a
missed seed would show as nothing delivered -- starts exactly there, also
after the broker was killed right after the answer. What stays an error: an
id held by a classic group (GROUP_ID_NOT_FOUND), an unknown topic or partition
(UNKNOWN_TOPIC_OR_PARTITION per partition; a group that got nothing is not
created), an empty id (INVALID_GROUP_ID). Our AsyncAdmin and ``shoal
share-groups reset-offsets`` seed a new group the same way.
"""

from __future__ import annotations

import time

import pytest

from shoal.client import AsyncAdmin
from shoal.client.core.cluster import TopicPartition
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess, InProcessBroker, RawClient
from tests.support.cli import run_cli
from tests.support.wire import create

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)

FAST = (
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.share.min.heartbeat.interval.ms=200",
    "group.share.heartbeat.interval.ms=200",
    "group.share.assignment.interval.ms=0",
)
ASO = api_by_name("AlterShareGroupOffsets").request_class()
DSO = api_by_name("DescribeShareGroupOffsets").request_class()
OC = api_by_name("OffsetCommit").request_class()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("seed") / "data", FAST).start()
    yield b
    b.stop()


def alter(c: RawClient, group: str, topic: str, offsets: dict[int, int]) -> object:
    topics = [
        ASO.AlterShareGroupOffsetsRequestTopic(
            topic_name=topic,
            partitions=[
                ASO.AlterShareGroupOffsetsRequestPartition(partition_index=i, start_offset=o)
                for i, o in offsets.items()
            ],
        )
    ]
    return c.call("AlterShareGroupOffsets", 0, group_id=group, topics=topics)


def starts(c: RawClient, group: str) -> dict[tuple[str, int], int]:
    g = c.call(
        "DescribeShareGroupOffsets", 1, groups=[DSO.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]
    )
    g = g.groups[0]
    assert g.error_code == 0, g
    return {(t.topic_name, p.partition_index): p.start_offset for t in g.topics for p in t.partitions}


def share_state(c: RawClient, group: str) -> tuple[int, str]:
    d = c.call("ShareGroupDescribe", 1, group_ids=[group], include_authorized_operations=False).groups[0]
    return d.error_code, d.group_state


def produce(bootstrap: str, topic: str, n: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(10) == 0


def consume_offsets(bootstrap: str, group: str, topic: str, want: int, timeout: float = 25.0) -> list[int]:
    """What a fresh librdkafka ShareConsumer of `group` gets (it waits for `want`, then a little more)."""
    sc = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    sc.subscribe([topic])
    seen: list[int] = []
    try:
        deadline = time.monotonic() + timeout
        while len(seen) < want and time.monotonic() < deadline:
            for m in sc.poll(0.2):
                assert m.error() is None, m.error()
                seen.append(m.offset())
        end = time.monotonic() + 1.0  # nothing else may come
        while time.monotonic() < end:
            seen += [m.offset() for m in sc.poll(0.2) if m.error() is None]
    finally:
        sc.close()
    return sorted(seen)


def test_errors_that_remain(broker: BrokerProcess, topic_name: str) -> None:
    with RawClient(broker.port) as c:
        create(c, topic_name)
        # A classic group (here: offsets committed by a standalone consumer) keeps its id.
        classic = topic_name + "-classic"
        commit = OC.OffsetCommitRequestTopic(
            name=topic_name, partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)]
        )
        r = c.call("OffsetCommit", 8, group_id=classic, generation_id_or_member_epoch=-1, member_id="", topics=[commit])
        assert r.topics[0].partitions[0].error_code == 0
        a = alter(c, classic, topic_name, {0: 1})
        assert a.error_code == ErrorCode.GROUP_ID_NOT_FOUND and "not a share group" in a.error_message
        assert share_state(c, classic)[0] == ErrorCode.GROUP_ID_NOT_FOUND
        # Unknown topic / partition: per partition; a group that got nothing is not created.
        nothing = topic_name + "-nothing"
        a = alter(c, nothing, topic_name + "-no-such-topic", {0: 1})
        assert a.error_code == 0
        assert [(p.partition_index, p.error_code) for p in a.responses[0].partitions] == [
            (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        ]
        a = alter(c, nothing, topic_name, {7: 1})
        assert a.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert share_state(c, nothing)[0] == ErrorCode.GROUP_ID_NOT_FOUND
        assert alter(c, "", topic_name, {0: 1}).error_code == ErrorCode.INVALID_GROUP_ID
        # Part of a request may seed: the group is created for what succeeded.
        some = topic_name + "-some"
        a = alter(c, some, topic_name, {0: 0, 3: 0})
        assert [(p.partition_index, p.error_code) for p in a.responses[0].partitions] == [
            (0, 0),
            (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        assert share_state(c, some) == (0, "Empty") and starts(c, some) == {(topic_name, 0): 0}


def test_seeded_group_starts_at_the_offset_judged_by_librdkafka(broker: BrokerProcess, topic_name: str) -> None:
    group = topic_name + "-g"
    with RawClient(broker.port) as c:
        create(c, topic_name)
    produce(broker.bootstrap, topic_name, 10)
    with RawClient(broker.port) as c:
        assert share_state(c, group)[0] == ErrorCode.GROUP_ID_NOT_FOUND
        a = alter(c, group, topic_name, {0: 6})
        assert a.error_code == 0 and a.responses[0].partitions[0].error_code == 0, a
        assert share_state(c, group) == (0, "Empty")
        assert starts(c, group) == {(topic_name, 0): 6}
        # The id is a share group's now: the classic protocol is refused for it.
        JG = api_by_name("JoinGroup").request_class()
        j = c.call(
            "JoinGroup",
            5,
            group_id=group,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=b"")],
        )
        assert j.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # Seeding again (still empty) moves the start.
        assert alter(c, group, topic_name, {0: 7}).error_code == 0
        assert starts(c, group) == {(topic_name, 0): 7}
    # share.auto.offset.reset is "latest" for this group: only the seed makes 7..9 arrive.
    assert consume_offsets(broker.bootstrap, group, topic_name, 3) == [7, 8, 9]


def test_seed_survives_a_crash_and_the_clients_seed_new_groups(broker_factory, topic_name: str) -> None:
    b = broker_factory(*FAST).start()
    crash, admin_group, cli_group = topic_name + "-crash", topic_name + "-admin", topic_name + "-cli"
    with RawClient(b.port) as c:
        create(c, topic_name)
    produce(b.bootstrap, topic_name, 10)
    with RawClient(b.port) as c:
        assert alter(c, crash, topic_name, {0: 4}).error_code == 0
    b.kill()  # answered means durable: the group records and the share state
    b.start()
    with RawClient(b.port) as c:
        deadline = time.monotonic() + 15
        while share_state(c, crash)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline:
            time.sleep(0.1)
        assert share_state(c, crash) == (0, "Empty")
        assert starts(c, crash) == {(topic_name, 0): 4}
    assert consume_offsets(b.bootstrap, crash, topic_name, 6) == [4, 5, 6, 7, 8, 9]

    # Our AsyncAdmin: a new group is seeded, no GROUP_ID_NOT_FOUND.
    async def seed() -> dict:
        async with AsyncAdmin(bootstrap_servers=b.bootstrap) as admin:
            return await admin.alter_share_group_offsets(admin_group, {TopicPartition(topic_name, 0): 8})

    import asyncio

    assert asyncio.run(seed()) == {TopicPartition(topic_name, 0): None}
    # shoal share-groups reset-offsets on a group that does not exist yet.
    argv = ["share-groups", "reset-offsets", "--group", cli_group]
    argv += ["--topic", topic_name, "--to-offset", "9", "--execute", "--bootstrap-server", b.bootstrap]
    rc, _, err = run_cli(*argv)
    assert rc == 0, err
    with RawClient(b.port) as c:
        assert starts(c, admin_group) == {(topic_name, 0): 8}
        assert starts(c, cli_group) == {(topic_name, 0): 9}
    assert consume_offsets(b.bootstrap, cli_group, topic_name, 1) == [9]
    assert b.stop() == 0
