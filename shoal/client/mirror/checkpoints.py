"""Checkpoint records of ``shoal mirror``: their topic, keys and values (sans-IO).

Why a compacted topic on the target, as MirrorMaker 2 keeps its offset syncs and checkpoints:
the mirror's progress then lives with the data it describes, survives the machine that ran the
mirror, and needs no local state. One record per (source cluster, topic, partition): the key
names the partition, the value is its ``OffsetMap``. Compaction keeps the newest value per key.
Keys are canonical JSON (sorted keys, no spaces) so that equal keys are equal bytes, which is
what compaction compares. The source cluster id is part of the key, so two sources can mirror
into one target without mixing their progress.

A checkpoint is written only after every record it covers was acknowledged by the target, so it
never claims more than the target holds; it may claim less (the mirror was killed between an
acknowledgement and the next checkpoint), which the runner settles by reading the target's tail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from shoal.client.mirror.offsets import OffsetMap

__all__ = [
    "CHECKPOINT_TOPIC",
    "CHECKPOINT_TOPIC_CONFIGS",
    "CheckpointKey",
    "decode_checkpoint",
    "encode_checkpoint",
]

CHECKPOINT_TOPIC = "shoal-mirror.checkpoints"
CHECKPOINT_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
_VERSION = 1


@dataclass(frozen=True, slots=True)
class CheckpointKey:
    source_cluster: str
    topic: str
    partition: int

    def encode(self) -> bytes:
        doc = {"cluster": self.source_cluster, "partition": self.partition, "topic": self.topic, "v": _VERSION}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> CheckpointKey | None:
        """None for a key this version does not write (another tool's record, a newer version)."""
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("v") != _VERSION:
                return None
            return cls(str(doc["cluster"]), str(doc["topic"]), int(doc["partition"]))
        except (ValueError, KeyError, TypeError):
            return None


def encode_checkpoint(key: CheckpointKey, offsets: OffsetMap) -> tuple[bytes, bytes]:
    value = dict(offsets.to_json(), v=_VERSION)
    return key.encode(), json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def decode_checkpoint(raw_key: bytes | None, raw_value: bytes | None) -> tuple[CheckpointKey, OffsetMap | None] | None:
    """A checkpoint record as (key, map); the map is None for a tombstone. None when the record
    is not a checkpoint of this version."""
    if raw_key is None:
        return None
    key = CheckpointKey.decode(raw_key)
    if key is None:
        return None
    if raw_value is None:
        return key, None
    try:
        doc = json.loads(raw_value)
        if not isinstance(doc, dict) or doc.get("v") != _VERSION:
            return None
        return key, OffsetMap.from_json(doc)
    except (ValueError, KeyError, TypeError):
        return None
