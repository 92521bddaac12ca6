"""The ``shoal`` PySpark data source: batch reads of offset ranges, streams of a share group.

    from shoal.client.spark.source import register
    register(spark)                       # once per SparkSession
    df = (spark.read.format("shoal")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events")
          .option("startingOffsets", "earliest").option("endingOffsets", "latest")
          .load())
    stream = (spark.readStream.format("shoal")
              .option("kafka.bootstrap.servers", "localhost:9092")
              .option("subscribe", "events")
              .option("kafka.group.id", "spark-sink")      # the share group
              .load())

Built on pyspark's Python Data Source API (pyspark >= 4.0, with pyarrow).
Options use the names of Spark's Kafka source where they mean the same
thing; ``client.spark.options`` lists them and refuses unknown ones, naming
the option, when the DataFrame is defined (mode-specific ones when the read
starts). Settings of the bundled client pass through with the ``kafka.``
prefix (``kafka.request.timeout.ms``).

Rows (``client.spark.rows``): ``key`` binary, ``value`` binary, ``topic``
string, ``partition`` int, ``offset`` long, ``timestamp`` timestamp,
``timestampType`` int, ``headers`` array<struct<key string, value binary>>
(only with ``includeHeaders=true``), ``deliveryCount`` int (how often the
share group delivered the record; null in batch reads).

**Batch reads** (``client.spark.batch``): ``startingOffsets`` /
``endingOffsets`` (earliest, latest, or JSON per partition like
``{"t":{"0":23,"1":-2}}``), ``startingTimestamp`` / ``endingTimestamp`` and
``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (milliseconds,
taking precedence over offsets as in Spark), ``minPartitions``,
``maxRecordsPerPartition``, ``failOnDataLoss``. The driver plans exact
ranges with ListOffsets; executors read them in parallel with Fetch.

**Streams** (``client.spark.stream``): a share group acquired by the driver
and acknowledged only once Spark has committed each micro-batch:
at-least-once, exactly-once with a sink that is idempotent by (topic,
partition, offset). Executors fetch and decode the acquired ranges (a
driver read path was removed: it was slower in every measured setup).
``kafka.group.id``, ``maxRecordsPerTrigger``, ``share.lock.renew``,
``share.poll.timeout.ms``, ``startingOffsets`` (earliest | latest),
``minPartitions`` and ``failOnDataLoss``.

Workers import this package: run Spark with ``PYSPARK_PYTHON`` set to an
interpreter that has ``shoal`` installed.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from shoal.client.spark.options import SourceOptions, parse_source_options
from shoal.client.spark.rows import source_schema

__all__ = ["ShoalDataSource", "register"]


class ShoalDataSource(DataSource):
    """``format("shoal")``; options are checked when the DataFrame is defined."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.parsed: SourceOptions = parse_source_options(options)

    @classmethod
    def name(cls) -> str:
        return "shoal"

    def schema(self) -> StructType:
        return source_schema(self.parsed.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        from shoal.client.spark.batch import ShoalBatchReader

        _check_schema(schema, self.parsed.include_headers)
        return ShoalBatchReader(self.parsed, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from shoal.client.spark.stream import ShoalStreamReader

        _check_schema(schema, self.parsed.include_headers)
        return ShoalStreamReader(self.parsed, schema)


def _check_schema(schema: StructType, include_headers: bool) -> None:
    expected = source_schema(include_headers)
    if schema != expected:
        raise ValueError(
            f"the shoal source has a fixed schema ({expected.simpleString()}); got {schema.simpleString()}"
        )


def register(spark: Any) -> None:
    """Make ``format("shoal")`` available in ``spark`` (a SparkSession)."""
    spark.dataSource.register(ShoalDataSource)
