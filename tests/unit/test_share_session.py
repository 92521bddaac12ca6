"""Tests for broker.share.session: Kafka's share session rules and a model-based state machine."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shoal.broker.share.session import (
    DEFAULT_MAX_SESSIONS,
    INT32_MAX,
    AcknowledgeContext,
    ContextKind,
    PartitionKey,
    PartitionOutcome,
    RemovedSession,
    SessionError,
    ShareFetchContext,
    ShareSessionCache,
    ShareSessionKey,
    next_epoch,
)
from shoal.protocol.errors import ErrorCode

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
A0: PartitionKey = (T1, 0)
A1: PartitionKey = (T1, 1)
B0: PartitionKey = (T2, 0)
G = "group"
M = "member-1"
KEY = ShareSessionKey(G, M)

QUIET = PartitionOutcome()
RECORDS = PartitionOutcome(has_records=True)
FAILED = PartitionOutcome(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)


def fetch(
    cache: ShareSessionCache,
    epoch: int,
    added: list[PartitionKey] | tuple[PartitionKey, ...] = (),
    forgotten: list[PartitionKey] | tuple[PartitionKey, ...] = (),
    *,
    group: str = G,
    member: str = M,
    conn: str = "conn-1",
    acks: bool = False,
) -> ShareFetchContext:
    ctx = cache.open_or_update(group, member, epoch, added, forgotten, connection_id=conn, acknowledgements=acks)
    assert isinstance(ctx, ShareFetchContext), ctx
    return ctx


def fetch_error(cache: ShareSessionCache, epoch: int, added: tuple[PartitionKey, ...] = (), **kw: object) -> int:
    result = cache.open_or_update(
        str(kw.get("group", G)),
        str(kw.get("member", M)),
        epoch,
        added,
        connection_id=kw.get("conn", "conn-1"),
        acknowledgements=bool(kw.get("acks", False)),
    )
    assert isinstance(result, SessionError), result
    assert result.message
    return result.error_code


def ack(cache: ShareSessionCache, epoch: int, *, group: str = G, member: str = M) -> AcknowledgeContext:
    ctx = cache.for_acknowledge(group, member, epoch)
    assert isinstance(ctx, AcknowledgeContext), ctx
    return ctx


def ack_error(cache: ShareSessionCache, epoch: int, *, group: str = G, member: str = M) -> int:
    result = cache.for_acknowledge(group, member, epoch)
    assert isinstance(result, SessionError), result
    return result.error_code


# --------------------------------------------------------------------------
# epochs


def test_next_epoch_counts_up_and_wraps_to_one() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(1) == 2
    assert next_epoch(41) == 42
    assert next_epoch(INT32_MAX - 1) == INT32_MAX
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(-1) == -1


def test_default_limit_is_kafkas() -> None:
    assert DEFAULT_MAX_SESSIONS == 2000
    assert ShareSessionCache().max_sessions == 2000
    with pytest.raises(ValueError):
        ShareSessionCache(-1)


# --------------------------------------------------------------------------
# opening a session


def test_epoch_zero_opens_a_session_with_the_request_partitions() -> None:
    cache = ShareSessionCache()
    ctx = fetch(cache, 0, [A0, B0])
    assert ctx.kind is ContextKind.FULL
    assert ctx.key == KEY
    assert ctx.fetch_partitions == [A0, B0]
    assert ctx.added == [A0, B0] and ctx.removed == [] and not ctx.replaced
    assert ctx.next_epoch == 1
    assert cache.size == len(cache) == 1 and KEY in cache
    assert cache.partitions(G, M) == [A0, B0]
    assert cache.get(G, M).epoch == 1  # type: ignore[union-attr]
    assert cache.total_partitions == 2
    assert cache.partitions(G, "someone-else") is None


def test_same_topic_twice_in_one_request_is_merged() -> None:
    # librdkafka may list one topic id in two Topics entries.
    cache = ShareSessionCache()
    ctx = fetch(cache, 0, [A0, A1, B0, A0, A1])
    assert ctx.fetch_partitions == [A0, A1, B0]
    assert cache.total_partitions == 3
    ctx = fetch(cache, 1, [B0, (T2, 1), (T2, 1), A0])
    assert ctx.added == [(T2, 1)]
    assert ctx.fetch_partitions == [A0, A1, B0, (T2, 1)]
    assert cache.total_partitions == 4


def test_epoch_zero_replaces_an_open_session() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0, A1])
    fetch(cache, 1)
    fetch(cache, 2, [B0])
    ctx = fetch(cache, 0, [B0])
    assert ctx.kind is ContextKind.FULL and ctx.replaced
    assert ctx.fetch_partitions == [B0] and ctx.next_epoch == 1
    assert ctx.removed_session is None  # the member keeps its acquired records
    assert cache.size == 1 and cache.partitions(G, M) == [B0]
    assert cache.total_partitions == 1
    assert fetch_error(cache, 3) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert fetch(cache, 1).next_epoch == 2


def test_epoch_zero_ignores_forgotten_partitions() -> None:
    cache = ShareSessionCache()
    ctx = fetch(cache, 0, [A0, A1], [A0])
    assert ctx.fetch_partitions == [A0, A1]


def test_acknowledgements_at_epoch_zero_are_an_invalid_request() -> None:
    cache = ShareSessionCache()
    assert fetch_error(cache, 0, (A0,), acks=True) == ErrorCode.INVALID_REQUEST
    assert cache.size == 0
    # An open session is left alone by the refused request.
    fetch(cache, 0, [A0])
    fetch(cache, 1)
    assert fetch_error(cache, 0, (B0,), acks=True) == ErrorCode.INVALID_REQUEST
    assert cache.partitions(G, M) == [A0] and cache.get(G, M).epoch == 2  # type: ignore[union-attr]


def test_limit_reached_refuses_and_evicts_nothing() -> None:
    cache = ShareSessionCache(max_sessions=2)
    fetch(cache, 0, [A0], member="m1")
    fetch(cache, 0, [A1], member="m2", conn="conn-2")
    assert fetch_error(cache, 0, (B0,), member="m3") == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert cache.size == 2
    assert cache.partitions(G, "m1") == [A0] and cache.partitions(G, "m2") == [A1]
    assert cache.partitions(G, "m3") is None
    assert cache.total_partitions == 2
    # Both old sessions still work at their epochs.
    assert fetch(cache, 1, member="m1").next_epoch == 2
    assert fetch(cache, 1, member="m2").next_epoch == 2
    # Reopening an existing key at the limit frees its own slot first.
    ctx = fetch(cache, 0, [B0], member="m1")
    assert ctx.replaced and cache.size == 2
    # Once a session closes there is room again.
    assert cache.close(G, "m2") is not None
    assert fetch(cache, 0, [B0], member="m3").kind is ContextKind.FULL


def test_zero_limit_refuses_every_session() -> None:
    cache = ShareSessionCache(max_sessions=0)
    assert fetch_error(cache, 0, (A0,)) == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    assert cache.size == 0


# --------------------------------------------------------------------------
# later requests


def test_next_epoch_fetches_every_session_partition() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0, B0])
    for epoch in (1, 2, 3):
        ctx = fetch(cache, epoch)
        assert ctx.kind is ContextKind.INCREMENTAL
        assert ctx.fetch_partitions == [A0, B0]
        assert ctx.added == [] and ctx.removed == []
        assert ctx.next_epoch == epoch + 1
    assert cache.get(G, M).epoch == 4  # type: ignore[union-attr]


def test_wrong_epoch_is_refused_and_changes_nothing() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    for bad in (2, 5, -7, INT32_MAX):
        assert fetch_error(cache, bad, (B0,)) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.partitions(G, M) == [A0] and cache.get(G, M).epoch == 1  # type: ignore[union-attr]
    assert cache.total_partitions == 1
    fetch(cache, 1)
    assert fetch_error(cache, 1) == ErrorCode.INVALID_SHARE_SESSION_EPOCH  # a replay of the last request


def test_unknown_session_is_not_found() -> None:
    cache = ShareSessionCache()
    for epoch in (1, 7, -3, INT32_MAX):
        assert fetch_error(cache, epoch, (A0,)) == ErrorCode.SHARE_SESSION_NOT_FOUND
    fetch(cache, 0, [A0], member="m1")
    assert fetch_error(cache, 1, member="m2") == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert fetch_error(cache, 1, group="other", member="m1") == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert cache.size == 1


def test_epoch_wraps_from_int32_max_to_one() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    session = cache.get(G, M)
    assert session is not None
    session.epoch = INT32_MAX
    ctx = fetch(cache, INT32_MAX)
    assert ctx.next_epoch == 1 and session.epoch == 1
    assert fetch_error(cache, INT32_MAX) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert fetch(cache, 1).next_epoch == 2


def test_added_partitions_join_and_forgotten_ones_leave() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0, A1])
    ctx = fetch(cache, 1, [B0, A1], [A0])
    assert ctx.added == [B0] and ctx.removed == [A0]
    assert ctx.fetch_partitions == [A1, B0]
    assert cache.partitions(G, M) == [A1, B0]
    assert cache.total_partitions == 2
    # Forgetting a partition the session does not have is harmless.
    ctx = fetch(cache, 2, [], [(T2, 9), A0])
    assert ctx.removed == [] and ctx.fetch_partitions == [A1, B0]


def test_partition_added_and_forgotten_in_one_request_is_dropped() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    ctx = fetch(cache, 1, [B0, A0], [B0, A0])
    assert ctx.fetch_partitions == []
    assert ctx.added == [] and ctx.removed == [A0]
    assert cache.total_partitions == 0


def test_forgetting_every_partition_keeps_the_session() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    ctx = fetch(cache, 1, [], [A0])
    assert ctx.kind is ContextKind.INCREMENTAL and ctx.fetch_partitions == []
    assert cache.size == 1 and cache.partitions(G, M) == []
    ctx = fetch(cache, 2, [B0])
    assert ctx.fetch_partitions == [B0] and ctx.next_epoch == 3


def test_acknowledgements_on_a_later_epoch_are_fine() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    assert fetch(cache, 1, acks=True).kind is ContextKind.INCREMENTAL


def test_epoch_zero_with_no_partitions_opens_an_empty_session() -> None:
    cache = ShareSessionCache()
    ctx = fetch(cache, 0)
    assert ctx.fetch_partitions == [] and cache.size == 1
    assert fetch(cache, 1, [A0]).fetch_partitions == [A0]


# --------------------------------------------------------------------------
# final requests


def test_final_fetch_closes_the_session_and_fetches_nothing() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0, B0])
    fetch(cache, 1, [A1])
    # The partitions named only carry acknowledgements; the epoch is not checked.
    ctx = fetch(cache, -1, [A0, (T2, 7)], [B0], acks=True)
    assert ctx.kind is ContextKind.FINAL
    assert ctx.fetch_partitions == [] and ctx.next_epoch == -1
    assert ctx.removed_session == RemovedSession(KEY, (A0, B0, A1), "conn-1")
    assert cache.size == 0 and cache.total_partitions == 0 and KEY not in cache
    assert fetch_error(cache, 2) == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert fetch_error(cache, -1) == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_final_fetch_without_acknowledgements_also_closes() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    ctx = fetch(cache, -1)
    assert ctx.removed_session is not None and ctx.removed_session.partitions == (A0,)
    assert cache.size == 0


def test_final_fetch_without_a_session_is_not_found() -> None:
    cache = ShareSessionCache()
    assert fetch_error(cache, -1, (A0,), acks=True) == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_final_response_carries_what_the_caller_gives() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    ctx = fetch(cache, -1)
    plan = ctx.response({B0: QUIET, A0: QUIET})
    assert plan.error_code == 0 and plan.partitions == [B0, A0]


# --------------------------------------------------------------------------
# ShareAcknowledge


def test_acknowledge_shares_and_advances_the_fetch_epoch() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    ctx = ack(cache, 1)
    assert ctx.kind is ContextKind.INCREMENTAL and ctx.key == KEY and ctx.next_epoch == 2
    assert ctx.removed_session is None
    assert fetch(cache, 2).next_epoch == 3
    assert ack(cache, 3).next_epoch == 4
    assert ack_error(cache, 3) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert fetch_error(cache, 3) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.partitions(G, M) == [A0]


def test_acknowledge_epoch_zero_is_an_invalid_epoch() -> None:
    cache = ShareSessionCache()
    assert ack_error(cache, 0) == ErrorCode.INVALID_SHARE_SESSION_EPOCH  # even with no session
    fetch(cache, 0, [A0])
    assert ack_error(cache, 0) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.get(G, M).epoch == 1  # type: ignore[union-attr]


def test_acknowledge_without_a_session_is_not_found() -> None:
    cache = ShareSessionCache()
    assert ack_error(cache, 1) == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert ack_error(cache, -1) == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_acknowledge_wrong_epoch_changes_nothing() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    assert ack_error(cache, 2) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.get(G, M).epoch == 1  # type: ignore[union-attr]


def test_final_acknowledge_closes_without_an_epoch_check() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0, B0], conn="c9")
    fetch(cache, 1)
    ctx = ack(cache, -1)
    assert ctx.kind is ContextKind.FINAL and ctx.next_epoch == -1
    assert ctx.removed_session == RemovedSession(KEY, (A0, B0), "c9")
    assert cache.size == 0 and cache.total_partitions == 0
    assert ack_error(cache, 2) == ErrorCode.SHARE_SESSION_NOT_FOUND


# --------------------------------------------------------------------------
# connections and members


def test_closing_a_connection_removes_only_its_sessions() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0], member="m1", conn="a")
    fetch(cache, 0, [B0, A1], member="m2", conn="b")
    fetch(cache, 0, [A1], group="g2", member="m1", conn="c")
    removed = cache.connection_closed("b")
    assert removed == [RemovedSession(ShareSessionKey(G, "m2"), (B0, A1), "b")]
    assert cache.size == 2 and cache.total_partitions == 2
    assert ShareSessionKey(G, "m1") in cache and ShareSessionKey("g2", "m1") in cache
    assert fetch_error(cache, 1, member="m2") == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert fetch(cache, 1, member="m1").next_epoch == 2
    assert cache.connection_closed("b") == []
    assert cache.connection_closed("never-seen") == []


def test_connection_close_removes_every_session_it_opened() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0], member="m1", conn="shared")
    fetch(cache, 0, [B0], member="m2", conn="shared")
    fetch(cache, 0, [B0], member="m3", conn="other")
    removed = cache.connection_closed("shared")
    assert [r.key.member_id for r in removed] == ["m1", "m2"]
    assert cache.size == 1


def test_session_belongs_to_the_connection_that_opened_it() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0], conn="a")
    fetch(cache, 1, [B0], conn="b")  # later requests may use another connection
    assert ack(cache, 2).next_epoch == 3
    assert cache.connection_closed("b") == []
    assert cache.size == 1
    removed = cache.connection_closed("a")
    assert removed == [RemovedSession(KEY, (A0, B0), "a")]
    assert cache.size == 0


def test_reopened_session_survives_the_old_connection_closing() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0], conn="old")
    fetch(cache, 0, [B0], conn="new")
    assert cache.connection_closed("old") == []
    assert cache.partitions(G, M) == [B0]
    assert cache.connection_closed("new") == [RemovedSession(KEY, (B0,), "new")]


def test_connection_close_after_final_request_removes_nothing() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0], conn="a")
    fetch(cache, -1, conn="a")
    assert cache.connection_closed("a") == []
    # A later session of the member opened over the same connection is again tied to it.
    fetch(cache, 0, [B0], conn="a")
    assert [r.partitions for r in cache.connection_closed("a")] == [(B0,)]


def test_remove_member() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0, B0], member="m1", conn="a")
    fetch(cache, 0, [A1], member="m2", conn="a")
    removed = cache.remove_member(G, "m1")
    assert removed == RemovedSession(ShareSessionKey(G, "m1"), (A0, B0), "a")
    assert cache.remove_member(G, "m1") is None
    assert cache.remove_member("other", "m2") is None
    assert cache.size == 1 and cache.total_partitions == 1
    assert fetch_error(cache, 1, member="m1") == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert fetch(cache, 1, member="m2").next_epoch == 2
    # The connection no longer owns the removed session.
    assert [r.key.member_id for r in cache.connection_closed("a")] == ["m2"]


def test_close_returns_the_session_once() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    assert cache.close(G, M) == RemovedSession(KEY, (A0,), "conn-1")
    assert cache.close(G, M) is None
    assert cache.size == 0 and cache.total_partitions == 0


def test_group_session_count() -> None:
    cache = ShareSessionCache()
    assert cache.group_session_count(G) == 0
    fetch(cache, 0, [A0], member="m1", conn="a")
    fetch(cache, 0, [A0], member="m2", conn="b")
    fetch(cache, 0, [A0], group="g2", member="m1", conn="a")
    fetch(cache, 0, [A1], member="m1", conn="c")  # a replacement does not count twice
    assert cache.group_session_count(G) == 2 and cache.group_session_count("g2") == 1
    cache.connection_closed("a")
    assert cache.group_session_count(G) == 2 and cache.group_session_count("g2") == 0
    fetch(cache, -1, member="m2")
    cache.remove_member(G, "m1")
    assert cache.group_session_count(G) == 0


# --------------------------------------------------------------------------
# responses


def test_full_response_includes_every_fetched_partition() -> None:
    cache = ShareSessionCache()
    ctx = fetch(cache, 0, [A0, A1, B0])
    plan = ctx.response({A0: QUIET, A1: RECORDS, B0: FAILED})
    assert plan.error_code == 0 and plan.partitions == [A0, A1, B0]
    assert cache.partitions(G, M) == [A0, A1, B0]  # no rotation for a full response


def test_incremental_response_leaves_out_quiet_partitions() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0, A1, B0]).response({A0: QUIET, A1: QUIET, B0: QUIET})
    plan = fetch(cache, 1).response({A0: QUIET, A1: RECORDS, B0: FAILED})
    assert plan.error_code == 0 and plan.partitions == [A1, B0]
    plan = fetch(cache, 2).response({A0: QUIET, A1: QUIET, B0: QUIET})
    assert plan.partitions == [B0]  # heard of again once its error cleared
    plan = fetch(cache, 3).response({A0: QUIET, A1: QUIET, B0: QUIET})
    assert plan.partitions == []


def test_newly_added_partition_is_sent_once() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    ctx = fetch(cache, 1, [B0])
    assert ctx.response({A0: QUIET, B0: QUIET}).partitions == [B0]
    assert fetch(cache, 2).response({A0: QUIET, B0: QUIET}).partitions == []


def test_partitions_with_records_move_to_the_back() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0, A1, B0])
    ctx = fetch(cache, 1)
    plan = ctx.response({A0: RECORDS, A1: QUIET, B0: FAILED})
    assert plan.partitions == [A0, B0]
    assert cache.partitions(G, M) == [A1, B0, A0]
    assert fetch(cache, 2).fetch_partitions == [A1, B0, A0]


def test_incremental_response_follows_the_outcome_order_and_skips_strangers() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0, A1])
    plan = fetch(cache, 1).response({A1: RECORDS, (T2, 5): RECORDS, A0: RECORDS})
    assert plan.partitions == [A1, A0]


def test_duplicate_request_response_is_an_invalid_epoch() -> None:
    cache = ShareSessionCache()
    fetch(cache, 0, [A0])
    stale = fetch(cache, 1)
    fetch(cache, 2)  # served before the first one answered
    plan = stale.response({A0: RECORDS})
    assert plan == type(plan)(ErrorCode.INVALID_SHARE_SESSION_EPOCH, [])
    ack_stale = fetch(cache, 3)
    ack(cache, 4)
    assert ack_stale.response({A0: RECORDS}).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH


# --------------------------------------------------------------------------
# model-based state machine

PARTS: list[PartitionKey] = [(T1, 0), (T1, 1), (T1, 2), (T2, 0), (T2, 1)]
MEMBERS = [ShareSessionKey(g, m) for g in ("g1", "g2") for m in ("m1", "m2", "m3")]
CONNS = ["c1", "c2", "c3"]
MAX_SESSIONS = 4

outcome_st = st.builds(
    PartitionOutcome,
    has_records=st.booleans(),
    error_code=st.sampled_from([0, 0, 0, ErrorCode.NOT_LEADER_OR_FOLLOWER]),
)


@dataclass
class Model:
    epoch: int
    order: list[PartitionKey]
    unheard: dict[PartitionKey, bool]
    conn: str


class ShareSessionMachine(RuleBasedStateMachine):
    """Drives the cache with random requests and checks it against a plain dictionary model."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = ShareSessionCache(max_sessions=MAX_SESSIONS)
        self.model: dict[ShareSessionKey, Model] = {}

    def _pick_epoch(self, data: st.DataObject, key: ShareSessionKey) -> int:
        m = self.model.get(key)
        choices = [0, -1, 1, 2, INT32_MAX, -5]
        if m is not None:
            choices += [m.epoch] * 4 + [next_epoch(m.epoch)]
        return data.draw(st.sampled_from(choices))

    def _drop(self, key: ShareSessionKey, removed: RemovedSession | None) -> None:
        m = self.model.pop(key)
        assert removed == RemovedSession(key, tuple(m.order), m.conn)

    @rule(
        key=st.sampled_from(MEMBERS),
        conn=st.sampled_from(CONNS),
        added=st.lists(st.sampled_from(PARTS), max_size=6),
        forgotten=st.lists(st.sampled_from(PARTS), max_size=3),
        acks=st.booleans(),
        data=st.data(),
    )
    def share_fetch(
        self,
        key: ShareSessionKey,
        conn: str,
        added: list[PartitionKey],
        forgotten: list[PartitionKey],
        acks: bool,
        data: st.DataObject,
    ) -> None:
        epoch = self._pick_epoch(data, key)
        m = self.model.get(key)
        result = self.cache.open_or_update(
            key.group_id, key.member_id, epoch, added, forgotten, connection_id=conn, acknowledgements=acks
        )
        if epoch == 0:
            if acks:
                assert isinstance(result, SessionError) and result.error_code == ErrorCode.INVALID_REQUEST
                return
            if m is None and len(self.model) >= MAX_SESSIONS:
                # Full, and nothing is evicted. (Reopening a cached key always fits: it frees its own slot.)
                assert isinstance(result, SessionError)
                assert result.error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
                return
            assert isinstance(result, ShareFetchContext) and result.kind is ContextKind.FULL
            assert result.replaced == (m is not None)
            order = list(dict.fromkeys(added))
            assert result.fetch_partitions == order and result.next_epoch == 1
            self.model[key] = Model(1, order, dict.fromkeys(order, False), conn)
            outcomes = {p: data.draw(outcome_st) for p in order}
            assert result.response(outcomes).partitions == order
            return
        if m is None:
            assert isinstance(result, SessionError) and result.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
            return
        if epoch == -1:
            assert isinstance(result, ShareFetchContext) and result.kind is ContextKind.FINAL
            assert result.fetch_partitions == []
            self._drop(key, result.removed_session)
            return
        if epoch != m.epoch:
            assert isinstance(result, SessionError)
            assert result.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
            return
        assert isinstance(result, ShareFetchContext) and result.kind is ContextKind.INCREMENTAL
        for p in added:
            if p not in m.unheard:
                m.order.append(p)
                m.unheard[p] = True
        for p in forgotten:
            if p in m.unheard:
                m.order.remove(p)
                del m.unheard[p]
        m.epoch = next_epoch(m.epoch)
        assert result.fetch_partitions == m.order and result.next_epoch == m.epoch
        # Answer for a random subset of the session, in a random order.
        answered = data.draw(st.permutations(m.order))[: data.draw(st.integers(0, len(m.order)))]
        outcomes = {p: data.draw(outcome_st) for p in answered}
        plan = result.response(outcomes)
        expected = [p for p in answered if outcomes[p].has_records or outcomes[p].error_code or m.unheard[p]]
        assert plan.error_code == 0 and plan.partitions == expected
        for p in expected:
            m.unheard[p] = outcomes[p].error_code != 0
        moved = [p for p in expected if outcomes[p].has_records]
        m.order = [p for p in m.order if p not in moved] + moved

    @rule(key=st.sampled_from(MEMBERS), data=st.data())
    def share_acknowledge(self, key: ShareSessionKey, data: st.DataObject) -> None:
        epoch = self._pick_epoch(data, key)
        m = self.model.get(key)
        result = self.cache.for_acknowledge(key.group_id, key.member_id, epoch)
        if epoch == 0:
            assert isinstance(result, SessionError)
            assert result.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        elif m is None:
            assert isinstance(result, SessionError) and result.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        elif epoch == -1:
            assert isinstance(result, AcknowledgeContext) and result.kind is ContextKind.FINAL
            self._drop(key, result.removed_session)
        elif epoch != m.epoch:
            assert isinstance(result, SessionError)
            assert result.error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        else:
            m.epoch = next_epoch(m.epoch)
            assert isinstance(result, AcknowledgeContext) and result.next_epoch == m.epoch

    @rule(conn=st.sampled_from(CONNS))
    def close_connection(self, conn: str) -> None:
        removed = self.cache.connection_closed(conn)
        owned = sorted((k for k, m in self.model.items() if m.conn == conn), key=lambda k: (k.group_id, k.member_id))
        assert [r.key for r in removed] == owned
        for r in removed:
            self._drop(r.key, r)

    @rule(key=st.sampled_from(MEMBERS))
    def remove_member(self, key: ShareSessionKey) -> None:
        removed = self.cache.remove_member(key.group_id, key.member_id)
        if key in self.model:
            self._drop(key, removed)
        else:
            assert removed is None

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def wrap_epoch(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model, key=lambda k: (k.group_id, k.member_id))))
        session = self.cache.get(key.group_id, key.member_id)
        assert session is not None
        session.epoch = self.model[key].epoch = INT32_MAX

    @invariant()
    def matches_model(self) -> None:
        assert self.cache.size == len(self.model) <= MAX_SESSIONS
        assert self.cache.total_partitions == sum(len(m.order) for m in self.model.values())
        for key in MEMBERS:
            m = self.model.get(key)
            session = self.cache.get(key.group_id, key.member_id)
            if m is None:
                assert session is None
                continue
            assert session is not None
            assert session.epoch == m.epoch and session.connection_id == m.conn
            assert list(session.partitions.items()) == [(p, m.unheard[p]) for p in m.order]
        for group in ("g1", "g2"):
            assert self.cache.group_session_count(group) == sum(k.group_id == group for k in self.model)

    @invariant()
    def indexes_hold_nothing_stale(self) -> None:
        # The per-connection and per-group indexes must not keep entries for sessions that are gone.
        by_conn: dict[str, set[ShareSessionKey]] = {}
        groups: dict[str, int] = {}
        for key, m in self.model.items():
            by_conn.setdefault(m.conn, set()).add(key)
            groups[key.group_id] = groups.get(key.group_id, 0) + 1
        assert self.cache._by_connection == by_conn
        assert self.cache._group_sizes == groups


ShareSessionMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestShareSessionMachine = ShareSessionMachine.TestCase
TestShareSessionMachine.pytestmark = [pytest.mark.slow]  # many-example state machine: not in the fast loop
