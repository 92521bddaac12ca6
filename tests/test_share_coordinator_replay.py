"""Replay equivalence of the share coordinator: share-partition state is what its log says.

The share coordinator's operations (initialize, read with a new leader
epoch, write, delete, a deleted topic's cleanup) return records and change
nothing; the runtime appends the records and replays them into the shard.
A random sequence of operations on a few share-partitions, with snapshots
every few updates, must leave a shard whose durable state equals that of a
fresh shard fed the encoded log: from its start, and from the offset the
coordinator prunes the log to (the oldest snapshot still needed). The last
test does the same through a real broker, pruning and a crash restart.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shoal.broker.share_coordinator.shard import ACKNOWLEDGED, ARCHIVED, AVAILABLE, ShareStateShard
from shoal.protocol.coordinator_records import CoordinatorRecord, serde
from shoal.protocol.errors import ErrorCode
from shoal.testing import EmbeddedBroker

SERDE = serde("share")
GROUPS = ["g0", "g1"]
TOPICS = [uuid.UUID(int=7), uuid.UUID(int=8)]
KEYS = [(g, t, p) for g in GROUPS for t in TOPICS for p in range(2)]


def dump(shard: ShareStateShard) -> dict[tuple, Any]:
    """The durable state of each share-partition (what a reader or the leader gets back)."""
    return {
        key: (
            s.snapshot_epoch,
            s.state_epoch,
            s.leader_epoch,
            s.start_offset,
            s.delivery_complete_count,
            s.create_timestamp,
            s.write_timestamp,
            tuple(s.state_batches),
        )
        for key, s in shard.states.items()
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class ShareStateReplay(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.every = 3
        self.shard = ShareStateShard(0, snapshot_every=self.every, now_ms=self.clock)
        self.log: list[tuple[bytes, bytes | None]] = []

    def run(self, op: Any) -> Any:
        """What the runtime does with an operation: append its records, replay them."""
        records, result = op(self.shard)
        for r in records:
            self.log.append((SERDE.encode_key(r.name, r.key), SERDE.encode_value(r.name, r.value, r.value_version)))
            version = r.value_version if r.value_version is not None else SERDE.latest_value_version(r.name)
            rt = SERDE.record_type(r.name)
            self.shard.replay(CoordinatorRecord(rt, r.key, r.value, version), len(self.log) - 1)
        self.clock.now += 1
        return result

    def replayed(self, start: int = 0) -> ShareStateShard:
        fresh = ShareStateShard(0, snapshot_every=self.every, now_ms=Clock())
        for offset in range(start, len(self.log)):
            key, value = self.log[offset]
            fresh.replay(SERDE.decode(key, value), offset)
        return fresh

    @rule(k=st.sampled_from(KEYS), epoch=st.integers(0, 3), start=st.integers(-1, 30))
    def initialize(self, k: tuple, epoch: int, start: int) -> None:
        self.run(lambda s: s.initialize(*k, epoch, start))

    @rule(
        k=st.sampled_from(KEYS),
        leader_epoch=st.integers(-1, 4),
        start=st.integers(-1, 40),
        batches=st.lists(
            st.tuples(st.integers(0, 5), st.integers(0, 4), st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED])),
            max_size=3,
        ),
        count=st.integers(-1, 50),
    )
    def write(self, k: tuple, leader_epoch: int, start: int, batches: list, count: int) -> None:
        cur = self.shard.state(*k)
        if cur is None:
            return  # the coordinator refuses writes of uninitialized state (INVALID_REQUEST)
        out, offset = [], max(start, 0)
        for gap, length, state in batches:
            first = offset + gap
            out.append((first, first + length, state, 1 + gap % 3))
            offset = first + length + 1
        self.run(lambda s: s.write(*k, cur.state_epoch, leader_epoch, start, out, count))

    @rule(k=st.sampled_from(KEYS), leader_epoch=st.integers(-1, 4))
    def read(self, k: tuple, leader_epoch: int) -> None:
        if self.shard.state(*k) is not None:
            self.run(lambda s: s.read(*k, leader_epoch))

    @rule(k=st.sampled_from(KEYS))
    def delete(self, k: tuple) -> None:
        assert self.run(lambda s: s.delete(*k)) == ErrorCode.NONE

    @rule(t=st.sampled_from(TOPICS))
    def topic_deleted(self, t: uuid.UUID) -> None:
        self.run(lambda s: s.delete_topic(t))
        assert not any(k[1] == t for k in self.shard.states)

    @invariant()
    def replay_is_equivalent(self) -> None:
        assert self.replayed().states == self.shard.states
        pruned = self.shard.redundant_offset(len(self.log))
        assert dump(self.replayed(pruned)) == dump(self.shard)


ShareStateReplay.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_share_state_replay = ShareStateReplay.TestCase


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
