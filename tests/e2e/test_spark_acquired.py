"""An executor task of the stream (its acquired ranges), run directly against a broker (no SparkSession).

``read_acquired`` is what each Spark task runs: Fetch the task's acquired
ranges from the leader, keep exactly those offsets with their delivery
counts, and treat offsets that are no longer in the log as ``failOnDataLoss``
says. Records are produced by confluent-kafka in batches of several records,
so ranges start and end inside batches.
"""

# ruff: noqa: F811 -- pytest fixtures imported from tests.support.spark and named as parameters
from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from shoal.client.spark.acquired import AcquiredPartition, read_acquired
from shoal.client.spark.batch import DataLossError
from shoal.client.spark.options import parse_source_options
from shoal.client.spark.rows import source_schema
from tests.support.spark import create_topic, numbered, produce, spark_broker  # noqa: F401


def _config(bootstrap: str, topic: str):
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "kafka.group.id": "g"}
    return parse_source_options(opts).for_stream().stream_fetch_config()


def _read(bootstrap: str, topic: str, spans, fail_on_data_loss: bool = True) -> list[tuple[int, bytes, int]]:
    part = AcquiredPartition(1, 0, topic, 0, tuple(spans))
    batches = read_acquired(_config(bootstrap, topic), part, source_schema(False), fail_on_data_loss=fail_on_data_loss)
    return [(row["offset"], row["value"], row["deliveryCount"]) for b in batches for row in b.to_pylist()]


def test_keeps_exactly_the_acquired_offsets_with_their_delivery_counts(spark_broker, topic_name) -> None:
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, numbered(50, partitions=1))
    spans = [(3, 7, 1), (9, 9, 4), (20, 41, 2)]
    rows = _read(bootstrap, topic_name, spans)
    expected = [(o, f"v{o}".encode().ljust(16, b"."), c) for f, last, c in spans for o in range(f, last + 1)]
    assert rows == expected


def test_offsets_gone_from_the_log_follow_fail_on_data_loss(spark_broker, topic_name) -> None:
    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, numbered(20, partitions=1))
    # Acquired up to 25, but the log ends at 20 (truncated after the acquire).
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        _read(bootstrap, topic_name, [(15, 25, 1)])
    assert [o for o, _, _ in _read(bootstrap, topic_name, [(15, 25, 1)], fail_on_data_loss=False)] == list(
        range(15, 20)
    )
    # Wholly past the end: the broker answers OFFSET_OUT_OF_RANGE.
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        _read(bootstrap, topic_name, [(22, 30, 1)])
    assert _read(bootstrap, topic_name, [(22, 30, 1)], fail_on_data_loss=False) == []


_WORKER = """
import gc, sys
from shoal.client.spark.acquired import AcquiredPartition
from shoal.client.spark.batch import RangePartition, ShoalBatchReader
from shoal.client.spark.options import parse_source_options
from shoal.client.spark.rows import source_schema
from shoal.client.spark.stream import ShoalStreamReader

bootstrap, topic = sys.argv[1:3]
opts = parse_source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "kafka.group.id": "g"})
stream = ShoalStreamReader(opts, source_schema(False))
batch = ShoalBatchReader(parse_source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}), source_schema(False))
assert gc.get_freeze_count() == 0
rows = sum(b.num_rows for b in stream.read(AcquiredPartition(1, 0, topic, 0, ((0, 9, 1),))))
frozen = gc.get_freeze_count()
rows += sum(b.num_rows for b in batch.read(RangePartition(topic, 0, 0, 10)))
rows += sum(b.num_rows for b in stream.read(AcquiredPartition(2, 0, topic, 0, ((10, 19, 1),))))
print(rows, frozen > 1000, gc.get_freeze_count() == frozen)
"""


def test_a_worker_freezes_what_it_imported_once_before_its_first_read(spark_broker, topic_name) -> None:
    """PySpark's daemon runs a full collection after every task of a reused worker; the
    objects alive at the first read (the imports) are frozen once, so those collections
    skip them. Later reads freeze nothing more (their objects stay collectable)."""
    import subprocess
    import sys

    bootstrap = spark_broker.bootstrap
    create_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, numbered(20, partitions=1))
    out = subprocess.run(
        [sys.executable, "-c", _WORKER, bootstrap, topic_name], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["30", "True", "True"]
