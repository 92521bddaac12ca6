"""A partition this broker leads: its log plus idempotent-producer state.

The log (`broker.log.PartitionLog`) only stores batches; this layer decides
what may be stored. A produce is validated batch by batch from the headers
alone — magic 2, CRC, record count, no client control batches, timestamps
within message.timestamp.before/after.max.ms, one batch per request as
Kafka requires from Produce v3 — and checked against producer state
(duplicates are acknowledged with their original offsets, gaps and stale
epochs refused). Nothing reaches the log unless the whole request is good.

Large appends are written on the broker's log writer thread
(``broker.log.writer``), and small ones too while the page cache is slow
(``broker.log.inline_writes``: a throttled ``write()`` blocks for 100 ms and
more, and on the event loop that stalls every client); otherwise small ones
are written on the loop, which spares a producer with one request in flight
two thread wake-ups per request. Handed to the thread, the offsets are
assigned at once, and the ``written`` future of the result settles when the
bytes reached the OS (None) or the write failed (the error; the log is then
offline). Records become visible to fetches only then. A duplicate of a
batch still being written waits for that write too.

Producer state is snapshotted at clean shutdown and rebuilt by replaying the
log after the snapshot (or from the start) otherwise.

A partition whose log directory is offline (a storage error anywhere in it,
``broker.log.log_dir``) answers KAFKA_STORAGE_ERROR to everything that needs
its log — produce, fetch, offset lookups, DeleteRecords — before looking at
the request, as Kafka's ReplicaManager does for an offline partition; a
storage error met on the way (``OSError`` from the log, ``LogFailed``) takes
the directory offline and answers the same. A write that completes after the
directory went offline is not confirmed either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from shoal.broker.config.settings import resolve_topic_configs
from shoal.broker.errors import ErrorAnswer
from shoal.broker.log import LogConfig, LogError, LogFailed, OffsetOutOfRange, PartitionLog
from shoal.broker.partition.producer_state import APPEND, CorruptSnapshotError, Duplicate, ProducerStateManager, Reject
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.records import BatchHeader, TimestampType, iter_batches, set_partition_leader_epoch

log = logging.getLogger("shoal.partition")


def fetch_key(topic_name: str, index: int) -> tuple:
    """The fetch purgatory's watch key of a partition: appends (produce, share-state changes)
    complete the fetches and share fetches that wait on it."""
    return ("fetch", topic_name, index)


class Topic(Protocol):
    """What a partition knows of its topic (``topics.Topic``, which holds the partitions)."""

    name: str
    configs: Mapping[str, Any]

    @property
    def internal(self) -> bool: ...  # a coordinator's topic


LEADER_EPOCH = 0  # a single node never changes leader: the one leader epoch of every partition
SNAPSHOT_FILE = "producer-state.snapshot"
# Reads at least this large are served from a read-only memory map of the
# segment: the response then points at the page cache and the transport
# sends from it, instead of pread copying the bytes into a new buffer first.
MMAP_READ_BYTES = 256 * 1024
# Appends this large go to the log writer thread (the loop receives the next
# request while the thread copies); smaller ones are written inline, unless
# writes are in flight already (they queue behind them to keep the order) or a
# recent write was slow (``broker.inline_writes``).
ASYNC_APPEND_BYTES = 64 * 1024


def _mapped(region: Any) -> memoryview | None:
    """A view of a file region through mmap (None if mapping fails).

    Safe because segment files are only ever appended to or replaced by new
    files while the broker runs (never truncated in place), so mapped pages
    stay valid for the life of the view.
    """
    if region.fd < 0 or region.length <= 0:
        return None
    start = region.position - region.position % mmap.ALLOCATIONGRANULARITY
    try:
        mm = mmap.mmap(region.fd, region.position + region.length - start, access=mmap.ACCESS_READ, offset=start)
    except (OSError, ValueError):
        return None
    skip = region.position - start
    return memoryview(mm)[skip : skip + region.length]


def log_config(overrides: dict[str, str], broker_config: Any) -> LogConfig:
    c = resolve_topic_configs(overrides, broker_config)
    return LogConfig(
        segment_bytes=c["segment.bytes"],
        segment_ms=c["segment.ms"],
        retention_ms=c["retention.ms"],
        retention_bytes=c["retention.bytes"],
        index_interval_bytes=c["index.interval.bytes"],
        max_message_bytes=c["max.message.bytes"],
        message_timestamp_type=c["message.timestamp.type"],
        cleanup_policy=tuple(c["cleanup.policy"]),
        flush_interval_messages=c["flush.messages"],
        flush_interval_ms=c["flush.ms"],
        segment_index_bytes=c["segment.index.bytes"],
    )


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    end_offset: int  # next offset after what this request wrote (or duplicated)
    log_append_time: int
    appended: bool  # False for an acknowledged duplicate
    # Set while the bytes are still being written: resolves to None once they
    # reached the OS (and fetches were woken), or to the error that took the log offline.
    written: asyncio.Future | None = None


@dataclass(slots=True)
class FetchRead:
    records: Any
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list | None


class Partition:
    __slots__ = ("broker", "index", "log", "producers", "settings", "topic")

    def __init__(self, broker: Any, topic: Topic, index: int, plog: PartitionLog, producers: ProducerStateManager):
        self.broker = broker
        self.topic = topic
        self.index = index
        self.log = plog
        self.producers = producers
        self.settings = resolve_topic_configs(topic.configs, broker.config)

    @classmethod
    def open(cls, broker: Any, topic: Topic, index: int, clean: bool) -> Partition:
        path = broker.data_dir / f"{topic.name}-{index}"
        plog = PartitionLog.open(path, log_config(topic.configs, broker.config), broker.clock.now_ms, clean)
        # Everything written since the last clean shutdown is re-validated after a crash.
        plog.checkpoint_on_flush = False
        # The coordinators' topics get the writer that fsyncs each write (Broker.coordinator_writer).
        coordinator_writer = broker.coordinator_writer
        plog.writer = coordinator_writer if topic.internal and coordinator_writer is not None else broker.log_writer
        plog.files = broker.file_ops
        plog.log_dir = broker.log_dir
        report = plog.recovery
        if report is not None and not clean:
            log.info("%s-%d: %s", topic.name, index, report.summary())
        expiration = broker.config.get("producer.id.expiration.ms")
        try:
            producers = _restore_producers(plog, expiration, path)
        except BaseException:
            with contextlib.suppress(Exception):
                plog.close()  # closes every file, whatever else fails
            raise
        return cls(broker, topic, index, plog, producers)

    # -- state -----------------------------------------------------------------
    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return self.producers.last_stable_offset(self.log.high_watermark)

    @property
    def offline(self) -> bool:
        """True once the log directory holding this partition had a storage error (until restart)."""
        return self.log.failed is not None

    def _check_online(self) -> None:
        failed = self.log.failed
        if failed is not None:
            raise ErrorAnswer(
                ErrorCode.KAFKA_STORAGE_ERROR,
                f"{self.topic.name}-{self.index} is in an offline log directory: {failed}",
            )

    def _storage_error(self, error: OSError) -> ErrorAnswer:
        """An OSError met while using the log: the directory goes offline."""
        failed = self.log.io_failed(error)
        return ErrorAnswer(ErrorCode.KAFKA_STORAGE_ERROR, str(failed))

    # -- produce ---------------------------------------------------------------
    def append(self, records: Any, now_ms: int) -> AppendResult:
        self._check_online()
        if records is None or len(records) == 0:
            raise ErrorAnswer(ErrorCode.INVALID_RECORD, "produce request without record batches")
        view = memoryview(records)
        if view.readonly:
            view = memoryview(bytearray(view))
        try:
            batches = list(iter_batches(view))
        except ProtocolError as e:
            raise ErrorAnswer(ErrorCode.CORRUPT_MESSAGE, f"malformed record batch: {e}") from None
        if len(batches) != 1:
            raise ErrorAnswer(
                ErrorCode.INVALID_RECORD, "a produce request must hold exactly one record batch per partition"
            )
        header, _ = batches[0]
        self._validate(header, now_ms)
        check = self.producers.check(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            header.is_transactional,
        )
        if isinstance(check, Duplicate):
            written = None
            if check.last_offset >= self.log.log_end_offset:  # the original is still being written
                written = asyncio.get_running_loop().create_future()
                self.log.when_written(check.last_offset + 1, lambda error: _settle(written, error))
            return AppendResult(check.first_offset, check.last_offset + 1, -1, False, written)
        if isinstance(check, Reject):
            raise ErrorAnswer(check.error, check.message)
        assert check is APPEND
        producer_id = header.producer_id
        producer_epoch, base_seq, last_seq = header.producer_epoch, header.base_sequence, header.last_sequence
        transactional = header.is_transactional
        set_partition_leader_epoch(view, LEADER_EPOCH)
        plog = self.log
        written = None
        try:
            if plog.writer is None:
                info = plog.append(view, now_ms=now_ms)
            elif len(view) >= ASYNC_APPEND_BYTES or plog.writes_in_flight or not self.broker.inline_writes.allowed():
                written = asyncio.get_running_loop().create_future()
                info = plog.append_async(view, lambda error: self._written(written, error), now_ms=now_ms)
            else:
                started = time.perf_counter()
                info = plog.append(view, now_ms=now_ms)
                self.broker.inline_writes.took(time.perf_counter() - started)
        except LogError as e:
            raise ErrorAnswer(e.error_code, str(e)) from None
        except OSError as e:  # the log turns its own into LogFailed; anything else on the way too
            raise self._storage_error(e) from None
        if producer_id >= 0:
            stamp = info.log_append_time if info.log_append_time >= 0 else info.max_timestamp
            self.producers.update(
                producer_id,
                producer_epoch,
                base_seq,
                last_seq,
                transactional,
                info.first_offset,
                info.last_offset,
                stamp,
            )
        return AppendResult(info.first_offset, info.last_offset + 1, info.log_append_time, True, written)

    def _written(self, written: asyncio.Future, error: BaseException | None) -> None:
        if error is None:
            self.broker.on_append(self)
            failed = self.log.failed
            if failed is not None:  # written, but the directory went offline meanwhile: confirm nothing
                error = LogFailed(
                    f"{self.topic.name}-{self.index} went offline before the write was confirmed: {failed}"
                )
        else:
            log.error("%s-%d: write failed, partition offline until restart: %s", self.topic.name, self.index, error)
        _settle(written, error)

    def _validate(self, h: BatchHeader, now_ms: int) -> None:
        if h.magic != 2:
            raise ErrorAnswer(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, f"magic {h.magic} batches are not accepted")
        if h.size > self.settings["max.message.bytes"]:
            raise ErrorAnswer(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"batch of {h.size} bytes exceeds max.message.bytes {self.settings['max.message.bytes']}",
            )
        if not h.verify_crc():
            raise ErrorAnswer(ErrorCode.CORRUPT_MESSAGE, "record batch CRC mismatch")
        if h.records_count != h.last_offset_delta + 1 or h.records_count <= 0:
            raise ErrorAnswer(
                ErrorCode.CORRUPT_MESSAGE,
                f"batch claims {h.records_count} records but its last offset delta is {h.last_offset_delta}",
            )
        if h.is_control:
            raise ErrorAnswer(ErrorCode.INVALID_RECORD, "clients may not write control batches")
        if h.is_transactional:
            raise ErrorAnswer(ErrorCode.INVALID_RECORD, "transactional batches are not supported")
        if self.settings["message.timestamp.type"] == "CreateTime" and h.timestamp_type == TimestampType.CREATE_TIME:
            before = self.settings["message.timestamp.before.max.ms"]
            after = self.settings["message.timestamp.after.max.ms"]
            if h.max_timestamp > now_ms + after or (h.base_timestamp >= 0 and h.base_timestamp < now_ms - before):
                raise ErrorAnswer(
                    ErrorCode.INVALID_TIMESTAMP,
                    f"timestamp outside [{now_ms - before}, {now_ms + after}] (message.timestamp.*.max.ms)",
                )

    # -- fetch -----------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, read_committed: bool, min_one: bool) -> FetchRead:
        self._check_online()
        plog = self.log
        hw = plog.high_watermark
        start = plog.log_start_offset
        lso = self.producers.last_stable_offset(hw)
        if offset < start or offset > hw:
            raise ErrorAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is outside [{start}, {hw}]")
        limit = lso if read_committed else hw
        if offset >= limit:
            return FetchRead(b"", hw, lso, start, [] if read_committed else None)
        try:
            region = plog.read_region(offset, max_bytes, max_offset=limit, min_one_message=min_one)
            data = _mapped(region) if region.length >= MMAP_READ_BYTES else None
            if data is None:
                got = plog.read(offset, max_bytes, max_offset=limit, min_one_message=min_one)
                data, next_offset = got.data, got.next_offset
            else:
                next_offset = region.next_offset
        except OffsetOutOfRange as e:
            raise ErrorAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, str(e)) from None
        except OSError as e:  # EIO on a read: Kafka takes the directory offline too
            raise self._storage_error(e) from None
        aborted = self.producers.aborted_transactions(offset, next_offset) if read_committed else None
        return FetchRead(data, hw, lso, start, aborted)

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        self._check_online()
        try:
            return self.log.offset_for_timestamp(ts)
        except OSError as e:
            raise self._storage_error(e) from None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        self._check_online()
        try:
            return self.log.max_timestamp_offset()
        except OSError as e:
            raise self._storage_error(e) from None

    # -- housekeeping ------------------------------------------------------------
    def enforce_retention(self, now_ms: int) -> None:
        """Retention and producer expiry; nothing for an offline partition (LogFailed on a storage error)."""
        if self.offline:
            return
        if self.log.enforce_retention(now_ms):
            self.producers.truncate_head(self.log.log_start_offset)
        self.producers.remove_expired(now_ms)

    def advance_log_start(self, offset: int) -> bool:
        """DeleteRecords: records below `offset` go (the share coordinator prunes with it)."""
        self._check_online()
        try:
            moved = self.log.advance_log_start(offset)
        except OffsetOutOfRange as e:
            raise ErrorAnswer(ErrorCode.OFFSET_OUT_OF_RANGE, str(e)) from None
        except LogError as e:
            raise ErrorAnswer(e.error_code, str(e)) from None
        if moved:
            self.producers.truncate_head(self.log.log_start_offset)
        return moved

    def reconfigure(self) -> None:
        self.settings = resolve_topic_configs(self.topic.configs, self.broker.config)
        self.log.config = log_config(self.topic.configs, self.broker.config)

    def close(self) -> None:
        """Flush, snapshot producer state, close the log.

        Raises LogFailed when the log is offline or cannot be flushed: the
        next start must then recover it as after a crash (the snapshot is
        dropped, so producer state is rebuilt from what the log kept).
        """
        plog = self.log
        if plog.closed:
            return
        try:
            plog.flush()  # the snapshot must not run ahead of what is durable (LogFailed if it cannot be)
            durable = True
        except LogError:
            durable = False
        snapshot = os.path.join(plog.path, SNAPSHOT_FILE)
        if not durable:
            with contextlib.suppress(OSError):
                os.unlink(snapshot)
        else:
            tmp = snapshot + ".tmp"
            try:
                data = self.producers.snapshot(plog.log_end_offset)
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, snapshot)
            except OSError as e:
                # The previous snapshot (if any) stays: it is older, and replaying the log after it is exact.
                log.warning("%s-%d: producer snapshot not written: %s", self.topic.name, self.index, e)
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        plog.close()

    def abandon(self, *, lose_unflushed: bool) -> None:
        """Close as a crash would (``Broker.halt``): no flush, no producer snapshot.

        A snapshot left from an earlier clean stop may describe records a lost
        tail held, so it goes when the tail does: the next start replays the log.
        """
        if lose_unflushed:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.log.path, SNAPSHOT_FILE))
        self.log.abandon(lose_unflushed=lose_unflushed)

    def delete(self) -> None:
        self.log.delete()


def _settle(written: asyncio.Future, error: BaseException | None) -> None:
    if not written.done():
        written.set_result(error)


def _restore_producers(plog: PartitionLog, expiration_ms: int, path: Any) -> ProducerStateManager:
    """Load the snapshot if it is usable, then replay the log after it."""
    producers = ProducerStateManager(expiration_ms=expiration_ms)
    start = plog.log_start_offset
    snap = os.path.join(path, SNAPSHOT_FILE)
    if os.path.exists(snap):
        try:
            with open(snap, "rb") as f:
                producers.load(f.read())
            if producers.next_offset <= plog.log_end_offset:
                start = max(start, producers.next_offset)
            else:  # the log was cut below the snapshot: rebuild from scratch
                producers = ProducerStateManager(expiration_ms=expiration_ms)
        except (OSError, CorruptSnapshotError) as e:
            log.warning("%s: producer snapshot unusable (%s); rebuilding from the log", path, e)
    for header, _ in plog.scan(start):
        if header.producer_id < 0:
            continue
        producers.replay_batch(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            header.is_transactional,
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
        )
    return producers
