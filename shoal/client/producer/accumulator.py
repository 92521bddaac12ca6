"""The producer's record accumulator: batching, memory, readiness, sequences (sans-IO).

Why a separate, socket-free core: every hard rule of Kafka's producer lives
here — when a batch may leave (``linger.ms``, ``batch.size``, a full buffer,
``flush()``), how much memory records may hold (``buffer.memory``), which
batch goes into which request (one per partition, ``max.request.size``,
fair rotation over partitions), and the idempotent producer's bookkeeping
(per-partition sequence numbers, retries that keep their sequences, epoch
bumps when a gap cannot be explained). These are plain method calls with an
injected clock, so the unit tests drive them directly.

Shape:

* A batch keeps its records as ``(key, value, headers, timestamp)`` tuples;
  bytes are built once per send attempt, in one pass, by
  ``protocol.records.build_batch`` (the shell does it, the accumulator only
  says which batches). A batch's ``size`` is the estimated uncompressed size.
* Memory is accounted like Java's ``BufferPool``: a new batch reserves
  ``max(batch.size, its first record)`` until the batch completes (acked or
  failed). ``append`` answers ``None`` when there is no room; the shell then
  waits (``max.block.ms``) for ``release`` to make room, FIFO.
* Idempotence follows Kafka's ``TransactionManager`` for non-transactional
  producers: sequences are assigned when a batch is first drained; a retried
  batch keeps its sequence and goes out only when it is the partition's
  oldest unacknowledged batch; OUT_OF_ORDER_SEQUENCE_NUMBER /
  UNKNOWN_PRODUCER_ID are retried, and when they (or a failed or expired batch)
  reveal a real gap the producer bumps its epoch, locally, and the partition
  restarts at sequence 0 — other partitions move to the new epoch once their
  in-flight batches are done. At epoch 32767 a new producer id is needed
  instead (``need_producer_id``). DUPLICATE_SEQUENCE_NUMBER is a success.
* Three rules are stricter than Java's, each closing a hole the model-based
  test found or that needs no proof: (1) a bump waits until none of the
  partition's batches is on the wire, so no answer can come back for a
  sequence rewritten meanwhile; (2) a partition pipelines only after the
  broker acknowledged one batch of the epoch — a broker without state for a
  producer accepts any sequence (KIP-360), so a second batch could otherwise
  overtake a first one that failed; (3) while a retry is pending, no new
  batch goes out, so every batch the broker may have stored unbeknown to us
  stays within the five it remembers for duplicate detection. And an
  OUT_OF_ORDER_SEQUENCE_NUMBER for a batch older than an acknowledged one of
  the same epoch means it is stored (the broker appends an epoch's sequences
  strictly in order): it completes, with an unknown offset, instead of being
  retried until it times out as in Java.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from shoal.client.core.errors import BrokerResponseError, KafkaTimeoutError
from shoal.protocol.errors import ErrorCode, error_for
from shoal.protocol.records import BATCH_HEADER_SIZE

__all__ = [
    "BATCH_OVERHEAD",
    "MAX_IN_FLIGHT_PER_PARTITION",
    "RECORD_OVERHEAD",
    "Outcome",
    "PartitionQueue",
    "ProducerBatch",
    "ReadyCheck",
    "RecordAccumulator",
    "record_size",
]

BATCH_OVERHEAD = BATCH_HEADER_SIZE  # what a batch costs before its first record
RECORD_OVERHEAD = 20  # length, attributes, deltas, key/value lengths, header count (varints, generous)
MAX_IN_FLIGHT_PER_PARTITION = 5  # what the broker remembers for duplicate detection
_INT32_MAX = 0x7FFFFFFF
_EPOCH_MAX = 0x7FFF

Record = tuple[Any, Any, Any, int]


def record_size(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None) -> int:
    """Estimated bytes one record adds to a batch (uncompressed)."""
    size = RECORD_OVERHEAD
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    if headers:
        for name, val in headers:
            size += 10 + len(name) + (len(val) if val is not None else 0)
    return size


@dataclass(slots=True, eq=False)
class ProducerBatch:
    """Records bound for one partition, sent (and retried) together."""

    topic: str
    partition: int
    created_ms: float
    alloc: int
    records: list[Record] = field(default_factory=list)
    size: int = BATCH_OVERHEAD
    closed: bool = False  # no more appends
    attempts: int = 0
    retry_at_ms: float = 0.0
    on_wire: bool = False
    sent: bool = False  # sent at least once: its outcome may be unknown
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    sequence_reset: bool = False
    built: bytes | None = None  # wire bytes of the current attempt (the shell fills it)
    done: bool = False
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error: BaseException | None = None
    listeners: list[Any] | None = None  # the shell's waiters and callbacks
    parent: ProducerBatch | None = None  # set on the halves of a split batch
    children: list[ProducerBatch] | None = None  # set on a batch that was split

    def leaf(self, index: int) -> tuple[ProducerBatch, int]:
        """The batch (after splits) holding record ``index`` of this one, and its index there."""
        b = self
        while b.children:
            for c in b.children:
                if index < len(c.records):
                    b = c
                    break
                index -= len(c.records)
        return b, index

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + len(self.records) - 1) & _INT32_MAX

    def __repr__(self) -> str:
        state = "done" if self.done else ("on-wire" if self.on_wire else "queued")
        seq = f" seq={self.base_sequence}" if self.base_sequence >= 0 else ""
        return f"<ProducerBatch {self.topic}-{self.partition} n={len(self.records)}{seq} {state}>"


class PartitionQueue:
    """The batches waiting for one partition, and its idempotence state."""

    __slots__ = (
        "batches",
        "bump",
        "epoch",
        "inflight",
        "last_acked",
        "next_seq",
        "on_wire",
        "open",
        "partition",
        "producer_id",
        "topic",
        "unresolved",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.batches: deque[ProducerBatch] = deque()
        self.open: ProducerBatch | None = None
        self.on_wire = 0
        # idempotence
        self.producer_id = -1
        self.epoch = -1
        self.next_seq = 0
        self.last_acked = -1
        self.inflight: list[ProducerBatch] = []  # sequenced, not yet complete, by sequence
        self.unresolved = -1  # last sequence of a batch whose fate is unknown
        self.bump = False


@dataclass(slots=True)
class ReadyCheck:
    """What ``ready`` found: nodes with something to send, when to look again."""

    nodes: dict[int, list[PartitionQueue]]
    next_check_ms: float | None
    unknown_leaders: set[str]


class Outcome:
    """What became of a batch after an error (``on_error`` / ``on_request_failed``)."""

    RETRY = "retry"
    SPLIT = "split"  # too large for the broker: queued again as two halves
    FAILED = "failed"
    DONE = "done"  # known to be stored after all (offset unknown)
    IGNORED = "ignored"  # the batch had already completed (expired while on the wire)


class RecordAccumulator:
    """Per-partition queues of batches, memory accounting, drain and retry rules."""

    def __init__(
        self,
        *,
        batch_size: int = 16384,
        linger_ms: float = 5,
        buffer_memory: int = 33554432,
        delivery_timeout_ms: float = 120000,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 1000,
        retries: int = _INT32_MAX,
        idempotent: bool = True,
        guarantee_order: bool = False,
        clock: Callable[[], float],
        rng: random.Random | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.buffer_memory = buffer_memory
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self.retries = retries
        self.idempotent = idempotent
        self.guarantee_order = guarantee_order
        self.clock = clock
        self._rng = rng or random.Random()
        self._topics: dict[str, dict[int, PartitionQueue]] = {}
        self._drain_index: dict[int, int] = {}
        self.used = 0  # bytes reserved by live batches (and granted reservations)
        self.memory_waiters = 0  # set by the shell: senders blocked on memory
        self.flushing = 0
        self.closing = False
        self.incomplete: OrderedDict[ProducerBatch, None] = OrderedDict()
        # idempotence
        self.producer_id = -1
        self.producer_epoch = -1
        self.need_producer_id = idempotent

    # -- appending -------------------------------------------------------------------
    def queue(self, topic: str, partition: int) -> PartitionQueue:
        parts = self._topics.get(topic)
        if parts is None:
            parts = self._topics[topic] = {}
        q = parts.get(partition)
        if q is None:
            q = parts[partition] = PartitionQueue(topic, partition)
        return q

    def has_room(self, topic: str, partition: int, size: int) -> bool:
        """Whether the partition's open batch would take a record of ``size`` bytes."""
        parts = self._topics.get(topic)
        q = parts.get(partition) if parts is not None else None
        b = q.open if q is not None else None
        return b is not None and b.size + size <= self.batch_size

    def append(self, topic: str, partition: int, record: Record, size: int, reserved: int = 0) -> ProducerBatch | None:
        """Add one record; returns its batch (the record is the batch's last).

        None means a new batch is needed and ``buffer.memory`` has no room
        for it (or earlier senders are still waiting for memory): wait for
        ``release`` and call again. ``reserved`` is memory already granted to
        this caller by ``grant``; it is used for the new batch or given back.
        """
        parts = self._topics.get(topic)
        q = parts.get(partition) if parts is not None else None
        if q is None:
            q = self.queue(topic, partition)
        b = q.open
        if b is not None and b.size + size <= self.batch_size:
            b.records.append(record)
            b.size += size
            if reserved:
                self.used -= reserved
            return b
        alloc = size + BATCH_OVERHEAD
        if alloc < self.batch_size:
            alloc = self.batch_size
        if reserved:
            if reserved < alloc:
                self.used -= reserved
                reserved = 0
            else:
                self.used -= reserved - alloc
        if not reserved:
            if self.memory_waiters or self.used + alloc > self.buffer_memory:
                return None
            self.used += alloc
        if b is not None:
            b.closed = True
        nb = ProducerBatch(topic, partition, self.clock(), alloc, [record], BATCH_OVERHEAD + size)
        q.batches.append(nb)
        q.open = nb
        self.incomplete[nb] = None
        return nb

    def alloc_for(self, size: int) -> int:
        """Memory a new batch for a record of ``size`` bytes reserves."""
        return max(self.batch_size, size + BATCH_OVERHEAD)

    def grant(self, amount: int) -> bool:
        """Reserve memory for a waiting sender (FIFO handled by the shell)."""
        if self.used + amount > self.buffer_memory:
            return False
        self.used += amount
        return True

    def ungrant(self, amount: int) -> None:
        self.used -= amount

    # -- readiness -------------------------------------------------------------------
    def ready(self, leader_of: Callable[[str, int], int | None]) -> ReadyCheck:
        """Group partitions with queued batches by leader; say which nodes may send now."""
        now = self.clock()
        nodes: dict[int, list[PartitionQueue]] = {}
        ready_nodes: set[int] = set()
        unknown: set[str] = set()
        next_ms: float | None = None
        urgent = self.memory_waiters > 0 or self.flushing > 0 or self.closing
        linger = self.linger_ms
        for topic, parts in self._topics.items():
            for partition, q in parts.items():
                if not q.batches:
                    continue
                leader = leader_of(topic, partition)
                if leader is None:
                    unknown.add(topic)
                    continue
                first = q.batches[0]
                if self._blocked(q, first):
                    continue
                group = nodes.get(leader)
                if group is None:
                    group = nodes[leader] = []
                group.append(q)
                if leader in ready_nodes:
                    continue
                if first.attempts:
                    due = first.retry_at_ms
                elif urgent or first.closed or len(q.batches) > 1:
                    due = 0.0
                else:
                    due = first.created_ms + linger
                if due <= now:
                    ready_nodes.add(leader)
                elif next_ms is None or due - now < next_ms:
                    next_ms = due - now
        return ReadyCheck({n: qs for n, qs in nodes.items() if n in ready_nodes}, next_ms, unknown)

    def _blocked(self, q: PartitionQueue, first: ProducerBatch) -> bool:
        """Whether the partition's first batch must wait for reasons other than time."""
        if not self.idempotent:
            return self.guarantee_order and q.on_wire > 0
        if q.bump:
            return True
        if first.base_sequence >= 0:  # a retry: only as the oldest unacknowledged batch
            return not q.inflight or q.inflight[0] is not first or first.on_wire
        if self.producer_id < 0 or q.unresolved >= 0:
            return True
        if len(q.inflight) >= MAX_IN_FLIGHT_PER_PARTITION:
            return True
        if q.inflight:
            if q.last_acked < 0:
                # Until the partition acknowledged one batch of this epoch the
                # broker may have no state for us, and then it takes any
                # sequence (KIP-360): a second batch could overtake a failed first.
                return True
            for b in q.inflight:
                if b.attempts > 1 or not b.on_wire:
                    # A retry is pending: new batches wait, so that every batch
                    # the broker may have stored without our knowing stays among
                    # the last five it remembers for duplicate detection.
                    return True
        if q.producer_id != self.producer_id or q.epoch != self.producer_epoch:
            return bool(q.inflight)  # move to the new epoch once the old one's batches are done
        return False

    # -- draining --------------------------------------------------------------------
    def drain(self, node: int, queues: list[PartitionQueue], max_request_size: int) -> list[ProducerBatch]:
        """Take at most one batch per partition of ``node`` for one produce request."""
        now = self.clock()
        out: list[ProducerBatch] = []
        total = 0
        n = len(queues)
        start = self._drain_index.get(node, 0) % n if n else 0
        for i in range(n):
            q = queues[(start + i) % n]
            if not q.batches:
                continue
            first = q.batches[0]
            if first.attempts and first.retry_at_ms > now:
                continue
            if self._blocked(q, first):
                continue
            if out and total + first.size > max_request_size:
                self._drain_index[node] = (start + i) % n
                return out
            q.batches.popleft()
            if q.open is first:
                q.open = None
            first.closed = True
            if self.idempotent and first.base_sequence < 0:
                self._assign_sequence(q, first)
            first.on_wire = True
            first.sent = True
            first.attempts += 1
            q.on_wire += 1
            total += first.size
            out.append(first)
        self._drain_index[node] = start + 1
        return out

    def _assign_sequence(self, q: PartitionQueue, b: ProducerBatch) -> None:
        if q.producer_id != self.producer_id or q.epoch != self.producer_epoch:
            q.producer_id, q.epoch = self.producer_id, self.producer_epoch
            q.next_seq = 0
            q.last_acked = -1
        b.producer_id, b.producer_epoch = q.producer_id, q.epoch
        b.base_sequence = q.next_seq
        q.next_seq = (q.next_seq + len(b.records)) & _INT32_MAX
        q.inflight.append(b)

    # -- outcomes --------------------------------------------------------------------
    def _queue_of(self, b: ProducerBatch) -> PartitionQueue:
        return self._topics[b.topic][b.partition]

    def returned(self, b: ProducerBatch) -> None:
        """The request carrying ``b`` came back (any way): it is no longer on the wire."""
        if b.on_wire:
            b.on_wire = False
            self._queue_of(b).on_wire -= 1

    def complete(
        self, b: ProducerBatch, base_offset: int, log_append_time: int = -1, log_start_offset: int = -1
    ) -> bool:
        """The broker stored ``b``; returns False if it had already completed (expired)."""
        self.returned(b)
        q = self._queue_of(b)
        if self.idempotent and b.base_sequence >= 0 and b.producer_epoch == q.epoch:
            last = b.last_sequence
            if last > q.last_acked:
                q.last_acked = last
            if q.unresolved >= 0 and q.last_acked >= q.unresolved:
                q.unresolved = -1
        self._forget(q, b)
        if b.done:
            return False
        b.base_offset = base_offset
        b.log_append_time = log_append_time
        b.log_start_offset = log_start_offset
        self._finish(b)
        return True

    def fail(self, b: ProducerBatch, error: BaseException, *, maybe_written: bool) -> bool:
        """``b`` failed for good. ``maybe_written``: the broker may have stored it anyway.

        A batch that expires while on the wire stays counted as on the wire
        until its request returns (``returned``).
        """
        q = self._queue_of(b)
        if b.done:
            return False
        if b in q.batches:
            q.batches.remove(b)
            if q.open is b:
                q.open = None
        if self.idempotent and b.base_sequence >= 0 and b.producer_epoch == q.epoch:
            if maybe_written:
                q.unresolved = max(q.unresolved, b.last_sequence)
            else:
                q.bump = True  # the sequences after it now have a gap
        self._forget(q, b)
        b.error = error
        self._finish(b)
        return True

    def _forget(self, q: PartitionQueue, b: ProducerBatch) -> None:
        if b.base_sequence >= 0:
            try:
                q.inflight.remove(b)
            except ValueError:
                pass

    def _finish(self, b: ProducerBatch) -> None:
        b.done = True
        b.built = None
        self.used -= b.alloc
        b.alloc = 0
        self.incomplete.pop(b, None)
        parent = b.parent
        while parent is not None and all(c.done for c in parent.children or ()):
            parent.done = True
            parent = parent.parent

    def _split(self, q: PartitionQueue, b: ProducerBatch) -> None:
        """Replace ``b`` by two halves (Java splits batches the broker finds too large)."""
        half = len(b.records) // 2
        payload = b.size - BATCH_OVERHEAD
        children = []
        seq = b.base_sequence
        for records in (b.records[:half], b.records[half:]):
            c = ProducerBatch(b.topic, b.partition, b.created_ms, 0, records, closed=True, parent=b)
            c.size = BATCH_OVERHEAD + payload * len(records) // len(b.records)
            c.producer_id, c.producer_epoch = b.producer_id, b.producer_epoch
            if seq >= 0:
                c.base_sequence = seq
                seq = (seq + len(records)) & _INT32_MAX
            c.sequence_reset = b.sequence_reset
            children.append(c)
        children[0].alloc, b.alloc = b.alloc, 0
        b.children = children
        b.built = None
        self.incomplete.pop(b, None)
        for c in reversed(children):
            self.incomplete[c] = None
            self.incomplete.move_to_end(c, last=False)
        if b.base_sequence >= 0:
            i = q.inflight.index(b)
            q.inflight[i : i + 1] = children
            for c in reversed(children):
                self._insert(q, c)
        else:
            for c in reversed(children):
                q.batches.appendleft(c)

    def retry(self, b: ProducerBatch) -> None:
        """Queue ``b`` again after a backoff, ahead of newer batches (in sequence order)."""
        self.returned(b)
        q = self._queue_of(b)
        b.retry_at_ms = self.clock() + self.backoff_ms(b.attempts)
        if b.base_sequence < 0:
            q.batches.appendleft(b)
        else:
            self._insert(q, b)

    def _insert(self, q: PartitionQueue, b: ProducerBatch) -> None:
        """Put a sequenced batch back among the queued ones, in sequence order, ahead of new ones."""
        i = 0
        for other in q.batches:
            if other.base_sequence < 0 or other.base_sequence > b.base_sequence:
                break
            i += 1
        q.batches.insert(i, b)

    def backoff_ms(self, attempts: int) -> float:
        raw = min(self.retry_backoff_ms * (2 ** max(attempts - 1, 0)), self.retry_backoff_max_ms)
        return raw * self._rng.uniform(0.8, 1.2) if raw > 0 else 0.0

    def can_retry(self, b: ProducerBatch) -> bool:
        """Retry while attempts and ``delivery.timeout.ms`` allow; a batch that
        reaches its timeout while waiting to be retried fails with a timeout."""
        return not b.done and b.attempts <= self.retries and self.clock() < b.created_ms + self.delivery_timeout_ms

    def on_error(self, b: ProducerBatch, code: int, log_start_offset: int = -1, detail: str | None = None) -> str:
        """A partition error in a produce response: retry (``Outcome.RETRY``) or fail the batch."""
        self.returned(b)
        if b.done:
            return Outcome.IGNORED
        q = self._queue_of(b)
        if code == ErrorCode.MESSAGE_TOO_LARGE and len(b.records) > 1:
            self._split(q, b)
            return Outcome.SPLIT
        retriable = error_for(code).retriable
        if self.idempotent and b.base_sequence >= 0:
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                retriable = True
                next_expected = b.base_sequence == ((q.last_acked + 1) & _INT32_MAX)
                if b.producer_epoch == q.epoch and q.last_acked >= 0 and b.last_sequence <= q.last_acked:
                    # A later sequence of this epoch was acknowledged, and the broker
                    # appends an epoch's sequences strictly in order: this batch is
                    # stored, though too long ago for the broker to say where.
                    self.complete(b, -1, -1, log_start_offset)
                    return Outcome.DONE
                if q.unresolved < 0 and (b.sequence_reset or not next_expected):
                    pass  # an earlier batch is missing; it will be retried first
                elif q.unresolved < 0 or b.base_sequence == ((q.unresolved + 1) & _INT32_MAX):
                    q.bump = True  # a real gap
            elif code == ErrorCode.UNKNOWN_PRODUCER_ID:
                retriable = True
                if log_start_offset != -1 and not b.sequence_reset:
                    q.bump = True
        if retriable and self.can_retry(b):
            self.retry(b)
            return Outcome.RETRY
        self.fail(b, BrokerResponseError(code, detail), maybe_written=False)
        return Outcome.FAILED

    def on_request_failed(self, b: ProducerBatch, error: BaseException) -> str:
        """The request carrying ``b`` got no answer (connection lost, timeout): the broker may have it."""
        self.returned(b)
        if b.done:
            return Outcome.IGNORED
        if getattr(error, "retriable", False) and self.can_retry(b):
            self.retry(b)
            return Outcome.RETRY
        self.fail(b, error, maybe_written=True)
        return Outcome.FAILED

    # -- time and idempotence upkeep ------------------------------------------------------
    def expire(self) -> list[ProducerBatch]:
        """Fail batches older than ``delivery.timeout.ms`` (queued or on the wire)."""
        now = self.clock()
        limit = self.delivery_timeout_ms
        out: list[ProducerBatch] = []
        while self.incomplete:
            b = next(iter(self.incomplete))
            if b.created_ms + limit > now:
                break
            error = KafkaTimeoutError(
                f"expiring {len(b.records)} record(s) for {b.topic}-{b.partition}: "
                f"{now - b.created_ms:.0f} ms have passed since batch creation (delivery.timeout.ms={limit:.0f})"
            )
            self.fail(b, error, maybe_written=b.sent)
            out.append(b)
        return out

    def prepare(self) -> None:
        """Resolve unresolved sequences and carry out requested epoch bumps (once nothing is on the wire)."""
        if not self.idempotent:
            return
        for parts in self._topics.values():
            for q in parts.values():
                if q.unresolved >= 0 and not q.inflight:
                    if q.last_acked >= q.unresolved:
                        q.unresolved = -1
                    else:
                        q.bump = True
                if q.bump and q.on_wire == 0 and self.producer_id >= 0:
                    self._bump(q)

    def _bump(self, q: PartitionQueue) -> None:
        if q.producer_id == self.producer_id and q.epoch == self.producer_epoch:
            if self.producer_epoch >= _EPOCH_MAX:
                self.producer_id = -1
                self.producer_epoch = -1
                self.need_producer_id = True
                return
            self.producer_epoch += 1
        q.producer_id, q.epoch = self.producer_id, self.producer_epoch
        seq = 0
        for b in q.inflight:
            b.producer_id, b.producer_epoch = q.producer_id, q.epoch
            b.base_sequence = seq
            b.sequence_reset = True
            b.built = None
            seq = (seq + len(b.records)) & _INT32_MAX
        q.next_seq = seq
        q.last_acked = -1
        q.unresolved = -1
        q.bump = False

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = epoch
        self.need_producer_id = False

    # -- whole-accumulator operations ----------------------------------------------------------
    def abort_all(self, error: BaseException) -> list[ProducerBatch]:
        """Fail every incomplete batch (forced close)."""
        out = list(self.incomplete)
        for b in out:
            self.fail(b, error, maybe_written=b.sent)
        return out

    def has_incomplete(self) -> bool:
        return bool(self.incomplete)

    def queued_count(self) -> int:
        return sum(len(q.batches) for parts in self._topics.values() for q in parts.values())

    def queues(self) -> Iterable[PartitionQueue]:
        for parts in self._topics.values():
            yield from parts.values()
