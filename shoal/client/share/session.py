"""The client side of share sessions, and the bytes of ShareFetch / ShareAcknowledge. Sans-IO.

Why a session: a share consumer names its partitions once per broker, when
the session opens (ShareFetch epoch 0); later requests carry only changes --
partitions to add in Topics, partitions to drop in ForgottenTopicsData -- and
the epoch, which must grow by one per request (1, 2, ... INT32_MAX, then 1
again). -1 closes the session and makes the broker release whatever this
member still holds there. ``ShareSession`` is that bookkeeping for one
broker: it plans each request from what should be fetched and what carries
acknowledgements, and learns from the answer (``on_success``) or forgets
everything (``reset``: any session error, a lost connection -- the broker
drops a session with the connection that opened it).

Rules that shape the plans (Kafka 4.2 / KIP-932):

* Acknowledgements never travel at epoch 0 (the broker answers
  INVALID_REQUEST): a new session opens first and acknowledges afterwards.
* A partition named in a ShareFetch's Topics joins the session, so a fetch
  carries only acknowledgements of partitions that stay in the session;
  anything else goes in a ShareAcknowledge.
* RENEW acknowledgements need IsRenewAck (v2), and a ShareFetch with it
  fetches nothing, so they go in a ShareAcknowledge.

``decode_acquired`` turns a ShareFetch partition's record batches and
AcquiredRecords into ``ConsumerRecord``s with their delivery counts, keeping
only acquired offsets (a batch may hold records acquired by others), and
lists the acquired offsets that hold no record (GAP) -- except offsets past
the end of the data, which are never assumed empty (they are RELEASEd, so a
truncated response cannot archive real records).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.records import ConsumerRecord
from shoal.client.share.acks import PartitionAcks
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ShareAcquireMode
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.records import iter_batches

__all__ = [
    "FINAL_EPOCH",
    "PREFETCH_BACKOFF_MAX",
    "SESSION_ERRORS",
    "AckRequestPlan",
    "FetchPlan",
    "Key",
    "PrefetchGate",
    "ShareSession",
    "decode_acquired",
    "next_epoch",
    "share_acknowledge_body",
    "share_fetch_body",
]

_SF = api_by_name("ShareFetch").request_class()
_SA = api_by_name("ShareAcknowledge").request_class()

FINAL_EPOCH = -1
_MAX_EPOCH = 2147483647

Key = tuple[uuid.UUID, int]  # (topic id, partition)

# Top-level errors after which the broker applied nothing and the session must be reopened.
SESSION_ERRORS = frozenset(
    {
        ErrorCode.SHARE_SESSION_NOT_FOUND,
        ErrorCode.INVALID_SHARE_SESSION_EPOCH,
        ErrorCode.SHARE_SESSION_LIMIT_REACHED,
    }
)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: INT32_MAX wraps to 1 (0 opens, -1 closes)."""
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class FetchPlan:
    """One ShareFetch to send: epoch, partitions to name, partitions to forget, acknowledgements."""

    epoch: int
    topics: list[Key]
    forgotten: list[Key]
    acks: dict[Key, PartitionAcks] = field(default_factory=dict)
    session_after: frozenset[Key] = frozenset()


@dataclass(slots=True)
class AckRequestPlan:
    """One ShareAcknowledge to send."""

    epoch: int
    acks: dict[Key, PartitionAcks]
    renew: bool

    @property
    def final(self) -> bool:
        return self.epoch == FINAL_EPOCH


class ShareSession:
    """One broker's share session as the client sees it (see module doc)."""

    __slots__ = ("conn", "epoch", "node_id", "partitions")

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.epoch = 0  # epoch of the next request; 0: the next ShareFetch opens a session
        self.partitions: frozenset[Key] = frozenset()
        self.conn: Any = None  # the connection the session was opened on (owned by the shell)

    @property
    def is_open(self) -> bool:
        return self.epoch != 0

    def reset(self) -> None:
        """Forget the session: the next ShareFetch opens a new one."""
        self.epoch = 0
        self.partitions = frozenset()
        self.conn = None

    def can_carry(self, key: Key, wanted: Iterable[Key]) -> bool:
        """Whether a ShareFetch with ``wanted`` may carry ``key``'s acknowledgements."""
        return self.is_open and (key in self.partitions or key in set(wanted))

    def plan_fetch(self, wanted: Iterable[Key], acks: Mapping[Key, PartitionAcks] | None = None) -> FetchPlan:
        """The next ShareFetch: fetch ``wanted``; ``acks`` must be carriable (see ``can_carry``)."""
        want = frozenset(wanted)
        if not self.is_open:
            if acks:
                raise ValueError("acknowledgements cannot open a share session")
            return FetchPlan(0, sorted(want), [], {}, want)
        acks = dict(acks or {})
        for key in acks:
            if key not in self.partitions and key not in want:
                raise ValueError(f"{key} is not in the session: its acknowledgements need a ShareAcknowledge")
        added = want - self.partitions
        forgotten = self.partitions - want
        topics = sorted(added | acks.keys())
        return FetchPlan(self.epoch, topics, sorted(forgotten), acks, want)

    def plan_acknowledge(self, acks: Mapping[Key, PartitionAcks], *, final: bool = False) -> AckRequestPlan:
        """A ShareAcknowledge in this session (``final``: epoch -1, closing it)."""
        if not self.is_open:
            raise ValueError("no share session is open on this broker")
        renew = any(pa.has_renew for pa in acks.values())
        return AckRequestPlan(FINAL_EPOCH if final else self.epoch, dict(acks), renew)

    def on_success(self, plan: FetchPlan | AckRequestPlan) -> None:
        """The broker accepted ``plan`` (no top-level error)."""
        if isinstance(plan, FetchPlan):
            self.partitions = plan.session_after
            self.epoch = next_epoch(plan.epoch)
        elif plan.final:
            self.reset()
        else:
            self.epoch = next_epoch(plan.epoch)


PREFETCH_BACKOFF_MAX = 16  # polls between probing prefetches while prefetches find nothing


@dataclass(slots=True)
class PrefetchGate:
    """Whether a poll may prefetch from one broker (a ShareFetch sent while no poll waits).

    A prefetch is worth its round trip when it brings records; one that
    comes back empty means nothing is acquirable now -- the log is read to
    its end, or the group's in-flight limit
    (``group.share.partition.max.record.locks``) is taken by records the
    members already hold, which is the normal state when several consumers
    share a partition. Then it only costs a broker round and, worse, holds
    the broker's one request slot, so the next poll's acknowledgements --
    the very ones that free room -- wait for its answer. After an empty
    prefetch the next 1, 2, 4 .. ``PREFETCH_BACKOFF_MAX`` polls skip it
    (each skipped poll fetches when it needs records, as without
    prefetching); a prefetch that brings records halves the back-off. Polls
    are counted by ``on_poll`` at the start of each poll; one prefetch per
    poll at most.

    While backing off, a prefetch is a *probe* and carries no
    acknowledgements: they wait for the next fetch, so a poll's worth of them
    still makes one durable state write on the broker (writes of a share
    partition are serialized there) instead of being split around the probe.
    """

    skip: int = 0  # polls left that do not prefetch
    backoff: int = 0  # polls to skip after the next empty prefetch (0: none yet)
    allowed: bool = True  # this poll may prefetch
    sent: bool = False  # this poll prefetched

    def on_poll(self) -> None:
        self.sent = False
        self.allowed = self.skip == 0
        if self.skip:
            self.skip -= 1

    def may_prefetch(self) -> bool:
        return self.allowed and not self.sent

    @property
    def probing(self) -> bool:
        """A prefetch now would be a probe (see class doc)."""
        return self.backoff > 0

    def on_sent(self) -> None:
        self.sent = True

    def on_answer(self, got_records: bool) -> None:
        """A prefetch was answered (without a top-level error)."""
        if got_records:
            self.backoff //= 2  # one lucky prefetch does not end a back-off that keeps being earned
            self.skip = 0
            return
        self.backoff = min(max(1, self.backoff * 2), PREFETCH_BACKOFF_MAX)
        self.skip = self.backoff


# -- request bodies ---------------------------------------------------------------------


def _ack_batches(cls: Any, pa: PartitionAcks | None) -> list:
    if pa is None:
        return []
    return [
        cls.AcknowledgementBatch(
            first_offset=b.first_offset, last_offset=b.last_offset, acknowledge_types=list(b.types)
        )
        for b in pa.batches()
    ]


def share_fetch_body(
    plan: FetchPlan,
    version: int,
    *,
    group_id: str,
    member_id: str,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    max_records: int,
    record_limit: bool,
) -> Any:
    by_topic: dict[uuid.UUID, list] = {}
    for tid, index in plan.topics:
        part = _SF.FetchPartition(
            partition_index=index, acknowledgement_batches=_ack_batches(_SF, plan.acks.get((tid, index)))
        )
        by_topic.setdefault(tid, []).append(part)
    forgotten: dict[uuid.UUID, list[int]] = {}
    for tid, index in plan.forgotten:
        forgotten.setdefault(tid, []).append(index)
    body = _SF(
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=plan.epoch,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        max_records=max_records,
        batch_size=max_records,
        topics=[_SF.FetchTopic(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
        forgotten_topics_data=[_SF.ForgottenTopic(topic_id=t, partitions=ps) for t, ps in forgotten.items()],
    )
    if version >= 2 and record_limit:
        body.share_acquire_mode = ShareAcquireMode.RECORD_LIMIT
    return body


def share_acknowledge_body(plan: AckRequestPlan, version: int, *, group_id: str, member_id: str) -> Any:
    by_topic: dict[uuid.UUID, list] = {}
    for (tid, index), pa in sorted(plan.acks.items(), key=lambda kv: kv[0]):
        by_topic.setdefault(tid, []).append(
            _SA.AcknowledgePartition(partition_index=index, acknowledgement_batches=_ack_batches(_SA, pa))
        )
    body = _SA(
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=plan.epoch,
        topics=[_SA.AcknowledgeTopic(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
    )
    if version >= 2 and plan.renew:
        body.is_renew_ack = True
    return body


# -- response records ---------------------------------------------------------------------


def decode_acquired(
    tp: TopicPartition,
    data: Any,
    acquired: Iterable[tuple[int, int, int]],
    lock_deadline: float | None,
    *,
    check_crcs: bool = True,
) -> tuple[list[ConsumerRecord], list[int], list[int]]:
    """(records, gaps, unseen) of one ShareFetch partition.

    ``acquired``: (first, last, delivery count) ranges. ``records`` are the
    acquired records in offset order; ``gaps`` acquired offsets inside or
    between the returned batches that hold no record; ``unseen`` acquired
    offsets after the last returned batch.

    The share consumer's hot path: ``ConsumerRecord``s are built by the batch
    parser itself (``make``), with no intermediate record objects, and a batch
    lying densely inside the current acquired range -- the usual case -- is
    taken whole, without per-record checks. Deserializers are applied by the
    caller, record by record, so one failing record does not lose the others.
    """
    ranges = sorted((f, last, n) for f, last, n in acquired if last >= f)
    out: list[ConsumerRecord] = []
    gaps: list[int] = []
    if not ranges:
        return out, gaps, []
    topic, partition = tp
    ri = 0
    first, last, count = ranges[0]
    cursor = first  # next acquired offset not yet accounted for
    seen_end = -1  # last offset covered by a returned batch
    view = memoryview(data) if data else memoryview(b"")
    for header, _ in iter_batches(view, allow_partial=True):
        if header.magic != 2:
            raise ProtocolError(f"unsupported magic {header.magic} in a share fetch")
        b_last = header.last_offset
        seen_end = max(seen_end, b_last)
        if ri >= len(ranges):
            break
        if b_last < cursor:
            continue
        if header.is_control or not header.records_count:
            continue  # its acquired offsets become gaps below

        def make(offset: int, ts: int, key: Any, value: Any, headers: list, attrs: int, ts_type: int,
                 epoch: int = header.partition_leader_epoch, count: int = count) -> ConsumerRecord:  # fmt: skip
            return ConsumerRecord(
                topic, partition, offset, ts, ts_type, key, value, headers, epoch, count, lock_deadline
            )

        base = header.base_offset
        if cursor <= base and b_last <= last and header.records_count == b_last - base + 1:
            # The common case: a dense batch inside the current acquired range, no per-record checks.
            if base > cursor:
                gaps.extend(range(cursor, base))
            out += header.records(verify_crc=check_crcs, make=make)
            cursor = b_last + 1
            continue
        for r in header.records(verify_crc=check_crcs, make=make):
            o = r.offset
            while o > last:
                gaps.extend(range(cursor, last + 1))
                ri += 1
                if ri >= len(ranges):
                    break
                first, last, count = ranges[ri]
                cursor = first
            if ri >= len(ranges):
                break
            if o < cursor:
                continue
            if o > cursor:
                gaps.extend(range(cursor, o))
            r.delivery_count = count  # the range this offset falls in (the batch may span several)
            out.append(r)
            cursor = o + 1
    # offsets left in the ranges: gaps up to the last returned batch, unseen past it
    unseen: list[int] = []
    while ri < len(ranges):
        if cursor <= last:
            cut = min(last, seen_end)
            if cursor <= cut:
                gaps.extend(range(cursor, cut + 1))
            unseen.extend(range(max(cursor, cut + 1), last + 1))
        ri += 1
        if ri < len(ranges):
            first, last, count = ranges[ri]
            cursor = first
    return out, gaps, unseen
