"""A classic consumer group (JoinGroup/SyncGroup protocol) as a sans-IO state machine.

States and transitions follow Kafka's classic group coordinator:

    Empty --join--> PreparingRebalance --all joined / rebalance timeout-->
    CompletingRebalance --leader's SyncGroup--> Stable --join/leave/expiry-->
    PreparingRebalance ...; a group whose last member left becomes Empty;
    a deleted group is Dead.

The object never touches a socket or a clock. Callers pass `now_ms` and an
opaque `token` for every request whose answer may come later (JoinGroup,
SyncGroup); answers come out of `take_outbox()` as (token, result) pairs —
the request's own answer and those of other members it completed. Timers are
deadlines the caller watches (`join_deadline_ms`, each member's
`heartbeat_deadline_ms`, `sync_deadline_ms`) and reports back with
`complete_join`, `expire_member` and `expire_sync`. `dirty` tells the caller
to persist the group (a GroupMetadata record), e.g. when it becomes Empty.

The leader's assignment is different: as in Kafka, it takes effect only once
it is durable. The leader's SyncGroup leaves the group in CompletingRebalance
and hands the caller an `AssignmentWrite` (`take_assignment_writes()`); every
SyncGroup meanwhile is held. The caller persists it and reports the outcome
with `assignment_stored(write, error, now)`: on success (and if the group is
still completing that generation) the assignment is installed, the group goes
Stable and every held SyncGroup is answered; on failure the assignments are
reset, held SyncGroups get the error and the group prepares a new rebalance.
So no member is ever told an assignment a crash could lose.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shoal.broker.coordinator.write_errors import append_error_to_response
from shoal.protocol.errors import ErrorCode


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class JoinResult:
    error: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class AssignmentWrite:
    """The leader's assignment for one generation, to persist before it takes effect."""

    generation_id: int
    assignments: dict[str, bytes]  # every member of that generation (missing ones get b"")


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_token: Any = None
    sync_token: Any = None
    is_new: bool = False
    heartbeat_deadline_ms: int = 0

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None


@dataclass(slots=True)
class JoinParams:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # JoinGroup v4+


class ClassicGroup:
    def __init__(
        self,
        group_id: str,
        now_ms: int,
        initial_delay_ms: int = 3000,
        max_size: int = 2**31 - 1,
        *,
        wall_ms: Callable[[], int] | None = None,
    ) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, int] = {}  # member id -> deadline (MEMBER_ID_REQUIRED round)
        self.pending_sync: set[str] = set()
        self.join_deadline_ms: int | None = None
        self.sync_deadline_ms: int | None = None
        self.initial_delay_ms = initial_delay_ms
        self.max_size = max_size
        self._initial_rebalance = False
        self._initial_limit_ms = 0
        # Kafka's currentStateTimestamp: wall-clock ms of the last state change, written in the
        # GroupMetadata record and the base of an Empty group's offset expiry. Deadlines use the
        # monotonic `now_ms` the calls pass; this one comes from `wall_ms` (the same `now_ms` when
        # no wall clock is given, as in tests with one fake clock).
        self._wall_ms = wall_ms
        self.state_timestamp = now_ms
        self.dirty = False
        self._outbox: list[tuple[Any, Any]] = []
        self._writes: list[AssignmentWrite] = []
        # The leader's assignment write in flight, if any. A retried leader SyncGroup meanwhile is
        # held and answered with that write's outcome, and writes nothing: Kafka writes the retry
        # again but installs the first, so its log's last record (what a restart loads) could
        # differ from what the members were told.
        self._write_in_flight: AssignmentWrite | None = None

    # -- helpers ---------------------------------------------------------------
    def take_outbox(self) -> list[tuple[Any, Any]]:
        out, self._outbox = self._outbox, []
        return out

    def take_assignment_writes(self) -> list[AssignmentWrite]:
        """Assignments the caller must persist, then report with `assignment_stored`."""
        out, self._writes = self._writes, []
        return out

    def _transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp = self._wall_ms() if self._wall_ms is not None else now_ms

    @property
    def is_empty(self) -> bool:
        return not self.members

    def _answer_join(self, member: Member, result: JoinResult) -> None:
        if member.join_token is not None:
            self._outbox.append((member.join_token, result))
            member.join_token = None

    def _answer_sync(self, member: Member, result: SyncResult) -> None:
        if member.sync_token is not None:
            self._outbox.append((member.sync_token, result))
            member.sync_token = None

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if self.is_empty:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        names = {n for n, _ in protocols}
        return bool(names & self._candidates())

    def _candidates(self) -> set[str]:
        sets = [{n for n, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def _select_protocol(self) -> str:
        candidates = self._candidates()
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in self.members.values():
            choice = next(n for n, _ in m.protocols if n in candidates)
            if choice not in votes:
                order.append(choice)
            votes[choice] = votes.get(choice, 0) + 1
        return max(order, key=lambda n: votes[n])

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- JoinGroup -------------------------------------------------------------
    def join(self, p: JoinParams, token: Any, now_ms: int) -> None:
        """Handle a JoinGroup; its answer (now or later) arrives via the outbox under `token`."""
        if self.state == GroupState.DEAD:
            self._outbox.append((token, JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=p.member_id)))
            return
        if not self.supports(p.protocol_type, p.protocols):
            self._outbox.append((token, JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=p.member_id)))
            return
        if p.member_id == "":
            self._join_unknown(p, token, now_ms)
        else:
            self._join_known(p, token, now_ms)

    def _join_unknown(self, p: JoinParams, token: Any, now_ms: int) -> None:
        if p.group_instance_id is not None and p.group_instance_id in self.static_members:
            self._replace_static(p, token, now_ms)
            return
        if len(self.members) + len(self.pending_members) >= self.max_size:
            self._outbox.append((token, JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED)))
            return
        new_id = f"{p.client_id}-{uuid.uuid4()}"
        if p.group_instance_id is None and p.require_known_member_id:
            # First round of a dynamic member: hand out an id, expect it back.
            self.pending_members[new_id] = now_ms + p.session_timeout_ms
            self._outbox.append((token, JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)))
            return
        self._add_member(p, new_id, token, now_ms)

    def _join_known(self, p: JoinParams, token: Any, now_ms: int) -> None:
        mid = p.member_id
        if mid in self.pending_members:
            del self.pending_members[mid]
            if len(self.members) >= self.max_size:
                self._outbox.append((token, JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=mid)))
                return
            self._add_member(p, mid, token, now_ms)
            return
        member = self.members.get(mid)
        if member is None:
            self._outbox.append((token, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=mid)))
            return
        if member.group_instance_id != p.group_instance_id:
            self._outbox.append((token, JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=mid)))
            return
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state == GroupState.PREPARING_REBALANCE:
            self._update_member(member, p, token)
        elif self.state == GroupState.COMPLETING_REBALANCE:
            if member.matches(p.protocols):
                # A retry of a join whose answer was lost: answer it again.
                self._outbox.append((token, self._join_result(member)))
            else:
                self._update_member(member, p, token)
                self._prepare_rebalance(now_ms)
        elif self.state == GroupState.STABLE:
            if mid == self.leader_id or not member.matches(p.protocols):
                self._update_member(member, p, token)
                self._prepare_rebalance(now_ms)
            else:
                self._outbox.append((token, self._join_result(member, with_members=False)))
        else:  # Empty: a member id from a past generation
            self._outbox.append((token, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=mid)))

    def _add_member(self, p: JoinParams, member_id: str, token: Any, now_ms: int) -> None:
        if self.is_empty:
            self.protocol_type = p.protocol_type
        member = Member(
            member_id,
            p.group_instance_id,
            p.client_id,
            p.client_host,
            p.rebalance_timeout_ms,
            p.session_timeout_ms,
            p.protocol_type,
            list(p.protocols),
            join_token=token,
            is_new=True,
            heartbeat_deadline_ms=now_ms + p.session_timeout_ms,
        )
        self.members[member_id] = member
        if p.group_instance_id is not None:
            self.static_members[p.group_instance_id] = member_id
        if self.leader_id is None:
            self.leader_id = member_id
        if self.state == GroupState.PREPARING_REBALANCE and self._initial_rebalance:
            # A new group's first rebalance waits for more members to arrive.
            self.join_deadline_ms = min(now_ms + self.initial_delay_ms, self._initial_limit_ms)
        self._prepare_rebalance(now_ms)

    def _update_member(self, member: Member, p: JoinParams, token: Any) -> None:
        member.protocols = list(p.protocols)
        member.rebalance_timeout_ms = p.rebalance_timeout_ms
        member.session_timeout_ms = p.session_timeout_ms
        member.client_id = p.client_id
        member.client_host = p.client_host
        if member.join_token is not None and member.join_token is not token:
            # A newer join from the same member replaces the waiting one.
            self._answer_join(member, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_token = token

    def _replace_static(self, p: JoinParams, token: Any, now_ms: int) -> None:
        instance = p.group_instance_id
        assert instance is not None  # only a static member is replaced (see join)
        old_id = self.static_members[instance]
        old = self.members.pop(old_id)
        fenced = ErrorCode.FENCED_INSTANCE_ID
        self._answer_join(old, JoinResult(fenced, member_id=old_id))
        self._answer_sync(old, SyncResult(fenced))
        self.pending_sync.discard(old_id)
        new_id = f"{p.client_id}-{uuid.uuid4()}"
        old.member_id = new_id
        self.members[new_id] = old
        self.static_members[instance] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        old.heartbeat_deadline_ms = now_ms + p.session_timeout_ms
        same = old.matches(p.protocols)
        if self.state == GroupState.STABLE and same:
            old.client_id, old.client_host = p.client_id, p.client_host
            self.dirty = True  # the new member id must survive a restart
            self._outbox.append((token, self._join_result(old, with_members=False)))
            return
        self._update_member(old, p, token)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(now_ms)

    def _join_result(self, member: Member, with_members: bool = True) -> JoinResult:
        members = []
        if with_members and member.member_id == self.leader_id and self.protocol_name is not None:
            members = [
                (m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()
            ]
        return JoinResult(
            ErrorCode.NONE,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            member.member_id,
            members,
        )

    # -- rebalance ---------------------------------------------------------------
    def _prepare_rebalance(self, now_ms: int) -> None:
        if self.state == GroupState.PREPARING_REBALANCE:
            return
        if self.state == GroupState.COMPLETING_REBALANCE:
            # Members waiting for their assignment must join again.
            for m in self.members.values():
                self._answer_sync(m, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self.pending_sync.clear()
        self.sync_deadline_ms = None
        starting = self.state == GroupState.EMPTY
        self._transition(GroupState.PREPARING_REBALANCE, now_ms)
        timeout = self.rebalance_timeout_ms()
        if starting and self.initial_delay_ms > 0:
            self._initial_rebalance = True
            self._initial_limit_ms = now_ms + max(timeout, self.initial_delay_ms)
            self.join_deadline_ms = now_ms + min(self.initial_delay_ms, max(timeout, self.initial_delay_ms))
        else:
            self._initial_rebalance = False
            self.join_deadline_ms = now_ms + timeout

    def can_complete_join(self, now_ms: int) -> bool:
        """DelayedJoin's condition: every known member rejoined (and no id-required round pending)."""
        if self.state != GroupState.PREPARING_REBALANCE:
            return False
        if self._initial_rebalance:
            return False  # the initial delay always runs out
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def complete_join(self, now_ms: int) -> None:
        """All rejoined, or the rebalance timeout passed: start the next generation."""
        if self.state != GroupState.PREPARING_REBALANCE:
            return
        for m in list(self.members.values()):
            if not m.awaiting_join and m.group_instance_id is None:
                self._remove(m.member_id)
        self.pending_members.clear()
        self.join_deadline_ms = None
        self._initial_rebalance = False
        self.generation_id += 1
        if self.is_empty:
            self.protocol_name = None  # (the protocol type stays, as in Kafka)
            self.leader_id = None
            self._transition(GroupState.EMPTY, now_ms)
            self.dirty = True
            return
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members or not self.members[self.leader_id].awaiting_join:
            joined = [m for m in self.members.values() if m.awaiting_join]
            self.leader_id = (joined[0] if joined else next(iter(self.members.values()))).member_id
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        for m in self.members.values():
            if m.awaiting_join:
                self._answer_join(m, self._join_result(m))
                m.is_new = False
                m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        self.pending_sync = set(self.members)
        self.sync_deadline_ms = now_ms + self.rebalance_timeout_ms()

    def expire_sync(self, now_ms: int) -> None:
        """Members that did not SyncGroup within the rebalance timeout leave."""
        if self.state != GroupState.COMPLETING_REBALANCE or not self.pending_sync:
            self.sync_deadline_ms = None
            return
        for mid in list(self.pending_sync):
            self._remove(mid, ErrorCode.REBALANCE_IN_PROGRESS)
        self.sync_deadline_ms = None
        self._after_removal(now_ms)

    # -- SyncGroup ---------------------------------------------------------------
    def sync(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        token: Any,
        now_ms: int,
    ) -> None:
        member = self.members.get(member_id)
        error = self._validate_member(member, group_instance_id, generation_id)
        if error is None and (
            (protocol_type is not None and protocol_type != self.protocol_type)
            or (protocol_name is not None and protocol_name != self.protocol_name)
        ):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            self._outbox.append((token, SyncResult(error)))
            return
        assert member is not None
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state == GroupState.PREPARING_REBALANCE:
            self._outbox.append((token, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)))
        elif self.state == GroupState.COMPLETING_REBALANCE:
            member.sync_token = token
            self.pending_sync.discard(member_id)
            if member_id == self.leader_id:
                # Stay in CompletingRebalance (syncs keep being held) until the write is durable.
                pending = self._write_in_flight
                if pending is None or pending.generation_id != self.generation_id:
                    full = {mid: bytes(assignments.get(mid, b"")) for mid in self.members}
                    self._write_in_flight = AssignmentWrite(self.generation_id, full)
                    self._writes.append(self._write_in_flight)
        else:  # Stable: a retry of a sync whose answer was lost
            self._outbox.append(
                (token, SyncResult(ErrorCode.NONE, self.protocol_type, self.protocol_name, member.assignment))
            )

    def assignment_stored(self, write: AssignmentWrite, error: int, now_ms: int) -> None:
        """The outcome of persisting `write` (error 0 = durable, else the append's error code).

        Ignored unless the group is still completing the same generation: a
        join, leave or expiry meanwhile already started another rebalance.
        """
        if write is self._write_in_flight:
            self._write_in_flight = None
        if self.state != GroupState.COMPLETING_REBALANCE or write.generation_id != self.generation_id:
            return
        if error != ErrorCode.NONE:
            error = append_error_to_response(error)
            for m in self.members.values():
                m.assignment = b""
                self._answer_sync(m, SyncResult(error))
            self._prepare_rebalance(now_ms)
            return
        for m in self.members.values():
            m.assignment = write.assignments.get(m.member_id, b"")
        self._transition(GroupState.STABLE, now_ms)
        self.pending_sync.clear()
        self.sync_deadline_ms = None
        for m in self.members.values():
            self._answer_sync(m, SyncResult(ErrorCode.NONE, self.protocol_type, self.protocol_name, m.assignment))

    def _validate_member(self, member: Member | None, instance_id: str | None, generation_id: int) -> int | None:
        if self.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if instance_id is not None:
            # As Kafka: a static instance id now held by another member id means this one was
            # replaced (fenced), not merely unknown, so it must not rejoin and fence the new one.
            holder = self.static_members.get(instance_id)
            if holder is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if member is None or holder != member.member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.group_instance_id != instance_id:
            return ErrorCode.FENCED_INSTANCE_ID
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return None

    # -- Heartbeat ---------------------------------------------------------------
    def heartbeat(self, member_id: str, group_instance_id: str | None, generation_id: int, now_ms: int) -> int:
        member = self.members.get(member_id)
        error = self._validate_member(member, group_instance_id, generation_id)
        if error is not None:
            if error == ErrorCode.ILLEGAL_GENERATION and self.state == GroupState.PREPARING_REBALANCE:
                # Kafka answers a stale generation during a rebalance with REBALANCE_IN_PROGRESS.
                assert member is not None
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
                return ErrorCode.REBALANCE_IN_PROGRESS
            return error
        assert member is not None
        if self.state == GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- leaving -------------------------------------------------------------------
    def leave(self, member_id: str, group_instance_id: str | None, now_ms: int) -> int:
        """One member of a LeaveGroup; returns its error code."""
        if self.state == GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if member_id and member_id != known:
                return ErrorCode.FENCED_INSTANCE_ID
            member_id = known
        elif member_id in self.pending_members:
            del self.pending_members[member_id]
            self._after_removal(now_ms)
            return ErrorCode.NONE
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove(member_id)
        self._after_removal(now_ms)
        return ErrorCode.NONE

    def expire_member(self, member_id: str, now_ms: int) -> bool:
        """Session timeout: remove the member if its deadline really passed."""
        if member_id in self.pending_members:
            if self.pending_members[member_id] <= now_ms:
                del self.pending_members[member_id]
                self._after_removal(now_ms)
                return True
            return False
        member = self.members.get(member_id)
        if member is None or member.heartbeat_deadline_ms > now_ms:
            return False
        if member.awaiting_join and self.state == GroupState.PREPARING_REBALANCE:
            return False  # waiting in a join: the rebalance timeout governs it
        self._remove(member_id)
        self._after_removal(now_ms)
        return True

    def _remove(self, member_id: str, error: int = ErrorCode.UNKNOWN_MEMBER_ID) -> None:
        member = self.members.pop(member_id)
        self._answer_join(member, JoinResult(error, member_id=member_id))
        self._answer_sync(member, SyncResult(error))
        self.pending_sync.discard(member_id)
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)

    def _after_removal(self, now_ms: int) -> None:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms)
        # In PreparingRebalance the caller re-checks can_complete_join.

    def to_dead(self, now_ms: int, error: int = ErrorCode.COORDINATOR_NOT_AVAILABLE) -> None:
        """Deleted (or dropped with its coordinator's shard): waiting joins and syncs get `error`."""
        for m in self.members.values():
            self._answer_join(m, JoinResult(error, member_id=m.member_id))
            self._answer_sync(m, SyncResult(error))
        self.members.clear()
        self.static_members.clear()
        self.pending_members.clear()
        self._transition(GroupState.DEAD, now_ms)

    # -- restore -----------------------------------------------------------------
    def restore(
        self,
        protocol_type: str | None,
        generation_id: int,
        protocol_name: str | None,
        leader_id: str | None,
        members: list[Member],
        now_ms: int,
        state_timestamp: int = -1,
    ) -> None:
        """State from a GroupMetadata record (start-up replay); `state_timestamp` is the
        record's currentStateTimestamp (-1: none written, the state time becomes now)."""
        self.protocol_type = protocol_type
        self.generation_id = generation_id
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.members = {m.member_id: m for m in members}
        self.static_members = {m.group_instance_id: m.member_id for m in members if m.group_instance_id}
        for m in members:
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        self._transition(GroupState.STABLE if members else GroupState.EMPTY, now_ms)
        if state_timestamp >= 0:
            self.state_timestamp = state_timestamp
