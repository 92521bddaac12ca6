"""Client-side assignors (range, roundrobin, sticky) against Java's results.

Golden expectations: Java's orderings (String.hashCode, HashMap/HashSet
iteration, String.compareTo) as printed by a JVM; range and roundrobin cases
from Kafka's RangeAssignorTest/RoundRobinAssignorTest; and for sticky, 110
cases whose expected assignment was computed by Apache Kafka's own
AbstractStickyAssignor (``test_client_assignors_sticky_golden.txt``; 70 of them
change if HashMap order is replaced by insertion order). Then hypothesis:
every assignment is valid, sticky is balanced, and after a member joins or
leaves no member loses a partition it could have kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.client.consumer.assignors.builtin import (
    RangeAssignor,
    StickyAssignor,
    make_assignors,
    range_assign,
    roundrobin_assign,
)
from shoal.client.consumer.assignors.java_order import (
    JavaHashMap,
    JavaHashSet,
    java_sorted,
    topic_partition_hash,
)
from shoal.client.consumer.assignors.sticky import decode_user_data, encode_user_data, sticky_assign
from shoal.client.consumer.assignors.subscription import (
    MemberSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from shoal.client.core.cluster import TopicPartition
from shoal.protocol.api import codec
from shoal.protocol.java_hash import java_string_hash, java_string_hashcode


def tps(*items: str) -> list[TopicPartition]:
    """ "t-0", "t-1" ... -> sorted TopicPartitions."""
    out = []
    for item in items:
        topic, _, p = item.rpartition("-")
        out.append(TopicPartition(topic, int(p)))
    return sorted(out)


def subs(**topics: tuple[str, ...]) -> dict[str, MemberSubscription]:
    return {member: MemberSubscription(t) for member, t in topics.items()}


# -- Java's orderings -----------------------------------------------------------------------


def signed(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


def test_string_hash_code_and_compare_to_as_java() -> None:
    # printed by a JVM: "".hashCode(), "a".hashCode(), ...
    cases = {
        "": 0,
        "a": 97,
        "hello": 99162322,
        "polygenelubricants": -2147483648,
        "\u00fc": 252,
        "\U0001f600": 1772899,
        "consumer-1-1b8a6c6e-8f0c-4f5e-9a56-8a3f1f3f0e2a": 209702569,
        "Aa": 2112,
        "BB": 2112,
    }
    assert {s: signed(java_string_hash(s)) for s in cases} == cases
    assert {s: java_string_hashcode(s) for s in cases} == cases  # the signed form the broker places groups by
    # Collections.sort orders by UTF-16 code units: U+1F600 (D83D DE00) before U+FFFF
    assert java_sorted(["b", "B", "a", "\u00e9", "\U0001f600", "\uffff", "ab"]) == [
        "B", "a", "ab", "b", "\u00e9", "\U0001f600", "\uffff"]  # fmt: skip
    assert signed(topic_partition_hash("orders", 3)) == -1008769277


def test_hash_map_and_hash_set_iterate_as_java() -> None:
    m: JavaHashMap[str, int] = JavaHashMap()
    for i in range(20):  # grows from 16 to 32 buckets on the way
        m[f"member-{i * 7919 % 101}"] = i
    for gone in (f"member-{3 * 7919 % 101}", f"member-{5 * 7919 % 101}"):
        del m[gone]
    m[f"member-{3 * 7919 % 101}"] = 99  # back at the end of its bucket
    m["Aa"] = 1
    m["BB"] = 2  # same hashCode as "Aa": after it in the same bucket
    java = "Aa,BB,member-28,member-25,member-6,member-47,member-69,member-44,member-66,member-88,member-9,member-22,"
    java += "member-31,member-41,member-63,member-85,member-50,member-72,member-82,member-91,member-0"
    assert ",".join(m.keys()) == java
    s: JavaHashSet[TopicPartition] = JavaHashSet()
    for p in range(15):
        s.add(TopicPartition("orders" if p % 2 == 0 else "payments", p))
    s.discard(TopicPartition("orders", 4))
    s.add(TopicPartition("orders", 4))
    java_set = "payments-3 orders-8 payments-5 orders-10 orders-12 payments-1 orders-14 payments-11 payments-13 "
    java_set += "payments-7 payments-9 orders-0 orders-2 orders-4 orders-6"
    assert " ".join(str(tp) for tp in s) == java_set
    assert s.first() == TopicPartition("payments", 3)


# -- consumer protocol bytes -------------------------------------------------------------------


def test_subscription_and_assignment_bytes() -> None:
    data = encode_subscription(MemberSubscription(("t",)))
    # v3: topics ["t"], UserData null, OwnedPartitions [], GenerationId -1, RackId null
    assert data == b"\x00\x03" + b"\x00\x00\x00\x01\x00\x01t" + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x00" + (
        b"\xff\xff\xff\xff\xff\xff")  # fmt: skip
    full = MemberSubscription(("a", "b"), b"ud", (TopicPartition("a", 1),), 7, "rack-1", "inst")
    assert decode_subscription(encode_subscription(full), "inst") == full
    # an old (v0) member's metadata still reads; so does a newer version's, by our newest layout
    v0 = encode_subscription(full, version=0)
    assert decode_subscription(v0) == MemberSubscription(("a", "b"), b"ud")
    newer = b"\x00\x09" + encode_subscription(full)[2:] + b"future fields"
    assert decode_subscription(newer, "inst") == full
    parts = [TopicPartition("b", 2), TopicPartition("a", 1), TopicPartition("b", 0)]
    assert decode_assignment(encode_assignment(parts, b"x")) == (sorted(parts), b"x")
    assert decode_assignment(b"") == ([], None)  # an empty SyncGroup assignment: nothing


def test_sticky_user_data_v1_and_v0() -> None:
    parts = tps("t-0", "t-3", "u-1")
    assert decode_user_data(encode_user_data(parts, 5)) == (parts, 5)
    c = codec("StickyAssignorUserData", 0)
    v0 = c.encode(c.cls(previous_assignment=[c.cls.TopicPartitions(topic="t", partitions=[2])]))
    assert decode_user_data(v0) == ([TopicPartition("t", 2)], None)  # no generation in v0
    assert decode_user_data(None) == ([], None)
    assert decode_user_data(b"\x01") == ([], -1)  # unreadable: as Java, held nothing
    a = StickyAssignor()
    assert a.subscription_user_data(["t"]) is None  # nothing held yet
    a.on_assignment(parts, 9)
    assert decode_user_data(a.subscription_user_data(["t"])) == (parts, 9)
    assert [x.name for x in make_assignors(["roundrobin", "sticky", "range"])] == ["roundrobin", "sticky", "range"]
    assert [x.name for x in make_assignors(["cooperative-sticky"])] == ["cooperative-sticky"]
    with pytest.raises(ValueError):
        make_assignors(["no-such-assignor"])


# -- range (Kafka's RangeAssignorTest) ------------------------------------------------------------


def test_range_golden() -> None:
    assert range_assign({}, subs(c=("t",))) == {"c": []}
    assert range_assign({"t": 3}, subs(c=("t",))) == {"c": tps("t-0", "t-1", "t-2")}
    assert range_assign({"t": 3, "other": 3}, subs(c=("t",))) == {"c": tps("t-0", "t-1", "t-2")}
    assert range_assign({"t1": 1, "t2": 2}, subs(c=("t1", "t2"))) == {"c": tps("t1-0", "t2-0", "t2-1")}
    assert range_assign({"t": 1}, subs(c1=("t",), c2=("t",))) == {"c1": tps("t-0"), "c2": []}
    assert range_assign({"t": 2}, subs(c1=("t",), c2=("t",))) == {"c1": tps("t-0"), "c2": tps("t-1")}
    mixed = range_assign({"t1": 3, "t2": 2}, subs(c1=("t1",), c2=("t1", "t2"), c3=("t1",)))
    assert mixed == {"c1": tps("t1-0"), "c2": tps("t1-1", "t2-0", "t2-1"), "c3": tps("t1-2")}
    six = range_assign({"t1": 3, "t2": 3}, subs(c1=("t1", "t2"), c2=("t1", "t2")))
    assert six == {"c1": tps("t1-0", "t1-1", "t2-0", "t2-1"), "c2": tps("t1-2", "t2-2")}
    # static members sort by group.instance.id and before dynamic ones (Java's MemberInfo)
    static = {
        "b-member": MemberSubscription(("t1", "t2"), group_instance_id="instance-1"),
        "a-member": MemberSubscription(("t1", "t2")),
    }
    assert range_assign({"t1": 3, "t2": 3}, static) == {
        "b-member": tps("t1-0", "t1-1", "t2-0", "t2-1"), "a-member": tps("t1-2", "t2-2")}  # fmt: skip
    # member ids change across restarts; the static assignment does not
    for ids in (("m1", "m2", "m3"), ("z9", "y8", "x7")):
        group = {i: MemberSubscription(("t",), group_instance_id=f"instance-{n}") for n, i in enumerate(ids)}
        plan = range_assign({"t": 5}, group)
        assert [plan[i] for i in ids] == [tps("t-0", "t-1"), tps("t-2", "t-3"), tps("t-4")]


def test_roundrobin_golden() -> None:
    six = roundrobin_assign({"t1": 3, "t2": 3}, subs(c1=("t1", "t2"), c2=("t1", "t2")))
    assert six == {"c1": tps("t1-0", "t1-2", "t2-1"), "c2": tps("t1-1", "t2-0", "t2-2")}
    mixed = roundrobin_assign({"t1": 3, "t2": 2}, subs(c1=("t1",), c2=("t1", "t2"), c3=("t1",)))
    assert mixed == {"c1": tps("t1-0"), "c2": tps("t1-1", "t2-0", "t2-1"), "c3": tps("t1-2")}
    static = {
        "consumer2": MemberSubscription(("t1", "t2")),
        "consumer1": MemberSubscription(("t1", "t2"), group_instance_id="instance1"),
    }
    assert roundrobin_assign({"t1": 3, "t2": 3}, static) == {
        "consumer1": tps("t1-0", "t1-2", "t2-1"), "consumer2": tps("t1-1", "t2-0", "t2-2")}  # fmt: skip
    assert roundrobin_assign({"t": 2}, subs(c=("nope",))) == {"c": []}


# -- sticky: Java's own results ----------------------------------------------------------------

GOLDEN = Path(__file__).with_name("test_client_assignors_sticky_golden.txt")


def golden_cases() -> list[tuple[dict, dict, dict]]:
    cases = []
    for block in GOLDEN.read_text().split("---\n"):
        lines = [line for line in block.splitlines() if line and not line.startswith("#")]
        if not lines:
            continue
        counts: dict[str, int] = {}
        members: dict[str, MemberSubscription] = {}
        expected: dict[str, list[TopicPartition]] = {}
        for line in lines:
            f = line.split(" ")
            if f[0] == "T":
                counts[f[1]] = int(f[2])
            elif f[0] == "M":
                member, sub_gen, kind, ud_gen, topics, owned = f[1], int(f[2]), f[3], int(f[4]), f[5], f[6]
                held = [] if owned == "-" else [parse_tp(x) for x in owned.split(",")]
                user_data = None
                if kind == "v1":
                    user_data = encode_user_data(held, ud_gen)
                elif kind == "v0":
                    c = codec("StickyAssignorUserData", 0)
                    by_topic: dict[str, list[int]] = {}
                    for tp in held:
                        by_topic.setdefault(tp.topic, []).append(tp.partition)
                    user_data = c.encode(
                        c.cls(
                            previous_assignment=[
                                c.cls.TopicPartitions(topic=t, partitions=p) for t, p in by_topic.items()
                            ]
                        )
                    )
                members[member] = MemberSubscription(tuple(topics.split(",")) if topics != "-" else (), user_data,
                                                     (), sub_gen)  # fmt: skip
            elif f[0] == "R":
                expected[f[1]] = [] if f[2] == "-" else [parse_tp(x) for x in f[2].split(",")]
        cases.append((counts, members, expected))
    return cases


def parse_tp(text: str) -> TopicPartition:
    topic, _, p = text.rpartition("/")
    return TopicPartition(topic, int(p))


def test_sticky_matches_kafkas_abstract_sticky_assignor() -> None:
    cases = golden_cases()
    assert len(cases) == 110
    for counts, members, expected in cases:
        got = sticky_assign(counts, members)
        assert {m: sorted(p) for m, p in got.items()} == {m: sorted(p) for m, p in expected.items()}


def test_sticky_golden_keeps_and_moves() -> None:
    # Kafka's StickyAssignorTest.testAddRemoveConsumerOneTopic
    first = sticky_assign({"t": 3}, subs(c1=("t",)))
    assert first == {"c1": tps("t-0", "t-1", "t-2")}
    second = sticky_assign(
        {"t": 3},
        {
            "c1": MemberSubscription(("t",), encode_user_data(first["c1"], 1), (), 1),
            "c2": MemberSubscription(("t",), None, (), -1),
        },
    )
    assert second == {"c1": tps("t-0", "t-1"), "c2": tps("t-2")}
    third = sticky_assign({"t": 3}, {"c2": MemberSubscription(("t",), encode_user_data(second["c2"], 2), (), 2)})
    assert third == {"c2": tps("t-0", "t-1", "t-2")}


# -- properties ---------------------------------------------------------------------------------


def valid(
    plan: dict[str, list[TopicPartition]], counts: dict[str, int], members: dict[str, MemberSubscription]
) -> None:
    seen = [tp for parts in plan.values() for tp in parts]
    assert len(seen) == len(set(seen)), "a partition given twice"
    assert set(plan) == set(members)
    for m, parts in plan.items():
        assert all(tp.topic in members[m].topics for tp in parts), "a partition of a topic not subscribed"
    wanted = {
        TopicPartition(t, p)
        for t, n in counts.items()
        for p in range(n)
        if any(t in s.topics for s in members.values())
    }
    assert set(seen) == wanted, "a subscribed partition left out"


def balanced(
    plan: dict[str, list[TopicPartition]], counts: dict[str, int], members: dict[str, MemberSubscription]
) -> None:
    """Java's isBalanced: nobody could take a partition from someone with two or more than it."""
    owner = {tp: m for m, parts in plan.items() for tp in parts}
    for m, parts in plan.items():
        mine = set(parts)
        for t in members[m].topics:
            for p in range(counts.get(t, 0)):
                tp = TopicPartition(t, p)
                if tp not in mine:
                    assert len(plan[owner[tp]]) <= len(parts) + 1, f"{m} could take {tp}"


topics_st = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 12), min_size=1)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), counts=topics_st, n=st.integers(1, 8), same=st.booleans())
def test_every_assignor_is_valid_and_sticky_is_balanced(data, counts, n, same) -> None:
    names = [f"m{i:02d}-{data.draw(st.integers(0, 999))}" for i in range(n)]
    all_topics = sorted(counts)
    members = {}
    for m in dict.fromkeys(names):
        topics = all_topics if same else data.draw(st.lists(st.sampled_from(all_topics), min_size=1, unique=True))
        members[m] = MemberSubscription(tuple(topics))
    for assign in (range_assign, roundrobin_assign, sticky_assign):
        valid(assign(counts, members), counts, members)
    plan = sticky_assign(counts, members)
    balanced(plan, counts, members)
    if same:
        sizes = [len(p) for p in plan.values()]
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(counts=topics_st, n=st.integers(1, 8), change=st.sampled_from(["join", "leave", "both"]))
def test_sticky_keeps_what_it_can_when_members_come_and_go(counts, n, change) -> None:
    topics = tuple(sorted(counts))
    members = {f"m{i}": MemberSubscription(topics) for i in range(n)}
    before = sticky_assign(counts, members)
    after_members = {}
    for i, (m, parts) in enumerate(before.items()):
        if change in ("leave", "both") and i == 0 and n > 1:
            continue  # this one left
        after_members[m] = MemberSubscription(topics, encode_user_data(parts, 1), (), 1)
    if change in ("join", "both"):
        after_members["new"] = MemberSubscription(topics, None, (), -1)
    after = sticky_assign(counts, after_members)
    valid(after, counts, after_members)
    sizes = [len(p) for p in after.values()]
    assert max(sizes) - min(sizes) <= 1
    for m, parts in after.items():
        held = set(before.get(m, ()))
        # nobody gives up a partition it could have kept at its new size
        assert len(held & set(parts)) >= min(len(held), len(parts)), m


def test_range_assignor_object_has_no_user_data() -> None:
    a = RangeAssignor()
    assert a.name == "range" and a.subscription_user_data(["t"]) is None
    assert a.assign({"t": 2}, subs(x=("t",))) == {"x": tps("t-0", "t-1")}
