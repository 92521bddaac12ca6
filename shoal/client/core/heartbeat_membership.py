"""What a heartbeat-only group member (KIP-848 consumer, KIP-932 share) does, sans-IO.

Why a shared base: a consumer on ``group.protocol=consumer`` and a share
consumer join their groups the same way. Neither has JoinGroup/SyncGroup;
each heartbeats, keeps one heartbeat in flight, takes the epoch and interval
the coordinator answers with, backs off on retriable errors, rejoins when
fenced, leaves when the application stops polling and leaves on close. Only
what a heartbeat carries and what an assignment means differ, so those are
hooks (``_accept``, ``_drop``, ``_resend_all``) and everything about epochs,
timing and the request token lives here once, with ``now`` (ms) passed in.

The shared rules, as Kafka 4.2's clients follow them:

* Epoch 0 joins, -1 leaves; otherwise the member sends the epoch the
  coordinator last gave.
* The next heartbeat is due ``HeartbeatIntervalMs`` after the last answer
  (5 s until the coordinator has named one); joining or leaving sends at once.
* One heartbeat is in flight at a time; an answer whose ``token`` is not the
  one in flight (the member's state changed since) is ignored.
* FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the member rejoins at once with
  epoch 0 and the same id; what it held is lost.
* Coordinator moves, loading and network failures are retried with
  exponential backoff (``retry.backoff.ms`` .. ``retry.backoff.max.ms``,
  jittered); ``coordinator_gone`` says when to rediscover the coordinator.
  Any other error is fatal: ``fatal``/``fatal_message`` hold it.
* A member whose application has not polled within the poll timeout leaves
  and becomes *stale*; its next poll rejoins with epoch 0.
* Leaving is best effort: the member is out once the leave heartbeat is
  answered or has failed.
"""

from __future__ import annotations

import abc
import base64
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from enum import Enum

from shoal.protocol.errors import ErrorCode

__all__ = ["JOIN_EPOCH", "LEAVE_EPOCH", "HeartbeatMembership", "MemberState", "new_member_id"]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1

FENCED = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
COORDINATOR_GONE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
RETRIABLE = frozenset(
    {
        *COORDINATOR_GONE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)


def new_member_id(rand: Callable[[int], bytes] | None = None) -> str:
    """A fresh member id as Kafka's clients print one: a random UUID in URL-safe base64, no
    padding, never starting with '-' (which command lines would take for an option)."""
    while True:
        raw = rand(16) if rand is not None else uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class MemberState(Enum):
    UNSUBSCRIBED = "unsubscribed"  # not in the group
    JOINING = "joining"  # the next heartbeat joins with epoch 0
    STABLE = "stable"  # in the group
    LEAVING = "leaving"  # the next heartbeat leaves
    STALE = "stale"  # left because the application stopped polling; the next poll rejoins
    FATAL = "fatal"  # an error no retry can fix


class HeartbeatMembership(abc.ABC):
    """The epoch, timing and token rules both heartbeat memberships share (see module doc).

    A subclass says what its subscription is (``subscribed``), how long the poll timer runs
    (``poll_timeout_ms``), what an accepted answer does (``_accept``), what dropping the
    assignment means (``_drop``) and how to make the next heartbeat carry everything again
    (``_resend_all``); it may extend ``_join``/``_leave``/``_on_leave_for_poll``."""

    def __init__(
        self,
        group_id: str,
        member_id: str,
        *,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        jitter: Callable[[], float] | None,
    ) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self._backoff_base = max(retry_backoff_ms, 1)
        self._backoff_max = max(retry_backoff_max_ms, self._backoff_base)
        self._jitter = jitter if jitter is not None else (lambda: random.uniform(0.8, 1.2))
        self.state = MemberState.UNSUBSCRIBED
        self.member_epoch = JOIN_EPOCH
        self.interval_ms: int | None = None
        self.fatal: int | None = None
        self.fatal_message: str | None = None
        self.coordinator_gone = False  # the last answer said the coordinator moved: rediscover it
        self._next_at: float | None = None
        self._in_flight: int | None = None
        self._tokens = 0
        self._failures = 0
        self._last_poll: float | None = None
        self._stale_after_leave = False

    # -- what a subclass says ----------------------------------------------------------------
    @property
    @abc.abstractmethod
    def subscribed(self) -> bool:
        """Whether the member has a subscription to heartbeat for."""

    @property
    @abc.abstractmethod
    def poll_timeout_ms(self) -> int:
        """How long the application may go without polling before the member goes stale."""

    @abc.abstractmethod
    def _accept(self, assignment: Mapping[uuid.UUID, Iterable[int]] | None, now: float) -> bool:
        """A successful answer, after the epoch and timing were taken; True when the shell
        has something new to act on."""

    @abc.abstractmethod
    def _drop(self, *, lost: bool) -> bool:
        """Give up the assignment (``lost``: without revoking it); True when the shell must act."""

    @abc.abstractmethod
    def _resend_all(self) -> None:
        """The coordinator may have missed the last heartbeat: the next one carries everything."""

    # -- queries -------------------------------------------------------------------------------
    @property
    def in_group(self) -> bool:
        return self.state in (MemberState.JOINING, MemberState.STABLE)

    def poll_deadline(self) -> float | None:
        """When the poll timer runs out (None when not in the group)."""
        if not self.in_group or self._last_poll is None:
            return None
        return self._last_poll + self.poll_timeout_ms

    def wake_at(self, now: float) -> float | None:
        """When ``next_request`` may next have something to send (None: only after an event)."""
        if self._in_flight is not None or self.state in (MemberState.UNSUBSCRIBED, MemberState.STALE):
            return None
        if self.state is MemberState.FATAL:
            return None
        due = self._next_at if self._next_at is not None else now
        deadline = self.poll_deadline()
        return due if deadline is None else min(due, deadline)

    # -- application events ----------------------------------------------------------------------
    def on_poll(self, now: float) -> None:
        """The application polled: the poll timer restarts; a stale member rejoins."""
        self._last_poll = now
        if self.state is MemberState.STALE and self.subscribed:
            self._join(now)

    def _quit(self, now: float, *, stable_leaves: bool = True) -> None:
        """Out of the group for the application's sake: leave when the coordinator knows us
        (``stable_leaves``: a stable member always counts as known), else just stop."""
        self._stale_after_leave = False
        if self.state is MemberState.FATAL:
            return
        known = self.member_epoch > 0 or self._in_flight is not None
        if known or (stable_leaves and self.state is MemberState.STABLE):
            self._leave(now)
        else:
            self.state = MemberState.UNSUBSCRIBED
            self._drop(lost=False)

    # -- heartbeats --------------------------------------------------------------------------------
    def _next_token(self, now: float) -> int | None:
        """The token of a heartbeat to send now (it is then in flight), or None."""
        self._check_poll_timer(now)
        if self._in_flight is not None or self.state in (MemberState.UNSUBSCRIBED, MemberState.STALE):
            return None
        if self.state is MemberState.FATAL or (self._next_at is not None and now < self._next_at):
            return None
        self._tokens += 1
        self._in_flight = self._tokens
        return self._tokens

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
        """Apply a heartbeat answer; True when the shell has something new to act on."""
        if token != self._in_flight:
            return False
        self._in_flight = None
        self.coordinator_gone = False
        if self.state is MemberState.LEAVING:
            return self._left()
        if error_code:
            return self._on_error(error_code, error_message, now)
        self._failures = 0
        self.member_epoch = member_epoch
        if interval_ms > 0:
            self.interval_ms = interval_ms
        self.state = MemberState.STABLE
        self._next_at = now + (self.interval_ms or 5000)
        return self._accept(assignment, now)

    def on_failure(self, token: int, now: float, error_code: int | None = None) -> bool:
        """No usable answer (network, timeout, coordinator moved); True when the shell must act."""
        if token != self._in_flight:
            return False
        self._in_flight = None
        if self.state is MemberState.LEAVING:
            return self._left()
        if error_code is not None and error_code not in RETRIABLE:
            return self._on_error(error_code, None, now)
        self.coordinator_gone = error_code in COORDINATOR_GONE
        self._retry_later(now)
        return False

    # -- internals -----------------------------------------------------------------------------------
    def _on_error(self, code: int, message: str | None, now: float) -> bool:
        if code in FENCED:
            self._join(now)
            return self._drop(lost=True)
        if code in RETRIABLE:
            self.coordinator_gone = code in COORDINATOR_GONE
            self._retry_later(now)
            return False
        self.state = MemberState.FATAL
        self.fatal, self.fatal_message = code, message
        return self._drop(lost=True)

    def _retry_later(self, now: float) -> None:
        delay = min(self._backoff_base * 2 ** min(self._failures, 30), self._backoff_max) * self._jitter()
        self._failures += 1
        self._next_at = now + delay
        self._resend_all()

    def _join(self, now: float) -> None:
        self.state = MemberState.JOINING
        self.member_epoch = JOIN_EPOCH
        self._next_at = now
        self._in_flight = None  # an answer to an earlier request no longer applies

    def _leave(self, now: float) -> None:
        self.state = MemberState.LEAVING
        self._next_at = now
        self._in_flight = None

    def _left(self) -> bool:
        stale, self._stale_after_leave = self._stale_after_leave, False
        self.member_epoch = JOIN_EPOCH
        self.state = MemberState.STALE if stale else MemberState.UNSUBSCRIBED
        self._next_at = None
        return self._drop(lost=stale)

    def _on_leave_for_poll(self) -> None:  # noqa: B027 (an optional hook: nothing by default)
        """The poll timer ran out and the member is about to leave (a hook)."""

    def _check_poll_timer(self, now: float) -> None:
        deadline = self.poll_deadline()
        if deadline is not None and now >= deadline:
            self._stale_after_leave = True
            self._on_leave_for_poll()
            self._leave(now)
