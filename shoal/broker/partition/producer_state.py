"""Idempotent and transactional producer state for one partition (KIP-98).

Why this exists: an idempotent producer numbers its batches per partition and
retries them after timeouts. The leader must tell a retry of something it
already wrote (acknowledge it again, with the offsets it got the first time)
from a real gap (refuse it, so the producer does not silently lose data) and
from a zombie with an older epoch (fence it). Transactions add one more duty:
the partition has to know which transactions are still open, because a
``read_committed`` consumer may not read past the first open one (the last
stable offset), and which ones were aborted, because Fetch hands that list to
the consumer so it can drop their records.

Why it is shaped this way:

* Sans-IO. ``ProducerStateManager`` is a plain object: the log layer feeds it
  batch header fields and offsets, and asks it questions. Time is passed in as
  integer milliseconds, so tests need no clocks and no event loop.
* Validation is split from mutation. ``check`` only reads state and answers
  ``Append``, ``Duplicate`` or ``Reject``; the log layer writes the batch and
  only then calls ``update`` with the offsets it assigned. A failed write
  therefore leaves the state untouched. ``check_batches`` validates several
  batches of one request in order, as if the earlier ones had been applied.
* Sequence rules follow Apache Kafka 3.x/4.x: a batch of the current epoch must
  continue the last sequence (with the int32 wrap to 0), a new epoch must start
  at sequence 0, an older epoch is fenced, and a retry that exactly matches one
  of the last five batches is a duplicate. For a producer id the partition has
  no state for (never seen, or expired, or its batches were deleted by
  retention) Kafka accepts any sequence since KIP-360, so that a long-lived
  producer whose state was cleaned up is not failed for no fault of its own.
  ``strict_new_producer_sequence=True`` demands sequence 0 instead (the rule
  Kafka 4 applies to transactions-v2 producers with no state).
* Rebuild by replay. The same code applies a batch whether it was just
  validated by the leader (``update``), copied by a follower, or found while
  scanning the log after the newest snapshot (``replay_batch``). That is what
  makes "snapshot + replay" yield exactly the state the live path would have.
* Snapshots are a small versioned binary format guarded by CRC-32C. A snapshot
  that fails any check raises ``CorruptSnapshotError`` and never half-loads:
  the caller then drops it and rebuilds from an older snapshot or the log.
* Aborted transactions are kept as an in-memory index ordered by marker
  offset. A fetch asks for the ones overlapping its range; the index remembers
  the widest transaction it has seen so the scan can stop early.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import crc32c as _crc32c_module

from shoal.protocol.errors import ErrorCode

__all__ = [
    "APPEND",
    "BATCHES_TO_RETAIN",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "INT32_MAX",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "AbortedTxn",
    "Append",
    "BatchHeaderLike",
    "BatchInfo",
    "BatchMetadata",
    "CheckResult",
    "CompletedTxn",
    "CorruptSnapshotError",
    "Duplicate",
    "ProducerEntry",
    "ProducerStateManager",
    "Reject",
    "TxnMarker",
    "in_sequence",
    "last_sequence_of",
]

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
INT32_MAX: Final = 2**31 - 1
BATCHES_TO_RETAIN: Final = 5  # the producer keeps at most 5 requests in flight per partition
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000  # producer.id.expiration.ms


def last_sequence_of(base_sequence: int, record_count: int) -> int:
    """Sequence of the last record of a batch; sequences wrap from INT32_MAX to 0."""
    if base_sequence < 0 or record_count <= 0:
        return NO_SEQUENCE
    return (base_sequence + record_count - 1) % (INT32_MAX + 1)


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """True if ``next_sequence`` directly follows ``last_sequence`` (with wrap)."""
    if last_sequence == INT32_MAX:
        return next_sequence == 0
    return next_sequence == last_sequence + 1


# --------------------------------------------------------------------------
# inputs and answers


class BatchHeaderLike(Protocol):
    """What ``BatchInfo.from_header`` needs; ``protocol.records.BatchHeader`` fits."""

    producer_id: int
    producer_epoch: int
    base_sequence: int

    @property
    def last_sequence(self) -> int: ...

    @property
    def is_transactional(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The header fields of one data batch that producer state looks at."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    is_transactional: bool = False

    @classmethod
    def from_header(cls, header: BatchHeaderLike) -> BatchInfo:
        return cls(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            header.is_transactional,
        )


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The end-transaction marker carried by a control batch."""

    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class Append:
    """The batch is new and in order: write it, then call ``update``."""


APPEND: Final = Append()


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The batch is a retry of one already written: ack it with these offsets, do not write it."""

    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class Reject:
    """The batch must not be written; answer the producer with ``error``."""

    error: ErrorCode
    message: str


CheckResult = Append | Duplicate | Reject


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by a marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An entry of the aborted-transaction index (what Fetch reports to read_committed consumers)."""

    producer_id: int
    first_offset: int
    last_offset: int


class CorruptSnapshotError(ValueError):
    """A producer state snapshot failed validation; rebuild the state from the log instead."""


# --------------------------------------------------------------------------
# per-producer state


@dataclass(slots=True)
class BatchMetadata:
    """What is remembered of one appended batch, enough to answer a retry of it."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


def _new_batches() -> deque[BatchMetadata]:
    return deque(maxlen=BATCHES_TO_RETAIN)


@dataclass(slots=True)
class ProducerEntry:
    """State of one producer id on this partition."""

    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1  # -1: no transaction open
    last_timestamp: int = -1
    batches: deque[BatchMetadata] = field(default_factory=_new_batches)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def has_open_txn(self) -> bool:
        return self.current_txn_first_offset >= 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def _set_epoch(self, epoch: int) -> None:
        # Sequences restart with every epoch, so old batch metadata means nothing any more.
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()


@dataclass(slots=True)
class _Expect:
    """What the next batch of a producer is validated against (a view that ``check_batches`` advances)."""

    known: bool
    epoch: int
    last_seq: int
    txn_open: bool
    entry: ProducerEntry | None


# --------------------------------------------------------------------------
# snapshot layout

_MAGIC: Final = b"SHPS"
_VERSION: Final = 1
_PREFIX = struct.Struct(">4sHHI")  # magic, version, flags, crc32c of everything after
_COUNT = struct.Struct(">I")
_HEAD = struct.Struct(">q")  # next offset
_PRODUCER = struct.Struct(">qhiqqB")  # pid, epoch, coordinator epoch, txn first offset, last ts, n batches
_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp
_TXN = struct.Struct(">qqqB")  # pid, first offset, last offset, aborted
_ABORTED = struct.Struct(">qqq")  # pid, first offset, last offset


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: memoryview, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, st: struct.Struct, what: str) -> tuple[int, ...]:
        if self.pos + st.size > len(self.data):
            raise CorruptSnapshotError(f"producer state snapshot truncated in {what} at byte {self.pos}")
        values = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return values

    def count(self, what: str, item_size: int) -> int:
        (n,) = self.take(_COUNT, what)
        if n * item_size > len(self.data) - self.pos:
            raise CorruptSnapshotError(f"producer state snapshot claims {n} {what}, more than it holds")
        return n


# --------------------------------------------------------------------------
# the manager


class ProducerStateManager:
    """Producer ids, sequences, epochs and transactions of one partition."""

    __slots__ = (
        "_aborted",
        "_aborted_max_span",
        "_next_offset",
        "_ongoing",
        "_producers",
        "_unreplicated",
        "expiration_ms",
        "strict_new_producer_sequence",
    )

    def __init__(
        self,
        *,
        expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        strict_new_producer_sequence: bool = False,
    ) -> None:
        self.expiration_ms = expiration_ms
        self.strict_new_producer_sequence = strict_new_producer_sequence
        self._producers: dict[int, ProducerEntry] = {}
        # first offset -> producer id, for transactions without a marker yet
        self._ongoing: dict[int, int] = {}
        # first offset -> transaction whose marker is written but not yet below the high watermark
        self._unreplicated: dict[int, CompletedTxn] = {}
        self._aborted: list[AbortedTxn] = []  # ordered by last_offset (marker offset)
        self._aborted_max_span = 0
        self._next_offset = 0

    # ---------------------------------------------------------------- queries

    @property
    def next_offset(self) -> int:
        """One past the last offset this state has seen; replay after a load starts here."""
        return self._next_offset

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def producer_ids(self) -> list[int]:
        return sorted(self._producers)

    def __len__(self) -> int:
        return len(self._producers)

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of every open transaction, by first offset."""
        return [(pid, first) for first, pid in sorted(self._ongoing.items())]

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction that is open or whose marker is not yet replicated."""
        candidates = list(self._ongoing)
        candidates.extend(self._unreplicated)
        return min(candidates) if candidates else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: read_committed consumers may read below it. ``high_watermark`` must not go backwards.

        Completed transactions whose marker is now below the high watermark are
        forgotten here, the way Kafka does when the high watermark moves.
        """
        for first in [f for f, txn in self._unreplicated.items() if txn.last_offset < high_watermark]:
            del self._unreplicated[first]
        unstable = self.first_unstable_offset()
        return high_watermark if unstable is None else min(unstable, high_watermark)

    def aborted_transactions(self, fetch_start: int, fetch_end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [fetch_start, fetch_end).

        A transaction overlaps when its marker is at or after ``fetch_start`` and
        its first record is before ``fetch_end``. Sorted by first offset.
        """
        index = self._aborted
        lo, hi = 0, len(index)
        while lo < hi:  # first entry whose marker is at or after fetch_start
            mid = (lo + hi) // 2
            if index[mid].last_offset < fetch_start:
                lo = mid + 1
            else:
                hi = mid
        found: list[tuple[int, int]] = []
        for txn in index[lo:]:
            if txn.last_offset - self._aborted_max_span >= fetch_end:
                break  # every later transaction starts at or after fetch_end
            if txn.first_offset < fetch_end:
                found.append((txn.producer_id, txn.first_offset))
        found.sort(key=lambda item: item[1])
        return found

    def aborted_index(self) -> list[AbortedTxn]:
        return list(self._aborted)

    # ------------------------------------------------------------- validation

    def check(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        last_sequence: int,
        is_transactional: bool = False,
    ) -> CheckResult:
        """Decide what to do with one data batch; changes nothing."""
        batch = BatchInfo(producer_id, producer_epoch, base_sequence, last_sequence, is_transactional)
        if producer_id < 0:
            return self._check_sessionless(batch)
        return self._validate(self._expect(producer_id), batch)

    def check_batches(self, batches: Sequence[BatchInfo]) -> list[CheckResult]:
        """Validate the batches of one produce request in order.

        Each batch is judged as if the earlier ``Append`` answers had already
        been applied. Callers write nothing unless every answer is ``Append``
        (or handle duplicates the way they see fit).
        """
        views: dict[int, _Expect] = {}
        results: list[CheckResult] = []
        for batch in batches:
            if batch.producer_id < 0:
                results.append(self._check_sessionless(batch))
                continue
            view = views.get(batch.producer_id)
            if view is None:
                view = views[batch.producer_id] = self._expect(batch.producer_id)
            result = self._validate(view, batch)
            results.append(result)
            if result is APPEND:
                if view.epoch != batch.producer_epoch:
                    view.entry = None  # cached batches belong to the old epoch
                view.known = True
                view.epoch = batch.producer_epoch
                view.last_seq = batch.last_sequence
                view.txn_open = view.txn_open or batch.is_transactional
        return results

    def check_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, transaction_version: int = 1
    ) -> Reject | None:
        """Validate an end-transaction marker; ``None`` means write it, then call ``update_marker``.

        Transactions v2 (KIP-890) bump the epoch with every marker, so there the
        marker's epoch must be above the producer's, except for the retry of a
        marker already written (same epoch and no transaction open).
        """
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        current = entry.epoch
        if transaction_version >= 2:
            stale = producer_epoch <= current and not (producer_epoch == current and not entry.has_open_txn)
        else:
            stale = producer_epoch < current
        if stale:
            return Reject(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker epoch {producer_epoch} of producer {producer_id} is stale (current {current})",
            )
        if entry.coordinator_epoch > coordinator_epoch:
            return Reject(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"coordinator epoch {coordinator_epoch} is older than {entry.coordinator_epoch}",
            )
        return None

    def _check_sessionless(self, batch: BatchInfo) -> CheckResult:
        if batch.is_transactional:
            return Reject(ErrorCode.INVALID_RECORD, "a transactional batch needs a producer id")
        return APPEND

    def _expect(self, producer_id: int) -> _Expect:
        entry = self._producers.get(producer_id)
        if entry is None or entry.epoch == NO_PRODUCER_EPOCH:
            return _Expect(False, NO_PRODUCER_EPOCH, NO_SEQUENCE, False, None)
        return _Expect(True, entry.epoch, entry.last_seq, entry.has_open_txn, entry)

    def _validate(self, view: _Expect, batch: BatchInfo) -> CheckResult:
        pid, epoch = batch.producer_id, batch.producer_epoch
        first, last = batch.base_sequence, batch.last_sequence
        if epoch < 0 or first < 0 or last < 0:
            return Reject(ErrorCode.INVALID_RECORD, f"producer {pid} sent epoch {epoch}, sequence {first}")
        if view.known and view.entry is not None:
            meta = view.entry.find_duplicate(epoch, first, last)
            if meta is not None:
                return Duplicate(meta.first_offset, meta.last_offset, meta.timestamp)
        if view.known and epoch < view.epoch:
            return Reject(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {pid} epoch {epoch} is older than the current epoch {view.epoch}",
            )
        if not view.known:
            if first != 0 and self.strict_new_producer_sequence:
                return Reject(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"first batch of unknown producer {pid} has sequence {first}, expected 0",
                )
        elif epoch != view.epoch:
            if first != 0:
                return Reject(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"new epoch {epoch} of producer {pid} starts at sequence {first}, expected 0",
                )
        elif not in_sequence(view.last_seq, first):
            return Reject(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {pid} sent sequence {first}, expected {(view.last_seq + 1) % (INT32_MAX + 1)}",
            )
        if view.txn_open and not batch.is_transactional:
            return Reject(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {pid} sent a non-transactional batch inside an open transaction",
            )
        return APPEND

    # ---------------------------------------------------------------- updates

    def update(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        last_sequence: int,
        is_transactional: bool,
        first_offset: int,
        last_offset: int,
        timestamp: int,
    ) -> None:
        """Record a data batch the leader validated (``Append``) and wrote at [first_offset, last_offset].

        ``timestamp`` is the batch's max timestamp (or its log append time);
        expiry compares it with the clock, as Kafka does.
        """
        self._apply_data(
            BatchInfo(producer_id, producer_epoch, base_sequence, last_sequence, is_transactional),
            first_offset,
            last_offset,
            timestamp,
        )

    def update_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        offset: int,
        timestamp: int,
    ) -> CompletedTxn | None:
        """Record an end-transaction marker written at ``offset``; returns the transaction it closed."""
        marker = TxnMarker(commit, coordinator_epoch)
        return self._apply_marker(producer_id, producer_epoch, marker, offset, timestamp)

    def replay_batch(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        last_sequence: int,
        is_transactional: bool,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        marker: TxnMarker | None = None,
    ) -> CompletedTxn | None:
        """Apply a batch found in the log, without validation (rebuild, or a follower copying the leader).

        Pass ``marker`` for a control batch carrying a commit/abort marker; a
        control batch without one (e.g. emptied by compaction) is skipped.
        Batches that end before ``next_offset`` are already reflected and ignored.
        """
        if last_offset < self._next_offset:
            return None
        if marker is not None:
            return self._apply_marker(producer_id, producer_epoch, marker, last_offset, timestamp)
        batch = BatchInfo(producer_id, producer_epoch, base_sequence, last_sequence, is_transactional)
        self._apply_data(batch, first_offset, last_offset, timestamp)
        return None

    def _entry_for(self, producer_id: int) -> ProducerEntry:
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerEntry(producer_id)
        return entry

    def _apply_data(self, batch: BatchInfo, first_offset: int, last_offset: int, timestamp: int) -> None:
        self._next_offset = max(self._next_offset, last_offset + 1)
        if batch.producer_id < 0:
            return
        entry = self._entry_for(batch.producer_id)
        entry._set_epoch(batch.producer_epoch)
        entry.batches.append(
            BatchMetadata(batch.base_sequence, batch.last_sequence, first_offset, last_offset, timestamp)
        )
        entry.last_timestamp = timestamp
        if batch.is_transactional and not entry.has_open_txn:
            entry.current_txn_first_offset = first_offset
            self._ongoing[first_offset] = batch.producer_id

    def _apply_marker(
        self, producer_id: int, producer_epoch: int, marker: TxnMarker, offset: int, timestamp: int
    ) -> CompletedTxn | None:
        self._next_offset = max(self._next_offset, offset + 1)
        entry = self._entry_for(producer_id)
        completed: CompletedTxn | None = None
        if entry.has_open_txn:
            first = entry.current_txn_first_offset
            completed = CompletedTxn(producer_id, first, offset, not marker.commit)
            self._ongoing.pop(first, None)
            self._unreplicated[first] = completed
            if completed.aborted:
                self._aborted.append(AbortedTxn(producer_id, first, offset))
                self._aborted_max_span = max(self._aborted_max_span, offset - first)
        entry._set_epoch(producer_epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.current_txn_first_offset = -1
        entry.last_timestamp = timestamp
        return completed

    # ------------------------------------------------------------ maintenance

    def remove_expired(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``expiration_ms`` or more (never one with an open transaction)."""
        expired = [
            pid
            for pid, entry in self._producers.items()
            if not entry.has_open_txn and now_ms - entry.last_timestamp >= self.expiration_ms
        ]
        for pid in expired:
            del self._producers[pid]
        return expired

    def truncate_head(self, log_start_offset: int) -> None:
        """The log start moved (retention, DeleteRecords): drop state that only described deleted data.

        A producer whose last batch is gone is forgotten; one with an open
        transaction is kept, since its marker is still to come.
        """
        for pid in [
            pid
            for pid, entry in self._producers.items()
            if not entry.has_open_txn and entry.last_data_offset < log_start_offset
        ]:
            del self._producers[pid]
        for first in [f for f, txn in self._unreplicated.items() if txn.last_offset < log_start_offset]:
            del self._unreplicated[first]
        self._aborted = [txn for txn in self._aborted if txn.last_offset >= log_start_offset]
        self._aborted_max_span = max((t.last_offset - t.first_offset for t in self._aborted), default=0)
        self._next_offset = max(self._next_offset, log_start_offset)

    # -------------------------------------------------------------- snapshots

    def snapshot(self, next_offset: int | None = None) -> bytes:
        """Serialize the whole state. ``next_offset`` (default: the tracked one) is where replay resumes."""
        at = self._next_offset if next_offset is None else next_offset
        body = bytearray(_HEAD.pack(at))
        body += _COUNT.pack(len(self._producers))
        for pid in sorted(self._producers):
            entry = self._producers[pid]
            body += _PRODUCER.pack(
                pid,
                entry.epoch,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
                entry.last_timestamp,
                len(entry.batches),
            )
            for meta in entry.batches:
                body += _BATCH.pack(meta.first_seq, meta.last_seq, meta.first_offset, meta.last_offset, meta.timestamp)
        body += _COUNT.pack(len(self._unreplicated))
        for first in sorted(self._unreplicated):
            txn = self._unreplicated[first]
            body += _TXN.pack(txn.producer_id, txn.first_offset, txn.last_offset, int(txn.aborted))
        body += _COUNT.pack(len(self._aborted))
        for aborted in self._aborted:
            body += _ABORTED.pack(aborted.producer_id, aborted.first_offset, aborted.last_offset)
        return _PREFIX.pack(_MAGIC, _VERSION, 0, _crc32c_module.crc32c(bytes(body))) + bytes(body)

    def load(self, data: bytes | bytearray | memoryview) -> None:
        """Replace the state with a snapshot; on ``CorruptSnapshotError`` the old state is kept."""
        view = memoryview(data).cast("B")
        if len(view) < _PREFIX.size:
            raise CorruptSnapshotError(f"producer state snapshot too short ({len(view)} bytes)")
        magic, version, _flags, crc = _PREFIX.unpack_from(view, 0)
        if magic != _MAGIC:
            raise CorruptSnapshotError(f"not a producer state snapshot (magic {bytes(magic)!r})")
        if version != _VERSION:
            raise CorruptSnapshotError(f"unsupported producer state snapshot version {version}")
        if _crc32c_module.crc32c(view[_PREFIX.size :]) != crc:
            raise CorruptSnapshotError("producer state snapshot checksum mismatch")
        parsed = _parse_body(_Reader(view, _PREFIX.size))
        (
            self._next_offset,
            self._producers,
            self._ongoing,
            self._unreplicated,
            self._aborted,
        ) = parsed
        self._aborted_max_span = max((t.last_offset - t.first_offset for t in self._aborted), default=0)

    def iter_entries(self) -> Iterator[ProducerEntry]:
        for pid in sorted(self._producers):
            yield self._producers[pid]


def _parse_body(
    reader: _Reader,
) -> tuple[int, dict[int, ProducerEntry], dict[int, int], dict[int, CompletedTxn], list[AbortedTxn]]:
    (next_offset,) = reader.take(_HEAD, "header")
    producers: dict[int, ProducerEntry] = {}
    ongoing: dict[int, int] = {}
    for _ in range(reader.count("producers", _PRODUCER.size)):
        pid, epoch, coord, txn_first, last_ts, n_batches = reader.take(_PRODUCER, "producer")
        if pid < 0 or pid in producers or n_batches > BATCHES_TO_RETAIN:
            raise CorruptSnapshotError(f"producer state snapshot has a bad producer record (id {pid})")
        entry = ProducerEntry(pid, epoch, coord, txn_first, last_ts)
        for _ in range(n_batches):
            entry.batches.append(BatchMetadata(*reader.take(_BATCH, "batch")))
        producers[pid] = entry
        if txn_first >= 0:
            ongoing[txn_first] = pid
    unreplicated: dict[int, CompletedTxn] = {}
    for _ in range(reader.count("completed transactions", _TXN.size)):
        pid, first, last, aborted = reader.take(_TXN, "completed transaction")
        unreplicated[first] = CompletedTxn(pid, first, last, bool(aborted))
    aborted_index: list[AbortedTxn] = []
    for _ in range(reader.count("aborted transactions", _ABORTED.size)):
        txn = AbortedTxn(*reader.take(_ABORTED, "aborted transaction"))
        if aborted_index and txn.last_offset < aborted_index[-1].last_offset:
            raise CorruptSnapshotError("producer state snapshot has an unordered aborted transaction index")
        aborted_index.append(txn)
    if reader.pos != len(reader.data):
        extra = len(reader.data) - reader.pos
        raise CorruptSnapshotError(f"producer state snapshot has {extra} trailing bytes")
    return next_offset, producers, ongoing, unreplicated, aborted_index
