"""The classic group state machine, driven directly with a fake clock (no I/O).

Covers the transitions of Kafka's classic coordinator: Empty -> PreparingRebalance
-> CompletingRebalance -> Stable and back, the MEMBER_ID_REQUIRED round,
leader election, static members and fencing, duplicate joins/syncs answered
again, heartbeat errors per state, leave, the rebalance timeout (DelayedJoin)
and the session timeout (DelayedHeartbeat), and the sync timeout.
"""

from __future__ import annotations

import itertools

import pytest

from shoal.broker.groups.classic import AssignmentWrite, ClassicGroup, GroupState, JoinParams, JoinResult, SyncResult
from shoal.protocol.errors import ErrorCode

PROTOCOLS = [("range", b"r-meta"), ("roundrobin", b"rr-meta")]
_tokens = itertools.count()


class Harness:
    def __init__(self, initial_delay: int = 0, max_size: int = 100) -> None:
        self.now = 1_000
        self.g = ClassicGroup("g", self.now, initial_delay, max_size)
        self.answers: dict[int, object] = {}
        self.auto_store = True  # leader assignments become durable at once unless a test holds them
        self.writes: list[AssignmentWrite] = []

    def _drain(self) -> None:
        for token, result in self.g.take_outbox():
            self.answers[token] = result

    def join(
        self,
        member_id: str = "",
        instance: str | None = None,
        protocols=PROTOCOLS,
        session=10_000,
        rebalance=30_000,
        v4: bool = True,
    ) -> int:
        token = next(_tokens)
        self.g.join(
            JoinParams(member_id, instance, "client", "/127.0.0.1", session, rebalance, "consumer", protocols, v4),
            token,
            self.now,
        )
        self._drain()
        return token

    def join_new(self, **kw) -> str:
        """A dynamic member's two-round join; returns its member id (join still pending)."""
        t = self.join(**kw)
        r = self.answers.pop(t)
        assert r.error == ErrorCode.MEMBER_ID_REQUIRED
        self.pending = self.join(member_id=r.member_id, **kw)
        return r.member_id

    def sync(self, member_id: str, generation: int, assignments=None, instance=None) -> int:
        token = next(_tokens)
        self.g.sync(member_id, instance, generation, "consumer", None, assignments or {}, token, self.now)
        self.writes += self.g.take_assignment_writes()
        if self.auto_store:
            self.store()
        self._drain()
        return token

    def store(self, error: int = ErrorCode.NONE) -> None:
        """The caller's write of the held assignments settles (0 = durable)."""
        writes, self.writes = self.writes, []
        for w in writes:
            self.g.assignment_stored(w, error, self.now)
        self._drain()

    def tick(self, ms: int) -> None:
        self.now += ms

    def complete_if_possible(self) -> None:
        g = self.g
        if g.can_complete_join(self.now) or (g.join_deadline_ms is not None and self.now >= g.join_deadline_ms):
            g.complete_join(self.now)
        self._drain()

    def result(self, token: int):
        return self.answers.get(token)


def stable_group_of(n: int) -> tuple[Harness, list[str], list[int]]:
    h = Harness()
    ids, tokens = [], []
    for _ in range(n):
        ids.append(h.join_new())
        tokens.append(h.pending)
    h.complete_if_possible()
    leader = h.g.leader_id
    gen = h.g.generation_id
    h.sync(leader, gen, {m: f"assign-{m}".encode() for m in ids})
    for m in ids:
        if m != leader:
            h.sync(m, gen)
    assert h.g.state == GroupState.STABLE
    return h, ids, tokens


def test_member_id_required_round_then_join_completes() -> None:
    h = Harness()
    t = h.join()
    r = h.result(t)
    assert r.error == ErrorCode.MEMBER_ID_REQUIRED and r.member_id.startswith("client-")
    assert h.g.state == GroupState.EMPTY and r.member_id in h.g.pending_members
    t2 = h.join(member_id=r.member_id)
    assert h.g.state == GroupState.PREPARING_REBALANCE
    assert h.result(t2) is None  # waits for the rebalance
    h.complete_if_possible()
    jr = h.result(t2)
    assert jr.error == 0 and jr.generation_id == 1 and jr.leader == r.member_id
    assert jr.protocol_name == "range"
    assert [m for m, _, _ in jr.members] == [r.member_id]  # the leader gets the members
    assert h.g.state == GroupState.COMPLETING_REBALANCE


def test_old_versions_skip_the_member_id_round() -> None:
    h = Harness()
    t = h.join(v4=False)
    assert h.result(t) is None and len(h.g.members) == 1


def test_followers_get_no_member_list_and_sync_distributes_assignment() -> None:
    h, ids, tokens = stable_group_of(3)
    leader = h.g.leader_id
    for m, t in zip(ids, tokens):
        jr = h.result(t)
        assert jr.generation_id == 1 and jr.leader == leader
        assert (len(jr.members) == 3) == (m == leader)
    # every member received its own assignment
    syncs = [r for r in h.answers.values() if isinstance(r, SyncResult)]
    assert sorted(r.assignment for r in syncs) == sorted(f"assign-{m}".encode() for m in ids)


def test_sync_before_leader_waits_then_all_answered() -> None:
    h = Harness()
    a = h.join_new()
    ta = h.pending
    b = h.join_new()
    h.complete_if_possible()
    gen = h.g.generation_id
    follower = b if h.g.leader_id == a else a
    t_follower = h.sync(follower, gen)
    assert h.result(t_follower) is None  # waits for the leader
    h.sync(h.g.leader_id, gen, {a: b"A", b: b"B"})
    assert h.result(t_follower).assignment == (b"A" if follower == a else b"B")
    assert h.result(ta).error == 0


def test_sync_errors() -> None:
    h, ids, _ = stable_group_of(2)
    gen = h.g.generation_id
    assert h.result(h.sync("nobody", gen)).error == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.result(h.sync(ids[0], gen + 5)).error == ErrorCode.ILLEGAL_GENERATION
    # SyncGroup in Stable is answered again with the current assignment (a lost answer)
    r = h.result(h.sync(ids[0], gen))
    assert r.error == 0 and r.assignment == f"assign-{ids[0]}".encode()
    # during PreparingRebalance: REBALANCE_IN_PROGRESS
    h.join_new()
    assert h.g.state == GroupState.PREPARING_REBALANCE
    assert h.result(h.sync(ids[0], gen)).error == ErrorCode.REBALANCE_IN_PROGRESS


def test_duplicate_join_in_completing_rebalance_is_answered_again() -> None:
    h = Harness()
    a = h.join_new()
    h.complete_if_possible()
    assert h.g.state == GroupState.COMPLETING_REBALANCE
    t = h.join(member_id=a)  # same metadata: its first answer was lost
    r = h.result(t)
    assert r.error == 0 and r.generation_id == 1 and h.g.state == GroupState.COMPLETING_REBALANCE


def test_changed_metadata_in_completing_rebalance_rebalances() -> None:
    h = Harness()
    a = h.join_new()
    h.complete_if_possible()
    h.join(member_id=a, protocols=[("roundrobin", b"new")])
    assert h.g.state == GroupState.PREPARING_REBALANCE


def test_join_in_stable_follower_same_metadata_no_rebalance() -> None:
    h, ids, _ = stable_group_of(2)
    follower = next(m for m in ids if m != h.g.leader_id)
    r = h.result(h.join(member_id=follower))
    assert r.error == 0 and r.members == [] and h.g.state == GroupState.STABLE
    # the leader rejoining (or changed metadata) starts a rebalance
    h.join(member_id=h.g.leader_id)
    assert h.g.state == GroupState.PREPARING_REBALANCE


def test_new_member_in_stable_triggers_rebalance_and_all_must_rejoin() -> None:
    h, ids, _ = stable_group_of(2)
    c = h.join_new()
    assert h.g.state == GroupState.PREPARING_REBALANCE
    assert not h.g.can_complete_join(h.now)  # old members have not rejoined
    ta = h.join(member_id=ids[0])
    tb = h.join(member_id=ids[1])
    assert h.g.can_complete_join(h.now)
    h.complete_if_possible()
    assert h.g.generation_id == 2 and h.g.state == GroupState.COMPLETING_REBALANCE
    assert h.result(ta).error == 0 and h.result(tb).error == 0 and h.result(h.pending).error == 0
    assert c in h.g.members


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    h, ids, _ = stable_group_of(3)
    h.join(member_id=ids[0])  # only one rejoins
    assert h.g.state == GroupState.PREPARING_REBALANCE
    h.tick(29_999)
    h.complete_if_possible()
    assert h.g.state == GroupState.PREPARING_REBALANCE
    h.tick(1)
    h.complete_if_possible()  # DelayedJoin expiry
    assert set(h.g.members) == {ids[0]} and h.g.state == GroupState.COMPLETING_REBALANCE
    assert h.g.leader_id == ids[0]


def test_session_timeout_removes_member_and_rebalances() -> None:
    h, ids, _ = stable_group_of(2)
    h.tick(5_000)
    assert h.g.heartbeat(ids[0], None, h.g.generation_id, h.now) == 0
    h.tick(5_000)  # ids[1] silent for 10 s
    assert not h.g.expire_member(ids[0], h.now)
    assert h.g.expire_member(ids[1], h.now)
    assert ids[1] not in h.g.members and h.g.state == GroupState.PREPARING_REBALANCE


def test_last_member_leaving_empties_the_group() -> None:
    h, ids, _ = stable_group_of(1)
    assert h.g.leave(ids[0], None, h.now) == 0
    assert h.g.state == GroupState.PREPARING_REBALANCE
    h.complete_if_possible()
    assert h.g.state == GroupState.EMPTY and h.g.generation_id == 2 and h.g.dirty
    assert h.g.protocol_type == "consumer"  # kept for an empty group


def test_heartbeat_errors_per_state() -> None:
    h, ids, _ = stable_group_of(2)
    gen = h.g.generation_id
    assert h.g.heartbeat(ids[0], None, gen, h.now) == 0
    assert h.g.heartbeat("nobody", None, gen, h.now) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.g.heartbeat(ids[0], None, gen + 1, h.now) == ErrorCode.ILLEGAL_GENERATION
    h.join_new()  # -> PreparingRebalance
    assert h.g.heartbeat(ids[0], None, gen, h.now) == ErrorCode.REBALANCE_IN_PROGRESS


def test_leave_errors_and_batch() -> None:
    h, ids, _ = stable_group_of(3)
    assert h.g.leave("nobody", None, h.now) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.g.leave(ids[0], None, h.now) == 0
    assert h.g.leave(ids[1], None, h.now) == 0
    assert set(h.g.members) == {ids[2]}


def test_pending_member_expires_without_rejoin() -> None:
    h = Harness()
    r = h.result(h.join())
    h.tick(10_000)
    assert h.g.expire_member(r.member_id, h.now)
    assert not h.g.pending_members
    assert h.result(h.join(member_id=r.member_id)).error == ErrorCode.UNKNOWN_MEMBER_ID


def test_max_size() -> None:
    h = Harness(max_size=2)
    h.join_new()
    h.join_new()
    assert h.result(h.join()).error == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_inconsistent_protocols() -> None:
    h, _, _ = stable_group_of(1)
    t = h.join(protocols=[("sticky", b"x")])
    assert h.result(t).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    token = next(_tokens)
    h.g.join(JoinParams("", None, "c", "/h", 10_000, 30_000, "connect", PROTOCOLS, True), token, h.now)
    assert h.g.take_outbox()[0][1].error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.g.state == GroupState.STABLE  # nothing changed


def test_static_member_rejoin_replaces_and_fences_old_id() -> None:
    h = Harness()
    t = h.join(instance="i-1")  # static members skip MEMBER_ID_REQUIRED
    h.complete_if_possible()
    old = h.result(t).member_id
    gen = h.g.generation_id
    h.sync(old, gen, {old: b"A"}, instance="i-1")
    assert h.g.state == GroupState.STABLE
    t2 = h.join(instance="i-1")  # restarted with the same instance id, unknown member id
    r = h.result(t2)
    assert r.error == 0 and r.member_id != old and r.generation_id == gen
    assert h.g.state == GroupState.STABLE  # same metadata: no rebalance
    # As Kafka's ClassicGroup.validateMember: the replaced id is fenced (not merely unknown),
    # and an instance id the group does not know is an unknown member.
    assert h.g.heartbeat(old, "i-1", gen, h.now) == ErrorCode.FENCED_INSTANCE_ID
    assert h.g.heartbeat(r.member_id, "i-2", gen, h.now) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.result(h.sync(r.member_id, gen, instance="i-1")).assignment == b"A"


def test_static_member_not_removed_by_rebalance_timeout() -> None:
    h = Harness()
    t1 = h.join(instance="s")
    a = h.join_new()
    h.complete_if_possible()
    s = h.result(t1).member_id
    h.join(member_id=a)  # start a rebalance; the static member stays silent
    h.g._prepare_rebalance(h.now)  # (already preparing: no-op)
    h.tick(30_000)
    h.complete_if_possible()
    assert s in h.g.members  # kept: only its session timeout removes it


def test_sync_timeout_removes_members_that_never_synced() -> None:
    h = Harness()
    a = h.join_new()
    b = h.join_new()
    h.complete_if_possible()
    leader = h.g.leader_id
    other = b if leader == a else a
    h.sync(other, h.g.generation_id)
    h.tick(30_000)
    h.g.expire_sync(h.now)
    assert leader not in h.g.members and h.g.state == GroupState.PREPARING_REBALANCE


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    h = Harness(initial_delay=3_000)
    h.join_new()
    assert not h.g.can_complete_join(h.now)  # even though everyone joined
    h.tick(2_000)
    h.join_new()  # extends the delay
    h.tick(1_500)
    h.complete_if_possible()
    assert h.g.state == GroupState.PREPARING_REBALANCE
    h.tick(1_500)
    h.complete_if_possible()
    assert h.g.state == GroupState.COMPLETING_REBALANCE and len(h.g.members) == 2


def test_dead_group_answers_coordinator_not_available() -> None:
    h, ids, _ = stable_group_of(1)
    h.g.to_dead(h.now)
    assert h.result(h.join()).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.g.heartbeat(ids[0], None, 1, h.now) == ErrorCode.COORDINATOR_NOT_AVAILABLE


@pytest.mark.parametrize("n", [1, 2, 5])
def test_protocol_selection_by_vote(n: int) -> None:
    h = Harness()
    for i in range(n):
        prefs = [("roundrobin", b""), ("range", b"")] if i < (n + 1) // 2 else [("range", b""), ("roundrobin", b"")]
        h.join_new(protocols=prefs)
    h.complete_if_possible()
    assert h.g.protocol_name == "roundrobin"
    assert isinstance(next(iter(h.answers.values())), JoinResult)


# -- the leader's assignment takes effect only once durable (Kafka's appendFuture) --------------


def completing_group_of(n: int) -> tuple[Harness, list[str]]:
    """n members in CompletingRebalance; the harness holds assignment writes."""
    h = Harness()
    ids = [h.join_new() for _ in range(n)]
    h.complete_if_possible()
    assert h.g.state == GroupState.COMPLETING_REBALANCE
    h.auto_store = False
    return h, ids


def test_sync_held_until_assignment_is_durable() -> None:
    h, ids = completing_group_of(3)
    gen, leader = h.g.generation_id, h.g.leader_id
    a, b = [m for m in ids if m != leader]
    early = h.sync(a, gen)  # before the leader: held, as always
    t_leader = h.sync(leader, gen, {m: f"as-{m}".encode() for m in (leader, a)})  # b missing: gets b""
    assert len(h.writes) == 1 and h.writes[0].generation_id == gen
    assert h.writes[0].assignments == {leader: f"as-{leader}".encode(), a: f"as-{a}".encode(), b: b""}
    # Written but not durable: still CompletingRebalance, nobody answered, nothing installed.
    assert h.g.state == GroupState.COMPLETING_REBALANCE
    assert h.result(early) is None and h.result(t_leader) is None
    assert all(m.assignment == b"" for m in h.g.members.values())
    h.tick(5)
    late = h.sync(b, gen)  # a follower between the leader's sync and the fsync: held too
    assert h.result(late) is None
    rejoin = h.join(member_id=a)  # a lost JoinGroup answer, same metadata: answered again, no rebalance
    assert h.result(rejoin).generation_id == gen and h.g.state == GroupState.COMPLETING_REBALANCE
    assert h.g.heartbeat(b, None, gen, h.now) == ErrorCode.NONE
    h.store()
    assert h.g.state == GroupState.STABLE
    assert h.result(early).assignment == f"as-{a}".encode()
    assert h.result(t_leader).assignment == f"as-{leader}".encode()
    assert h.result(late).error == 0 and h.result(late).assignment == b""
    assert h.g.members[a].assignment == f"as-{a}".encode()


@pytest.mark.parametrize(
    ("append_error", "answer"),
    [
        (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
        (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR),
    ],
)
def test_failed_assignment_write_resets_and_prepares_rebalance(append_error: int, answer: int) -> None:
    h, ids = completing_group_of(2)
    gen, leader = h.g.generation_id, h.g.leader_id
    follower = next(m for m in ids if m != leader)
    t_follower = h.sync(follower, gen)
    t_leader = h.sync(leader, gen, {leader: b"L", follower: b"F"})
    h.store(append_error)
    assert h.result(t_leader).error == answer and h.result(t_follower).error == answer
    assert h.g.state == GroupState.PREPARING_REBALANCE and h.g.generation_id == gen
    assert all(m.assignment == b"" for m in h.g.members.values())
    # The members rejoin and a new generation completes as usual.
    assert h.result(h.sync(follower, gen)).error == ErrorCode.REBALANCE_IN_PROGRESS
    h.join(member_id=leader)
    h.join(member_id=follower)
    h.complete_if_possible()
    assert h.g.state == GroupState.COMPLETING_REBALANCE and h.g.generation_id == gen + 1


def test_write_outcome_ignored_after_the_group_moved_on() -> None:
    h, ids = completing_group_of(2)
    gen, leader = h.g.generation_id, h.g.leader_id
    follower = next(m for m in ids if m != leader)
    t_leader = h.sync(leader, gen, {leader: b"L", follower: b"F"})
    # A member changes its metadata while the write is in flight: a new rebalance starts and
    # the held sync is told to rejoin.
    h.join(member_id=follower, protocols=[("range", b"other")])
    assert h.result(t_leader).error == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.g.state == GroupState.PREPARING_REBALANCE
    h.store()  # the old generation's write completes late: no effect
    assert h.g.state == GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in h.g.members.values())
    # The next generation reaches CompletingRebalance with its own write held...
    h.join(member_id=leader)
    h.complete_if_possible()
    assert h.g.state == GroupState.COMPLETING_REBALANCE and h.g.generation_id == gen + 1
    stale = AssignmentWrite(gen, {leader: b"L", follower: b"F"})
    h.g.assignment_stored(stale, ErrorCode.NONE, h.now)  # ...and a stale generation's outcome is ignored
    h.g.assignment_stored(stale, ErrorCode.KAFKA_STORAGE_ERROR, h.now)
    assert h.g.state == GroupState.COMPLETING_REBALANCE and h.g.generation_id == gen + 1


def test_duplicate_leader_sync_is_held_and_writes_nothing() -> None:
    """A leader's retried SyncGroup while its first write is in flight gets the first write's
    outcome (as in Kafka) and writes no second record (Kafka does, and a restart would load that
    one, which may differ from what the members were told)."""
    h, _ = completing_group_of(1)
    gen, leader = h.g.generation_id, h.g.leader_id
    h.sync(leader, gen, {leader: b"one"})
    t2 = h.sync(leader, gen, {leader: b"two"})  # a retry while the first write is in flight
    assert len(h.writes) == 1 and h.writes[0].assignments == {leader: b"one"}
    h.store()
    assert h.g.state == GroupState.STABLE and h.g.members[leader].assignment == b"one"
    assert h.result(t2).assignment == b"one"


def test_duplicate_leader_sync_shares_a_failed_outcome() -> None:
    h, _ = completing_group_of(1)
    gen, leader = h.g.generation_id, h.g.leader_id
    h.sync(leader, gen, {leader: b"one"})
    t2 = h.sync(leader, gen, {leader: b"two"})
    assert len(h.writes) == 1
    h.store(ErrorCode.KAFKA_STORAGE_ERROR)
    assert h.g.state == GroupState.PREPARING_REBALANCE
    assert h.result(t2).error == ErrorCode.NOT_COORDINATOR


def test_sync_timeout_during_write_removes_silent_members() -> None:
    h, ids = completing_group_of(2)
    gen, leader = h.g.generation_id, h.g.leader_id
    t_leader = h.sync(leader, gen, {m: b"x" for m in ids})
    h.tick(30_000)
    h.g.expire_sync(h.now)  # the follower never synced within the rebalance timeout
    h._drain()
    assert h.g.state == GroupState.PREPARING_REBALANCE and list(h.g.members) == [leader]
    assert h.result(t_leader).error == ErrorCode.REBALANCE_IN_PROGRESS
    h.store()
    assert h.g.state == GroupState.PREPARING_REBALANCE
