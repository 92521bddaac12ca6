"""``shoal mirror``'s run: check, create, copy, move groups (the asyncio shell).

Why in this order: everything that can refuse the run (unreachable clusters, a target topic
with fewer partitions, a share group with members on the target, the target's authorization
errors, found with a validate-only CreateTopics) is checked before the first write, so a refused
run leaves the target as it was. Then topics are created, the checkpoints read back, the target
tails reconciled (``copier``), records copied, and group offsets translated through the maps the
copy built. ``--once`` copies up to the source's end as it was at the start and stops;
``--follow`` keeps copying and moves groups again every ``sync_interval_s`` until ``stop`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shoal.client.admin.client import AsyncAdmin
from shoal.client.admin.types import ConfigResource, ConfigSource, NewTopic, OffsetSpec, TopicDescription
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import BrokerResponseError, KafkaClientError
from shoal.client.mirror.checkpoints import CHECKPOINT_TOPIC, CHECKPOINT_TOPIC_CONFIGS
from shoal.client.mirror.copier import Copier, end_offsets, read_checkpoints
from shoal.client.mirror.groups import GroupResult, check_share_groups_empty, sync_consumer_group, sync_share_group
from shoal.client.mirror.offsets import OffsetMap
from shoal.client.mirror.plan import (
    MirrorError,
    TopicPlan,
    TopicSpec,
    matcher,
    plan_topics,
    selectable_topic,
    settings_for,
)
from shoal.client.producer.producer import AsyncProducer

__all__ = ["MirrorOptions", "MirrorSummary", "run_mirror"]


@dataclass(slots=True)
class MirrorOptions:
    source: dict[str, Any]  # client settings of each side (bootstrap.servers, security, ...)
    target: dict[str, Any]
    topics: str | None = None  # regexes; None: everything
    groups: str | None = None
    share_groups: str | None = None
    follow: bool = False
    checkpoint_interval_s: float = 1.0
    sync_interval_s: float = 5.0
    connect_timeout_ms: int = 10_000


@dataclass(slots=True)
class MirrorSummary:
    topics_created: list[str] = field(default_factory=list)
    topics_existing: list[str] = field(default_factory=list)
    dropped_configs: dict[str, list[str]] = field(default_factory=dict)
    partitions: int = 0
    records: int = 0
    bytes: int = 0
    reconciled: int = 0
    seconds: float = 0.0
    groups: dict[str, GroupResult] = field(default_factory=dict)
    share_groups: dict[str, GroupResult] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        secs = max(self.seconds, 1e-9)
        return {
            "topics": {"created": self.topics_created, "existing": self.topics_existing},
            "configs_not_copied": self.dropped_configs,
            "partitions": self.partitions,
            "records": self.records,
            "bytes": self.bytes,
            "reconciled_after_restart": self.reconciled,
            "seconds": round(self.seconds, 3),
            "records_per_s": round(self.records / secs, 1),
            "mb_per_s": round(self.bytes / secs / 1e6, 3),
            "groups": {g: r.to_json() for g, r in sorted(self.groups.items())},
            "share_groups": {g: r.to_json() for g, r in sorted(self.share_groups.items())},
        }


Progress = Callable[[str, dict[str, Any]], None]


def _settings(base: Mapping[str, Any], timeout_ms: int) -> dict[str, Any]:
    s = settings_for("admin", base)
    s.setdefault("client.id", "shoal-mirror")
    s.setdefault("default.api.timeout.ms", max(timeout_ms, 1000))
    return s


async def _open(stack: contextlib.AsyncExitStack, base: Mapping[str, Any], side: str, timeout_ms: int) -> AsyncAdmin:
    admin = AsyncAdmin(_settings(base, timeout_ms))
    try:
        await admin.start()
    except KafkaClientError as e:
        await admin.close()
        raise MirrorError(f"the {side} cluster at {base.get('bootstrap.servers', '?')} is unreachable: {e}") from None
    stack.push_async_callback(admin.close)
    return admin


async def _reach(admin: AsyncAdmin, side: str, bootstrap: str, timeout_ms: int) -> str:
    """The cluster id, or a clear error when the cluster cannot be reached."""
    timeout_ms = min(timeout_ms, admin.config["default.api.timeout.ms"])
    try:
        d = await admin.describe_cluster(timeout_ms=timeout_ms)
    except KafkaClientError as e:
        raise MirrorError(f"the {side} cluster at {bootstrap} is unreachable: {e}") from None
    return d.cluster_id or bootstrap


async def _topic_specs(admin: AsyncAdmin, names: list[str], side: str) -> dict[str, TopicDescription]:
    if not names:
        return {}
    out: dict[str, TopicDescription] = {}
    for name, d in (await admin.describe_topics(names)).items():
        if isinstance(d, TopicDescription):
            out[name] = d
        elif isinstance(d, BrokerResponseError) and "AUTHORIZATION" in d.name:
            raise MirrorError(f"the {side} refused to describe topic {name!r}: {d}")
    return out


async def _overrides(admin: AsyncAdmin, topics: list[str]) -> dict[str, dict[str, str]]:
    if not topics:
        return {}
    res = [ConfigResource.topic(t) for t in topics]
    got = await admin.describe_configs(res)
    out: dict[str, dict[str, str]] = {}
    for r in res:
        entries = got[r]
        if isinstance(entries, BaseException):
            raise MirrorError(f"cannot read the configs of source topic {r.name!r}: {entries}")
        out[r.name] = {
            k: e.value
            for k, e in entries.items()
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG and e.value is not None
        }
    return out


async def _create(admin: AsyncAdmin, topics: list[NewTopic], *, validate_only: bool) -> None:
    if not topics:
        return
    answers = await admin.create_topics(topics, validate_only=validate_only)
    for name, err in answers.items():
        if err is None or err.name == "TOPIC_ALREADY_EXISTS":
            continue
        if "AUTHORIZATION" in err.name:
            raise MirrorError(f"the target refused to create topic {name!r}: {err} (the principal needs CREATE)")
        raise MirrorError(f"the target refused to create topic {name!r}: {err}")


class _Run:
    def __init__(self, opts: MirrorOptions, stop: asyncio.Event, progress: Progress | None) -> None:
        self.opts = opts
        self.stop = stop
        self.progress = progress or (lambda event, data: None)
        self.summary = MirrorSummary()

    async def run(self) -> MirrorSummary:
        o = self.opts
        started = time.monotonic()
        for side in (o.source, o.target):
            settings_for("admin", side)  # a misspelt setting of either side: before connecting anywhere
        async with contextlib.AsyncExitStack() as stack:
            src = await _open(stack, o.source, "source", o.connect_timeout_ms)
            tgt = await _open(stack, o.target, "target", o.connect_timeout_ms)
            cluster = await _reach(src, "source", o.source.get("bootstrap.servers", "?"), o.connect_timeout_ms)
            await _reach(tgt, "target", o.target.get("bootstrap.servers", "?"), o.connect_timeout_ms)
            plan, specs = await self._plan(src, tgt)
            groups, shares = await self._groups(src)
            problems = plan.problems + await check_share_groups_empty(tgt, shares)
            if problems:
                raise MirrorError("nothing was written: " + "; ".join(problems))
            new = [NewTopic(s.name, s.partitions, configs=s.configs) for s in plan.create]
            if specs:
                new.append(NewTopic(CHECKPOINT_TOPIC, 1, configs=dict(CHECKPOINT_TOPIC_CONFIGS)))
            await _create(tgt, new, validate_only=True)
            await _create(tgt, new, validate_only=False)
            s = self.summary
            s.topics_created = [t.name for t in plan.create]
            s.topics_existing = plan.existing
            s.dropped_configs = plan.dropped_configs
            if specs:
                await self._copy(src, tgt, cluster, specs, groups, shares)
            else:
                await self._sync_groups(src, tgt, groups, shares, {})
        s.seconds = time.monotonic() - started
        return s

    async def _plan(self, src: AsyncAdmin, tgt: AsyncAdmin) -> tuple[TopicPlan, list[TopicSpec]]:
        want = matcher(self.opts.topics)
        names = sorted(n for n in await src.list_topics() if selectable_topic(n) and want(n))
        described = await _topic_specs(src, names, "source")
        configs = await _overrides(src, sorted(described))
        specs = [TopicSpec(n, len(d.partitions), configs.get(n, {})) for n, d in sorted(described.items())]
        on_target = set(await tgt.list_topics())
        there = await _topic_specs(tgt, sorted(on_target & set(described)), "target")
        plan = plan_topics(specs, {n: len(d.partitions) for n, d in there.items()})
        self.progress("plan", {"topics": len(specs), "create": [t.name for t in plan.create]})
        return plan, specs

    async def _groups(self, src: AsyncAdmin) -> tuple[list[str], list[str]]:
        want_g, want_s = matcher(self.opts.groups), matcher(self.opts.share_groups)
        listed = await src.list_groups()
        groups = sorted(
            g.group_id
            for g in listed
            if g.type != "share" and g.protocol_type in ("consumer", "") and want_g(g.group_id)
        )
        shares = sorted(g.group_id for g in listed if g.type == "share" and want_s(g.group_id))
        return groups, shares

    async def _copy(
        self,
        src: AsyncAdmin,
        tgt: AsyncAdmin,
        cluster: str,
        specs: list[TopicSpec],
        groups: list[str],
        shares: list[str],
    ) -> None:
        o = self.opts
        tps = [TopicPartition(s.name, p) for s in specs for p in range(s.partitions)]
        self.summary.partitions = len(tps)
        saved = await read_checkpoints(o.target, tgt, cluster)
        starts = await end_offsets(src, tps, OffsetSpec.EARLIEST)
        target_ends = await end_offsets(tgt, tps, where="target")
        maps = {tp: saved.get(tp) or OffsetMap(starts[tp], target_ends[tp]) for tp in tps}
        fresh = [tp for tp in tps if tp not in saved]
        producer_settings = settings_for("producer", o.target)
        producer_settings.update(
            {
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 10,
                "batch.size": 512 * 1024,
                "max.request.size": 16 << 20,
                "buffer.memory": 128 << 20,
                "client.id": o.target.get("client.id", "shoal-mirror"),
            }
        )
        async with AsyncProducer(producer_settings) as producer:
            copier = Copier(
                o.source,
                producer,
                cluster,
                maps,
                checkpoint_interval_s=o.checkpoint_interval_s,
                on_progress=lambda n: self.progress("copied", {"records": n}),
            )
            if fresh:  # a checkpoint before the first record: where this copy starts on the target
                await copier.checkpoint(fresh, wait=True)
            self.summary.reconciled = await copier.reconcile(o.target, target_ends)
            until = None if o.follow else await end_offsets(src, tps)
            if until is not None:
                lag = sum(max(0, until[tp] - maps[tp].source_next) for tp in tps)
                self.progress("start", {"lag": lag, "partitions": len(tps)})
            if until is not None:
                await copier.run(self.stop, until)
            else:  # --follow: copy in the background, move groups every sync interval
                task = asyncio.create_task(copier.run(self.stop, None))
                stopping = asyncio.create_task(self.stop.wait())
                try:
                    while not task.done():
                        await self._sync_groups(src, tgt, groups, shares, maps)
                        await asyncio.wait({task, stopping}, timeout=o.sync_interval_s)
                        self.progress("follow", {"records": copier.stats.records})
                    await task
                finally:
                    stopping.cancel()
                    if not task.done():
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
            self.summary.records = copier.stats.records
            self.summary.bytes = copier.stats.bytes
        await self._sync_groups(src, tgt, groups, shares, maps)

    async def _sync_groups(
        self,
        src: AsyncAdmin,
        tgt: AsyncAdmin,
        groups: list[str],
        shares: list[str],
        maps: Mapping[TopicPartition, OffsetMap],
    ) -> None:
        for g in groups:
            self.summary.groups[g] = r = await sync_consumer_group(src, tgt, g, maps)
            self.progress("group", {"group": g, "written": len(r.written), "skipped": r.skipped})
        for g in shares:
            self.summary.share_groups[g] = r = await sync_share_group(src, tgt, g, maps)
            self.progress("share-group", {"group": g, "written": len(r.written), "skipped": r.skipped})


async def run_mirror(
    opts: MirrorOptions, stop: asyncio.Event | None = None, progress: Progress | None = None
) -> MirrorSummary:
    """Run one mirror (``--once``, or ``--follow`` until ``stop`` is set); returns its summary."""
    return await _Run(opts, stop or asyncio.Event(), progress).run()
