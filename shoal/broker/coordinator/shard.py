"""What a coordinator's shard and the runtime agree on, without the runtime: sans-IO.

Shards (``groups.shard.GroupShard``, ``share_coordinator.shard.ShareStateShard``) return
``Record``s from their operations and take ``replay`` calls; which partition
of the internal topic a key lives on is ``partition_for``, Kafka's rule. The
asyncio runtime that appends and replays is ``runtime``; keeping these apart
lets the shards stay free of asyncio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from shoal.protocol.coordinator_records import CoordinatorRecord
from shoal.protocol.java_hash import java_string_hashcode

__all__ = ["Record", "Shard", "partition_for"]


def partition_for(key: str, partitions: int) -> int:
    """Kafka's `Utils.abs(key.hashCode()) % partitions` (abs(MIN_VALUE) is 0)."""
    h = java_string_hashcode(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class Shard(Protocol):
    def replay(self, record: CoordinatorRecord, offset: int) -> None: ...


@dataclass(slots=True)
class Record:
    """A record an operation wants written: type name, key object, value object or None."""

    name: str
    key: Any
    value: Any = None
    value_version: int | None = None
