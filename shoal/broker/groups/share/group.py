"""A share group's membership (ShareGroupHeartbeat, KIP-932) as a sans-IO state machine.

Why this exists: share groups have no JoinGroup/SyncGroup rounds. Members
heartbeat on their own; the coordinator keeps three epochs that together say
who should hold what, and every heartbeat moves the sender towards that:

* ``group_epoch`` -- bumped once per heartbeat (or expiry) that changes the
  membership, a member's subscription, or the metadata of the subscribed
  topics (a hash over each subscribed, existing topic's name, id and
  partition count, so partition growth and re-creation under a new id count);
* ``assignment_epoch`` -- the group epoch the target assignment was computed
  for; when ``group_epoch`` is ahead, a heartbeat recomputes the target with
  :func:`broker.groups.share.assignor.assign`, the previous target as input for
  stickiness -- but no sooner than the group's assignment interval
  (``share.assignment.interval.ms``, KIP-1263, Kafka 4.3) after the previous
  computation, so a burst of joins costs one rebalance, not one per member;
* each member's ``member_epoch`` -- share members hold no exclusive offsets,
  so there is nothing to revoke first: a heartbeating member jumps straight to
  the target (``member_epoch = assignment_epoch``, ``assigned = target``).

The assignment interval (Kafka's ``canComputeNextTargetAssignment``): the
target is recomputed at once when the group has none yet or does not know when
it was computed (``assignment_timestamp_ms`` 0: a new group, or records older
than KIP-1263), when the interval is 0, or once the interval has passed since
the last computation; otherwise the heartbeat answers from the current target
(a member joining meanwhile gets the current assignment epoch and nothing
assigned). Nothing fires when the interval ends: the next heartbeat of any
member after it computes the target, as in Kafka, and the heartbeat interval
told to members does not change. The time is wall-clock (``wall_ms``) because
it is written with the target (ShareGroupTargetAssignmentMetadata's
AssignmentTimestamp), so a restart does not cut the interval short.

The object does no I/O and reads no clock: callers pass ``now_ms`` and the
broker's current topic metadata (name -> (topic id, partition count)) on every
heartbeat. Session timeouts are deadlines the caller watches and reports back
through :meth:`ShareGroup.expire`. Expiry and leave only remove the member and
its target entry and bump the group epoch; the new target is computed by the
next heartbeat, because that is when fresh topic metadata is at hand (this is
also what Kafka does). ``dirty`` says something a coordinator record would
hold (epochs, members, subscriptions, target or current assignments) changed,
so the caller can persist the group and clear the flag.

Share state initialization (KIP-932): a partition is assignable only once the
share coordinator holds state for it in this group. The group tracks each
topic's partitions as *initializing* (asked, with the time it asked) or
*initialized*, and topics it dropped as *deleting*. :meth:`to_initialize`
picks the partitions of subscribed topics that need an
InitializeShareGroupState call (new ones, or ones stuck initializing longer
than the retry interval); :meth:`initialized_partitions` /
:meth:`initialize_failed` record the outcome, and a success bumps the group
epoch so the next heartbeat assigns the new partitions. :meth:`to_delete`
moves topics nobody subscribes to any more (or that were deleted) to
*deleting* for a DeleteShareGroupState call; :meth:`deleted_topics` drops them.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shoal.broker.groups.share.assignor import assign
from shoal.protocol.errors import ErrorCode

__all__ = ["HeartbeatResult", "ShareGroup", "ShareMember"]

EMPTY = "Empty"
STABLE = "Stable"
DEAD = "Dead"

JOIN_EPOCH = 0
LEAVE_EPOCH = -1

# topic id -> partitions
TopicAssignment = dict[uuid.UUID, frozenset[int]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    assigned: TopicAssignment = field(default_factory=dict)
    previous_member_epoch: int = -1
    session_deadline_ms: int = 0


@dataclass(slots=True)
class InitState:
    """A topic's partitions in one of the share-state sets (name kept for records and admin)."""

    name: str
    partitions: frozenset[int]
    timestamp_ms: int = 0


@dataclass(slots=True)
class HeartbeatResult:
    error: int
    member_id: str
    member_epoch: int
    assignment: dict[uuid.UUID, set[int]] | None = None


def metadata_hash(names: Iterable[str], topics: Mapping[str, tuple[uuid.UUID, int]]) -> int:
    """A stable 63-bit hash over (name, id, partition count) of the existing topics in `names`."""
    h = hashlib.sha256()
    for name in sorted(set(names)):
        if name in topics:
            topic_id, count = topics[name]
            h.update(f"{name}\0{topic_id.hex}\0{count}\n".encode())
    return int.from_bytes(h.digest()[:8], "big") >> 1


class ShareGroup:
    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.assignment_timestamp_ms = 0  # wall-clock ms of the last target computation; 0: unknown
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, TopicAssignment] = {}
        self.metadata_hash = 0
        self.state = EMPTY
        self.state_timestamp = now_ms
        self.dirty = False
        self.initializing: dict[uuid.UUID, InitState] = {}
        self.initialized: dict[uuid.UUID, InitState] = {}
        self.deleting: dict[uuid.UUID, str] = {}
        self.state_dirty = False  # the StatePartitionMetadata image changed
        self._subs: Counter[str] = Counter()  # topic -> members subscribing (kept in step with members)

    # -- helpers ---------------------------------------------------------------
    def _update_state(self, now_ms: int) -> None:
        if self.state == DEAD:
            return
        state = STABLE if self.members else EMPTY
        if state != self.state:
            self.state = state
            self.state_timestamp = now_ms

    def refresh_state(self, now_ms: int) -> None:
        """Empty or Stable, and the subscription counts, from the members (after a replay rebuilt them)."""
        self._subs = Counter(t for m in self.members.values() for t in m.subscribed_topic_names)
        self._update_state(now_ms)

    def _bump(self) -> None:
        self.group_epoch += 1
        self.dirty = True

    def _remove(self, member_id: str) -> None:
        self._subs.subtract(self.members.pop(member_id).subscribed_topic_names)
        self._subs = +self._subs
        self.target.pop(member_id, None)
        self._bump()

    def can_compute_target(self, interval_ms: int, wall_ms: int) -> bool:
        """Whether a target computation may run now (it is due only when group_epoch is ahead)."""
        if self.assignment_timestamp_ms == 0 or interval_ms == 0:
            return True
        return wall_ms >= self.assignment_timestamp_ms + interval_ms

    def assignment_pending(self) -> bool:
        """The group epoch moved past the target: a heartbeat will (maybe later) compute a new one."""
        return self.group_epoch > self.assignment_epoch

    def _compute_target(self, topics: Mapping[str, tuple[uuid.UUID, int]], wall_ms: int) -> None:
        names_by_id = {tid: name for name, (tid, _) in topics.items()}
        current: dict[str, dict[str, frozenset[int]]] = {}
        for member_id, by_id in self.target.items():
            if member_id in self.members:
                current[member_id] = {names_by_id[t]: ps for t, ps in by_id.items() if t in names_by_id}
        assignable: dict[str, frozenset[int]] = {}
        for name, (tid, count) in topics.items():
            done = self.initialized.get(tid)
            if done is not None:
                assignable[name] = frozenset(p for p in done.partitions if p < count)
        result = assign(
            {m: member.subscribed_topic_names for m, member in self.members.items()},
            assignable,
            current,
        )
        target = {
            m: {topics[t][0]: frozenset(ps) for t, ps in by_topic.items() if ps} for m, by_topic in result.items()
        }
        self.target = target
        self.assignment_epoch = self.group_epoch
        self.assignment_timestamp_ms = wall_ms
        self.dirty = True

    def _subscribed_names(self) -> set[str]:
        return set(self._subs)

    def subscribed_names(self) -> set[str]:
        """Every topic some member subscribes to."""
        return set(self._subs)

    # -- ShareGroupHeartbeat ---------------------------------------------------
    def heartbeat(
        self,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: Iterable[str] | None,
        topics: Mapping[str, tuple[uuid.UUID, int]],
        now_ms: int,
        session_timeout_ms: int,
        max_size: int,
        *,
        client_id: str = "",
        client_host: str = "",
        assignment_interval_ms: int = 0,
        wall_ms: int | None = None,
    ) -> HeartbeatResult:
        """Handle one ShareGroupHeartbeat; `topics` is the broker's current metadata.

        `assignment_interval_ms` is the group's share.assignment.interval.ms;
        `wall_ms` the wall-clock time it is measured in (default `now_ms`).
        """
        if self.state == DEAD:
            return HeartbeatResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id, member_epoch)
        if not member_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, member_id, member_epoch)
        subscription = None if subscribed_topic_names is None else frozenset(subscribed_topic_names)

        if member_epoch == LEAVE_EPOCH:
            if member_id not in self.members:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id, member_epoch)
            self._remove(member_id)
            self._update_state(now_ms)
            return HeartbeatResult(ErrorCode.NONE, member_id, LEAVE_EPOCH)

        member = self.members.get(member_id)
        if member_epoch == JOIN_EPOCH:
            if subscription is None:
                return HeartbeatResult(ErrorCode.INVALID_REQUEST, member_id, member_epoch)
            if member is None and len(self.members) >= max_size:
                return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id, member_epoch)
        elif member is None:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id, member_epoch)
        elif member_epoch != member.member_epoch:
            return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH, member_id, member_epoch)

        # From here on the request is accepted.
        bump = False
        if member is None:
            # A new member; a known one sending epoch 0 rejoins with its full subscription.
            member = ShareMember(member_id)
            self.members[member_id] = member
            bump = True
        if subscription is not None and subscription != member.subscribed_topic_names:
            self._subs.subtract(member.subscribed_topic_names)
            self._subs.update(subscription)
            self._subs = +self._subs
            member.subscribed_topic_names = subscription
            bump = True
        if rack_id is not None and rack_id != member.rack_id:
            member.rack_id = rack_id
            self.dirty = True
        if (client_id, client_host) != (member.client_id, member.client_host):
            member.client_id, member.client_host = client_id, client_host
            self.dirty = True
        member.session_deadline_ms = now_ms + session_timeout_ms

        new_hash = metadata_hash(self._subscribed_names(), topics)
        if new_hash != self.metadata_hash:
            self.metadata_hash = new_hash
            bump = True
        if bump:
            self._bump()
        wall = now_ms if wall_ms is None else wall_ms
        if self.assignment_pending() and self.can_compute_target(assignment_interval_ms, wall):
            self._compute_target(topics, wall)

        # Reconcile: share members move to their target at once (a deferred target: the current one).
        before = member.assigned
        target = dict(self.target.get(member_id, {}))
        if member.member_epoch != self.assignment_epoch or target != before:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
            member.assigned = target
            self.dirty = True
        self._update_state(now_ms)

        send = member_epoch == JOIN_EPOCH or subscription is not None or target != before
        assignment = {t: set(ps) for t, ps in target.items()} if send else None
        return HeartbeatResult(ErrorCode.NONE, member_id, member.member_epoch, assignment)

    # -- share state initialization ---------------------------------------------
    def to_initialize(
        self, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int, retry_interval_ms: int
    ) -> dict[uuid.UUID, InitState]:
        """Partitions of subscribed topics that need InitializeShareGroupState now.

        They are recorded as initializing (timestamp `now_ms`); the caller
        persists the group, makes the calls, and reports back.
        """
        out: dict[uuid.UUID, InitState] = {}
        for name in sorted(self._subscribed_names()):
            if name not in topics:
                continue
            tid, count = topics[name]
            done = self.initialized.get(tid)
            pending = self.initializing.get(tid)
            need = set(range(count))
            if done is not None:
                need -= done.partitions
            if pending is not None and now_ms - pending.timestamp_ms < retry_interval_ms:
                need -= pending.partitions
            if not need:
                continue
            keep = pending.partitions if pending is not None else frozenset()
            self.initializing[tid] = InitState(name, keep | need, now_ms)
            out[tid] = InitState(name, frozenset(need), now_ms)
            self.state_dirty = True
        return out

    def initialized_partitions(self, topic_id: uuid.UUID, name: str, partitions: Iterable[int]) -> None:
        """InitializeShareGroupState succeeded for these partitions: they become assignable."""
        parts = frozenset(partitions)
        if not parts:
            return
        pending = self.initializing.get(topic_id)
        if pending is not None:
            rest = pending.partitions - parts
            if rest:
                pending.partitions = rest
            else:
                del self.initializing[topic_id]
        done = self.initialized.get(topic_id)
        self.initialized[topic_id] = InitState(name, parts | (done.partitions if done else frozenset()))
        self.state_dirty = True
        self._bump()  # the next heartbeat computes a target that includes them

    def initialize_failed(self, topic_id: uuid.UUID, partitions: Iterable[int]) -> None:
        """The call failed: forget the attempt so a later heartbeat retries at once."""
        pending = self.initializing.get(topic_id)
        if pending is None:
            return
        rest = pending.partitions - frozenset(partitions)
        if rest:
            pending.partitions = rest
        else:
            del self.initializing[topic_id]
        self.state_dirty = True

    def to_delete(self, topics: Mapping[str, tuple[uuid.UUID, int]]) -> dict[uuid.UUID, InitState]:
        """Topics whose share state should go: unsubscribed by every member, or deleted.

        They move to deleting; returns what the caller should delete (every
        partition the group initialized or was initializing).
        """
        subscribed = self._subscribed_names()
        live_ids = {tid for tid, _ in topics.values()}
        out: dict[uuid.UUID, InitState] = {}
        for tid in set(self.initialized) | set(self.initializing):
            done = self.initialized.get(tid)
            pending = self.initializing.get(tid)
            state = done or pending
            assert state is not None  # tid is a key of initialized or initializing
            name = state.name
            if name in subscribed and tid in live_ids and topics[name][0] == tid:
                continue
            parts = (done.partitions if done else frozenset()) | (pending.partitions if pending else frozenset())
            self.initialized.pop(tid, None)
            self.initializing.pop(tid, None)
            self.deleting[tid] = name
            out[tid] = InitState(name, parts)
            self.state_dirty = True
        return out

    def deleted_topics(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """DeleteShareGroupState finished for these topics."""
        for tid in topic_ids:
            if self.deleting.pop(tid, None) is not None:
                self.state_dirty = True

    def forget_offsets(self, topic_id: uuid.UUID) -> InitState | None:
        """DeleteShareGroupOffsets: the topic's state is deleted; it is neither initialized nor initializing."""
        done = self.initialized.pop(topic_id, None)
        pending = self.initializing.pop(topic_id, None)
        state = done or pending
        if state is None:
            return None
        self.state_dirty = True
        parts = (done.partitions if done else frozenset()) | (pending.partitions if pending else frozenset())
        return InitState(state.name, parts)

    # -- timers / admin --------------------------------------------------------
    def expire(self, now_ms: int) -> list[str]:
        """Remove members whose session deadline is at or before `now_ms`.

        Each removal bumps the group epoch; the next heartbeat computes the new
        target (it brings fresh topic metadata).
        """
        gone = sorted(m for m, member in self.members.items() if member.session_deadline_ms <= now_ms)
        for member_id in gone:
            self._remove(member_id)
        self._update_state(now_ms)
        return gone

    def next_deadline_ms(self) -> int | None:
        """The earliest session deadline, for the caller's timer."""
        return min((m.session_deadline_ms for m in self.members.values()), default=None)

    def mark_dead(self, now_ms: int) -> None:
        """The group was deleted (or its coordinator moved): every later heartbeat fails."""
        self.state = DEAD
        self.state_timestamp = now_ms
        self.dirty = True

    def describe(self) -> dict[str, Any]:
        """What ShareGroupDescribe reports: epochs, state and each member."""
        return {
            "group_id": self.group_id,
            "state": self.state,
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            "members": [
                {
                    "member_id": m.member_id,
                    "member_epoch": m.member_epoch,
                    "rack_id": m.rack_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": sorted(m.subscribed_topic_names),
                    "assignment": {t: sorted(ps) for t, ps in m.assigned.items()},
                }
                for m in sorted(self.members.values(), key=lambda m: m.member_id)
            ],
        }
