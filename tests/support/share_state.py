"""The durable state of share-state shards, canonical, for the replay-equivalence
tests (tests/unit/test_share_coordinator_replay.py) and the restart test
(tests/wire/test_coordinator_restart_share.py)."""

from __future__ import annotations

import uuid
from typing import Any

from shoal.broker.share_coordinator.shard import ShareStateShard
from shoal.protocol.coordinator_records import serde

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
