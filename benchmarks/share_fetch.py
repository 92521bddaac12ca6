"""Share groups' data path (KIP-932): ShareFetch throughput, latency and memory.

Run: python benchmarks/share_fetch.py [--quick] [--profile FILE] [--metrics both]

Starts a broker process (temporary data dir, 127.0.0.1, free port), produces
1 KiB records with librdkafka (linger 5 ms, 64 KiB batches) and prints:

  * records/s delivered and acknowledged by share-group members driven with
    our codec, one asyncio client per member doing exactly what librdkafka's
    ShareConsumer does: ShareGroupHeartbeat v1 on a coordinator connection
    (22-char member id, epoch 0 with the subscription, then the interval the
    broker asks for), ShareFetch v1 on its own connection (epoch 0 naming the
    assigned partitions, then epoch + 1 naming nothing; MaxRecords =
    BatchSize = 500, MaxWaitMs 500, MinBytes 1, MaxBytes 50 MiB) carrying the
    ACCEPT acknowledgements of the previous answer's AcquiredRecords (one
    AcknowledgementBatch with one type per range), and a final
    ShareAcknowledge (epoch -1). For 1, 4 and 16 members on one partition and
    16 members on 16 partitions. Every offset must be delivered exactly once
    (delivery count 1) and every acknowledgement answered without error;
    "acknowledged" is when DescribeShareGroupOffsets first shows lag 0 on
    every partition, so it includes the durable write of the last
    acknowledgement (a persisted start offset still below the high watermark
    then is reported in the checks). Two diagnostic lines: the 4-member case
    with MaxBytes 1 MiB, and the 16-member case with the group's in-flight
    limit (share.partition.max.record.locks) at 4,000 instead of 2,000, which
    shows why 16 members on one partition are slower than 4. Next to it, in
    the same run: the classic Fetch path reading the same records (our
    codec, one connection, 1 MiB per partition as a Java consumer asks; and
    librdkafka's Consumer), and
    librdkafka's ShareConsumer (implicit acknowledgement, 1 and 4 consumers in
    threads, timed from the first record any of them got) on one partition;
  * produce-to-delivery latency (median, p99) at ~200 records/s: one member
    waiting in ShareFetch (MaxWaitMs 500) while librdkafka produces one 1 KiB
    record every 5 ms with its send time in the value; next to a classic Fetch
    long poll (MaxWaitMs 500) on the same kind of stream;
  * broker memory per in-flight record: in process, with tracemalloc, a
    SharePartition holding N records acquired 500 at a time from synthetic
    log-batch headers (as a fetch does), then the worst case where every other
    record is acknowledged (each range split into per-offset state), then that
    worst case plus the share coordinator's copy of the state (a
    ShareStateShard fed every write); and the anonymous RSS growth of a fresh
    broker while 16 members hold 16 partitions at the in-flight limit
    (10,000, the highest allowed; 2,000 with --quick), every other record
    acknowledged.

Targets from the issue are printed next to the figures (not asserted):
>= 100,000 records/s acknowledged with 4 members on one partition; p99
produce-to-delivery <= 10 ms at low load; <= 200 bytes per in-flight record.

--quick: 50k records, 300 latency samples, smaller memory runs (about 30 s
instead of about 1.5 min on 2 cores). --profile FILE: after the measured runs,
run the 4-member case once more on a new group (--profile-rounds N: N times,
each on a new group; --profile-members M: M members) under py-spy (raw collapsed
stacks to FILE) and print the broker's hottest frames (about 10 s more).
--metrics both: instead of the above, only what /metrics costs: codec share
members (1 and 4 on one partition, 16 on 16) acknowledging every record on a
broker with metrics on and one with them off, in alternating rounds, with the
broker's CPU time per MB delivered and 95 % bootstrap intervals of each cost
(metrics_overhead.py); --rounds N, --scrape-every S.
--key-ordering: instead of the above, only what shoal.share.key.ordering costs: 4 codec
members on one partition of records with --keys distinct keys (default 1,000), one group
with key ordering off and one with it on, in alternating rounds (--rounds, default 2).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# The measurements live next to this file, each module under the project's 800-line rule:
# share_common (settings, admin calls, producer, figures table), share_members (the codec
# share-group client), share_references (classic Fetch, librdkafka, latency), share_memory
# (in-flight memory, RSS) and py_spy_profile (--profile).
from metrics_overhead import MB_MOVED, alternate, broker_pair  # noqa: E402
from py_spy_profile import start_profile, stop_profile, summarize_profile  # noqa: E402
from share_common import (  # noqa: E402
    MAX_RECORDS,
    MIB,
    OVERRIDES,
    RECORD,
    ROWS,
    create_topic,
    high_watermarks,
    produce,
    quantiles,
    row,
)

# Re-exported: chaos.py, clients.py, share_consumer.py, share_scaling.py and soak.py import these from here.
from share_common import QUIET as QUIET  # noqa: E402
from share_common import cpu_seconds as cpu_seconds  # noqa: E402
from share_common import group_config as group_config  # noqa: E402
from share_common import rss_anon as rss_anon  # noqa: E402
from share_common import wait_acknowledged as wait_acknowledged  # noqa: E402
from share_members import ShareRun, share_run  # noqa: E402
from share_memory import in_flight_memory, rss_figures  # noqa: E402
from share_references import (  # noqa: E402
    classic_fetch_codec,
    classic_fetch_confluent,
    classic_latency,
    share_consumer_run,
    share_latency,
)

from tests.support.brokers import BrokerProcess  # noqa: E402

# -- main -------------------------------------------------------------------------------------


def metrics_overhead(n: int, batch_kib: int, rounds: int, scrape_every: float) -> bool:
    """--metrics both: acknowledged records/s of codec share members, metrics on and off."""
    ok = True

    def measure(b: BrokerProcess, r: int) -> dict[str, float]:
        nonlocal ok
        out = {}
        for members, topic, parts in ((1, "q1", 1), (4, "q1", 1), (16, "q16", 16)):
            run = share_run(b, topic, parts, members, f"g-ovh-{members}x{parts}-{r}", hwms[b.port, topic])
            ok &= run.ok
            out[f"{members} x {parts} acked/s"] = n / run.ack_s
        out[MB_MOVED] = 3 * n * RECORD / MIB  # record bytes the members received
        return out

    hwms: dict[tuple[int, str], list[int]] = {}
    print(f"/metrics overhead: {rounds} rounds, a broker with metrics on and one with them off, alternating")
    with tempfile.TemporaryDirectory(prefix="shoal-bench-share-metrics-") as tmp:
        with broker_pair(tmp, OVERRIDES) as brokers:
            for b in brokers.values():
                for topic, parts in (("q1", 1), ("q16", 16)):
                    create_topic(b.port, topic, parts)
                    produce(b.bootstrap, topic, parts, n, batch_kib * 1024)
                    hwms[b.port, topic] = high_watermarks(b.port, topic, parts)
                    assert sum(hwms[b.port, topic]) == n
            alternate(brokers, rounds, measure, scrape_every=scrape_every)
    if not ok:
        print("FAILED: a run lost, duplicated or redelivered records, or an acknowledgement failed")
    return ok


def key_ordering(n: int, batch_kib: int, keys: int, rounds: int) -> bool:
    """4 codec members on one partition of keyed records, shoal.share.key.ordering off and on."""
    ok = True
    with tempfile.TemporaryDirectory(prefix="shoal-bench-share-keys-") as tmp:
        b = BrokerProcess(Path(tmp) / "data", OVERRIDES)
        b.start()
        try:
            create_topic(b.port, "qk", 1)
            secs = produce(b.bootstrap, "qk", 1, n, batch_kib * 1024, keys=keys)
            hwms = high_watermarks(b.port, "qk", 1)
            print(f"{n:,} records of 1 KiB with {keys:,} keys produced to qk (1 partition) in {secs:.1f} s")
            print(f"  {'key ordering':<13} {'round':>5} {'delivered/s':>12} {'acked/s':>10} {'fetches':>8} {'empty':>6}"
                  f" {'broker CPU':>10}  checks")  # fmt: skip
            rates: dict[str, list[float]] = {"off": [], "on": []}
            for i in range(rounds):
                for mode in ("off", "on"):
                    on = "true" if mode == "on" else "false"
                    r = share_run(b, "qk", 1, 4, f"g-keys-{mode}-{i}", hwms, shoal_share_key_ordering=on)
                    t = r.tally
                    ok &= r.ok
                    checks = "exactly once, acks ok" if r.ok else (
                        f"FAILED: delivered {t.delivered}/{t.total} dup {t.duplicates} redelivered"
                        f" {t.redelivered} errors {dict(t.errors)}"
                    )  # fmt: skip
                    rates[mode].append(n / r.ack_s)
                    print(f"  {mode:<13} {i:>5} {n / r.deliver_s:12,.0f} {n / r.ack_s:10,.0f} {t.fetches:8}"
                          f" {t.empty_fetches:6} {r.broker_cpu:10.0%}  {checks}")  # fmt: skip
            for mode in ("off", "on"):
                row(f"acked/s 4 x 1, {keys:,} keys, key ordering {mode}", f"{max(rates[mode]):,.0f} /s", "best round")
        finally:
            b.stop()
    w = max(len(r[0]) for r in ROWS)
    for label, ours, ref, _target in ROWS:
        print(f"{label:<{w}}  {ours:>14}  {ref}")
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller volumes (a smoke run)")
    ap.add_argument("--records", type=int, default=0, help="records per topic (default 200k, 50k with --quick)")
    ap.add_argument("--batch-kib", type=int, default=64, help="producer batch.size in KiB (records per log batch)")
    ap.add_argument("--profile", metavar="FILE", help="profile an extra 4-member run with py-spy (raw stacks to FILE)")
    ap.add_argument(
        "--profile-members",
        type=int,
        default=4,
        help="members of the profiled run on one partition (16: why 16 x 1 is slower than 4 x 1)",
    )
    ap.add_argument(
        "--profile-rounds", type=int, default=1, help="profiled runs, each on a new group (8 gives ~1,000 samples)"
    )
    ap.add_argument(
        "--metrics",
        choices=("on", "both"),
        default="on",
        help="both: only the /metrics overhead, a broker with metrics on and one off in alternating rounds",
    )
    ap.add_argument("--rounds", type=int, default=0, help="rounds of --metrics both (default 12, 4 with --quick)")
    ap.add_argument(
        "--scrape-every",
        type=float,
        default=1.0,
        help="seconds between scrapes of --metrics both (0: none, the control run)",
    )
    ap.add_argument("--key-ordering", action="store_true", help="only 4 members with key ordering off and on")
    ap.add_argument("--keys", type=int, default=1000, help="distinct record keys of --key-ordering")
    args = ap.parse_args()
    quick = args.quick
    per_batch = max(1, args.batch_kib * 1024 // (RECORD + 70))  # measured below
    n = args.records or (50_000 if quick else 200_000)
    lat_count = 300 if quick else 1000
    ok = True
    if args.metrics == "both":
        if not metrics_overhead(n, args.batch_kib, args.rounds or (4 if quick else 12), args.scrape_every):
            sys.exit(1)
        return
    if args.key_ordering:
        if not key_ordering(n, args.batch_kib, args.keys, args.rounds or 2):
            sys.exit(1)
        return

    with tempfile.TemporaryDirectory(prefix="shoal-bench-share-fetch-") as tmp:
        b = BrokerProcess(Path(tmp) / "data", OVERRIDES)
        b.start()
        try:
            assert b.proc is not None
            pid = b.proc.pid
            # Latency first, on an idle broker.
            for t in ("lat-share", "lat-classic"):
                create_topic(b.port, t, 1)
            skip = 20  # the first records also measure connection and session set-up
            s_med, s_p99 = quantiles(share_latency(b, "lat-share", "g-lat", lat_count, skip))
            c_med, c_p99 = quantiles(classic_latency(b, "lat-classic", lat_count, skip))
            print(f"produce-to-delivery latency, one 1 KiB record every 5 ms, {lat_count} records, MaxWaitMs 500:")
            print(f"  ShareFetch (1 member):  median {s_med:6.2f} ms   p99 {s_p99:6.2f} ms   (target: p99 <= 10 ms)")
            print(f"  classic Fetch long poll: median {c_med:6.2f} ms   p99 {c_p99:6.2f} ms")
            row("latency median", f"{s_med:.2f} ms", f"{c_med:.2f} ms classic Fetch")
            row("latency p99", f"{s_p99:.2f} ms", f"{c_p99:.2f} ms classic Fetch", "<= 10 ms")
            print()

            create_topic(b.port, "q1", 1)
            create_topic(b.port, "q16", 16)
            batch = args.batch_kib * 1024
            prod1 = produce(b.bootstrap, "q1", 1, n, batch)
            prod16 = produce(b.bootstrap, "q16", 16, n, batch)
            hwm1 = high_watermarks(b.port, "q1", 1)
            hwm16 = high_watermarks(b.port, "q16", 16)
            assert sum(hwm1) == n and sum(hwm16) == n, (hwm1, hwm16)
            print(
                f"{n:,} records of 1 KiB produced to q1 (1 partition) in {prod1:.1f} s and to q16 (16 partitions)"
                f" in {prod16:.1f} s; producer batch.size {args.batch_kib} KiB"
            )

            ref_s, ref_n, n_batches = classic_fetch_codec(b.port, "q1", hwm1)
            per_batch = round(n / n_batches)
            print(f"  {n_batches:,} log batches in q1: {per_batch} records per batch")
            assert ref_n == n, (ref_n, n)
            ref_rate = n / ref_s
            rk_s, rk_n = classic_fetch_confluent(b.bootstrap, "q1", hwm1)
            assert rk_n == n, (rk_n, n)
            rk_rate = n / rk_s
            ref16_s, ref16_n, _ = classic_fetch_codec(b.port, "q16", hwm16)
            assert ref16_n == n, (ref16_n, n)
            ref16_rate = n / ref16_s

            print(
                f"share groups, codec members (ShareFetch v1, MaxRecords 500, ACCEPT piggy-backed); {n:,} records each:"
            )
            print(
                f"  {'members x partitions':<21} {'delivered/s':>12} {'acked/s':>10} {'fetches':>8} {'empty':>6}"
                f" {'broker CPU':>10} {'ms/1k acked':>11} {'client CPU':>10}  checks"
            )
            runs: list[tuple[str, ShareRun, bool]] = []  # (label, run, the target applies)
            # (members, topic, partitions, high watermarks, MaxBytes MiB, the group's in-flight limit)
            scenarios = [(1, "q1", 1, hwm1, 50, 0), (4, "q1", 1, hwm1, 50, 0), (16, "q1", 1, hwm1, 50, 0),
                         (16, "q16", 16, hwm16, 50, 0), (4, "q1", 1, hwm1, 1, 0),
                         (16, "q1", 1, hwm1, 50, 4000)]  # fmt: skip
            for members, topic, parts, hwms, max_mib, locks in scenarios:
                label = f"{members:>2} x {parts:<2}" + ("" if max_mib == 50 else f" MaxBytes {max_mib} MiB")
                label += f" locks {locks}" if locks else ""
                limit = {"share_partition_max_record_locks": str(locks)} if locks else {}
                group = f"g-{members}x{parts}-{max_mib}-{locks}"
                r = share_run(b, topic, parts, members, group, hwms, max_mib * MIB, **limit)
                runs.append((label, r, (members, parts, max_mib, locks) == (4, 1, 50, 0)))
                t = r.tally
                checks = "exactly once, acks ok" if r.ok else (
                    f"FAILED: delivered {t.delivered}/{t.total} dup {t.duplicates} redelivered {t.redelivered}"
                    f" acked {t.acked} uncovered {t.uncovered} errors {dict(t.errors)} ack_s {r.ack_s}"
                )  # fmt: skip
                if r.stale_starts:
                    checks += f"; persisted start offset < high watermark on {r.stale_starts} partition(s)"
                ok &= r.ok
                print(
                    f"  {label:<21} {n / r.deliver_s:12,.0f} {n / r.ack_s:10,.0f}"
                    f" {t.fetches:8} {t.empty_fetches:6} {r.broker_cpu:10.0%}"
                    f" {r.broker_cpu * r.ack_s / n * 1e6:11.2f} {r.client_cpu:10.0%}  {checks}"
                )
            print(
                f"  classic Fetch, codec, 1 connection, 1 MiB/partition:  1 partition {ref_rate:10,.0f} /s"
                f"   16 partitions {ref16_rate:10,.0f} /s"
            )
            print(f"  classic Fetch, librdkafka Consumer, 1 partition:     {rk_rate:10,.0f} /s")
            print(
                "  (the MaxBytes 1 MiB line is a diagnostic: librdkafka asks for 50 MiB; the gap is what the"
                " broker spends on log data it reads but does not hand out. So is the locks 4000 line: the"
                " group's share.partition.max.record.locks raised from Kafka's default 2,000, which 16 members"
                " asking 500 records each outgrow, to the broker's highest allowed)"
            )
            for label, r, targeted in runs:
                ref = ref_rate if r.partitions == 1 else ref16_rate
                target = ">= 100,000 /s" if targeted else ""
                row(
                    f"acked/s {label.strip()} (members x partitions)",
                    f"{n / r.ack_s:,.0f} /s",
                    f"{ref:,.0f} /s classic Fetch",
                    target,
                )

            sc_rows = []
            for consumers in (1, 4):
                s = share_consumer_run(b, "q1", f"g-rdk-{consumers}", consumers, hwm1[0])
                ok &= s["ok"]
                sc_rows.append((consumers, s))
                print(
                    f"  librdkafka ShareConsumer x{consumers} (implicit ack), 1 partition: delivered"
                    f" {n / s['deliver_s']:10,.0f} /s, acked {n / s['ack_s']:10,.0f} /s"
                    f"   (duplicates {s['dups']}, redelivered {s['redelivered']}, errors {s['errors']};"
                    f" persisted start offset {s['starts']} of {hwm1[0]})"
                )
                row(
                    f"acked/s librdkafka ShareConsumer x{consumers}",
                    f"{n / s['ack_s']:,.0f} /s",
                    f"{rk_rate:,.0f} /s librdkafka Consumer",
                )

            if args.profile:
                spy = start_profile(pid, args.profile)
                time.sleep(1.0)
                members, rounds = args.profile_members, max(1, args.profile_rounds)
                acked_s = 0.0
                for i in range(rounds):
                    r = share_run(b, "q1", 1, members, f"g-profiled-{i}", hwm1)
                    ok &= r.ok
                    acked_s += r.ack_s
                err = stop_profile(spy)
                print()
                print(
                    f"py-spy on the broker during {rounds} run(s) of {members} members (acked"
                    f" {rounds * n / acked_s:,.0f} /s while sampled, {'ok' if ok else 'FAILED'}),"
                    f" raw stacks in {args.profile}:"
                )
                if Path(args.profile).exists():
                    summarize_profile(args.profile, 15)
                else:
                    print(f"  py-spy wrote nothing: {err.strip()[-500:]}")
        finally:
            rc = b.stop()
            log = b.log_text()
    bad = [ln for ln in log.splitlines() if " ERROR " in ln or "Traceback" in ln or " WARNING " in ln]
    print()
    print(f"broker exit code {rc}; {len(bad)} ERROR/WARNING/Traceback lines in its log")
    for ln in bad[:10]:
        print(f"  {ln[:200]}")

    print()
    with tempfile.TemporaryDirectory(prefix="shoal-bench-share-rss-") as tmp:
        ok &= rss_figures(tmp, 2000 if quick else 10_000)

    print()
    sizes = [2_000, 10_000] if quick else [2_000, 10_000, 100_000]
    state_up_to = 10_000  # the shard merges every write into its whole state: slow to feed 100k
    print(
        f"SharePartition memory per in-flight record (tracemalloc; acquired {MAX_RECORDS} at a time"
        f" from log batches of {per_batch} records; 10,000 is the highest share.partition.max.record.locks):"
    )
    print(f"  {'in flight':>9}  {'acquired':>9}  {'every other acked (split)':>26}  {'split + coordinator state':>26}")
    for size in sizes:
        whole = in_flight_memory(size, per_batch, False)
        split = in_flight_memory(size, per_batch, True)
        state = in_flight_memory(size, per_batch, True, with_state=True) if size <= state_up_to else float("nan")
        print(f"  {size:>9,}  {whole:7.1f} B  {split:24.1f} B  {state:24.1f} B")
        if size == state_up_to:
            row(
                f"memory/in-flight record, split ({size:,})",
                f"{state:.1f} B",
                "+ ShareStateShard (coordinator)",
                "<= 200 B",
            )
        if size == sizes[-1]:
            row(f"memory/in-flight record, acquired ({size:,})", f"{whole:.1f} B", "SharePartition", "<= 200 B")
            row(f"memory/in-flight record, split ({size:,})", f"{split:.1f} B", "SharePartition", "<= 200 B")

    print()
    w = max(len(r[0]) for r in ROWS)
    print(f"{'figure':<{w}}  {'ours':>22}  {'reference':<34} target")
    for label, ours, ref, target in ROWS:
        print(f"{label:<{w}}  {ours:>22}  {ref:<34} {target}")
    if not ok:
        print("FAILED: a run lost, duplicated or redelivered records, or an acknowledgement failed (see above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
