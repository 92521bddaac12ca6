"""The consumer groups' server-side assignors (shoal/broker/groups/consumer/assignor.py), by property.

For any members, subscriptions, partition counts and previous assignment:
no partition is owned twice, only subscribers own a topic's partitions, every
partition of a subscribed topic is owned; ``uniform`` with one subscription
for all gives counts that differ by at most one, and ``range`` does so per
topic; and both are sticky: re-running on their own output changes nothing,
and a member joining only takes partitions (nobody else gains any).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.broker.groups.consumer.assignor import range_assign, uniform_assign

TOPICS = ["a", "b", "c", "d"]

members_st = st.dictionaries(
    st.sampled_from([f"m{i:02d}" for i in range(12)]),
    st.frozensets(st.sampled_from(TOPICS), min_size=1),
    min_size=1,
    max_size=10,
)
counts_st = st.fixed_dictionaries({t: st.integers(0, 9) for t in TOPICS})
homogeneous_st = st.tuples(
    st.lists(st.sampled_from([f"m{i:02d}" for i in range(30)]), min_size=1, max_size=25, unique=True),
    st.frozensets(st.sampled_from(TOPICS), min_size=1),
)


def owners(result) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for m, by_topic in result.items():
        for t, ps in by_topic.items():
            for p in ps:
                out.setdefault((t, p), []).append(m)
    return out


def check_valid(members, counts, result) -> None:
    own = owners(result)
    assert all(len(ms) == 1 for ms in own.values()), "a partition owned twice"
    for (t, p), (m,) in own.items():
        assert t in members[m] and 0 <= p < counts[t]
    wanted = {(t, p) for s in members.values() for t in s for p in range(counts[t])}
    assert set(own) == wanted


def sizes(result, members) -> list[int]:
    return [sum(len(ps) for ps in result.get(m, {}).values()) for m in members]


@settings(max_examples=200, deadline=None)
@given(members_st, counts_st, st.data())
def test_valid_and_sticky_for_any_subscriptions(members, counts, data) -> None:
    for fn in (uniform_assign, range_assign):
        first = fn(members, counts)
        check_valid(members, counts, first)
        assert fn(members, counts, first) == first  # stable: nothing moves without a reason
        # a previous assignment from anywhere (even invalid) still gives a valid one
        junk = {m: {t: frozenset(data.draw(st.sets(st.integers(0, 12), max_size=4))) for t in TOPICS} for m in members}
        check_valid(members, counts, fn(members, counts, junk))


@settings(max_examples=200, deadline=None)
@given(homogeneous_st, counts_st)
def test_uniform_balances_identical_subscriptions(spec, counts) -> None:
    names, subs = spec
    members = dict.fromkeys(names, subs)
    result = uniform_assign(members, counts)
    check_valid(members, counts, result)
    s = sizes(result, names)
    assert max(s) - min(s) <= 1


@settings(max_examples=200, deadline=None)
@given(homogeneous_st, counts_st)
def test_range_balances_each_topic(spec, counts) -> None:
    names, subs = spec
    members = dict.fromkeys(names, subs)
    result = range_assign(members, counts)
    for t in subs:
        per = [len(result.get(m, {}).get(t, ())) for m in names]
        assert max(per) - min(per) <= 1


@settings(max_examples=150, deadline=None)
@given(homogeneous_st, counts_st)
def test_a_joining_member_only_takes(spec, counts) -> None:
    names, subs = spec
    members = dict.fromkeys(names, subs)
    for fn in (uniform_assign, range_assign):
        before = fn(members, counts)
        after = fn({**members, "zz-new": subs}, counts, before)
        for m in names:
            for t, ps in after.get(m, {}).items():
                assert ps <= before.get(m, {}).get(t, frozenset()), f"{fn.__name__}: {m} gained on a join"
        # and a member leaving: the others keep what they had
        if len(names) > 1:
            gone = names[0]
            rest = {m: s for m, s in members.items() if m != gone}
            after = fn(rest, counts, before)
            for m in rest:
                for t, ps in before.get(m, {}).items():
                    kept = ps & after.get(m, {}).get(t, frozenset())
                    assert len(kept) >= min(len(ps), sum(len(x) for x in after.get(m, {}).values()))


def test_range_gives_contiguous_ranges_to_a_fresh_group() -> None:
    members = dict.fromkeys(["m1", "m2", "m3"], frozenset({"a"}))
    result = range_assign(members, {"a": 7})
    assert [sorted(result[m]["a"]) for m in ("m1", "m2", "m3")] == [[0, 1, 2], [3, 4], [5, 6]]


def test_uniform_spreads_differing_subscriptions() -> None:
    members = {"m1": frozenset({"a"}), "m2": frozenset({"a", "b"}), "m3": frozenset({"b"})}
    result = uniform_assign(members, {"a": 4, "b": 2})
    assert sorted(sizes(result, ["m1", "m2", "m3"])) == [2, 2, 2]
