"""Share sessions (KIP-932): the broker's memory of what each share consumer fetches.

Why this exists: a share consumer may read from many partitions led by one
broker. Without a session it would have to name every one of them in every
ShareFetch, and the broker would answer for every one of them, including the
many with nothing new. With a session the broker remembers, per member, the
partition list given when the session opened (epoch 0). Later requests carry
only changes: partitions to add in ``Topics`` and partitions to drop in
``ForgottenTopicsData``, plus partitions that only carry acknowledgements.
librdkafka sends no partitions at all once a session is open unless its
assignment changed, so without this cache the broker would not know what to
fetch. Responses to later requests leave out partitions with nothing to say.

Why it is shaped this way:

* Sans-IO. ``ShareSessionCache.open_or_update`` turns a ShareFetch request's
  session fields into a ``ShareFetchContext`` (or a ``SessionError``); the
  caller applies the piggy-backed acknowledgements, fetches
  ``context.fetch_partitions`` however it likes (including waiting), then
  asks ``context.response`` which fetched partitions go into the response.
  ``for_acknowledge`` does the same for ShareAcknowledge. Nothing here reads
  a clock: Kafka dropped time-based eviction of share sessions in 4.1
  (KAFKA-19159: a member holds record locks, so evicting its session would
  force redeliveries), and nothing else in a share session depends on time.
* Sessions are keyed by (group id, member id): ``ShareSessionKey``. There is
  no session id on the wire.
* Epochs, as Kafka's ``ShareSessionCache``/``SharePartitionManager.newContext``
  treat them:

  - ShareFetch epoch 0 opens a session with the request's partitions (the
    same topic id may appear twice in one request, as librdkafka sends it:
    the lists are merged). An existing session of that key is replaced; the
    member keeps its acquired records (the client reopens with epoch 0 after
    SHARE_SESSION_NOT_FOUND and still acknowledges them later).
    Acknowledgements at epoch 0 are INVALID_REQUEST and leave any existing
    session alone. With ``max_sessions`` sessions cached (and the key not
    among them) the answer is SHARE_SESSION_LIMIT_REACHED: nothing is evicted
    to make room. (Kafka holds that error response back for MaxWaitMs; that
    is the caller's business.) ForgottenTopicsData is ignored at epoch 0.
  - Any other epoch but -1 needs a session (SHARE_SESSION_NOT_FOUND) whose
    expected epoch it carries (INVALID_SHARE_SESSION_EPOCH otherwise, and the
    session is left unchanged). Added partitions join the session, then
    forgotten ones leave it (so a partition named in both is dropped). A
    session may become empty and stays open. The expected epoch then moves
    on: 1, 2, ... INT32_MAX, then 1 again (``next_epoch``).
  - ShareFetch epoch -1 (FINAL) needs a session but does not check its epoch.
    Nothing is fetched: partitions it names are there only to carry
    acknowledgements. (Early KIP-932 code answered INVALID_REQUEST when a
    final request asked for data; since KAFKA-18932 it just fetches
    nothing.) The session is closed.
  - ShareAcknowledge uses the same session and epochs: epoch 0 is
    INVALID_SHARE_SESSION_EPOCH (a session is opened only by ShareFetch),
    other epochs are checked and advanced as above, and -1 closes the
    session without an epoch check.
  - A closing request removes its session when its context is made, and the
    context carries a ``RemovedSession``. The caller applies the request's
    acknowledgements first, then releases the records the member still has
    acquired on ``removed.partitions`` (Kafka's ``releaseSession``).
* Sessions belong to the connection that opened them (Kafka 4.1+): when that
  connection closes, ``connection_closed`` removes them and returns them, and
  the caller releases the members' acquired records as above. A session
  opened again (epoch 0) on another connection belongs to the new one, so the
  old connection's close leaves it alone (Kafka marks the old mapping
  stale for this). Later requests of a session may come over any connection.
  Kafka maps each connection to the last session it opened; this cache
  removes every session the connection opened, which matters only when one
  connection opens sessions for several members.
* ``remove_member`` drops a session when the group coordinator removes the
  member (a Shoal addition: in Kafka 4.2's sources a partition leader drops
  a session only on a final request, a reopen or the connection's close). ``group_session_count``
  tells the caller when a group has no sessions left on this broker, which
  is when Kafka drops the group's cached share partitions.
* Incremental responses: a partition of the session goes into the response
  if it has records or an error, or if the member has not yet heard of it
  since it was added by a later request or since its last error. Partitions
  that returned records move to the back of the session's order, so a size
  limit cannot starve the partitions listed last. (Kafka also rotates the
  fetch order by the request epoch before reading, round robin; that is up to
  the caller, as is the order of ``outcomes``.) A full response (epoch 0)
  and a final one carry whatever the caller fetched or acknowledged. If
  another request of the session was served in between (a duplicate), the
  response is INVALID_SHARE_SESSION_EPOCH with no partitions.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from shoal.protocol.errors import ErrorCode

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INT32_MAX",
    "AcknowledgeContext",
    "ConnectionId",
    "ContextKind",
    "PartitionKey",
    "PartitionOutcome",
    "RemovedSession",
    "ResponsePlan",
    "SessionError",
    "ShareFetchContext",
    "ShareSession",
    "ShareSessionCache",
    "ShareSessionKey",
    "next_epoch",
]

INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
INT32_MAX: Final = 2**31 - 1
DEFAULT_MAX_SESSIONS: Final = 2000  # group.share.max.share.sessions

PartitionKey = tuple[uuid.UUID, int]  # (topic id, partition index)
ConnectionId = Hashable  # whatever identifies a client connection to the caller


def next_epoch(epoch: int) -> int:
    """The share session epoch after ``epoch``: 1 after 0, wrapping from INT32_MAX to 1; -1 stays -1."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == INT32_MAX:
        return 1
    return epoch + 1


@dataclass(frozen=True, slots=True)
class ShareSessionKey:
    group_id: str
    member_id: str


class ContextKind(enum.Enum):
    FULL = "full"  # epoch 0: a new session; the response carries every fetched partition
    INCREMENTAL = "incremental"  # a later epoch: the response leaves out partitions with nothing new
    FINAL = "final"  # epoch -1: acknowledge, fetch nothing, and the session is gone


@dataclass(frozen=True, slots=True)
class SessionError:
    """The request's session fields were refused: answer with this top-level error and nothing else."""

    error_code: int
    message: str


@dataclass(frozen=True, slots=True)
class RemovedSession:
    """A session that left the cache; release the member's acquired records on ``partitions``."""

    key: ShareSessionKey
    partitions: tuple[PartitionKey, ...]
    connection_id: ConnectionId


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What fetching one partition produced, as far as the session cares."""

    has_records: bool = False
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class ResponsePlan:
    """The top-level error of a ShareFetch response and the fetched partitions it includes, in order."""

    error_code: int
    partitions: list[PartitionKey]


@dataclass(slots=True, eq=False)
class ShareSession:
    """A cached session. ``epoch`` is the epoch its next request must carry.

    ``partitions`` keeps the session's order; the value is True while the
    member has not heard of the partition (added by a later request, or had
    an error), so the next incremental response must include it.
    """

    key: ShareSessionKey
    connection_id: ConnectionId
    epoch: int
    partitions: dict[PartitionKey, bool]

    def partition_list(self) -> list[PartitionKey]:
        return list(self.partitions)


@dataclass(slots=True, eq=False)
class ShareFetchContext:
    """One ShareFetch request's view of its session, from ``ShareSessionCache.open_or_update``.

    ``fetch_partitions``: what to fetch, in the session's order (all of the
    session's partitions for FULL and INCREMENTAL, none for FINAL).
    ``next_epoch``: the epoch the member's next request must carry (-1 for
    FINAL). ``added``/``removed``: partitions that joined or left the session
    with this request. ``replaced``: epoch 0 replaced an open session.
    ``removed_session``: for FINAL, the session that was closed.
    """

    kind: ContextKind
    key: ShareSessionKey
    fetch_partitions: list[PartitionKey]
    next_epoch: int
    added: list[PartitionKey] = field(default_factory=list)
    removed: list[PartitionKey] = field(default_factory=list)
    replaced: bool = False
    removed_session: RemovedSession | None = None
    _session: ShareSession | None = field(default=None, repr=False)

    def response(self, outcomes: Mapping[PartitionKey, PartitionOutcome]) -> ResponsePlan:
        """Pick the fetched partitions the response includes and update the session to match.

        ``outcomes`` holds what fetching found, in the order the caller
        wants them answered. Acknowledgement results are not the session's
        business: the caller adds them to the response as they are.
        """
        if self.kind is not ContextKind.INCREMENTAL:
            return ResponsePlan(0, list(outcomes))
        session = self._session
        assert session is not None
        if session.epoch != self.next_epoch:
            # Another request of this session was served since this one: most likely a duplicate.
            return ResponsePlan(ErrorCode.INVALID_SHARE_SESSION_EPOCH, [])
        included: list[PartitionKey] = []
        rotate: list[PartitionKey] = []
        for key, outcome in outcomes.items():
            unheard = session.partitions.get(key)
            if unheard is None:
                continue  # not (or no longer) part of the session
            failed = outcome.error_code != 0
            if not (outcome.has_records or unheard or failed):
                continue
            # After an error the member must hear about the partition again once it is fine.
            session.partitions[key] = failed
            included.append(key)
            if outcome.has_records:
                rotate.append(key)
        for key in rotate:
            session.partitions[key] = session.partitions.pop(key)
        return ResponsePlan(0, included)


@dataclass(frozen=True, slots=True)
class AcknowledgeContext:
    """One ShareAcknowledge request's view of its session, from ``ShareSessionCache.for_acknowledge``.

    ``kind`` is INCREMENTAL or FINAL; for FINAL, ``removed_session`` is the
    session that was closed and ``next_epoch`` is -1.
    """

    kind: ContextKind
    key: ShareSessionKey
    next_epoch: int
    removed_session: RemovedSession | None = None


class ShareSessionCache:
    """All share sessions of a broker, at most ``max_sessions`` of them."""

    __slots__ = ("_by_connection", "_group_sizes", "_sessions", "_total_partitions", "max_sessions")

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        if max_sessions < 0:
            raise ValueError(f"max_sessions must not be negative: {max_sessions}")
        self.max_sessions = max_sessions
        self._sessions: dict[ShareSessionKey, ShareSession] = {}
        self._by_connection: dict[ConnectionId, set[ShareSessionKey]] = {}
        self._group_sizes: dict[str, int] = {}
        self._total_partitions = 0

    # ------------------------------------------------------------------ queries

    @property
    def size(self) -> int:
        """Number of open sessions."""
        return len(self._sessions)

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    @property
    def total_partitions(self) -> int:
        """Partitions over all sessions."""
        return self._total_partitions

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get(ShareSessionKey(group_id, member_id))

    def partitions(self, group_id: str, member_id: str) -> list[PartitionKey] | None:
        """The session's partitions in order, or None if the member has no session."""
        session = self.get(group_id, member_id)
        return None if session is None else session.partition_list()

    def group_session_count(self, group_id: str) -> int:
        """Sessions of ``group_id`` on this broker (0: the group's share partitions may be dropped)."""
        return self._group_sizes.get(group_id, 0)

    # ------------------------------------------------------------------ requests

    def open_or_update(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: Iterable[PartitionKey] = (),
        forgotten: Iterable[PartitionKey] = (),
        *,
        connection_id: ConnectionId,
        acknowledgements: bool = False,
    ) -> ShareFetchContext | SessionError:
        """Interpret a ShareFetch request's session fields.

        ``added`` is every (topic id, partition) in the request's Topics,
        duplicates allowed; ``forgotten`` the ForgottenTopicsData;
        ``acknowledgements`` whether any partition carries acknowledgement
        batches; ``connection_id`` the connection the request came over
        (it owns a session opened now).
        """
        key = ShareSessionKey(group_id, member_id)
        if epoch == INITIAL_EPOCH:
            return self._open(key, added, connection_id, acknowledgements)
        if epoch == FINAL_EPOCH:
            removed = self._remove(key)
            if removed is None:
                return _not_found(key)
            return ShareFetchContext(ContextKind.FINAL, key, [], FINAL_EPOCH, removed_session=removed)
        session = self._sessions.get(key)
        if session is None:
            return _not_found(key)
        if session.epoch != epoch:
            return _wrong_epoch(session, epoch)
        new_keys: list[PartitionKey] = []
        for p in dict.fromkeys(added):
            if p not in session.partitions:
                session.partitions[p] = True  # the member has not heard of it yet
                new_keys.append(p)
        gone: list[PartitionKey] = []
        for p in dict.fromkeys(forgotten):
            if session.partitions.pop(p, None) is not None:
                gone.append(p)
        # A partition added and forgotten in one request is gone; report only what changed.
        gone_set, new_set = set(gone), set(new_keys)
        added_now = [p for p in new_keys if p not in gone_set]
        removed_now = [p for p in gone if p not in new_set]
        self._total_partitions += len(added_now) - len(removed_now)
        session.epoch = next_epoch(session.epoch)
        return ShareFetchContext(
            ContextKind.INCREMENTAL,
            key,
            session.partition_list(),
            session.epoch,
            added=added_now,
            removed=removed_now,
            _session=session,
        )

    def for_acknowledge(self, group_id: str, member_id: str, epoch: int) -> AcknowledgeContext | SessionError:
        """Interpret a ShareAcknowledge request's session fields."""
        key = ShareSessionKey(group_id, member_id)
        if epoch == INITIAL_EPOCH:
            return SessionError(
                ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                f"ShareAcknowledge cannot open a share session ({key.group_id}, {key.member_id})",
            )
        if epoch == FINAL_EPOCH:
            removed = self._remove(key)
            if removed is None:
                return _not_found(key)
            return AcknowledgeContext(ContextKind.FINAL, key, FINAL_EPOCH, removed)
        session = self._sessions.get(key)
        if session is None:
            return _not_found(key)
        if session.epoch != epoch:
            return _wrong_epoch(session, epoch)
        session.epoch = next_epoch(session.epoch)
        return AcknowledgeContext(ContextKind.INCREMENTAL, key, session.epoch)

    # ------------------------------------------------------------------ removal

    def close(self, group_id: str, member_id: str) -> RemovedSession | None:
        """Remove the member's session, if any."""
        return self._remove(ShareSessionKey(group_id, member_id))

    def remove_member(self, group_id: str, member_id: str) -> RemovedSession | None:
        """The group coordinator removed the member: its session goes too."""
        return self.close(group_id, member_id)

    def connection_closed(self, connection_id: ConnectionId) -> list[RemovedSession]:
        """Remove the sessions the closed connection opened (and still owns)."""
        keys = self._by_connection.pop(connection_id, None)
        if not keys:
            return []
        removed: list[RemovedSession] = []
        for key in sorted(keys, key=lambda k: (k.group_id, k.member_id)):
            gone = self._remove(key)
            if gone is not None:
                removed.append(gone)
        return removed

    # ------------------------------------------------------------------ internals

    def _open(
        self,
        key: ShareSessionKey,
        added: Iterable[PartitionKey],
        connection_id: ConnectionId,
        acknowledgements: bool,
    ) -> ShareFetchContext | SessionError:
        if acknowledgements:
            return SessionError(
                ErrorCode.INVALID_REQUEST,
                f"acknowledgements in the request that opens share session ({key.group_id}, {key.member_id})",
            )
        replaced = self._remove(key) is not None
        if len(self._sessions) >= self.max_sessions:
            return SessionError(
                ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                f"the broker already holds {len(self._sessions)} share sessions",
            )
        partitions = dict.fromkeys(added, False)
        session = ShareSession(key, connection_id, next_epoch(INITIAL_EPOCH), partitions)
        self._sessions[key] = session
        self._by_connection.setdefault(connection_id, set()).add(key)
        self._group_sizes[key.group_id] = self._group_sizes.get(key.group_id, 0) + 1
        self._total_partitions += len(partitions)
        listed = session.partition_list()
        return ShareFetchContext(
            ContextKind.FULL,
            key,
            listed,
            session.epoch,
            added=list(listed),
            replaced=replaced,
        )

    def _remove(self, key: ShareSessionKey) -> RemovedSession | None:
        session = self._sessions.pop(key, None)
        if session is None:
            return None
        self._total_partitions -= len(session.partitions)
        owned = self._by_connection.get(session.connection_id)
        if owned is not None:
            owned.discard(key)
            if not owned:
                del self._by_connection[session.connection_id]
        left = self._group_sizes[key.group_id] - 1
        if left:
            self._group_sizes[key.group_id] = left
        else:
            del self._group_sizes[key.group_id]
        return RemovedSession(key, tuple(session.partitions), session.connection_id)


def _not_found(key: ShareSessionKey) -> SessionError:
    return SessionError(
        ErrorCode.SHARE_SESSION_NOT_FOUND,
        f"no share session for group {key.group_id!r} member {key.member_id!r}",
    )


def _wrong_epoch(session: ShareSession, epoch: int) -> SessionError:
    return SessionError(
        ErrorCode.INVALID_SHARE_SESSION_EPOCH,
        f"share session ({session.key.group_id}, {session.key.member_id}) expects epoch {session.epoch}, got {epoch}",
    )
