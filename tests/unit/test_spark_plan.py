"""The Spark source's pure parts: options, offset ranges, task splits, the stream's batch ledger.

No Spark and no broker here: these rules decide which records a read returns
and when a stream's records are acknowledged, so they are checked directly
(the end-to-end tests in test_spark_batch.py / test_spark_stream.py show the
same rules through Spark).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import ConfigError
from shoal.client.spark.ledger import BatchLedger, make_offset, parse_offset
from shoal.client.spark.offsets import (
    OffsetRange,
    check_known_partitions,
    resolve_ranges,
    split_acquired,
    split_ranges,
    timestamps_to_look_up,
)
from shoal.client.spark.options import STREAM_MAX_POLL_RECORDS, OffsetSpec, parse_offset_spec, parse_source_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def _opts(**extra: str):
    return parse_source_options({**BASE, **extra})


def _error(fn, *args, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        fn(*args, **kwargs)
    return e.value


# -- options -------------------------------------------------------------------------------------


def test_options_are_case_insensitive_and_keep_spark_names() -> None:
    o = parse_source_options(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1,h:2",
            "Subscribe": " a, b ,a ",
            "includeheaders": "TRUE",
            "startingoffsets": "Earliest",
            "kafka.request.timeout.ms": "5000",
        }
    )
    assert o.topics == ("a", "b")
    assert o.include_headers is True
    assert o.starting == OffsetSpec("earliest", "startingOffsets")
    assert o.for_batch().batch_client_config()["request.timeout.ms"] == 5000


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribe"),
        ({**BASE, "startingOffset": "earliest"}, "startingoffset"),
        ({**BASE, "assign": '{"t":[0]}'}, "assign"),
        ({**BASE, "kafka.bootstrap.servers": "nohost"}, "kafka.bootstrap.servers"),
        ({**BASE, "kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
        ({**BASE, "kafka.group.id": "g", "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit"),
        ({**BASE, "includeHeaders": "yes"}, "includeHeaders"),
        ({**BASE, "minPartitions": "0"}, "minPartitions"),
        ({**BASE, "maxRecordsPerTrigger": "many"}, "maxRecordsPerTrigger"),
        ({**BASE, "startingOffsets": "{not json"}, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"t":{"0":-3}}'}, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"t":{"x":1}}'}, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"other":{"0":1}}'}, "startingOffsets"),
        ({**BASE, "endingOffsets": '{"t":{"0":true}}'}, "endingOffsets"),
        ({**BASE, "startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({**BASE, "startingOffsetsByTimestamp": "latest"}, "startingOffsetsByTimestamp"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "skip"}, "startingOffsetsByTimestampStrategy"),
    ],
)
def test_bad_options_name_the_option(options: dict, key: str) -> None:
    assert _error(parse_source_options, options).key == key


def test_batch_rules() -> None:
    o = _opts().for_batch()
    assert (o.starting.kind, o.ending.kind) == ("earliest", "latest")
    assert _error(_opts(startingOffsets="latest").for_batch).key == "startingOffsets"
    assert _error(_opts(startingOffsets='{"t":{"0":-1}}').for_batch).key == "startingOffsets"
    assert _error(_opts(endingOffsets="earliest").for_batch).key == "endingOffsets"
    assert _error(_opts(endingOffsets='{"t":{"0":-2}}').for_batch).key == "endingOffsets"
    assert _error(_opts(maxRecordsPerTrigger="5").for_batch).key == "maxRecordsPerTrigger"
    assert _error(_opts(**{"share.lock.renew": "true"}).for_batch).key == "share.lock.renew"
    # A setting only the share consumer has is refused for batch reads, naming it.
    assert _error(_opts(**{"kafka.share.acquire.mode": "record_limit"}).for_batch).key == "kafka.share.acquire.mode"
    # Spark's precedence: startingTimestamp over startingOffsetsByTimestamp over startingOffsets.
    o = _opts(startingOffsets="earliest", startingOffsetsByTimestamp='{"t":{"0":5}}', startingTimestamp="7")
    assert o.starting == OffsetSpec("timestamp", "startingTimestamp", timestamp=7)
    o = _opts(startingOffsets="earliest", startingOffsetsByTimestamp='{"t":{"0":5}}')
    assert o.starting.kind == "timestamps" and o.starting.per_partition == {("t", 0): 5}


def test_stream_rules() -> None:
    assert _error(_opts().for_stream).key == "kafka.group.id"
    s = _opts(**{"kafka.group.id": "g", "maxRecordsPerTrigger": "100", "share.lock.renew": "false"}).for_stream()
    cfg = s.stream_client_config()
    assert cfg["group.id"] == "g" and cfg["share.acknowledgement.mode"] == "explicit"
    assert cfg["max.poll.records"] == STREAM_MAX_POLL_RECORDS
    assert s.max_records_per_trigger == 100 and s.lock_renew is False and s.poll_timeout_ms == 500
    grouped = {"kafka.group.id": "g"}
    assert _error(_opts(**grouped, endingOffsets="latest").for_stream).key == "endingOffsets"
    assert _error(_opts(**grouped, startingOffsets='{"t":{"0":1}}').for_stream).key == "startingOffsets"
    assert _error(_opts(**grouped, **{"kafka.max.poll.records": "10"}).for_stream).key == "kafka.max.poll.records"
    assert _error(_opts(**grouped, **{"kafka.isolation.level": "read_committed"}).for_stream).key == (
        "kafka.isolation.level"
    )
    assert _opts(**grouped, startingOffsets="earliest").for_stream().starting.kind == "earliest"
    assert _opts(**grouped, minPartitions="4").for_stream().min_partitions == 4


def test_offset_spec_json() -> None:
    spec = parse_offset_spec("startingOffsets", '{"t":{"0":23,"1":-2},"u":{"0":-1}}')
    assert spec.kind == "offsets"
    assert spec.per_partition == {("t", 0): 23, ("t", 1): -2, ("u", 0): -1}


# -- ranges --------------------------------------------------------------------------------------

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
EARLIEST = {T0: 0, T1: 10, T2: 0}
LATEST = {T0: 100, T1: 50, T2: 0}


def _resolve(start: OffsetSpec, end: OffsetSpec, **kw) -> dict[TopicPartition, tuple[int, int]]:
    ranges = resolve_ranges([T2, T0, T1], start, end, earliest=EARLIEST, latest=LATEST, **kw)
    return {r.tp: (r.start, r.end) for r in ranges}


def test_resolve_earliest_latest_and_json() -> None:
    both = _resolve(OffsetSpec("earliest", "s"), OffsetSpec("latest", "e"))
    assert both == {T0: (0, 100), T1: (10, 50), T2: (0, 0)}
    start = parse_offset_spec("startingOffsets", '{"t":{"0":23,"1":-2,"2":0}}')
    end = parse_offset_spec("endingOffsets", '{"t":{"0":30,"1":-1,"2":0}}')
    assert _resolve(start, end) == {T0: (23, 30), T1: (10, 50), T2: (0, 0)}


def test_resolve_errors_name_the_option() -> None:
    start = parse_offset_spec("startingOffsets", '{"t":{"0":23}}')
    e = _error(_resolve, start, OffsetSpec("latest", "endingOffsets"))
    assert e.key == "startingOffsets" and "t-1" in e.reason  # every partition must be named
    start = parse_offset_spec("startingOffsets", '{"t":{"0":60,"1":-2,"2":0}}')
    end = parse_offset_spec("endingOffsets", '{"t":{"0":50,"1":-1,"2":0}}')
    assert "after" in _error(_resolve, start, end).reason
    end = parse_offset_spec("endingOffsets", '{"t":{"0":101,"1":-1,"2":0}}')
    assert _error(_resolve, OffsetSpec("earliest", "startingOffsets"), end).key == "endingOffsets"


def test_offsets_below_log_start_fail_or_clamp() -> None:
    start = parse_offset_spec("startingOffsets", '{"t":{"0":0,"1":3,"2":0}}')
    latest = OffsetSpec("latest", "endingOffsets")
    e = _error(_resolve, start, latest)
    assert e.key == "startingOffsets" and "failOnDataLoss" in e.reason
    assert _resolve(start, latest, fail_on_data_loss=False)[T1] == (10, 50)


def test_resolve_timestamps() -> None:
    spec = OffsetSpec("timestamp", "startingTimestamp", timestamp=1000)
    assert timestamps_to_look_up(spec, [T0, T1]) == {T0: 1000, T1: 1000}
    found = {T0: 40, T1: -1, T2: -1}
    e = _error(_resolve, spec, OffsetSpec("latest", "endingOffsets"), start_by_time=found)
    assert e.key == "startingTimestamp" and "startingOffsetsByTimestampStrategy" in e.reason
    got = _resolve(spec, OffsetSpec("latest", "e"), start_by_time=found, timestamp_strategy="latest")
    assert got == {T0: (40, 100), T1: (50, 50), T2: (0, 0)}
    # An end time with no record at or after it reads to the end, as in Spark.
    end = OffsetSpec("timestamps", "endingOffsetsByTimestamp", per_partition={("t", 0): 9, ("t", 1): 9, ("t", 2): 9})
    assert _resolve(OffsetSpec("earliest", "s"), end, end_by_time={T0: 70, T1: -1, T2: -1})[T0] == (0, 70)
    partial = OffsetSpec("timestamps", "endingOffsetsByTimestamp", per_partition={("t", 0): 9})
    assert _error(timestamps_to_look_up, partial, [T0, T1]).key == "endingOffsetsByTimestamp"


def test_unknown_partitions_are_refused() -> None:
    spec = parse_offset_spec("startingOffsets", '{"t":{"0":1,"7":1}}')
    e = _error(check_known_partitions, spec, [T0, T1])
    assert e.key == "startingOffsets" and "t-7" in e.reason


def test_split_defaults_to_one_task_per_non_empty_range() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 3, 4)]
    assert split_ranges(ranges) == [ranges[0], ranges[2]]
    assert split_ranges(ranges, max_records=4) == [
        OffsetRange("t", 0, 0, 3),
        OffsetRange("t", 0, 3, 6),
        OffsetRange("t", 0, 6, 10),
        OffsetRange("t", 2, 3, 4),
    ]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 300)), min_size=1, max_size=6),
    min_partitions=st.none() | st.integers(1, 40),
    max_records=st.none() | st.integers(1, 200),
)
def test_split_covers_every_offset_once(sizes, min_partitions, max_records) -> None:
    ranges = [OffsetRange("t", i, start, start + n) for i, (start, n) in enumerate(sizes)]
    tasks = split_ranges(ranges, min_partitions=min_partitions, max_records=max_records)
    covered = sorted((t.partition, o) for t in tasks for o in range(t.start, t.end))
    assert covered == sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert all(t.size > 0 for t in tasks)
    if max_records is not None:
        assert all(t.size <= max_records for t in tasks)
    total = sum(r.size for r in ranges)
    if min_partitions is not None:
        assert len(tasks) >= min(min_partitions, total) - len(ranges)  # rounding per range, as Spark


# -- stream ledger -------------------------------------------------------------------------------


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int
    acquisition_lock_deadline: float | None = None
    delivery_count: int = 1


def _recs(partition: int, *offsets: int, deadline: float = 100.0) -> list:
    """One-offset acquired ranges (what the stream's acquirer holds), keyed like records."""
    from shoal.client.share.ranges import AcquiredRange

    return [AcquiredRange("t", partition, o, o, 1, deadline) for o in offsets]


def test_ledger_plans_batches_up_to_the_limit_and_accepts_committed_ones() -> None:
    ledger = BatchLedger()
    assert ledger.plan(0) is None
    assert len(ledger.add(_recs(0, 1, 2, 3) + _recs(1, 1, 2))) == 5
    first = ledger.plan(0, limit=3)
    assert first == 1 and [r.offset for r in ledger.batch(1)] == [1, 2, 3]
    second = ledger.plan(first)
    assert second == 2 and len(ledger.batch(2)) == 2 and not ledger.pool
    # Spark committed batch 1 only: its records are handed back to be ACCEPTed.
    accepted = ledger.take_committed(1)
    assert [(r.partition, r.offset) for r in accepted] == [(0, 1), (0, 2), (0, 3)]
    assert ledger.batch(1) is None and ledger.batch(2) is not None
    assert ledger.take_committed(1) == []
    assert len(ledger.take_committed(2)) == 2 and len(ledger) == 0


def test_ledger_numbers_batches_after_a_restarted_querys_checkpoint() -> None:
    ledger = BatchLedger()
    ledger.add(_recs(0, 1))
    assert ledger.plan(41) == 42  # the checkpoint said the last batch was 41
    ledger.add(_recs(0, 2))
    assert ledger.plan(5) == 43  # never reuse a number
    assert ledger.batches_between(41, 43) == [42, 43] and ledger.batches_between(42, 42) == []


def test_ledger_unplans_batches_spark_never_recorded() -> None:
    ledger = BatchLedger()
    ledger.add(_recs(0, 1, 2))
    ledger.plan(0, limit=1)
    ledger.add(_recs(0, 3))
    assert ledger.unplan_after(0) == 1
    assert [k[2] for k in ledger.pool] == [1, 2, 3] and not ledger.batches


def test_ledger_refreshes_renewed_records_in_place() -> None:
    ledger = BatchLedger()
    ledger.add(_recs(0, 1, 2, deadline=10.0))
    ledger.plan(0)
    assert ledger.renewal_due(now=6.0, margin=5.0) and not ledger.renewal_due(now=4.0, margin=5.0)
    # The renewed records come back with a new deadline, next to one new record.
    fresh = ledger.add([*_recs(0, 1, 2, deadline=40.0), *_recs(0, 3, deadline=40.0)])
    assert [r.offset for r in fresh] == [3]
    assert ledger.batch(1)[0].acquisition_lock_deadline == 40.0
    assert ledger.earliest_deadline() == 40.0 and len(ledger) == 3


def test_ledger_drops_lost_records_and_releases_everything() -> None:
    ledger = BatchLedger()
    ledger.add(_recs(0, 1, 2) + _recs(1, 1))
    ledger.plan(0, limit=2)
    assert ledger.drop_partitions([("t", 0)]) == 2
    assert ledger.drop([("t", 1, 1), ("t", 9, 9)]) == 1
    ledger.add(_recs(2, 5))
    ledger.plan(1)
    ledger.add(_recs(2, 6))
    assert [(r.partition, r.offset) for r in ledger.release_all()] == [(2, 5), (2, 6)]
    assert len(ledger) == 0 and ledger.earliest_deadline() is None


def test_offsets_round_trip() -> None:
    assert parse_offset(make_offset(7, "abc")) == (7, "abc")
    assert parse_offset({}) == (0, None)
    with pytest.raises(ValueError):
        parse_offset({"offset": 3})


# -- the stream's executor tasks: acquired ranges ------------------------------------------------


def test_removed_read_path_option_and_fail_on_data_loss() -> None:
    grouped = {"kafka.group.id": "g"}
    s = _opts(**grouped).for_stream()
    assert s.fail_on_data_loss is True
    # The driver read path is gone: "executor" (any case) is accepted and changes nothing ...
    s = _opts(**grouped, **{"shoal.read.path": " Executor ", "failOnDataLoss": "false"}).for_stream()
    assert s.fail_on_data_loss is False
    assert s.stream_fetch_config() == _opts(**grouped).for_stream().stream_fetch_config()
    # ... any other value, "driver" included, is refused naming the option and the removal.
    for value in ("driver", "Driver", "both", ""):
        e = _error(_opts, **grouped, **{"shoal.read.path": value})
        assert e.key == "shoal.read.path" and "driver read path was removed" in str(e), e
    assert _error(_opts(**{"shoal.read.path": "executor"}).for_batch).key == "shoal.read.path"
    # Executors fetch with the stream's consumer-level settings, always read_uncommitted.
    s = _opts(**grouped, **{"kafka.request.timeout.ms": "7000", "kafka.share.acquire.mode": "record_limit"})
    fetch = s.for_stream().stream_fetch_config()
    assert fetch["request.timeout.ms"] == 7000 and fetch["isolation.level"] == "read_uncommitted"
    assert "share.acquire.mode" not in fetch


def _ranges(*spans: tuple[int, int, int]):
    from shoal.client.share.ranges import AcquiredRange

    return [AcquiredRange("t", p, f, last, 1, 100.0) for p, f, last in spans]


def test_ledger_of_ranges_counts_offsets_and_cuts_a_range_at_the_limit() -> None:
    ledger = BatchLedger()
    ledger.add(_ranges((0, 0, 9), (1, 0, 4)))
    assert ledger.rows() == 15 and len(ledger) == 2
    assert ledger.plan(0, limit=12) == 1
    assert [(r.partition, r.first, r.last) for r in ledger.batch(1)] == [(0, 0, 9), (1, 0, 1)]
    assert [(r.partition, r.first, r.last) for r in ledger.pool.values()] == [(1, 2, 4)]
    assert ledger.plan(1, limit=100) == 2 and ledger.rows(ledger.batch(2)) == 3
    # Spark never recorded batch 2: its range goes back to the pool, before anything newer.
    ledger.add(_ranges((1, 5, 6)))
    ledger.unplan_after(1)
    assert [(r.first, r.last) for r in ledger.pool.values()] == [(2, 4), (5, 6)]
    assert ledger.rows(ledger.take_committed(1)) == 12


def test_split_acquired_one_partition_per_task_deterministic_and_complete() -> None:
    ranges = [("t", 1, 0, 9, 1), ("t", 0, 5, 6, 2), ("t", 0, 0, 3, 1), ("u", 0, 7, 6, 1)]
    tasks = split_acquired(ranges)
    assert tasks == [("t", 0, ((0, 3, 1), (5, 6, 2))), ("t", 1, ((0, 9, 1),))]
    assert split_acquired(list(reversed(ranges))) == tasks
    four = split_acquired(ranges, min_tasks=4)
    assert len(four) == 4 and all(len({(t, p)}) == 1 for t, p, _ in four)
    assert sorted((t, p, o, c) for t, p, spans in four for f, last, c in spans for o in range(f, last + 1)) == sorted(
        (t, p, o, c) for t, p, f, last, c in ranges for o in range(f, last + 1)
    )
    big = split_acquired([("t", 0, 0, 99, 3)], rows_per_task=30)
    assert [spans for _, _, spans in big] == [((0, 24, 3),), ((25, 49, 3),), ((50, 74, 3),), ((75, 99, 3),)]


def test_executor_keeps_exactly_the_acquired_offsets_with_their_counts() -> None:
    pytest.importorskip("pyspark")
    from shoal.client.spark.rows import RowColumns, arrow_schema, source_schema
    from shoal.protocol.records import build_batch

    spans = ((2, 4, 1), (7, 7, 3), (9, 12, 2))
    columns = RowColumns(arrow_schema(source_schema(False)))
    first = build_batch([(None, b"v", [], 1)] * 8)  # a batch starting before the ranges
    assert columns.add_fetched("t", 0, first, spans) == (4, 8)
    # 9 and 12 hold no record (compacted away)
    rest = build_batch([(None, b"v", [], 1)] * 5, base_offset=8, offset_deltas=[0, 2, 3, 5, 6])
    assert columns.add_fetched("t", 0, rest, [s for s in spans if s[1] >= 8]) == (2, 15)
    rows = columns.batch().to_pylist()
    assert [(r["offset"], r["deliveryCount"]) for r in rows] == [(2, 1), (3, 1), (4, 1), (7, 3), (10, 2), (11, 2)]
