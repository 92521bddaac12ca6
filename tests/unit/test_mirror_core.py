"""The sans-IO core of ``shoal mirror``: offset maps, checkpoint records, the plan."""

from __future__ import annotations

import pytest

from shoal.client.core.errors import ConfigError
from shoal.client.core.records import ConsumerRecord
from shoal.client.mirror.checkpoints import CheckpointKey, decode_checkpoint, encode_checkpoint
from shoal.client.mirror.offsets import OffsetMap, Run
from shoal.client.mirror.plan import (
    MirrorError,
    TopicSpec,
    matcher,
    plan_topics,
    same_record,
    selectable_topic,
    settings_for,
    share_configs,
    tail_to_match,
    translate_offsets,
)


def copied(pairs: list[tuple[int, int]], source_next: int = 0, target_next: int = 0, max_runs: int = 256) -> OffsetMap:
    m = OffsetMap(source_next, target_next, max_runs=max_runs)
    for s, t in pairs:
        m.add(s, t)
    return m


def test_a_dense_copy_is_one_run_and_translates_by_a_shift():
    m = copied([(s, s + 100) for s in range(10, 20)], 10, 100)
    assert m.runs == [Run(10, 110, 10)]
    assert (m.source_next, m.target_next) == (20, 120)
    assert m.translate(10) == 110
    assert m.translate(15) == 115
    assert m.translate(20) == 120  # everything copied: the group resumes after the last copied record
    assert m.translate(21) is None  # ahead of the copy
    assert m.translate(0) == 110  # below what was copied (retention at the source): the first copied record


def test_holes_in_the_source_start_new_runs_and_map_to_the_next_copied_record():
    # source offsets 0,1,2 then 5,6 (3 and 4 compacted away or transaction markers)
    m = copied([(0, 0), (1, 1), (2, 2), (5, 3), (6, 4)])
    assert m.runs == [Run(0, 0, 3), Run(5, 3, 2)]
    assert [m.translate(o) for o in range(8)] == [0, 1, 2, 3, 3, 3, 4, 5]
    assert m.translate(8) is None


def test_skip_to_covers_markers_after_the_last_record():
    m = copied([(0, 7), (1, 8)])
    assert m.translate(3) is None
    m.skip_to(3)  # the consumer's position moved past a commit marker at 2
    assert m.translate(3) == 9
    m.skip_to(1)  # never backwards
    assert m.source_next == 3


def test_out_of_order_adds_are_refused():
    m = copied([(0, 0), (1, 1)])
    with pytest.raises(ValueError):
        m.add(1, 2)
    with pytest.raises(ValueError):
        m.add(2, 1)


def test_add_dense_equals_adding_record_by_record():
    for sources in ([3, 4, 5, 6], [3, 5, 6, 9, 10], [7]):
        a = OffsetMap(3, 50)
        a.add_dense(sources, 50)
        b = copied([(s, 50 + i) for i, s in enumerate(sources)], 3, 50)
        assert a == b, sources
    c = OffsetMap(0, 0)
    c.add_dense([], 0)
    assert c == OffsetMap(0, 0)


def test_trimmed_runs_translate_old_offsets_to_the_oldest_kept_run():
    # every other source offset exists: one run per record; keep 3
    m = copied([(2 * i, i) for i in range(6)], max_runs=3)
    assert m.runs == [Run(6, 3, 1), Run(8, 4, 1), Run(10, 5, 1)]
    assert m.translate(0) == 3  # redelivers rather than skips
    assert m.translate(7) == 4
    assert m.translate(11) == 6


def test_the_map_round_trips_through_json():
    m = copied([(0, 0), (1, 1), (4, 2)], max_runs=10)
    m.skip_to(9)
    again = OffsetMap.from_json(m.to_json(), max_runs=10)
    assert again == m
    with pytest.raises(ValueError):
        OffsetMap.from_json({"source_next": "1", "target_next": 0, "runs": []})


def test_checkpoint_records_round_trip_with_canonical_keys():
    key = CheckpointKey("cluster-A", "orders", 2)
    m = copied([(0, 5), (3, 6)])
    k, v = encode_checkpoint(key, m)
    assert k == CheckpointKey("cluster-A", "orders", 2).encode()  # equal keys are equal bytes: compaction
    assert k != CheckpointKey("cluster-B", "orders", 2).encode()
    got = decode_checkpoint(k, v)
    assert got is not None and got[0] == key and got[1] == m
    assert decode_checkpoint(k, None) == (key, None)  # a tombstone
    assert decode_checkpoint(b"not json", v) is None
    assert decode_checkpoint(None, v) is None
    assert decode_checkpoint(b'{"v":2,"cluster":"a","topic":"t","partition":0}', v) is None
    assert decode_checkpoint(k, b'{"v":1}') is None


def test_plan_creates_missing_topics_with_the_configs_that_travel():
    plan = plan_topics(
        [
            TopicSpec("b", 3, {"retention.ms": "1000", "message.timestamp.type": "LogAppendTime"}),
            TopicSpec("a", 2, {"cleanup.policy": "compact", "min.insync.replicas": "2"}),
            TopicSpec("c", 4),
        ],
        {"c": 4},
    )
    assert plan.create == [
        TopicSpec("a", 2, {"cleanup.policy": "compact"}),
        TopicSpec("b", 3, {"retention.ms": "1000"}),
    ]
    assert plan.existing == ["c"]
    assert plan.dropped_configs == {"a": ["min.insync.replicas"], "b": ["message.timestamp.type"]}
    assert plan.problems == []


def test_a_target_topic_with_fewer_partitions_is_a_problem_and_more_is_fine():
    plan = plan_topics([TopicSpec("t", 4), TopicSpec("u", 1)], {"t": 2, "u": 3})
    assert plan.create == []
    assert plan.existing == ["u"]
    assert len(plan.problems) == 1
    assert "'t' has 2 partitions, fewer than the source's 4" in plan.problems[0]


def test_regexes_match_whole_names_and_bad_ones_are_usage_errors():
    m = matcher("orders.*")
    assert m("orders") and m("orders-eu")
    assert not m("old-orders")
    assert matcher(None)("anything")
    with pytest.raises(MirrorError, match="bad regex"):
        matcher("(")
    assert selectable_topic("orders")
    assert not selectable_topic("__consumer_offsets")
    assert not selectable_topic("shoal-mirror.checkpoints")


def test_translate_offsets_says_why_it_leaves_partitions_alone():
    maps = {("t", 0): copied([(0, 10), (1, 11), (2, 12)]), ("t", 1): copied([(0, 0)])}
    out, skipped = translate_offsets({("t", 0): 2, ("t", 1): 5, ("u", 0): 1}, maps)
    assert out == {("t", 0): 12}
    assert skipped[("u", 0)] == "partition not mirrored"
    assert "past the copy" in skipped[("t", 1)]


def test_tail_to_match_counts_surplus_records_and_refuses_a_shorter_target():
    m = OffsetMap(100, 40)
    assert tail_to_match(m, 40, ("t", 0)) == 0
    assert tail_to_match(m, 47, ("t", 0)) == 7
    with pytest.raises(MirrorError, match="lost mirrored records"):
        tail_to_match(m, 39, ("t", 0))


def test_share_configs_are_the_share_overrides():
    assert share_configs({"share.auto.offset.reset": "earliest", "consumer.session.timeout.ms": "45000"}) == {
        "share.auto.offset.reset": "earliest"
    }


def rec(offset: int, key: bytes | None, value: bytes | None, ts: int, headers=None) -> ConsumerRecord:
    return ConsumerRecord("t", 0, offset, ts, 0, key, value, headers or [])


def test_same_record_compares_content_not_offsets():
    a = rec(5, b"k", b"v", 1000, [("h", b"1")])
    assert same_record(a, rec(9, b"k", b"v", 1000, [("h", b"1")]))
    assert not same_record(a, rec(5, b"k", b"w", 1000, [("h", b"1")]))
    assert not same_record(a, rec(5, b"k", b"v", 1001, [("h", b"1")]))
    assert not same_record(a, rec(5, b"k", b"v", 1000, [("h", None)]))
    assert not same_record(a, rec(5, None, b"v", 1000, [("h", b"1")]))


def test_each_client_gets_the_settings_it_knows_and_unknown_ones_are_refused():
    side = {"bootstrap.servers": "h:1", "linger.ms": 5, "isolation.level": "read_committed", "security.protocol": "SSL"}
    assert settings_for("producer", side) == {"bootstrap.servers": "h:1", "linger.ms": 5, "security.protocol": "SSL"}
    assert settings_for("consumer", side) == {
        "bootstrap.servers": "h:1",
        "isolation.level": "read_committed",
        "security.protocol": "SSL",
    }
    assert settings_for("admin", side) == {"bootstrap.servers": "h:1", "security.protocol": "SSL"}
    with pytest.raises(ConfigError, match=r"lnger\.ms"):
        settings_for("admin", {"lnger.ms": 5})
