"""Share groups with slow members: records/s on ONE partition against the ideal M x 1000 / W.

Run: python benchmarks/share_scaling.py [--seconds S] [--only NAME[,NAME]] [--quick]

Share groups exist so that consumption scales past the partition count when each record takes
real work. With M members each spending W ms per record, one partition can deliver
M x 1000 / W records/s as long as the broker keeps every member fed. Each scenario here:

  * a fresh one-partition topic and share group (share.auto.offset.reset=earliest,
    share.partition.max.record.locks=4000: tuned, as in the published Kafka runs);
  * M members of one client kind join (explicit acknowledgement, max.poll.records=5); once the
    group describes all M members holding the partition the records are produced (librdkafka,
    acks=1), and once all are written the members start polling: the row is M members draining a
    backlog, as classic-1x0 drains it, with neither the joining nor the producing timed. (Produced
    while the members polled, the producer's burst -- 25,600 records in 0.7 s, Produce p50 133 ms
    at the broker -- shared the broker with them: the first tenth of the deliveries ran at
    3,500-4,800 records/s against about 6,100 after, and the whole-run figures of the 32 x 5
    rows were 0.85-0.90 while their steady ones were 0.91-0.96);
  * every member "works" W ms per record (a sleep: the member is busy, not the CPU), then
    ACCEPTs it; the next poll carries the acknowledgements. The work is kept on a clock: the
    k-th record of a poll is done k x W ms after the poll returned, so a sleep that overshoots
    (libuv's timers tick in whole milliseconds, and 32 members share one event loop) is made
    up by the next, and the member really spends W ms per record, no more;
  * timed from the first record any member got to the last offset delivered; every offset must
    be delivered, and none twice (a redelivery means a lock ran out while the record waited).
    "steady" is the rate between the 10th and the 90th percentile of deliveries: the whole-run
    figure also holds the start (every member's first round trip at once) and the end (with
    W x 15 ms per batch, the last batches finish while the other members have nothing left: up
    to one batch's work, 0.3 s of a 4 s row at 128 x 20).

Clients: librdkafka's ShareConsumer (each member a thread; measured: librdkafka 2.16 hands out
the records of a whole fetched batch per poll -- 15 here -- whatever max.poll.records says) and the bundled AsyncShareConsumer
(all members on one uvloop event loop in this process; share.acquire.mode record_limit or
batch_optimized). Printed as one table: records/s, ideal, the ratio, redeliveries, duplicates;
then where a member's time beyond its work went: "poll", how long the polls that returned
records waited (the broker's round trip, unless records were prefetched), and "late", from the
moment a poll's last record was due done to the next poll (the member's own lateness: a sleep
that overshot, a process too busy to run it; 128 AsyncShareConsumers on one event loop share
the machine's two cores with the broker).
rdk-32x5-tiny is librdkafka's figure without record_limit: it takes a 1 MiB batch whole, so one
member may hold most of the backlog, and 6,400 records x 5 ms is past the 30 s acquisition lock:
its records then run out of time and go to other members (redeliveries and duplicates counted,
as they should be). The single-member rows with no work are context: a share consumer next to the classic consumer
(librdkafka Consumer reading the same records).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import share_fetch  # noqa: E402
from py_spy_profile import start_profile, stop_profile, summarize_profile  # noqa: E402
from share_fetch import QUIET, create_topic, group_config  # noqa: E402

from tests.support.brokers import BrokerProcess, RawClient  # noqa: E402

MAX_POLL = 5
# Kafka's heartbeat interval (5 s), not the 200 ms of the other share benchmarks: 128 members at
# 200 ms are 640 heartbeats a second, load no deployment puts on a partition leader.
OVERRIDES = [
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
]
IN_FLIGHT = "4000"  # share.partition.max.record.locks of each group: the broker's maximum (Kafka default 2,000)
JOIN_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 300.0


@dataclass(slots=True)
class Scenario:
    name: str
    client: str  # "librdkafka", "ours", "classic"
    members: int
    work_ms: float
    value_bytes: int
    batch_bytes: int
    acquire_mode: str = "batch_optimized"  # ours only
    max_poll: int = MAX_POLL
    cap: int | None = None  # at most this many records (a row known to crawl)

    @property
    def ideal(self) -> float:
        return self.members * 1000.0 / self.work_ms if self.work_ms else float("nan")


@dataclass(slots=True)
class Tally:
    """What the members saw: one byte per offset counts its deliveries."""

    counts: bytearray
    delivered: int = 0
    dups: int = 0
    redelivered: int = 0
    errors: int = 0
    t0: float = float("nan")
    t_done: float = float("nan")
    done_at: list[float] = field(default_factory=list)  # when each offset was first delivered, in order
    waits: list[float] = field(default_factory=list)  # seconds each poll that returned records took
    # seconds from the moment a poll's last record was due done to the next poll: the member's
    # own lateness (its sleep overshooting, its process too busy to run it), not the broker's
    late: list[float] = field(default_factory=list)

    def wait_ms(self, q: float) -> float:
        """The q-quantile of the polls that returned records, in ms: the member's idle time per
        poll (the acknowledgements' and the next records' round trip), which the ideal leaves out."""
        return _quantile_ms(self.waits, q)

    def late_ms(self, q: float) -> float:
        """The q-quantile of the members' lateness per poll (see ``late``), in ms: time the ideal
        also leaves out, spent in the member's process rather than waiting on the broker."""
        return _quantile_ms(self.late, q)

    def steady_rate(self) -> float:
        """Records/s between the 10th and the 90th percentile of deliveries: the rate once every
        member is fed, without the start (records still being produced while members wait) and
        the end (the last batches finishing while members run out of records)."""
        n = len(self.done_at)
        lo, hi = n // 10, n - n // 10 - 1
        if n < 20 or self.done_at[hi] <= self.done_at[lo]:
            return float("nan")
        return (hi - lo) / (self.done_at[hi] - self.done_at[lo])

    def see(self, offset: int, delivery_count: int | None) -> bool:
        """Count one delivery; True once every offset was delivered."""
        now = time.perf_counter()
        if self.t0 != self.t0:
            self.t0 = now
        if delivery_count is not None and delivery_count > 1:
            self.redelivered += 1
        if self.counts[offset]:
            self.dups += 1
        else:
            self.delivered += 1
            self.done_at.append(now)
            if self.delivered == len(self.counts):
                self.t_done = now
        self.counts[offset] = min(self.counts[offset] + 1, 255)
        return self.delivered == len(self.counts)


def _quantile_ms(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    w = sorted(xs)
    return 1000.0 * w[min(len(w) - 1, int(q * len(w)))]


def share_fetch_buckets(http_port: int) -> dict[float, float]:
    """The broker's ShareFetch answers so far, as cumulative histogram buckets {le ms: count}
    from /metrics (Kafka's RequestMetrics TotalTimeMs): the broker's part of a poll's wait."""
    if not http_port:
        return {}
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10).read().decode()
    got: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "kafka_network_requestmetrics_totaltimems":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.labels.get("request") == "ShareFetch":
                le = float(sample.labels["le"])
                got[le] = got.get(le, 0.0) + sample.value
    return got


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> str:
    """The upper bound of the bucket holding the q-quantile of the answers between two scrapes."""
    les = sorted(after)
    if not les:
        return "-"
    total = after[les[-1]] - before.get(les[-1], 0.0)
    for le in les:
        if total and after[le] - before.get(le, 0.0) >= q * total:
            return f"{le:g}"
    return "-"


def scenarios(quick: bool) -> list[Scenario]:
    kib, small = 1024, 16
    rows = [
        Scenario("rdk-32x5", "librdkafka", 32, 5, kib, 16 * kib),
        Scenario("ours-32x5-rl", "ours", 32, 5, kib, 16 * kib, "record_limit"),
        Scenario("ours-32x5-bo", "ours", 32, 5, kib, 16 * kib, "batch_optimized"),
        Scenario("rdk-128x20", "librdkafka", 128, 20, kib, 16 * kib),
        Scenario("ours-128x20-rl", "ours", 128, 20, kib, 16 * kib, "record_limit"),
        # librdkafka 2.16 has no record_limit: each fetch takes a whole 1 MiB batch, so 6,400 only.
        Scenario("rdk-32x5-tiny", "librdkafka", 32, 5, small, 1 << 20, cap=6_400),
        Scenario("ours-32x5-tiny-rl", "ours", 32, 5, small, 1 << 20, "record_limit"),
        Scenario("rdk-1x0", "librdkafka", 1, 0, kib, 16 * kib, max_poll=500),
        Scenario("ours-1x0", "ours", 1, 0, kib, 16 * kib, "batch_optimized", max_poll=500),
        Scenario("classic-1x0", "classic", 1, 0, kib, 16 * kib, max_poll=500),
    ]
    if quick:
        rows = [s for s in rows if s.members <= 32]
    return rows


def produce(bootstrap: str, topic: str, n: int, value_bytes: int, batch_bytes: int) -> None:
    share_fetch.produce(bootstrap, topic, 1, n, batch_bytes, value_bytes)


def members_holding(port: int, group: str) -> int:
    with RawClient(port) as c:
        g = c.call("ShareGroupDescribe", 1, group_ids=[group], include_authorized_operations=False).groups[0]
    if g.error_code:
        return 0
    return sum(1 for m in g.members if any(tp.partitions for tp in m.assignment.topic_partitions))


def wait_members(port: int, group: str, m: int, stop: threading.Event | None = None) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while members_holding(port, group) < m:
        if time.monotonic() > deadline or (stop is not None and stop.is_set()):
            raise RuntimeError(f"{group}: fewer than {m} members hold the partition")
        time.sleep(0.1)


def run_librdkafka(b: BrokerProcess, s: Scenario, topic: str, group: str, n: int) -> Tally:
    from confluent_kafka import ShareConsumer

    tally = Tally(bytearray(n))
    lock = threading.Lock()
    done, stop, go = threading.Event(), threading.Event(), threading.Event()
    work = s.work_ms / 1000.0
    conf = {
        "bootstrap.servers": b.bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": "explicit",
        "max.poll.records": s.max_poll,
        **QUIET,
    }
    consumers = [ShareConsumer(conf) for _ in range(s.members)]

    def run(sc: Any) -> None:
        sc.subscribe([topic])
        go.wait()
        last_due = None
        while not stop.is_set():
            asked = time.perf_counter()
            msgs = sc.poll(0.1) or ()
            due = time.perf_counter()
            if msgs:
                with lock:
                    tally.waits.append(due - asked)
                    if last_due is not None:
                        tally.late.append(asked - last_due)
            for m in msgs:
                if m.error() is not None:
                    with lock:
                        tally.errors += 1
                    continue
                if work:
                    due += work
                    time.sleep(max(0.0, due - time.perf_counter()))
                sc.acknowledge(m)
                with lock:
                    if tally.see(m.offset(), m.delivery_count()):
                        done.set()
            last_due = due if msgs else None

    threads = [threading.Thread(target=run, args=(sc,), daemon=True) for sc in consumers]
    for t in threads:
        t.start()
    try:
        wait_members(b.port, group, s.members)
        produce(b.bootstrap, topic, n, s.value_bytes, s.batch_bytes)
        go.set()
        done.wait(RUN_TIMEOUT_S)
    finally:
        stop.set()
        go.set()
        for t in threads:
            t.join()
        for sc in consumers:
            sc.close()
    return tally


def run_ours(b: BrokerProcess, s: Scenario, topic: str, group: str, n: int) -> Tally:
    import uvloop

    from shoal.client.share.consumer import AsyncShareConsumer

    tally = Tally(bytearray(n))

    async def main() -> None:
        done, stop, go = asyncio.Event(), asyncio.Event(), asyncio.Event()
        work = s.work_ms / 1000.0
        conf = {
            "bootstrap.servers": b.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "share.acquire.mode": s.acquire_mode,
            "max.poll.records": s.max_poll,
        }
        consumers = [AsyncShareConsumer(conf) for _ in range(s.members)]

        async def run(sc: AsyncShareConsumer) -> None:
            sc.subscribe([topic])
            await go.wait()
            last_due = None
            while not stop.is_set():
                asked = time.perf_counter()
                records = await sc.poll(100)
                due = time.perf_counter()
                if records:
                    tally.waits.append(due - asked)
                    if last_due is not None:
                        tally.late.append(asked - last_due)
                for r in records:
                    if work:
                        due += work
                        await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    sc.acknowledge(r)
                    if tally.see(r.offset, r.delivery_count):
                        done.set()
                last_due = due if records else None

        for sc in consumers:
            await sc.start()
        tasks = [asyncio.create_task(run(sc)) for sc in consumers]
        try:
            await asyncio.to_thread(wait_members, b.port, group, s.members)
            await asyncio.to_thread(produce, b.bootstrap, topic, n, s.value_bytes, s.batch_bytes)
            go.set()
            await asyncio.wait_for(done.wait(), RUN_TIMEOUT_S)
        finally:
            stop.set()
            go.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.gather(*(sc.close() for sc in consumers), return_exceptions=True)

    uvloop.run(main())
    return tally


def run_classic(b: BrokerProcess, s: Scenario, topic: str, group: str, n: int) -> Tally:
    from confluent_kafka import Consumer

    produce(b.bootstrap, topic, n, s.value_bytes, s.batch_bytes)
    tally = Tally(bytearray(n))
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest", **QUIET})
    c.subscribe([topic])
    deadline = time.monotonic() + RUN_TIMEOUT_S
    try:
        while tally.delivered < n and time.monotonic() < deadline:
            for m in c.consume(s.max_poll, 0.1):
                if m.error() is None:
                    tally.see(m.offset(), None)
    finally:
        c.close()
    return tally


RUNNERS = {"librdkafka": run_librdkafka, "ours": run_ours, "classic": run_classic}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="records per row: the ideal rate times this")
    ap.add_argument("--records-no-work", type=int, default=100_000, help="records of the rows with no work")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    ap.add_argument("--quick", action="store_true", help="32-member rows only, 2 s each")
    ap.add_argument("--profile", default="", help="py-spy the broker over all rows into this raw file; print its top")
    ap.add_argument("--stalls", default="", help="watch the broker's loop for stalls (stall_watch.py); report file")
    args = ap.parse_args()
    if args.stalls:  # the broker child imports stall_hook/sitecustomize.py, which starts the watcher
        os.environ["SHOAL_STALL_WATCH"] = os.path.abspath(args.stalls)
        os.environ["PYTHONPATH"] = (
            str(ROOT / "benchmarks" / "stall_hook") + os.pathsep + os.environ.get("PYTHONPATH", "")
        )
    rows = scenarios(args.quick)
    if args.only:
        rows = [s for s in rows if s.name in set(args.only.split(","))]
    seconds = 2.0 if args.quick else args.seconds
    header = (
        f"{'scenario':<20}{'client':<12}{'mode':<16}{'M x W ms':>10}{'records':>9}{'rec/s':>9}{'ideal':>8}"
        f"{'of ideal':>9}{'steady':>8}{'of ideal':>9}{'redeliv':>8}{'dups':>6}{'poll p50/p90 ms':>17}{'late p50/p90 ms':>17}{'broker p50/p90 <=ms':>20}"
    )
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp) / "data", OVERRIDES)
        b.start()
        assert b.proc is not None
        spy = start_profile(b.proc.pid, args.profile) if args.profile else None
        try:
            for i, s in enumerate(rows):
                n = args.records_no_work if not s.work_ms else int(s.ideal * seconds)
                n = min(n, s.cap or n)
                topic, group = f"q{i}", f"g{i}-{s.name}"
                create_topic(b.port, topic, 1)
                if s.client != "classic":
                    # The group's in-flight limit tuned (Kafka's default 2,000 is less than 128
                    # members holding a 16-record batch each), as the published Kafka runs do.
                    group_config(
                        b.port, group, share_auto_offset_reset="earliest", share_partition_max_record_locks=IN_FLIGHT
                    )
                before = share_fetch_buckets(b.http_port)
                t = RUNNERS[s.client](b, s, topic, group, n)
                after = share_fetch_buckets(b.http_port)
                broker_ms = "/".join(bucket_quantile(before, after, q) for q in (0.5, 0.9))
                secs = t.t_done - t.t0
                rate = n / secs if t.delivered == n and secs > 0 else float("nan")
                mode = s.acquire_mode if s.client == "ours" else f"max.poll={s.max_poll}"
                ratio = f"{rate / s.ideal:9.2f}" if s.work_ms else f"{'-':>9}"
                steady = t.steady_rate() if t.delivered == n else float("nan")
                steady_ratio = f"{steady / s.ideal:9.2f}" if s.work_ms else f"{'-':>9}"
                ideal = f"{s.ideal:8,.0f}" if s.work_ms else f"{'-':>8}"
                missing = "" if t.delivered == n else f"  ({n - t.delivered} never delivered)"
                print(
                    f"{s.name:<20}{s.client:<12}{mode:<16}{f'{s.members} x {s.work_ms:g}':>10}{n:>9,}"
                    f"{rate:9,.0f}{ideal}{ratio}{steady:8,.0f}{steady_ratio}{t.redelivered:8}{t.dups:6}"
                    f"{f'{t.wait_ms(0.5):.1f}/{t.wait_ms(0.9):.1f}':>17}"
                    f"{f'{t.late_ms(0.5):.1f}/{t.late_ms(0.9):.1f}':>17}{broker_ms:>20}{missing}",
                    flush=True,
                )
        finally:
            if spy is not None:
                stop_profile(spy)
            b.stop()
        if spy is not None:
            summarize_profile(args.profile, 25)
        if args.stalls and os.path.exists(args.stalls):
            print(Path(args.stalls).read_text(), end="")


if __name__ == "__main__":
    main()
