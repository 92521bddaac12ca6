"""The asyncio shell of a classic-group consumer: joins, heartbeats, commits, committed offsets.

Decisions live in ``GroupMembership`` (sans-IO); this module sends the
requests it calls for and runs the two things that must happen on time:

* With ``cooperative-sticky`` (KIP-429, chosen when every assignor offered
  is cooperative) a rebalance keeps the partitions: the subscription names
  them (owned partitions, generation), the assignment leaves out any that
  would move, and the member revokes only what it lost, then rejoins so the
  follow-up rebalance hands those on (``_complete_cooperative``).
* **Rebalances run inside the application's poll**, as in Kafka's Java
  client: ``poll()`` starts (or keeps waiting on) one rebalance task that
  commits consumed offsets when auto commit is on, calls
  ``on_partitions_revoked`` (or ``on_partitions_lost`` when the generation was
  already gone), drops the whole assignment (eager protocol), sends
  JoinGroup, computes the assignment when elected leader, sends SyncGroup,
  installs the new assignment and calls ``on_partitions_assigned``. So the
  application never processes records of a partition the group has already
  handed to someone else, and a commit inside ``on_partitions_revoked`` still
  carries a valid generation. The rebalance timeout sent is
  ``max.poll.interval.ms``.
* **Heartbeats run in a background task** every ``heartbeat.interval.ms``
  once the member has joined; a REBALANCE_IN_PROGRESS answer wakes a waiting
  poll. The same task watches ``max.poll.interval.ms``: an application that
  stopped polling leaves the group (LeaveGroup for dynamic members; static
  members just stop), and the next poll joins again.

The coordinator gets a connection of its own, as in Java, so a JoinGroup
parked for seconds and a long-polling Fetch to the same broker never wait
behind each other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from shoal.client.consumer.assignors.builtin import make_assignors
from shoal.client.consumer.assignors.subscription import (
    MemberSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from shoal.client.consumer.group.link import CoordinatorLink
from shoal.client.consumer.group.listener import invoke_listener
from shoal.client.consumer.group.membership import GroupMembership, MemberState, Next
from shoal.client.consumer.group.offsets import GroupOffsets, OffsetAndMetadata
from shoal.client.consumer.subscription_state import SubscriptionState
from shoal.client.core.aio import cancel_quietly, wait_for_event
from shoal.client.core.client_core import Backoff, ClientCore, is_retriable
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import Config
from shoal.client.core.errors import BrokerResponseError, ClientClosedError, IllegalStateError, KafkaClientError
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import error_for
from shoal.protocol.exceptions import ProtocolError

__all__ = ["ConsumerRebalanceListener", "GroupCoordinator", "OffsetAndMetadata"]

log = logging.getLogger("shoal.client.group")

PROTOCOL_TYPE = "consumer"
_JOIN = api_by_name("JoinGroup")
_SYNC = api_by_name("SyncGroup")
_HEARTBEAT = api_by_name("Heartbeat")
_LEAVE = api_by_name("LeaveGroup")


class ConsumerRebalanceListener:
    """Called around rebalances (from inside the poll that runs them); methods may be async.

    ``on_partitions_revoked`` runs before the member rejoins, with everything it
    held (eager protocol) — committing there works. ``on_partitions_lost`` runs
    instead when the membership was already gone (the partitions may be
    someone else's by now); by default it calls ``on_partitions_revoked``.
    ``on_partitions_assigned`` runs with the new assignment (possibly empty).
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Awaitable[None] | None:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Awaitable[None] | None:
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Awaitable[None] | None:
        return self.on_partitions_revoked(lost)


class GroupCoordinator:
    """Membership of one consumer in its classic group, and its offsets there."""

    def __init__(
        self,
        core: ClientCore,
        config: Config,
        subscriptions: SubscriptionState,
        wakeup: asyncio.Event,
        on_assignment_change: Callable[[], None],
        *,
        wake_fetcher: Callable[[], None] | None = None,
    ) -> None:
        self._core = core
        self._cfg = config
        self._subs = subscriptions
        self.group_id: str = config["group.id"]
        self.membership = GroupMembership(
            self.group_id,
            group_instance_id=config["group.instance.id"],
            session_timeout_ms=config["session.timeout.ms"],
            rebalance_timeout_ms=config["max.poll.interval.ms"],
            heartbeat_interval_ms=config["heartbeat.interval.ms"],
            retry_backoff_ms=config["retry.backoff.ms"],
            now_ms=0.0,  # constructed outside the event loop maybe: timers start at the first join/poll
        )
        self.assignors = make_assignors(config["partition.assignment.strategy"])
        # KIP-429: the protocol is cooperative when every assignor offered supports it (as Java decides).
        self.cooperative = all(getattr(a, "cooperative", False) for a in self.assignors)
        self._wake_fetcher = wake_fetcher or on_assignment_change
        self._wakeup = wakeup
        self._on_assignment_change = on_assignment_change
        self.link = CoordinatorLink(core, config, self.group_id)
        self.offsets = GroupOffsets(core, config, self.link, subscriptions, self.membership, wakeup)
        self._heartbeat: asyncio.Task | None = None
        self._hb_wake = asyncio.Event()
        self._rebalance: asyncio.Task | None = None
        self._needs_join_prepare = True
        self._joined_topics: tuple[str, ...] | None = None
        self._join_response: Any = None
        self._sync_assignment: bytes = b""
        self._snapshot: dict[str, int] | None = None  # partition counts the leader assigned from
        self._listener_error: BaseException | None = None
        self._closed = False

    def _backoff(self) -> Backoff:
        return Backoff(self._cfg["retry.backoff.ms"], self._cfg["retry.backoff.max.ms"])

    # -- the poll path ---------------------------------------------------------------------
    def raise_fatal(self) -> None:
        code = self.membership.fatal_error
        if code is not None:
            raise BrokerResponseError(code, f"group {self.group_id!r}")

    def in_rebalance_callback(self) -> bool:
        return self._rebalance is not None and asyncio.current_task() is self._rebalance

    async def poll(self, wait_ms: float) -> None:
        """Run at every consumer poll: keep the membership alive and the group joined."""
        m = self.membership
        now = self._core.now_ms()
        m.on_poll(now)
        self.raise_fatal()
        if self._subs.is_group_managed:
            self._check_for_rejoin()
            if m.needs_join or self._rebalance is not None:
                task = self._rebalance
                if task is None:
                    task = self._rebalance = asyncio.get_running_loop().create_task(
                        self._run_rebalance(), name=f"shoal-rebalance-{self.group_id}"
                    )
                done, _ = await asyncio.wait([task], timeout=max(wait_ms, 0) / 1000)
                if task in done:
                    if self._rebalance is task:
                        self._rebalance = None
                    if task.cancelled():  # stopped by close() or unsubscribe()
                        if self._closed:
                            raise ClientClosedError("the consumer is closed")
                        return
                    task.result()
        self.offsets.maybe_auto_commit(self._core.now_ms())
        error, self._listener_error = self._listener_error, None
        if error is not None:
            raise error
        self.raise_fatal()

    def _check_for_rejoin(self) -> None:
        m = self.membership
        if m.state is not MemberState.STABLE:
            return
        if self._joined_topics is not None and self._joined_topics != self._subs.topics:
            m.request_rejoin("the subscription changed")
        elif m.is_leader and self._snapshot is not None and self._partition_counts(self._snapshot) != self._snapshot:
            m.request_rejoin("the partitions of subscribed topics changed")

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        md = self._core.metadata
        out = {}
        for t in topics:
            info = md.topics.get(t)
            if info is not None and info.partitions:
                out[t] = len(info.partitions)
        return out

    async def _run_rebalance(self) -> None:
        m = self.membership
        backoff = self._backoff()
        while not self._closed and m.needs_join:
            if self._needs_join_prepare:
                await self._on_join_prepare()
                self._needs_join_prepare = False
            try:
                step = await self._join()
                if step is Next.SYNC:
                    step = await self._sync()
            except (KafkaClientError, ProtocolError) as e:
                if isinstance(e, KafkaClientError) and not is_retriable(e):
                    raise
                log.info("joining group %r failed: %s; retrying", self.group_id, e)
                m.on_join_failed()
                await asyncio.sleep(backoff.next_ms() / 1000)
                continue
            if step is Next.DONE:
                self._needs_join_prepare = True
                await self._on_join_complete()
                return
            if step is Next.FATAL:
                self.raise_fatal()
            if step is Next.FIND_COORDINATOR:
                self.link.dead()
                await asyncio.sleep(backoff.next_ms() / 1000)
            elif step is Next.BACKOFF:
                await asyncio.sleep(backoff.next_ms() / 1000)

    async def _on_join_prepare(self) -> None:
        """Before (re)joining: final auto commit, revoke everything (eager), forget the assignment."""
        m = self.membership
        if self.offsets.auto_commit and m.generation_if_stable() is not None:
            await self.offsets.commit_consumed("before rebalancing", timeout_ms=self._cfg["max.poll.interval.ms"])
        held = set(self._subs.assignment)
        if not m.has_generation():
            if held:
                await self._invoke("on_partitions_lost", held)
        elif self.cooperative:
            # Cooperative: keep everything still subscribed; the assignment says what moves.
            unsubscribed = {tp for tp in held if tp.topic not in self._subs.topics}
            if unsubscribed:
                await self._invoke("on_partitions_revoked", unsubscribed)
                self._subs.change_assignment((), unsubscribed)
                self._wake_fetcher()
            self._snapshot = None
            return
        else:
            await self._invoke("on_partitions_revoked", held)
        if self._subs.is_group_managed:
            self._subs.assign_from_subscribed([])
        self._snapshot = None
        self._on_assignment_change()

    async def _join(self) -> Next:
        m = self.membership
        cfg = self._cfg
        topics = self._subs.topics
        rack = cfg["client.rack"] or None
        member_id = m.join_started(self._core.now_ms())
        generation_id = m.generation.generation_id
        self._joined_topics = topics
        protocols = []
        cls = _JOIN.request_class()
        for a in self.assignors:
            owned = tuple(self._subs.assignment) if self._subs.is_group_managed else ()
            sub = MemberSubscription(topics, a.subscription_user_data(topics), owned, generation_id, rack)
            protocols.append(cls.JoinGroupRequestProtocol(name=a.name, metadata=encode_subscription(sub)))

        def build(version: int) -> Any:
            body = cls(
                group_id=self.group_id,
                session_timeout_ms=cfg["session.timeout.ms"],
                member_id=member_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=protocols,
            )
            if version >= 1:
                body.rebalance_timeout_ms = cfg["max.poll.interval.ms"]
            if version >= 5:
                body.group_instance_id = m.group_instance_id
            if version >= 8:
                body.reason = m.rejoin_reason
            return body

        timeout = max(cfg["request.timeout.ms"], cfg["max.poll.interval.ms"] + 5000)
        log.info("joining group %r (%s)", self.group_id, m.rejoin_reason)
        resp = await self.link.request("JoinGroup", build, timeout_ms=timeout)
        step = m.on_join_response(
            resp.error_code,
            generation_id=resp.generation_id,
            member_id=resp.member_id,
            leader=resp.leader,
            protocol_name=resp.protocol_name,
            now_ms=self._core.now_ms(),
        )
        if step is Next.SYNC:
            self._join_response = resp
        elif resp.error_code:
            log.info("JoinGroup for %r answered %s", self.group_id, error_for(resp.error_code).name)
        return step

    async def _sync(self) -> Next:
        m = self.membership
        resp = self._join_response
        sent = m.sync_generation()
        cls = _SYNC.request_class()
        assignments = []
        if m.is_leader and not getattr(resp, "skip_assignment", False):
            for member_id, data in (await self._assign(resp)).items():
                assignments.append(cls.SyncGroupRequestAssignment(member_id=member_id, assignment=data))

        def build(version: int) -> Any:
            body = cls(
                group_id=self.group_id,
                generation_id=sent.generation_id,
                member_id=sent.member_id,
                assignments=assignments,
            )
            if version >= 3:
                body.group_instance_id = m.group_instance_id
            if version >= 5:
                body.protocol_type = PROTOCOL_TYPE
                body.protocol_name = sent.protocol_name
            return body

        out = await self.link.request("SyncGroup", build)
        step = m.on_sync_response(out.error_code, sent, self._core.now_ms())
        if step is Next.DONE:
            self._sync_assignment = bytes(out.assignment or b"")
        elif out.error_code:
            log.info("SyncGroup for %r answered %s", self.group_id, error_for(out.error_code).name)
        return step

    async def _assign(self, resp: Any) -> dict[str, bytes]:
        """As leader: every member's partitions, computed by the group's chosen assignor."""
        assignor = self._assignor(resp.protocol_name)
        subscriptions: dict[str, MemberSubscription] = {}
        for member in resp.members:
            try:
                subscriptions[member.member_id] = decode_subscription(member.metadata, member.group_instance_id)
            except ProtocolError as e:
                log.warning("member %s sent a subscription we cannot read (%s); it gets nothing", member.member_id, e)
                subscriptions[member.member_id] = MemberSubscription((), group_instance_id=member.group_instance_id)
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        await self._core.refresh_metadata(topics)
        md = self._core.metadata
        if any(t not in md.topics and t not in md.topic_errors for t in topics):
            await self._core.refresh_metadata(topics)  # a refresh already under way did not ask for them
        counts = self._partition_counts(topics)
        self._snapshot = counts
        result = assignor.assign(counts, subscriptions)
        log.info("group %r: assigned %s with %s", self.group_id, {m: len(p) for m, p in result.items()}, assignor.name)
        return {member: encode_assignment(result.get(member, ())) for member in subscriptions}

    def _assignor(self, name: str | None) -> Any:
        for a in self.assignors:
            if a.name == name:
                return a
        raise IllegalStateError(f"the group chose assignor {name!r}, which this member did not offer")

    async def _on_join_complete(self) -> None:
        m = self.membership
        partitions, _ = decode_assignment(self._sync_assignment)
        self._assignor(m.generation.protocol_name).on_assignment(partitions, m.generation.generation_id)
        if self.cooperative:
            await self._complete_cooperative(set(partitions))
            return
        self._subs.assign_from_subscribed(partitions)
        self._core.wanted_topics.update(tp.topic for tp in partitions)
        self._on_assignment_change()
        self.offsets.reschedule_auto_commit()
        self._log_joined(partitions)
        self._start_heartbeat()
        await self._invoke("on_partitions_assigned", set(partitions))

    def _log_joined(self, partitions: Iterable[TopicPartition]) -> None:
        m = self.membership
        log.info(
            "joined group %r generation %d as %s%s: %s",
            self.group_id,
            m.generation.generation_id,
            m.generation.member_id,
            " (leader)" if m.is_leader else "",
            sorted(map(str, partitions)),
        )

    async def _complete_cooperative(self, assigned: set[TopicPartition]) -> None:
        """KIP-429: revoke only what the assignment took away (then rejoin), add what is new."""
        m = self.membership
        owned = set(self._subs.assignment)
        revoked, added = owned - assigned, assigned - owned
        self._log_joined(assigned)
        self._start_heartbeat()
        if revoked:
            if self.offsets.auto_commit:  # the new owner starts where this member stopped
                await self.offsets.commit_consumed(
                    "before revoking", only=revoked, timeout_ms=self._cfg["max.poll.interval.ms"]
                )
            await self._invoke("on_partitions_revoked", revoked)
            self._subs.change_assignment((), revoked)
            m.request_rejoin(f"revoked {len(revoked)} partitions: the follow-up rebalance hands them on")
            self._wakeup.set()
        self._subs.change_assignment(added, ())
        self._core.wanted_topics.update(tp.topic for tp in added)
        self._wake_fetcher()
        self.offsets.reschedule_auto_commit()
        await self._invoke("on_partitions_assigned", added)

    async def _invoke(self, method: str, partitions: set[TopicPartition]) -> None:
        error = await invoke_listener(self._subs.listener, method, partitions)
        if error is not None and self._listener_error is None:
            self._listener_error = error

    # -- heartbeats ------------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(), name=f"shoal-heartbeat-{self.group_id}"
            )
        self._hb_wake.set()

    async def _heartbeat_loop(self) -> None:
        m = self.membership
        while not self._closed:
            now = self._core.now_ms()
            if m.fatal_error is not None:
                self._wakeup.set()
                return
            active = m.state in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE)
            if active and m.poll_expired(now):
                log.warning(
                    "group %r: no poll for more than max.poll.interval.ms (%d ms); leaving the group",
                    self.group_id,
                    self._cfg["max.poll.interval.ms"],
                )
                await self._leave("consumer poll timeout has expired")
                continue
            if active and m.session_expired(now):
                log.info("group %r: no heartbeat answer within the session timeout; finding the coordinator again",
                         self.group_id)  # fmt: skip
                self.link.dead()
                m.reset_session(now)
            wait = m.heartbeat_wait_ms(now)
            if wait is not None and wait <= 0:
                await self._send_heartbeat()
                continue
            sleep = self._cfg["heartbeat.interval.ms"] if wait is None else wait
            if active:
                sleep = min(sleep, m.poll_wait_ms(now) + 1)
            await wait_for_event(self._hb_wake, max(sleep, 1))

    async def _send_heartbeat(self) -> None:
        m = self.membership
        sent = m.on_heartbeat_sent(self._core.now_ms())

        def build(version: int) -> Any:
            body = _HEARTBEAT.request_class()(
                group_id=self.group_id, generation_id=sent.generation_id, member_id=sent.member_id
            )
            if version >= 3:
                body.group_instance_id = m.group_instance_id
            return body

        try:
            async with asyncio.timeout(self._cfg["request.timeout.ms"] / 1000):
                resp = await self.link.request("Heartbeat", build)
        except (KafkaClientError, ProtocolError, TimeoutError) as e:
            log.debug("heartbeat of group %r failed: %s", self.group_id, e)
            m.on_heartbeat_failed(self._core.now_ms())
            return
        if m.on_heartbeat_response(resp.error_code, sent, self._core.now_ms()):
            self.link.dead()
        if resp.error_code:
            log.info("heartbeat of group %r answered %s", self.group_id, error_for(resp.error_code).name)
        if m.needs_join or m.fatal_error is not None:
            self._wakeup.set()

    # -- leaving ---------------------------------------------------------------------------
    async def _leave(self, reason: str) -> None:
        m = self.membership
        generation = m.leave()
        self._wakeup.set()
        if generation is None:
            return

        def build(version: int) -> Any:
            cls = _LEAVE.request_class()
            if version >= 3:
                member = cls.MemberIdentity(member_id=generation.member_id)
                if version >= 5:
                    member.reason = reason
                return cls(group_id=self.group_id, members=[member])
            return cls(group_id=self.group_id, member_id=generation.member_id)

        log.info("leaving group %r: %s", self.group_id, reason)
        try:
            async with asyncio.timeout(self._cfg["request.timeout.ms"] / 1000):
                resp = await self.link.request("LeaveGroup", build)
            if resp.error_code:
                log.info("LeaveGroup for %r answered %s", self.group_id, error_for(resp.error_code).name)
        except (KafkaClientError, ProtocolError, TimeoutError) as e:
            log.info("LeaveGroup for %r failed: %s", self.group_id, e)

    async def leave_for_unsubscribe(self) -> None:
        await self._stop_rebalance(leaving=True)
        held = set(self._subs.assignment)
        if held:
            await self._invoke("on_partitions_lost" if not self.membership.has_generation() else "on_partitions_revoked",
                               held)  # fmt: skip
        await self._leave("the consumer unsubscribed from all topics")
        self._needs_join_prepare = True
        self._joined_topics = None

    async def _stop_rebalance(self, *, leaving: bool = False) -> None:
        """Cancel a rebalance under way. ``leaving``: keep the member's state, so the
        LeaveGroup that follows still names a member parked in JoinGroup/SyncGroup."""
        task, self._rebalance = self._rebalance, None
        if task is not None and not task.done():
            await cancel_quietly(task)
            if not leaving:
                self.membership.on_join_failed()

    async def close(self, *, abandon: bool = False) -> None:
        """Final auto commit, revoke, LeaveGroup (dynamic members), stop the background tasks.

        ``abandon``: skip the group steps, just stop (after a close that ran out of time).
        """
        if self._closed:
            return
        if abandon:
            self._closed = True
            await self._stop_tasks()
            return
        await self._stop_rebalance(leaving=True)
        m = self.membership
        try:
            if self.offsets.auto_commit and (not self._subs.is_group_managed or m.generation_if_stable() is not None):
                await self.offsets.commit_consumed("on close")
            await self.offsets.drain(self._cfg["request.timeout.ms"])
            if self._subs.is_group_managed:
                held = set(self._subs.assignment)
                if held:
                    await self._invoke("on_partitions_revoked" if m.has_generation() else "on_partitions_lost", held)
                if m.state is not MemberState.UNJOINED:
                    await self._leave("the consumer is being closed")
        finally:
            self._closed = True
            await self._stop_tasks()

    async def _stop_tasks(self) -> None:
        self._hb_wake.set()
        await cancel_quietly(self._heartbeat)
        await self._stop_rebalance()
        self.offsets.cancel_pending()
        self.link.close()
