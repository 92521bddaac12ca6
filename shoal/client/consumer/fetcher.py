"""Fetching for AsyncConsumer: a background task keeps records ready before the application asks.

Why a background task: the application's ``getmany()`` should find records
already fetched. ``Fetcher`` runs one loop that, for every broker leading
assigned partitions, keeps one Fetch request in flight and queues each
partition's answer as a ``CompletedFetch`` chunk, in arrival order. The next
Fetch offset comes from the batch headers alone, so the next request is on
its way before a chunk's records are decoded — decoding happens when the
application drains the chunk, overlapping with the broker and the network. A
partition is fetched again while up to one chunk is still waiting to be
consumed (prefetching: the Fetch starts at the end of the buffered data, not
at the application's position); more than that is not fetched, which bounds
memory to about two ``max.partition.fetch.bytes`` per partition.

Positions come from the same loop: partitions without one get their committed
offset (a callable given by the group coordinator) or, failing that, an offset
reset by ListOffsets (``auto.offset.reset``; "none" raises
``NoOffsetForPartitionError`` from the next poll). A Fetch answered with
OFFSET_OUT_OF_RANGE resets the same way; NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION and their kin refresh the metadata and retry.
Every result is applied only if the partition's ``version`` (bumped by each
seek) is still the one the request was built for.

Fetch v13+ names topics by id; when a topic's id is not known the request is
capped at v12. Full fetches only (session id 0, epoch -1): no KIP-227
sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from shoal.client.consumer.subscription_state import SubscriptionState
from shoal.client.core.client_core import Backoff, ClientCore, metadata_stale
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import Config
from shoal.client.core.errors import (
    BrokerResponseError,
    KafkaClientError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RecordDeserializationError,
)
from shoal.client.core.records import ConsumerRecord, decode_record_set_for
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import IsolationLevel, ListOffsetsTimestamp
from shoal.protocol.errors import ErrorCode, error_for
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.messages import ZERO_UUID
from shoal.protocol.records import CURRENT_MAGIC, MAGIC_POS, iter_batches

__all__ = ["CompletedFetch", "Fetcher", "list_offsets", "next_fetch_offset"]

log = logging.getLogger("shoal.client.consumer.fetcher")

_RESET_TIMESTAMP = {"earliest": ListOffsetsTimestamp.EARLIEST, "latest": ListOffsetsTimestamp.LATEST}
_FETCH = api_by_name("Fetch")
_LIST_OFFSETS = api_by_name("ListOffsets")
_PREFETCH_CHUNKS = 2  # chunks a partition may have buffered and still be fetched

CommittedLookup = Callable[[list[TopicPartition]], Awaitable[Mapping[TopicPartition, tuple[int, int] | None]]]


@dataclass(slots=True)
class CompletedFetch:
    """One partition's data from one Fetch response, decoded when first drained.

    Decoding waits for the application so that the next Fetch (whose offset
    comes from the batch headers alone) is already on its way meanwhile.
    """

    tp: TopicPartition
    version: int
    start_offset: int
    next_offset: int
    data: Any = None
    aborted: list[tuple[int, int]] | None = None
    records: list[ConsumerRecord] | None = None
    index: int = 0
    error: BaseException | None = None

    def decode(self, config: Config) -> list[ConsumerRecord]:
        """The records; raises ProtocolError for corrupt data. A deserializer failing on
        one record keeps the records before it and leaves the failure in ``error``."""
        if self.records is None:
            kd, vd = config["key.deserializer"], config["value.deserializer"]
            decode = functools.partial(
                decode_record_set_for,
                self.tp.topic,
                self.tp.partition,
                self.data,
                start_offset=self.start_offset,
                check_crcs=config["check.crcs"],
                aborted_transactions=self.aborted,
            )
            try:
                self.records, _ = decode(key_deserializer=kd, value_deserializer=vd)
            except ProtocolError:
                raise
            except Exception:
                if kd is None and vd is None:
                    raise
                self.records = []
                for r in decode()[0]:
                    try:
                        if kd is not None:
                            r.key = kd(r.key)
                        if vd is not None:
                            r.value = vd(r.value)
                    except Exception as e:  # noqa: BLE001
                        self.error = RecordDeserializationError(self.tp, r.offset, e)
                        break
                    self.records.append(r)
            self.data = None
        return self.records


def next_fetch_offset(data: Any, start_offset: int) -> int:
    """The offset after the last whole batch in a fetched record set (headers only)."""
    if not data:
        return start_offset
    view = memoryview(data)
    if len(view) > MAGIC_POS and view[MAGIC_POS] != CURRENT_MAGIC:  # magic 0/1 message sets: decode to find out
        _, nxt = decode_record_set_for("", 0, view, start_offset=start_offset, check_crcs=False)
        return nxt
    nxt = start_offset
    for header, _ in iter_batches(view, allow_partial=True):
        last = header.last_offset + 1
        if last > nxt:
            nxt = last
    return nxt


class Fetcher:
    def __init__(
        self,
        core: ClientCore,
        config: Config,
        subscriptions: SubscriptionState,
        committed_lookup: CommittedLookup | None,
        data_ready: asyncio.Event | None = None,
    ) -> None:
        self._core = core
        self._cfg = config
        self._subs = subscriptions
        self._committed_lookup = committed_lookup
        self._completed: deque[CompletedFetch] = deque()
        self._in_flight: set[int] = set()
        self._rotation = 0
        self._node_retry_at: dict[int, tuple[float, Backoff]] = {}
        self._lookup: asyncio.Task | None = None
        self._lookup_retry_at = 0.0
        self._lookup_backoff = Backoff(config["retry.backoff.ms"], config["retry.backoff.max.ms"])
        self._tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self.data_ready = data_ready if data_ready is not None else asyncio.Event()  # set on new data or errors
        self.positions_changed = asyncio.Event()
        self._errors: list[BaseException] = []
        self._no_offset: set[TopicPartition] = set()
        self._loop_task: asyncio.Task | None = None
        self._closed = False
        self._isolation = IsolationLevel.of_setting(config["isolation.level"])
        self._metadata_task: asyncio.Task | None = None

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._run(), name="shoal-fetcher")

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in (self._loop_task, self._lookup, self._metadata_task, *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._completed.clear()

    def wakeup(self) -> None:
        """Something changed (assignment, seek, resume): look for work now."""
        self._wake.set()

    # -- the application side ------------------------------------------------------
    def raise_pending_error(self) -> None:
        if self._no_offset:
            missing = {
                tp for tp in self._no_offset if tp in self._subs.assignment and not self._subs.state(tp).has_position
            }
            self._no_offset = missing
            if missing:
                raise NoOffsetForPartitionError(
                    f"no committed offset for {sorted(map(str, missing))} and auto.offset.reset is none", missing
                )
        if self._errors:
            raise self._errors.pop(0)

    def drain(self, partitions: Collection[TopicPartition] | None, max_records: int) -> dict[TopicPartition, list[Any]]:
        """Up to ``max_records`` buffered records, advancing positions past what is returned."""
        out: dict[TopicPartition, list[Any]] = {}
        remaining = max_records
        kept: list[CompletedFetch] = []
        completed = self._completed
        assignment = self._subs.assignment
        freed = False
        while completed and remaining > 0:
            cf = completed.popleft()
            st = assignment.get(cf.tp)
            if st is None or st.version != cf.version or st.position is None:
                freed = True
                continue
            if st.paused or (partitions is not None and cf.tp not in partitions):
                kept.append(cf)
                continue
            records = cf.records
            if records is None:
                try:
                    records = cf.decode(self._cfg)
                except Exception as e:  # noqa: BLE001 - corrupt data (or a deserializer's error)
                    self._undecodable(cf, st, e)
                    break
            n = len(records)
            i = cf.index
            position = st.position
            while i < n and records[i].offset < position:
                i += 1
            j = min(n, i + remaining)
            if j > i:
                chunk = records[i:j]
                have = out.get(cf.tp)
                if have is None:
                    out[cf.tp] = chunk
                else:
                    have.extend(chunk)
                remaining -= j - i
                last = chunk[-1]
                st.position = last.offset + 1
                st.position_epoch = last.leader_epoch
            cf.index = j
            if j < n:
                kept.append(cf)
            elif cf.error is not None:
                self._undecodable(cf, st, cf.error)  # the position stays at the failing record
                break
            else:
                if cf.next_offset > st.position:
                    st.position = cf.next_offset
                freed = True
        if kept:
            completed.extendleft(reversed(kept))
        if freed:
            self._wake.set()
        if not out and self._errors:
            self.raise_pending_error()  # otherwise the error comes with the next poll
        return out

    def _undecodable(self, cf: CompletedFetch, st: Any, error: Exception) -> None:
        """As Kafka: the position stays at the bad data and every poll raises until the
        application seeks past it; what was buffered after it is dropped and fetched again."""
        others = [c for c in self._completed if c.tp != cf.tp]
        self._completed.clear()
        self._completed.extend(others)
        st.fetch_offset = st.position
        log.warning("cannot decode records of %s at offset %s: %s", cf.tp, st.position, error)
        self._errors.append(error)
        self._wake.set()

    def has_buffered(self) -> bool:
        return bool(self._completed)

    def clear_buffer(self) -> None:
        self._completed.clear()
        self._wake.set()

    # -- the loop --------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            try:
                self._start_position_lookups()
                wait = self._start_fetches()
            except Exception:  # a bug here must not silently stop all fetching
                log.exception("fetcher loop failed; retrying")
                wait = 1.0
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _refresh_metadata(self) -> None:
        if self._metadata_task is None or self._metadata_task.done():
            self._metadata_task = asyncio.get_running_loop().create_task(self._do_refresh())

    async def _do_refresh(self) -> None:
        try:
            await self._core.refresh_metadata()
        except KafkaClientError as e:
            log.debug("metadata refresh failed: %s", e)
        self._wake.set()

    def _start_fetches(self) -> float:
        """Send a Fetch to every idle leader with fetchable partitions; seconds until a retry is due."""
        now = self._core.now_ms()
        wait = 1.0
        buffered = Counter(cf.tp for cf in self._completed)
        by_node: dict[int, list[tuple[TopicPartition, int, int]]] = {}
        metadata = self._core.metadata
        missing_leader = False
        for tp, st in self._subs.assignment.items():
            if st.position is None or st.fetch_offset is None or st.paused:
                continue
            if buffered[tp] >= _PREFETCH_CHUNKS:
                continue
            node = metadata.leader(tp)
            if node is None:
                missing_leader = True
                continue
            if node in self._in_flight:
                continue
            retry = self._node_retry_at.get(node)
            if retry is not None and retry[0] > now:
                wait = min(wait, (retry[0] - now) / 1000)
                continue
            by_node.setdefault(node, []).append((tp, st.version, st.fetch_offset))
        if missing_leader:
            self._refresh_metadata()
            wait = min(wait, self._cfg["retry.backoff.ms"] / 1000)
        for node, parts in by_node.items():
            # Rotate where each request starts: a broker fills the response (fetch.max.bytes) in
            # request order, so a fixed order could starve the partitions at the end.
            k = self._rotation % len(parts)
            self._rotation += 1
            self._in_flight.add(node)
            self._spawn(self._fetch(node, parts[k:] + parts[:k]), f"shoal-fetch-{node}")
        return max(wait, 0.001)

    # -- Fetch -----------------------------------------------------------------------
    async def _fetch(self, node: int, parts: list[tuple[TopicPartition, int, int]]) -> None:
        try:
            conn = await self._core.connection(node)
            metadata = self._core.metadata
            ids = {tp.topic: metadata.topic_id(tp.topic) for tp, _, _ in parts}
            hi = None if all(i != ZERO_UUID for i in ids.values()) else 12
            version = conn.version("Fetch", hi=hi)
            body = self._fetch_request(version, parts, ids)
            timeout = self._cfg["request.timeout.ms"] + self._cfg["fetch.max.wait.ms"]
            resp = await conn.request("Fetch", body, version=version, timeout_ms=timeout)
            self._on_fetch_response(node, version, resp, parts, {v: k for k, v in ids.items()})
            self._node_retry_at.pop(node, None)
        except (KafkaClientError, ProtocolError) as e:
            log.debug("fetch from broker %s failed: %s", node, e)
            self._node_failed(node)
            self._refresh_metadata()
        finally:
            self._in_flight.discard(node)
            self._wake.set()

    def _node_failed(self, node: int) -> None:
        now = self._core.now_ms()
        _, backoff = self._node_retry_at.get(
            node, (0.0, Backoff(self._cfg["retry.backoff.ms"], self._cfg["retry.backoff.max.ms"]))
        )
        self._node_retry_at[node] = (now + backoff.next_ms(), backoff)

    def _fetch_request(
        self, version: int, parts: list[tuple[TopicPartition, int, int]], ids: Mapping[str, uuid.UUID]
    ) -> Any:
        cls = _FETCH.request_class()
        cfg = self._cfg
        topics: dict[str, Any] = {}
        metadata = self._core.metadata
        for tp, _, offset in parts:
            topic = topics.get(tp.topic)
            if topic is None:
                if version >= 13:
                    topic = cls.FetchTopic(topic_id=ids[tp.topic], partitions=[])
                else:
                    topic = cls.FetchTopic(topic=tp.topic, partitions=[])
                topics[tp.topic] = topic
            topic.partitions.append(
                cls.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=metadata.leader_epoch(tp) if version >= 9 else -1,
                    fetch_offset=offset,
                    partition_max_bytes=cfg["max.partition.fetch.bytes"],
                )
            )
        body = cls(
            max_wait_ms=cfg["fetch.max.wait.ms"],
            min_bytes=cfg["fetch.min.bytes"],
            max_bytes=cfg["fetch.max.bytes"],
            isolation_level=self._isolation,
            session_id=0,
            session_epoch=-1,
            topics=list(topics.values()),
            forgotten_topics_data=[],
        )
        if version >= 11:
            body.rack_id = cfg["client.rack"]
        return body

    def _on_fetch_response(
        self,
        node: int,
        version: int,
        resp: Any,
        parts: list[tuple[TopicPartition, int, int]],
        names: Mapping[uuid.UUID, str],
    ) -> None:
        if resp.error_code:
            raise BrokerResponseError(resp.error_code, "Fetch")
        sent = {tp: (v, off) for tp, v, off in parts}
        stale = False
        added = False
        for topic in resp.responses:
            name = names.get(topic.topic_id) if version >= 13 else topic.topic
            if name is None:
                stale = True
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                request = sent.get(tp)
                st = self._subs.assignment.get(tp)
                if request is None or st is None:
                    continue
                req_version, offset = request
                if st.version != req_version or st.fetch_offset != offset:
                    continue  # seeked (or refetched) meanwhile
                code = p.error_code
                if code == ErrorCode.NONE:
                    st.high_watermark = p.high_watermark
                    st.last_stable_offset = p.last_stable_offset
                    st.log_start_offset = p.log_start_offset
                    aborted = None
                    if self._isolation and p.aborted_transactions:
                        aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
                    next_offset = next_fetch_offset(p.records, offset)
                    if next_offset > offset:
                        self._completed.append(CompletedFetch(tp, req_version, offset, next_offset, p.records, aborted))
                        st.fetch_offset = next_offset
                        added = True
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(tp, offset)
                elif metadata_stale(code):
                    stale = True
                else:
                    log.warning("fetch of %s from broker %s failed: %s", tp, node, error_for(code).name)
                    self._errors.append(BrokerResponseError(code, f"Fetch {tp}"))
                    added = True
        if stale:
            self._refresh_metadata()
            self._node_failed(node)
        if added:
            self.data_ready.set()

    def _out_of_range(self, tp: TopicPartition, offset: int) -> None:
        strategy = self._subs.default_reset
        if strategy == "none":
            st = self._subs.state(tp)
            st.position = None
            st.fetch_offset = None
            st.initializing = True  # nothing to do until the application seeks
            st.version += 1
            self._errors.append(OffsetOutOfRangeError(f"fetch offset {offset} is out of range for {tp}", [tp]))
            self.data_ready.set()
            return
        log.info("fetch offset %d is out of range for %s; resetting to %s", offset, tp, strategy)
        self._subs.request_reset(tp, strategy)

    # -- positions -------------------------------------------------------------------
    def _start_position_lookups(self) -> None:
        if self._lookup is not None and not self._lookup.done():
            return
        if self._core.now_ms() < self._lookup_retry_at:
            return
        need = self._subs.needing_position()
        if not need:
            return
        versions = {}
        for tp in need:
            st = self._subs.assignment[tp]
            st.initializing = True
            versions[tp] = st.version
        self._lookup = asyncio.get_running_loop().create_task(self._init_positions(versions), name="shoal-positions")

    async def _init_positions(self, versions: dict[TopicPartition, int]) -> None:
        ok = False
        try:
            await self._resolve_positions(versions)
            ok = True
        except (KafkaClientError, ProtocolError) as e:
            log.debug("finding positions for %s failed: %s", sorted(map(str, versions)), e)
        finally:
            for tp, version in versions.items():
                st = self._subs.assignment.get(tp)
                if st is not None and st.version == version and st.position is None and tp not in self._no_offset:
                    st.initializing = False  # try again
            if ok:
                self._lookup_backoff.reset()
            else:
                self._lookup_retry_at = self._core.now_ms() + self._lookup_backoff.next_ms()
            self.positions_changed.set()
            self._wake.set()

    def _current(self, tp: TopicPartition, version: int) -> Any:
        st = self._subs.assignment.get(tp)
        return st if st is not None and st.version == version else None

    async def _resolve_positions(self, versions: dict[TopicPartition, int]) -> None:
        resets: dict[TopicPartition, str] = {}
        lookup: list[TopicPartition] = []
        for tp, version in versions.items():
            st = self._current(tp, version)
            if st is None:
                continue
            if st.reset_to is not None:
                resets[tp] = st.reset_to
            elif self._committed_lookup is not None:
                lookup.append(tp)
            else:
                resets[tp] = self._subs.default_reset
        if lookup:
            committed = await self._committed_lookup(lookup)  # type: ignore[misc]
            for tp in lookup:
                st = self._current(tp, versions[tp])
                if st is None:
                    continue
                found = committed.get(tp)
                if found is not None:
                    st.set_position(found[0], found[1])
                    log.debug("%s starts at its committed offset %d", tp, found[0])
                else:
                    resets[tp] = self._subs.default_reset
        none = [tp for tp, s in resets.items() if s == "none"]
        if none:
            self._no_offset.update(none)
            self.data_ready.set()
        wanted = {tp: _RESET_TIMESTAMP[s] for tp, s in resets.items() if s != "none"}
        if not wanted:
            return
        found_offsets = await list_offsets(self._core, wanted, self._isolation)
        for tp, (offset, epoch, _) in found_offsets.items():
            st = self._current(tp, versions[tp])
            if st is not None:
                st.set_position(offset, epoch)
                log.debug("%s reset to offset %d", tp, offset)
        if len(found_offsets) < len(wanted):
            raise KafkaClientError(f"no offset found yet for {sorted(map(str, set(wanted) - set(found_offsets)))}")

    async def wait_for_position(self, tp: TopicPartition, timeout_ms: float) -> int:
        """The position of ``tp``, resolving it (committed offset or reset) if needed."""
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                while True:
                    self.raise_pending_error()
                    st = self._subs.state(tp)
                    if st.position is not None:
                        return st.position
                    self.positions_changed.clear()
                    self._wake.set()
                    await self.positions_changed.wait()
        except TimeoutError:
            raise KafkaTimeoutError(f"no position for {tp} within {timeout_ms:.0f} ms") from None


async def list_offsets(
    core: ClientCore, timestamps: Mapping[TopicPartition, int], isolation_level: int = IsolationLevel.READ_UNCOMMITTED
) -> dict[TopicPartition, tuple[int, int, int]]:
    """(offset, leader epoch, timestamp) by ListOffsets for each partition (timestamp -2
    earliest, -1 latest, else the first offset at or after that time; offset -1 when there
    is none), asking each leader; partitions whose leader failed are left out (raises if
    none succeeded)."""
    by_node: dict[int, list[TopicPartition]] = {}
    for tp in timestamps:
        by_node.setdefault(await core.leader_for(tp), []).append(tp)
    cls = _LIST_OFFSETS.request_class()
    out: dict[TopicPartition, tuple[int, int]] = {}
    last_error: BaseException | None = None
    for node, tps in by_node.items():
        topics: dict[str, Any] = {}
        for tp in tps:
            t = topics.setdefault(tp.topic, cls.ListOffsetsTopic(name=tp.topic, partitions=[]))
            t.partitions.append(
                cls.ListOffsetsPartition(
                    partition_index=tp.partition,
                    current_leader_epoch=core.metadata.leader_epoch(tp),
                    timestamp=timestamps[tp],
                )
            )

        def build(version: int, topics: dict[str, Any] = topics) -> Any:
            body = cls(replica_id=-1, isolation_level=isolation_level, topics=list(topics.values()))
            if version < 4:
                for t in body.topics:
                    for p in t.partitions:
                        p.current_leader_epoch = -1
            return body

        try:
            resp = await core.send(node, "ListOffsets", build)
        except KafkaClientError as e:
            last_error = e
            continue
        stale = False
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code == ErrorCode.NONE:
                    out[tp] = (p.offset, p.leader_epoch, p.timestamp)
                elif metadata_stale(p.error_code) or p.error_code == ErrorCode.OFFSET_NOT_AVAILABLE:
                    stale = True
                    last_error = BrokerResponseError(p.error_code, f"ListOffsets {tp}")
                else:
                    last_error = BrokerResponseError(p.error_code, f"ListOffsets {tp}")
        if stale:
            with contextlib.suppress(KafkaClientError):
                await core.refresh_metadata()
    if len(out) < len(timestamps) and last_error is not None:
        if not out:
            raise last_error
        log.debug("ListOffsets partly failed: %s", last_error)
    return out
