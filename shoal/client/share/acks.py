"""What a share consumer holds and owes the broker (KIP-932), sans-IO.

A share consumer gets records *acquired* for it: each is locked to this
member until it is acknowledged (ACCEPT, RELEASE, REJECT, RENEW) or its lock
runs out. ``AckTracker`` is the client's ledger of those records. It does no
I/O and reads no clock (callers pass ``now``), so every rule below is tested
by calling methods; ``client.share.consumer`` only moves its output to
sockets.

Life of one acquired offset, per partition:

* **buffered** -- fetched, not yet handed to the application (a fetch may
  bring more than ``max.poll.records``; the rest waits for later polls).
  Buffered records whose lock deadline has passed are dropped, never handed
  out: the broker has given them back and may have redelivered them.
* **delivered** -- returned by the latest poll and not acknowledged yet. Only
  these can be acknowledged, once each, and only with the very object poll
  returned: acknowledging a record twice, a record from an earlier poll that
  was already settled, or another consumer's record raises
  ``IllegalStateError`` here, before anything reaches the broker.
* **pending** -- acknowledged, not yet sent. ``take`` hands a partition's
  pending acknowledgements to the shell as ``PartitionAcks``; ``complete``
  reports the broker's answer (``requeue`` puts them back when the broker
  certainly did not apply them, e.g. a share-session error).
* **GAP** -- an acquired offset with no record in the fetched data
  (compacted away, a control batch) is acknowledged as GAP at once.

The two acknowledgement modes are one call at the start of a poll
(``begin_poll``): implicit mode accepts every delivered record the
application left unacknowledged; explicit mode refuses to poll while any is
left. Acknowledging in implicit mode is allowed (what is left is accepted).

RENEW (Kafka 4.2, KIP-1222): the record stays with the application. Its
acknowledgement is sent like the others; when the broker confirms the lock
restart the record is handed out again by the next poll (with its new lock
deadline), where it must be acknowledged again, as Kafka's client does. A
failed renewal drops it: its lock is gone.

Wire shape: ``ack_batches`` turns a partition's {offset: type} into
AcknowledgementBatches of contiguous offsets, each with one type per offset,
or a single type for the whole range when every offset has the same one --
the two forms KIP-932 allows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, sub
from typing import Any

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import IllegalStateError
from shoal.client.core.records import ConsumerRecord
from shoal.protocol.constants import ACCEPT, GAP, RELEASE, RENEW, AcknowledgeType

__all__ = ["AckBatch", "AckTracker", "AcknowledgeType", "PartitionAcks", "ack_batches"]

_OFFSET = attrgetter("offset")


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One AcknowledgementBatch: [first, last] and one type per offset, or one type for all."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


def ack_batches(acks: Mapping[int, int]) -> list[AckBatch]:
    """Contiguous runs of ``acks`` (offset -> type) as AcknowledgementBatches, in offset order.

    Runs are found without a Python step per offset (and one uniform run, the
    usual shape of a poll's worth, without sorting): in sorted distinct offsets,
    ``offset - index`` is constant exactly along a contiguous run, so each run
    ends where bisect finds that value ending."""
    offsets = sorted(acks)  # linear on the usual ascending keys
    n = len(offsets)
    if not n:
        return []
    if offsets[-1] - offsets[0] == n - 1:  # one contiguous run (offsets are distinct)
        uniform = set(acks.values())
        if len(uniform) == 1:
            return [AckBatch(offsets[0], offsets[-1], (uniform.pop(),))]
    out: list[AckBatch] = []
    shifted = list(map(sub, offsets, range(n)))
    kinds = list(map(acks.__getitem__, offsets))
    i = 0
    while i < n:
        j = bisect_right(shifted, shifted[i], i)
        types = kinds[i:j]
        first = types[0]
        out.append(AckBatch(offsets[i], offsets[j - 1], (first,) if types.count(first) == j - i else tuple(types)))
        i = j
    return out


@dataclass(slots=True, eq=False)
class PartitionAcks:
    """Acknowledgements of one partition taken for one request.

    ``waiters`` belongs to the caller (the asyncio shell keeps futures there).
    """

    tp: TopicPartition
    acks: dict[int, int]
    has_renew: bool = None  # type: ignore[assignment]  # None: worked out from acks
    internal: set[int] = field(default_factory=set)  # offsets the client acknowledged on its own
    waiters: list[Any] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False

    def __post_init__(self) -> None:
        if self.has_renew is None:
            self.has_renew = RENEW in self.acks.values()

    def merge(self, other: PartitionAcks) -> None:
        """Take ``other``'s acknowledgements (of other offsets of the same partition) into this one."""
        self.acks.update(other.acks)
        self.has_renew = self.has_renew or other.has_renew
        self.internal |= other.internal

    def batches(self) -> list[AckBatch]:
        return ack_batches(self.acks)

    def offsets(self) -> set[int]:
        """Offsets the application acknowledged: not GAPs, not records the client gave back
        on its own (fetched and never handed out)."""
        internal = self.internal
        return {o for o, t in self.acks.items() if t != GAP and o not in internal}


@dataclass(slots=True)
class _Partition:
    buffer: deque[ConsumerRecord] = field(default_factory=deque)
    delivered: dict[int, ConsumerRecord] = field(default_factory=dict)
    pending: dict[int, int] = field(default_factory=dict)
    renewing: dict[int, ConsumerRecord] = field(default_factory=dict)
    renewed: list[ConsumerRecord] = field(default_factory=list)
    owed: set[int] = field(default_factory=set)  # offsets in PartitionAcks taken and not completed
    internal: set[int] = field(default_factory=set)  # pending offsets the client acknowledged on its own
    in_flight: int = 0  # PartitionAcks taken and not completed
    # Highest offset ever buffered or acknowledged here (while the partition is tracked): a new
    # acquisition wholly above it cannot overlap anything held, so the per-offset checks of
    # re-acquisition are skipped -- the usual case, where every fetch brings new offsets.
    high: int = -1

    def empty(self) -> bool:
        return not (self.buffer or self.delivered or self.pending or self.renewing or self.renewed or self.in_flight)


def check_type(kind: Any) -> int:
    try:
        t = AcknowledgeType(kind)
    except ValueError:
        raise ValueError(f"{kind!r} is not an acknowledgement type (ACCEPT, RELEASE, REJECT or RENEW)") from None
    if t == AcknowledgeType.GAP:
        raise ValueError("GAP is not for applications: it marks offsets that hold no record")
    return int(t)


class SendSide(ABC):
    """The send side both trackers share (``AckTracker`` by record, ``RangeTracker`` by range):
    per partition, acknowledgements pending (not sent), owed (sent, not answered) and the
    requests in flight, as the fetcher takes, completes, merges and requeues them. A subclass
    gives ``_new_part`` (its partition type, with ``pending``, ``owed``, ``internal``,
    ``in_flight`` and ``empty()``) and ``complete``."""

    _parts: dict[TopicPartition, Any]

    @abstractmethod
    def _new_part(self) -> Any:
        """A new partition entry of the tracker's own type."""

    def pending_partitions(self) -> list[TopicPartition]:
        return [tp for tp, p in self._parts.items() if p.pending]

    def has_pending(self, tp: TopicPartition) -> bool:
        p = self._parts.get(tp)
        return p is not None and bool(p.pending)

    def take(self, tp: TopicPartition) -> PartitionAcks | None:
        """Move a partition's pending acknowledgements into a PartitionAcks for one request."""
        p = self._parts.get(tp)
        if p is None or not p.pending:
            return None
        acks, p.pending = p.pending, {}
        p.in_flight += 1
        p.owed.update(acks)
        internal = set()
        if p.internal:
            internal, p.internal = p.internal, set()
        return PartitionAcks(tp, acks, bool(p.renewing) and RENEW in acks.values(), internal)

    def complete_merged(self, pa: PartitionAcks) -> None:
        """``pa`` was merged into another PartitionAcks of its partition, which is completed instead."""
        if pa.done:
            return
        pa.done = True
        p = self._parts.get(pa.tp)
        if p is not None:
            p.in_flight -= 1

    def requeue(self, pa: PartitionAcks) -> None:
        """The broker certainly did not apply ``pa``: its acknowledgements are pending again."""
        if pa.done:
            return
        pa.done = True
        p = self._part(pa.tp)
        p.in_flight -= 1
        p.owed.difference_update(pa.acks)
        for o, t in pa.acks.items():
            p.pending.setdefault(o, t)
        p.internal |= pa.internal

    def holds(self, tp: TopicPartition) -> bool:
        """Whether anything of ``tp`` is still with the application or owed to the broker."""
        p = self._parts.get(tp)
        return p is not None and not p.empty()

    def partitions(self) -> Iterator[TopicPartition]:
        return iter(list(self._parts))

    def _part(self, tp: TopicPartition) -> Any:
        p = self._parts.get(tp)
        if p is None:
            p = self._parts[tp] = self._new_part()
        return p

    def _maybe_forget(self, tp: TopicPartition, p: Any) -> None:
        if p.empty():
            del self._parts[tp]


class AckTracker(SendSide):
    """Records acquired by one share consumer and the acknowledgements it owes (see module doc)."""

    def __init__(self, *, explicit: bool) -> None:
        self.explicit = explicit
        self._parts: dict[TopicPartition, _Partition] = {}

    def _new_part(self) -> _Partition:
        return _Partition()

    # -- fetch side ------------------------------------------------------------------
    def add_acquired(self, tp: TopicPartition, records: Iterable[ConsumerRecord], gaps: Iterable[int] = ()) -> None:
        """Records acquired by a fetch (already limited to the acquired offsets), in offset order;
        ``gaps``: acquired offsets that hold no record (acknowledged as GAP), in order."""
        p = self._part(tp)
        records = records if isinstance(records, list) else list(records)
        gaps = gaps if isinstance(gaps, list) else list(gaps)
        if not records and not gaps:
            return
        low = min(records[0].offset if records else gaps[0], gaps[0] if gaps else records[0].offset)
        top = max(records[-1].offset if records else gaps[-1], gaps[-1] if gaps else records[-1].offset)
        if low <= p.high:  # may overlap what is held (see _Partition.high)
            if p.delivered or p.pending or p.owed or p.renewing:
                records, gaps = self._reacquired(p, records, gaps)
            if p.buffer:
                again = {r.offset for r in records}
                if any(r.offset in again for r in p.buffer):  # a newer acquisition replaces a stale copy
                    p.buffer = deque(r for r in p.buffer if r.offset not in again)
        if top > p.high:
            p.high = top
        p.buffer.extend(records)
        for o in gaps:
            p.pending[o] = GAP

    def claim(
        self, tp: TopicPartition, ranges: Sequence[tuple[int, int, int]], lock_deadline: float | None
    ) -> frozenset[int]:
        """Offsets of a new acquisition (first, last, delivery count ranges) that this consumer
        still holds from an earlier one -- buffered, delivered or acknowledged and not answered
        yet -- checked when the fetch answer arrives (it may be decoded later). The copies held
        take the new lock deadline and delivery count and stay the live ones; the returned
        offsets must not be handed out again (see ``_reacquired``)."""
        p = self._parts.get(tp)
        if p is None or not ranges or p.empty():
            return frozenset()
        lo, hi = min(f for f, _, _ in ranges), max(last for _, last, _ in ranges)
        if lo > p.high:
            return frozenset()  # wholly above anything held (see _Partition.high)
        out: set[int] = set()
        copies = {r.offset: r for r in p.buffer if lo <= r.offset <= hi}
        for o in (*p.delivered, *p.renewing, *p.pending, *p.owed, *copies):
            if o < lo or o > hi:
                continue
            count = next((c for f, last, c in ranges if f <= o <= last), None)
            if count is None:
                continue
            out.add(o)
            held = p.delivered.get(o) or p.renewing.get(o) or copies.get(o)
            if held is not None:
                held.acquisition_lock_deadline = lock_deadline
                held.delivery_count = count
        return frozenset(out)

    @staticmethod
    def _reacquired(
        p: _Partition, records: Iterable[ConsumerRecord], gaps: Iterable[int]
    ) -> tuple[list[ConsumerRecord], list[int]]:
        """Offsets acquired again while the application still holds them (their lock ran out and
        this member got them back): the copy the application has stays the live one -- its
        acknowledgement now applies to the new acquisition -- and takes the new lock deadline and
        delivery count; the new copy is not handed out a second time."""
        fresh: list[ConsumerRecord] = []
        for r in records:
            o = r.offset
            held = p.delivered.get(o) or p.renewing.get(o)
            if held is not None:
                held.acquisition_lock_deadline = r.acquisition_lock_deadline
                held.delivery_count = r.delivery_count
            elif o not in p.pending and o not in p.owed:
                fresh.append(r)
        return fresh, [g for g in gaps if g not in p.pending and g not in p.owed]

    def buffered(self, tp: TopicPartition) -> int:
        p = self._parts.get(tp)
        return len(p.buffer) + len(p.renewed) if p is not None else 0

    def has_records(self) -> bool:
        """Whether the next poll can return something without fetching."""
        return any(p.buffer or p.renewed for p in self._parts.values())

    # -- poll side -------------------------------------------------------------------
    def begin_poll(self) -> None:
        """Settle the previous poll: implicit mode accepts what is left; explicit mode raises if anything is."""
        if self.explicit:
            left = sum(len(p.delivered) for p in self._parts.values())
            if left:
                raise IllegalStateError(
                    f"{left} record(s) of the previous poll are not acknowledged: in explicit acknowledgement "
                    "mode every record must be acknowledged before the next poll"
                )
            return
        self.accept_delivered()

    def accept_delivered(self) -> None:
        """ACCEPT every delivered record not acknowledged yet (implicit mode's poll and commit)."""
        for p in self._parts.values():
            if p.delivered:
                p.pending.update(dict.fromkeys(p.delivered, ACCEPT))
                p.delivered.clear()

    def take_records(self, max_records: int, now: float | None = None) -> list[ConsumerRecord]:
        """Hand out up to ``max_records``: renewed records if there are any (only those, as
        Kafka's client does: new records come with the next poll), else buffered ones.

        Buffered records whose ``acquisition_lock_deadline`` is at or before
        ``now`` are dropped: the broker no longer holds them for us.
        """
        out: list[ConsumerRecord] = []
        room = max_records
        for p in self._parts.values():
            if room <= 0:
                break
            if p.renewed:
                take, p.renewed = p.renewed[:room], p.renewed[room:]
                for r in take:
                    p.delivered[r.offset] = r
                out += take
                room -= len(take)
        if out:
            return out
        for p in self._parts.values():
            if room <= 0:
                break
            buf = p.buffer
            if not buf:
                continue
            if now is not None:
                while buf and (d := buf[0].acquisition_lock_deadline) is not None and d <= now:
                    buf.popleft()
            n = min(room, len(buf))
            if n == len(buf):
                take = list(buf)
                buf.clear()
            elif n <= 64:
                take = [buf.popleft() for _ in range(n)]
            else:  # copying beats hundreds of popleft calls; the rest waits for the next poll
                items = list(buf)
                take = items[:n]
                p.buffer = deque(items[n:])
            p.delivered.update(zip(map(_OFFSET, take), take))
            out += take
            room -= n
        return out

    def acknowledge(self, record: ConsumerRecord, kind: Any = AcknowledgeType.ACCEPT) -> None:
        """Record the application's acknowledgement of one delivered record."""
        t = check_type(kind)
        # a plain (topic, partition) tuple hashes and compares as its TopicPartition; no NamedTuple per record
        p = self._parts.get((record.topic, record.partition))  # type: ignore[call-overload]
        held = p.delivered.get(record.offset) if p is not None else None
        if held is None or held is not record:
            where = f"{record.topic}-{record.partition}@{record.offset}"
            if p is not None and held is None and (record.offset in p.pending or record.offset in p.renewing):
                raise IllegalStateError(f"record {where} was already acknowledged")
            raise IllegalStateError(
                f"record {where} cannot be acknowledged: it was not returned by this consumer's latest poll "
                "(another consumer's record, or one from an earlier poll that is already settled)"
            )
        assert p is not None  # held is not None, so p was found
        del p.delivered[record.offset]
        p.pending[record.offset] = t
        if t == RENEW:
            p.renewing[record.offset] = record

    def unacknowledged(self) -> int:
        return sum(len(p.delivered) for p in self._parts.values())

    # -- send side (the rest is SendSide's) --------------------------------------------
    def complete(self, pa: PartitionAcks, error: BaseException | None, lock_deadline: float | None = None) -> None:
        """The broker answered for ``pa`` (``error`` None: applied). Renewed records come back
        for the next poll with ``lock_deadline``; failed renewals are dropped."""
        if pa.done:
            return
        pa.done, pa.error = True, error
        p = self._parts.get(pa.tp)
        if p is None:
            return
        p.in_flight -= 1
        p.owed.difference_update(pa.acks)
        if pa.has_renew:
            for o, t in pa.acks.items():
                if t != RENEW:
                    continue
                r = p.renewing.pop(o, None)
                if r is not None and error is None:
                    if lock_deadline is not None:
                        r.acquisition_lock_deadline = lock_deadline
                    p.renewed.append(r)
            if p.renewed:
                p.renewed.sort(key=_OFFSET)
        self._maybe_forget(pa.tp, p)

    def add_pending(self, tp: TopicPartition, offsets: Iterable[int], kind: int) -> None:
        """Acknowledge acquired offsets the application never saw (RELEASE of records that
        cannot be handed out, GAP)."""
        p = self._part(tp)
        kind = int(kind)
        for o in offsets:
            p.pending[o] = kind
            p.internal.add(o)
            if o > p.high:
                p.high = o

    # -- assignment changes ------------------------------------------------------------
    def release_buffered(self, tp: TopicPartition) -> int:
        """Give back what was fetched and not handed out (RELEASE, pending); returns how many."""
        p = self._parts.get(tp)
        if p is None or not p.buffer:
            return 0
        n = len(p.buffer)
        for r in p.buffer:
            p.pending[r.offset] = RELEASE
            p.internal.add(r.offset)
        p.buffer.clear()
        return n

    def drop_buffered(self, tps: Iterable[TopicPartition]) -> int:
        """Forget buffered records the broker has already taken back (a lost share session)."""
        n = 0
        for tp in tps:
            p = self._parts.get(tp)
            if p is not None and p.buffer:
                n += len(p.buffer)
                p.buffer.clear()
                self._maybe_forget(tp, p)
        return n

    def renewing(self) -> int:
        """Records whose RENEW is acknowledged but not answered yet."""
        return sum(len(p.renewing) for p in self._parts.values())
