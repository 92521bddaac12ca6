"""AsyncShareConsumer: a share-group consumer (KIP-932, "queues for Kafka") on asyncio.

    async with AsyncShareConsumer({"bootstrap.servers": "h:9092", "group.id": "g"}) as c:
        c.subscribe(["jobs"])
        while True:
            for record in await c.poll(1000):
                handle(record)            # implicit mode: the next poll accepts it

Many consumers of one group read the same partitions; each record is locked
to the consumer it was delivered to until acknowledged (ACCEPT, RELEASE,
REJECT, RENEW) or its lock runs out. Semantics follow Kafka 4.2's
KafkaShareConsumer. The logic lives in sans-IO pieces, tested without
sockets: ``AckTracker`` (shoal/client/share/acks.py: what is held and owed, the
acknowledgement modes, misuse checks), ``ShareMembership``
(shoal/client/share/membership.py: the heartbeat state machine) and
``ShareSession`` (shoal/client/share/session.py: share-session epochs, request
bodies, record decoding). ``ShareFetcher`` (shoal/client/share/fetcher.py) runs
the per-broker ShareFetch / ShareAcknowledge rounds. This module is the
public API plus the heartbeat task:

* **Heartbeats** run in their own task: FindCoordinator (key type GROUP),
  ShareGroupHeartbeat at the interval the coordinator asks for. A new
  assignment (topic ids) is mapped to names through metadata and taken at
  once; partitions that left it give back their unread records (RELEASE)
  and leave their share sessions, acknowledgements owed first.
* **poll()** settles the previous poll (implicit: accept what is left;
  explicit: refuse if anything is), sends what is owed, and returns
  records -- usually already fetched while the application worked on the
  previous ones. Implicit acknowledgements are made by the poll after the
  one that returned the records, so they travel on a request sent after
  that poll: prefetching changes when records arrive, never which records
  are acknowledged.
* **RENEW** restarts a record's lock and the record comes back from a
  following poll (Kafka 4.2); a poll with renewals outstanding waits for
  their answer first.
* **Results**: every acknowledgement's outcome is reported per partition to
  the acknowledgement-commit callback (as soon as the broker answered) and
  to ``commit_sync``'s result.
* **close()** sends the acknowledgements made so far on the final request
  (epoch -1) of each share session -- which releases anything else still
  held, as Kafka does: in implicit mode the records of the last poll are
  released, not accepted, unless ``commit_sync`` ran first -- and then
  leaves the group.
* **Deviation**: ``acknowledge()`` also works in implicit mode (Kafka's
  client refuses it there): what the application does not acknowledge is
  accepted by the next poll or commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from shoal.client.core.aio import wait_for_event
from shoal.client.core.client_core import ClientCore
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import build_config
from shoal.client.core.errors import (
    BrokerResponseError,
    ClientClosedError,
    ConfigError,
    IllegalStateError,
    KafkaClientError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from shoal.client.core.records import ConsumerRecord
from shoal.client.share.acks import AckTracker
from shoal.client.share.fetcher import AcknowledgementCommitCallback, ShareFetcher
from shoal.client.share.membership import MemberState, ShareMembership, new_member_id
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AcknowledgeType
from shoal.protocol.errors import ErrorCode

__all__ = ["AcknowledgeType", "AcknowledgementCommitCallback", "AsyncShareConsumer"]

log = logging.getLogger("shoal.client.share")

_HB = api_by_name("ShareGroupHeartbeat").request_class()


class AsyncShareConsumer:
    """A share-group consumer; settings by Kafka's names (``client.core.config.SHARE_CONSUMER_OPTIONS``)."""

    # What holds the acquired records and what fetches them: the acquire-only consumer
    # (client.share.acquirer) swaps in range-based ones that never decode records.
    _tracker_class: Any = AckTracker
    _fetcher_class: Any = ShareFetcher

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self._config = cfg = build_config("share_consumer", config, kwargs)
        self._group: str = cfg["group.id"]
        if not self._group:
            raise ConfigError("group.id", "must not be empty")
        self._core = ClientCore(cfg)
        self._member_id = new_member_id()
        self._explicit = cfg["share.acknowledgement.mode"] == "explicit"
        self._max_poll = cfg["max.poll.records"]
        self._tracker = self._tracker_class(explicit=self._explicit)
        self._membership = ShareMembership(
            self._group,
            self._member_id,
            max_poll_interval_ms=cfg["max.poll.interval.ms"],
            retry_backoff_ms=cfg["retry.backoff.ms"],
            retry_backoff_max_ms=cfg["retry.backoff.max.ms"],
            rack_id=cfg["client.rack"] or None,
        )
        self._fetcher = self._fetcher_class(
            self._core,
            cfg,
            self._group,
            self._member_id,
            self._tracker,
            wake=self._wake,
            refresh_metadata=self._refresh_soon,
            active=lambda: self._membership.state in (MemberState.STABLE, MemberState.JOINING),
        )
        self._assignment_version = 0
        self._data = asyncio.Event()  # something for a waiting poll: records, renewals, an error
        self._hb_wake = asyncio.Event()
        self._hb_task: asyncio.Task | None = None
        self._refresh_task: asyncio.Task | None = None
        self._fatal: BaseException | None = None
        self._started = False
        self._closing = False
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------
    async def __aenter__(self) -> AsyncShareConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect to the cluster and start heartbeating (``async with`` does this)."""
        if self._closed or self._closing:
            raise ClientClosedError("the consumer is closed")
        if self._started:
            return
        await self._core.start()
        self._started = True
        self._fetcher.running = True
        self._hb_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())
        if self._membership.subscription:
            self._refresh_soon()

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def acquisition_lock_timeout_ms(self) -> int | None:
        """The lock duration the broker last reported (the group's share.record.lock.duration.ms)."""
        return self._fetcher.lock_timeout_ms

    # -- subscription ------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | str) -> None:
        """Join the share group for ``topics`` (replacing any previous subscription)."""
        self._check_open()
        names = [topics] if isinstance(topics, str) else list(topics)
        for t in names:
            if not isinstance(t, str) or not t.strip():
                raise ValueError(f"invalid topic name {t!r}")
        if not names:
            self.unsubscribe()
            return
        self._core.wanted_topics.update(names)
        self._membership.subscribe(names, self._now())
        self._hb_wake.set()
        if self._started:
            self._refresh_soon()

    def unsubscribe(self) -> None:
        """Leave the share group; records fetched and not handed out are released."""
        self._check_open()
        self._membership.unsubscribe(self._now())
        self._hb_wake.set()
        self._reconcile()

    def subscription(self) -> frozenset[str]:
        return self._membership.subscription

    def assignment(self) -> set[TopicPartition]:
        return set(self._fetcher.assigned)

    # -- consuming ---------------------------------------------------------------------
    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Records acquired for this consumer (at most ``max.poll.records``), waiting up to ``timeout_ms``.

        First settles the previous poll: implicit mode accepts its records
        that were not acknowledged; explicit mode raises ``IllegalStateError``
        if any is left. Raises the group's fatal error, if one happened, and
        ``RecordDeserializationError`` for a record a deserializer failed on
        (that record is released, so it comes back until the group's delivery
        limit archives it; the records fetched with it come with the next poll).
        """
        self._check_usable()
        if not self._membership.subscription:
            raise IllegalStateError("the consumer is not subscribed to any topic")
        if not self._started:
            await self.start()
        state = self._membership.state
        self._membership.on_poll(self._now())
        if self._membership.state != state:
            self._hb_wake.set()  # stale: rejoin
        self._tracker.begin_poll()
        self._fetcher.begin_poll()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        try:
            while True:
                self._fetcher.waiting = False  # fetches sent now are prefetches: they do not wait
                self._raise_fatal()
                if self._closed or self._closing:
                    raise ClientClosedError("the consumer was closed during poll")
                if not self._tracker.renewing() or loop.time() >= deadline:
                    records = self._tracker.take_records(self._max_poll, time.monotonic())
                    if not records and self._fetcher.has_raw():
                        self._fetcher.decode()  # sends the next fetch first, then decodes
                        failed, self._fetcher.deserialization_error = self._fetcher.deserialization_error, None
                        if failed is not None:
                            self._fetcher.after_poll()
                            raise failed  # the records around it come with the next poll
                        records = self._tracker.take_records(self._max_poll, time.monotonic())
                    if records:
                        self._fetcher.after_poll()  # buffers may be empty now: prefetch
                        return records
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return []
                self._data.clear()
                self._fetcher.waiting = True
                self._fetcher.pump()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._data.wait()
        finally:
            self._fetcher.waiting = False

    def acknowledge(self, record: ConsumerRecord, type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge one record returned by the latest poll (once): ACCEPT, RELEASE, REJECT or RENEW.

        Sent with the next fetch, poll or commit. Raises ``IllegalStateError``
        for a record acknowledged before, one from an earlier, settled poll, or
        one this consumer did not deliver. After RENEW the record is returned
        again by a following poll and must then be acknowledged again.
        """
        self._check_open()
        self._tracker.acknowledge(record, type)

    async def commit_sync(self, timeout_ms: int | None = None) -> dict[TopicPartition, BaseException | None]:
        """Send the acknowledgements made so far and wait for them: per partition, None or the error.

        Implicit mode first accepts the records of the latest poll. Covers
        acknowledgements already on their way, too. Partitions whose answer
        did not come within ``timeout_ms`` (default ``default.api.timeout.ms``)
        get a ``KafkaTimeoutError``.
        """
        self._check_usable()
        if not self._started:
            await self.start()
        if not self._explicit:
            self._tracker.accept_delivered()
        targets = self._fetcher.commit_targets()
        if not targets:
            return {}
        loop = asyncio.get_running_loop()
        waits = [(pa.tp, ShareFetcher.waiter(pa, loop)) for pa in targets]
        timeout = (self._config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms) / 1000
        await asyncio.wait([f for _, f in waits], timeout=timeout)
        out: dict[TopicPartition, BaseException | None] = {}
        for tp, fut in waits:
            err = fut.result() if fut.done() else KafkaTimeoutError(f"acknowledgements of {tp} not answered in time")
            if out.get(tp) is None:
                out[tp] = err
        return out

    def commit_async(self) -> None:
        """Send the acknowledgements made so far; outcomes go to the acknowledgement-commit callback."""
        self._check_usable()
        if not self._started:
            raise IllegalStateError("start the consumer first (use 'async with' or await start())")
        if not self._explicit:
            self._tracker.accept_delivered()
        self._fetcher.commit_targets()

    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        """``callback(offsets_by_partition, error_or_None)``: once per partition per request that
        carried acknowledgements, as soon as the broker answered (None removes it). Offsets are
        those the application acknowledged (including RENEW)."""
        self._fetcher.callback = callback

    async def close(self, timeout_ms: int | None = None) -> None:
        """Send pending acknowledgements, close every share session (releasing what is still held),
        leave the group and close the connections."""
        if self._closed or self._closing:
            return
        self._closing = True
        budget = (self._config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms) / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(budget, self._config["request.timeout.ms"] / 1000)
        try:
            if self._started:
                await self._fetcher.close(deadline)
                await self._leave_group(deadline)
        finally:
            self._closed = True
            tasks = [t for t in (self._hb_task, self._refresh_task) if t is not None and not t.done()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._data.set()
            await self._core.close()

    # -- internals ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed or self._closing:
            raise ClientClosedError("the consumer is closed")

    def _check_usable(self) -> None:
        self._check_open()
        self._raise_fatal()

    def _raise_fatal(self) -> None:
        fatal = self._fatal or self._fetcher.fatal
        if fatal is not None:
            raise fatal

    def _wake(self) -> None:
        self._data.set()

    @staticmethod
    def _now() -> float:
        return time.monotonic() * 1000

    def _reconcile(self) -> None:
        """Map the member's assignment (topic ids) to partitions and hand it to the fetcher."""
        self._assignment_version = self._membership.assignment_version
        names = self._core.metadata
        assigned: dict[TopicPartition, uuid.UUID] = {}
        missing = False
        for tid, parts in self._membership.assignment.items():
            name = names.topic_name(tid)
            if name is None:
                missing = True
                continue
            for p in parts:
                assigned[TopicPartition(name, p)] = tid
        if missing and self._started:
            self._refresh_soon()
        self._fetcher.assign(assigned)

    def _refresh_soon(self) -> None:
        """Refresh metadata in the background, then reconcile (topic ids, leaders)."""
        if self._refresh_task is not None and not self._refresh_task.done():
            return
        if self._closed or self._closing or not self._started:
            return

        async def refresh() -> None:
            try:
                await self._core.refresh_metadata()
            except KafkaClientError as e:
                log.debug("metadata refresh failed: %s", e)
                await asyncio.sleep(self._config["retry.backoff.ms"] / 1000)
            if not self._closing:
                self._reconcile()

        self._refresh_task = asyncio.get_running_loop().create_task(refresh())

    async def _heartbeat_loop(self) -> None:
        m = self._membership
        while not self._closed:
            now = self._now()
            req = m.next_request(now)
            if m.assignment_version != self._assignment_version:
                self._reconcile()  # the poll timer made the member leave
            if req is None:
                wake = m.wake_at(now)
                await wait_for_event(self._hb_wake, None if wake is None else max(wake - now, 0))
                continue
            body = _HB(
                group_id=self._group,
                member_id=self._member_id,
                member_epoch=req.member_epoch,
                rack_id=req.rack_id,
                subscribed_topic_names=req.subscribed_topic_names,
            )
            try:
                resp = await self._core.coordinator_call(self._group, "ShareGroupHeartbeat", body, retry=False)
            except BrokerResponseError as e:
                m.on_failure(req.token, self._now(), e.code)
            except UnsupportedVersionError as e:
                self._fatal = e
                self._wake()
                return
            except KafkaClientError as e:
                log.debug("heartbeat failed: %s", e)
                m.on_failure(req.token, self._now())
            else:
                assignment = None
                if resp.assignment is not None:
                    assignment = {tp.topic_id: tp.partitions for tp in resp.assignment.topic_partitions}
                m.on_response(
                    req.token,
                    resp.error_code,
                    resp.member_epoch,
                    resp.heartbeat_interval_ms,
                    assignment,
                    self._now(),
                    resp.error_message,
                )
                if resp.error_code:
                    log.debug("heartbeat of %s: error %s", self._member_id, resp.error_code)
            if m.state == MemberState.FATAL and self._fatal is None:
                self._fatal = BrokerResponseError(m.fatal or ErrorCode.UNKNOWN_SERVER_ERROR, m.fatal_message)
                self._wake()
            if m.assignment_version != self._assignment_version:
                self._reconcile()

    async def _leave_group(self, deadline: float) -> None:
        if self._hb_task is not None:
            self._hb_task.cancel()
            await asyncio.gather(self._hb_task, return_exceptions=True)
        m = self._membership
        m.close(self._now())
        req = m.next_request(self._now())
        loop = asyncio.get_running_loop()
        if req is None or req.member_epoch != -1 or deadline <= loop.time():
            return
        body = _HB(group_id=self._group, member_id=self._member_id, member_epoch=-1)
        try:
            async with asyncio.timeout(deadline - loop.time()):
                await self._core.coordinator_call(self._group, "ShareGroupHeartbeat", body, retry=False)
        except (KafkaClientError, TimeoutError) as e:
            log.debug("leaving the group failed: %s", e)
        m.on_failure(req.token, self._now())
