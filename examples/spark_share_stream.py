#!/usr/bin/env python3
"""Stream a Shoal share group into a Parquet table, exactly once by key.

    PYSPARK_PYTHON=$(which python) python examples/spark_share_stream.py \
        --bootstrap-servers localhost:9092 --topic events --group parquet-sink \
        --output /tmp/events --checkpoint /tmp/events-checkpoint

The ``shoal`` source (shoal/client/spark/stream.py) is at-least-once: it
acknowledges a micro-batch's records only after Spark committed the batch,
so a failure between the sink's write and that commit delivers them again
(with ``deliveryCount`` >= 2). ``merge_batch`` makes the sink idempotent by
keying rows on (topic, partition, offset): it drops keys already in the
table before appending, so a redelivered record never becomes a second row
and the table is exactly-once. The table is partitioned by topic and
partition, so the lookup reads only the partitions a batch touches.

``--available-now`` processes what the group has now and exits (a scheduled
job); without it the query runs until interrupted (SIGTERM/Ctrl-C release
what is held, so the broker redelivers it at once).
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

KEYS = ["topic", "partition", "offset"]


def merge_batch(spark: Any, batch: Any, output: str) -> int:
    """Append the rows of ``batch`` whose (topic, partition, offset) is not in ``output`` yet; returns how many."""
    from pyspark.sql import functions as F

    batch = batch.dropDuplicates(KEYS)
    touched = batch.groupBy("topic", "partition").agg(F.min("offset").alias("since")).collect()
    if not touched:
        return 0
    new = batch
    if _table_exists(output):
        existing = spark.read.parquet(output).select(*KEYS)
        # Only the topic-partitions this batch touches, from its lowest offset on.
        cond = None
        for t in touched:
            c = (F.col("topic") == t.topic) & (F.col("partition") == t.partition) & (F.col("offset") >= t.since)
            cond = c if cond is None else cond | c
        new = batch.join(existing.where(cond), KEYS, "left_anti")
    new = new.cache()
    try:
        n = new.count()
        if n:
            # One file per topic-partition per micro-batch: shuffled as it is (dropDuplicates,
            # the anti-join), a batch wrote one file per shuffle partition -- 595 files for 5,000 rows.
            new.repartition("topic", "partition").write.mode("append").partitionBy("topic", "partition").parquet(output)
    finally:
        new.unpersist()
    return n


def _table_exists(output: str) -> bool:
    path = Path(output)
    return path.is_dir() and any(path.glob("topic=*"))


def build_query(spark: Any, args: argparse.Namespace) -> Any:
    from shoal.client.spark.source import register

    register(spark)
    reader = (
        spark.readStream.format("shoal")
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("subscribe", args.topic)
        .option("kafka.group.id", args.group)
        .option("includeHeaders", "true")
    )
    if args.starting_offsets:
        reader = reader.option("startingOffsets", args.starting_offsets)
    if args.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
    stream = reader.load()

    def sink(batch: Any, batch_id: int) -> None:
        n = merge_batch(spark, batch, args.output)
        print(f"batch {batch_id}: {n} new rows", file=sys.stderr, flush=True)

    writer = stream.writeStream.foreachBatch(sink).option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    elif args.trigger_seconds:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    return writer.start()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap-servers", default=os.environ.get("SHOAL_BOOTSTRAP", "localhost:9092"))
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True, help="the share group")
    p.add_argument("--output", required=True, help="Parquet table directory")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    p.add_argument("--starting-offsets", choices=("earliest", "latest"), help="the group's start for new partitions")
    p.add_argument("--max-records-per-trigger", type=int)
    p.add_argument("--trigger-seconds", type=float, help="micro-batch interval (default: as fast as possible)")
    p.add_argument("--available-now", action="store_true", help="process what is there, then exit")
    p.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"))
    p.add_argument("--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions (default 4)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .appName("shoal-share-stream")
        # Spark's 200 shuffle partitions suit large joins, not micro-batches of a few thousand rows.
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        .getOrCreate()
    )
    query = build_query(spark, args)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
