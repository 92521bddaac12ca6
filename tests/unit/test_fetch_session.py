"""Tests for broker.fetch_session: KIP-227 session semantics, eviction, and a model-based state machine."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shoal.broker.partition.fetch_session import (
    INT32_MAX,
    ContextKind,
    FetchSessionCache,
    PartitionKey,
    PartitionRequest,
    PartitionResult,
    next_epoch,
)
from shoal.protocol.errors import ErrorCode

A0: PartitionKey = ("a", 0)
A1: PartitionKey = ("a", 1)
B0: PartitionKey = ("b", 0)


def req(offset: int = 0, max_bytes: int = 1 << 20) -> PartitionRequest:
    return PartitionRequest(fetch_offset=offset, max_bytes=max_bytes)


def res(hw: int = 10, log_start: int = 0, lso: int = 10, **kw: int | bool) -> PartitionResult:
    return PartitionResult(high_watermark=hw, log_start_offset=log_start, last_stable_offset=lso, **kw)  # type: ignore[arg-type]


def open_session(
    cache: FetchSessionCache,
    keys: list[PartitionKey],
    *,
    now: int = 0,
    privileged: bool = False,
    topic_ids: bool = False,
) -> int:
    ctx = cache.new_context(0, 0, {k: req() for k in keys}, uses_topic_ids=topic_ids, privileged=privileged, now_ms=now)
    assert ctx.kind is ContextKind.FULL
    plan = ctx.response({k: res() for k in keys}, now_ms=now)
    assert plan.error_code == 0
    return plan.session_id


def keys_of(plan) -> list[PartitionKey]:
    return [k for k, _ in plan.partitions]


# --------------------------------------------------------------------------
# epochs and request kinds


def test_next_epoch_wraps_to_one() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(-1) == -1


def test_sessionless_full_fetch_keeps_nothing() -> None:
    cache = FetchSessionCache()
    ctx = cache.new_context(0, -1, {A0: req(5), A1: req(7)}, uses_topic_ids=False, now_ms=0)
    assert ctx.kind is ContextKind.SESSIONLESS
    assert [k for k, _ in ctx.partitions()] == [A0, A1]
    assert ctx.fetch_offset(A1) == 7
    plan = ctx.response({A0: res(), A1: res()})
    assert plan.session_id == 0 and plan.error_code == 0 and keys_of(plan) == [A0, A1]
    assert len(cache) == 0


def test_full_fetch_creates_session_with_epoch_one() -> None:
    cache = FetchSessionCache(rng=random.Random(7))
    ctx = cache.new_context(0, 0, {A0: req(5), B0: req(9)}, uses_topic_ids=False, now_ms=100)
    assert ctx.kind is ContextKind.FULL
    assert len(cache) == 0  # the session appears with the response
    plan = ctx.response({A0: res(hw=20), B0: res(hw=30)})
    assert plan.session_id > 0 and keys_of(plan) == [A0, B0]
    session = cache.get(plan.session_id)
    assert session is not None
    assert session.epoch == 1 and session.created_ms == 100 and not session.privileged
    assert session.partitions[A0].fetch_offset == 5
    assert session.partitions[A0].sent_high_watermark == 20
    assert cache.total_partitions == 2


def test_incremental_reads_all_session_partitions_and_sends_only_changes() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0, A1, B0])
    ctx = cache.new_context(sid, 1, {}, uses_topic_ids=False, now_ms=1)
    assert ctx.kind is ContextKind.INCREMENTAL
    assert [k for k, _ in ctx.partitions()] == [A0, A1, B0]
    plan = ctx.response({A0: res(), A1: res(hw=11), B0: res()})
    assert plan.session_id == sid and keys_of(plan) == [A1]
    assert cache.get(sid).epoch == 2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "changed",
    [
        res(hw=11),
        res(log_start=3),
        res(lso=9),
        res(records_size=100),
        res(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER),
        res(preferred_read_replica=2),
        res(diverging_epoch=True),
    ],
    ids=["hw", "log_start", "lso", "records", "error", "preferred_replica", "diverging_epoch"],
)
def test_each_kind_of_change_is_sent(changed: PartitionResult) -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0, A1])
    plan = cache.new_context(sid, 1, {}, uses_topic_ids=False, now_ms=1).response({A0: res(), A1: changed})
    assert keys_of(plan) == [A1]


def test_partition_is_resent_after_an_error_clears() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0])
    error = res(error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert keys_of(cache.new_context(sid, 1, {}, uses_topic_ids=False, now_ms=1).response({A0: error})) == [A0]
    # Same watermarks as before the error, but the fetcher must hear that it is fine again.
    assert keys_of(cache.new_context(sid, 2, {}, uses_topic_ids=False, now_ms=2).response({A0: res()})) == [A0]
    assert keys_of(cache.new_context(sid, 3, {}, uses_topic_ids=False, now_ms=3).response({A0: res()})) == []


def test_incremental_add_update_and_forget() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0, A1])
    ctx = cache.new_context(sid, 1, {A1: req(50), B0: req(3)}, [A0], uses_topic_ids=False, now_ms=1)
    assert [(k, r.fetch_offset) for k, r in ctx.partitions()] == [(A1, 50), (B0, 3)]
    plan = ctx.response({A1: res(), B0: res()})
    assert keys_of(plan) == [B0]  # new partition: nothing was sent for it yet
    assert cache.total_partitions == 2
    # Forgetting a partition that is not in the session is harmless.
    ctx = cache.new_context(sid, 2, {}, [("zzz", 9)], uses_topic_ids=False, now_ms=2)
    assert ctx.kind is ContextKind.INCREMENTAL


def test_forgetting_every_partition_ends_the_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0])
    ctx = cache.new_context(sid, 1, {}, [A0], uses_topic_ids=False, now_ms=1)
    assert ctx.kind is ContextKind.SESSIONLESS
    assert ctx.response({}).session_id == 0
    assert sid not in cache and cache.total_partitions == 0


def test_wrong_epoch_is_rejected_and_leaves_session_alone() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0])
    for bad in (2, 5, -7):
        ctx = cache.new_context(sid, bad, {B0: req()}, uses_topic_ids=False, now_ms=1)
        assert ctx.kind is ContextKind.SESSION_ERROR
        assert ctx.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert ctx.partitions() == []
        plan = ctx.response({})
        assert plan.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and plan.session_id == 0
    session = cache.get(sid)
    assert session is not None and session.epoch == 1 and list(session.partitions) == [A0]


def test_unknown_session_id_is_not_found() -> None:
    cache = FetchSessionCache()
    ctx = cache.new_context(12345, 1, {A0: req()}, uses_topic_ids=False, now_ms=0)
    assert ctx.kind is ContextKind.SESSION_ERROR
    assert ctx.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_close_with_final_epoch_removes_session_and_fetches_sessionless() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0])
    ctx = cache.new_context(sid, -1, {B0: req()}, uses_topic_ids=False, now_ms=1)
    assert ctx.kind is ContextKind.SESSIONLESS and sid not in cache
    assert keys_of(ctx.response({B0: res()})) == [B0]
    assert cache.new_context(sid, 1, {}, uses_topic_ids=False, now_ms=2).error_code == (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )


def test_initial_epoch_with_an_id_replaces_the_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0])
    ctx = cache.new_context(sid, 0, {B0: req()}, uses_topic_ids=False, now_ms=1)
    assert ctx.kind is ContextKind.FULL and sid not in cache
    new_sid = ctx.response({B0: res()}).session_id
    assert new_sid not in (0, sid) and len(cache) == 1
    assert list(cache.get(new_sid).partitions) == [B0]  # type: ignore[union-attr]


def test_topic_id_sessions_and_mismatched_versions() -> None:
    cache = FetchSessionCache()
    tid = uuid.uuid4()
    sid = open_session(cache, [(tid, 0), (tid, 1)], topic_ids=True)
    ctx = cache.new_context(sid, 1, {(tid, 1): req(4)}, uses_topic_ids=True, now_ms=1)
    assert ctx.kind is ContextKind.INCREMENTAL and ctx.fetch_offset((tid, 1)) == 4
    ctx = cache.new_context(sid, 2, {}, uses_topic_ids=False, now_ms=2)
    assert ctx.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    name_sid = open_session(cache, [A0])
    ctx = cache.new_context(name_sid, 1, {}, uses_topic_ids=True, now_ms=2)
    assert ctx.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_epoch_wraps_from_int32_max_to_one() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0])
    session = cache.get(sid)
    assert session is not None
    session.epoch = INT32_MAX
    assert cache.new_context(sid, INT32_MAX, {}, uses_topic_ids=False, now_ms=1).kind is ContextKind.INCREMENTAL
    assert session.epoch == 1
    assert cache.new_context(sid, 1, {}, uses_topic_ids=False, now_ms=2).kind is ContextKind.INCREMENTAL


def test_partitions_with_records_move_to_the_back() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0, A1, B0])
    ctx = cache.new_context(sid, 1, {}, uses_topic_ids=False, now_ms=1)
    ctx.response({A0: res(records_size=10), A1: res(), B0: res(hw=12)})
    ctx = cache.new_context(sid, 2, {}, uses_topic_ids=False, now_ms=2)
    assert [k for k, _ in ctx.partitions()] == [A1, B0, A0]


def test_overlapping_request_invalidates_the_older_response() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0])
    slow = cache.new_context(sid, 1, {}, uses_topic_ids=False, now_ms=1)
    fast = cache.new_context(sid, 2, {}, uses_topic_ids=False, now_ms=2)
    assert keys_of(fast.response({A0: res(hw=11)})) == [A0]
    plan = slow.response({A0: res(hw=11)})
    assert plan.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and plan.session_id == sid
    assert plan.partitions == [] and slow.select({A0: res(hw=99)}) == []
    assert slow.throttled_response().error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_select_previews_without_changing_the_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, [A0, A1])
    ctx = cache.new_context(sid, 1, {}, uses_topic_ids=False, now_ms=1)
    results = {A0: res(hw=15), A1: res()}
    assert ctx.select(results) == [A0]
    assert ctx.select(results) == [A0]
    assert keys_of(ctx.response(results)) == [A0]


def test_throttled_responses_keep_sessions_as_they_are() -> None:
    cache = FetchSessionCache()
    full = cache.new_context(0, 0, {A0: req()}, uses_topic_ids=False, now_ms=0)
    plan = full.throttled_response()
    assert plan.session_id == 0 and plan.partitions == [] and len(cache) == 0
    sid = open_session(cache, [A0])
    inc = cache.new_context(sid, 1, {}, uses_topic_ids=False, now_ms=1)
    assert inc.throttled_response().session_id == sid
    # Nothing was recorded as sent, so the next response still reports the change.
    assert keys_of(cache.new_context(sid, 2, {}, uses_topic_ids=False, now_ms=2).response({A0: res(hw=50)})) == [A0]


def test_session_ids_are_random_positive_and_unique() -> None:
    cache = FetchSessionCache(max_slots=200, rng=random.Random(1))
    ids = {open_session(cache, [A0]) for _ in range(200)}
    assert len(ids) == 200 and all(0 < i <= INT32_MAX for i in ids)


# --------------------------------------------------------------------------
# eviction


def test_full_cache_without_evictable_sessions_serves_sessionless() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1_000)
    open_session(cache, [A0], now=0)
    open_session(cache, [A0], now=0)
    ctx = cache.new_context(0, 0, {A0: req(), A1: req(), B0: req()}, uses_topic_ids=False, now_ms=500)
    plan = ctx.response({A0: res(), A1: res(), B0: res()})
    assert plan.session_id == 0 and keys_of(plan) == [A0, A1, B0]
    assert len(cache) == 2 and cache.evictions == 0


def test_stale_session_is_evicted_first() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1_000)
    old = open_session(cache, [A0, A1, B0], now=0)
    busy = open_session(cache, [A0], now=0)
    cache.new_context(busy, 1, {}, uses_topic_ids=False, now_ms=900)
    new = open_session(cache, [A0], now=1_001)  # smaller, but `old` has been idle too long
    assert new != 0 and old not in cache and busy in cache and cache.evictions == 1


def test_larger_session_evicts_smaller_once_it_is_old_enough() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1_000)
    small = open_session(cache, [A0], now=0)
    big = open_session(cache, [A0, A1], now=0)
    for t in (600, 1_200):  # keep both in use
        cache.new_context(small, cache.get(small).epoch, {}, uses_topic_ids=False, now_ms=t)  # type: ignore[union-attr]
        cache.new_context(big, cache.get(big).epoch, {}, uses_topic_ids=False, now_ms=t)  # type: ignore[union-attr]
    # Equal size cannot evict.
    assert open_session(cache, [A0], now=1_300) == 0
    assert open_session(cache, [A0, A1, B0], now=1_300) != 0
    assert small not in cache and big in cache


def test_young_sessions_are_protected_from_consumers_but_not_from_followers() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1_000)
    consumer = open_session(cache, [A0], now=0)
    follower = open_session(cache, [A0], now=0, privileged=True)
    assert open_session(cache, [A0, A1, B0], now=10) == 0  # everyone is young
    replica = open_session(cache, [A0], now=20, privileged=True)
    assert replica != 0 and consumer not in cache and follower in cache
    assert cache.get(replica).privileged  # type: ignore[union-attr]


def test_consumer_never_evicts_a_follower_session() -> None:
    cache = FetchSessionCache(max_slots=1, eviction_ms=1_000)
    follower = open_session(cache, [A0], now=0, privileged=True)
    cache.new_context(follower, 1, {}, uses_topic_ids=False, now_ms=1_500)
    assert open_session(cache, [A0, A1, B0], now=1_600) == 0
    assert follower in cache


# --------------------------------------------------------------------------
# model-based state machine


UNIVERSE: list[PartitionKey] = [(t, p) for t in ("x", "y") for p in range(3)]


@dataclass
class ModelSession:
    epoch: int
    order: list[PartitionKey]
    offsets: dict[PartitionKey, int]
    sent: dict[PartitionKey, tuple[int, int, int] | None] = field(default_factory=dict)


results_st = st.fixed_dictionaries(
    {
        "hw": st.integers(0, 3),
        "lso": st.integers(0, 3),
        "records": st.sampled_from([0, 0, 50]),
        "error": st.sampled_from([0, 0, 0, int(ErrorCode.NOT_LEADER_OR_FOLLOWER)]),
    }
)


def to_result(d: dict[str, int]) -> PartitionResult:
    return PartitionResult(
        high_watermark=d["hw"],
        log_start_offset=0,
        last_stable_offset=d["lso"],
        records_size=d["records"],
        error_code=d["error"],
    )


def model_must_send(sent: tuple[int, int, int] | None, r: PartitionResult) -> bool:
    if sent is None or r.records_size or r.error_code:
        return True
    return sent != (r.high_watermark, r.log_start_offset, r.last_stable_offset)


def model_record(r: PartitionResult) -> tuple[int, int, int] | None:
    return None if r.error_code else (r.high_watermark, r.log_start_offset, r.last_stable_offset)


class FetchSessionMachine(RuleBasedStateMachine):
    """Drives the cache with random requests and checks it against a dictionary model (no eviction)."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = FetchSessionCache(max_slots=10_000, rng=random.Random(0))
        self.model: dict[int, ModelSession] = {}
        self.now = 0

    def _tick(self) -> int:
        self.now += 10
        return self.now

    @rule(keys=st.lists(st.sampled_from(UNIVERSE), unique=True, max_size=4), data=st.data())
    def create(self, keys: list[PartitionKey], data: st.DataObject) -> None:
        offsets = {k: data.draw(st.integers(0, 100)) for k in keys}
        ctx = self.cache.new_context(
            0, 0, {k: req(o) for k, o in offsets.items()}, uses_topic_ids=False, now_ms=self._tick()
        )
        results = {k: to_result(data.draw(results_st)) for k in keys}
        plan = ctx.response(results)
        assert plan.error_code == 0 and keys_of(plan) == keys
        assert plan.session_id not in self.model and plan.session_id != 0
        self.model[plan.session_id] = ModelSession(1, list(keys), offsets, {k: model_record(results[k]) for k in keys})

    @rule(data=st.data())
    def incremental(self, data: st.DataObject) -> None:
        if not self.model:
            return
        sid = data.draw(st.sampled_from(sorted(self.model)))
        m = self.model[sid]
        epoch = data.draw(st.sampled_from([m.epoch, m.epoch, m.epoch, m.epoch + 1, max(1, m.epoch - 1)]))
        changes = data.draw(st.dictionaries(st.sampled_from(UNIVERSE), st.integers(0, 100), max_size=3))
        forget = data.draw(st.lists(st.sampled_from(UNIVERSE), unique=True, max_size=2))
        ctx = self.cache.new_context(
            sid,
            epoch,
            {k: req(o) for k, o in changes.items()},
            forget,
            uses_topic_ids=False,
            now_ms=self._tick(),
        )
        if epoch != m.epoch:
            assert ctx.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
            return
        for k, o in changes.items():
            if k not in m.offsets:
                m.order.append(k)
                m.sent[k] = None
            m.offsets[k] = o
        for k in forget:
            if k in m.offsets:
                m.order.remove(k)
                del m.offsets[k]
                del m.sent[k]
        if not m.order:
            assert ctx.kind is ContextKind.SESSIONLESS
            del self.model[sid]
            return
        assert ctx.kind is ContextKind.INCREMENTAL
        assert [(k, r.fetch_offset) for k, r in ctx.partitions()] == [(k, m.offsets[k]) for k in m.order]
        results = {k: to_result(data.draw(results_st)) for k in m.order}
        plan = ctx.response(results)
        expected = [k for k in m.order if model_must_send(m.sent[k], results[k])]
        assert plan.session_id == sid and keys_of(plan) == expected
        for k in expected:
            m.sent[k] = model_record(results[k])
        moved = [k for k in expected if results[k].records_size > 0]
        m.order = [k for k in m.order if k not in moved] + moved
        m.epoch = next_epoch(m.epoch)

    @rule(data=st.data(), replace=st.booleans())
    def close(self, data: st.DataObject, replace: bool) -> None:
        if not self.model:
            return
        sid = data.draw(st.sampled_from(sorted(self.model)))
        ctx = self.cache.new_context(sid, 0 if replace else -1, {}, uses_topic_ids=False, now_ms=self._tick())
        del self.model[sid]
        plan = ctx.response({})
        if replace:
            self.model[plan.session_id] = ModelSession(1, [], {}, {})
        else:
            assert plan.session_id == 0

    @rule(sid=st.integers(1, INT32_MAX), epoch=st.integers(1, 5))
    def unknown(self, sid: int, epoch: int) -> None:
        if sid in self.model:
            return
        ctx = self.cache.new_context(sid, epoch, {UNIVERSE[0]: req()}, uses_topic_ids=False, now_ms=self._tick())
        assert ctx.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND

    @invariant()
    def matches_model(self) -> None:
        assert len(self.cache) == len(self.model)
        assert self.cache.total_partitions == sum(len(m.order) for m in self.model.values())
        for sid, m in self.model.items():
            session = self.cache.get(sid)
            assert session is not None and session.epoch == m.epoch
            assert list(session.partitions) == m.order


FetchSessionMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestFetchSessionMachine = FetchSessionMachine.TestCase
TestFetchSessionMachine.pytestmark = [pytest.mark.slow]  # many-example state machine: not in the fast loop
