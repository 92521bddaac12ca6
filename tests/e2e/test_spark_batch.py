"""spark.read.format("shoal"): exact ranges, read in parallel by executors, over a real broker.

Records are produced by confluent-kafka with values that name their index,
so every assertion compares the rows Spark returns with the exact set of
records between the requested offsets.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from tests.support.spark import create_topic, numbered, produce, spark, spark_broker  # noqa: F401

N = 300  # 100 per partition


@pytest.fixture(scope="module")
def loaded(spark_broker) -> tuple[str, str]:  # noqa: F811
    topic = "spark-batch-loaded"
    create_topic(spark_broker.bootstrap, topic, 3)
    produce(
        spark_broker.bootstrap,
        topic,
        numbered(N),
        headers=lambda i: [("i", str(i).encode()), ("none", None)],
        ts=lambda i: 1_700_000_000_000 + i * 1000,
    )
    return spark_broker.bootstrap, topic


def _read(spark, bootstrap: str, topic: str, **options: str):  # noqa: F811
    reader = spark.read.format("shoal").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _index(row: Any) -> int:
    return int(row.value.rstrip(b".")[1:])


def test_reads_everything_with_spark_kafka_schema(spark, loaded) -> None:  # noqa: F811
    bootstrap, topic = loaded
    df = _read(spark, bootstrap, topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>,deliveryCount:int>"
    )
    rows = df.withColumn("ts_ms", F.unix_millis("timestamp")).collect()
    assert sorted(_index(r) for r in rows) == list(range(N))
    for r in rows:
        i = _index(r)
        assert (r.topic, r.partition, r.offset) == (topic, i % 3, i // 3)
        assert r.key == f"k{i}".encode()
        assert r.ts_ms == 1_700_000_000_000 + i * 1000 and r.timestampType == 0
        assert [(h.key, h.value) for h in r.headers] == [("i", str(i).encode()), ("none", None)]
        assert r.deliveryCount is None
    assert "headers" not in _read(spark, bootstrap, topic).columns


def test_exact_offsets_in_parallel_partitions(spark, loaded) -> None:  # noqa: F811
    bootstrap, topic = loaded
    df = _read(
        spark,
        bootstrap,
        topic,
        startingOffsets=f'{{"{topic}":{{"0":10,"1":-2,"2":99}}}}',
        endingOffsets=f'{{"{topic}":{{"0":60,"1":7,"2":-1}}}}',
        minPartitions="6",
    )
    rows = df.select("partition", "offset", F.spark_partition_id().alias("task")).collect()
    got = sorted((r.partition, r.offset) for r in rows)
    want = sorted([(0, o) for o in range(10, 60)] + [(1, o) for o in range(0, 7)] + [(2, 99)])
    assert got == want
    # minPartitions=6: the 58 records are split over at least 5 tasks (proportional, at least
    # one per range); each task reads one contiguous slice of one partition.
    tasks: dict[int, list[tuple[int, int]]] = {}
    for r in rows:
        tasks.setdefault(r.task, []).append((r.partition, r.offset))
    assert df.rdd.getNumPartitions() >= 5 and len(tasks) >= 5
    for members in tasks.values():
        assert len({p for p, _ in members}) == 1
        offsets = sorted(o for _, o in members)
        assert offsets == list(range(offsets[0], offsets[-1] + 1))
    assert _read(spark, bootstrap, topic, maxRecordsPerPartition="10").rdd.getNumPartitions() == 30


def test_timestamps_select_offsets(spark, loaded) -> None:  # noqa: F811
    bootstrap, topic = loaded
    base = 1_700_000_000_000
    # Records 150..209 by time: partition p holds i with i % 3 == p, at base + i s.
    df = _read(spark, bootstrap, topic, startingTimestamp=str(base + 150_000), endingTimestamp=str(base + 210_000))
    assert sorted(_index(r) for r in df.collect()) == list(range(150, 210))
    by_part = f'{{"{topic}":{{"0":{base},"1":{base + 31_000},"2":{base + 299_000}}}}}'
    df = _read(spark, bootstrap, topic, startingOffsetsByTimestamp=by_part)
    want = [i for i in range(N) if i % 3 == 0 or (i % 3 == 1 and i >= 31) or (i % 3 == 2 and i >= 299)]
    assert sorted(_index(r) for r in df.collect()) == want
    # No record at or after the time: an error naming the option, or the end with strategy=latest.
    late = str(base + 10_000_000)
    with pytest.raises(Exception, match="startingTimestamp"):
        _read(spark, bootstrap, topic, startingTimestamp=late).collect()
    assert (
        _read(spark, bootstrap, topic, startingTimestamp=late, startingOffsetsByTimestampStrategy="latest").count() == 0
    )


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"startingOffset": "earliest"}, "startingoffset"),
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"endingOffsets": '{"missing":{"0":1}}'}, "endingOffsets"),
        ({"maxRecordsPerTrigger": "10"}, "maxRecordsPerTrigger"),
        ({"kafka.fetch.max.wait": "10"}, "kafka.fetch.max.wait"),
    ],
)
def test_bad_options_fail_naming_the_option(spark, loaded, options, name) -> None:  # noqa: F811
    bootstrap, topic = loaded
    with pytest.raises(PySparkException) as e:
        _read(spark, bootstrap, topic, **options).collect()
    assert name in str(e.value)


def test_offsets_beyond_the_log_and_missing_topics(spark, loaded) -> None:  # noqa: F811
    bootstrap, topic = loaded
    with pytest.raises(PySparkException, match="endingOffsets"):
        _read(spark, bootstrap, topic, endingOffsets=f'{{"{topic}":{{"0":101,"1":-1,"2":-1}}}}').collect()
    with pytest.raises(PySparkException, match="subscribe"):
        _read(spark, bootstrap, "spark-batch-no-such-topic", **{"kafka.default.api.timeout.ms": "2000"}).collect()


def test_broker_down_fails_fast(spark) -> None:  # noqa: F811
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(PySparkException, match="no bootstrap server reachable"):
        _read(spark, f"127.0.0.1:{port}", "t").collect()
    assert time.monotonic() - started < 30
