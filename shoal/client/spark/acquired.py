"""A stream micro-batch read on the executors: the share group's acquired ranges, fetched and decoded there.

How ``client.spark.stream`` reads its records (its only read path). The
driver's share consumer is an acquire-only one (``client.share.acquirer``):
it holds the acquired ranges -- (first, last, delivery count) per partition
-- and plans them as ``AcquiredPartition``
tasks (``client.spark.offsets.split_acquired``): a few numbers per task, the
same on every retry. Each task then does what the batch reader does for an
offset range (``client.spark.batch.range_chunks``: Fetch from the partition's
leader on a connection of its own) and keeps exactly the acquired offsets:

* a range may start and end inside a record batch, and the records between
  two ranges of a task (acquired by another member) are fetched and dropped
  (``RowColumns.add_fetched`` cuts the decoded columns to the ranges);
* offsets with no record (compacted away) yield nothing; control records are
  never returned by the decoder, and aborted transactions are never acquired
  by a read_committed share group, so the Fetch is read_uncommitted;
* each record gets its range's delivery count;
* a record no longer in the log (retention or deletion between the acquire
  and the read) fails the task naming ``failOnDataLoss`` unless that is
  false; then it is skipped with a warning, as in Spark's Kafka source. Its
  offset is still ACCEPTed with the batch: the broker has nothing to deliver.

The records never pass through the driver: its cost per micro-batch does not
grow with the rows, and executors add throughput as a cluster grows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from shoal.client.core.config import Config
from shoal.client.spark.batch import range_chunks
from shoal.client.spark.offsets import OffsetRange, Span, split_acquired
from shoal.client.spark.rows import RowColumns, arrow_schema

__all__ = ["AcquiredPartition", "plan_acquired", "read_acquired"]


class AcquiredPartition(InputPartition):
    """One Spark task of a stream batch: acquired offset ranges of one partition, with delivery counts."""

    def __init__(self, batch_id: int, index: int, topic: str, partition: int, spans: tuple[Span, ...]) -> None:
        super().__init__((batch_id, index, topic, partition, spans))
        self.topic = topic
        self.partition = partition
        self.spans = spans

    @property
    def rows(self) -> int:
        return sum(last - first + 1 for first, last, _ in self.spans)

    def __repr__(self) -> str:
        batch_id, index = self.value[:2]
        first, last = self.spans[0][0], self.spans[-1][1]
        return (
            f"AcquiredPartition(batch {batch_id} task {index}: {self.topic}-{self.partition} "
            f"[{first}, {last}] in {len(self.spans)} ranges)"
        )


def plan_acquired(batch_id: int, ranges: Sequence[Any], min_tasks: int, rows_per_task: int) -> list[AcquiredPartition]:
    """Tasks for a batch's ``AcquiredRange`` objects."""
    tasks = split_acquired(
        [(r.topic, r.partition, r.first, r.last, r.delivery_count) for r in ranges],
        min_tasks=min_tasks,
        rows_per_task=rows_per_task,
    )
    return [AcquiredPartition(batch_id, i, t, p, spans) for i, (t, p, spans) in enumerate(tasks)]


def read_acquired(
    config: Config, part: AcquiredPartition, schema: StructType, *, fail_on_data_loss: bool
) -> Iterator[pa.RecordBatch]:
    """The task's records as Arrow batches, one per Fetch answer."""
    spans = part.spans
    rng = OffsetRange(part.topic, part.partition, spans[0][0], spans[-1][1] + 1)
    columns = RowColumns(arrow_schema(schema))
    # A broker restart between the plan and the read: keep trying for the API timeout.
    for _ in range_chunks(
        config, rng, columns, spans, fail_on_data_loss=fail_on_data_loss, connect_ms=config["default.api.timeout.ms"]
    ):
        yield columns.batch()
