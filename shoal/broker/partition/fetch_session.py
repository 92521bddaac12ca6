"""Incremental fetch sessions (KIP-227) for Fetch v7 and later.

Why this exists: a consumer or follower that reads hundreds of partitions
would otherwise name every partition in every Fetch request, and the broker
would describe every partition in every response, even when nothing changed.
With a session the broker remembers the partition list and what it last told
the fetcher. Requests then carry only partitions whose fetch position changed,
and responses only partitions with something new to say: records, a moved
high watermark or log start offset, an error, or a hint (preferred read
replica, diverging epoch).

Why it is shaped this way:

* Sans-IO. ``FetchSessionCache.new_context`` turns a request's session fields
  into a ``FetchContext``. The broker asks the context which partitions to
  read, reads them however it likes (including waiting for data), then hands
  the results back to ``FetchContext.response``, which picks the partitions to
  send and the session id to put in the response. Times are integer
  milliseconds passed in by the caller.
* The request's (session_id, epoch) pair selects the context, as in Kafka:
  ``(0, -1)`` sessionless full fetch; ``(0, 0)`` full fetch that creates a
  session; ``(id, 0)`` closes ``id`` and creates a new one; ``(id, -1)`` closes
  ``id`` and fetches sessionless; ``(id, epoch)`` is incremental and must
  carry the epoch the session expects (``INVALID_FETCH_SESSION_EPOCH``
  otherwise) for a live session (``FETCH_SESSION_ID_NOT_FOUND`` otherwise).
  Epochs run 1, 2, ... INT32_MAX and wrap back to 1; 0 and -1 are reserved.
* Partitions are keyed by ``(topic, partition)`` where the topic is its id
  (``uuid.UUID``, Fetch v13+) or its name (older versions). A session remembers
  which kind it uses, and an incremental request of the other kind gets
  ``FETCH_SESSION_TOPIC_ID_ERROR``.
* A session is created only when the full response is built, so the cached
  "last sent" values are exactly what the fetcher received. Partitions that
  return records move to the end of the session's order, so a response size
  limit cannot starve the partitions listed last.
* The cache has a fixed number of slots (max.incremental.fetch.session.cache.slots).
  When it is full a new session may take a slot from a stale session (unused
  for min.incremental.fetch.session.eviction.ms) or from a less valuable one:
  followers' sessions beat consumers' sessions, larger sessions beat smaller
  ones, and a session younger than the eviction time is only evictable by a
  follower's session replacing a consumer's. If nothing can go, the fetch is
  served without a session. Whether a session is young is judged at the
  moment of eviction (Kafka records it when the session is last touched).
"""

from __future__ import annotations

import enum
import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from shoal.protocol.errors import ErrorCode

__all__ = [
    "DEFAULT_EVICTION_MS",
    "DEFAULT_MAX_SLOTS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "TOPIC_ID_MIN_VERSION",
    "CachedPartition",
    "ContextKind",
    "FetchContext",
    "FetchResponsePlan",
    "FetchSession",
    "FetchSessionCache",
    "PartitionKey",
    "PartitionRequest",
    "PartitionResult",
    "next_epoch",
]

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
INT32_MAX: Final = 2**31 - 1
DEFAULT_MAX_SLOTS: Final = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS: Final = 120_000  # min.incremental.fetch.session.eviction.ms
TOPIC_ID_MIN_VERSION: Final = 13  # Fetch versions from here on name topics by id

TopicRef = str | uuid.UUID
PartitionKey = tuple[TopicRef, int]


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch``: 1 after the initial 0, wrapping from INT32_MAX to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == INT32_MAX:
        return 1
    return epoch + 1


@dataclass(slots=True)
class PartitionRequest:
    """One partition of a Fetch request (the fields a session remembers between requests)."""

    fetch_offset: int
    max_bytes: int
    log_start_offset: int = -1  # the follower's own log start offset; -1 from consumers
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class PartitionResult:
    """What the broker found for one partition, as far as session bookkeeping cares."""

    high_watermark: int
    log_start_offset: int
    last_stable_offset: int = -1
    error_code: int = 0
    records_size: int = 0
    preferred_read_replica: int = -1
    diverging_epoch: bool = False


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: the last request parameters and the last values sent back."""

    fetch_offset: int
    max_bytes: int
    log_start_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    sent_high_watermark: int = -1
    sent_log_start_offset: int = -1
    sent_last_stable_offset: int = -1

    @classmethod
    def from_request(cls, req: PartitionRequest) -> CachedPartition:
        return cls(
            req.fetch_offset,
            req.max_bytes,
            req.log_start_offset,
            req.current_leader_epoch,
            req.last_fetched_epoch,
        )

    def update_request(self, req: PartitionRequest) -> None:
        self.fetch_offset = req.fetch_offset
        self.max_bytes = req.max_bytes
        self.log_start_offset = req.log_start_offset
        self.current_leader_epoch = req.current_leader_epoch
        self.last_fetched_epoch = req.last_fetched_epoch

    def request(self) -> PartitionRequest:
        return PartitionRequest(
            self.fetch_offset,
            self.max_bytes,
            self.log_start_offset,
            self.current_leader_epoch,
            self.last_fetched_epoch,
        )

    def must_respond(self, result: PartitionResult) -> bool:
        """True if an incremental response has to include this partition."""
        return (
            result.records_size > 0
            or result.error_code != 0
            or result.high_watermark != self.sent_high_watermark
            or result.log_start_offset != self.sent_log_start_offset
            or result.last_stable_offset != self.sent_last_stable_offset
            or result.preferred_read_replica >= 0
            or result.diverging_epoch
        )

    def record_sent(self, result: PartitionResult) -> None:
        # After an error the cached high watermark is invalidated, so the
        # partition is sent again once the error clears.
        self.sent_high_watermark = -1 if result.error_code != 0 else result.high_watermark
        self.sent_log_start_offset = result.log_start_offset
        self.sent_last_stable_offset = result.last_stable_offset


@dataclass(slots=True)
class FetchSession:
    """A cached session. ``epoch`` is the epoch its next incremental request must carry."""

    id: int
    privileged: bool
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int
    partitions: dict[PartitionKey, CachedPartition]

    @property
    def size(self) -> int:
        return len(self.partitions)

    def update(
        self, requested: Mapping[PartitionKey, PartitionRequest], forgotten: Iterable[PartitionKey]
    ) -> tuple[list[PartitionKey], list[PartitionKey], list[PartitionKey]]:
        """Apply an incremental request: returns (added, updated, removed) keys."""
        added: list[PartitionKey] = []
        updated: list[PartitionKey] = []
        removed: list[PartitionKey] = []
        for key, req in requested.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition.from_request(req)
                added.append(key)
            else:
                cached.update_request(req)
                updated.append(key)
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                removed.append(key)
        return added, updated, removed


class ContextKind(enum.Enum):
    SESSION_ERROR = "session_error"  # the request's session fields were bad; answer with the error only
    SESSIONLESS = "sessionless"  # full fetch, no session kept
    FULL = "full"  # full fetch that tries to create a session
    INCREMENTAL = "incremental"  # fetch within an existing session


@dataclass(slots=True)
class FetchResponsePlan:
    """The session part of a Fetch response: top-level error, session id, partitions to include."""

    error_code: int
    session_id: int
    partitions: list[tuple[PartitionKey, PartitionResult]]


class FetchContext:
    """One Fetch request's view of its session; produced by ``FetchSessionCache.new_context``."""

    __slots__ = (
        "_cache",
        "_expected_epoch",
        "_now_ms",
        "_privileged",
        "_requested",
        "_session",
        "_uses_topic_ids",
        "error_code",
        "kind",
    )

    def __init__(
        self,
        kind: ContextKind,
        *,
        error_code: int = 0,
        cache: FetchSessionCache | None = None,
        requested: Mapping[PartitionKey, PartitionRequest] | None = None,
        session: FetchSession | None = None,
        uses_topic_ids: bool = False,
        privileged: bool = False,
        now_ms: int = 0,
    ) -> None:
        self.kind = kind
        self.error_code = error_code
        self._cache = cache
        self._requested: dict[PartitionKey, PartitionRequest] = dict(requested or {})
        self._session = session
        self._expected_epoch = session.epoch if session is not None else INVALID_SESSION_ID
        self._uses_topic_ids = uses_topic_ids
        self._privileged = privileged
        self._now_ms = now_ms

    @property
    def session(self) -> FetchSession | None:
        """The session of an incremental context."""
        return self._session

    def partitions(self) -> list[tuple[PartitionKey, PartitionRequest]]:
        """Partitions to read, in order: the request's, or all of the session's for incremental fetches."""
        if self.kind is ContextKind.INCREMENTAL:
            assert self._session is not None
            return [(key, cached.request()) for key, cached in self._session.partitions.items()]
        if self.kind is ContextKind.SESSION_ERROR:
            return []
        return list(self._requested.items())

    def fetch_offset(self, key: PartitionKey) -> int | None:
        if self.kind is ContextKind.INCREMENTAL:
            assert self._session is not None
            cached = self._session.partitions.get(key)
            return None if cached is None else cached.fetch_offset
        req = self._requested.get(key)
        return None if req is None else req.fetch_offset

    def select(self, results: Mapping[PartitionKey, PartitionResult]) -> list[PartitionKey]:
        """The keys ``response`` would include, changing nothing (e.g. to size a response for quotas)."""
        if self.kind is ContextKind.SESSION_ERROR or self._epoch_moved():
            return []
        if self.kind is not ContextKind.INCREMENTAL:
            return [key for key in self._requested if key in results]
        assert self._session is not None
        return [
            key
            for key, cached in self._session.partitions.items()
            if key in results and cached.must_respond(results[key])
        ]

    def response(self, results: Mapping[PartitionKey, PartitionResult], now_ms: int | None = None) -> FetchResponsePlan:
        """Decide what the response carries and update the session to match.

        ``results`` holds what was read for (some of) the ``partitions()``.
        A full context creates its session here, if the cache has room;
        ``now_ms`` defaults to the time the context was made.
        """
        now = self._now_ms if now_ms is None else now_ms
        if self.kind is ContextKind.SESSION_ERROR:
            return FetchResponsePlan(self.error_code, INVALID_SESSION_ID, [])
        if self.kind is ContextKind.SESSIONLESS:
            return FetchResponsePlan(0, INVALID_SESSION_ID, self._requested_results(results))
        if self.kind is ContextKind.FULL:
            return FetchResponsePlan(0, self._create_session(results, now), self._requested_results(results))
        session = self._session
        assert session is not None
        if self._epoch_moved():
            # Another request of this session got in between: most likely a duplicate.
            return FetchResponsePlan(ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, [])
        included: list[tuple[PartitionKey, PartitionResult]] = []
        for key, cached in list(session.partitions.items()):
            result = results.get(key)
            if result is None or not cached.must_respond(result):
                continue
            cached.record_sent(result)
            included.append((key, result))
            if result.records_size > 0:
                del session.partitions[key]  # rotate to the back of the read order
                session.partitions[key] = cached
        return FetchResponsePlan(0, session.id, included)

    def throttled_response(self) -> FetchResponsePlan:
        """An empty response for a request held back by a quota; the session is left as it is."""
        if self.kind is ContextKind.INCREMENTAL:
            assert self._session is not None
            error = ErrorCode.INVALID_FETCH_SESSION_EPOCH if self._epoch_moved() else 0
            return FetchResponsePlan(error, self._session.id, [])
        return FetchResponsePlan(0, INVALID_SESSION_ID, [])

    def _epoch_moved(self) -> bool:
        return self._session is not None and self._session.epoch != self._expected_epoch

    def _requested_results(
        self, results: Mapping[PartitionKey, PartitionResult]
    ) -> list[tuple[PartitionKey, PartitionResult]]:
        return [(key, results[key]) for key in self._requested if key in results]

    def _create_session(self, results: Mapping[PartitionKey, PartitionResult], now_ms: int) -> int:
        assert self._cache is not None
        partitions: dict[PartitionKey, CachedPartition] = {}
        for key, req in self._requested.items():
            cached = CachedPartition.from_request(req)
            result = results.get(key)
            if result is not None:
                cached.record_sent(result)
            partitions[key] = cached
        return self._cache.maybe_create_session(now_ms, self._privileged, self._uses_topic_ids, partitions)


class FetchSessionCache:
    """All fetch sessions of a broker, bounded by ``max_slots``."""

    __slots__ = ("_rng", "_sessions", "_total_partitions", "eviction_ms", "evictions", "max_slots")

    def __init__(
        self,
        max_slots: int = DEFAULT_MAX_SLOTS,
        eviction_ms: int = DEFAULT_EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng if rng is not None else random.SystemRandom()
        # Insertion order is last-use order: touching a session moves it to the end.
        self._sessions: dict[int, FetchSession] = {}
        self._total_partitions = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        """Partitions over all sessions (as of each session's last use)."""
        return self._total_partitions

    def new_context(
        self,
        session_id: int,
        session_epoch: int,
        partitions: Mapping[PartitionKey, PartitionRequest],
        forgotten: Iterable[PartitionKey] = (),
        *,
        uses_topic_ids: bool,
        privileged: bool = False,
        now_ms: int,
    ) -> FetchContext:
        """Interpret a Fetch request's session fields.

        ``uses_topic_ids`` is ``request_version >= 13``; ``privileged`` is true
        for follower (replica) fetches.
        """
        if session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full request closes the session it names
            kind = ContextKind.SESSIONLESS if session_epoch == FINAL_EPOCH else ContextKind.FULL
            return FetchContext(
                kind,
                cache=self,
                requested=partitions,
                uses_topic_ids=uses_topic_ids,
                privileged=privileged,
                now_ms=now_ms,
            )
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(ContextKind.SESSION_ERROR, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != session_epoch:
            return FetchContext(ContextKind.SESSION_ERROR, error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(ContextKind.SESSION_ERROR, error_code=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        before = session.size
        session.update(partitions, forgotten)
        self._total_partitions += session.size - before
        if not session.partitions:
            # Nothing left to fetch: the session ends and this request is answered without one.
            self.remove(session.id)
            return FetchContext(ContextKind.SESSIONLESS, requested=partitions, now_ms=now_ms)
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(ContextKind.INCREMENTAL, session=session, uses_topic_ids=uses_topic_ids, now_ms=now_ms)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._total_partitions -= session.size
        return session

    def maybe_create_session(
        self,
        now_ms: int,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[PartitionKey, CachedPartition],
    ) -> int:
        """Add a session if there is a free slot or one can be evicted; returns its id or 0."""
        if len(self._sessions) >= self.max_slots and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session_id = self._new_session_id()
        session = FetchSession(
            session_id,
            privileged,
            uses_topic_ids,
            now_ms,
            now_ms,
            next_epoch(INITIAL_EPOCH),
            partitions,
        )
        self._sessions[session_id] = session
        self._total_partitions += session.size
        return session_id

    def _new_session_id(self) -> int:
        while True:
            candidate = self._rng.randint(1, INT32_MAX)
            if candidate not in self._sessions:
                return candidate

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        del self._sessions[session.id]  # re-insert at the end: the most recently used
        session.last_used_ms = now_ms
        self._sessions[session.id] = session

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self.remove(oldest.id)
            self.evictions += 1
            return True
        best: FetchSession | None = None
        best_key: tuple[bool, int, int] | None = None
        for session in self._sessions.values():
            old_enough = now_ms - session.created_ms > self.eviction_ms
            if not (old_enough or (privileged and not session.privileged)):
                continue
            key = (session.privileged, session.size, session.id)
            if best_key is None or key < best_key:
                best, best_key = session, key
        # The newcomer must be worth more: a follower over a consumer, else more partitions.
        if best is None or best_key is None or (privileged, size, 0) < best_key:
            return False
        self.remove(best.id)
        self.evictions += 1
        return True
