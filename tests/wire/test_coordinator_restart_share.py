"""The share coordinator's durable state survives pruning and a real crash restart: a
real broker's share-state shards equal a fresh replay of their partitions, and what
the restarted broker loads. The sans-IO state machine is in
tests/unit/test_share_coordinator_replay.py."""

from __future__ import annotations

from shoal.broker.share_coordinator.shard import ShareStateShard
from shoal.protocol.constants import ACKNOWLEDGED, ARCHIVED, AVAILABLE
from shoal.protocol.errors import ErrorCode
from shoal.testing import EmbeddedBroker
from tests.support.share_state import GROUPS, dump


async def test_share_state_survives_pruning_and_a_real_restart() -> None:
    async with EmbeddedBroker(
        share_coordinator_state_topic_num_partitions=2,
        share_coordinator_snapshot_update_records_per_snapshot=2,
    ) as eb:
        await eb.acreate_topic("a", 3)
        await eb.acreate_topic("b", 1)
        topics = eb.broker.topics
        a, b = topics.get("a").topic_id, topics.get("b").topic_id
        sc = eb.broker.share_coordinator
        await sc.loaded.wait()
        for g in GROUPS:
            for p in range(3):
                assert await sc.initialize(g, a, p, 1, 0) == ErrorCode.NONE
            assert await sc.initialize(g, b, 0, 1, 5) == ErrorCode.NONE
        for i in range(12):
            g, p = GROUPS[i % 2], i % 3
            state = [AVAILABLE, ACKNOWLEDGED, ARCHIVED][i % 3]
            error = await sc.write(g, a, p, 1, 1 + i // 6, i, [(i, i + 3, state, 1 + i % 2)], i)
            assert error == ErrorCode.NONE
        assert (await sc.read("g0", a, 1, 4)).error == ErrorCode.NONE  # a new leader epoch: written
        assert await sc.delete("g1", a, 2) == ErrorCode.NONE
        assert await sc.initialize("g0", b, 0, 2, 9) == ErrorCode.NONE  # a new state epoch
        before = {}
        for p, shard in sc.runtime.shards.items():
            fresh = ShareStateShard(p, snapshot_every=2)
            sc.runtime._replay_partition(p, fresh)
            assert fresh.states == shard.states
            before.update(dump(shard))
        assert len(before) == 7
        assert await sc.prune()  # the log start moves past superseded records

        await eb.arestart(clean=False)  # as kill -9
        sc = eb.broker.share_coordinator
        await sc.loaded.wait()
        after = {}
        for shard in sc.runtime.shards.values():
            after.update(dump(shard))
        assert after == before
