#!/usr/bin/env python3
"""Backfill a topic's records between two offsets (or times) into Parquet with the batch reader.

    PYSPARK_PYTHON=$(which python) python examples/spark_batch_backfill.py \
        --bootstrap-servers localhost:9092 --topic events --output /tmp/events-backfill \
        --starting-offsets earliest --ending-offsets latest

The ``shoal`` batch reader (shoal/client/spark/batch.py) plans exact per-partition
ranges on the driver and reads them on the executors with Fetch, in
parallel: ``--min-partitions`` / ``--max-records-per-partition`` set how many
tasks. Offsets are Spark's Kafka-source forms: ``earliest``, ``latest`` or
JSON per partition like ``{"events":{"0":23,"1":-2}}`` (-2 earliest, -1
latest); ``--starting-timestamp`` / ``--ending-timestamp`` (ms) select by time.
Prints the rows per partition that were written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def backfill(spark: Any, args: argparse.Namespace) -> dict[int, int]:
    """Write the selected records to ``args.output``; returns rows per partition."""
    from shoal.client.spark.source import register

    register(spark)
    reader = (
        spark.read.format("shoal")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("subscribe", args.topic)
    )
    for option, value in (
        ("startingOffsets", args.starting_offsets),
        ("endingOffsets", args.ending_offsets),
        ("startingTimestamp", args.starting_timestamp),
        ("endingTimestamp", args.ending_timestamp),
        ("minPartitions", args.min_partitions),
        ("maxRecordsPerPartition", args.max_records_per_partition),
    ):
        if value is not None:
            reader = reader.option(option, str(value))
    df = reader.load().drop("deliveryCount")
    df.write.mode(args.mode).partitionBy("partition").parquet(args.output)
    counts = spark.read.parquet(args.output).groupBy("partition").count().collect()
    return {r.partition: r["count"] for r in counts}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("SHOAL_BOOTSTRAP", "localhost:9092"))
    p.add_argument("--topic", required=True)
    p.add_argument("--output", required=True, help="Parquet directory")
    p.add_argument("--starting-offsets", default=None, help="earliest (default) or JSON per partition")
    p.add_argument("--ending-offsets", default=None, help="latest (default) or JSON per partition")
    p.add_argument("--starting-timestamp", type=int)
    p.add_argument("--ending-timestamp", type=int)
    p.add_argument("--min-partitions", type=int)
    p.add_argument("--max-records-per-partition", type=int)
    p.add_argument("--mode", default="overwrite", choices=("overwrite", "append", "error"))
    p.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master(args.master).appName("shoal-backfill").getOrCreate()
    for partition, n in sorted(backfill(spark, args).items()):
        print(f"partition {partition}: {n} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
