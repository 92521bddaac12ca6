"""A KIP-848 consumer group (ConsumerGroupHeartbeat) as a sans-IO state machine.

Why this exists: with the consumer protocol the coordinator computes the
assignment and every member moves towards it on its own heartbeats; nobody
stops the world. Three epochs say who should own what:

* ``group_epoch`` -- bumped by a heartbeat (or expiry) that changes the
  membership, a subscription (names, regex, server assignor) or the metadata
  of the subscribed topics (a hash over name, id and partition count, so new
  partitions and newly matching topics count);
* ``assignment_epoch`` -- the group epoch the target assignment was computed
  for; when the group epoch is ahead the next heartbeat recomputes the target
  with the group's assignor (the old target as input for stickiness);
* each member's ``member_epoch`` -- the target epoch it has reconciled to.

Reconciliation follows Kafka's member state machine (CurrentAssignmentBuilder):
a member first keeps only what it holds of its target and is asked to revoke
the rest (UNREVOKED_PARTITIONS, epoch unchanged); once a heartbeat reports
those partitions gone it takes the epoch of the target and the partitions of
its target that no other member still holds; partitions another member has
yet to revoke stay out of its assignment (UNRELEASED_PARTITIONS) until they
are free. So a partition is never held by two members at once. ``owners``
maps each held or revoking partition to its member.

The object does no I/O and reads no clock: callers pass ``now_ms`` and the
broker's topic metadata (name -> (topic id, partition count)) on each call.
Deadlines (session timeouts, and rebalance timeouts of members asked to
revoke) are reported through :meth:`next_deadline_ms` and enforced by
:meth:`expire`. ``dirty`` says something a record holds changed.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from shoal.broker.groups.consumer.assignor import ASSIGNORS
from shoal.broker.groups.consumer.regex import RegexError, compile_java
from shoal.broker.groups.share.group import metadata_hash
from shoal.protocol.errors import ErrorCode

__all__ = ["ClassicMeta", "ConsumerGroup", "ConsumerMember", "HeartbeatParams", "HeartbeatResult"]

EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"

# Kafka's MemberState codes (as stored in ConsumerGroupCurrentMemberAssignment)
M_STABLE, M_UNREVOKED, M_UNRELEASED = 0, 1, 2

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2

Parts = dict[uuid.UUID, frozenset[int]]
Topics = Mapping[str, tuple[uuid.UUID, int]]


@dataclass(slots=True)
class ClassicMeta:
    """What a member speaking the classic protocol (JoinGroup/SyncGroup) adds (see migration.py)."""

    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]  # (name, ConsumerProtocol subscription), the client's order
    rejoin_deadline_ms: int | None = None  # asked to rejoin, or joined and yet to sync (not written)


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: frozenset[str] = frozenset()
    regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300000
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = M_STABLE
    assigned: Parts = field(default_factory=dict)
    revoking: Parts = field(default_factory=dict)
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    classic: ClassicMeta | None = None


@dataclass(slots=True)
class HeartbeatParams:
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_names: list[str] | None = None
    regex: str | None = None
    server_assignor: str | None = None
    owned: Parts | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class HeartbeatResult:
    error: int
    member_id: str
    member_epoch: int
    assignment: Parts | None = None
    message: str | None = None


def _err(code: int, p: HeartbeatParams, message: str) -> HeartbeatResult:
    return HeartbeatResult(code, p.member_id, p.member_epoch, None, message)


def _holds_any(owned: Parts, parts: Parts) -> bool:
    return any(owned.get(t, frozenset()) & ps for t, ps in parts.items())


def _subset(owned: Parts, parts: Parts) -> bool:
    return all(ps <= parts.get(t, frozenset()) for t, ps in owned.items())


def _clean(parts: Mapping[uuid.UUID, Iterable[int]]) -> Parts:
    return {t: frozenset(ps) for t, ps in parts.items() if ps}


class ConsumerGroup:
    def __init__(self, group_id: str, now_ms: int, default_assignor: str = "uniform") -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.metadata_hash = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Parts] = {}
        self.owners: dict[tuple[uuid.UUID, int], str] = {}
        self.default_assignor = default_assignor
        self.assignor_name = default_assignor
        self.state = EMPTY
        self.state_timestamp = now_ms
        self.dirty = False

    # -- derived state -----------------------------------------------------------------
    def update_state(self, now_ms: int) -> None:
        if self.state == DEAD:
            return
        if not self.members:
            state = EMPTY
        elif self.group_epoch > self.assignment_epoch:
            state = ASSIGNING
        elif any(
            m.state != M_STABLE or m.member_epoch != self.assignment_epoch
            for m in self.members.values()
            if m.member_epoch != STATIC_LEAVE_EPOCH
        ):
            state = RECONCILING
        else:
            state = STABLE
        if state != self.state:
            self.state, self.state_timestamp = state, now_ms

    def rebuild(self, now_ms: int) -> None:
        """Owners, static ids and state from the members (after a replay)."""
        self.owners = {}
        self.static = {}
        for m in self.members.values():
            self._own(m)
            if m.instance_id is not None:
                self.static[m.instance_id] = m.member_id
        self.update_state(now_ms)

    def _own(self, m: ConsumerMember) -> None:
        for parts in (m.assigned, m.revoking):
            for t, ps in parts.items():
                for p in ps:
                    self.owners[(t, p)] = m.member_id

    def _disown(self, m: ConsumerMember) -> None:
        for parts in (m.assigned, m.revoking):
            for t, ps in parts.items():
                for p in ps:
                    if self.owners.get((t, p)) == m.member_id:
                        del self.owners[(t, p)]

    def subscribed_names(self, topics: Topics) -> set[str]:
        """Every existing topic some member subscribes to, by name or regex."""
        out: set[str] = set()
        for m in self.members.values():
            out |= self.member_topics(m, topics)
        return out

    def member_topics(self, m: ConsumerMember, topics: Topics) -> frozenset[str]:
        names = m.subscribed_names
        if m.regex:
            try:
                pat = compile_java(m.regex)
            except RegexError:
                return names
            names = names | frozenset(n for n in topics if pat.fullmatch(n))
        return names

    def _bump(self) -> None:
        self.group_epoch += 1
        self.dirty = True

    def is_empty(self) -> bool:
        return not self.members

    def next_deadline_ms(self) -> int | None:
        times = [m.session_deadline_ms for m in self.members.values()]
        times += [m.revocation_deadline_ms for m in self.members.values() if m.revocation_deadline_ms is not None]
        times += [
            m.classic.rejoin_deadline_ms
            for m in self.members.values()
            if m.classic is not None and m.classic.rejoin_deadline_ms is not None
        ]
        return min(times) if times else None

    # -- membership changes ----------------------------------------------------------------
    def remove(self, member_id: str) -> None:
        m = self.members.pop(member_id)
        self._disown(m)
        if m.instance_id is not None and self.static.get(m.instance_id) == member_id:
            del self.static[m.instance_id]
        self.target.pop(member_id, None)
        self._bump()

    def expire(self, now_ms: int) -> list[str]:
        """Remove members whose session ran out, or who did not revoke (or, classic ones, rejoin or
        sync) within their rebalance timeout."""
        gone = [
            mid
            for mid, m in self.members.items()
            if m.session_deadline_ms <= now_ms
            or (m.revocation_deadline_ms is not None and m.revocation_deadline_ms <= now_ms)
            or (
                m.classic is not None
                and m.classic.rejoin_deadline_ms is not None
                and m.classic.rejoin_deadline_ms <= now_ms
            )
        ]
        for mid in gone:
            self.remove(mid)
        if gone:
            self.update_state(now_ms)
        return gone

    def pick_assignor(self) -> str:
        wanted = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not wanted:
            return self.default_assignor
        return sorted(wanted.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]

    def compute_target(self, topics: Topics) -> None:
        ids = {}
        counts = {}
        for name, (tid, count) in topics.items():
            ids[name] = tid
            counts[tid] = count
        subs = {}
        memo: dict[frozenset[str], frozenset[uuid.UUID]] = {}
        for mid, m in self.members.items():
            names = self.member_topics(m, topics)
            got = memo.get(names)
            if got is None:
                got = memo[names] = frozenset(ids[n] for n in names if n in ids)
            subs[mid] = got
        self.assignor_name = self.pick_assignor()
        fn = ASSIGNORS.get(self.assignor_name, ASSIGNORS["uniform"])
        current = {mid: t for mid, t in self.target.items() if mid in self.members}
        result = fn(subs, counts, current)
        self.target = {mid: result.get(mid, {}) for mid in self.members}
        self.assignment_epoch = self.group_epoch
        self.dirty = True

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------
    def heartbeat(
        self,
        p: HeartbeatParams,
        topics: Topics,
        now_ms: int,
        session_timeout_ms: int,
        max_size: int,
        known_assignor: Callable[[str], bool] = ASSIGNORS.__contains__,
    ) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat (request-level checks done by the caller)."""
        if self.state == DEAD:
            return _err(ErrorCode.COORDINATOR_NOT_AVAILABLE, p, "The group is being deleted.")
        if p.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(p, now_ms)
        if p.server_assignor is not None and not known_assignor(p.server_assignor):
            return _err(ErrorCode.UNSUPPORTED_ASSIGNOR, p, f"ServerAssignor {p.server_assignor} is not supported.")
        if p.regex is not None:
            try:
                compile_java(p.regex)
            except RegexError as e:
                return _err(ErrorCode.INVALID_REGULAR_EXPRESSION, p, str(e))

        bump = False
        m = self.members.get(p.member_id)
        full = p.member_epoch == JOIN_EPOCH
        if full:
            if p.instance_id is not None and p.instance_id in self.static and self.static[p.instance_id] != p.member_id:
                old = self.members[self.static[p.instance_id]]
                if old.member_epoch != STATIC_LEAVE_EPOCH and old.classic is None:
                    return _err(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        p,
                        f"Static member {old.member_id} with instance id {p.instance_id} is still active.",
                    )
                m = self._replace_static(old, p.member_id)
                if old.classic is not None:  # a classic static member restarted with the consumer protocol
                    m.member_epoch = m.previous_member_epoch = 0
            elif m is None:
                if len(self.members) >= max_size:
                    return _err(ErrorCode.GROUP_MAX_SIZE_REACHED, p, f"The group reached its maximum size {max_size}.")
                m = self.members[p.member_id] = ConsumerMember(p.member_id, instance_id=p.instance_id)
                if p.instance_id is not None:
                    self.static[p.instance_id] = p.member_id
                bump = True
            else:  # a known member starting over: it holds nothing any more
                self._disown(m)
                m.assigned, m.revoking, m.state, m.revocation_deadline_ms = {}, {}, M_STABLE, None
                m.previous_member_epoch, m.member_epoch = m.member_epoch, 0
                self.dirty = True
        else:
            if m is None:
                return _err(
                    ErrorCode.UNKNOWN_MEMBER_ID, p, f"Member {p.member_id} is not a member of group {self.group_id}."
                )
            if p.instance_id is not None and self.static.get(p.instance_id) != p.member_id:
                return _err(ErrorCode.FENCED_INSTANCE_ID, p, f"Instance id {p.instance_id} belongs to another member.")
            if p.member_epoch > m.member_epoch or (
                p.member_epoch < m.member_epoch
                and not (
                    p.member_epoch == m.previous_member_epoch and p.owned is not None and _subset(p.owned, m.assigned)
                )
            ):
                return _err(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    p,
                    f"The member epoch {p.member_epoch} does not match the expected epoch {m.member_epoch}.",
                )

        # The request is accepted.
        if p.subscribed_names is not None:
            names = frozenset(p.subscribed_names)
            if names != m.subscribed_names:
                m.subscribed_names, bump = names, True
        if p.regex is not None:
            regex = p.regex or None
            if regex != m.regex:
                m.regex, bump = regex, True
        if p.server_assignor is not None and p.server_assignor != m.server_assignor:
            m.server_assignor, bump = p.server_assignor, True
        if p.rack_id is not None and p.rack_id != m.rack_id:
            m.rack_id, self.dirty = p.rack_id, True
        if p.rebalance_timeout_ms != -1 and p.rebalance_timeout_ms != m.rebalance_timeout_ms:
            m.rebalance_timeout_ms, self.dirty = p.rebalance_timeout_ms, True
        if (p.client_id, p.client_host) != (m.client_id, m.client_host):
            m.client_id, m.client_host, self.dirty = p.client_id, p.client_host, True
        m.session_deadline_ms = now_ms + session_timeout_ms

        h = metadata_hash(self.subscribed_names(topics), topics)
        if h != self.metadata_hash:
            self.metadata_hash, bump = h, True
        if bump:
            self._bump()
        if self.group_epoch > self.assignment_epoch:
            self.compute_target(topics)

        before = m.assigned
        self._reconcile(m, p.owned, now_ms)
        self.update_state(now_ms)
        send = full or m.assigned != before or (p.owned is not None and p.owned != m.assigned)
        return HeartbeatResult(ErrorCode.NONE, m.member_id, m.member_epoch, dict(m.assigned) if send else None)

    def _replace_static(self, old: ConsumerMember, new_id: str) -> ConsumerMember:
        """A static member came back under a new member id: it takes over the old one's place."""
        self._disown(old)
        del self.members[old.member_id]
        m = ConsumerMember(
            new_id,
            instance_id=old.instance_id,
            rack_id=old.rack_id,
            subscribed_names=old.subscribed_names,
            regex=old.regex,
            server_assignor=old.server_assignor,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            member_epoch=old.previous_member_epoch,
            previous_member_epoch=old.previous_member_epoch,
            assigned=old.assigned,
        )
        self.members[new_id] = m
        self._own(m)
        assert m.instance_id is not None
        self.static[m.instance_id] = new_id
        if old.member_id in self.target:
            self.target[new_id] = self.target.pop(old.member_id)
        self.dirty = True
        return m

    def _leave(self, p: HeartbeatParams, now_ms: int) -> HeartbeatResult:
        if p.instance_id is not None:
            mid = self.static.get(p.instance_id)
            if mid is None:
                return _err(ErrorCode.UNKNOWN_MEMBER_ID, p, f"Instance id {p.instance_id} is unknown.")
            if mid != p.member_id:
                return _err(ErrorCode.FENCED_INSTANCE_ID, p, f"Instance id {p.instance_id} belongs to another member.")
        elif p.member_epoch == STATIC_LEAVE_EPOCH:
            return _err(ErrorCode.INVALID_REQUEST, p, "InstanceId can't be null.")
        m = self.members.get(p.member_id)
        if m is None:
            return _err(
                ErrorCode.UNKNOWN_MEMBER_ID, p, f"Member {p.member_id} is not a member of group {self.group_id}."
            )
        if p.member_epoch == STATIC_LEAVE_EPOCH:
            # Away for a while: it keeps its partitions until its session runs out or it comes back.
            if m.member_epoch != STATIC_LEAVE_EPOCH:
                m.previous_member_epoch, m.member_epoch = m.member_epoch, STATIC_LEAVE_EPOCH
                self.dirty = True
        else:
            self.remove(p.member_id)
        self.update_state(now_ms)
        return HeartbeatResult(ErrorCode.NONE, p.member_id, p.member_epoch)

    # -- reconciliation (Kafka's CurrentAssignmentBuilder) --------------------------------------
    def _reconcile(self, m: ConsumerMember, owned: Parts | None, now_ms: int) -> None:
        if m.state == M_UNREVOKED:
            if owned is None or _holds_any(owned, m.revoking):
                if m.member_epoch < self.assignment_epoch:
                    self._next(m, m.member_epoch, m.assigned, m.revoking, now_ms)  # the target moved meanwhile
                return
            self._next(m, m.member_epoch, m.assigned, {}, now_ms, owned)
        elif m.state == M_UNRELEASED or m.member_epoch != self.assignment_epoch:
            self._next(m, m.member_epoch, m.assigned, m.revoking, now_ms, owned)

    def _next(
        self, m: ConsumerMember, epoch: int, assigned: Parts, revoking: Parts, now_ms: int, owned: Parts | None = None
    ) -> None:
        target = self.target.get(m.member_id, {})
        keep: dict[uuid.UUID, frozenset[int]] = {}
        revoke: dict[uuid.UUID, frozenset[int]] = {}
        free: dict[uuid.UUID, frozenset[int]] = {}
        unreleased = False
        for t in set(target) | set(assigned) | set(revoking):
            want = target.get(t, frozenset())
            have = assigned.get(t, frozenset())
            k = have & want
            r = (have | revoking.get(t, frozenset())) - want
            add = want - have
            f = frozenset(p for p in add if self.owners.get((t, p), m.member_id) == m.member_id)
            if k:
                keep[t] = k
            if r:
                revoke[t] = r
            if f:
                free[t] = f
            if len(f) < len(add):
                unreleased = True
        old = (m.member_epoch, m.state, m.assigned, m.revoking)
        self._disown(m)
        if revoke and (owned is None or _holds_any(owned, revoke)):
            # Revoke first: no new partitions and no new epoch until the member gave them up
            # (unless the partitions it reported owning show it already has).
            if m.state != M_UNREVOKED:
                m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
            m.state, m.assigned, m.revoking = M_UNREVOKED, keep, revoke
            new_epoch = epoch
        else:
            m.revocation_deadline_ms = None
            m.assigned = {t: keep.get(t, frozenset()) | free.get(t, frozenset()) for t in set(keep) | set(free)}
            m.revoking = {}
            m.state = M_UNRELEASED if unreleased else M_STABLE
            new_epoch = self.assignment_epoch
        if new_epoch != m.member_epoch:
            m.previous_member_epoch, m.member_epoch = m.member_epoch, new_epoch
        self._own(m)
        if (m.member_epoch, m.state, m.assigned, m.revoking) != old:
            self.dirty = True

    def mark_dead(self, now_ms: int) -> None:
        self.state, self.state_timestamp = DEAD, now_ms
