"""The rows the ``shoal`` source returns: Spark's Kafka-source schema, built as Arrow columns.

Why Arrow: a Python data source may return tuples (converted row by row in
the worker, a few microseconds each) or ``pyarrow.RecordBatch`` objects that
Spark takes as they are. Records are appended column by column here and
turned into one RecordBatch per fetch, so the per-record Python work is a
handful of list appends.

The schema is Spark's Kafka source's (key, value, topic, partition, offset,
timestamp, timestampType, then headers when ``includeHeaders`` is set) plus
``deliveryCount``: how often a share group delivered the record (1 on the
first delivery). Batch reads are not deliveries and leave it null. The Arrow
types come from pyspark's own ``to_arrow_schema`` so they are exactly what the
running Spark version checks a returned batch against.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["RowColumns", "arrow_schema", "source_schema"]

_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(_HEADER)))
    fields.append(StructField("deliveryCount", IntegerType()))
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (timestamps in UTC microseconds)."""
    return to_arrow_schema(schema, timezone="UTC")


class RowColumns:
    """Records appended as columns; ``batch()`` makes one RecordBatch and starts over."""

    __slots__ = (
        "_ts_ms",
        "counts",
        "headers",
        "keys",
        "offsets",
        "partitions",
        "schema",
        "timestamps",
        "topics",
        "ts_types",
        "values",
    )

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._ts_ms = pa.timestamp("ms", tz="UTC")
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.topics: list[str] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.ts_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]]] | None = [] if "headers" in self.schema.names else None
        self.counts: list[int | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: Any,
        value: Any,
        headers: list[tuple[str, bytes | None]],
        delivery_count: int | None = None,
    ) -> None:
        self.keys.append(key)
        self.values.append(value)
        self.topics.append(topic)
        self.partitions.append(partition)
        self.offsets.append(offset)
        self.timestamps.append(timestamp)
        self.ts_types.append(timestamp_type)
        if self.headers is not None:
            self.headers.append(headers)
        self.counts.append(delivery_count)

    def add_records(
        self, topic: str, partition: int, records: Sequence[Any], counts: Sequence[int] | None = None
    ) -> None:
        """Append ``protocol.records.Record`` or ``ConsumerRecord`` objects of one partition, with
        ``counts`` (their delivery counts) when they were delivered by a share group, else none."""
        n = len(records)
        self.keys += [r.key for r in records]
        self.values += [r.value for r in records]
        self.topics += [topic] * n
        self.partitions += [partition] * n
        self.offsets += [r.offset for r in records]
        self.timestamps += [r.timestamp for r in records]
        self.ts_types += [r.timestamp_type for r in records]
        if self.headers is not None:
            self.headers += [r.headers for r in records]
        if counts is None:
            self.counts += [None] * n
        else:
            self.counts += counts

    def extend(self, records: Sequence[Any]) -> None:
        """Append share-group ``ConsumerRecord`` objects of any partitions, with their delivery counts."""
        self.keys += [r.key for r in records]
        self.values += [r.value for r in records]
        self.topics += [r.topic for r in records]
        self.partitions += [r.partition for r in records]
        self.offsets += [r.offset for r in records]
        self.timestamps += [r.timestamp for r in records]
        self.ts_types += [r.timestamp_type for r in records]
        if self.headers is not None:
            self.headers += [r.headers for r in records]
        self.counts += [r.delivery_count for r in records]

    def batch(self) -> pa.RecordBatch:
        """The rows appended so far as one RecordBatch (the columns are then emptied)."""
        s = self.schema
        arrays = [
            pa.array(self.keys, s.field("key").type),
            pa.array(self.values, s.field("value").type),
            pa.array(self.topics, s.field("topic").type),
            pa.array(self.partitions, s.field("partition").type),
            pa.array(self.offsets, s.field("offset").type),
            pa.array(self.timestamps, self._ts_ms).cast(s.field("timestamp").type),
            pa.array(self.ts_types, s.field("timestampType").type),
        ]
        if self.headers is not None:
            arrays.append(pa.array(self.headers, s.field("headers").type))
        arrays.append(pa.array(self.counts, s.field("deliveryCount").type))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=s)
