"""The asyncio shell of a consumer-protocol member (``group.protocol=consumer``, KIP-848).

Decisions live in ``ConsumerMembership`` (sans-IO); this module moves bytes and
runs the application's side of a reconciliation:

* **Heartbeats run in a background task** over the coordinator's own
  connection (``CoordinatorLink``), as often as the coordinator's
  ``HeartbeatIntervalMs`` asks, at once when joining, acknowledging or
  leaving.
* **Reconciliation runs inside the application's poll**, as the rebalance of a
  classic group does: consumed offsets are committed (auto commit) and
  ``on_partitions_revoked`` runs for the partitions leaving, they are dropped,
  then the new ones are added and ``on_partitions_assigned`` runs; the next
  heartbeat, sent at once, tells the coordinator. Partitions kept keep their
  positions and buffered records. A fenced member's partitions are dropped
  from fetching at once and reported to ``on_partitions_lost`` at the next poll.
* The assignment names topics by id: ids the consumer's metadata cannot name
  yet (a regex subscription, a topic just created) wait for a metadata
  refresh, and the rest is reconciled meanwhile.
* Commits carry the member id and epoch (``_EpochView`` feeds ``GroupOffsets``).

Its public surface is that of the classic ``GroupCoordinator`` the consumer
drives: ``poll``, ``offsets``, ``in_rebalance_callback``,
``leave_for_unsubscribe``, ``close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

from shoal.client.consumer.group.link import CoordinatorLink
from shoal.client.consumer.group.listener import invoke_listener
from shoal.client.consumer.group.membership import Generation
from shoal.client.consumer.group.membership_848 import (
    ConsumerMembership,
    MemberState,
    Reconciliation,
    random_member_id,
)
from shoal.client.consumer.group.offsets import GroupOffsets
from shoal.client.consumer.subscription_state import SubscriptionState
from shoal.client.core.aio import cancel_quietly, wait_for_event
from shoal.client.core.client_core import ClientCore
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import Config
from shoal.client.core.errors import BrokerResponseError, KafkaClientError, UnsupportedVersionError
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode, error_for
from shoal.protocol.exceptions import ProtocolError

__all__ = ["ConsumerGroupMember"]

log = logging.getLogger("shoal.client.group")

_HEARTBEAT = api_by_name("ConsumerGroupHeartbeat")


class _EpochView:
    """The membership as ``GroupOffsets`` sees it: commits carry (member id, member epoch)."""

    __slots__ = ("_m",)

    def __init__(self, membership: ConsumerMembership) -> None:
        self._m = membership

    @property
    def group_instance_id(self) -> str | None:
        return self._m.instance_id

    @property
    def rebalancing(self) -> bool:
        return self._m.state is MemberState.JOINING

    def generation_if_stable(self) -> Generation | None:
        ident = self._m.commit_identity()
        return None if ident is None else Generation(ident[0], ident[1])

    def on_commit_error(self, error: int, sent: Generation) -> None:
        """The heartbeat, not a commit, decides about the membership (fencing comes there too)."""


class ConsumerGroupMember:
    """Membership of one consumer in its consumer-protocol group, and its offsets there."""

    def __init__(
        self,
        core: ClientCore,
        config: Config,
        subscriptions: SubscriptionState,
        wakeup: asyncio.Event,
        wake_fetcher: Callable[[], None],
    ) -> None:
        self._core = core
        self._cfg = config
        self._subs = subscriptions
        self._wakeup = wakeup
        self._wake_fetcher = wake_fetcher
        self.group_id: str = config["group.id"]
        self.membership = ConsumerMembership(
            self.group_id,
            random_member_id(),
            rebalance_timeout_ms=config["max.poll.interval.ms"],
            instance_id=config["group.instance.id"],
            rack_id=config["client.rack"] or None,
            server_assignor=config["group.remote.assignor"],
            retry_backoff_ms=config["retry.backoff.ms"],
            retry_backoff_max_ms=config["retry.backoff.max.ms"],
        )
        self.link = CoordinatorLink(core, config, self.group_id)
        self.offsets = GroupOffsets(core, config, self.link, subscriptions, _EpochView(self.membership), wakeup)
        self._names: dict[tuple[uuid.UUID, int], TopicPartition] = {}  # owned, by id -> by name
        self._lost: set[TopicPartition] = set()  # dropped, not yet reported to the listener
        self._heartbeat: asyncio.Task | None = None
        self._hb_wake = asyncio.Event()
        self._refresh: asyncio.Task | None = None
        self._in_callback = False
        self._listener_error: BaseException | None = None
        self._closed = False

    # -- the poll path -------------------------------------------------------------------
    def raise_fatal(self) -> None:
        m = self.membership
        if m.fatal is not None:
            raise BrokerResponseError(m.fatal, m.fatal_message or f"group {self.group_id!r}")

    def in_rebalance_callback(self) -> bool:
        return self._in_callback

    async def poll(self, wait_ms: float) -> None:
        """Run at every consumer poll: follow the subscription, reconcile, auto commit."""
        m = self.membership
        now = self._core.now_ms()
        before = m.state
        m.on_poll(now)
        self.raise_fatal()
        if self._subs.is_group_managed:
            pattern, topics = self._subs.pattern, frozenset(self._subs.topics)
            if (pattern, topics) != (m.regex, m.topics) or m.state is MemberState.UNSUBSCRIBED:
                self._core.wanted_topics.update(topics)
                m.subscribe(topics, pattern, now)
                self._hb_wake.set()
            self._start_heartbeat()
        if m.state is not before:  # a stale member rejoins
            self._hb_wake.set()
        await self._report_lost()
        await self._reconcile()
        self.offsets.maybe_auto_commit(self._core.now_ms())
        error, self._listener_error = self._listener_error, None
        if error is not None:
            raise error
        self.raise_fatal()

    def _resolvable(self, topic_id: uuid.UUID) -> bool:
        return self._core.metadata.topic_name(topic_id) is not None

    async def _reconcile(self) -> None:
        m = self.membership
        step = m.reconciliation(self._resolvable)
        if step is None:
            if m.unresolved(self._resolvable):
                self._refresh_soon()
            return
        try:
            await self._apply(step)
        except BaseException:
            m.abandon(step)
            raise

    async def _apply(self, step: Reconciliation) -> None:
        m = self.membership
        revoked = {self._names[tp] for tp in step.revoke if tp in self._names}
        if revoked:
            if self.offsets.auto_commit:
                await self.offsets.commit_consumed("before revoking", timeout_ms=self._cfg["max.poll.interval.ms"])
            await self._invoke("on_partitions_revoked", revoked)
            self._subs.change_assignment((), revoked)
            for tp in step.revoke:
                self._names.pop(tp, None)
        md = self._core.metadata
        added: dict[tuple[uuid.UUID, int], TopicPartition] = {}
        for tid, p in step.assign:
            name = md.topic_name(tid)
            if name is not None:
                added[(tid, p)] = TopicPartition(name, p)
        self._subs.change_assignment(added.values(), ())
        self._names.update(added)
        self._core.wanted_topics.update(tp.topic for tp in added.values())
        self._wake_fetcher()
        log.info(
            "group %r epoch %d: revoked %s, assigned %s",
            self.group_id,
            m.member_epoch,
            sorted(map(str, revoked)),
            sorted(map(str, added.values())),
        )
        await self._invoke("on_partitions_assigned", set(added.values()))
        if m.reconciled(step, self._core.now_ms()):
            self._hb_wake.set()
        else:  # fenced or left meanwhile: what was just added is not ours after all
            gone = set(added.values())
            self._subs.change_assignment((), gone)
            for tp in added:
                self._names.pop(tp, None)
            self._lost |= gone

    def _drop_lost(self) -> None:
        """Partitions the membership lost (fenced, poll timer, fatal): stop fetching them now."""
        lost = self.membership.take_lost()
        if not lost:
            return
        names = {self._names.pop(tp) for tp in lost if tp in self._names}
        if names and self._subs.is_group_managed:
            self._subs.change_assignment((), names)
        self._lost |= names
        self._wake_fetcher()
        self._wakeup.set()

    async def _report_lost(self) -> None:
        self._drop_lost()
        lost, self._lost = self._lost, set()
        if lost:
            await self._invoke("on_partitions_lost", lost)

    def _refresh_soon(self) -> None:
        if self._refresh is not None and not self._refresh.done():
            return

        async def refresh() -> None:
            try:
                await self._core.refresh_metadata(all_topics=True)
            except KafkaClientError as e:
                log.debug("metadata refresh for group %r failed: %s", self.group_id, e)
                await asyncio.sleep(self._cfg["retry.backoff.ms"] / 1000)
            self._wakeup.set()

        self._refresh = asyncio.get_running_loop().create_task(refresh(), name=f"shoal-848-metadata-{self.group_id}")

    async def _invoke(self, method: str, partitions: set[TopicPartition]) -> None:
        self._in_callback = True
        try:
            error = await invoke_listener(self._subs.listener, method, partitions)
        finally:
            self._in_callback = False
        if error is not None and self._listener_error is None:
            self._listener_error = error

    # -- heartbeats ------------------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(), name=f"shoal-848-heartbeat-{self.group_id}"
            )

    async def _heartbeat_loop(self) -> None:
        m = self.membership
        while not self._closed:
            now = self._core.now_ms()
            req = m.next_request(now)
            self._drop_lost()  # the poll timer may have made the member leave
            if req is None:
                wake = m.wake_at(now)
                await wait_for_event(self._hb_wake, None if wake is None else max(wake - now, 1))
                continue
            await self._send(req)
            if m.state is MemberState.FATAL:
                self._wakeup.set()
                return

    async def _send(self, req: Any) -> None:
        m = self.membership
        cls = _HEARTBEAT.request_class()

        def build(version: int) -> Any:
            body = cls(
                group_id=self.group_id,
                member_id=m.member_id,
                member_epoch=req.member_epoch,
                instance_id=req.instance_id,
                rack_id=req.rack_id,
                rebalance_timeout_ms=req.rebalance_timeout_ms,
                subscribed_topic_names=req.subscribed_topic_names,
                server_assignor=req.server_assignor,
                topic_partitions=None
                if req.topic_partitions is None
                else [cls.TopicPartitions(topic_id=t, partitions=ps) for t, ps in req.topic_partitions.items()],
            )
            if req.subscribed_topic_regex is not None:
                if version < 1:
                    raise KafkaClientError("a regex subscription needs ConsumerGroupHeartbeat v1")
                body.subscribed_topic_regex = req.subscribed_topic_regex
            return body

        try:
            async with asyncio.timeout(self._cfg["request.timeout.ms"] / 1000):
                resp = await self.link.request("ConsumerGroupHeartbeat", build, hi=1)
        except UnsupportedVersionError as e:  # a broker without KIP-848: no retry helps
            log.error("group %r: %s", self.group_id, e)
            m.on_failure(req.token, self._core.now_ms(), ErrorCode.UNSUPPORTED_VERSION)
            m.fatal_message = str(e)
            return
        except (KafkaClientError, ProtocolError, TimeoutError) as e:
            log.debug("heartbeat of group %r failed: %s", self.group_id, e)
            m.on_failure(req.token, self._core.now_ms())
            return
        if resp.member_id and resp.member_id != m.member_id and req.member_epoch == 0:
            m.member_id = resp.member_id  # v0: the coordinator names the member
        assignment = None
        if resp.assignment is not None:
            assignment = {t.topic_id: t.partitions for t in resp.assignment.topic_partitions}
        changed = m.on_response(
            req.token,
            resp.error_code,
            resp.member_epoch,
            resp.heartbeat_interval_ms,
            assignment,
            self._core.now_ms(),
            resp.error_message,
        )
        if resp.error_code:
            log.info(
                "heartbeat of group %r answered %s%s",
                self.group_id,
                error_for(resp.error_code).name,
                f" ({resp.error_message})" if resp.error_message else "",
            )
        if m.coordinator_gone:
            self.link.dead()
        if changed or resp.error_code:
            self._drop_lost()
            self._wakeup.set()

    # -- leaving ---------------------------------------------------------------------------
    async def _leave(self) -> None:
        """Send the leave heartbeat now (best effort), with the heartbeat task stopped."""
        m = self.membership
        await self._stop_heartbeat()
        req = m.next_request(self._core.now_ms())
        if req is None or req.member_epoch >= 0:
            if req is not None:
                m.on_failure(req.token, self._core.now_ms())
            return
        log.info("leaving group %r", self.group_id)
        await self._send(req)
        if m.state is MemberState.LEAVING:  # no answer: out anyway
            m.on_failure(req.token, self._core.now_ms(), ErrorCode.UNKNOWN_MEMBER_ID)

    async def _revoke_all(self) -> None:
        held = set(self._names.values())
        if not held:
            return
        if self.membership.commit_identity() is not None:
            await self._invoke("on_partitions_revoked", held)
        else:
            await self._invoke("on_partitions_lost", held)
        self._names.clear()
        if self._subs.is_group_managed:
            self._subs.change_assignment((), held)

    async def leave_for_unsubscribe(self) -> None:
        if self.offsets.auto_commit and self.membership.commit_identity() is not None:
            offsets = self.offsets.consumed_offsets()
            if offsets:
                with contextlib.suppress(KafkaClientError):
                    await self.offsets.commit_offsets(offsets)
        await self._report_lost()
        await self._revoke_all()
        await self._stop_heartbeat()
        self.membership.unsubscribe(self._core.now_ms())
        await self._leave()

    async def close(self, *, abandon: bool = False) -> None:
        """Final auto commit, revoke, leave (epoch -1, or -2 for a static member), stop."""
        if self._closed:
            return
        if abandon:
            self._closed = True
            await self._stop_tasks()
            return
        m = self.membership
        try:
            if self.offsets.auto_commit and (not self._subs.is_group_managed or m.commit_identity() is not None):
                await self.offsets.commit_consumed("on close")
            await self.offsets.drain(self._cfg["request.timeout.ms"])
            if self._subs.is_group_managed:
                await self._report_lost()
                await self._revoke_all()
            if m.state is not MemberState.UNSUBSCRIBED and m.state is not MemberState.FATAL:
                await self._stop_heartbeat()
                m.close(self._core.now_ms())
                await self._leave()
        finally:
            self._closed = True
            await self._stop_tasks()

    async def _stop_heartbeat(self) -> None:
        task, self._heartbeat = self._heartbeat, None
        self._hb_wake.set()
        if task is not asyncio.current_task():
            await cancel_quietly(task)

    async def _stop_tasks(self) -> None:
        await self._stop_heartbeat()
        await cancel_quietly(self._refresh)
        self.offsets.cancel_pending()
        self.link.close()
