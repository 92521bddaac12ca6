"""Online migration between classic and consumer groups (Kafka 4.2), sans-IO.

Why: a running application moves from the classic protocol to KIP-848 one
instance at a time. Its group must keep working while both kinds of member
share it, and must go back if the rollout is undone. Kafka's rules, ruled by
``group.consumer.migration.policy`` (bidirectional, upgrade, downgrade,
disabled):

* upgrade -- a live classic group of protocol type ``consumer`` gets its first
  ConsumerGroupHeartbeat member: it becomes a consumer group whose classic
  members keep their subscription and their last assignment (decoded from the
  ConsumerProtocol bytes), at member epoch = group epoch = target epoch = the
  classic generation; the new member then bumps the epoch as any join does.
* classic members inside a consumer group keep speaking JoinGroup, SyncGroup,
  Heartbeat and LeaveGroup. A JoinGroup is a full heartbeat: it updates the
  member and reconciles it against the target with the partitions its
  subscription says it owns; the generation it answers is the member epoch
  and SyncGroup hands out the member's current assignment. A heartbeat asks
  the member to rejoin (REBALANCE_IN_PROGRESS) while it lags the group epoch,
  has partitions to revoke, or has freed partitions waiting for it; a member
  that then does not rejoin, or joins and does not sync, within its
  rebalance timeout is removed.
* downgrade -- when a member is fenced (leaves or expires) and every member
  left uses the classic protocol, the group becomes a classic group of
  generation = group epoch holding the target assignment, and a rebalance
  starts.

The functions here only compute; the caller (``ConsumerGroupService``)
writes the records, both conversions in one batch so a crash never leaves
two groups of one id.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from shoal.broker.groups.classic import ClassicGroup, JoinParams, JoinResult, Member, SyncResult
from shoal.broker.groups.consumer.group import (
    M_UNRELEASED,
    M_UNREVOKED,
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    Topics,
)
from shoal.broker.groups.share.group import metadata_hash
from shoal.protocol.coordinator_records import decode_versioned, encode_versioned
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.messages import ConsumerProtocolAssignment

PROTOCOL_TYPE = "consumer"
POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


class MigrationError(Exception):
    """A classic group's embedded consumer protocol cannot be read."""


def upgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("bidirectional", "upgrade")


def downgrade_enabled(policy: str) -> bool:
    return policy.lower() in ("bidirectional", "downgrade")


# -- ConsumerProtocol bytes ------------------------------------------------------------------
def _subscription(data: bytes) -> tuple[int, Any]:
    try:
        return decode_versioned("ConsumerProtocolSubscription", data)
    except (ProtocolError, ValueError) as e:
        raise MigrationError(f"malformed subscription: {e}") from e


def _ids(entries: Any, topics: Topics) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for e in entries or ():
        known = topics.get(e.topic)
        if known is not None and e.partitions:
            out[known[0]] = out.get(known[0], frozenset()) | frozenset(e.partitions)
    return out


def decode_assignment(data: bytes, topics: Topics) -> dict[uuid.UUID, frozenset[int]]:
    if not data:
        return {}
    try:
        _, a = decode_versioned("ConsumerProtocolAssignment", data)
    except (ProtocolError, ValueError) as e:
        raise MigrationError(f"malformed assignment: {e}") from e
    return _ids(a.assigned_partitions, topics)


def encode_assignment(parts: Mapping[uuid.UUID, frozenset[int]], names: Mapping[uuid.UUID, str], version: int) -> bytes:
    cls = ConsumerProtocolAssignment
    tps = [
        cls.TopicPartition(topic=names[t], partitions=sorted(ps))
        for t, ps in sorted(parts.items(), key=lambda kv: names.get(kv[0], ""))
        if ps and t in names
    ]
    return encode_versioned("ConsumerProtocolAssignment", min(max(version, 0), 3), cls(assigned_partitions=tps))


def _version(meta: ClassicMeta) -> int:
    try:
        return _subscription(meta.protocols[0][1])[0]
    except (MigrationError, IndexError):
        return 0


# -- upgrade ---------------------------------------------------------------------------------
def can_upgrade(classic: ClassicGroup, policy: str, max_size: int) -> bool:
    """Kafka's validateOnlineUpgrade."""
    return (
        upgrade_enabled(policy)
        and classic.protocol_type == PROTOCOL_TYPE
        and classic.protocol_name is not None
        and len(classic.members) <= max_size
    )


def from_classic(classic: ClassicGroup, topics: Topics, now_ms: int, default_assignor: str) -> ConsumerGroup:
    """The consumer group a live classic group becomes (raises MigrationError on bad bytes)."""
    g = ConsumerGroup(classic.group_id, now_ms, default_assignor)
    gen = classic.generation_id
    g.group_epoch = g.assignment_epoch = gen
    assert classic.protocol_name is not None
    for cm in classic.members.values():
        _, sub = _subscription(cm.metadata(classic.protocol_name))
        assigned = decode_assignment(cm.assignment, topics)
        m = ConsumerMember(
            cm.member_id,
            instance_id=cm.group_instance_id,
            rack_id=getattr(sub, "rack_id", None),
            client_id=cm.client_id,
            client_host=cm.client_host,
            subscribed_names=frozenset(sub.topics),
            rebalance_timeout_ms=cm.rebalance_timeout_ms,
            member_epoch=gen,
            previous_member_epoch=gen,
            assigned=assigned,
            session_deadline_ms=now_ms + cm.session_timeout_ms,
            classic=ClassicMeta(cm.session_timeout_ms, [(n, bytes(md)) for n, md in cm.protocols]),
        )
        g.members[m.member_id] = m
        g.target[m.member_id] = dict(assigned)
    g.metadata_hash = metadata_hash(g.subscribed_names(topics), topics)
    g.rebuild(now_ms)
    g.dirty = True
    return g


# -- downgrade -------------------------------------------------------------------------------
def can_downgrade(g: ConsumerGroup, policy: str, classic_max_size: int) -> bool:
    """After a member was fenced: the rest all speak the classic protocol (and fit a classic group)."""
    rest = list(g.members.values())
    return (
        bool(rest)
        and all(m.classic is not None for m in rest)
        and downgrade_enabled(policy)
        and len(rest) <= classic_max_size
    )


def to_classic(g: ConsumerGroup, classic: ClassicGroup, names: Mapping[uuid.UUID, str], now_ms: int) -> None:
    """Fill an empty ClassicGroup from a consumer group of classic members, then start a rebalance."""
    members = []
    for m in g.members.values():
        assert m.classic is not None
        members.append(
            Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.classic.session_timeout_ms,
                PROTOCOL_TYPE,
                list(m.classic.protocols),
                encode_assignment(g.target.get(m.member_id, {}), names, _version(m.classic)),
            )
        )
    leader = members[0].member_id if members else None
    classic.restore(PROTOCOL_TYPE, g.group_epoch, None, leader, members, now_ms)
    classic.protocol_type = PROTOCOL_TYPE
    classic.protocol_name = classic._select_protocol()
    classic._prepare_rebalance(now_ms)
    classic.dirty = True


# -- classic members inside a consumer group ----------------------------------------------------
def _supports(g: ConsumerGroup, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
    if protocol_type != PROTOCOL_TYPE or not protocols:
        return False
    classic = [m.classic for m in g.members.values() if m.classic is not None]
    return any(all(any(n == name for n, _ in c.protocols) for c in classic) for name, _ in protocols)


def _find(g: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember | int:
    if instance_id is not None:
        mid = g.static.get(instance_id)
        if mid is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if mid != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    m = g.members.get(member_id)
    if m is None or m.classic is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return m


def classic_join(g: ConsumerGroup, p: JoinParams, topics: Topics, now_ms: int, max_size: int) -> JoinResult:
    """A JoinGroup to a (non-empty) consumer group: the member joins or reconciles; answered at once."""
    unknown = not p.member_id
    member_id = p.member_id or str(uuid.uuid4())
    if unknown and len(g.members) >= max_size:
        return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=member_id)
    if not _supports(g, p.protocol_type, p.protocols):
        return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=p.member_id)
    if unknown and p.require_known_member_id and p.group_instance_id is None:
        return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
    try:
        _, sub = _subscription(p.protocols[0][1])
    except MigrationError:
        return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=p.member_id)

    bump = False
    iid = p.group_instance_id
    m: ConsumerMember | None
    if iid is not None and iid in g.static:
        old = g.members[g.static[iid]]
        if old.member_id == member_id:
            m = old
        elif unknown:  # a restarted static member takes the place of the old one, whichever its protocol
            m = g._replace_static(old, member_id)
            m.member_epoch = m.previous_member_epoch = 0
            m.classic = ClassicMeta(p.session_timeout_ms, [])
        else:
            return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=p.member_id)
    else:
        m = g.members.get(member_id)  # an id the coordinator gave out (MEMBER_ID_REQUIRED) is taken as is
    if m is None:
        m = g.members[member_id] = ConsumerMember(member_id, instance_id=iid)
        if iid is not None:
            g.static[iid] = member_id
        bump = True
    elif m.classic is None:
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=p.member_id)

    names = frozenset(sub.topics)
    if names != m.subscribed_names or m.regex is not None:
        m.subscribed_names, m.regex, bump = names, None, True
    m.server_assignor = None
    rack = getattr(sub, "rack_id", None)
    if rack is not None:
        m.rack_id = rack
    if p.rebalance_timeout_ms > 0:
        m.rebalance_timeout_ms = p.rebalance_timeout_ms
    m.client_id, m.client_host = p.client_id, p.client_host
    # it must send its SyncGroup within its rebalance timeout
    m.classic = ClassicMeta(
        p.session_timeout_ms, [(n, bytes(md)) for n, md in p.protocols], now_ms + m.rebalance_timeout_ms
    )
    m.session_deadline_ms = now_ms + p.session_timeout_ms
    g.dirty = True

    h = metadata_hash(g.subscribed_names(topics), topics)
    if h != g.metadata_hash:
        g.metadata_hash, bump = h, True
    if bump:
        g._bump()
    if g.group_epoch > g.assignment_epoch:
        g.compute_target(topics)
    owned = _ids(getattr(sub, "owned_partitions", None), topics)
    g._reconcile(m, owned, now_ms)
    g.update_state(now_ms)
    return JoinResult(
        ErrorCode.NONE,
        generation_id=m.member_epoch,
        protocol_type=PROTOCOL_TYPE,
        protocol_name=m.classic.protocols[0][0],
        leader="",
        member_id=m.member_id,
    )


def classic_sync(
    g: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    generation: int,
    protocol_type: str | None,
    protocol_name: str | None,
    names: Mapping[uuid.UUID, str],
    now_ms: int,
) -> SyncResult:
    m = _find(g, member_id, instance_id)
    if isinstance(m, int):
        return SyncResult(m)
    assert m.classic is not None
    if generation != m.member_epoch:
        return SyncResult(ErrorCode.ILLEGAL_GENERATION)
    chosen = m.classic.protocols[0][0]
    if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
        protocol_name is not None and protocol_name != chosen
    ):
        return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if g.group_epoch > m.member_epoch and m.state != M_UNREVOKED:
        _must_rejoin(m, now_ms)
        return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
    m.classic.rejoin_deadline_ms = None
    m.session_deadline_ms = now_ms + m.classic.session_timeout_ms
    return SyncResult(ErrorCode.NONE, PROTOCOL_TYPE, chosen, encode_assignment(m.assigned, names, _version(m.classic)))


def _must_rejoin(m: ConsumerMember, now_ms: int) -> None:
    """Told to rejoin: it is removed unless it does within its rebalance timeout."""
    assert m.classic is not None
    if m.classic.rejoin_deadline_ms is None:
        m.classic.rejoin_deadline_ms = now_ms + m.rebalance_timeout_ms


def _waiting_on_unreleased(g: ConsumerGroup, m: ConsumerMember) -> bool:
    for t, ps in g.target.get(m.member_id, {}).items():
        have = m.assigned.get(t, frozenset())
        for p in ps - have:
            if g.owners.get((t, p), m.member_id) != m.member_id:
                return True
    return False


def classic_heartbeat(g: ConsumerGroup, member_id: str, instance_id: str | None, generation: int, now_ms: int) -> int:
    m = _find(g, member_id, instance_id)
    if isinstance(m, int):
        return m
    assert m.classic is not None
    if generation != m.member_epoch:
        return ErrorCode.ILLEGAL_GENERATION
    m.session_deadline_ms = now_ms + m.classic.session_timeout_ms
    if (
        m.member_epoch < g.group_epoch
        or m.state == M_UNREVOKED
        or (m.state == M_UNRELEASED and not _waiting_on_unreleased(g, m))
    ):
        _must_rejoin(m, now_ms)
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def classic_leave(g: ConsumerGroup, member_id: str, instance_id: str | None, now_ms: int) -> int:
    if instance_id is not None:
        mid = g.static.get(instance_id)
        if mid is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_id and mid != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        member_id = mid
    m = g.members.get(member_id)
    if m is None or m.classic is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    g.remove(member_id)
    g.update_state(now_ms)
    return ErrorCode.NONE
