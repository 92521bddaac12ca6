"""What ``shoal mirror`` will do, decided before anything is written (sans-IO).

Why a plan first: bad input (a target topic with fewer partitions, a share group with members on
the target) must stop the run before it creates a topic or writes a record, so every check that
needs only descriptions of the two clusters is made here, on plain data the runner gathered.
Also here: which names the regexes select, which topic configs travel, the translation of a
group's committed offsets through the offset maps, and how a restart reconciles a checkpoint
with the target partition's actual end.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shoal.client.core.config import describe
from shoal.client.core.errors import ConfigError, KafkaClientError
from shoal.client.mirror.checkpoints import CHECKPOINT_TOPIC
from shoal.client.mirror.offsets import OffsetMap

__all__ = [
    "COPIED_TOPIC_CONFIGS",
    "MirrorError",
    "TopicPlan",
    "TopicSpec",
    "matcher",
    "plan_topics",
    "same_record",
    "settings_for",
    "share_configs",
    "tail_to_match",
    "translate_offsets",
]

TP = tuple[str, int]

# Topic-level configs Kafka 4.2 accepts that describe the data rather than the cluster holding
# it. Left out on purpose: message.timestamp.type (a LogAppendTime target would overwrite the
# copied timestamps), message.timestamp.before/after.max.ms (old records would be refused),
# min.insync.replicas, unclean.leader.election.enable and the throttled-replica lists (about the
# source's replicas), remote.storage.enable and local.retention.* (the target's own storage choice).
COPIED_TOPIC_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "delete.retention.ms",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "index.interval.bytes",
        "max.compaction.lag.ms",
        "max.message.bytes",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "preallocate",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.index.bytes",
        "segment.jitter.ms",
        "segment.ms",
    }
)


class MirrorError(KafkaClientError):
    """A refusal of the mirror: bad input or a cluster state it will not write over."""


def matcher(pattern: str | None) -> Callable[[str], bool]:
    """A whole-name match for a Java-style regex, as Kafka's tools apply --include (None: all)."""
    if pattern is None:
        return lambda name: True
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise MirrorError(f"bad regex {pattern!r}: {e}") from None
    return lambda name: rx.fullmatch(name) is not None


_KINDS = ("admin", "consumer", "producer")


def settings_for(kind: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The part of one side's settings that a client of ``kind`` takes: the mirror makes an
    admin, consumers and a producer from the same ``--source-property``/``--target-property``
    list, so ``linger.ms`` goes to the producer only. A name no client knows is an error."""
    known = {kind_: {name for name, *_ in describe(kind_)} for kind_ in _KINDS}
    unknown = sorted(k for k in settings if not any(k in names for names in known.values()))
    if unknown:
        raise ConfigError(unknown[0], "is not a setting of the admin, consumer or producer client")
    return {k: v for k, v in settings.items() if k in known[kind]}


def selectable_topic(name: str) -> bool:
    """Internal topics (``__consumer_offsets``, ...) and the mirror's own are never mirrored."""
    return not name.startswith("__") and name != CHECKPOINT_TOPIC and not name.startswith("shoal-mirror.")


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides only


@dataclass(slots=True)
class TopicPlan:
    create: list[TopicSpec] = field(default_factory=list)  # with the configs that travel
    existing: list[str] = field(default_factory=list)
    dropped_configs: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def plan_topics(source: Iterable[TopicSpec], target_partitions: Mapping[str, int]) -> TopicPlan:
    """Topics to create on the target, topics already there, and what stops the run."""
    plan = TopicPlan()
    for spec in sorted(source, key=lambda s: s.name):
        have = target_partitions.get(spec.name)
        if have is None:
            kept = {k: v for k, v in spec.configs.items() if k in COPIED_TOPIC_CONFIGS}
            dropped = sorted(set(spec.configs) - set(kept))
            if dropped:
                plan.dropped_configs[spec.name] = dropped
            plan.create.append(TopicSpec(spec.name, spec.partitions, kept))
        elif have < spec.partitions:
            plan.problems.append(
                f"target topic {spec.name!r} has {have} partitions, fewer than the source's {spec.partitions}: "
                f"add partitions on the target (shoal topics alter --partitions {spec.partitions}) and run again"
            )
        else:
            plan.existing.append(spec.name)
    return plan


def share_configs(overrides: Mapping[str, str]) -> dict[str, str]:
    """The per-group configs of a share group that travel: its ``share.*`` overrides."""
    return {k: v for k, v in sorted(overrides.items()) if k.startswith("share.")}


def translate_offsets(committed: Mapping[TP, int], maps: Mapping[TP, OffsetMap]) -> tuple[dict[TP, int], dict[TP, str]]:
    """Source committed offsets (or share start offsets) to target ones, and why others are left
    alone: a partition that is not mirrored, or a group ahead of the copy."""
    out: dict[TP, int] = {}
    skipped: dict[TP, str] = {}
    for tp, offset in sorted(committed.items()):
        m = maps.get(tp)
        if m is None:
            skipped[tp] = "partition not mirrored"
            continue
        translated = m.translate(offset)
        if translated is None:
            skipped[tp] = f"offset {offset} is past the copy (copied below {m.source_next})"
        else:
            out[tp] = translated
    return out, skipped


def tail_to_match(offsets: OffsetMap, target_end: int, tp: TP) -> int:
    """How many target records past the checkpoint a restart must match against the source (a
    copy acknowledged after the last checkpoint was written). A target shorter than the checkpoint
    lost records the mirror wrote: refuse rather than guess."""
    if target_end < offsets.target_next:
        raise MirrorError(
            f"target {tp[0]}-{tp[1]} ends at {target_end}, before the checkpoint's {offsets.target_next}: "
            "it lost mirrored records (deleted or truncated); delete the topic on the target to copy it afresh"
        )
    return target_end - offsets.target_next


def same_record(a: object, b: object) -> bool:
    """Whether two consumed records carry the same key, value, headers and timestamp."""
    return (
        getattr(a, "key", None) == getattr(b, "key", None)
        and getattr(a, "value", None) == getattr(b, "value", None)
        and list(getattr(a, "headers", None) or []) == list(getattr(b, "headers", None) or [])
        and getattr(a, "timestamp", None) == getattr(b, "timestamp", None)
    )
