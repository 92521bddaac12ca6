"""The group coordinator shell holds every SyncGroup until the leader's assignment is durable.

In process (a real broker, its real log and runtime): the durability wait of
__consumer_offsets is gated so a test decides when (and whether) the fsync of
the GroupMetadata record completes. While it is pending the group stays
CompletingRebalance and a follower's SyncGroup waits; once durable all are
answered and the group is Stable; if the write fails the syncs get Kafka's
mapped error and the group prepares a new rebalance. After a restart the
group is restored with the assignment that was answered.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from shoal.broker.broker import Broker
from shoal.broker.config.settings import BrokerConfig
from shoal.broker.groups.classic import GroupState, JoinParams
from shoal.protocol.errors import ErrorCode
from tests.support.flush_gate import FlushGate

GID = "durable-sync"


async def start_broker(data_dir: Path) -> Broker:
    config = BrokerConfig.from_sources(
        {},
        [
            f"log.dirs={data_dir}",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "shoal.http.listeners=http://127.0.0.1:0",
            "offsets.topic.num.partitions=1",
            "group.initial.rebalance.delay.ms=200",  # both members make the first generation
        ],
    )
    broker = Broker(config)
    await broker.start()
    await broker.groups.runtime.loaded.wait()
    return broker


def group_log_gate(broker: Broker) -> FlushGate:
    """Holds the durability of __consumer_offsets writes until released (others flush normally)."""
    return FlushGate(broker, broker.groups.runtime.partition(0).log)


def params(member_id: str = "") -> JoinParams:
    return JoinParams(member_id, None, "c", "/127.0.0.1", 10_000, 10_000, "consumer", [("range", b"m")], False)


async def completing_group(broker: Broker) -> tuple[str, str, int]:
    """Two members joined (generation 1, CompletingRebalance); returns (leader, follower, generation)."""
    coord = broker.groups
    r1, second = await asyncio.wait_for(asyncio.gather(coord.join(GID, params()), coord.join(GID, params())), 10)
    assert r1.error == second.error == 0 and r1.generation_id == second.generation_id == 1
    leader = r1.leader
    follower = second.member_id if r1.member_id == leader else r1.member_id
    group = coord.runtime.shards[0].groups[GID]
    assert group.state == GroupState.COMPLETING_REBALANCE
    return leader, follower, 1


async def sync(broker: Broker, member: str, gen: int, assignments: dict[str, bytes] | None = None) -> asyncio.Task:
    task = asyncio.ensure_future(broker.groups.sync(GID, member, None, gen, "consumer", "range", assignments or {}))
    await asyncio.sleep(0)
    return task


async def test_follower_sync_held_until_the_assignment_is_durable_then_restored(tmp_path) -> None:
    broker = await start_broker(tmp_path)
    gate = group_log_gate(broker)
    try:
        leader, follower, gen = await completing_group(broker)
        group = broker.groups.runtime.shards[0].groups[GID]
        t_leader = await sync(broker, leader, gen, {leader: b"L", follower: b"F"})
        await gate.wait_held()
        assert gate.held, "the assignment was not written"
        assert group.state == GroupState.COMPLETING_REBALANCE
        t_follower = await sync(broker, follower, gen)  # between the leader's sync and the fsync
        await asyncio.sleep(0.05)
        assert not t_leader.done() and not t_follower.done()
        assert group.state == GroupState.COMPLETING_REBALANCE
        await gate.release()
        r_leader, r_follower = await asyncio.wait_for(asyncio.gather(t_leader, t_follower), 10)
        assert (r_leader.error, r_leader.assignment) == (0, b"L")
        assert (r_follower.error, r_follower.assignment) == (0, b"F")
        assert group.state == GroupState.STABLE
    finally:
        gate.close()
        await broker.stop()
    broker = await start_broker(tmp_path)  # the answered assignment survived
    try:
        group = broker.groups.runtime.shards[0].groups[GID]
        assert group.state == GroupState.STABLE and group.generation_id == gen
        assert {m: g.assignment for m, g in group.members.items()} == {leader: b"L", follower: b"F"}
    finally:
        await broker.stop()


async def test_failed_assignment_write_answers_not_coordinator_and_rebalances(tmp_path) -> None:
    broker = await start_broker(tmp_path)
    gate = group_log_gate(broker)
    try:
        leader, follower, gen = await completing_group(broker)
        group = broker.groups.runtime.shards[0].groups[GID]
        t_follower = await sync(broker, follower, gen)
        t_leader = await sync(broker, leader, gen, {leader: b"L", follower: b"F"})
        await gate.release(OSError(5, "Input/output error"))  # fsync failed: KAFKA_STORAGE_ERROR
        r_leader, r_follower = await asyncio.wait_for(asyncio.gather(t_leader, t_follower), 10)
        assert r_leader.error == r_follower.error == ErrorCode.NOT_COORDINATOR
        assert group.state == GroupState.PREPARING_REBALANCE
        assert all(m.assignment == b"" for m in group.members.values())
        # The members rejoin; the next generation completes and is stored normally.
        j1 = asyncio.ensure_future(broker.groups.join(GID, params(leader)))
        j2 = asyncio.ensure_future(broker.groups.join(GID, params(follower)))
        r1, r2 = await asyncio.wait_for(asyncio.gather(j1, j2), 10)
        assert r1.error == r2.error == 0 and r1.generation_id == gen + 1
        new_leader = r1.leader
        t = await sync(broker, new_leader, gen + 1, {leader: b"L2", follower: b"F2"})
        await gate.release()
        assert (await asyncio.wait_for(t, 10)).error == 0
        assert group.state == GroupState.STABLE
    finally:
        gate.close()
        await broker.stop()
