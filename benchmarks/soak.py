"""A long steady run: 1,000 open connections and a 200-member share group, for minutes.

Run: python benchmarks/soak.py [--minutes 10] [--members 200] [--partitions 20]
                               [--connections 1000] [--rate 500]

One broker process (temporary data dir, Kafka's heartbeat defaults). In this process, on one
uvloop event loop:
  * `--connections` plain connections that each sent an ApiVersions and then idle (one
    ApiVersions a minute keeps them inside connections.max.idle.ms);
  * a share group of `--members` AsyncShareConsumers (explicit ACCEPT) on one topic of
    `--partitions` partitions;
  * an AsyncProducer writing `--rate` records a second (acks=all), each stamped with its send
    time.
After a settling minute (every member joined, assignments stable), everything is measured for
`--minutes`: errors (any exception a client raised or a send that failed), duplicates (an
offset delivered twice: with no failure there must be none), rebalances (assignment changes
any member saw after settling), delivery latency p50/p99 (send to receipt), the broker's RSS
at the start and the end of the measured window, and the broker's CPU seconds per second.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from share_fetch import cpu_seconds, create_topic, group_config, rss_anon  # noqa: E402

from shoal.protocol.api import api_by_name  # noqa: E402
from shoal.protocol.frames import encode_request  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402

TOPIC, GROUP = "soak", "soak-share"
OVERRIDES = ["offsets.topic.num.partitions=3", "share.coordinator.state.topic.num.partitions=3"]
SETTLE_S = 60.0
_AV = api_by_name("ApiVersions")


class Stats:
    def __init__(self) -> None:
        self.errors: Counter = Counter()
        self.deliveries: Counter = Counter()  # (partition, offset) -> times
        self.latency: list[float] = []
        self.rebalances = 0
        self.produced = 0
        self.measuring = False


async def idle_connection(port: int, stop: asyncio.Event, stats: Stats, ready: list[int]) -> None:
    body = _AV.request_class()(client_software_name="soak", client_software_version="1")
    frame = b"".join(encode_request(_AV.key, 3, 1, "soak-idle", body))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        stats.errors[f"idle connect: {e.__class__.__name__}"] += 1
        return
    ready[0] += 1
    try:
        while not stop.is_set():
            writer.write(frame)
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
            try:
                await asyncio.wait_for(stop.wait(), 60.0)
            except TimeoutError:
                pass
    except (OSError, asyncio.IncompleteReadError) as e:
        if not stop.is_set():
            stats.errors[f"idle connection lost: {e.__class__.__name__}"] += 1
    finally:
        writer.close()


async def member(bootstrap: str, stop: asyncio.Event, stats: Stats, joined: list[int]) -> None:
    from shoal.client.share.consumer import AsyncShareConsumer

    sc = AsyncShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "share.acknowledgement.mode": "explicit"}
    )
    await sc.start()
    sc.subscribe([TOPIC])
    seen: frozenset = frozenset()
    counted = False
    try:
        while not stop.is_set():
            try:
                records = await sc.poll(500)
            except Exception as e:  # noqa: BLE001 - counted, and the member goes on
                stats.errors[f"poll: {e.__class__.__name__}: {e}"[:120]] += 1
                await asyncio.sleep(0.5)
                continue
            now = time.time()
            for r in records:
                if stats.measuring:
                    stats.deliveries[r.partition, r.offset] += 1
                    stats.latency.append(now - r.timestamp / 1000)
                sc.acknowledge(r)
            current = frozenset(sc.assignment())
            if current != seen:
                if stats.measuring:
                    stats.rebalances += 1
                seen = current
            if current and not counted:
                joined[0] += 1
                counted = True
    finally:
        try:
            await sc.commit_sync(10_000)
        except Exception:  # noqa: BLE001 - closing: the acks' fate does not change the figures
            pass
        await sc.close()


async def producer(bootstrap: str, rate: int, stop: asyncio.Event, stats: Stats) -> None:
    from shoal.client.producer.producer import AsyncProducer

    async with AsyncProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as p:
        pending: list[Any] = []
        start = time.perf_counter()
        n = 0
        while not stop.is_set():
            due = start + n / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(await p.send(TOPIC, value=b"x" * 200, timestamp_ms=int(time.time() * 1000)))
            n += 1
            if len(pending) >= 1000:
                for fut in pending:
                    try:
                        await fut
                        stats.produced += 1
                    except Exception as e:  # noqa: BLE001 - counted
                        stats.errors[f"produce: {e.__class__.__name__}"] += 1
                pending.clear()
        await p.flush(30)


async def soak(b: BrokerProcess, args: argparse.Namespace) -> dict[str, Any]:
    stats = Stats()
    stop = asyncio.Event()
    ready, joined = [0], [0]
    assert b.proc is not None
    pid = b.proc.pid
    tasks = [asyncio.create_task(idle_connection(b.port, stop, stats, ready)) for _ in range(args.connections)]
    tasks += [asyncio.create_task(member(b.bootstrap, stop, stats, joined)) for _ in range(args.members)]
    tasks.append(asyncio.create_task(producer(b.bootstrap, args.rate, stop, stats)))
    settle_until = time.monotonic() + args.settle
    while time.monotonic() < settle_until or joined[0] < args.members:
        await asyncio.sleep(1.0)
        if time.monotonic() > settle_until + 120:
            break
    stats.errors.clear()
    stats.measuring = True
    rss0, cpu0, t0 = rss_anon(pid), cpu_seconds(pid), time.perf_counter()
    produced0 = stats.produced
    end = time.monotonic() + args.minutes * 60
    while time.monotonic() < end:
        await asyncio.sleep(min(10.0, max(0.0, end - time.monotonic())))
        if b.proc.poll() is not None:
            stats.errors["broker exited"] += 1
            break
    elapsed = time.perf_counter() - t0
    rss1, cpu1 = rss_anon(pid), cpu_seconds(pid)
    stats.measuring = False
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "elapsed": elapsed,
        "connections": ready[0],
        "members_holding": joined[0],
        "produced": stats.produced - produced0,
        "delivered": sum(stats.deliveries.values()),
        "duplicates": sum(n - 1 for n in stats.deliveries.values() if n > 1),
        "errors": stats.errors,
        "rebalances": stats.rebalances,
        "latency": stats.latency,
        "rss": (rss0, rss1),
        "cpu_per_s": (cpu1 - cpu0) / elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--members", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--rate", type=int, default=500, help="records produced per second")
    ap.add_argument("--settle", type=float, default=SETTLE_S, help="seconds before measuring")
    args = ap.parse_args()
    import uvloop

    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp) / "data", OVERRIDES).start()
        try:
            create_topic(b.port, TOPIC, args.partitions)
            group_config(b.port, GROUP, share_auto_offset_reset="earliest")
            r = uvloop.run(soak(b, args))
        finally:
            b.stop()
    lat = sorted(r["latency"]) or [float("nan")]
    q = statistics.quantiles(lat, n=100) if len(lat) >= 100 else [lat[-1]] * 99
    mib = 1 << 20
    errors = sum(r["errors"].values())
    rows = [
        ("measured", f"{r['elapsed'] / 60:.1f} min", f"after {args.settle:.0f} s settling"),
        ("idle connections open", f"{r['connections']:,}", ""),
        ("members holding partitions", f"{r['members_holding']}", f"of {args.members} on {args.partitions} partitions"),
        ("records produced / delivered", f"{r['produced']:,} / {r['delivered']:,}", f"{args.rate}/s asked"),
        ("errors", f"{errors}", "; ".join(f"{k} x{n}" for k, n in r["errors"].most_common(3))),
        ("duplicates", f"{r['duplicates']}", "offsets delivered twice"),
        ("rebalances", f"{r['rebalances']}", "assignment changes seen after settling"),
        ("delivery latency p50 / p99", f"{q[49] * 1000:.0f} / {q[98] * 1000:.0f} ms", "send to receipt"),
        ("broker RSS start / end", f"{r['rss'][0] / mib:.0f} / {r['rss'][1] / mib:.0f} MiB", "anonymous memory"),
        ("broker CPU", f"{r['cpu_per_s']:.2f} s/s", ""),
    ]
    width = max(len(x[0]) for x in rows) + 2
    for name, value, note in rows:
        print(f"{name:<{width}}{value:>22}   {note}")
    sys.exit(1 if errors or r["duplicates"] else 0)


if __name__ == "__main__":
    main()
