"""The Spark source: rows/s from the broker into foreachBatch (share group), and through the batch reader.

Run: python benchmarks/spark_stream.py [--records N] [--partitions P] [--fetch-max-bytes B] [--quick]

Starts a broker process (temporary data dir, 127.0.0.1, free port; share
partitions may hold 10,000 records in flight), produces N 1 KiB records of
random bytes (default 600,000; they do not compress) over P partitions
(default 96) with librdkafka, then on local[2] Spark:

  * **stream**: ``spark.readStream.format("shoal")`` on a fresh share group
    (startingOffsets=earliest, ``kafka.fetch.max.bytes`` = B, default 100 MiB)
    into a foreachBatch that aggregates every row (count, total value length,
    max deliveryCount and a checksum of (partition, offset), so every value
    crosses into the JVM); rows/s over the whole drain from the query's start,
    and steady (from the end of the first micro-batch, which pays the cold
    start, to the end of the last), the median rate of full-size micro-batches
    (rows over the time from the end of the previous batch to the end of this
    one), with the number and median size of the micro-batches. Every record must arrive exactly once with deliveryCount 1
    and the group's lag must be 0 afterwards (every record ACCEPTed).
  * **batch**: ``spark.read.format("shoal")`` of the same N records (earliest to
    latest, one task per partition), same kind of aggregate, timed from the
    action to its result; cold, then warm.

Why P and B matter: a micro-batch is what one poll of the driver's share
consumer returns, i.e. one ShareFetch answer, and Shoal's broker reads at most
1 MiB per share partition per fetch (fetch.max.bytes caps the whole answer);
Spark's cost per micro-batch is roughly fixed (~0.5 s on 2 busy cores), so
rows/s grows with rows per batch: 4 partitions give ~4,000-row batches, 96
partitions with 100 MiB ~97,000-row batches.

Target from the issue (printed, not asserted): >= 50,000 rows/s streaming.
--quick: 100,000 records.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.brokers import BrokerProcess  # noqa: E402

OVERRIDES = (
    "group.share.partition.max.record.locks=10000",
    "group.share.max.partition.max.record.locks=10000",
    "group.share.min.heartbeat.interval.ms=200",
    "group.share.heartbeat.interval.ms=500",
)
VALUE = 1024


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 65536, "enable.idempotence": True})
    # Random bytes: the records do not compress (a worst case for moving them around).
    pool = os.urandom(VALUE * 64)
    started = time.perf_counter()
    for i in range(n):
        at = (i * 977) % (VALUE * 63)
        while True:
            try:
                p.produce(topic, value=b"%08d" % i + pool[at : at + VALUE - 8], partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return time.perf_counter() - started


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    from pyspark.sql import SparkSession

    from client.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("shoal-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def bench_stream(
    spark: Any, bootstrap: str, topic: str, n: int, checkpoint: str, fetch_max_bytes: int
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    seen: list[
        tuple[float, float, int, int, int, int]
    ] = []  # (start, end, rows, bytes, max dc, sum of partition*1e9+offset)
    done = threading.Event()
    total = [0]

    def sink(df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        r = df.agg(
            F.count("*").alias("rows"),
            F.sum(F.length("value")).alias("bytes"),
            F.max("deliveryCount").alias("dc"),
            F.sum(F.col("partition").cast("long") * 1_000_000_000 + F.col("offset")).alias("distinct"),
        ).collect()[0]
        rows = r["rows"] or 0
        seen.append((t0, time.perf_counter(), rows, r["bytes"] or 0, r["dc"] or 0, r["distinct"] or 0))
        total[0] += rows
        if total[0] >= n:
            done.set()

    df = (
        spark.readStream.format("shoal")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.group.id", f"bench-{topic}")
        .option("startingOffsets", "earliest")
        .option("kafka.fetch.max.bytes", str(fetch_max_bytes))
        .load()
    )
    started = time.perf_counter()
    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
    try:
        while not done.wait(0.5):
            if q.exception() is not None:
                raise RuntimeError(f"query failed: {q.exception()}")
            if time.perf_counter() - started > 900:
                raise RuntimeError(f"only {total[0]} of {n} rows after 900 s")
        finished = time.perf_counter()
        lag = _wait_lag_zero(bootstrap, f"bench-{topic}", 60)
    finally:
        q.stop()
    batches = [s for s in seen if s[2]]
    first_end = batches[0][1]
    # Micro-batch cycles: rows of batch i over the time from the end of batch i-1 to the end of
    # batch i (Spark's bookkeeping, the source's latestOffset/partitions and the sink job).
    full = max(s[2] for s in batches)
    full_cycles = [b[2] / (b[1] - a[1]) for a, b in itertools.pairwise(batches) if b[2] == full and b[1] > a[1]]
    steady_rows = sum(s[2] for s in batches[1:])
    return {
        "rows": sum(s[2] for s in batches),
        "checksum": sum(s[5] for s in batches),
        "bytes": sum(s[3] for s in batches),
        "max_delivery_count": max(s[4] for s in batches),
        "batches": len(batches),
        "median_batch": statistics.median(s[2] for s in batches),
        "overall_s": finished - started,
        "steady_rows": steady_rows,
        "steady_s": finished - first_end,
        "lag": lag,
        "full_cycle_rate": statistics.median(full_cycles) if full_cycles else None,
    }


def _wait_lag_zero(bootstrap: str, group: str, timeout: float) -> int | None:
    import asyncio

    from client.admin import AsyncAdmin

    async def lag() -> int | None:
        async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
            offsets = await admin.list_share_group_offsets(group)
        values = [getattr(v, "lag", None) for v in offsets.values()]
        return None if not values or None in values else sum(values)

    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = asyncio.run(lag())
        if value == 0:
            return 0
        time.sleep(0.5)
    return value


def bench_batch(spark: Any, bootstrap: str, topic: str) -> tuple[int, float]:
    from pyspark.sql import functions as F

    df = spark.read.format("shoal").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
    started = time.perf_counter()
    r = df.agg(F.count("*").alias("rows"), F.sum(F.length("value")).alias("bytes")).collect()[0]
    return r["rows"], time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--partitions", type=int, default=96)
    ap.add_argument(
        "--fetch-max-bytes", type=int, default=100 * 1024 * 1024, help="the share consumer's fetch.max.bytes"
    )
    ap.add_argument("--quick", action="store_true", help="100,000 records")
    args = ap.parse_args()
    n = 100_000 if args.quick else args.records

    with tempfile.TemporaryDirectory(prefix="shoal-spark-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", OVERRIDES).start()
        try:
            topic = "spark-bench"
            produce_s = produce(broker.bootstrap, topic, n, args.partitions)
            print(f"produced {n:,} x {VALUE} B records on {args.partitions} partitions in {produce_s:.1f} s")
            t = time.perf_counter()
            spark = session()
            print(f"SparkSession local[2] started in {time.perf_counter() - t:.1f} s")

            s = bench_stream(spark, broker.bootstrap, topic, n, str(Path(tmp) / "chk"), args.fetch_max_bytes)
            expected = sum((i % args.partitions) * 1_000_000_000 + i // args.partitions for i in range(n))
            ok = s["rows"] == n and s["checksum"] == expected and s["max_delivery_count"] == 1 and s["lag"] == 0
            print()
            print(f"stream: share group -> foreachBatch (local[2], fetch.max.bytes {args.fetch_max_bytes:,})")
            print(
                f"  overall   {n / s['overall_s']:>10,.0f} rows/s  ({n:,} rows in {s['overall_s']:.1f} s, query start incl.)"
            )
            print(
                f"  steady    {s['steady_rows'] / max(s['steady_s'], 1e-9):>10,.0f} rows/s  "
                f"(after the first batch: {s['steady_rows']:,} rows in {s['steady_s']:.1f} s)"
            )
            if s["full_cycle_rate"] is not None:
                print(
                    f"  full batch {s['full_cycle_rate']:>10,.0f} rows/s  (median over micro-batches of the largest size, "
                    "end of the previous batch to end of this one)"
                )
            print(f"  {s['batches']} micro-batches, median {s['median_batch']:,.0f} rows; target >= 50,000 rows/s")
            print(
                f"  checks: rows {s['rows']:,}, every (partition, offset) once {s['checksum'] == expected}, max deliveryCount "
                f"{s['max_delivery_count']}, lag after {s['lag']} -> {'OK' if ok else 'FAILED'}"
            )

            print()
            print("batch: spark.read.format('shoal'), earliest..latest, one task per partition")
            for attempt in ("cold", "warm"):
                rows, secs = bench_batch(spark, broker.bootstrap, topic)
                print(f"  {attempt:<9} {rows / secs:>10,.0f} rows/s  ({rows:,} rows in {secs:.1f} s)")
            spark.stop()
            return 0 if ok else 1
        finally:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
