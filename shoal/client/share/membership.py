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

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from shoal.client.core.heartbeat_membership import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    HeartbeatMembership,
    MemberState,
    new_member_id,
)

__all__ = ["HeartbeatRequest", "MemberState", "ShareMembership", "new_member_id"]


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    token: int
    member_epoch: int
    subscribed_topic_names: list[str] | None
    rack_id: str | None


class ShareMembership(HeartbeatMembership):
    """The member state machine (see module doc); epochs, timing, tokens, errors and the poll
    timer are ``HeartbeatMembership``'s."""

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
        super().__init__(
            group_id,
            member_id,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            jitter=jitter,
        )
        self.rack_id = rack_id
        self.max_poll_interval_ms = max_poll_interval_ms
        self.subscription: frozenset[str] = frozenset()
        self.assignment: dict[uuid.UUID, frozenset[int]] = {}
        self.assignment_version = 0
        self._send_subscription = False
        self._in_flight_topics: frozenset[str] | None = None  # the subscription the request in flight carries

    @property
    def subscribed(self) -> bool:
        return bool(self.subscription)

    @property
    def poll_timeout_ms(self) -> int:
        return self.max_poll_interval_ms

    # -- application events --------------------------------------------------------
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
        self._quit(now)

    def close(self, now: float) -> None:
        """Leave for good (the consumer is closing)."""
        self.subscription = frozenset()
        self._quit(now, stable_leaves=False)

    # -- heartbeats ----------------------------------------------------------------------
    def next_request(self, now: float) -> HeartbeatRequest | None:
        """The heartbeat to send now, or None (see ``wake_at``)."""
        token = self._next_token(now)
        if token is None:
            return None
        self._in_flight_topics = None
        if self.state == MemberState.LEAVING:
            return HeartbeatRequest(token, LEAVE_EPOCH, None, None)
        if self.state == MemberState.JOINING or self._send_subscription:
            self._in_flight_topics = self.subscription
        topics = sorted(self._in_flight_topics) if self._in_flight_topics is not None else None
        if self.state == MemberState.JOINING:
            return HeartbeatRequest(token, JOIN_EPOCH, topics, self.rack_id)
        return HeartbeatRequest(token, self.member_epoch, topics, self.rack_id if topics else None)

    # -- the base class's hooks ------------------------------------------------------------
    def _accept(self, assignment: Mapping[uuid.UUID, Iterable[int]] | None, now: float) -> bool:
        """True when the assignment changed."""
        if self._in_flight_topics is not None and self._in_flight_topics == self.subscription:
            self._send_subscription = False  # the coordinator has the current subscription
        elif self._send_subscription:
            self._next_at = now  # the subscription changed while the request was out
        if assignment is None:
            return False
        new = {t: frozenset(ps) for t, ps in assignment.items() if ps}
        if new == self.assignment:
            return False
        self.assignment = new
        self.assignment_version += 1
        return True

    def _resend_all(self) -> None:
        self._send_subscription = True

    def _join(self, now: float) -> None:
        super()._join(now)
        self._send_subscription = True

    def _leave(self, now: float) -> None:
        super()._leave(now)
        self._drop_assignment()

    def _drop(self, *, lost: bool) -> bool:
        return self._drop_assignment()

    def _drop_assignment(self) -> bool:
        if not self.assignment:
            return False
        self.assignment = {}
        self.assignment_version += 1
        return True
