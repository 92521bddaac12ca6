"""AsyncConsumer: Kafka's consumer for asyncio, with classic consumer groups.

    async with AsyncConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "g"}) as c:
        c.subscribe(["orders"])
        async for record in c:
            ...

Semantics follow Kafka's Java ``KafkaConsumer`` (classic protocol with eager
or cooperative rebalancing, or ``group.protocol=consumer``: KIP-848, the
coordinator assigns), shaped for asyncio like aiokafka's consumer:

* ``getmany()``/``getone()``/``async for`` are the poll: group rebalances,
  auto commits and rebalance callbacks happen inside them, never behind the
  application's back, and a consumer that does not poll for
  ``max.poll.interval.ms`` leaves its group (joining again at its next poll).
* Positions advance past records as they are handed out; ``commit()`` with no
  argument commits those positions (the next offset to read), as does auto
  commit every ``auto.commit.interval.ms``, before each rebalance and at close.
* ``subscribe()`` lets the group assign partitions; ``assign()`` takes them
  explicitly (no group membership, though committing still needs ``group.id``).

The pieces: ``SubscriptionState`` (what is assigned, positions), ``Fetcher``
(background fetching, decoding on demand), ``GroupCoordinator`` (JoinGroup,
SyncGroup, heartbeats, leaving) over ``GroupMembership`` (the sans-IO rules)
or ``ConsumerGroupMember`` over ``ConsumerMembership`` for ``group.protocol=consumer``,
``GroupOffsets`` (commits, committed offsets), both over a ``CoordinatorLink``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from shoal.client.consumer.fetcher import Fetcher, list_offsets
from shoal.client.consumer.group.coordinator import ConsumerRebalanceListener, GroupCoordinator
from shoal.client.consumer.group.coordinator_848 import ConsumerGroupMember
from shoal.client.consumer.group.offsets import GroupOffsets, OffsetAndMetadata
from shoal.client.consumer.subscription_state import SubscriptionState, SubscriptionType
from shoal.client.core.client_core import ClientCore
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import build_config
from shoal.client.core.errors import ClientClosedError, IllegalStateError, KafkaConnectionError
from shoal.client.core.records import ConsumerRecord
from shoal.protocol.constants import IsolationLevel, ListOffsetsTimestamp

__all__ = ["AsyncConsumer", "ConsumerRebalanceListener", "OffsetAndMetadata", "OffsetAndTimestamp"]

log = logging.getLogger("shoal.client.consumer.consumer")

OffsetsArg = Mapping[TopicPartition, "int | OffsetAndMetadata | tuple[int, str]"]


class OffsetAndTimestamp(NamedTuple):
    """A record's offset and timestamp, as ``offsets_for_times`` finds them."""

    offset: int
    timestamp: int


CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


class AsyncConsumer:
    """A Kafka consumer; settings by Kafka's names (see ``client.core.config.CONSUMER_OPTIONS``)."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._cfg = build_config("consumer", config, kwargs)
        self._core = ClientCore(self._cfg)
        self._subs = SubscriptionState(self._cfg["auto.offset.reset"])
        self._wakeup = asyncio.Event()
        self._coordinator: GroupCoordinator | ConsumerGroupMember | None = None
        if self._cfg["group.id"] is not None and self._cfg["group.protocol"] == "consumer":
            self._coordinator = ConsumerGroupMember(
                self._core, self._cfg, self._subs, self._wakeup, lambda: self._fetcher.wakeup()
            )
        elif self._cfg["group.id"] is not None:
            self._coordinator = GroupCoordinator(
                self._core,
                self._cfg,
                self._subs,
                self._wakeup,
                self._on_assignment_change,
                wake_fetcher=lambda: self._fetcher.wakeup(),
            )
        self._fetcher = Fetcher(
            self._core,
            self._cfg,
            self._subs,
            self._coordinator.offsets.committed_positions if self._coordinator is not None else None,
            self._wakeup,
        )
        self._started = False
        self._closed = False

    @property
    def config(self) -> Any:
        return self._cfg

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Connect to the cluster and start fetching (``async with`` calls this)."""
        if self._closed:
            raise ClientClosedError("the consumer is closed")
        if self._started:
            return
        await self._core.start()
        self._fetcher.start()
        self._started = True

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self, timeout_ms: float = 30000) -> None:
        """Commit (auto commit), revoke, leave the group, close connections.

        The group steps get ``timeout_ms`` (Kafka's default close timeout,
        30 s) in all; whatever is left then is abandoned and the connections
        are closed anyway.
        """
        if self._closed:
            return
        self._closed = True
        self._wakeup.set()
        try:
            if self._coordinator is not None and self._started:
                try:
                    async with asyncio.timeout(timeout_ms / 1000):
                        await self._coordinator.close()
                except TimeoutError:
                    log.warning("closing the consumer's group membership took over %.0f ms; abandoned", timeout_ms)
                    await self._coordinator.close(abandon=True)
        finally:
            await self._fetcher.close()
            await self._core.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")
        if not self._started:
            raise ClientClosedError("the consumer was not started (use 'async with' or await start())")

    # -- subscriptions -------------------------------------------------------------------
    def subscribe(
        self,
        topics: Iterable[str] = (),
        listener: ConsumerRebalanceListener | Any | None = None,
        *,
        pattern: str | None = None,
    ) -> None:
        """Join the group for ``topics`` (or, with ``group.protocol=consumer``, for the topics
        matching ``pattern``, a Java regular expression the broker evaluates); the group
        assigns partitions at the next poll."""
        if isinstance(topics, str):
            raise TypeError("subscribe() takes a list of topic names, not a string")
        topics = list(topics)
        if not all(isinstance(t, str) and t for t in topics):
            raise ValueError(f"topic names must be non-empty strings: {topics!r}")
        if self._coordinator is None:
            raise IllegalStateError("subscribe() needs a group.id (use assign() without one)")
        if pattern is not None:
            if topics:
                raise ValueError("subscribe() takes topics or a pattern, not both")
            if not isinstance(self._coordinator, ConsumerGroupMember):
                raise IllegalStateError("pattern subscriptions need group.protocol=consumer")
            if not pattern:
                raise ValueError("the pattern must not be empty")
            self._subs.subscribe_pattern(pattern, listener)
            self._wakeup.set()
            return
        if not topics:
            raise ValueError("subscribe() needs at least one topic; use unsubscribe() to stop")
        self._subs.subscribe(topics, listener)
        self._core.wanted_topics.update(topics)
        self._wakeup.set()

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions, outside any group membership."""
        parts = [TopicPartition(p[0], p[1]) for p in partitions]
        if self._coordinator is not None and self._subs.type is SubscriptionType.USER_ASSIGNED and self._started:
            offsets = self._coordinator.offsets.consumed_offsets()
            if self._cfg["enable.auto.commit"] and offsets:
                self._coordinator.offsets.commit_async(offsets, None, auto=True)
        self._subs.assign_from_user(parts)
        self._core.wanted_topics.update(tp.topic for tp in parts)
        self._on_assignment_change()

    async def unsubscribe(self) -> None:
        """Give up the subscription or assignment (a group member leaves its group)."""
        if self._coordinator is not None and self._subs.is_group_managed and self._started:
            await self._coordinator.leave_for_unsubscribe()
        self._subs.unsubscribe()
        self._on_assignment_change()

    def subscription(self) -> set[str]:
        return set(self._subs.topics) if self._subs.is_group_managed else set()

    def assignment(self) -> set[TopicPartition]:
        return set(self._subs.assignment)

    def _on_assignment_change(self) -> None:
        self._fetcher.clear_buffer()
        self._fetcher.wakeup()

    # -- positions ----------------------------------------------------------------------
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """The next record returned from ``partition`` will be the one at ``offset``."""
        self._subs.seek(TopicPartition(*partition), offset)
        self._fetcher.wakeup()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move to the log start of the given (default: all assigned) partitions."""
        await self._reset(partitions, "earliest")

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move to the end (high watermark, or last stable offset with read_committed)."""
        await self._reset(partitions, "latest")

    async def _reset(self, partitions: tuple[TopicPartition, ...], strategy: str) -> None:
        self._check_open()
        parts = [TopicPartition(*p) for p in partitions] or list(self._subs.assignment)
        for tp in parts:
            self._subs.request_reset(tp, strategy)
        self._fetcher.wakeup()
        for tp in parts:
            await self._fetcher.wait_for_position(tp, self._cfg["default.api.timeout.ms"])

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to be returned from ``partition``."""
        self._check_open()
        return await self._fetcher.wait_for_position(TopicPartition(*partition), self._cfg["default.api.timeout.ms"])

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of ``partition`` (None when nothing is committed)."""
        self._check_open()
        om = (await self._group().fetch_committed([TopicPartition(*partition)])).get(TopicPartition(*partition))
        return None if om is None else om.offset

    def highwater(self, partition: TopicPartition) -> int:
        """High watermark from the last fetch of ``partition`` (-1 before one)."""
        return self._subs.state(TopicPartition(*partition)).high_watermark

    def last_stable_offset(self, partition: TopicPartition) -> int:
        return self._subs.state(TopicPartition(*partition)).last_stable_offset

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """First offset of each partition (ListOffsets; positions do not change)."""
        return await self._offsets_at(partitions, ListOffsetsTimestamp.EARLIEST)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Offset after the last record of each partition (last stable offset with read_committed)."""
        return await self._offsets_at(partitions, ListOffsetsTimestamp.LATEST)

    async def _offsets_at(self, partitions: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        found = await self._list_offsets({TopicPartition(*p): timestamp for p in partitions})
        return {tp: offset for tp, (offset, _) in found.items()}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first record at or after the timestamp (ms): its offset and
        timestamp, or None when every record is older."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"timestamp of {tp} must be >= 0, got {ts}")
        found = await self._list_offsets({TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        return {tp: None if offset < 0 else OffsetAndTimestamp(offset, ts) for tp, (offset, ts) in found.items()}

    async def _list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        self._check_open()
        if not timestamps:
            return {}
        isolation = IsolationLevel.of_setting(self._cfg["isolation.level"])
        missing = dict(timestamps)
        out: dict[TopicPartition, tuple[int, int]] = {}

        async def attempt() -> None:
            found = await list_offsets(self._core, missing, isolation)
            for tp, (offset, _, ts) in found.items():
                out[tp] = (offset, ts)
                missing.pop(tp, None)
            if missing:
                raise KafkaConnectionError(f"no offsets yet for {sorted(map(str, missing))}")

        await self._core.retry(attempt, what="ListOffsets")
        return out

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning (and fetching) records of these partitions until ``resume``."""
        self._subs.pause(TopicPartition(*p) for p in partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._subs.resume(TopicPartition(*p) for p in partitions)
        self._fetcher.wakeup()

    def paused(self) -> set[TopicPartition]:
        return self._subs.paused()

    # -- commits -------------------------------------------------------------------------
    def _group(self) -> GroupOffsets:
        if self._coordinator is None:
            raise IllegalStateError("committing and committed offsets need a group.id")
        return self._coordinator.offsets

    def _offsets(self, offsets: OffsetsArg | None) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return self._group().consumed_offsets()
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            tp = TopicPartition(*tp)
            if isinstance(value, OffsetAndMetadata):
                om = value
            elif isinstance(value, tuple):
                om = OffsetAndMetadata(int(value[0]), str(value[1]) if len(value) > 1 else "")
            elif isinstance(value, int) and not isinstance(value, bool):
                om = OffsetAndMetadata(value)
            else:
                raise TypeError(f"offset for {tp} must be an int or OffsetAndMetadata, got {value!r}")
            if om.offset < 0:
                raise ValueError(f"offset for {tp} must be >= 0, got {om.offset}")
            out[tp] = om
        return out

    async def commit(self, offsets: OffsetsArg | None = None) -> None:
        """Commit ``offsets`` (default: the positions of everything returned so far) and wait.

        Raises ``CommitFailedError`` when the group has rebalanced since these
        records were returned (``RebalanceInProgressError`` while it is still
        rebalancing: poll, then commit again).
        """
        self._check_open()
        group = self._group()
        await group.commit_offsets(self._offsets(offsets))

    def commit_async(self, offsets: OffsetsArg | None = None, callback: CommitCallback | None = None) -> asyncio.Task:
        """Start a commit without waiting; ``callback(offsets, error_or_None)`` runs when it ends."""
        self._check_open()
        return self._group().commit_async(self._offsets(offsets), callback)

    # -- polling -------------------------------------------------------------------------
    async def _poll_once(self, partitions: set[TopicPartition] | None, max_records: int, wait_ms: float) -> dict:
        if self._coordinator is not None:
            if self._coordinator.in_rebalance_callback():
                raise IllegalStateError("getmany()/getone() cannot be called from a rebalance listener")
            await self._coordinator.poll(wait_ms)
        self._fetcher.raise_pending_error()
        return self._fetcher.drain(partitions, max_records)

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition: whatever is ready, else waits up to ``timeout_ms`` for some."""
        self._check_open()
        if self._subs.type is SubscriptionType.NONE:
            raise IllegalStateError("the consumer is not subscribed to any topic nor assigned any partition")
        limit = self._cfg["max.poll.records"] if max_records is None else max_records
        if limit < 1:
            raise ValueError("max_records must be at least 1")
        wanted = {TopicPartition(*p) for p in partitions} or None
        loop = asyncio.get_running_loop()
        deadline = loop.time() * 1000 + timeout_ms
        step = self._cfg["heartbeat.interval.ms"]
        while True:
            remaining = deadline - loop.time() * 1000
            self._wakeup.clear()
            records = await self._poll_once(wanted, limit, min(max(remaining, 0), step))
            if records:
                return records
            remaining = deadline - loop.time() * 1000
            if remaining <= 0:
                return {}
            if self._closed:
                raise ClientClosedError("the consumer is closed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, step) / 1000):
                    await self._wakeup.wait()
            if self._closed:
                raise ClientClosedError("the consumer is closed")

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (waits as long as it takes)."""
        while True:
            batch = await self.getmany(*partitions, timeout_ms=math.inf, max_records=1)
            for records in batch.values():
                return records[0]

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        try:
            return await self.getone()
        except ClientClosedError:
            raise StopAsyncIteration from None
