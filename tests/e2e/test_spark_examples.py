"""The examples run against a real broker on the shared SparkSession.

examples/spark_batch_backfill.py writes the selected offsets to Parquet;
examples/spark_share_stream.py's merge keeps the Parquet table exactly-once
by (topic, partition, offset) however often a record is delivered, and the
example's query drains a share group with Trigger.AvailableNow.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from tests.support.brokers import ROOT
from tests.support.spark import create_topic, numbered, produce, spark, spark_broker  # noqa: F401


def _example(name: str) -> ModuleType:
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"examples_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_backfill_writes_the_selected_offsets(spark, spark_broker, topic_name, tmp_path) -> None:  # noqa: F811
    backfill = _example("spark_batch_backfill")
    create_topic(spark_broker.bootstrap, topic_name, 3)
    produce(spark_broker.bootstrap, topic_name, numbered(90))
    out = tmp_path / "out"
    args = backfill.parse_args(
        [
            f"--bootstrap-servers={spark_broker.bootstrap}",
            f"--topic={topic_name}",
            f"--output={out}",
            f'--starting-offsets={{"{topic_name}":{{"0":5,"1":-2,"2":29}}}}',
            "--min-partitions=4",
        ]
    )
    assert backfill.backfill(spark, args) == {0: 25, 1: 30, 2: 1}
    rows = spark.read.parquet(str(out)).select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted(
        [(0, o) for o in range(5, 30)] + [(1, o) for o in range(30)] + [(2, 29)]
    )


def test_merge_is_idempotent_by_topic_partition_offset(spark, tmp_path) -> None:  # noqa: F811
    merge_batch = _example("spark_share_stream").merge_batch
    out = str(tmp_path / "table")
    schema = "topic string, partition int, offset long, value binary, deliveryCount int"

    def batch(rows: list[tuple[int, int, int]]):
        return spark.createDataFrame([("t", p, o, f"{p}/{o}".encode(), n) for p, o, n in rows], schema)

    assert merge_batch(spark, batch([(0, 0, 1), (0, 1, 1), (1, 0, 1)]), out) == 3
    # A redelivered batch: two known records again (deliveryCount 2), one new, one twice in the batch.
    assert merge_batch(spark, batch([(0, 1, 2), (1, 0, 2), (1, 1, 1), (1, 1, 1)]), out) == 1
    assert merge_batch(spark, batch([(0, 0, 3)]), out) == 0
    rows = spark.read.parquet(out).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {r.deliveryCount for r in rows} == {1}


def test_stream_example_drains_the_group_into_parquet(spark, spark_broker, topic_name, tmp_path) -> None:  # noqa: F811
    example = _example("spark_share_stream")
    create_topic(spark_broker.bootstrap, topic_name, 3)
    produce(spark_broker.bootstrap, topic_name, numbered(150))
    out, chk = tmp_path / "table", tmp_path / "chk"
    argv = [
        f"--bootstrap-servers={spark_broker.bootstrap}",
        f"--topic={topic_name}",
        f"--group={topic_name}-g",
        f"--output={out}",
        f"--checkpoint={chk}",
        "--starting-offsets=earliest",
        "--available-now",
    ]
    # As many shuffle partitions as there are rows per batch and partition, or more: the old
    # merge wrote a file per shuffle partition (595 files for 5,000 rows at Spark's 200).
    spark.conf.set("spark.sql.shuffle.partitions", "16")
    # Trigger.AvailableNow: the query drains what the group has and stops by itself.
    query = example.build_query(spark, example.parse_args(argv))
    assert query.awaitTermination(120), "the available-now query did not finish"
    assert query.exception() is None
    produce(spark_broker.bootstrap, topic_name, numbered(60, start=150))
    query = example.build_query(spark, example.parse_args(argv))
    assert query.awaitTermination(120)
    rows = spark.read.parquet(str(out)).select("partition", "offset", "deliveryCount").collect()
    assert sorted((r.partition, r.offset) for r in rows) == sorted((i % 3, i // 3) for i in range(210))
    assert {r.deliveryCount for r in rows} == {1}
    # At most one file per topic-partition per micro-batch (a batch used to write one per shuffle
    # partition: 595 files for 5,000 rows).
    spark.conf.set("spark.sql.shuffle.partitions", "2")  # the fixture's
    batches = len([f for f in (chk / "commits").iterdir() if f.name.isdigit()])
    for part_dir in out.glob("topic=*/partition=*"):
        files = list(part_dir.glob("*.parquet"))
        assert 1 <= len(files) <= batches, (part_dir, len(files), batches)
