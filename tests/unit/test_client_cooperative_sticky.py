"""CooperativeStickyAssignor (shoal/client/consumer/assignors/cooperative.py): who held what comes
from the subscriptions' owned partitions and generation, and a partition never goes to a new
owner in the rebalance in which its old owner still holds it; the follow-up rebalance, after the
old owner revoked it, hands it on and ends balanced."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.client.consumer.assignors.builtin import make_assignors
from shoal.client.consumer.assignors.cooperative import (
    CooperativeStickyAssignor,
    cooperative_member_data,
    cooperative_sticky_assign,
    transferring_ownership,
)
from shoal.client.consumer.assignors.subscription import MemberSubscription, decode_subscription, encode_subscription
from shoal.client.core.cluster import TopicPartition


def tp(t: str, p: int) -> TopicPartition:
    return TopicPartition(t, p)


def sub(topics, owned=(), generation=-1, user_data=None) -> MemberSubscription:
    return MemberSubscription(tuple(topics), user_data, tuple(owned), generation)


def test_member_data_from_the_subscription_or_the_user_data() -> None:
    owned = (tp("t", 0), tp("t", 1))
    assert cooperative_member_data(sub(["t"], owned, 7)) == (list(owned), 7)
    assert cooperative_member_data(sub(["t"], owned, -1, struct.pack(">i", 4))) == (list(owned), 4)
    assert cooperative_member_data(sub(["t"], owned, -1, None)) == (list(owned), None)
    a = CooperativeStickyAssignor()
    assert a.subscription_user_data(["t"]) == struct.pack(">i", -1)
    a.on_assignment(owned, 12)
    assert a.subscription_user_data(["t"]) == struct.pack(">i", 12)
    # a v3 subscription carries owned partitions and generation through the wire bytes
    wire = decode_subscription(encode_subscription(sub(["t"], owned, 12, a.subscription_user_data(["t"]))))
    assert cooperative_member_data(wire) == (list(owned), 12)
    assert make_assignors(["cooperative-sticky"])[0].cooperative


def test_a_joining_member_gets_moved_partitions_only_in_the_follow_up() -> None:
    counts = {"t": 6}
    first = cooperative_sticky_assign(counts, {"c1": sub(["t"]), "c2": sub(["t"])})
    assert sorted(len(v) for v in first.values()) == [3, 3]
    subs = {m: sub(["t"], first[m], 1) for m in ("c1", "c2")} | {"c3": sub(["t"])}
    second = cooperative_sticky_assign(counts, subs)
    assert second["c3"] == []  # everything it would get is still owned by someone
    assert len(second["c1"]) == 2 and len(second["c2"]) == 2
    assert set(second["c1"]) <= set(first["c1"]) and set(second["c2"]) <= set(first["c2"])
    moved = (set(first["c1"]) - set(second["c1"])) | (set(first["c2"]) - set(second["c2"]))
    assert len(moved) == 2
    subs = {m: sub(["t"], second[m], 2) for m in ("c1", "c2", "c3")}
    third = cooperative_sticky_assign(counts, subs)
    assert set(third["c3"]) == moved
    assert third["c1"] == second["c1"] and third["c2"] == second["c2"]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(1, 5), st.integers(1, 4), st.randoms(use_true_random=False))
def test_no_partition_changes_hands_in_one_rebalance(partitions, before, joiners, rnd) -> None:
    counts = {"t": partitions}
    members = [f"m{i}" for i in range(before)]
    plan = cooperative_sticky_assign(counts, {m: sub(["t"]) for m in members})
    members += [f"n{i}" for i in range(joiners)]
    rnd.shuffle(members)
    owned = {m: plan.get(m, []) for m in members}
    for _ in range(4):  # rebalances until nothing moves
        subs = {m: sub(["t"], owned[m], 1 if owned[m] else -1) for m in members}
        nxt = cooperative_sticky_assign(counts, subs)
        holder = {p: m for m, ps in owned.items() for p in ps}
        for m, ps in nxt.items():
            for p in ps:
                assert holder.get(p, m) == m, f"{p} given to {m} while {holder[p]} holds it"
        assert transferring_ownership(subs, nxt) == {}
        owned = {m: list(nxt[m]) for m in members}
    sizes = [len(v) for v in owned.values()]
    assert sum(sizes) == partitions and max(sizes) - min(sizes) <= 1
