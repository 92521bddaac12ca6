"""Tests for the share-group SimpleAssignor (shoal/broker/groups/share/assignor.py)."""

from __future__ import annotations

import math
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.broker.groups.share.assignor import assign


def _homogeneous(n_members: int, topics: frozenset[str]) -> dict[str, frozenset[str]]:
    return {f"m{i:03d}": topics for i in range(n_members)}


def _pairs(result: dict[str, dict[str, set[int]]]) -> set[tuple[str, str, int]]:
    return {(m, t, p) for m, by_topic in result.items() for t, ps in by_topic.items() for p in ps}


def _holders(result: dict[str, dict[str, set[int]]]) -> Counter[tuple[str, int]]:
    return Counter((t, p) for _, t, p in _pairs(result))


def _loads(result: dict[str, dict[str, set[int]]]) -> list[int]:
    return [sum(len(ps) for ps in result[m].values()) for m in sorted(result)]


def _frozen(result: dict[str, dict[str, set[int]]]) -> dict[str, dict[str, frozenset[int]]]:
    return {m: {t: frozenset(ps) for t, ps in by_topic.items()} for m, by_topic in result.items()}


# --- the seed's worked examples -------------------------------------------------------


def test_three_members_seven_partitions_exclusive() -> None:
    result = assign(_homogeneous(3, frozenset({"t"})), {"t": 7}, None)
    assert _loads(result) == [3, 2, 2]
    assert _holders(result) == Counter({("t", p): 1 for p in range(7)})


def test_six_members_four_partitions_sharing_two() -> None:
    result = assign(_homogeneous(6, frozenset({"t"})), {"t": 4}, None)
    # desiredSharing = ceil(6/4) = 2; the 1st and 4th members get two partitions.
    assert _loads(result) == [2, 1, 1, 2, 1, 1]
    assert _holders(result) == Counter({("t", p): 2 for p in range(4)})


def test_seven_members_three_partitions_sharing_three() -> None:
    result = assign(_homogeneous(7, frozenset({"t"})), {"t": 3}, None)
    # Every partition shared by 3 members; two members consume 2, five consume 1.
    assert _loads(result) == [2, 1, 1, 2, 1, 1, 1]
    assert _holders(result) == Counter({("t", p): 3 for p in range(3)})


def test_edge_cases() -> None:
    assert assign({}, {"t": 3}, None) == {}
    # Topic that does not exist yet is skipped; members still appear.
    assert assign({"a": frozenset({"nope"})}, {"t": 3}, None) == {"a": {}}
    # Multiple topics in the homogeneous pool.
    result = assign(_homogeneous(2, frozenset({"x", "y", "nope"})), {"x": 1, "y": 2}, None)
    assert _loads(result) == [2, 1]
    assert set(_holders(result)) == {("x", 0), ("y", 0), ("y", 1)}
    # Stale current pairs (gone topic, out-of-range partition, unknown member) are dropped.
    stale = {"m000": {"gone": frozenset({0}), "x": frozenset({5})}, "ghost": {"x": frozenset({0})}}
    result = assign(_homogeneous(2, frozenset({"x"})), {"x": 2}, stale)
    assert result == {"m000": {"x": {0}}, "m001": {"x": {1}}} or result == {"m000": {"x": {1}}, "m001": {"x": {0}}}


def test_sticky_keeps_current_when_balanced() -> None:
    members = _homogeneous(3, frozenset({"t"}))
    current = {"m000": {"t": frozenset({6, 5})}, "m001": {"t": frozenset({0, 1, 2})}, "m002": {"t": frozenset({3, 4})}}
    result = assign(members, {"t": 7}, current)
    assert result == {"m000": {"t": {5, 6}}, "m001": {"t": {0, 1, 2}}, "m002": {"t": {3, 4}}}


def test_heterogeneous_example() -> None:
    members = {"a": frozenset({"x"}), "b": frozenset({"x", "y"}), "c": frozenset({"y"})}
    result = assign(members, {"x": 2, "y": 4}, None)
    assert set(result["a"]) <= {"x"} and set(result["c"]) <= {"y"}
    assert _holders(result) == Counter({("x", 0): 1, ("x", 1): 1, **{("y", p): 1 for p in range(4)}})
    assert len(result["a"]["x"]) == 1 and len(result["b"]["x"]) == 1
    assert sorted(len(result[m]["y"]) for m in "bc") == [2, 2]


# --- properties -----------------------------------------------------------------------

TOPICS = ["t0", "t1", "t2", "t3"]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, frozenset[str]], dict[str, int], dict | None]:
    n_members = draw(st.integers(1, 14))
    ids = draw(
        st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=n_members, max_size=n_members, unique=True)
    )
    topic_partitions = draw(st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 9), max_size=4))
    if draw(st.booleans()):
        subs = frozenset(draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4)))
        members = dict.fromkeys(ids, subs)
    else:
        members = {m: frozenset(draw(st.lists(st.sampled_from(TOPICS), max_size=4))) for m in ids}
    current = None
    if draw(st.booleans()):
        current = draw(
            st.dictionaries(
                st.sampled_from([*ids, "ghost"]),
                st.dictionaries(st.sampled_from(TOPICS), st.frozensets(st.integers(0, 11), max_size=6), max_size=3),
                max_size=len(ids) + 1,
            )
        )
    return members, topic_partitions, current


def _check_invariants(members, topic_partitions, result) -> None:
    assert set(result) == set(members)
    existing = {t: n for t, n in topic_partitions.items() if n > 0}
    for m, by_topic in result.items():
        for t, ps in by_topic.items():
            assert t in members[m] and t in existing, "only subscribed existing topics"
            assert ps and all(0 <= p < existing[t] for p in ps)
    holders = _holders(result)
    homogeneous = len(set(members.values())) == 1
    if homogeneous:
        subs = next(iter(members.values()))
        total = sum(existing.get(t, 0) for t in subs)
        if total:
            sharing = math.ceil(len(members) / total)
            wanted = {(t, p) for t in subs if t in existing for p in range(existing[t])}
            assert holders == Counter(dict.fromkeys(wanted, sharing))
            loads = _loads(result)
            assert max(loads) - min(loads) <= 1
            assert sum(loads) == sharing * total
        else:
            assert not holders
    else:
        for t, n in existing.items():
            subscribers = [m for m in members if t in members[m]]
            if not subscribers:
                assert all((t, p) not in holders for p in range(n))
                continue
            sharing = math.ceil(len(subscribers) / n)
            for p in range(n):
                assert 1 <= holders[(t, p)] <= sharing
            per_topic = [len(result[m].get(t, ())) for m in subscribers]
            assert max(per_topic) - min(per_topic) <= 1


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_and_idempotence(scenario) -> None:
    members, topic_partitions, current = scenario
    result = assign(members, topic_partitions, current)
    _check_invariants(members, topic_partitions, result)
    # Deterministic, independent of mapping order.
    assert assign(dict(reversed(list(members.items()))), topic_partitions, current) == result
    # Feeding the answer back as the current assignment changes nothing.
    assert assign(members, topic_partitions, _frozen(result)) == result


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 30), st.integers(1, 40))
def test_homogeneous_loads_follow_formula(n_members, n_parts) -> None:
    result = assign(_homogeneous(n_members, frozenset({"t"})), {"t": n_parts}, None)
    slots = math.ceil(n_members / n_parts) * n_parts
    expected = [math.ceil(slots * (i + 1) / n_members) - math.ceil(slots * i / n_members) for i in range(n_members)]
    assert _loads(result) == expected


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.integers(2, 40), st.integers(0, 12), st.booleans())
def test_stickiness_member_joins(n_members, n_parts, position, as_current_output) -> None:
    if n_parts < n_members + 1:
        n_parts = n_members + 1  # no sharing even after the join
    members = _homogeneous(n_members, frozenset({"t"}))
    before = assign(members, {"t": n_parts}, None)
    # The newcomer's id sorts anywhere among the existing ones.
    newcomer = f"m{min(position, n_members):03d}x"
    after = assign({**members, newcomer: frozenset({"t"})}, {"t": n_parts}, _frozen(before))
    moved = _pairs(before) - _pairs(after)
    assert len(moved) <= math.ceil(n_parts / (n_members + 1))
    assert len(moved) == len(after[newcomer]["t"])


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(2, 12), st.integers(1, 40), st.integers(0, 11))
def test_stickiness_member_leaves(n_members, n_parts, leaver_index) -> None:
    n_parts = max(n_parts, n_members)  # no sharing before the leave
    members = _homogeneous(n_members, frozenset({"t"}))
    before = assign(members, {"t": n_parts}, None)
    leaver = sorted(members)[leaver_index % n_members]
    rest = {m: s for m, s in members.items() if m != leaver}
    after = assign(rest, {"t": n_parts}, _frozen(before))
    survivors_before = {pair for pair in _pairs(before) if pair[0] != leaver}
    assert survivors_before <= _pairs(after), "only the leaver's partitions move"


def test_timing_thousand_by_thousand() -> None:
    members = _homogeneous(1000, frozenset(f"t{i}" for i in range(10)))
    topics = {f"t{i}": 100 for i in range(10)}
    start = time.perf_counter()
    first = assign(members, topics, None)
    del members["m000"]
    members["zzz"] = frozenset(topics)
    second = assign(members, topics, _frozen(first))
    shared = assign(members, {"t0": 100}, _frozen(second))  # sharing 10 ways
    hetero = {m: frozenset({f"t{i % 10}", f"t{(i + 3) % 10}"}) for i, m in enumerate(sorted(members))}
    assign(hetero, topics, _frozen(second))
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, elapsed
    assert sorted(_loads(first)) == [1] * 1000
    assert len(_pairs(first) - _pairs(second)) == 1  # only the leaver's partition moved
    assert set(_holders(shared).values()) == {10}


def test_fill_repairs_when_only_own_partitions_have_room() -> None:
    # m002 keeps partition 1 and earns the larger quota; greedy filling leaves it
    # needing a slot only on partition 1, which a swap with another member fixes.
    members = _homogeneous(3, frozenset({"t"}))
    result = assign(members, {"t": 2}, {"m000": {"t": frozenset()}, "m002": {"t": frozenset({1})}})
    assert _holders(result) == Counter({("t", 0): 2, ("t", 1): 2})
    assert 1 in result["m002"]["t"]
    assert sorted(_loads(result)) == [1, 1, 2]


@given(st.integers(1, 8), st.sets(st.integers(0, 9), max_size=10), st.sets(st.integers(0, 9), max_size=10))
def test_only_assignable_partitions_are_assigned(n_members, allowed_a, allowed_b) -> None:
    members = {f"m{i}": frozenset({"a", "b"}) for i in range(n_members)}
    out = assign(members, {"a": allowed_a, "b": allowed_b})
    got_a = set().union(*(o.get("a", set()) for o in out.values()))
    got_b = set().union(*(o.get("b", set()) for o in out.values()))
    assert got_a == allowed_a and got_b == allowed_b
    loads = [sum(len(ps) for ps in o.values()) for o in out.values()]
    assert max(loads) - min(loads) <= 1
