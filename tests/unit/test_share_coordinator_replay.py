"""Replay equivalence of the share coordinator: share-partition state is what its log says.

The share coordinator's operations (initialize, read with a new leader
epoch, write, delete, a deleted topic's cleanup) return records and change
nothing; the runtime appends the records and replays them into the shard.
A random sequence of operations on a few share-partitions, with snapshots
every few updates, must leave a shard whose durable state equals that of a
fresh shard fed the encoded log: from its start, and from the offset the
coordinator prunes the log to (the oldest snapshot still needed). tests/wire/test_coordinator_restart_share.py does the same through a
real broker, pruning and a crash restart.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shoal.broker.share_coordinator.shard import ShareStateShard
from shoal.protocol.constants import ACKNOWLEDGED, ARCHIVED, AVAILABLE
from shoal.protocol.coordinator_records import CoordinatorRecord
from shoal.protocol.errors import ErrorCode
from tests.support.share_state import KEYS, SERDE, TOPICS, Clock, dump


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
test_share_state_replay.pytestmark = [pytest.mark.slow]
