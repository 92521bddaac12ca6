"""The Spark source: rows/s from the broker into foreachBatch (share group), and through the batch reader.

Run: python benchmarks/spark_stream.py [--records N] [--partitions P] [--warmup S]
                                       [--warm-passes K] [--fetch-max-bytes B] [--quick]
                                       [--no-batch] [--no-probe]
                                       ['--masters=local[2];local-cluster[2,1,1024]']

Starts a broker process (temporary data dir, 127.0.0.1, free port; share
partitions may hold 10,000 records in flight, the most a group may set),
produces N 1 KiB records of random bytes (default 600,000; they do not
compress) over P partitions (default 4) with librdkafka, then on each Spark
master (local[2], then local-cluster[2,1,1024]: executor JVMs of their own):

  * **cold stream**: ``spark.readStream.format("shoal")`` on a share group
    of its own over the same topic, in the fresh JVM, for S seconds (default
    20; 0 skips it) or until drained, then stopped. A new JVM runs Spark's
    code interpreted and compiles it while the first few hundred thousand
    rows flow (the C2 compiler threads take a good part of both cores), so
    this is what a query sees in its first seconds, and it warms the JVM up
    for the measured run.
  * **warm passes**: K (default 2) more drains of the topic on fresh groups,
    printed but not measured. One drained cold stream still leaves the JIT
    compiling a third of a core's time through the next drain, and less
    through each after it (measured: JIT CPU per row 3.2, 2.8, 1.9, 1.7 us in
    four drains in a row); the measured stream should see a JVM that has
    settled, as a long-running query's does.
  * **stream**: the measured query, on a fresh share group
    (startingOffsets=earliest; ``kafka.fetch.max.bytes`` = B if given, else
    the share consumer's default) into a foreachBatch that aggregates every
    row (count, total value length, max deliveryCount and a checksum of
    (partition, offset), so every value crosses into the JVM). Rows/s over
    the whole drain from the query's start, and steady (from the end of the
    first micro-batch to the end of the last); the median micro-batch (rows,
    and its cycle = the sink's job + what happens between two sink calls:
    Spark's commit and offset logs, the source's latestOffset (accept the
    previous batch, poll) and partitions (plan the acquired ranges)); CPU per row of
    each process (JVM, the source's runner process, Python workers, broker)
    over the steady part. Every record must arrive exactly once with
    deliveryCount 1 and the group's lag must be 0 afterwards (every record
    ACCEPTed).
  * **fixed-cost probe**: a stream of micro-batches of 1,000 rows
    (maxRecordsPerTrigger) on a fresh group: the median cycle of such a
    batch is what Spark spends per micro-batch whatever its size (its offset
    and commit logs, planning, launching the tasks, the sink's job), so full
    batches of F rows cannot exceed F / that cycle rows/s on this master: the
    ceiling printed next to the measured rate.
  * **batch**: ``spark.read.format("shoal")`` of the same N records (earliest
    to latest, one task per partition), same kind of aggregate, timed from
    the action to its result; twice.

What bounds a micro-batch: one poll of the driver's share consumer, i.e. one
ShareFetch answer, which holds at most P x the group's
share.partition.max.record.locks records (the in-flight limit; 40,000 here
with P = 4) and fetch.max.bytes (split evenly across the partitions). Spark's
cost per micro-batch is about 0.2 s whatever its size (the probe measures it),
and each row costs the executors (Fetch, decode, Arrow into the JVM, the sink)
and the driver little (its acquired ranges), so rows/s grow with rows per
batch up to that limit. With the default 4 partitions that is 40,068 rows, and about 0.19 s of
Spark per micro-batch bounds the stream near 200k rows/s before any row is
read; ``--partitions 16 --records 2400000 --fetch-max-bytes 209715200``
measures micro-batches of 160,272 rows (the driver's one ShareFetch answer is
then 164 MB). (A driver read path, which decoded on the driver and shipped
Arrow to the executors, was measured here too until it was removed: it was
slower on both masters.)

The last lines sum it up per master: rows/s steady and overall,
the driver's CPU per row (the source runner process) and the executors' (their
Python workers plus the executor task threads, or the executor JVMs).
Goals from issue 22 (printed, not asserted): >= 150,000 rows/s steady on
local[2], driver <= 1.0 us/row. --quick: 150,000 records, 10 s of cold stream.
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

from tests.support.brokers import BrokerProcess  # noqa: E402

LOCKS = 10_000  # share.partition.max.record.locks: the most records in flight per share partition
OVERRIDES = (
    f"group.share.partition.max.record.locks={LOCKS}",
    f"group.share.max.partition.max.record.locks={LOCKS}",
    "group.share.min.heartbeat.interval.ms=200",
    "group.share.heartbeat.interval.ms=500",
)
VALUE = 1024
CLK = os.sysconf("SC_CLK_TCK")


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


def session(master: str = "local[2]") -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    from pyspark.sql import SparkSession

    from shoal.client.spark.source import register

    spark = (
        SparkSession.builder.master(master)
        .appName("shoal-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


# -- CPU by process (Linux /proc; empty elsewhere) ------------------------------------------------
def _descendants(root: int) -> dict[Any, tuple[int, str]]:
    """{pid: (CPU ticks, role)} of `root`'s process tree, plus {(pid, kind): ...} for the JVM's threads."""
    info: dict[int, tuple[int, int, str]] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        info[pid] = (int(fields[1]), int(fields[11]) + int(fields[12]), cmd)
    out: dict[Any, tuple[int, str]] = {}
    for pid, (_ppid, ticks, cmd) in info.items():
        p = pid
        while p in info and p != root:
            p = info[p][0]
        if p == root:
            role = _role(cmd, pid == root)
            out[pid] = (ticks, role)
            if role == "JVM":
                for kind, t in _jvm_threads(pid).items():
                    out[(pid, kind)] = (t, f"JVM {kind}")
    return out


def _jvm_threads(pid: int) -> dict[str, int]:
    """{thread kind: CPU ticks} of one JVM (executor tasks, the stream's thread, JIT, GC, ...)."""
    out: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        kind = next((k for prefix, k in _JVM_THREADS if name.startswith(prefix)), "other")
        out[kind] = out.get(kind, 0) + int(fields[11]) + int(fields[12])
    return out


_JVM_THREADS = (
    ("Executor task", "executor tasks"),
    ("stream executio", "stream thread"),  # a thread name as /proc shows it: 15 characters
    ("C1 Compiler", "JIT"),
    ("C2 Compiler", "JIT"),
    ("GC ", "GC"),
    ("G1 ", "GC"),
)


def _role(cmd: str, is_root: bool) -> str:
    if is_root:
        return "benchmark driver (py4j)"
    if "java" in cmd.split(" ", 1)[0]:
        # local-cluster: executors are JVMs of their own, started by the workers
        return "executor JVM" if "CoarseGrainedExecutorBackend" in cmd else "JVM"
    if "python_streaming_source_runner" in cmd:
        return "source runner"
    if "-m shoal.broker" in cmd:
        return "broker"
    if "pyspark" in cmd:
        return "Python workers"
    return "other"


def cpu_by_role(before: dict[Any, tuple[int, str]], after: dict[Any, tuple[int, str]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pid, (ticks, role) in after.items():
        out[role] = out.get(role, 0.0) + (ticks - before.get(pid, (0, role))[0]) / CLK
    return out


# -- the stream ---------------------------------------------------------------------------------
def bench_stream(
    spark: Any,
    bootstrap: str,
    topic: str,
    group: str,
    n: int,
    checkpoint: str,
    fetch_max_bytes: int | None,
    stop_after_s: float | None = None,
    max_per_trigger: int | None = None,
    stop_after_batches: int | None = None,
) -> dict[str, Any]:
    """Stream `topic` on share group `group` into an aggregating foreachBatch until `n` rows
    arrived (or `stop_after_s` passed, or `stop_after_batches` non-empty micro-batches ran)."""
    from pyspark.sql import functions as F

    # (start, end, rows, bytes, max dc, sum of partition*1e9+offset)
    seen: list[tuple[float, float, int, int, int, int]] = []
    done = threading.Event()
    total = [0]
    snap: dict[str, Any] = {}

    # Built once: each expression is a few Py4J calls, which would otherwise be paid per micro-batch.
    aggregates = (
        F.count("*").alias("rows"),
        F.sum(F.length("value")).alias("bytes"),
        F.max("deliveryCount").alias("dc"),
        F.sum(F.col("partition").cast("long") * 1_000_000_000 + F.col("offset")).alias("distinct"),
    )

    def sink(df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        r = df.agg(*aggregates).collect()[0]
        rows = r["rows"] or 0
        seen.append((t0, time.perf_counter(), rows, r["bytes"] or 0, r["dc"] or 0, r["distinct"] or 0))
        total[0] += rows
        if rows and "cpu" not in snap:  # the first batch is done: measure CPU from here
            snap["cpu"] = _descendants(os.getpid())
        if total[0] >= n or (stop_after_batches is not None and sum(1 for x in seen if x[2]) >= stop_after_batches):
            done.set()

    reader = (
        spark.readStream.format("shoal")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.group.id", group)
        .option("startingOffsets", "earliest")
    )
    if fetch_max_bytes is not None:
        reader = reader.option("kafka.fetch.max.bytes", str(fetch_max_bytes))
    if max_per_trigger is not None:
        reader = reader.option("maxRecordsPerTrigger", str(max_per_trigger))
    started = time.perf_counter()
    q = reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
    lag = None
    try:
        while not done.wait(0.5):
            if q.exception() is not None:
                raise RuntimeError(f"query failed: {q.exception()}")
            if stop_after_s is not None and time.perf_counter() - started > stop_after_s and len(seen) >= 3:
                break
            if time.perf_counter() - started > 900:
                raise RuntimeError(f"only {total[0]} of {n} rows after 900 s")
        finished = time.perf_counter()
        cpu_after = _descendants(os.getpid())
        if stop_after_s is None and stop_after_batches is None:
            lag = _wait_lag_zero(bootstrap, group, 60)
    finally:
        q.stop()
    batches = [s for s in seen if s[2]]
    first_end = batches[0][1]
    steady = batches[1:]
    # Micro-batch cycles: the end of batch i-1 to the end of batch i (Spark's bookkeeping, the
    # source's latestOffset/partitions, then the sink's job).
    full = max(s[2] for s in batches)
    full_pairs = [(a, b) for a, b in itertools.pairwise(batches) if b[2] == full and b[1] > a[1]]
    steady_rows = sum(s[2] for s in steady)
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
        "full_rows": full,
        "full_cycle_rate": statistics.median(b[2] / (b[1] - a[1]) for a, b in full_pairs) if full_pairs else None,
        "sink_s": statistics.median(b[1] - b[0] for _, b in full_pairs) if full_pairs else None,
        "between_s": statistics.median(b[0] - a[1] for a, b in full_pairs) if full_pairs else None,
        "cpu": cpu_by_role(snap["cpu"], cpu_after) if "cpu" in snap else {},
        "cpu_s": finished - first_end,
    }


PROBE_ROWS = 1_000


def probe_fixed_cost(spark: Any, bootstrap: str, topic: str, mi: int, tmp: str, full: dict[str, Any]) -> float | None:
    """Spark's cost per micro-batch whatever its size: the median cycle of micro-batches of
    PROBE_ROWS rows (maxRecordsPerTrigger) on a fresh group, in the same warm JVM. A full
    batch cannot cycle faster than this, which bounds rows/s at full rows / this."""
    p = bench_stream(
        spark, bootstrap, topic, f"bench-probe-{mi}", 10**9, str(Path(tmp) / f"probe-{mi}"), None,
        max_per_trigger=PROBE_ROWS, stop_after_batches=14,
    )  # fmt: skip
    cycle = p["full_cycle_rate"] and p["full_rows"] / p["full_cycle_rate"]
    if not cycle:
        return None
    print(
        f"  fixed cost: micro-batches of {p['full_rows']:,} rows cycle in {cycle:.3f} s (median; sink job"
        f" {p['sink_s']:.3f} s + between {p['between_s']:.3f} s); full batches of {full['full_rows']:,} rows"
        f" cannot beat {full['full_rows'] / cycle:,.0f} rows/s on this master"
    )
    return cycle


def _wait_lag_zero(bootstrap: str, group: str, timeout: float) -> int | None:
    import asyncio

    from shoal.client.admin.client import AsyncAdmin

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


def _rates(s: dict[str, Any], label: str) -> None:
    print(
        f"  {label:<10} overall {s['rows'] / s['overall_s']:>8,.0f} rows/s (query start incl.), steady"
        f" {s['steady_rows'] / max(s['steady_s'], 1e-9):>8,.0f} rows/s ({s['steady_rows']:,} rows in"
        f" {s['steady_s']:.1f} s after the first batch), {s['batches']} micro-batches of median {s['median_batch']:,.0f}"
    )


def _report(s: dict[str, Any], n: int, partitions: int, label: str) -> tuple[bool, dict[str, Any]]:
    """Print one measured stream; returns (checks passed, summary figures)."""
    _rates(s, label)
    if s["full_cycle_rate"] is not None:
        print(
            f"  full micro-batch of {s['full_rows']:,} rows: {s['full_cycle_rate']:,.0f} rows/s (median); its cycle"
            f" {s['sink_s'] + s['between_s']:.2f} s = sink job {s['sink_s']:.2f} s + between batches"
            f" {s['between_s']:.2f} s (commit/offset logs, latestOffset, partitions)"
        )
    rows = max(s["steady_rows"], 1)
    summary = {
        "overall": s["rows"] / s["overall_s"],
        "steady": s["steady_rows"] / max(s["steady_s"], 1e-9),
        "driver_us": None,
        "executor_us": None,
        "full_rows": s["full_rows"],
    }
    if s["cpu"]:
        procs = {k: v for k, v in s["cpu"].items() if not k.startswith("JVM ")}
        busy = sum(procs.values())

        def us(items: Any) -> str:
            return ", ".join(
                f"{role} {secs / rows * 1e6:.1f}"
                for role, secs in sorted(items, key=lambda kv: -kv[1])
                if secs / rows * 1e6 >= 0.05
            )

        print(
            f"  CPU per row after the first batch, us: {us(procs.items())}; {busy / s['cpu_s'] / (os.cpu_count() or 1):.0%}"
            f" of {os.cpu_count()} cores busy with these"
        )
        jvm = [(k[4:], v) for k, v in s["cpu"].items() if k.startswith("JVM ")]
        print(f"    of which JVM threads: {us(jvm)}")
        # The driver's Python: the source runner (acquire, plan). Executors: their Python workers and the JVM's executor task threads
        # (local[2]) or the executor JVMs (local-cluster).
        cpu = s["cpu"]
        summary["driver_us"] = cpu.get("source runner", 0.0) / rows * 1e6
        executor = cpu.get("Python workers", 0.0) + cpu.get("JVM executor tasks", 0.0) + cpu.get("executor JVM", 0.0)
        summary["executor_us"] = executor / rows * 1e6
    expected = sum((i % partitions) * 1_000_000_000 + i // partitions for i in range(n))
    ok = s["rows"] == n and s["checksum"] == expected and s["max_delivery_count"] == 1 and s["lag"] == 0
    print(
        f"  checks: rows {s['rows']:,}, every (partition, offset) once {s['checksum'] == expected}, max"
        f" deliveryCount {s['max_delivery_count']}, lag after {s['lag']} -> {'OK' if ok else 'FAILED'}"
    )
    return ok, summary


MASTERS = ("local[2]", "local-cluster[2,1,1024]")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds of cold stream first (0: none)")
    ap.add_argument("--fetch-max-bytes", type=int, default=None, help="the share consumer's fetch.max.bytes")
    ap.add_argument("--warm-passes", type=int, default=2, help="unmeasured drains before the measured stream")
    ap.add_argument("--quick", action="store_true", help="150,000 records, 10 s cold stream")
    ap.add_argument("--masters", default=";".join(MASTERS), help="Spark masters to run on, separated by ';'")
    ap.add_argument("--no-batch", action="store_true", help="skip the batch reader")
    ap.add_argument(
        "--no-probe", dest="probe", action="store_false", help="skip the fixed-cost probe (1,000-row micro-batches)"
    )
    args = ap.parse_args()
    n = 150_000 if args.quick else args.records
    warmup = min(args.warmup, 10.0) if args.quick else args.warmup
    masters = [m.strip() for m in args.masters.split(";") if m.strip()]

    ok = True
    results: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="shoal-spark-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", OVERRIDES).start()
        try:
            topic = "spark-bench"
            produce_s = produce(broker.bootstrap, topic, n, args.partitions)
            print(f"produced {n:,} x {VALUE} B records on {args.partitions} partitions in {produce_s:.1f} s")
            fmb = "default" if args.fetch_max_bytes is None else f"{args.fetch_max_bytes:,}"
            for mi, master in enumerate(masters):
                t = time.perf_counter()
                spark = session(master)
                print()
                print(f"SparkSession {master} started in {time.perf_counter() - t:.1f} s")
                print(
                    f"stream: share group -> foreachBatch ({master}, {args.partitions} partitions, in flight <="
                    f" {LOCKS:,} per partition, fetch.max.bytes {fmb}); goal >= 150,000 rows/s steady (local[2])"
                )
                if warmup > 0:
                    c = bench_stream(
                        spark, broker.bootstrap, topic, f"bench-cold-{mi}", n, str(Path(tmp) / f"cold-{mi}"),
                        args.fetch_max_bytes, stop_after_s=warmup,
                    )  # fmt: skip
                    _rates(c, "cold JVM")
                for k in range(args.warm_passes):
                    w = bench_stream(
                        spark, broker.bootstrap, topic, f"bench-warm{k}-{mi}", n, str(Path(tmp) / f"warm{k}-{mi}"),
                        args.fetch_max_bytes, stop_after_s=0.0 if args.quick else None,
                    )  # fmt: skip
                    _rates(w, f"warm-up {k + 1}")
                s = bench_stream(
                    spark, broker.bootstrap, topic, f"bench-{mi}", n, str(Path(tmp) / f"chk-{mi}"),
                    args.fetch_max_bytes,
                )  # fmt: skip
                passed, summary = _report(s, n, args.partitions, "stream")
                ok = ok and passed
                if args.probe:
                    summary["fixed_s"] = probe_fixed_cost(spark, broker.bootstrap, topic, mi, tmp, s)
                results.append((master, summary))
                if not args.no_batch and mi == 0:
                    print()
                    print(f"batch: spark.read.format('shoal') on {master}, earliest..latest, one task per partition")
                    for attempt in ("first", "second"):
                        rows, secs = bench_batch(spark, broker.bootstrap, topic)
                        print(f"  {attempt:<9} {rows / secs:>10,.0f} rows/s  ({rows:,} rows in {secs:.1f} s)")
                spark.stop()
        finally:
            broker.stop()
    print()
    print("summary (warm JVM; CPU after the first micro-batch):")
    print(
        f"  {'master':<26} {'steady rows/s':>14} {'overall rows/s':>15} {'driver us/row':>14} {'executor us/row':>16}"
        f" {'fixed s/batch':>14} {'ceiling rows/s':>15}"
    )

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    for master, r in results:
        fixed = r.get("fixed_s")
        ceiling = f"{r['full_rows'] / fixed:,.0f}" if fixed else "-"
        print(
            f"  {master:<26} {r['steady']:>14,.0f} {r['overall']:>15,.0f}"
            f" {fmt(r['driver_us']):>14} {fmt(r['executor_us']):>16} {fmt(fixed) if fixed else '-':>14} {ceiling:>15}"
        )
    print("  goals: >= 150,000 rows/s steady on local[2] (1 KiB records, warm JVM); driver <= 1.0 us/row")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
