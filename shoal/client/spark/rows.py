"""The rows the ``shoal`` source returns: Spark's Kafka-source schema, built as Arrow columns.

Why Arrow: a Python data source may return tuples (converted row by row in
the worker, a few microseconds each) or ``pyarrow.RecordBatch`` objects that
Spark takes as they are. A Fetch answer's batches are decoded straight into
columns (``protocol.record_columns``: no object per record), cut to the
offsets the task reads, and turned into one RecordBatch per fetch. Values stay
views of the fetched bytes until that RecordBatch is built, which copies each
exactly once, into Arrow's value buffer.

The schema is Spark's Kafka source's (key, value, topic, partition, offset,
timestamp, timestampType, then headers when ``includeHeaders`` is set) plus
``deliveryCount``: how often a share group delivered the record (1 on the
first delivery). Batch reads are not deliveries and leave it null. The Arrow
types come from pyspark's own ``to_arrow_schema`` so they are exactly what the
running Spark version checks a returned batch against.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import accumulate
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

from shoal.client.core.records import ReturnedBatches, decode_record_set_for
from shoal.protocol.record_columns import RecordColumns
from shoal.protocol.records import CURRENT_MAGIC, MAGIC_POS

__all__ = ["Piece", "RowColumns", "arrow_schema", "source_schema"]

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


Piece = tuple[int, int, "int | None"]  # first offset, last offset, delivery count (None: not a delivery)


class RowColumns:
    """Records appended as columns; ``batch()`` makes one RecordBatch and starts over."""

    __slots__ = ("_ts_ms", "counts", "headers", "keys", "offsets", "partitions", "schema", "timestamps", "topics",
                 "ts_types", "values")  # fmt: skip

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._ts_ms = pa.timestamp("ms", tz="UTC")
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[Any] = []  # bytes-like (views of fetched batches) or None
        self.topics: list[str] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.ts_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]]] | None = [] if "headers" in self.schema.names else None
        self.counts: list[int | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add_fetched(
        self,
        topic: str,
        partition: int,
        data: Any,
        pieces: Sequence[Piece],
        *,
        check_crcs: bool = True,
        aborted_transactions: Any = None,
    ) -> tuple[int, int]:
        """Append the records of one fetched partition (``data``: its record set) whose
        offsets fall in ``pieces`` (ascending, disjoint (first, last, delivery count)
        ranges), each with its piece's count. Returns (rows added, the offset after the
        last whole batch). Control batches and aborted transactions (given the Fetch
        answer's ``aborted_transactions`` pairs) are never rows."""
        start = pieces[0][0] if pieces else 0
        if not data:
            return 0, start
        view = memoryview(data)
        cols = RecordColumns(with_headers=self.headers is not None)
        if len(view) > MAGIC_POS and view[MAGIC_POS] != CURRENT_MAGIC:
            records, next_offset = decode_record_set_for(
                topic, partition, view, start_offset=start, check_crcs=check_crcs
            )  # magic 0/1: old producers' logs, record by record
            for r in records:
                cols.offsets.append(r.offset)
                cols.timestamps.append(r.timestamp)
                cols.timestamp_types.append(r.timestamp_type)
                cols.keys.append(r.key)
                cols.values.append(r.value)
                cols.headers.append(r.headers)
        else:
            batches = ReturnedBatches(view, start, aborted_transactions, check_crcs=check_crcs)
            for header in batches:
                cols.add_batch(header, verify_crc=check_crcs)
            next_offset = batches.next_offset
        return self._take(topic, partition, cols, pieces), next_offset

    def _take(self, topic: str, partition: int, cols: RecordColumns, pieces: Sequence[Piece]) -> int:
        offsets = cols.offsets
        added = 0
        for first, last, count in pieces:
            i = bisect_left(offsets, first)
            j = bisect_right(offsets, last, i)
            if i == j:
                continue
            n = j - i
            added += n
            whole = i == 0 and j == len(offsets)  # the usual case: the whole fetch is one piece, no copies

            def cut(column: list[Any], i: int = i, j: int = j, whole: bool = whole) -> list[Any]:
                return column if whole else column[i:j]

            self.offsets += cut(offsets)
            self.timestamps += cut(cols.timestamps)
            self.ts_types += cut(cols.timestamp_types)
            self.keys += cut(cols.keys)
            self.values += cut(cols.values)
            if self.headers is not None:
                self.headers += cut(cols.headers)
            self.topics += [topic] * n
            self.partitions += [partition] * n
            self.counts += [count] * n
        return added

    def batch(self) -> pa.RecordBatch:
        """The rows appended so far as one RecordBatch (the columns are then emptied)."""
        s = self.schema
        arrays = [
            pa.array(self.keys, s.field("key").type),
            _binary(self.values, s.field("value").type),
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


def _binary(values: list[Any], kind: pa.DataType) -> pa.Array:
    """A binary Arrow array of bytes-like values: one join into its value buffer, no
    intermediate bytes objects (pyarrow's own conversion takes them one by one)."""
    if None in values:  # tombstones: rare, let pyarrow place the nulls
        return pa.array([None if v is None else bytes(v) for v in values], kind)
    ends = array("i", [0])
    ends += array("i", accumulate(map(len, values)))
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(ends), pa.py_buffer(b"".join(values))])
