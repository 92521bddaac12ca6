"""Offsets of a consumer group: OffsetCommit and OffsetFetch, sync, async and automatic.

Why a module of its own: committing has rules that have nothing to do with
joining. Commits carry the member's current generation (or none for an
``assign()`` consumer) and are refused with CommitFailedError once the group
moved on (RebalanceInProgressError while it is still rebalancing), as in
Kafka's Java consumer; retriable errors (coordinator loading or moved, request
timed out) are retried until the deadline. Every commit — sync, async or
automatic — takes its place in one queue when it is asked for and is sent
only after the ones before it finished, so an older commit can never land
after, and undo, a newer one. Committed offsets are read with
``require_stable`` (UNSTABLE_OFFSET_COMMIT is waited out).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from shoal.client.consumer.group.link import CoordinatorLink
from shoal.client.consumer.group.membership import Generation
from shoal.client.consumer.subscription_state import SubscriptionState
from shoal.client.core.client_core import Backoff, ClientCore
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import Config
from shoal.client.core.errors import (
    BrokerResponseError,
    CommitFailedError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    RebalanceInProgressError,
)
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode, error_for

__all__ = ["GroupOffsets", "OffsetAndMetadata"]

log = logging.getLogger("shoal.client.group")

_COMMIT = api_by_name("OffsetCommit")
_OFFSET_FETCH = api_by_name("OffsetFetch")
_COORDINATOR_GONE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
_COMMIT_RETRY = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.STALE_MEMBER_EPOCH,  # a consumer-protocol member's epoch moved on: commit with the new one
    }
)

CommitCallback = Callable[[Mapping[TopicPartition, "OffsetAndMetadata"], BaseException | None], Any]


class CommitMembership(Protocol):
    """What commits need from a membership (classic ``GroupMembership`` or the KIP-848 view)."""

    @property
    def group_instance_id(self) -> str | None: ...

    @property
    def rebalancing(self) -> bool: ...

    def generation_if_stable(self) -> Generation | None: ...

    def on_commit_error(self, error: int, sent: Generation) -> None: ...


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset to read, its metadata string and leader epoch."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class GroupOffsets:
    """Commits and committed offsets of one group, over the coordinator link."""

    def __init__(
        self,
        core: ClientCore,
        config: Config,
        link: CoordinatorLink,
        subscriptions: SubscriptionState,
        membership: CommitMembership,
        wakeup: asyncio.Event,
    ) -> None:
        self._core = core
        self._cfg = config
        self._link = link
        self._subs = subscriptions
        self._membership = membership
        self._wakeup = wakeup
        self.group_id: str = config["group.id"]
        self.auto_commit: bool = config["enable.auto.commit"]
        self._auto_commit_at: float | None = None  # set at the first poll (no event loop yet here)
        self.pending: set[asyncio.Task] = set()
        self._commit_tail: asyncio.Future | None = None

    def _backoff(self) -> Backoff:
        return Backoff(self._cfg["retry.backoff.ms"], self._cfg["retry.backoff.max.ms"])

    def reschedule_auto_commit(self) -> None:
        self._auto_commit_at = self._core.now_ms() + self._cfg["auto.commit.interval.ms"]

    def consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(pos, "", epoch) for tp, (pos, epoch) in self._subs.all_consumed().items()}

    async def commit_consumed(
        self, why: str, *, only: Collection[TopicPartition] | None = None, timeout_ms: float | None = None
    ) -> None:
        """Commit what the application consumed (of ``only``, when given) before a rebalance
        step or a close; a failure is logged (``why`` says when), the step goes on."""
        offsets = self.consumed_offsets()
        if only is not None:
            offsets = {tp: om for tp, om in offsets.items() if tp in only}
        if not offsets:
            return
        try:
            await self.commit_offsets(offsets, timeout_ms=timeout_ms)  # after any commit still pending
        except KafkaClientError as e:
            log.warning("auto commit %s of group %r failed: %s", why, self.group_id, e)

    def maybe_auto_commit(self, now: float) -> None:
        if not self.auto_commit:
            return
        if self._auto_commit_at is None:
            self._auto_commit_at = now + self._cfg["auto.commit.interval.ms"]
        if now < self._auto_commit_at:
            return
        self._auto_commit_at = now + self._cfg["auto.commit.interval.ms"]
        if self._subs.is_group_managed and self._membership.generation_if_stable() is None:
            return
        offsets = self.consumed_offsets()
        if offsets:
            self.commit_async(offsets, None, auto=True)

    def _commit_generation(self) -> Generation:
        if not self._subs.is_group_managed:
            return Generation()  # a standalone (assign()) consumer commits outside group membership
        m = self._membership
        generation = m.generation_if_stable()
        if generation is not None:
            return generation
        if m.rebalancing:
            raise RebalanceInProgressError(
                "the group is rebalancing: poll() to complete the rebalance, then commit again"
            )
        raise CommitFailedError(
            "this consumer is not an active member of its group (it was removed or left, e.g. after "
            "max.poll.interval.ms without a poll); its partitions may belong to another member now"
        )

    def _commit_turn(self) -> tuple[asyncio.Future | None, asyncio.Future]:
        """A place in the commit queue, taken when the commit is asked for (see ``commit_offsets``)."""
        previous, mine = self._commit_tail, asyncio.get_running_loop().create_future()
        self._commit_tail = mine
        return previous, mine

    async def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        timeout_ms: float | None = None,
        retry: bool = True,
        turn: tuple[asyncio.Future | None, asyncio.Future] | None = None,
    ) -> None:
        """OffsetCommit, retried on retriable errors until ``timeout_ms`` (default.api.timeout.ms).

        Commits go out one at a time in the order they were asked for (async
        ones included), so an older commit can never land after, and undo,
        a newer one.
        """
        previous, mine = turn if turn is not None else self._commit_turn()
        try:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            await self._commit(offsets, timeout_ms, retry)
        finally:
            if not mine.done():
                mine.set_result(None)

    async def _commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timeout_ms: float | None, retry: bool
    ) -> None:
        if not offsets:
            return
        deadline = self._core.now_ms() + (self._cfg["default.api.timeout.ms"] if timeout_ms is None else timeout_ms)
        backoff = self._backoff()
        while True:
            generation = self._commit_generation()
            try:
                resp = await self._link.request("OffsetCommit", self._commit_request(generation, offsets), hi=9)
                error = self._commit_result(resp, generation)
                if error is None:
                    return
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                error = e
            pause = backoff.next_ms()
            if not retry or self._core.now_ms() + pause >= deadline:
                if isinstance(error, KafkaClientError):
                    raise error
                raise KafkaTimeoutError(f"offset commit of group {self.group_id!r} failed: {error}")
            log.debug("offset commit of group %r failed (%s); retrying", self.group_id, error)
            await asyncio.sleep(pause / 1000)

    def _commit_request(self, generation: Generation, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> Any:
        cls = _COMMIT.request_class()
        m = self._membership

        def build(version: int) -> Any:
            topics: dict[str, Any] = {}
            for tp, om in offsets.items():
                t = topics.setdefault(tp.topic, cls.OffsetCommitRequestTopic(name=tp.topic, partitions=[]))
                p = cls.OffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=om.offset, committed_metadata=om.metadata
                )
                if version >= 6:
                    p.committed_leader_epoch = om.leader_epoch
                t.partitions.append(p)
            body = cls(
                group_id=self.group_id,
                generation_id_or_member_epoch=generation.generation_id,
                member_id=generation.member_id,
                topics=list(topics.values()),
            )
            if version >= 7 and self._subs.is_group_managed:
                body.group_instance_id = m.group_instance_id
            return body

        return build

    def _commit_result(self, resp: Any, generation: Generation) -> str | None:
        """None when every partition committed; a retriable error's name; raises the others."""
        retry = None
        for t in resp.topics:
            for p in t.partitions:
                code = p.error_code
                if code == ErrorCode.NONE:
                    continue
                if code in _COMMIT_RETRY:
                    if code in _COORDINATOR_GONE or code == ErrorCode.REQUEST_TIMED_OUT:
                        self._link.dead()
                    retry = error_for(code).name
                    continue
                if code in (
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    ErrorCode.ILLEGAL_GENERATION,
                    ErrorCode.REBALANCE_IN_PROGRESS,
                    ErrorCode.FENCED_INSTANCE_ID,
                ):
                    self._membership.on_commit_error(code, generation)
                    self._wakeup.set()
                    if code == ErrorCode.REBALANCE_IN_PROGRESS:
                        raise RebalanceInProgressError(
                            "the group is rebalancing: poll() to complete the rebalance, then commit again"
                        )
                    if code == ErrorCode.FENCED_INSTANCE_ID:
                        raise BrokerResponseError(code, f"group {self.group_id!r}")
                    raise CommitFailedError(
                        f"offset commit refused ({error_for(code).name}): the group has rebalanced and the "
                        "partitions may belong to another member now"
                    )
                raise BrokerResponseError(code, f"OffsetCommit {t.name}-{p.partition_index}")
        return retry

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], Any] | None,
        *,
        auto: bool = False,
    ) -> asyncio.Task:
        turn = self._commit_turn()

        async def run() -> None:
            error: BaseException | None = None
            try:
                await self.commit_offsets(offsets, timeout_ms=self._cfg["request.timeout.ms"], retry=auto, turn=turn)
            except KafkaClientError as e:
                error = e
                if auto:
                    log.warning("auto commit of group %r failed: %s", self.group_id, e)
            if callback is not None:
                try:
                    result = callback(offsets, error)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("commit callback failed")
            elif error is not None and not auto:
                raise error

        task = asyncio.get_running_loop().create_task(run(), name=f"shoal-commit-{self.group_id}")
        self.pending.add(task)
        task.add_done_callback(self._commit_done)
        return task

    def _commit_done(self, task: asyncio.Task) -> None:
        self.pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("async commit failed: %s", task.exception())

    async def fetch_committed(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """OffsetFetch (require_stable): each partition's committed offset, None when there is none."""
        wanted = list(dict.fromkeys(partitions))
        if not wanted:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        cls = _OFFSET_FETCH.request_class()

        def build(version: int) -> Any:
            if version >= 8:
                group = cls.OffsetFetchRequestGroup(
                    group_id=self.group_id,
                    topics=[cls.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
                )
                return cls(groups=[group], require_stable=True)
            body = cls(
                group_id=self.group_id,
                topics=[cls.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
            )
            if version >= 7:
                body.require_stable = True
            return body

        deadline = self._core.now_ms() + (self._cfg["default.api.timeout.ms"] if timeout_ms is None else timeout_ms)
        backoff = self._backoff()
        while True:
            error: Any = None
            try:
                resp = await self._link.request("OffsetFetch", build, hi=9)
                error, found = self._offset_fetch_result(resp, wanted)
                if error is None:
                    return found
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                error = e
            pause = backoff.next_ms()
            if self._core.now_ms() + pause >= deadline:
                raise KafkaTimeoutError(f"committed offsets of group {self.group_id!r} not available: {error}")
            await asyncio.sleep(pause / 1000)

    def _offset_fetch_result(
        self, resp: Any, wanted: list[TopicPartition]
    ) -> tuple[str | None, dict[TopicPartition, OffsetAndMetadata | None]]:
        if getattr(resp, "groups", None):
            group = resp.groups[0]
            top, topics = group.error_code, group.topics
        else:
            top, topics = getattr(resp, "error_code", 0), resp.topics
        if top:
            if top in _COORDINATOR_GONE:
                self._link.dead()
            if top in _COORDINATOR_GONE or top == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return error_for(top).name, {}
            raise BrokerResponseError(top, f"OffsetFetch for group {self.group_id!r}")
        found: dict[TopicPartition, OffsetAndMetadata | None] = {tp: None for tp in wanted}
        for t in topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                code = p.error_code
                if code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                    return "UNSTABLE_OFFSET_COMMIT", {}
                if code not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    raise BrokerResponseError(code, f"OffsetFetch {tp}")
                if code == ErrorCode.NONE and p.committed_offset >= 0:
                    found[tp] = OffsetAndMetadata(
                        p.committed_offset, p.metadata or "", getattr(p, "committed_leader_epoch", -1)
                    )
        return None, found

    async def committed_positions(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """For the fetcher: where each partition starts (committed offset and epoch), if committed."""
        found = await self.fetch_committed(partitions)
        return {tp: (om.offset, om.leader_epoch) if om is not None else None for tp, om in found.items()}

    async def drain(self, timeout_ms: float) -> None:
        """Wait (bounded) for the commits still under way."""
        if self.pending:
            await asyncio.wait(list(self.pending), timeout=timeout_ms / 1000)

    def cancel_pending(self) -> None:
        for task in list(self.pending):
            task.cancel()
