"""The per-broker request rounds of one AsyncShareConsumer: ShareFetch and ShareAcknowledge.

The asyncio half of fetching and acknowledging, kept apart from the public
API in shoal/client/share/consumer.py. The decisions live in sans-IO pieces --
``ShareSession`` (epochs, what each request names), ``AckTracker`` (what is
held and owed); this module moves them to sockets:

* **One request at a time per broker**, so a session's epochs never race and
  a failure has one clear meaning. ``pump()`` looks at every broker that is
  idle and has work -- acknowledgements to send, partitions to fetch with
  nothing buffered for them, an idle session to close -- and starts a round
  for it. With a live connection the request is written at once, inside the
  call (``_send`` is synchronous), and the next one as soon as an answer is
  handled: the broker never waits for this process's other work.
* **Prefetch, without holding more**: fetched bytes stay undecoded until a
  poll needs them (``decode()``); the buffers then look empty, so the next
  ShareFetch goes out *before* the decoding starts and the broker serves it
  while this process decodes and the application works. At most one answer
  per broker waits beyond what the application was given. A fetch sent while
  no poll waits is a prefetch: MaxWaitMs 0 (acknowledgements made meanwhile
  never queue behind a long poll), once per broker per poll, and not for a
  few polls after one found nothing (``PrefetchGate``: with several
  consumers on a partition the group's in-flight limit is usually taken,
  and an empty prefetch only delays the acknowledgements that free it).
* **Acknowledgements** the application made ride on the next ShareFetch to
  their broker; ``stage()`` moves them to the broker's *outbox*, which must
  go soon: with a fetch if one is due, else in a ShareAcknowledge (which
  RENEW always uses: a ShareFetch with IsRenewAck fetches nothing). They go
  to the broker that acquired the records.
* **Failures**: a top-level session error means nothing was applied: the
  session reopens and the acknowledgements go again. A lost connection (the
  broker drops the session and our locks with it) drops buffered records of
  that broker and reports its acknowledgements as failed: their fate is
  unknown, so they are never silently resent. Brokers that fail back off
  exponentially (``retry.backoff.ms`` .. ``retry.backoff.max.ms``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from shoal.client.core.client_core import ClientCore, metadata_stale
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import Config
from shoal.client.core.conn import BrokerConnection
from shoal.client.core.errors import (
    BrokerResponseError,
    ClientClosedError,
    KafkaClientError,
    KafkaConnectionError,
    RecordDeserializationError,
    UnsupportedVersionError,
)
from shoal.client.share.acks import AckTracker, PartitionAcks
from shoal.client.share.session import (
    SESSION_ERRORS,
    AckRequestPlan,
    FetchPlan,
    Key,
    PrefetchGate,
    ShareSession,
    decode_acquired,
    share_acknowledge_body,
    share_fetch_body,
)
from shoal.protocol.constants import AcknowledgeType
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError

__all__ = ["AcknowledgementCommitCallback", "ShareFetcher"]

log = logging.getLogger("shoal.client.share")

AcknowledgementCommitCallback = Callable[[dict[TopicPartition, set[int]], BaseException | None], None]
_Sent = tuple[Any, asyncio.Future, float, BrokerConnection]  # (plan, response future, sent at, connection)

_FATAL = frozenset({ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.UNSUPPORTED_VERSION})
# Longest that acknowledgements wait in the outbox for a fetch to ride on before they go in a
# ShareAcknowledge of their own (an application slow with its next poll's records must not keep
# the broker from applying them while their locks run).
ACK_HOLD_S = 0.1


@dataclass(slots=True)
class _Raw:
    """One partition of a ShareFetch answer, kept as bytes until a poll needs its records."""

    tp: TopicPartition
    data: Any
    ranges: list[tuple[int, int, int]]
    lock_deadline: float | None
    held: frozenset[int]  # offsets the application still had when the answer came (not handed out again)

    @property
    def size(self) -> int:
        return sum(last - first + 1 for first, last, _ in self.ranges)


class ShareFetcher:
    """Fetches and acknowledges for one share consumer (see module doc)."""

    def __init__(
        self,
        core: ClientCore,
        config: Config,
        group_id: str,
        member_id: str,
        tracker: AckTracker,
        *,
        wake: Callable[[], None],
        refresh_metadata: Callable[[], None],
        active: Callable[[], bool],
    ) -> None:
        self._core = core
        self._config = config
        self._group = group_id
        self._member_id = member_id
        self._tracker = tracker
        self._wake = wake  # records, renewals or a fatal error arrived: a poll may be waiting
        self._refresh = refresh_metadata
        self._active = active  # whether the member is in the group (fetching makes sense)
        self._record_limit = config["share.acquire.mode"] == "record_limit"
        self._max_records = config["max.poll.records"]
        self.callback: AcknowledgementCommitCallback | None = None
        self.fatal: BaseException | None = None
        self.deserialization_error: RecordDeserializationError | None = None  # for the next poll to raise
        self.lock_timeout_ms: int | None = None
        self.assigned: set[TopicPartition] = set()
        self._sessions: dict[int, ShareSession] = {}
        self._tp_ids: dict[TopicPartition, uuid.UUID] = {}
        self._key_tp: dict[Key, TopicPartition] = {}
        self._ack_node: dict[TopicPartition, int] = {}  # broker that acquired the partition's records
        self._outbox: dict[int, dict[TopicPartition, PartitionAcks]] = {}  # acks to send soon, per broker
        self._held_since: dict[int, float] = {}  # when the broker's outbox last went from empty to not
        self._ack_timer: asyncio.TimerHandle | None = None
        self._urgent: set[int] = set()  # brokers whose outbox must not wait for the next fetch
        self._in_flight: set[PartitionAcks] = set()
        self._busy: set[int] = set()
        self._backoff: dict[int, tuple[float, int]] = {}  # node -> (not before, failures)
        self._pump_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._conns: dict[int, BrokerConnection] = {}  # last connection used per broker (sync sends)
        self._raw: dict[int, list[_Raw]] = {}  # fetched, not decoded yet (see decode())
        self.running = False
        self._closing = False
        # True while a poll waits for records: fetches may then long-poll (fetch.max.wait.ms).
        # Otherwise a fetch is a prefetch: it does not wait (MaxWaitMs 0), so acknowledgements made
        # meanwhile never queue behind a long poll; each broker's PrefetchGate allows at most one
        # per poll, and none for a while after one found nothing.
        self.waiting = False
        self._gates: dict[int, PrefetchGate] = {}
        self._prefetching: set[int] = set()  # brokers answering a prefetch

    @staticmethod
    def _now() -> float:
        return time.monotonic() * 1000

    # -- assignment --------------------------------------------------------------------
    def assign(self, partitions: dict[TopicPartition, uuid.UUID]) -> None:
        """The member's assignment (partition -> topic id): revoked partitions give back their
        unread records (RELEASE) and leave their sessions with the next request."""
        for tp, tid in partitions.items():
            self._tp_ids[tp] = tid
            self._key_tp[(tid, tp.partition)] = tp
        new = set(partitions)
        for tp in self.assigned - new:
            if self._tracker.release_buffered(tp) and self.stage(tp) is not None:
                self._urgent.add(self._ack_node[tp])
        if new != self.assigned:
            log.debug("member %s assignment: %s", self._member_id, sorted(new))
        self.assigned = new
        self.pump()

    def commit_targets(self) -> list[PartitionAcks]:
        """Send every pending acknowledgement now; returns all that are staged or in flight, for a
        commit to wait on."""
        self.flush()
        self._urgent.update(self._outbox)
        targets = [pa for box in self._outbox.values() for pa in box.values()] + list(self._in_flight)
        self.pump()
        return targets

    def begin_poll(self) -> None:
        """A poll starts: each broker may be prefetched from once more (see PrefetchGate)."""
        for gate in self._gates.values():
            gate.on_poll()
        self.flush()

    def after_poll(self) -> None:
        """A poll handed out records. Acknowledgements for a broker that still has a poll's worth
        of records buffered (so no fetch is due there soon) go in a ShareAcknowledge; the others
        ride on the fetch that the emptied buffer triggers -- at the latest after the next poll,
        which takes what is left. Fewer requests carrying acknowledgements mean fewer durable
        state writes on the broker. None waits longer than ACK_HOLD_S."""
        for node in self._outbox:
            left = sum(self._tracker.buffered(tp) for tp, n in self._ack_node.items() if n == node)
            left += sum(raw.size for raw in self._raw.get(node, ()))
            if left >= self._max_records:
                self._urgent.add(node)
        self.pump()
        if self._ack_timer is None and any(self._outbox.values()):
            self._ack_timer = asyncio.get_running_loop().call_later(ACK_HOLD_S, self._acks_due)

    def _acks_due(self) -> None:
        """Acknowledgements held ACK_HOLD_S go now, fetch or not (see after_poll)."""
        self._ack_timer = None
        if self._closing or not self.running:
            return
        now = time.monotonic()
        next_due: float | None = None
        for node, box in self._outbox.items():
            if not box:
                continue
            due = self._held_since.get(node, now) + ACK_HOLD_S
            if due <= now:
                self._urgent.add(node)
            else:
                next_due = due if next_due is None else min(next_due, due)
        self.pump()
        if next_due is not None:
            self._ack_timer = asyncio.get_running_loop().call_later(next_due - now, self._acks_due)

    def has_raw(self) -> bool:
        return bool(self._raw)

    def decode(self) -> None:
        """Turn fetched bytes into buffered records. The buffers look empty first, so the pump
        sends the next fetch (with the acknowledgements owed) before the decoding starts: the
        broker serves it while this process decodes and the application works."""
        raws, self._raw = self._raw, {}
        self.pump()
        for items in raws.values():
            for raw in items:
                self._decode(raw)

    # -- acknowledgements: staging and results ---------------------------------------------
    def stage(self, tp: TopicPartition) -> PartitionAcks | None:
        """Move ``tp``'s pending acknowledgements into its broker's outbox (merging with what waits there)."""
        node = self._ack_node.get(tp)
        if node is None:
            return None
        box = self._outbox.setdefault(node, {})
        pa = box.get(tp)
        fresh = self._tracker.take(tp)
        if fresh is None:
            return pa
        if not box:
            self._held_since[node] = time.monotonic()
        if pa is None:
            box[tp] = fresh
            return fresh
        pa.merge(fresh)
        self._tracker.complete_merged(fresh)
        return pa

    def flush(self) -> None:
        for tp in self._tracker.pending_partitions():
            self.stage(tp)

    @staticmethod
    def waiter(pa: PartitionAcks, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        fut = loop.create_future()
        if pa.done:
            fut.set_result(pa.error)
        else:
            pa.waiters.append(fut)
        return fut

    def _finish(self, pa: PartitionAcks, error: BaseException | None, lock_deadline: float | None = None) -> None:
        if pa.done:
            return
        self._tracker.complete(pa, error, lock_deadline)
        self._in_flight.discard(pa)
        for fut in pa.waiters:
            if not fut.done():
                fut.set_result(error)
        pa.waiters.clear()
        if error is not None:
            log.debug("acknowledgements of %s failed: %s", pa.tp, error)
        cb = self.callback
        if cb is not None and (offsets := pa.offsets()):
            try:
                cb({pa.tp: offsets}, error)
            except Exception:
                log.exception("acknowledgement commit callback failed")
        if pa.has_renew:
            self._wake()  # a poll may be waiting for renewals

    def _requeue(self, node: int, pas: Iterable[PartitionAcks]) -> None:
        """Acknowledgements the broker certainly did not apply go back to the outbox (and go next)."""
        box = self._outbox.setdefault(node, {})
        self._urgent.add(node)
        for pa in pas:
            self._in_flight.discard(pa)
            waiting = box.get(pa.tp)
            if waiting is None:
                box[pa.tp] = pa
            else:
                waiting.merge(pa)
                waiting.waiters += pa.waiters  # whoever waited for pa now waits for the merged entry
                pa.waiters.clear()
                self._tracker.complete_merged(pa)

    def _wanted(self) -> dict[int, set[Key]]:
        """Assigned partitions by leader, as session keys."""
        out: dict[int, set[Key]] = {}
        md = self._core.metadata
        stale = False
        for tp in self.assigned:
            leader = md.leader(tp)
            if leader is None:
                stale = True
                continue
            out.setdefault(leader, set()).add((self._tp_ids[tp], tp.partition))
        if stale:
            self._refresh()
        return out

    # -- the pump: which broker gets a request now -------------------------------------------
    def _gate(self, node: int) -> PrefetchGate:
        gate = self._gates.get(node)
        if gate is None:
            gate = self._gates[node] = PrefetchGate()
        return gate

    def _session(self, node: int) -> ShareSession:
        s = self._sessions.get(node)
        if s is None:
            s = self._sessions[node] = ShareSession(node)
        return s

    def _fetchable(self, node: int, want: set[Key]) -> bool:
        if not want or not self._active():
            return False
        if not self.waiting and not self._gate(node).may_prefetch():
            return False
        return node not in self._raw and not any(self._tracker.buffered(self._key_tp[k]) for k in want)

    def _must_acknowledge(self, node: int, want: set[Key]) -> bool:
        """Whether the broker's outbox goes now in a ShareAcknowledge instead of waiting for a fetch."""
        box = self._outbox.get(node)
        if not box:
            return False
        if node in self._urgent or not want or not self._active():
            return True
        if any(pa.has_renew for pa in box.values()):
            return True  # RENEW needs IsRenewAck, and a ShareFetch with it fetches nothing
        session = self._sessions.get(node)
        return session is None or not all(session.can_carry(self._key(tp), want) for tp in box)

    def _holds_on(self, node: int) -> bool:
        return any(n == node and self._tracker.holds(tp) for tp, n in self._ack_node.items())

    def pump(self) -> None:
        """Start a request round for every idle broker that has something to send."""
        if self._closing or not self.running:
            return
        wanted = self._wanted()
        nodes = set(self._outbox) | set(wanted) | {n for n, s in self._sessions.items() if s.is_open}
        now = self._now()
        retry_at: float | None = None
        for node in nodes:
            if node in self._busy:
                continue
            not_before = self._backoff.get(node, (0.0, 0))[0]
            if not_before > now:
                retry_at = not_before if retry_at is None else min(retry_at, not_before)
                continue
            if self._has_work(node, wanted.get(node, set())):
                self._busy.add(node)
                conn = self._conns.get(node)
                sent = self._send(node, conn) if conn is not None and not conn.closed else None
                self._spawn(self._rounds(node, sent))
        if retry_at is not None:
            self._schedule_pump((retry_at - now) / 1000)

    def _has_work(self, node: int, want: set[Key]) -> bool:
        session = self._sessions.get(node)
        return (
            self._must_acknowledge(node, want)
            or self._fetchable(node, want)
            or (session is not None and session.is_open and not want and not self._holds_on(node))
        )

    def _schedule_pump(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + max(delay, 0.0)
        if self._pump_timer is not None and not self._pump_timer.cancelled() and self._pump_timer.when() <= when:
            return
        if self._pump_timer is not None:
            self._pump_timer.cancel()
        self._pump_timer = loop.call_at(when, self.pump)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _node_failed(self, node: int) -> None:
        _, failures = self._backoff.get(node, (0.0, 0))
        base, top = self._config["retry.backoff.ms"], self._config["retry.backoff.max.ms"]
        delay = min(base * 2 ** min(failures, 20), top)
        self._backoff[node] = (self._now() + delay, failures + 1)

    # -- one request round with one broker -----------------------------------------------------
    async def _rounds(self, node: int, sent: _Sent | None) -> None:
        """Requests to one broker, one at a time, for as long as it has work. With a live
        connection the next request is written at once (``_send`` is synchronous): as soon as an
        answer is handled, or while a poll is still running, before anything else gets the loop."""
        try:
            while self.running and not self._closing:
                if sent is None:
                    try:
                        conn = await self._core.connection(node)
                    except KafkaClientError as e:
                        log.debug("no connection to broker %s: %s", node, e)
                        self._session_lost(node)
                        self._node_failed(node)
                        break
                    self._conns[node] = conn
                    sent = self._send(node, conn)
                    if sent is None:
                        break
                plan, fut, sent_at, conn = sent
                sent = None
                try:
                    resp = await fut
                except (KafkaClientError, ProtocolError) as e:
                    self._request_failed(node, plan, e)
                    break
                if isinstance(plan, FetchPlan):
                    self._on_fetch(node, plan, resp, sent_at, conn)
                else:
                    self._on_acknowledge(node, plan, resp, sent_at)
                if self._backoff.get(node, (0.0, 0))[0] > self._now():
                    break
                if not self._has_work(node, self._wanted().get(node, set())):
                    break
                if not conn.closed:
                    sent = self._send(node, conn)
                    if sent is None:
                        break
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("share request round with broker %s failed", node)
            self._node_failed(node)
        finally:
            self._busy.discard(node)
            self.pump()

    def _send(self, node: int, conn: BrokerConnection) -> _Sent | None:
        """Build the broker's next request and write it now; None when there is nothing to send."""
        session = self._session(node)
        if session.conn is not None and session.conn is not conn:
            self._session_lost(node)
        built = self._build(node, conn)
        if built is None:
            return None
        plan, api, version, body = built
        return plan, conn.send(api, body, version=version), time.monotonic(), conn

    def _build(self, node: int, conn: BrokerConnection) -> tuple[Any, str, int, Any] | None:
        session = self._session(node)
        want = self._wanted().get(node, set())
        for tp in self._tracker.pending_partitions():
            if self._ack_node.get(tp) == node:
                self.stage(tp)
        box = self._outbox.get(node, {})
        if self._closing:
            return None
        fetch = self._fetchable(node, want)
        must = self._must_acknowledge(node, want)
        if not session.is_open:
            if box and not want:
                self._outbox.pop(node, None)
                self._urgent.discard(node)
                err = BrokerResponseError(
                    ErrorCode.SHARE_SESSION_NOT_FOUND, f"the share session on broker {node} that acquired them is gone"
                )
                for pa in box.values():
                    self._finish(pa, err)
                return None
            if not (fetch or must):
                return None
            # open the session first (acknowledgements never travel at epoch 0); they go next
            return self._fetch_request(session.plan_fetch(want), conn, max_wait=0 if must else None)
        if must:
            self._outbox.pop(node, None)
            self._urgent.discard(node)
            acks = {self._key(tp): pa for tp, pa in box.items()}
            return self._acknowledge_request(session.plan_acknowledge(acks), conn)
        if fetch:
            if not self.waiting and self._gate(node).probing:
                # a probe carries no acknowledgements: they go with the next fetch (see PrefetchGate)
                return self._fetch_request(session.plan_fetch(want), conn)
            self._outbox.pop(node, None)
            self._urgent.discard(node)
            acks = {self._key(tp): pa for tp, pa in box.items()}
            return self._fetch_request(session.plan_fetch(want, acks), conn)
        if not want and not self._holds_on(node):
            return self._acknowledge_request(session.plan_acknowledge({}, final=True), conn)
        return None

    def _key(self, tp: TopicPartition) -> Key:
        return (self._tp_ids[tp], tp.partition)

    def _fetch_request(self, plan: FetchPlan, conn: BrokerConnection, max_wait: int | None = None) -> tuple:
        version = conn.version("ShareFetch", 1)
        if max_wait is None and not self.waiting:
            max_wait = 0  # a prefetch
            self._gate(conn.node_id).on_sent()
            self._prefetching.add(conn.node_id)
        self._in_flight.update(plan.acks.values())
        cfg = self._config
        body = share_fetch_body(
            plan,
            version,
            group_id=self._group,
            member_id=self._member_id,
            max_wait_ms=cfg["fetch.max.wait.ms"] if max_wait is None else max_wait,
            min_bytes=cfg["fetch.min.bytes"],
            max_bytes=cfg["fetch.max.bytes"],
            max_records=self._max_records,
            record_limit=self._record_limit,
        )
        return plan, "ShareFetch", version, body

    def _acknowledge_request(self, plan: AckRequestPlan, conn: BrokerConnection) -> tuple | None:
        version = conn.version("ShareAcknowledge", 1)
        if plan.renew and version < 2:
            err = UnsupportedVersionError(f"broker {conn.node_id} cannot renew locks (ShareAcknowledge v2)")
            for key, pa in list(plan.acks.items()):
                if pa.has_renew:
                    self._finish(pa, err)
                    del plan.acks[key]
            plan.renew = False
            if not plan.acks:
                return None
        self._in_flight.update(plan.acks.values())
        body = share_acknowledge_body(plan, version, group_id=self._group, member_id=self._member_id)
        return plan, "ShareAcknowledge", version, body

    def _session_lost(self, node: int) -> None:
        """The broker dropped our session (and released our records there) with its connection."""
        session = self._sessions.get(node)
        if session is not None:
            session.reset()
        dropped = self._tracker.drop_buffered(tp for tp, n in self._ack_node.items() if n == node)
        dropped += sum(raw.size for raw in self._raw.pop(node, ()))
        if dropped:
            log.debug("dropped %d buffered records of broker %s: its session is gone", dropped, node)

    def _conn_closed(self, conn: BrokerConnection) -> None:
        for node, session in self._sessions.items():
            if session.conn is conn:
                self._session_lost(node)
        if self.running and not self._closing:
            asyncio.get_running_loop().call_soon(self.pump)

    def _request_failed(self, node: int, plan: Any, exc: BaseException) -> None:
        log.debug("share request to broker %s failed: %s", node, exc)
        self._prefetching.discard(node)
        for pa in list(plan.acks.values()):
            self._finish(pa, exc)
        self._session_lost(node)
        self._node_failed(node)

    def _top_error(self, node: int, plan: Any, code: int, message: str | None) -> None:
        """A top-level error: nothing in the request was applied."""
        final = isinstance(plan, AckRequestPlan) and plan.final
        log.debug("share session on broker %s: error %s (%s); it is opened again", node, code, message)
        if code == ErrorCode.SHARE_SESSION_NOT_FOUND:
            # Whatever removed the session has released our records there (a fetch racing the
            # removal may have acquired a few since: those wait for their lock to run out).
            self._session_lost(node)
        else:
            self._session(node).reset()
        err = BrokerResponseError(code, message)
        if code in SESSION_ERRORS and not final:
            self._requeue(node, plan.acks.values())
            if code == ErrorCode.SHARE_SESSION_LIMIT_REACHED:
                self._node_failed(node)
            return
        for pa in list(plan.acks.values()):
            self._finish(pa, err)
        if code in _FATAL:
            self.fatal = err
            self._wake()
        self._node_failed(node)

    def _on_fetch(self, node: int, plan: FetchPlan, resp: Any, sent_at: float, conn: BrokerConnection) -> None:
        prefetch = node in self._prefetching
        self._prefetching.discard(node)
        if resp.error_code:
            self._top_error(node, plan, resp.error_code, resp.error_message)
            return
        session = self._session(node)
        if session.conn is not conn:
            session.conn = conn
            if self._conn_closed not in conn.on_close:
                conn.on_close.append(self._conn_closed)
        session.on_success(plan)
        self._backoff.pop(node, None)
        lock_ms = resp.acquisition_lock_timeout_ms
        if lock_ms > 0:
            self.lock_timeout_ms = lock_ms
        deadline = sent_at + lock_ms / 1000 if lock_ms > 0 else None
        answered: set[Key] = set()
        got = errors = False
        for t in resp.responses:
            for p in t.partitions:
                key = (t.topic_id, p.partition_index)
                answered.add(key)
                pa = plan.acks.get(key)
                if pa is not None:
                    code = p.acknowledge_error_code
                    self._finish(pa, BrokerResponseError(code, p.acknowledge_error_message) if code else None)
                tp = self._key_tp.get(key)
                if p.error_code:
                    errors = True
                    log.debug("share fetch of %s from broker %s: error %s", tp or key, node, p.error_code)
                    if metadata_stale(p.error_code):
                        self._refresh()
                if not p.acquired_records or tp is None:
                    continue
                self._ack_node[tp] = node
                ranges = [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]
                held = self._tracker.claim(tp, ranges, deadline)
                self._raw.setdefault(node, []).append(_Raw(tp, p.records, ranges, deadline, held))
                got = True
        for key, pa in plan.acks.items():
            if key not in answered:
                self._finish(pa, None)
        if prefetch and not errors:
            self._gate(node).on_answer(got)
        if got:
            self._wake()
        elif errors:
            self._node_failed(node)

    def _decode(self, raw: _Raw) -> None:
        tp, ranges, cfg = raw.tp, raw.ranges, self._config
        try:
            records, gaps, unseen = decode_acquired(
                tp, raw.data, ranges, raw.lock_deadline, check_crcs=cfg["check.crcs"]
            )
        except (ProtocolError, ValueError) as e:
            log.warning("cannot decode records of %s: %s; releasing them", tp, e)
            every = (o for f, last, _ in ranges for o in range(f, last + 1))
            self._tracker.add_pending(tp, every, AcknowledgeType.RELEASE)
            return
        if raw.held:
            records = [r for r in records if r.offset not in raw.held]
            gaps = [o for o in gaps if o not in raw.held]
            unseen = [o for o in unseen if o not in raw.held]
        if unseen:
            self._tracker.add_pending(tp, unseen, AcknowledgeType.RELEASE)
        if cfg["key.deserializer"] is not None or cfg["value.deserializer"] is not None:
            records = self._deserialize(tp, records)
        if tp not in self.assigned:  # revoked meanwhile: give them back
            self._tracker.add_pending(tp, (r.offset for r in records), AcknowledgeType.RELEASE)
            records = []
        self._tracker.add_acquired(tp, records, gaps)

    def _deserialize(self, tp: TopicPartition, records: list) -> list:
        """Apply the deserializers. A record they fail on is not handed out: it is RELEASEd (so
        it comes back, and is archived at the group's delivery limit) and the next poll raises
        RecordDeserializationError for it; the records around it are handed out as usual."""
        kd, vd = self._config["key.deserializer"], self._config["value.deserializer"]
        good, bad = [], []
        for r in records:
            try:
                if kd is not None:
                    r.key = kd(r.key)
                if vd is not None:
                    r.value = vd(r.value)
            except Exception as e:  # noqa: BLE001 - any failure of application code
                bad.append(r.offset)
                if self.deserialization_error is None:
                    self.deserialization_error = RecordDeserializationError(tp, r.offset, e)
                continue
            good.append(r)
        if bad:
            self._tracker.add_pending(tp, bad, AcknowledgeType.RELEASE)
        return good

    def _on_acknowledge(self, node: int, plan: AckRequestPlan, resp: Any, sent_at: float) -> None:
        if resp.error_code:
            self._top_error(node, plan, resp.error_code, resp.error_message)
            return
        self._session(node).on_success(plan)
        lock_ms = getattr(resp, "acquisition_lock_timeout_ms", 0) or self.lock_timeout_ms or 0
        deadline = sent_at + lock_ms / 1000 if lock_ms > 0 else None
        results: dict[Key, BaseException | None] = {}
        for t in resp.responses:
            for p in t.partitions:
                code = p.error_code
                results[(t.topic_id, p.partition_index)] = BrokerResponseError(code, p.error_message) if code else None
        for key, pa in plan.acks.items():
            err = results.get(key)
            if err is not None and metadata_stale(err.code):
                self._refresh()
            self._finish(pa, err, deadline)

    async def close_sessions(self, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while self._busy and loop.time() < deadline:
            await asyncio.sleep(0.005)
        self.flush()
        nodes = set(self._outbox) | {n for n, s in self._sessions.items() if s.is_open}
        if not nodes:
            return
        jobs = [loop.create_task(self._close_node(n)) for n in nodes]
        done, pending = await asyncio.wait(jobs, timeout=max(deadline - loop.time(), 0))
        for t in pending:
            t.cancel()
        for t in done:
            if t.exception() is not None:
                log.debug("closing a share session failed: %s", t.exception())

    async def _close_node(self, node: int) -> None:
        box = self._outbox.pop(node, {})
        session = self._session(node)
        if not session.is_open:
            err = BrokerResponseError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"no share session open on broker {node}")
            for pa in box.values():
                self._finish(pa, err)
            return
        acks = {self._key(tp): pa for tp, pa in box.items()}
        try:
            conn = await self._core.connection(node)
            if session.conn is not None and session.conn is not conn:
                raise KafkaConnectionError(f"the share session on broker {node} was lost with its connection")
            built = self._acknowledge_request(session.plan_acknowledge(acks, final=True), conn)
            if built is None:
                return
            plan, api, version, body = built
            sent_at = time.monotonic()
            resp = await conn.request(api, body, version=version)
        except (KafkaClientError, ProtocolError) as e:
            for pa in box.values():
                self._finish(pa, e)
            session.reset()
            return
        self._on_acknowledge(node, plan, resp, sent_at)

    async def close(self, deadline: float) -> None:
        """Stop fetching, send what is owed on the final request of every session, fail the rest."""
        self._closing = True
        try:
            await self.close_sessions(deadline)
        finally:
            self.running = False
            pending = list(self._in_flight) + [pa for box in self._outbox.values() for pa in box.values()]
            for pa in pending:
                self._finish(pa, ClientClosedError("the consumer closed before the acknowledgement was answered"))
            self._outbox.clear()
            if self._pump_timer is not None:
                self._pump_timer.cancel()
            if self._ack_timer is not None:
                self._ack_timer.cancel()
            tasks = [t for t in self._tasks if not t.done()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
