"""A classic-group member (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) as a sans-IO state machine.

Why sans-IO: every rule of the classic protocol that a member must follow is
a decision on (current state, a response's error code, the time): when to
rejoin, whether a failed request may still reset the generation, when the
session or the poll interval ran out. Those decisions live here as plain
method calls with an injected ``now_ms``, tested without sockets; the asyncio
shell (``client.consumer.group.coordinator``) only sends what this object asks for and
reports what came back.

The rules are those of Kafka's Java ``AbstractCoordinator`` (eager protocol):

* states UNJOINED -> PREPARING_REBALANCE (JoinGroup sent) ->
  COMPLETING_REBALANCE (SyncGroup sent) -> STABLE;
* MEMBER_ID_REQUIRED: take the member id the broker gave, join again at once;
  UNKNOWN_MEMBER_ID: forget the member id and rejoin; ILLEGAL_GENERATION:
  forget the generation but keep the member id; REBALANCE_IN_PROGRESS: rejoin;
  FENCED_INSTANCE_ID and configuration errors are fatal;
* an error answering a request sent in an *older* generation changes nothing
  (``generation unchanged`` check), so a late response cannot undo a newer join;
* heartbeats run in COMPLETING_REBALANCE and STABLE every
  ``heartbeat.interval.ms`` (after a failure, after ``retry.backoff.ms``);
  a session without a successful heartbeat for ``session.timeout.ms`` means
  the coordinator is treated as unknown; an application that has not polled
  for ``max.poll.interval.ms`` leaves the group and rejoins on its next poll.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from shoal.protocol.errors import ErrorCode, error_for

__all__ = ["NO_GENERATION", "Generation", "GroupMembership", "MemberState", "Next"]

NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing_rebalance"
    COMPLETING_REBALANCE = "completing_rebalance"
    STABLE = "stable"


class Next(enum.Enum):
    """What the shell does after handing a join/sync response to the member."""

    SYNC = "sync"  # JoinGroup succeeded: send SyncGroup (the leader computes the assignment first)
    DONE = "done"  # SyncGroup succeeded: the assignment is in hand
    REJOIN = "rejoin"  # send JoinGroup again now
    BACKOFF = "backoff"  # send JoinGroup again after retry.backoff.ms
    FIND_COORDINATOR = "find_coordinator"  # the coordinator moved: rediscover, then rejoin
    FATAL = "fatal"  # raise ``fatal_error`` to the application


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    protocol_name: str | None = None

    @property
    def has_member_id(self) -> bool:
        return self.member_id != UNKNOWN_MEMBER_ID


_FATAL_JOIN = frozenset(
    {
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode.INVALID_SESSION_TIMEOUT,
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.INVALID_REQUEST,
    }
)
_COORDINATOR_GONE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


class GroupMembership:
    """One member's view of its classic group; every method takes the time explicitly."""

    def __init__(
        self,
        group_id: str,
        *,
        group_instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        heartbeat_interval_ms: int,
        retry_backoff_ms: int,
        now_ms: float,
    ) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.state = MemberState.UNJOINED
        self.generation = Generation()
        self.rejoin_needed = True
        self.is_leader = False
        self.leader_id = ""
        self.fatal_error: int | None = None
        self.rejoin_reason = "initial join"
        self._session_deadline = now_ms + session_timeout_ms
        self._poll_deadline = now_ms + rebalance_timeout_ms
        self._heartbeat_due = now_ms + heartbeat_interval_ms
        self.heartbeat_in_flight = False

    # -- queries -----------------------------------------------------------------------
    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def needs_join(self) -> bool:
        return self.fatal_error is None and (self.rejoin_needed or self.state is MemberState.UNJOINED)

    @property
    def rebalancing(self) -> bool:
        """A JoinGroup or SyncGroup is under way (commits wait for it)."""
        return self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)

    def generation_if_stable(self) -> Generation | None:
        """The generation to commit with, or None while not a settled member."""
        return self.generation if self.state is MemberState.STABLE else None

    def has_generation(self) -> bool:
        return self.generation.generation_id != NO_GENERATION and self.generation.has_member_id

    def _unchanged(self, sent: Generation) -> bool:
        return sent == self.generation

    # -- joining -----------------------------------------------------------------------
    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            self.rejoin_reason = reason
        self.rejoin_needed = True

    def join_started(self, now_ms: float) -> str:
        """A JoinGroup goes out now; returns the member id to send."""
        self.state = MemberState.PREPARING_REBALANCE
        self.heartbeat_in_flight = False
        return self.generation.member_id

    def on_join_response(
        self,
        error: int,
        *,
        generation_id: int,
        member_id: str,
        leader: str,
        protocol_name: str | None,
        now_ms: float,
    ) -> Next:
        if error == ErrorCode.NONE:
            if self.state is not MemberState.PREPARING_REBALANCE:
                # We left (poll timeout, close) while the join was pending.
                return Next.REJOIN
            self.generation = Generation(generation_id, member_id, protocol_name)
            self.leader_id = leader
            self.is_leader = leader == member_id
            self.state = MemberState.COMPLETING_REBALANCE
            self._session_deadline = now_ms + self.session_timeout_ms
            self._heartbeat_due = now_ms + self.heartbeat_interval_ms
            return Next.SYNC
        self.state = MemberState.UNJOINED
        if error == ErrorCode.MEMBER_ID_REQUIRED:
            self.generation = Generation(NO_GENERATION, member_id, None)
            return Next.REJOIN
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.generation = Generation()
            return Next.REJOIN
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            return Next.REJOIN
        if error in _COORDINATOR_GONE:
            return Next.FIND_COORDINATOR
        if error in _FATAL_JOIN:
            self.fatal_error = error
            return Next.FATAL
        if error_for(error).retriable:
            return Next.BACKOFF
        self.fatal_error = error
        return Next.FATAL

    def sync_generation(self) -> Generation:
        return self.generation

    def on_sync_response(self, error: int, sent: Generation, now_ms: float) -> Next:
        if error == ErrorCode.NONE:
            if self.state is not MemberState.COMPLETING_REBALANCE or not self._unchanged(sent):
                return Next.REJOIN
            self.state = MemberState.STABLE
            self.rejoin_needed = False
            self._session_deadline = now_ms + self.session_timeout_ms
            self._heartbeat_due = now_ms + self.heartbeat_interval_ms
            return Next.DONE
        self.state = MemberState.UNJOINED
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("SyncGroup: rebalance in progress")
            return Next.REJOIN
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            if self._unchanged(sent):
                self.reset_generation(reset_member_id=error == ErrorCode.UNKNOWN_MEMBER_ID)
            return Next.REJOIN
        if error in _COORDINATOR_GONE:
            self.request_rejoin("SyncGroup: coordinator moved")
            return Next.FIND_COORDINATOR
        if error == ErrorCode.FENCED_INSTANCE_ID and not self._unchanged(sent):
            return Next.REJOIN
        if error in _FATAL_JOIN or not error_for(error).retriable:
            self.fatal_error = error
            return Next.FATAL
        return Next.BACKOFF

    def on_join_failed(self) -> None:
        """The JoinGroup/SyncGroup never got an answer (connection lost, timeout)."""
        if self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
            self.state = MemberState.UNJOINED
        self.rejoin_needed = True

    # -- generation --------------------------------------------------------------------
    def reset_generation(self, *, reset_member_id: bool) -> None:
        """Forget the generation (and maybe the member id): everything held is lost."""
        member_id = UNKNOWN_MEMBER_ID if reset_member_id else self.generation.member_id
        self.generation = Generation(NO_GENERATION, member_id, None)
        self.state = MemberState.UNJOINED
        self.is_leader = False
        self.rejoin_needed = True

    # -- heartbeats ----------------------------------------------------------------------
    def heartbeat_wait_ms(self, now_ms: float) -> float | None:
        """Milliseconds until a heartbeat is due; None while heartbeats are off."""
        if self.state not in (MemberState.COMPLETING_REBALANCE, MemberState.STABLE) or self.heartbeat_in_flight:
            return None
        if self.fatal_error is not None:
            return None
        return max(0.0, self._heartbeat_due - now_ms)

    def on_heartbeat_sent(self, now_ms: float) -> Generation:
        self.heartbeat_in_flight = True
        self._heartbeat_due = now_ms + self.heartbeat_interval_ms
        return self.generation

    def on_heartbeat_response(self, error: int, sent: Generation, now_ms: float) -> bool:
        """Apply a Heartbeat answer; True when the coordinator must be rediscovered."""
        self.heartbeat_in_flight = False
        if error == ErrorCode.NONE:
            self._session_deadline = now_ms + self.session_timeout_ms
            return False
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            self._session_deadline = now_ms + self.session_timeout_ms
            if self.state is MemberState.STABLE:
                self.request_rejoin("the group is rebalancing")
            return False
        if error in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            if self._unchanged(sent):
                if error == ErrorCode.FENCED_INSTANCE_ID:
                    self.fatal_error = error
                self.reset_generation(reset_member_id=error != ErrorCode.ILLEGAL_GENERATION)
            return False
        self._heartbeat_due = now_ms + self.retry_backoff_ms
        return error in _COORDINATOR_GONE

    def on_heartbeat_failed(self, now_ms: float) -> None:
        """No answer (connection lost, timeout): try again after the backoff."""
        self.heartbeat_in_flight = False
        self._heartbeat_due = now_ms + self.retry_backoff_ms

    def session_expired(self, now_ms: float) -> bool:
        return now_ms > self._session_deadline

    def reset_session(self, now_ms: float) -> None:
        self._session_deadline = now_ms + self.session_timeout_ms

    # -- polling -----------------------------------------------------------------------
    def on_poll(self, now_ms: float) -> None:
        self._poll_deadline = now_ms + self.rebalance_timeout_ms

    def poll_expired(self, now_ms: float) -> bool:
        return self.state is not MemberState.UNJOINED and now_ms > self._poll_deadline

    def poll_wait_ms(self, now_ms: float) -> float:
        return max(0.0, self._poll_deadline - now_ms)

    # -- commits -------------------------------------------------------------------------
    def on_commit_error(self, error: int, sent: Generation) -> None:
        """An OffsetCommit answered with a group error."""
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            if self._unchanged(sent):
                self.reset_generation(reset_member_id=error == ErrorCode.UNKNOWN_MEMBER_ID)
        elif error == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("OffsetCommit: rebalance in progress")
        elif error == ErrorCode.FENCED_INSTANCE_ID and self._unchanged(sent):
            self.fatal_error = error

    # -- leaving -------------------------------------------------------------------------
    def leave(self) -> Generation | None:
        """Leave the group; returns the generation to name in LeaveGroup, or None when
        none is due (static members stay registered until their session expires)."""
        send = None
        if not self.is_static and self.state is not MemberState.UNJOINED and self.generation.has_member_id:
            send = self.generation
        self.reset_generation(reset_member_id=True)
        return send
