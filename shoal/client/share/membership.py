"""A share-group member's side of ShareGroupHeartbeat (KIP-932), sans-IO.

Share groups have no JoinGroup/SyncGroup: a member heartbeats, the
coordinator answers with its epoch, the interval to heartbeat at, and its
assignment (topic id -> partitions) whenever that changed. Share members
hold nothing exclusive, so there is nothing to revoke-and-commit before
moving: a new assignment is taken at once.

``ShareMembership`` decides *what* to send and *when*; the asyncio shell
sends it and reports the answer. Time comes in as ``now`` (ms) on every
call. The rules, following Kafka 4.2's consumer:

* The member id is chosen by the client (a random UUID, Kafka's 22-character
  URL-safe base64 form) and kept for the consumer's life; epoch 0 joins,
  -1 leaves, anything else is the epoch the coordinator last gave.
* SubscribedTopicNames goes on the join, when the subscription changed, and
  after a heartbeat went unanswered (the coordinator may have missed it);
  otherwise it is null ("unchanged").
* The next heartbeat is due ``HeartbeatIntervalMs`` (server-controlled) after
  the last answer; a joining or leaving member, or a changed subscription,
  sends at once. One heartbeat is in flight at a time; answers to a request
  sent before the member's state changed are ignored (``token``).
* FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the coordinator no longer knows
  this member as it was. The assignment is dropped and the member rejoins
  with epoch 0 at once.
* Coordinator moves, loading, and network failures are retried with
  exponential backoff (``retry.backoff.ms`` .. ``retry.backoff.max.ms``).
  Errors a retry cannot fix (group full, authorization, a group id used by
  another group type, a request the broker refuses) are fatal: ``fatal``
  holds the error code for the application to see.
* ``max.poll.interval.ms``: a member whose application has not polled for
  that long leaves the group (epoch -1) and becomes *stale*; its next poll
  rejoins with epoch 0.
* Leaving is best effort: the member is out of the group once the leave
  heartbeat is answered or has failed.

``assignment`` is the current assignment by topic id; ``assignment_version``
grows whenever it changes, so the shell knows when to reconcile.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from shoal.protocol.errors import ErrorCode

__all__ = ["HeartbeatRequest", "MemberState", "ShareMembership", "new_member_id"]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1

_REJOIN = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
_RETRY = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)


def new_member_id(rand: Callable[[int], bytes] | None = None) -> str:
    """A random UUID as Kafka prints one: URL-safe base64, no padding, not starting with '-'."""
    while True:
        raw = rand(16) if rand is not None else uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class MemberState(Enum):
    UNSUBSCRIBED = "unsubscribed"  # no subscription: not in the group
    JOINING = "joining"  # the next heartbeat joins (epoch 0)
    STABLE = "stable"  # in the group
    LEAVING = "leaving"  # the next heartbeat leaves (epoch -1)
    STALE = "stale"  # left because the application stopped polling; the next poll rejoins
    FATAL = "fatal"  # an error no retry can fix


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    token: int
    member_epoch: int
    subscribed_topic_names: list[str] | None
    rack_id: str | None


class ShareMembership:
    """The member state machine (see module doc)."""

    def __init__(
        self,
        group_id: str,
        member_id: str,
        *,
        max_poll_interval_ms: int,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        rack_id: str | None = None,
        jitter: Callable[[], float] | None = None,
    ) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.rack_id = rack_id
        self.max_poll_interval_ms = max_poll_interval_ms
        self._backoff_base = max(retry_backoff_ms, 1)
        self._backoff_max = max(retry_backoff_max_ms, self._backoff_base)
        self._jitter = jitter if jitter is not None else (lambda: random.uniform(0.8, 1.2))
        self.state = MemberState.UNSUBSCRIBED
        self.member_epoch = JOIN_EPOCH
        self.interval_ms: int | None = None
        self.subscription: frozenset[str] = frozenset()
        self.assignment: dict[uuid.UUID, frozenset[int]] = {}
        self.assignment_version = 0
        self.fatal: int | None = None
        self.fatal_message: str | None = None
        self._send_subscription = False
        self._next_at: float | None = None
        self._in_flight: int | None = None
        self._in_flight_topics: frozenset[str] | None = None  # the subscription the request in flight carries
        self._tokens = 0
        self._failures = 0
        self._last_poll: float | None = None
        self._stale_after_leave = False

    # -- application events --------------------------------------------------------
    @property
    def in_group(self) -> bool:
        return self.state in (MemberState.JOINING, MemberState.STABLE)

    def subscribe(self, topics: Iterable[str], now: float) -> None:
        new = frozenset(topics)
        if not new:
            self.unsubscribe(now)
            return
        changed = new != self.subscription
        self.subscription = new
        if self._last_poll is None:
            self._last_poll = now
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.LEAVING):
            self._join(now)
        elif changed and self.state in (MemberState.STABLE, MemberState.JOINING):
            self._send_subscription = True
            if self.state == MemberState.STABLE:
                self._next_at = now

    def unsubscribe(self, now: float) -> None:
        self.subscription = frozenset()
        self._stale_after_leave = False
        if self.state == MemberState.FATAL:
            return
        if self.member_epoch > 0 or self._in_flight is not None or self.state == MemberState.STABLE:
            self._leave(now)
        else:
            self.state = MemberState.UNSUBSCRIBED
            self._drop_assignment()

    def on_poll(self, now: float) -> None:
        """The application polled: restart the poll timer; a stale member rejoins."""
        self._last_poll = now
        if self.state == MemberState.STALE and self.subscription:
            self._join(now)

    def poll_deadline(self) -> float | None:
        """When the poll timer runs out (None when not in the group)."""
        if not self.in_group or self._last_poll is None:
            return None
        return self._last_poll + self.max_poll_interval_ms

    def close(self, now: float) -> None:
        """Leave for good (the consumer is closing)."""
        self.subscription = frozenset()
        self._stale_after_leave = False
        if self.state == MemberState.FATAL:
            return
        if self.member_epoch > 0 or self._in_flight is not None:
            self._leave(now)
        else:
            self.state = MemberState.UNSUBSCRIBED
            self._drop_assignment()

    # -- heartbeats ----------------------------------------------------------------------
    def next_request(self, now: float) -> HeartbeatRequest | None:
        """The heartbeat to send now, or None (see ``wake_at``)."""
        self._check_poll_timer(now)
        if self._in_flight is not None or self.state in (MemberState.UNSUBSCRIBED, MemberState.STALE):
            return None
        if self.state == MemberState.FATAL:
            return None
        if self._next_at is not None and now < self._next_at:
            return None
        self._tokens += 1
        self._in_flight = self._tokens
        self._in_flight_topics = None
        if self.state == MemberState.LEAVING:
            return HeartbeatRequest(self._tokens, LEAVE_EPOCH, None, None)
        if self.state == MemberState.JOINING or self._send_subscription:
            self._in_flight_topics = self.subscription
        topics = sorted(self._in_flight_topics) if self._in_flight_topics is not None else None
        if self.state == MemberState.JOINING:
            return HeartbeatRequest(self._tokens, JOIN_EPOCH, topics, self.rack_id)
        return HeartbeatRequest(self._tokens, self.member_epoch, topics, self.rack_id if topics else None)

    def wake_at(self, now: float) -> float | None:
        """When ``next_request`` may next have something to send (None: only after an event)."""
        if self._in_flight is not None or self.state in (MemberState.UNSUBSCRIBED, MemberState.STALE):
            return None
        if self.state == MemberState.FATAL:
            return None
        due = self._next_at if self._next_at is not None else now
        deadline = self.poll_deadline()
        return due if deadline is None else min(due, deadline)

    def on_response(
        self,
        token: int,
        error_code: int,
        member_epoch: int,
        interval_ms: int,
        assignment: Mapping[uuid.UUID, Iterable[int]] | None,
        now: float,
        error_message: str | None = None,
    ) -> bool:
        """Apply a heartbeat answer; True when the assignment changed."""
        if token != self._in_flight:
            return False
        self._in_flight = None
        if self.state == MemberState.LEAVING:
            return self._left()
        if error_code:
            return self._on_error(error_code, error_message, now)
        self._failures = 0
        self.member_epoch = member_epoch
        if interval_ms > 0:
            self.interval_ms = interval_ms
        self._next_at = now + (self.interval_ms or 5000)
        if self._in_flight_topics is not None and self._in_flight_topics == self.subscription:
            self._send_subscription = False  # the coordinator has the current subscription
        elif self._send_subscription:
            self._next_at = now  # the subscription changed while the request was out
        self.state = MemberState.STABLE
        if assignment is None:
            return False
        new = {t: frozenset(ps) for t, ps in assignment.items() if ps}
        if new == self.assignment:
            return False
        self.assignment = new
        self.assignment_version += 1
        return True

    def on_failure(self, token: int, now: float, error_code: int | None = None) -> bool:
        """The heartbeat got no usable answer (network, timeout, coordinator moved); True when
        the assignment changed."""
        if token != self._in_flight:
            return False
        self._in_flight = None
        if self.state == MemberState.LEAVING:
            return self._left()
        if error_code is not None and error_code not in _RETRY:
            return self._on_error(error_code, None, now)
        self._retry_later(now)
        return False

    # -- internals -------------------------------------------------------------------------
    def _on_error(self, code: int, message: str | None, now: float) -> bool:
        if code in _REJOIN:
            self._join(now)
            return self._drop_assignment()
        if code in _RETRY:
            self._retry_later(now)
            return False
        self.state = MemberState.FATAL
        self.fatal, self.fatal_message = code, message
        return self._drop_assignment()

    def _retry_later(self, now: float) -> None:
        delay = min(self._backoff_base * 2 ** min(self._failures, 30), self._backoff_max) * self._jitter()
        self._failures += 1
        self._next_at = now + delay
        self._send_subscription = True  # the coordinator may have missed the last one

    def _join(self, now: float) -> None:
        self.state = MemberState.JOINING
        self.member_epoch = JOIN_EPOCH
        self._send_subscription = True
        self._next_at = now
        self._in_flight = None  # an answer to an earlier request no longer applies

    def _leave(self, now: float) -> None:
        self.state = MemberState.LEAVING
        self._next_at = now
        self._in_flight = None
        self._drop_assignment()

    def _left(self) -> bool:
        self.member_epoch = JOIN_EPOCH
        self.state = MemberState.STALE if self._stale_after_leave else MemberState.UNSUBSCRIBED
        self._stale_after_leave = False
        self._next_at = None
        return self._drop_assignment()

    def _drop_assignment(self) -> bool:
        if not self.assignment:
            return False
        self.assignment = {}
        self.assignment_version += 1
        return True

    def _check_poll_timer(self, now: float) -> None:
        deadline = self.poll_deadline()
        if deadline is not None and now >= deadline:
            self._leave(now)
            self._stale_after_leave = True
