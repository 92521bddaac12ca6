"""The group coordinator's durable state survives a real restart: the state built by
random operations on a real broker equals a fresh replay of each __consumer_offsets
partition, and what a crash restart (as kill -9 with a power cut) loads. The sans-IO
replay-equivalence state machines are in tests/unit/test_coordinator_replay.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from shoal.broker.groups.classic import GroupState, JoinParams
from shoal.broker.groups.shard import GroupShard
from shoal.protocol.errors import ErrorCode
from shoal.testing import EmbeddedBroker
from tests.support.coordinator_state import (
    Clock,
    dump,
)


def _params(member_id: str = "", instance: str | None = None, meta: bytes = b"r") -> JoinParams:
    return JoinParams(member_id, instance, "app", "/127.0.0.1", 10_000, 300, "consumer", [("range", meta)], False)


async def _form(coord: Any, gid: str, *joiners: JoinParams) -> list[str]:
    """Members join `gid` together, the leader assigns, everyone syncs: returns their ids."""
    results = await asyncio.gather(*(coord.join(gid, p) for p in joiners))
    assert all(r.error == ErrorCode.NONE for r in results), results
    leader = results[0].leader
    assignments = {r.member_id: f"{gid}/{r.member_id[-4:]}".encode() for r in results}
    syncs = await asyncio.gather(
        *(
            coord.sync(
                gid,
                r.member_id,
                p.group_instance_id,
                r.generation_id,
                None,
                None,
                assignments if r.member_id == leader else {},
            )
            for r, p in zip(results, joiners)
        )
    )
    assert all(s.error == ErrorCode.NONE for s in syncs), syncs
    return [r.member_id for r in results]


def _broker_dump(coord: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {"classic": {}, "offsets": {}, "share": {}}
    for shard in coord.runtime.shards.values():
        for part, value in dump(shard).items():
            merged[part].update(value)
    return merged


async def _durable(coord: Any) -> None:
    for p in list(coord.runtime.shards):
        fut = coord.runtime.barrier(p)
        if fut is not None:
            await fut


async def test_group_coordinator_state_survives_a_real_restart() -> None:
    async with EmbeddedBroker(
        fast_timers=True, offsets_topic_num_partitions=3, share_coordinator_state_topic_num_partitions=2
    ) as eb:
        await eb.acreate_topic("t0", 3)
        await eb.acreate_topic("a", 2)
        coord = eb.broker.groups
        await coord.runtime.loaded.wait()

        # c0: two members, a second generation, offsets
        first = await _form(coord, "c0", _params())
        await _form(
            coord, "c0", _params(), _params(first[0])
        )  # (the newcomer first: the leader then completes the join)
        c0 = coord.runtime.shard_for("c0").groups["c0"]
        assert len(c0.members) == 2 and c0.generation_id == 2
        m = next(iter(c0.members.values()))
        error, errors = await coord.commit(
            "c0", c0.generation_id, m.member_id, None, [("t0", 0, 42, 1, "x"), ("t0", 2, 7, 1, None)]
        )
        assert (error, errors) == (ErrorCode.NONE, [ErrorCode.NONE, ErrorCode.NONE])
        # c1: a static member restarts in Stable (its new member id is written at once)
        await _form(coord, "c1", _params(instance="i0"))
        again = await coord.join("c1", _params(instance="i0"))
        assert again.error == ErrorCode.NONE
        # c2: its only member leaves: Empty, next generation
        (solo,) = await _form(coord, "c2", _params())
        assert coord.leave("c2", [(solo, None)]) == (ErrorCode.NONE, [ErrorCode.NONE])
        # c3: standalone commits, one deleted; c4: commits, then the group deleted
        await coord.commit("c3", -1, "", None, [("t0", 0, 1, -1, None), ("t0", 1, 2, -1, "m")])
        assert await coord.delete_offsets("c3", [("t0", 1)]) == (ErrorCode.NONE, [ErrorCode.NONE])
        await coord.commit("c4", -1, "", None, [("t0", 0, 5, -1, None)])
        assert await coord.delete_groups(["c4"]) == [ErrorCode.NONE]
        # c5: Stable, then a new member's join leaves it preparing a rebalance (nothing written for it)
        await _form(coord, "c5", _params())
        pending = asyncio.create_task(coord.join("c5", _params()))
        await asyncio.sleep(0.05)
        assert coord.runtime.shard_for("c5").groups["c5"].state == GroupState.PREPARING_REBALANCE
        # s0: a share group of two members, its partitions initialized and assigned, one leaves
        share = coord.share
        answers = [await share.heartbeat("s0", mid, 0, None, ["a"], "c", "h") for mid in ("sm0", "sm1")]
        assert all(a.error == ErrorCode.NONE for a in answers)
        g = share.find("s0")[2]
        for _ in range(100):
            if g.initialized:
                break
            await asyncio.sleep(0.02)
        assert g.initialized
        epoch = g.members["sm0"].member_epoch
        assert (await share.heartbeat("s0", "sm0", epoch, None, None, "c", "h")).error == ErrorCode.NONE
        assert (await share.heartbeat("s0", "sm1", -1, None, None, "c", "h")).error == ErrorCode.NONE
        await _durable(coord)

        before = _broker_dump(coord)
        assert set(before["classic"]) == {"c0", "c1", "c2", "c5"}
        assert before["classic"]["c2"][0] == "Empty" and before["classic"]["c5"][0] == "Stable"
        assert set(before["offsets"]) == {"c0", "c3"} and set(before["share"]) == {"s0"}
        # the log of each partition, replayed into a fresh shard, holds all of it
        for p, shard in coord.runtime.shards.items():
            fresh = GroupShard(p, coord.settings, Clock())
            coord.runtime._replay_partition(p, fresh)
            fresh.finish_loading()
            assert dump(fresh) == dump(shard)

        pending.cancel()
        await eb.arestart(clean=False)  # as kill -9 (and a power cut: unflushed bytes are lost)
        coord = eb.broker.groups
        await coord.runtime.loaded.wait()
        assert _broker_dump(coord) == before
