"""``shoal mirror``: move topics, consumer-group offsets and share-group state to another
Kafka-compatible cluster, with the bundled client only.

Why its own package: the decisions (the offset-translation map, the checkpoint records, the plan
of what to create and what refuses the run) are sans-IO and unit-tested (``offsets``,
``checkpoints``, ``plan``); the asyncio shells (``copier``, ``groups``, ``runner``) only move
records and make admin calls. The CLI verb is ``shoal.client.cli.mirror``.
"""

from __future__ import annotations

from shoal.client.mirror.checkpoints import CHECKPOINT_TOPIC
from shoal.client.mirror.offsets import OffsetMap
from shoal.client.mirror.plan import MirrorError

__all__ = ["CHECKPOINT_TOPIC", "MirrorError", "OffsetMap"]
