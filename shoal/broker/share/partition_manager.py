"""Share partitions on the partition leader: the asyncio shell around SharePartition.

The SharePartition core (shoal/broker/share/share_partition.py) decides which
records a member acquires and what an acknowledgement does; this shell gives
it what it cannot have itself:

* **State at first use.** A share partition is created when a ShareFetch or
  ShareAcknowledge first names it: its state is read from the share
  coordinator (ReadShareGroupState, in-process). A start offset of -1 (the
  group coordinator initialized it and nobody consumed yet) is resolved by
  the group's share.auto.offset.reset -- latest = high watermark, earliest =
  log start, by_duration = the time index -- and that resolved offset is
  written back at once, so a crash cannot re-resolve "latest" past records
  that were already handed out.
* **Log reads.** A fetch reads the log from the core's next fetch offset and
  passes the batch headers (not the records) to ``acquire``; the response
  carries the raw batches, trimmed to those that hold acquired offsets.
  Reading and acquiring happen in one synchronous step, which is the "one
  fetch at a time per share partition" lock for free. How much to read: the
  handler gives each partition its share of MaxBytes (Kafka's "uniform"
  strategy); within it, a read is sized from what MaxRecords can still use
  at the bytes per record last seen on this partition (at least
  ``READ_MIN``; ``READ_CHUNK`` before anything was seen), and the partition
  is read on -- from the next fetch offset, as a new fetch would -- while a
  read was used up and MaxRecords, the byte share and the in-flight limit
  leave room. So a consumer asking for 500 records with MaxBytes 50 MiB
  (librdkafka) costs one read of ~500 records, not 50 MiB of batch headers;
  one asking for 20,000 gets 20,000; and 32 members asking for 5 each do
  not each parse 1 MiB of headers (that alone held such a group at half
  its rate). In record_limit mode a large batch of which few records were
  acquired is sent cut down to them (``_slice``).
* **Durability.** Every change except acquisition and RENEW is written with
  WriteShareGroupState before anyone is answered. The core requires the
  writes of one share partition to be sent and committed in the order its
  Changes were made, so each share partition has one ordered write pipeline
  (``write_pipeline``, sans-IO): what queued up goes in one write (ranges
  overlaid in order, the furthest start), so members acking one partition
  share a write and its sync, and the next write is appended while the
  previous one's fsync runs, so an acknowledgement waits for one sync round,
  not for the round in front of it as well. Writes settle in order. A
  failed acknowledgement write undoes the in-memory change (``Change.undo``,
  with every later write in flight, newest first) and the member gets the
  error; lock expiries and releases are kept even when their write fails
  (as Kafka does), and the next write carries the state again.
* **Lock timers.** One timer task per share partition, at the core's
  earliest lock deadline; expiry writes the releases and wakes waiting
  fetches.
* **Wake-ups.** Fetches that found nothing wait in the fetch purgatory under
  the partition's key; produce already completes that key, and releases,
  expiries and acknowledgements do too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.partition.partition import LEADER_EPOCH, fetch_key
from shoal.broker.share.backoff import BackoffPolicy
from shoal.broker.share.dead_letter import classify, rejected_ranges
from shoal.broker.share.dead_letter_writer import DeadLetterWriter
from shoal.broker.share.key_order import KeyOrder
from shoal.broker.share.session import ShareSessionCache
from shoal.broker.share.share_metrics import count_acknowledged, count_expired
from shoal.broker.share.share_partition import SharePartition
from shoal.broker.share.write_pipeline import Group, WritePipeline
from shoal.broker.timing.prompt import PromptFuture
from shoal.broker.timing.wheel import TimerTask
from shoal.protocol.constants import ARCHIVED, ARCHIVING
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.record_slice import RecordIndex
from shoal.protocol.records import iter_batches

log = logging.getLogger("shoal.share.partitions")

READ_CHUNK = 1 << 20  # the first log read of a share partition (its bytes per record unknown)
READ_MIN = 16 << 10  # smallest later read: what MaxRecords can use, never less than this
START_RETRY_S = 1.0  # a failed write of a moved start offset is tried again this much later
# record_limit: a batch this large (bytes, or records the client would decode) of which a fetch
# acquired under half the records is sent as a batch of just those records
# (shoal/protocol/record_slice.py); its record index is kept for the next fetch.
SLICE_MIN_BYTES = 64 << 10
SLICE_MIN_RECORDS = 128
SLICE_CACHE = 4  # record indexes kept per share partition
PartitionKey = tuple[str, uuid.UUID, int]


@dataclass(slots=True)
class Entry:
    key: PartitionKey
    topic: Any
    partition: Any
    sp: SharePartition | None = None
    loading: asyncio.Future | None = None
    timer: TimerTask | None = None
    pipe: WritePipeline = field(default_factory=WritePipeline)  # this share partition's state writes
    pump_soon: bool = False  # a _pump is scheduled (changes of one loop turn share a write)
    start_backoff: bool = False  # a write of the start offset alone failed: retried after START_RETRY_S
    persisted_start: int = -1  # the start offset the share coordinator holds
    bytes_per_record: float = 0.0  # log bytes per offset in the last read (0 = not read yet)
    # base offset -> (RecordIndex, its header without the bytes) of large batches (record_limit)
    slices: dict = field(default_factory=dict)
    rejects: list = field(default_factory=list)  # (first, last) REJECTed, ARCHIVING, not yet copied
    answering: list | None = None  # _settle is answering these waiters (a nested _settle adds its own)


@dataclass(slots=True)
class Acquired:
    records: Any  # bytes / memoryview of log batches (whole, or sliced to the acquired records)
    ranges: list  # [(first, last, delivery count)]


@dataclass(slots=True, eq=False)
class AckWrite:
    """An acknowledgement whose state write is queued: ``outcome()`` once it is durable."""

    manager: SharePartitionManager
    entry: Entry
    batches: Sequence[tuple]
    change: Any
    rejected: list
    future: asyncio.Future

    async def outcome(self) -> tuple[int, str | None]:
        error = await self.future
        entry = self.entry
        if error:
            entry.rejects = [r for r in entry.rejects if r not in self.rejected]
            return error, f"Persisting the acknowledgement failed: {ErrorCode(error).name}"
        self.manager.note_acknowledged(entry, self.batches, self.change)
        return 0, None


def _cached(entry: Entry, offset: int, stable: int | None) -> tuple[RecordIndex, Any] | None:
    """(index, header without its bytes) of a sliced batch holding `offset` (record_limit), or
    None: the log is read.

    The index holds the batch's records; the log still holds the batch (offsets below the
    log start were handled before this is asked; the batch was below the high watermark
    when read; an offline log is read, for its error). Under read_committed (`stable`: the
    last stable offset) a transactional batch is read again, for the aborted transactions,
    and so is one not yet below the last stable offset (kept while the group read
    uncommitted)."""
    for kept in entry.slices.values():
        header = kept[1]
        if header.base_offset <= offset <= header.last_offset:
            if stable is not None and (header.is_transactional or header.last_offset >= stable):
                return None
            return kept
    return None


class SharePartitionManager:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.entries: dict[PartitionKey, Entry] = {}
        self.sessions = ShareSessionCache(broker.config.get("group.share.max.share.sessions"))
        self.closed = False  # close() ran: no more writes are sent
        self.dead_letters = DeadLetterWriter(broker)
        configs = getattr(broker, "group_configs", None)
        if configs is not None:
            configs.add_listener(self.group_configs_changed)

    def now(self) -> int:
        return self.broker.clock.monotonic_ms()

    def setting(self, gid: str, name: str) -> Any:
        store = self.broker.group_configs
        if store is not None:
            return store.get(gid, name)
        return self.broker.config.group_defaults()[name]

    def group_configs_changed(self, gid: str) -> None:
        """KIP-1240: a group's delivery count limit, record-lock cap and lock duration apply at once
        to its share partitions already loaded, not only to those loaded later (records in flight
        keep their lock deadlines; the next acquisition, release or expiry uses the new values)."""
        for key, entry in list(self.entries.items()):
            sp = entry.sp
            if key[0] != gid or sp is None:
                continue
            sp.delivery_count_limit = self.setting(gid, "share.delivery.count.limit")
            sp.max_in_flight_records = self.setting(gid, "share.partition.max.record.locks")
            sp.lock_duration_ms = self.setting(gid, "share.record.lock.duration.ms")
            sp.archive_to = self._archive_to(gid)
            self._queue_features(gid, sp)
            self._wake(entry)  # a higher cap may let a waiting fetch acquire

    # -- loading -------------------------------------------------------------------
    def _locate(self, topic_id: uuid.UUID, index: int) -> tuple[Any, Any]:
        topic = self.broker.topics.by_id(topic_id)
        if topic is None:
            raise ErrorAnswer(ErrorCode.UNKNOWN_TOPIC_ID, "Unknown topic id.")
        if not 0 <= index < len(topic.partitions):
            raise ErrorAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this partition.")
        return topic, topic.partitions[index]

    def ready(self, gid: str, topic_id: uuid.UUID, index: int) -> Entry | None:
        """The share partition if it is loaded and current, without a wait (None: ``get`` loads
        it). ErrorAnswer for an unknown topic or partition, as ``get``. A handler whose partitions
        are all ready runs without suspending: each wait is a loop turn, milliseconds on a busy loop."""
        entry = self.entries.get((gid, topic_id, index))
        if entry is None or entry.sp is None:
            return None
        _topic, partition = self._locate(topic_id, index)
        return entry if entry.partition is partition else None

    async def get(self, gid: str, topic_id: uuid.UUID, index: int) -> Entry:
        """The loaded share partition, reading its state on first use (ErrorAnswer on failure)."""
        topic, partition = self._locate(topic_id, index)
        key = (gid, topic_id, index)
        entry = self.entries.get(key)
        if entry is not None and entry.partition is not partition:
            self._drop(entry)  # the topic was re-created (or partitions re-opened)
            entry = None
        if entry is not None:
            if entry.sp is not None:
                return entry
            assert entry.loading is not None
            await asyncio.shield(entry.loading)
            if entry.sp is None:
                raise ErrorAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "Share partition failed to load.")
            return entry
        entry = self.entries[key] = Entry(key, topic, partition)
        entry.loading = asyncio.get_running_loop().create_future()
        try:
            entry.sp = await self._load(gid, topic_id, index, partition)
            entry.persisted_start = entry.sp.start_offset
            # ARCHIVING ranges of the persisted state lost their copy to a crash: re-drive them
            self._dead_letter(entry, [(a, b, s, n) for a, b, s, n, _m in entry.sp.ranges()])
        except BaseException:
            self.entries.pop(key, None)
            raise
        finally:
            if not entry.loading.done():
                entry.loading.set_result(None)
        return entry

    async def _load(self, gid: str, topic_id: uuid.UUID, index: int, partition: Any) -> SharePartition:
        sc = self.broker.share_coordinator
        if sc is None:
            raise ErrorAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "No share coordinator.")
        result = await sc.read(gid, topic_id, index, LEADER_EPOCH)
        if result.error:
            raise ErrorAnswer(result.error, f"Reading the share state failed: {ErrorCode(result.error).name}")
        start = result.start_offset
        resolved = start < 0
        if resolved:
            start = self._reset_offset(gid, partition)
        sp = SharePartition(
            gid,
            topic_id,
            index,
            max_in_flight_records=self.setting(gid, "share.partition.max.record.locks"),
            delivery_count_limit=self.setting(gid, "share.delivery.count.limit"),
            lock_duration_ms=self.setting(gid, "share.record.lock.duration.ms"),
        )
        sp.archive_to = self._archive_to(gid)
        sp.clock = self.now
        self._queue_features(gid, sp)
        sp.initialize(
            result.state_epoch,
            start,
            list(result.batches),
            log_start_offset=partition.log_start_offset,
            high_watermark=partition.high_watermark,
        )
        if resolved:
            error = await sc.write(gid, topic_id, index, result.state_epoch, LEADER_EPOCH, sp.start_offset, [])
            if error:
                raise ErrorAnswer(error, "Writing the resolved start offset failed.")
        log.info(
            "share partition %s %s-%d loaded at start offset %d", gid, partition.topic.name, index, sp.start_offset
        )
        return sp

    def _archive_to(self, gid: str) -> int:
        """KIP-1191 (share.version 2, which Shoal always has): a group with a dead-letter topic
        archives through ARCHIVING, so that the copy is made before the record is done."""
        return ARCHIVING if self.setting(gid, "errors.deadletterqueue.topic.name") else ARCHIVED

    def _queue_features(self, gid: str, sp: SharePartition) -> None:
        """Shoal's own queue features (beyond Kafka): redelivery back-off and key-ordered delivery.
        Key ordering switched on orders what is acquired from then on, not what is in flight."""
        sp.backoff = BackoffPolicy(
            self.setting(gid, "shoal.share.redelivery.backoff.ms"),
            self.setting(gid, "shoal.share.redelivery.backoff.max.ms"),
            self.setting(gid, "shoal.share.redelivery.backoff.multiplier"),
        )
        if self.setting(gid, "shoal.share.key.ordering") != (sp.key_order is not None):
            sp.key_order = KeyOrder() if sp.key_order is None else None
        sp.features_changed()

    def _reset_offset(self, gid: str, partition: Any) -> int:
        store = self.broker.group_configs
        reset = store.auto_offset_reset(gid) if store is not None else None
        if reset is None or reset.strategy == "latest":
            return partition.high_watermark
        if reset.strategy == "earliest":
            return partition.log_start_offset
        since = self.broker.clock.now_ms() - int(reset.duration.total_seconds() * 1000)
        found = partition.offset_for_timestamp(since)
        return partition.high_watermark if found is None else found[0]

    def _drop(self, entry: Entry) -> None:
        if self.entries.get(entry.key) is entry:
            del self.entries[entry.key]
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None

    # -- fetch ---------------------------------------------------------------------
    def acquirable(self, entry: Entry) -> bool:
        return entry.sp is not None and entry.sp.acquirable(entry.partition.high_watermark)

    def acquire(
        self,
        entry: Entry,
        member_id: str,
        max_records: int,
        max_bytes: int,
        *,
        batch_optimized: bool,
        batch_size: int | None = None,
    ) -> Acquired | None:
        """Read from the next fetch offset and acquire up to `max_records`, reading at most
        `max_bytes` of log (at least one batch); None when nothing could be acquired."""
        sp, partition = entry.sp, entry.partition
        assert sp is not None
        if max_records <= 0 or not sp.acquirable(partition.high_watermark):
            return None
        committed = self.setting(entry.key[0], "share.isolation.level") == "read_committed"
        pieces: list[Any] = []
        ranges: list[Any] = []
        taken = read_bytes = 0
        while True:
            offset = sp.next_fetch_offset()
            if offset < partition.log_start_offset:
                sp.on_log_start_advanced(partition.log_start_offset)
                offset = sp.next_fetch_offset()
            cached = None
            if not batch_optimized and sp.key_order is None and not partition.offline:
                cached = _cached(entry, offset, partition.last_stable_offset if committed else None)
            if cached is not None:
                # A large batch sliced before holds the offset: its records are in the index kept
                # for it, so the log is not read again (1 MiB per fetch for 5 tiny records).
                headers, aborted, data = [cached[1]], None, None
                read_bytes += cached[1].size
            else:
                # Read about what MaxRecords can still use: parsing 50 MiB of batch headers to hand
                # out 500 records dominated the fetch path (librdkafka asks for MaxBytes = 50 MiB).
                size = READ_CHUNK
                if entry.bytes_per_record:
                    size = max(READ_MIN, int((max_records - taken) * entry.bytes_per_record * 1.1))
                size = min(size, max_bytes - read_bytes)
                try:
                    read = partition.read(offset, size, read_committed=committed, min_one=not read_bytes)
                except ErrorAnswer:
                    break
                data = read.records
                if not data:
                    break
                batches = iter_batches(data, allow_partial=True)
                headers = [h for h, _ in batches]
                if not headers:
                    break
                aborted = read.aborted
                read_bytes += batches.position
                entry.bytes_per_record = batches.position / (headers[-1].last_offset - headers[0].base_offset + 1)
            last = headers[-1].last_offset
            got = sp.acquire(
                member_id,
                headers,
                max_records - taken,
                batch_optimized=batch_optimized,
                now_ms=self.now(),
                aborted=aborted,
                fetch_offset=offset,
                batch_size=batch_size,
            )
            if got:
                if cached is not None:  # the acquired span of the kept batch, however wide
                    pieces.append(cached[0].slice(min(r.first_offset for r in got), max(r.last_offset for r in got)))
                elif batch_optimized:
                    pieces.append(_trim(data, headers, got))
                else:
                    pieces.append(self._slice(entry, headers, got))
                ranges += got
                taken += sum(r.last_offset - r.first_offset + 1 for r in got)
            # Read on only if this read was used up (nothing in it is still acquirable: the
            # records were taken, or are held by others) and there is room for more.
            if taken >= max_records or read_bytes >= max_bytes or not sp.acquirable(partition.high_watermark):
                break
            if sp.next_fetch_offset() <= last:
                break
        self._persist_start(entry)
        if not ranges:
            return None
        self.broker.stats.share_counts(entry.key[0], entry.topic.name).acquired += taken
        self._arm(entry)
        records = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        return Acquired(records, [(r.first_offset, r.last_offset, r.delivery_count) for r in ranges])

    def _slice(self, entry: Entry, headers: list, ranges: list) -> Any:
        """record_limit's answer: the batches holding acquired offsets, each large batch of which
        under half was acquired cut down to the acquired records' span (Kafka sends the whole
        batch: a 1 MiB batch for five records set the rate of a whole group)."""
        first = min(r.first_offset for r in ranges)
        last = max(r.last_offset for r in ranges)
        out: list[Any] = []
        for h in headers:
            if h.last_offset < first or h.base_offset > last:
                continue
            lo, hi = max(first, h.base_offset), min(last, h.last_offset)
            large = h.size >= SLICE_MIN_BYTES or h.records_count >= SLICE_MIN_RECORDS
            if not large or 2 * (hi - lo + 1) >= h.records_count or not RecordIndex.sliceable(h):
                out.append(h.data)
                continue
            kept = entry.slices.get(h.base_offset)
            if kept is None or not kept[0].matches(h):
                try:
                    kept = (RecordIndex(h), dataclasses.replace(h, data=memoryview(b"")))
                except (ProtocolError, ValueError):
                    out.append(h.data)  # not ours to judge here: the client gets the batch whole
                    continue
                while len(entry.slices) >= SLICE_CACHE:
                    del entry.slices[next(iter(entry.slices))]
                entry.slices[h.base_offset] = kept
            out.append(kept[0].slice(lo, hi))
        return out[0] if len(out) == 1 else b"".join(out)

    # -- acknowledge ---------------------------------------------------------------
    async def acknowledge(self, entry: Entry, member_id: str, batches: Sequence[tuple]) -> tuple[int, str | None]:
        """Apply one partition's acknowledgement batches; (error code, message) once durable."""
        begun = self.begin_acknowledge(entry, member_id, batches)
        return begun if isinstance(begun, tuple) else await begun.outcome()

    def begin_acknowledge(
        self, entry: Entry, member_id: str, batches: Sequence[tuple]
    ) -> tuple[int, str | None] | AckWrite:
        """Apply one partition's acknowledgement batches now: the outcome when no write is needed
        (or they were refused), else the write to wait for. A request acknowledging several
        partitions begins them all, then waits for each, with no task per partition."""
        sp = entry.sp
        assert sp is not None
        errors, change = sp.acknowledge(member_id, batches, self.now())
        bad = next((e for e in errors if e), 0)
        if bad:
            return int(bad), None
        if not change.needs_write:
            self._wake(entry)
            self.note_acknowledged(entry, batches, change)
            return 0, None
        rejected = rejected_ranges(batches) if sp.archive_to == ARCHIVING else []
        entry.rejects += rejected  # the dead-letter cause of these offsets (KIP-1191)
        future = PromptFuture()  # the handler (a Prompt) goes on inside _settle: see there
        self._enqueue(entry, change, future, undo=True)
        return AckWrite(self, entry, batches, change, rejected, future)

    def note_acknowledged(self, entry: Entry, batches: Sequence[tuple], change: Any) -> None:
        sp = entry.sp
        assert sp is not None
        count_acknowledged(
            self.broker.stats.share_counts(entry.key[0], entry.topic.name), batches, change, sp.delivery_count_limit
        )

    # -- the write pipeline -----------------------------------------------------------
    def _enqueue(self, entry: Entry, change: Any, future: asyncio.Future | None, *, undo: bool) -> None:
        """Queue a change's write (in creation order); sent at the end of this loop turn, so the
        changes of one turn share a write."""
        entry.pipe.add(change, future, undo=undo)
        if not entry.pump_soon:
            entry.pump_soon = True
            asyncio.get_running_loop().call_soon(self._pump, entry)

    def _submit(self, entry: Entry, change: Any) -> None:
        """A change nobody waits for (lock expiry, member release): written in the background."""
        if change.needs_write:
            self._enqueue(entry, change, None, undo=False)
        else:
            self._wake(entry)

    def _pump(self, entry: Entry) -> None:
        """Send what the pipeline allows now; when it is idle, catch the durable start up."""
        entry.pump_soon = False
        if self.closed:
            return
        while (group := entry.pipe.next_group()) is not None:
            self._send(entry, group)
        if entry.pipe.idle:
            self._persist_start(entry)

    def _send(self, entry: Entry, group: Group) -> None:
        """Append one write now (WriteShareGroupState, in process); settle it when it is durable.

        A callback rather than a task awaiting it, called in the turn the outcome is known:
        each future or task between the flusher and the member's answer is one more loop
        turn, and a loaded loop's turn costs milliseconds."""
        sc = self.broker.share_coordinator
        sp = entry.sp
        assert sp is not None
        if sc is None:
            self._settle(entry, entry.pipe.finished(group, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        gid, tid, index = entry.key
        try:
            sc.submit_write(
                gid,
                tid,
                index,
                sp.state_epoch,
                LEADER_EPOCH,
                group.start_offset,
                group.batches,
                group.delivery_complete_count,
                on_outcome=lambda outcome: self._written(entry, group, outcome),
            )
        except Exception as e:  # noqa: BLE001 - a write that raised failed
            log.error("share partition %s: write raised %r", entry.key, e)
            self._settle(entry, entry.pipe.finished(group, ErrorCode.UNKNOWN_SERVER_ERROR))

    def _written(self, entry: Entry, group: Group, outcome: tuple[int, str | None]) -> None:
        self._settle(entry, entry.pipe.finished(group, int(outcome[0])))

    def _settle(self, entry: Entry, settled: list[Group]) -> None:
        """Answer the waiters of writes that settled (oldest first) and send what may go next."""
        answers: list[tuple[Any, int | None]] = []
        for group in settled:
            if group.error:
                log.warning("share partition %s: state write failed: %s", entry.key, ErrorCode(group.error).name)
                if all(isinstance(p.change, _StartWrite) for p in group.items):
                    self._back_off_start(entry)
                # ARCHIVING kept by a failed expiry/release write would otherwise hold the start
                self._dead_letter(entry, [b for p in group.items if not p.undo for b in p.change.batches])
            else:
                if group.start_offset >= 0:
                    entry.persisted_start = max(entry.persisted_start, group.start_offset)
                self._dead_letter(entry, group.batches)
            # Every request waiting on these changes is answered, whatever happened.
            answers.extend((p.waiter, group.error) for p in group.items if p.waiter is not None)
        if not settled:
            return
        if entry.answering is not None:  # inside an outer _settle's answers: it answers these after its own
            entry.answering.extend(answers)
            self._pump(entry)
            self._wake(entry)
            return
        # The next write is sent first, then waiting fetches are woken and the waiters answered,
        # oldest first. Both run handlers: a waiter is a PromptFuture whose handler goes on inside
        # set_result (it acquires and answers), and so does a long poll woken in the purgatory; a
        # turn's worth of members' answers must not hold back the write behind theirs. A write
        # that fails at once settles inside _pump: its waiters join the end of this list.
        entry.answering = answers
        try:
            self._pump(entry)
            self._wake(entry)
            for waiter, error in answers:  # also those a nested _settle appends meanwhile
                if not waiter.done():
                    waiter.set_result(error)
        finally:
            entry.answering = None

    def _persist_start(self, entry: Entry) -> None:
        """Write the start offset if memory moved it past the durable one with no Change to carry it
        (records skipped while reading, a log start that moved, changes made while an earlier one
        was pending, which report "start unchanged", a follow-up write that failed)."""
        sp = entry.sp
        if (
            sp is not None
            and entry.pipe.idle
            and not entry.start_backoff
            and self.entries.get(entry.key) is entry
            and sp.start_offset > entry.persisted_start
        ):
            self._enqueue(entry, _StartWrite(sp.start_offset, [], sp.delivery_complete_count()), None, undo=False)

    def _back_off_start(self, entry: Entry) -> None:
        # The durable start must still reach the in-memory one (everything up to the high
        # watermark acknowledged, with only this write missing, showed lag 0 at a stale start).
        entry.start_backoff = True

        def retry() -> None:
            entry.start_backoff = False
            self._persist_start(entry)

        asyncio.get_running_loop().call_later(START_RETRY_S, retry)

    def _dead_letter(self, entry: Entry, batches: Iterable[tuple]) -> None:
        """KIP-1191: copy the ARCHIVING ranges of `batches` (durable now) to the group's dead-letter
        topic, then make them ARCHIVED (shoal/broker/share/dead_letter_writer.py)."""
        sp = entry.sp
        ranges = [(first, last, count) for first, last, state, count in batches if state == ARCHIVING]
        if sp is None or not ranges or self.entries.get(entry.key) is not entry:
            return
        if self.dead_letters.held():
            log.warning(
                "share partition %s: dead-letter copies held (faults): %d ranges ARCHIVING", entry.key, len(ranges)
            )
            return
        gid = entry.key[0]
        archived = classify(ranges, entry.rejects, sp.delivery_count_limit)
        entry.rejects = [(a, b) for a, b in entry.rejects if not any(f <= b and a <= z for f, z, _c in ranges)]
        try:
            self.dead_letters.archive(gid, entry.partition, archived, lambda n: self.setting(gid, n))
        except Exception:
            log.exception("share partition %s: dead-letter copy failed", entry.key)
        for first, last, _count in ranges:
            self._submit(entry, sp.finish_archiving(first, last))

    def _wake(self, entry: Entry) -> None:
        """Re-arm the lock timer and wake fetches waiting on this partition."""
        self._arm(entry)
        self.broker.fetch_purgatory.check_and_complete(fetch_key(entry.partition.topic.name, entry.partition.index))

    # -- members and sessions ------------------------------------------------------
    def release(self, gid: str, member_id: str, partitions: Iterable[tuple[uuid.UUID, int]] | None = None) -> None:
        """The member left, was fenced, or closed its session: its acquired records go back at once."""
        for key, entry in list(self.entries.items()):
            if key[0] != gid or entry.sp is None:
                continue
            if partitions is not None and (key[1], key[2]) not in partitions:
                continue
            self._submit(entry, entry.sp.release_member(member_id))

    def member_removed(self, gid: str, member_id: str) -> None:
        """The group coordinator removed the member (left, fenced, session timeout)."""
        self.sessions.remove_member(gid, member_id)
        self.release(gid, member_id)

    def connection_closed(self, conn: Any) -> None:
        for removed in self.sessions.connection_closed(conn):
            self.release(removed.key.group_id, removed.key.member_id, set(removed.partitions))

    # -- lock timers ---------------------------------------------------------------
    def _arm(self, entry: Entry) -> None:
        sp = entry.sp
        if sp is None:
            return
        # the earliest lock deadline, or the end of a redelivery back-off (fetches wake then)
        deadline = min((d for d in (sp.next_lock_deadline(), sp.next_backoff_end()) if d is not None), default=None)
        timer = entry.timer
        if timer is not None and not timer.cancelled and timer.pending:
            if deadline is not None and timer.deadline_ms <= deadline:
                return
            timer.cancel()
        entry.timer = None
        if deadline is None:
            return
        task = TimerTask(deadline, lambda: self._locks_expired(entry))
        entry.timer = task
        self.broker.timer.add(task)

    def _locks_expired(self, entry: Entry) -> None:
        entry.timer = None
        if entry.sp is None or self.entries.get(entry.key) is not entry:
            return
        change = entry.sp.expire_locks(self.now())
        count_expired(
            self.broker.stats.share_counts(entry.key[0], entry.topic.name), change, entry.sp.delivery_count_limit
        )
        self._submit(entry, change)

    def on_topic_deleted(self, topic_id: uuid.UUID) -> None:
        for entry in [e for k, e in self.entries.items() if k[1] == topic_id]:
            self._drop(entry)

    def forget(self, gid: str, topic_id: uuid.UUID | None = None, partitions: Iterable[int] | None = None) -> None:
        """The share coordinator's state of these share partitions was replaced or deleted by an admin
        (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups of an empty group): drop what is
        cached, so the next fetch reads the new state instead of handing out records from the old one."""
        wanted = None if partitions is None else set(partitions)
        for (g, tid, index), entry in list(self.entries.items()):
            if g == gid and (topic_id is None or tid == topic_id) and (wanted is None or index in wanted):
                self._drop(entry)

    def close(self) -> None:
        self.closed = True
        for entry in list(self.entries.values()):
            self._drop(entry)


def _trim(data: Any, headers: list, ranges: list) -> Any:
    """The whole batches of `data` that hold an acquired offset (a contiguous slice, no copy)."""
    first = min(r.first_offset for r in ranges)
    last = max(r.last_offset for r in ranges)
    view = memoryview(data)
    pos = start = end = 0
    for h in headers:
        size = h.size
        if h.last_offset < first:
            start = pos + size
        if h.base_offset <= last:
            end = pos + size
        pos += size
    return view[start:end]


@dataclass(slots=True)
class _StartWrite:
    """A write of the start offset alone (no Change carries it): nothing to commit or undo."""

    start_offset: int
    batches: list
    delivery_complete_count: int

    def commit(self) -> None:
        pass

    def undo(self) -> None:
        pass
