"""Mirror throughput next to the same client's plain produce rate, in the same run.

Run: python benchmarks/mirror.py [--records 100000] [--size 100] [--topics 3] [--partitions 2]

Why both figures: the mirror reads with AsyncConsumer and writes with AsyncProducer
(idempotent, acks=all), so the producer's own rate on this machine is the ceiling the mirror
is measured against. Starts two broker processes (temporary data dirs, 127.0.0.1, free ports),
fills the source with ``--records`` records of ``--size`` bytes spread over ``--topics`` topics
with AsyncProducer (idempotent, acks=all, timed: the plain produce rate), then runs
``shoal.client.mirror`` in this process (``--once``, timed from start to its last checkpoint)
and prints records/s and MB/s of each, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoal.client import AsyncAdmin, AsyncProducer  # noqa: E402
from shoal.client.admin.types import NewTopic  # noqa: E402
from shoal.client.mirror.runner import MirrorOptions, run_mirror  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402


async def produce(bootstrap: str, topics: list[str], partitions: int, records: int, size: int) -> float:
    async with AsyncAdmin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(t, partitions) for t in topics])
    value = os.urandom(size)
    async with AsyncProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=10, batch_size=512 * 1024
    ) as p:
        for t in topics:
            await p.send_and_wait(t, b"warm-up", key=b"w")
        send = p.send
        n = len(topics)
        start = time.perf_counter()
        for i in range(records):
            await send(topics[i % n], value, key=b"%08d" % i)
        await p.flush()
        return time.perf_counter() - start


def line(what: str, records: int, nbytes: int, secs: float) -> str:
    return f"{what:14s} {records:>8d} records in {secs:6.2f} s: {records / secs:>9.0f} records/s {nbytes / secs / 1e6:7.2f} MB/s"


async def main_async(args: argparse.Namespace, a: BrokerProcess, b: BrokerProcess) -> None:
    topics = [f"bench-{i}" for i in range(args.topics)]
    secs = await produce(a.bootstrap, topics, args.partitions, args.records, args.size)
    per_record = args.size + 8
    print(line("plain produce", args.records, args.records * per_record, secs))
    opts = MirrorOptions(source={"bootstrap.servers": a.bootstrap}, target={"bootstrap.servers": b.bootstrap})
    start = time.perf_counter()
    summary = await run_mirror(opts)
    secs_m = time.perf_counter() - start
    print(line("mirror --once", summary.records, summary.bytes, secs_m))
    print(f"mirror/produce records/s: {(summary.records / secs_m) / ((args.records) / secs):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--topics", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        a = BrokerProcess(Path(tmp) / "source").start()
        b = BrokerProcess(Path(tmp) / "target").start()
        try:
            asyncio.run(main_async(args, a, b))
        finally:
            a.stop()
            b.stop()


if __name__ == "__main__":
    main()
