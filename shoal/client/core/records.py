"""Records as the application sees them, decoded from fetched record sets.

Why one module for both consumers: AsyncConsumer (Fetch) and
AsyncShareConsumer (ShareFetch) receive the same record-set bytes and hand out
the same ``ConsumerRecord``; a share record just also carries its delivery
count. Decoding uses ``protocol.records`` (CRC check, decompression with a
size cap, magic 0/1 fallback), so bytes are decoded in one place.

``decode_record_set`` skips control batches (transaction markers are not
records) and records below ``start_offset`` (a fetch returns whole batches,
so the first batch may begin before the requested offset).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.record_sets import decode_record_set
from shoal.protocol.records import CURRENT_MAGIC, MAGIC_POS, BatchHeader, Record, iter_batches

__all__ = ["ConsumerRecord", "RecordBatchView", "ReturnedBatches", "decode_record_set_for", "iter_record_batches"]

Deserializer = Callable[[bytes | None], Any] | None


@dataclass(slots=True)
class ConsumerRecord:
    """One record returned by poll().

    Share consumers also set ``delivery_count`` (how often the broker has
    delivered it, 1 the first time) and ``acquisition_lock_deadline``: the
    ``time.monotonic()`` second at which the broker's acquisition lock on it
    runs out, counted conservatively from when the fetch (or the RENEW that
    last restarted the lock) was sent. Past it the record may go to another
    consumer, so an application that needs longer acknowledges it with RENEW.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    leader_epoch: int = -1
    delivery_count: int | None = None
    acquisition_lock_deadline: float | None = None

    @property
    def topic_partition(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass(slots=True)
class RecordBatchView:
    """Header facts of one fetched batch, for callers that work per batch."""

    base_offset: int
    last_offset: int
    is_control: bool
    is_transactional: bool
    producer_id: int
    leader_epoch: int
    records: list[Record]


def iter_record_batches(data: Any, *, check_crcs: bool = True) -> Iterator[RecordBatchView]:
    """Decode a fetched record set batch by batch (a trailing partial batch is skipped).

    Falls back to the magic 0/1 decoder when the data is not magic 2.
    """
    if not data:
        return
    view = memoryview(data)
    if len(view) > MAGIC_POS and view[MAGIC_POS] != CURRENT_MAGIC:
        records = decode_record_set(view, verify_crc=check_crcs)
        if records:
            yield RecordBatchView(records[0].offset, records[-1].offset, False, False, -1, -1, records)
        return
    for header, _ in iter_batches(view, allow_partial=True):
        if header.magic != 2:
            raise ProtocolError(f"unsupported magic {header.magic}")
        records = header.records(verify_crc=check_crcs) if header.records_count else []
        yield RecordBatchView(
            header.base_offset,
            header.last_offset,
            header.is_control,
            header.is_transactional,
            header.producer_id,
            header.partition_leader_epoch,
            records,
        )


def decode_record_set_for(
    topic: str,
    partition: int,
    data: Any,
    *,
    start_offset: int = 0,
    check_crcs: bool = True,
    key_deserializer: Deserializer = None,
    value_deserializer: Deserializer = None,
    aborted_transactions: Iterable[tuple[int, int]] | None = None,
) -> tuple[list[ConsumerRecord], int]:
    """Records at or after ``start_offset``, and the offset after the last whole batch.

    The second value lets a consumer advance past batches that held no
    returnable records (control batches, compacted-away tails).

    ``aborted_transactions`` — (producer id, first offset) pairs from a
    read_committed Fetch response — drops the batches of aborted transactions
    as Kafka's consumer does: a producer's transactional batches are skipped
    from the first offset of its aborted transaction up to its abort marker.

    Records are built as ``ConsumerRecord`` straight from the batch bytes (no
    intermediate objects): this loop is the consumer's hot path.
    """
    if not data:
        return [], start_offset
    view = memoryview(data)
    if len(view) > MAGIC_POS and view[MAGIC_POS] != CURRENT_MAGIC:
        return _decode_legacy(topic, partition, view, start_offset, check_crcs, key_deserializer, value_deserializer)
    out: list[ConsumerRecord] = []
    plain = key_deserializer is None and value_deserializer is None
    batches = ReturnedBatches(view, start_offset, aborted_transactions, check_crcs=check_crcs)
    for header in batches:
        epoch = header.partition_leader_epoch
        if plain:

            def make(offset: int, ts: int, key: Any, value: Any, headers: list, attrs: int, ts_type: int,
                     epoch: int = epoch) -> Any:  # fmt: skip
                return ConsumerRecord(topic, partition, offset, ts, ts_type, key, value, headers, epoch)

        else:

            def make(offset: int, ts: int, key: Any, value: Any, headers: list, attrs: int, ts_type: int,
                     epoch: int = epoch) -> Any:  # fmt: skip
                if key_deserializer is not None:
                    key = key_deserializer(key)
                if value_deserializer is not None:
                    value = value_deserializer(value)
                return ConsumerRecord(topic, partition, offset, ts, ts_type, key, value, headers, epoch)

        records = header.records(verify_crc=check_crcs, make=make)
        if header.base_offset < start_offset:
            records = [r for r in records if r.offset >= start_offset]
        out += records
    return out, batches.next_offset


class ReturnedBatches:
    """The magic 2 batches of a fetched record set whose records a consumer returns.

    Iterating yields the ``BatchHeader`` of every data batch with records at or
    after ``start_offset``, in order, passing over control batches, empty
    batches and -- given ``aborted_transactions``, the (producer id, first
    offset) pairs of a read_committed Fetch answer -- the batches of aborted
    transactions, as Kafka's consumer does: a producer's transactional batches
    are skipped from the first offset of its aborted transaction up to its
    abort marker. A trailing partial batch (the broker cut at its byte limit)
    ends the iteration. ``next_offset`` is then the offset after the last
    whole batch, so a reader advances past batches that held nothing to
    return. Only headers are read (and the abort markers' records); decoding
    the returned batches is the caller's, as records or as columns.
    """

    __slots__ = ("_aborted", "_check_crcs", "_pending", "_start", "_view", "next_offset")

    def __init__(
        self,
        view: memoryview,
        start_offset: int,
        aborted_transactions: Iterable[tuple[int, int]] | None = None,
        *,
        check_crcs: bool = True,
    ) -> None:
        self._view = view
        self._start = start_offset
        self._check_crcs = check_crcs
        self._pending = sorted(aborted_transactions, key=lambda a: a[1]) if aborted_transactions else None
        self._aborted: set[int] = set()
        self.next_offset = start_offset

    def __iter__(self) -> Iterator[BatchHeader]:
        pending = self._pending
        aborted = self._aborted
        start = self._start
        for header, _ in iter_batches(self._view, allow_partial=True):
            if header.magic != 2:
                raise ProtocolError(f"unsupported magic {header.magic}")
            last = header.last_offset
            if last >= self.next_offset:
                self.next_offset = last + 1
            if pending is not None and header.producer_id >= 0:
                while pending and pending[0][1] <= last:
                    aborted.add(pending.pop(0)[0])
                if header.is_control:
                    markers = header.records(verify_crc=self._check_crcs) if header.records_count else []
                    if markers and markers[0].control is not None and markers[0].control.is_abort:
                        aborted.discard(header.producer_id)
                    continue
                if header.is_transactional and header.producer_id in aborted:
                    continue
            if header.is_control or not header.records_count or last < start:
                continue
            yield header


def _decode_legacy(
    topic: str,
    partition: int,
    view: memoryview,
    start_offset: int,
    check_crcs: bool,
    key_deserializer: Deserializer,
    value_deserializer: Deserializer,
) -> tuple[list[ConsumerRecord], int]:
    """Magic 0/1 message sets (old producers, or a log written by them)."""
    out: list[ConsumerRecord] = []
    next_offset = start_offset
    for batch in iter_record_batches(view, check_crcs=check_crcs):
        next_offset = max(next_offset, batch.last_offset + 1)
        for r in batch.records:
            if r.offset < start_offset:
                continue
            key = r.key if key_deserializer is None else key_deserializer(r.key)
            value = r.value if value_deserializer is None else value_deserializer(r.value)
            out.append(ConsumerRecord(topic, partition, r.offset, r.timestamp, r.timestamp_type, key, value, r.headers))
    return out, next_offset
