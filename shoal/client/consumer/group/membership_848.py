"""A consumer-group member on Kafka 4's protocol (KIP-848, ConsumerGroupHeartbeat), sans-IO.

Why a second membership: with ``group.protocol=consumer`` there is no
JoinGroup/SyncGroup and no client-side assignor. The member heartbeats; the
coordinator computes the assignment and answers with the member's epoch,
the interval to heartbeat at, and, whenever it changed, the partitions the
member may own now (by topic id). The member reconciles towards that target
one step at a time and tells the coordinator what it owns in the next
heartbeat. Every rule is a decision on (state, an answer, the time), so it
lives here with an explicit ``now``; the asyncio shell
(``client.consumer.group.coordinator_848``) sends, resolves topic ids to names
and runs the application's callbacks.

The rules, as Kafka 4.2's consumer follows them:

* The member id is chosen by the client once (a random UUID in Kafka's
  base64 form) and kept; epoch 0 joins, -1 leaves, -2 leaves a static member
  that will come back (the coordinator keeps its assignment for the session).
* A joining heartbeat carries everything (instance id, rack, rebalance
  timeout, subscription, server assignor, owned partitions: none); later ones
  only what changed since the last one sent, and a heartbeat that went
  unanswered makes the next one carry everything again.
* Reconciliation: partitions owned but no longer in the target are revoked
  first (the shell commits and calls ``on_partitions_revoked``), then the new
  ones are added (``on_partitions_assigned``); the member then owns the
  target and acknowledges it with the next heartbeat, sent at once. A target
  that changes while a reconciliation runs is taken up by the next one; a
  reconciliation overtaken by fencing or leaving is dropped.
* FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the coordinator no longer knows the
  member as it was. Everything owned is lost (``take_lost``, for
  ``on_partitions_lost``) and the member rejoins with epoch 0 and the same id.
* The next heartbeat is due ``HeartbeatIntervalMs`` after the last answer;
  retriable failures back off exponentially (``retry.backoff.ms`` ..
  ``retry.backoff.max.ms``); errors a retry cannot fix are fatal.
* ``max.poll.interval.ms`` without a poll: the member leaves (its partitions
  are lost) and becomes stale; its next poll rejoins with epoch 0.
* Commits carry the member id and the current member epoch
  (``commit_identity``); there is none while joining, fenced or out of the group.

Topic partitions are ``(topic_id, partition)`` pairs throughout.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from shoal.client.core.heartbeat_membership import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    HeartbeatMembership,
    MemberState,
    new_member_id,
)

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "STATIC_LEAVE_EPOCH",
    "ConsumerMembership",
    "HeartbeatRequest",
    "MemberState",
    "Reconciliation",
    "random_member_id",
]

STATIC_LEAVE_EPOCH = -2

IdPartition = tuple[uuid.UUID, int]

random_member_id = new_member_id


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """The fields of one ConsumerGroupHeartbeat; None means "unchanged" (not sent)."""

    token: int
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: dict[uuid.UUID, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """One step towards the target: revoke first, then assign."""

    revoke: frozenset[IdPartition]
    assign: frozenset[IdPartition]
    incarnation: int  # the membership incarnation it belongs to (fencing or leaving ends one)


@dataclass(slots=True)
class _Sent:
    """What the coordinator was last told (so unchanged fields are left out)."""

    full: bool = True
    names: frozenset[str] | None = None
    regex: str | None = None
    assignor: str | None = None
    owned: frozenset[IdPartition] | None = None
    pending: dict[str, object] = field(default_factory=dict)  # carried by the request in flight


class ConsumerMembership(HeartbeatMembership):
    """The member state machine (see the module doc); every method takes the time. Epochs,
    timing, tokens, errors and the poll timer are ``HeartbeatMembership``'s."""

    def __init__(
        self,
        group_id: str,
        member_id: str,
        *,
        rebalance_timeout_ms: int,
        instance_id: str | None = None,
        rack_id: str | None = None,
        server_assignor: str | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        jitter: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(
            group_id,
            member_id,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            jitter=jitter,
        )
        self.instance_id = instance_id
        self.rack_id = rack_id
        self.server_assignor = server_assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.topics: frozenset[str] = frozenset()
        self.regex: str | None = None
        self.owned: frozenset[IdPartition] = frozenset()
        self.target: frozenset[IdPartition] | None = None  # None: nothing received since joining
        self.incarnation = 0
        self._lost: set[IdPartition] = set()
        self._sent = _Sent()
        self._reconciling: Reconciliation | None = None

    # -- queries -------------------------------------------------------------------------
    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.regex is not None

    @property
    def poll_timeout_ms(self) -> int:
        return self.rebalance_timeout_ms

    def commit_identity(self) -> tuple[int, str] | None:
        """(member epoch, member id) for OffsetCommit, or None while not a member with an epoch."""
        if self.state is MemberState.STABLE and self.member_epoch > 0:
            return self.member_epoch, self.member_id
        return None

    @property
    def joining(self) -> bool:
        return self.state is MemberState.JOINING

    # -- application events ----------------------------------------------------------------
    def subscribe(self, topics: Iterable[str], regex: str | None, now: float) -> None:
        """Subscribe by names or (``regex`` not None) by a regular expression the broker evaluates."""
        self.topics = frozenset(topics) if regex is None else frozenset()
        self.regex = regex
        if not self.subscribed:
            self.unsubscribe(now)
            return
        if self._last_poll is None:
            self._last_poll = now
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.LEAVING, MemberState.STALE):
            self._join(now)
        elif self.state is MemberState.STABLE and self._subscription_changed():
            self._next_at = now

    def unsubscribe(self, now: float) -> None:
        """Leave the group (the shell revoked what it owned first)."""
        self.topics, self.regex = frozenset(), None
        self._quit(now)

    close = unsubscribe

    # -- heartbeats ------------------------------------------------------------------------
    def next_request(self, now: float) -> HeartbeatRequest | None:
        """The heartbeat to send now, or None (see ``wake_at``)."""
        token = self._next_token(now)
        if token is None:
            return None
        if self.state is MemberState.LEAVING:
            epoch = STATIC_LEAVE_EPOCH if self.instance_id is not None else LEAVE_EPOCH
            return HeartbeatRequest(token, epoch, instance_id=self.instance_id)
        full = self._sent.full or self.state is MemberState.JOINING
        pending: dict[str, object] = {}
        names = regex = assignor = None
        owned = None
        if self.regex is not None:
            if full or self._sent.regex != self.regex:
                regex = pending["regex"] = self.regex
                if self._sent.names:  # switching from names: clear them
                    names = []
                    pending["names"] = frozenset()
        elif full or self._sent.names != self.topics:
            names = sorted(self.topics)
            pending["names"] = self.topics
            if self._sent.regex:  # switching from a regex: clear it
                regex = pending["regex"] = ""
        if self.server_assignor is not None and (full or self._sent.assignor != self.server_assignor):
            assignor = pending["assignor"] = self.server_assignor
        if full or self._sent.owned != self.owned:
            owned = _by_topic(self.owned)
            pending["owned"] = self.owned
        self._sent.pending = pending
        return HeartbeatRequest(
            token,
            self.member_epoch if self.state is MemberState.STABLE else JOIN_EPOCH,
            instance_id=self.instance_id,
            rack_id=self.rack_id if full else None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=names,
            subscribed_topic_regex=regex,
            server_assignor=assignor,
            topic_partitions=owned,
        )

    # -- reconciliation ------------------------------------------------------------------------
    def reconciliation(self, resolvable: Callable[[uuid.UUID], bool] = lambda _t: True) -> Reconciliation | None:
        """The next step towards the target, limited to topics the shell can name; None when
        there is nothing to do now (or a step is already under way)."""
        if self._reconciling is not None or self.state is not MemberState.STABLE or self.target is None:
            return None
        revoke = self.owned - self.target
        assign = frozenset(tp for tp in self.target - self.owned if resolvable(tp[0]))
        if not revoke and not assign:
            return None
        self._reconciling = Reconciliation(revoke, assign, self.incarnation)
        return self._reconciling

    def unresolved(self, resolvable: Callable[[uuid.UUID], bool]) -> set[uuid.UUID]:
        """Topic ids in the target the shell cannot name yet (it refreshes metadata)."""
        if self.target is None:
            return set()
        return {t for t, _ in self.target - self.owned if not resolvable(t)}

    def reconciled(self, step: Reconciliation, now: float) -> bool:
        """The shell revoked and assigned ``step``; False when the step was overtaken (fenced, left)."""
        if self._reconciling is step:
            self._reconciling = None
        if step.incarnation != self.incarnation or self.state is not MemberState.STABLE:
            return False
        self.owned = (self.owned - step.revoke) | step.assign
        if self._in_flight is None:
            self._next_at = now  # acknowledge at once
        return True

    def abandon(self, step: Reconciliation) -> None:
        """A step that failed part-way (the shell will ask again)."""
        if self._reconciling is step:
            self._reconciling = None

    def take_lost(self) -> frozenset[IdPartition]:
        """Partitions lost since the last call (fenced, left by the poll timer, fatal)."""
        lost, self._lost = frozenset(self._lost), set()
        return lost

    # -- the base class's hooks ------------------------------------------------------------------
    def _accept(self, assignment: Mapping[uuid.UUID, Iterable[int]] | None, now: float) -> bool:
        """True when there is something new to reconcile."""
        sent = self._sent
        pending, sent.pending, sent.full = sent.pending, {}, False
        if "names" in pending:
            sent.names = pending["names"]  # type: ignore[assignment]
        if "regex" in pending:
            sent.regex = pending["regex"] or None  # type: ignore[assignment]
        if "assignor" in pending:
            sent.assignor = pending["assignor"]  # type: ignore[assignment]
        if "owned" in pending:
            sent.owned = pending["owned"]  # type: ignore[assignment]
        if self._subscription_changed() or sent.owned != self.owned:
            self._next_at = now  # something changed while the request was out
        if assignment is None:
            return False
        new = frozenset((t, p) for t, ps in assignment.items() for p in ps)
        changed = new != self.target
        self.target = new
        return changed and new != self.owned

    def _resend_all(self) -> None:
        self._sent.full = True
        self._sent.pending = {}

    def _join(self, now: float) -> None:
        super()._join(now)
        self._sent = _Sent()
        self.target = None
        self.incarnation += 1

    def _leave(self, now: float) -> None:
        super()._leave(now)
        self.incarnation += 1

    def _on_leave_for_poll(self) -> None:
        self._lost |= self.owned
        self.owned = frozenset()

    def _drop(self, *, lost: bool) -> bool:
        self.incarnation += 1
        self._reconciling = None
        self.target = None
        had = bool(self.owned)
        if lost:
            self._lost |= self.owned
        self.owned = frozenset()
        return had and lost

    def _subscription_changed(self) -> bool:
        if self.regex is not None:
            return self._sent.regex != self.regex
        return self._sent.names != self.topics


def _by_topic(parts: Iterable[IdPartition]) -> dict[uuid.UUID, list[int]]:
    out: dict[uuid.UUID, list[int]] = {}
    for t, p in sorted(parts):
        out.setdefault(t, []).append(p)
    return out
