"""ShareFetch and ShareAcknowledge: the data path of share groups (KIP-932).

A ShareFetch runs in four steps, as Kafka's does:

1. the share session (shoal/broker/share/session.py) is opened (epoch 0),
   advanced, or closed (epoch -1); its errors are top-level errors;
2. piggy-backed acknowledgements are applied, each partition's batches
   written durably before the answer (their outcome goes in
   AcknowledgeErrorCode);
3. every partition of the session is loaded and records are acquired, up to
   MaxRecords in total and MaxBytes of log data, split evenly across the
   partitions that have records to acquire (Kafka's "uniform" strategy); a
   partition is read for as long as that leaves room; when nothing at all
   could be acquired the request waits as a DelayedShareFetch in the fetch purgatory
   (woken by produce, releases, lock expiries and acks) until MaxWaitMs;
4. the response names every partition the request named plus every
   partition with records or errors; Records is never null (librdkafka drops
   a response with a null Records).

ShareAcknowledge does steps 1 and 2 only. A final request (epoch -1) releases
whatever the member still holds on the session's partitions after its acks.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import GROUP, READ, TopicChecks, allowed
from shoal.broker.handlers.contract import Broker
from shoal.broker.handlers.limits import id_error
from shoal.broker.net.contract import RequestContext
from shoal.broker.partition.partition import fetch_key
from shoal.broker.share.ack_batches import ack_batches_problem
from shoal.broker.share.partition_manager import AckWrite, Entry
from shoal.broker.share.session import ContextKind, SessionError
from shoal.broker.timing.prompt import PromptFuture
from shoal.broker.timing.purgatory import DelayedOperation
from shoal.protocol import messages
from shoal.protocol.constants import RENEW, ShareAcquireMode
from shoal.protocol.errors import ErrorCode

PKey = tuple[uuid.UUID, int]


def _acks(topics: Any) -> dict[PKey, list[tuple[int, int, list[int]]]]:
    out: dict[PKey, list[tuple[int, int, list[int]]]] = {}
    for t in topics:
        for p in t.partitions:
            if p.acknowledgement_batches:
                out.setdefault((t.topic_id, p.partition_index), []).extend(
                    (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches
                )
    return out


async def _apply_acks(
    broker: Broker, gid: str, member: str, acks: dict[PKey, list], renew_ok: bool, renew_enabled: bool
) -> dict[PKey, tuple[int, str | None]]:
    mgr = broker.share_partitions
    out: dict[PKey, tuple[int, str | None]] = {}
    pending = []
    for (tid, index), batches in acks.items():
        # the batches' shape first, as Kafka's handler does: INVALID_REQUEST for the partition
        problem = ack_batches_problem(batches, renew_ack=renew_ok)
        if problem is not None:
            out[(tid, index)] = (ErrorCode.INVALID_REQUEST, problem)
            continue
        if any(RENEW in types for _, _, types in batches):
            if not renew_enabled:
                out[(tid, index)] = (ErrorCode.INVALID_RECORD_STATE, "share.renew.acknowledge.enable is false.")
                continue
        pending.append(((tid, index), batches))

    # Every partition's change is made and its write queued first, then each is waited for:
    # the writes run side by side with no task per partition (a task is a loop turn).
    writes: list[tuple[PKey, AckWrite]] = []
    for key, batches in pending:
        try:
            entry = mgr.ready(gid, key[0], key[1]) or await mgr.get(gid, key[0], key[1])
            begun = mgr.begin_acknowledge(entry, member, batches)
        except ErrorAnswer as e:
            out[key] = (e.code, e.message)
            continue
        if isinstance(begun, tuple):
            out[key] = begun
        else:
            writes.append((key, begun))
    for key, write in writes:
        out[key] = await write.outcome()
    return out


def _unreadable(broker: Broker, ctx: RequestContext, keys: Any) -> set[uuid.UUID]:
    """The topic ids among ``keys`` whose topic the caller may not READ (unknown ids are left to the
    share-partition manager, which answers UNKNOWN_TOPIC_ID)."""
    if broker.authorizer is None:
        return set()
    may_read = TopicChecks(broker, ctx, READ)
    out = set()
    for tid in {k[0] for k in keys}:
        topic = broker.topics.by_id(tid)
        if topic is not None and not may_read.ok(topic.name):
            out.add(tid)
    return out


_TOPIC_DENIED: tuple[int, str | None] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)


class ShareFetchOperation:
    """The fetch half of one ShareFetch: which partitions, and what was acquired."""

    def __init__(self, broker: Broker, gid: str, member: str, req: messages.ShareFetchRequest, version: int) -> None:
        self.broker = broker
        self.gid, self.member = gid, member
        # The share session this fetch belongs to: once it is closed, replaced or evicted
        # (its connection closed, the member left or was removed), the fetch acquires nothing.
        self.session = broker.share_partitions.sessions.get(gid, member)
        self.max_records = req.max_records
        self.max_bytes = req.max_bytes
        self.batch_optimized = version < 2 or req.share_acquire_mode != ShareAcquireMode.RECORD_LIMIT
        self.batch_size = req.batch_size if req.batch_size > 0 else None
        self.entries: dict[PKey, Entry] = {}
        self.errors: dict[PKey, tuple[int, str | None]] = {}
        self.acquired: dict[PKey, Any] = {}

    async def load(self, partitions: list[PKey]) -> None:
        """The share partitions to acquire from, in request order; those not loaded yet are
        loaded side by side (loaded ones cost no wait: see SharePartitionManager.ready)."""
        mgr = self.broker.share_partitions
        got: dict[PKey, Entry] = {}
        cold: list[PKey] = []
        for key in partitions:
            try:
                entry = mgr.ready(self.gid, key[0], key[1])
            except ErrorAnswer as e:
                self.errors[key] = (e.code, e.message)
                continue
            if entry is None:
                cold.append(key)
            else:
                got[key] = entry

        async def one(key: PKey) -> None:
            try:
                got[key] = await mgr.get(self.gid, key[0], key[1])
            except ErrorAnswer as e:
                self.errors[key] = (e.code, e.message)

        if cold:
            await asyncio.gather(*(one(k) for k in cold))
        self.entries = {k: got[k] for k in partitions if k in got}

    def try_acquire(self) -> bool:
        """Acquire from every partition while records and bytes remain; True if anything was acquired.

        MaxBytes is split evenly across the partitions that can acquire now (Kafka's
        "uniform" PartitionMaxBytesStrategy); MaxRecords is taken in partition order."""
        mgr = self.broker.share_partitions
        if not self.session_alive():
            return False
        live = [
            (key, entry)
            for key, entry in self.entries.items()
            # an entry dropped meanwhile (topic deleted) is skipped
            if mgr.entries.get(entry.key) is entry and mgr.acquirable(entry)
        ]
        if not live:
            return False
        share = max(1, self.max_bytes // len(live))
        records, budget = self.max_records, self.max_bytes
        for key, entry in live:
            if records <= 0 or budget <= 0:
                break
            got = mgr.acquire(
                entry,
                self.member,
                records,
                min(share, budget),
                batch_optimized=self.batch_optimized,
                batch_size=self.batch_size,
            )
            if got is None:
                continue
            self.acquired[key] = got
            records -= sum(last - first + 1 for first, last, _ in got.ranges)
            budget -= len(got.records)
        return bool(self.acquired)

    def session_alive(self) -> bool:
        return (
            self.session is not None
            and self.broker.share_partitions.sessions.get(self.gid, self.member) is self.session
        )

    def watch_keys(self) -> list[tuple]:
        return [fetch_key(e.partition.topic.name, e.partition.index) for e in self.entries.values()]

    def anything_acquirable(self) -> bool:
        mgr = self.broker.share_partitions
        return any(mgr.acquirable(e) for e in self.entries.values())


class DelayedShareFetch(DelayedOperation):
    __slots__ = ("future", "op")

    def __init__(self, op: ShareFetchOperation, timeout_ms: int, future: PromptFuture) -> None:
        super().__init__(timeout_ms)
        self.op, self.future = op, future

    def try_complete(self) -> bool:
        if self.future.done() or not self.op.session_alive():
            return self.force_complete()  # nothing to wait for: the session is gone
        if self.op.anything_acquirable() and self.op.try_acquire():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def on_expiration(self) -> None:
        pass


def _leader(cls: Any, broker: Broker) -> Any:
    return cls.LeaderIdAndEpoch(leader_id=broker.node_id, leader_epoch=0)


def _endpoints(cls: Any, broker: Broker, ctx: RequestContext) -> list:
    host, port = broker.endpoint(ctx)
    return [cls.NodeEndpoint(node_id=broker.node_id, host=host, port=port, rack=None)]


async def handle_share_fetch(broker: Broker, ctx: RequestContext, req: messages.ShareFetchRequest) -> Any:
    cls = messages.ShareFetchResponse
    version = ctx.api_version
    mgr = broker.share_partitions
    gid, member = req.group_id, req.member_id
    lock_ms = 0

    def top(code: int, message: str | None) -> Any:
        return cls(
            throttle_time_ms=0,
            error_code=code,
            error_message=message,
            acquisition_lock_timeout_ms=lock_ms,
            responses=[],
        )

    if broker.authorizer is not None and not allowed(broker, ctx, READ, GROUP, gid or ""):
        return top(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if not gid or not member:
        return top(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set.")
    bad = id_error(gid, member)
    if bad is not None:
        return top(*bad)
    lock_ms = mgr.setting(gid, "share.record.lock.duration.ms")
    renew = version >= 2 and req.is_renew_ack
    if renew:
        # KIP-1222: a renew-only ShareFetch fetches nothing, so it must not ask for anything
        if req.max_wait_ms or req.min_bytes or req.max_bytes or req.max_records:
            return top(
                ErrorCode.INVALID_REQUEST, "MaxWaitMs, MinBytes, MaxBytes and MaxRecords must be 0 with IsRenewAck."
            )
    elif req.max_records < 0 or (version >= 1 and req.max_records == 0 and req.share_session_epoch != -1):
        return top(ErrorCode.INVALID_REQUEST, "MaxRecords must be positive.")
    named: list[PKey] = []
    for t in req.topics:
        for p in t.partitions:
            if (t.topic_id, p.partition_index) not in named:
                named.append((t.topic_id, p.partition_index))
    forgotten = [(t.topic_id, i) for t in req.forgotten_topics_data for i in t.partitions]
    acks = _acks(req.topics)
    session = mgr.sessions.open_or_update(
        gid,
        member,
        req.share_session_epoch,
        named,
        forgotten,
        connection_id=ctx.connection,
        acknowledgements=bool(acks),
    )
    if isinstance(session, SessionError):
        if session.error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED and req.max_wait_ms > 0:
            await asyncio.sleep(req.max_wait_ms / 1000)  # as Kafka: do not let the client spin
        return top(session.error_code, session.message)

    # READ on each topic (KIP-932): a partition of a topic the caller may not read is neither
    # acknowledged nor fetched, and answers TOPIC_AUTHORIZATION_FAILED
    denied = _unreadable(broker, ctx, list(named) + list(acks) + list(session.fetch_partitions))
    ack_results: dict[PKey, tuple[int, str | None]] = {k: _TOPIC_DENIED for k in acks if k[0] in denied}
    acks = {k: b for k, b in acks.items() if k[0] not in denied}
    # The acknowledgements are made durable before this request acquires (Kafka's broker runs
    # the two halves side by side; here that measured 5-10 % slower with librdkafka members
    # in benchmarks/share_scaling.py, and the serial order lets a fetch get back at once the
    # records it released).
    if acks:
        ack_results.update(
            await _apply_acks(broker, gid, member, acks, renew, mgr.setting(gid, "share.renew.acknowledge.enable"))
        )

    op = ShareFetchOperation(broker, gid, member, req, version)
    if session.kind == ContextKind.FINAL:
        removed = session.removed_session
        if removed is not None:
            mgr.release(gid, member, set(removed.partitions))
    elif not renew:
        wanted = list(session.fetch_partitions)
        op.errors.update((k, _TOPIC_DENIED) for k in wanted if k[0] in denied)
        await op.load([k for k in wanted if k[0] not in denied])
        if not op.try_acquire() and not op.errors and req.max_wait_ms > 0 and op.entries:
            future = PromptFuture()
            broker.fetch_purgatory.try_complete_else_watch(
                DelayedShareFetch(op, req.max_wait_ms, future), op.watch_keys()
            )
            await future

    keys = list(named)
    for k in list(op.acquired) + list(op.errors) + list(ack_results):
        if k not in keys:
            keys.append(k)
    by_topic: dict[uuid.UUID, Any] = {}
    stats = broker.stats
    for key in keys:
        tid, index = key
        pd = cls.PartitionData(
            partition_index=index,
            error_message=None,
            acknowledge_error_message=None,
            current_leader=_leader(cls, broker),
            records=b"",
        )
        if key in op.errors:
            pd.error_code, pd.error_message = op.errors[key]
        if key in ack_results:
            pd.acknowledge_error_code, pd.acknowledge_error_message = ack_results[key]
        got = op.acquired.get(key)
        if got is not None:
            pd.records = got.records
            stats.topic(op.entries[key].topic.name).bytes_out += len(got.records)  # BytesOut, as Fetch's
            pd.acquired_records = [
                cls.AcquiredRecords(first_offset=f, last_offset=last, delivery_count=n) for f, last, n in got.ranges
            ]
        topic = by_topic.get(tid)
        if topic is None:
            topic = by_topic[tid] = cls.ShareFetchableTopicResponse(topic_id=tid)
        topic.partitions.append(pd)
    return cls(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        acquisition_lock_timeout_ms=lock_ms,
        responses=list(by_topic.values()),
        node_endpoints=_endpoints(cls, broker, ctx),
    )


async def handle_share_acknowledge(broker: Broker, ctx: RequestContext, req: messages.ShareAcknowledgeRequest) -> Any:
    cls = messages.ShareAcknowledgeResponse
    version = ctx.api_version
    mgr = broker.share_partitions
    gid, member = req.group_id, req.member_id
    lock_ms = mgr.setting(gid, "share.record.lock.duration.ms") if gid else 0

    def top(code: int, message: str | None) -> Any:
        out = cls(throttle_time_ms=0, error_code=code, error_message=message, responses=[])
        if version >= 2:
            out.acquisition_lock_timeout_ms = lock_ms
        return out

    if broker.authorizer is not None and not allowed(broker, ctx, READ, GROUP, gid or ""):
        return top(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    if not gid or not member:
        return top(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set.")
    bad = id_error(gid, member)
    if bad is not None:
        return top(*bad)
    session = mgr.sessions.for_acknowledge(gid, member, req.share_session_epoch)
    if isinstance(session, SessionError):
        return top(session.error_code, session.message)
    acks = _acks(req.topics)
    renew = version >= 2 and req.is_renew_ack
    denied = _unreadable(broker, ctx, list(acks))
    results: dict[PKey, tuple[int, str | None]] = {k: _TOPIC_DENIED for k in acks if k[0] in denied}
    acks = {k: b for k, b in acks.items() if k[0] not in denied}
    results.update(
        await _apply_acks(broker, gid, member, acks, renew, mgr.setting(gid, "share.renew.acknowledge.enable"))
    )
    if session.kind == ContextKind.FINAL and session.removed_session is not None:
        mgr.release(gid, member, set(session.removed_session.partitions))
    by_topic: dict[uuid.UUID, Any] = {}
    for t in req.topics:
        for p in t.partitions:
            key = (t.topic_id, p.partition_index)
            code, message = results.get(key, (0, None))
            topic = by_topic.get(t.topic_id)
            if topic is None:
                topic = by_topic[t.topic_id] = cls.ShareAcknowledgeTopicResponse(topic_id=t.topic_id)
            if any(x.partition_index == p.partition_index for x in topic.partitions):
                continue
            topic.partitions.append(
                cls.PartitionData(
                    partition_index=p.partition_index,
                    error_code=code,
                    error_message=message,
                    current_leader=_leader(cls, broker),
                )
            )
    out = top(0, None)
    out.responses = list(by_topic.values())
    out.node_endpoints = _endpoints(cls, broker, ctx)
    return out


def register(table: HandlerTable) -> None:
    # Prompt: the rest of a request runs in the turn its acknowledgement became durable, or its
    # long poll was woken (timing/prompt.py says why)
    table.add("ShareFetch", handle_share_fetch, prompt=True)
    table.add("ShareAcknowledge", handle_share_acknowledge, prompt=True)
