"""Copying records from the source to the target, with checkpoints (the asyncio shell).

Why this shape: one source consumer assigned every mirrored partition and one idempotent target
producer, so records of a partition leave in the order they were read and an acknowledged
record is never written twice by this process. Each fetched chunk is sent at once; the offset
map learns a chunk's target offsets only when the producer has acknowledged all of it, and a
checkpoint carries only what the map knows, so a checkpoint never runs ahead of the target.

After a kill -9 the target may hold records acknowledged after the last checkpoint. A new
process has a new producer id, so idempotence cannot catch those: before copying, the target's
end offset is compared with the checkpoint and any surplus records are read back and matched,
one for one, against the source records after the checkpoint (``plan.tail_to_match``). A match
extends the map; a difference means something else wrote to the target partition, and the run
stops rather than interleave. Chosen over a source-offset header on every copied record because
that would change the records' headers (the copy is meant to be byte-exact) and the matching
reads only the few records written since the last checkpoint.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shoal.client.admin.client import AsyncAdmin
from shoal.client.admin.types import ListOffsetsResult, OffsetSpec
from shoal.client.consumer.consumer import AsyncConsumer
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import BrokerResponseError
from shoal.client.core.records import ConsumerRecord
from shoal.client.mirror.checkpoints import CHECKPOINT_TOPIC, CheckpointKey, decode_checkpoint, encode_checkpoint
from shoal.client.mirror.offsets import OffsetMap
from shoal.client.mirror.plan import MirrorError, same_record, settings_for, tail_to_match
from shoal.client.producer.producer import AsyncProducer

__all__ = ["Copier", "end_offsets", "read_checkpoints"]

_CHUNK = 10_000  # records per getmany


async def end_offsets(
    admin: AsyncAdmin, tps: list[TopicPartition], spec: int = OffsetSpec.LATEST, where: str = "source"
) -> dict[TopicPartition, int]:
    """Offsets by spec, read_committed (what a read_committed copy can reach)."""
    if not tps:
        return {}
    got = await admin.list_offsets(dict.fromkeys(tps, spec), isolation_level="read_committed")
    out: dict[TopicPartition, int] = {}
    for tp, r in got.items():
        if not isinstance(r, ListOffsetsResult):
            raise MirrorError(f"{where} {tp}: cannot read its offsets: {r}")
        out[tp] = r.offset
    return out


def consumer_settings(base: Mapping[str, Any]) -> dict[str, Any]:
    s = settings_for("consumer", base)
    s.update(
        {
            "group.id": None,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "max.poll.records": _CHUNK,
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 8 << 20,
            "fetch.max.wait.ms": 200,
        }
    )
    return s


async def read_checkpoints(
    target: Mapping[str, Any], admin: AsyncAdmin, source_cluster: str
) -> dict[TopicPartition, OffsetMap]:
    """The newest checkpoint of every partition mirrored from ``source_cluster``."""
    topics = await admin.list_topics()
    if CHECKPOINT_TOPIC not in topics:
        return {}
    desc = (await admin.describe_topics([CHECKPOINT_TOPIC]))[CHECKPOINT_TOPIC]
    if isinstance(desc, BaseException):
        raise MirrorError(f"cannot describe {CHECKPOINT_TOPIC} on the target: {desc}")
    tps = [TopicPartition(CHECKPOINT_TOPIC, p.partition) for p in desc.partitions]
    ends = await end_offsets(admin, tps, where="target")
    out: dict[TopicPartition, OffsetMap] = {}
    wanted = {tp: end for tp, end in ends.items() if end > 0}
    if not wanted:
        return out
    async with AsyncConsumer(consumer_settings(target)) as c:
        c.assign(list(wanted))
        for tp in wanted:
            c.seek(tp, 0)
        while wanted:
            for recs in (await c.getmany(timeout_ms=1000)).values():
                for r in recs:
                    got = decode_checkpoint(r.key, r.value)
                    if got is None or got[0].source_cluster != source_cluster:
                        continue
                    key, m = got
                    mirrored = TopicPartition(key.topic, key.partition)
                    if m is None:
                        out.pop(mirrored, None)
                    else:
                        out[mirrored] = m
            for tp in list(wanted):
                if await c.position(tp) >= wanted[tp]:
                    del wanted[tp]
    return out


@dataclass(slots=True)
class _Chunk:
    tp: TopicPartition
    sent: list[tuple[int, Any]]  # (source offset, future of the target's RecordMetadata)
    position: int  # the source consumer's position after the chunk
    size: int


@dataclass(slots=True)
class CopyStats:
    records: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.monotonic)


class Copier:
    """Copies the assigned source partitions to the same partitions on the target."""

    def __init__(
        self,
        source: Mapping[str, Any],
        producer: AsyncProducer,
        source_cluster: str,
        maps: dict[TopicPartition, OffsetMap],
        *,
        checkpoint_interval_s: float = 1.0,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self._source = source
        self._producer = producer
        self._cluster = source_cluster
        self.maps = maps
        self._interval = checkpoint_interval_s
        self._on_progress = on_progress
        self._pending: deque[_Chunk] = deque()
        self._dirty: set[TopicPartition] = set()
        self._checkpoint_futs: list[Any] = []
        self.stats = CopyStats()

    # -- checkpoints -------------------------------------------------------------------
    async def checkpoint(self, tps: list[TopicPartition] | None = None, *, wait: bool = False) -> None:
        """Write the maps of ``tps`` (default: those that moved) to the checkpoint topic."""
        chosen = sorted(self._dirty) if tps is None else tps
        self._dirty.difference_update(chosen)
        for tp in chosen:
            k, v = encode_checkpoint(CheckpointKey(self._cluster, tp.topic, tp.partition), self.maps[tp])
            self._checkpoint_futs.append(await self._producer.send(CHECKPOINT_TOPIC, v, key=k, partition=0))
        done = [f for f in self._checkpoint_futs if f.done()] if not wait else list(self._checkpoint_futs)
        for f in done:
            await f  # raises the target's refusal, if any
        self._checkpoint_futs = [f for f in self._checkpoint_futs if not f.done()]

    # -- restart: settle records acknowledged after the last checkpoint ------------------------
    async def reconcile(self, target: Mapping[str, Any], target_ends: Mapping[TopicPartition, int]) -> int:
        """Extend the maps over target records written after their checkpoints; returns how many."""
        surplus = {tp: tail_to_match(self.maps[tp], target_ends[tp], tp) for tp in self.maps}
        surplus = {tp: n for tp, n in surplus.items() if n > 0}
        if not surplus:
            return 0
        async with (
            AsyncConsumer(consumer_settings(self._source)) as src,
            AsyncConsumer(consumer_settings(target)) as tgt,
        ):
            for tp, n in surplus.items():
                m = self.maps[tp]
                theirs = await _read(tgt, tp, m.target_next, n, exact=True)
                ours = await _read(src, tp, m.source_next, n, exact=False)
                if len(ours) < n:
                    raise MirrorError(
                        f"target {tp} holds {n} records past the checkpoint but the source has only "
                        f"{len(ours)} after offset {m.source_next}: the target partition was written by something else"
                    )
                for s, t in zip(ours, theirs, strict=True):
                    if not same_record(s, t):
                        raise MirrorError(
                            f"target {tp} offset {t.offset} differs from source offset {s.offset}: the target "
                            "partition was written by something other than this mirror; not copying into it"
                        )
                    m.add(s.offset, t.offset)
                self._dirty.add(tp)
        await self.checkpoint(wait=True)
        return sum(surplus.values())

    # -- copying -----------------------------------------------------------------------
    async def run(self, stop: asyncio.Event, until: Mapping[TopicPartition, int] | None) -> None:
        """Copy until every partition reached ``until`` (``--once``) or ``stop`` is set."""
        async with AsyncConsumer(consumer_settings(self._source)) as c:
            c.assign(list(self.maps))
            for tp, m in self.maps.items():
                c.seek(tp, m.source_next)
            last_cp = time.monotonic()
            while not stop.is_set():
                if until is not None and not self._pending and self._reached(until):
                    break
                batch = await c.getmany(timeout_ms=100 if self._pending else 500)
                for tp, recs in batch.items():
                    await self._send(tp, recs, await c.position(tp))
                if not batch:
                    await self._advance_idle(c)
                await self._drain(block=len(self._pending) > 64)
                if time.monotonic() - last_cp >= self._interval:
                    await self.checkpoint()
                    last_cp = time.monotonic()
            await self._producer.flush()
            await self._drain(block=True)
            await self.checkpoint(wait=True)

    def _reached(self, until: Mapping[TopicPartition, int]) -> bool:
        return all(self.maps[tp].source_next >= end for tp, end in until.items())

    async def _advance_idle(self, c: AsyncConsumer) -> None:
        """Nothing more to fetch: a position past markers or holes counts as copied."""
        if self._pending:
            return
        for tp in self.maps:
            pos = await c.position(tp)
            if pos > self.maps[tp].source_next:
                self.maps[tp].skip_to(pos)
                self._dirty.add(tp)

    async def _send(self, tp: TopicPartition, recs: list[ConsumerRecord], position: int) -> None:
        send = self._producer.send
        sent: list[tuple[int, Any]] = []
        size = 0
        for r in recs:
            ts = r.timestamp if r.timestamp >= 0 else None
            fut = await send(tp.topic, r.value, key=r.key, partition=tp.partition, timestamp_ms=ts, headers=r.headers)
            sent.append((r.offset, fut))
            size += (len(r.key) if r.key else 0) + (len(r.value) if r.value else 0)
        self._pending.append(_Chunk(tp, sent, position, size))

    async def _drain(self, *, block: bool) -> None:
        """Move acknowledged chunks, oldest first, into the maps."""
        while self._pending:
            chunk = self._pending[0]
            last = chunk.sent[-1][1] if chunk.sent else None
            if last is not None and not last.done():
                if not block:
                    return
                await _wait(last)
            self._pending.popleft()
            m = self.maps[chunk.tp]
            if chunk.sent:
                for _, fut in chunk.sent:
                    # an earlier batch of the chunk still under retry: wait for it (rare, and short)
                    if not fut.done() or fut.exception() is not None:
                        await _wait(fut)  # raises a failure
                first = chunk.sent[0][1].result().offset
                last = chunk.sent[-1][1].result().offset
                if last - first == len(chunk.sent) - 1:  # dense on the target, as one producer writes
                    m.add_dense([src for src, _ in chunk.sent], first)
                else:
                    for src, fut in chunk.sent:
                        m.add(src, fut.result().offset)
            m.skip_to(chunk.position)
            self._dirty.add(chunk.tp)
            self.stats.records += len(chunk.sent)
            self.stats.bytes += chunk.size
            if self._on_progress is not None:
                self._on_progress(len(chunk.sent))


async def _wait(fut: Awaitable[Any]) -> Any:
    try:
        return await fut
    except BrokerResponseError as e:
        if "AUTHORIZATION" in e.name:
            raise MirrorError(f"the target refused to take the records: {e}") from None
        raise


async def _read(c: AsyncConsumer, tp: TopicPartition, start: int, n: int, *, exact: bool) -> list[ConsumerRecord]:
    """Up to ``n`` records of ``tp`` from ``start`` (``exact``: the target, where they must all exist)."""
    c.assign([tp])
    c.seek(tp, start)
    out: list[ConsumerRecord] = []
    end = (await end_offsets_consumer(c, tp)) if not exact else start + n
    while len(out) < n and await c.position(tp) < end:
        for recs in (await c.getmany(tp, timeout_ms=1000)).values():
            out.extend(recs)
    return out[:n]


async def end_offsets_consumer(c: AsyncConsumer, tp: TopicPartition) -> int:
    return (await c.end_offsets([tp]))[tp]
