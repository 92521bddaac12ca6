"""Consumer throughput: our AsyncConsumer next to aiokafka's AIOKafkaConsumer, same run, same data.

Run: python benchmarks/consumer.py [--records 300000] [--size 1024] [--partitions 4] [--rounds 2]

Starts a broker process (temporary data dir, 127.0.0.1, free port), fills one
topic with ``--records`` records of ``--size`` bytes (confluent-kafka producer,
uncompressed), then reads the whole topic from the beginning with each client
in turn (``--rounds`` times, alternating who goes first) and prints records/s
and MB/s per client and the ratio ours/aiokafka. Both consumers use assign()
(no group, so no rebalance delay is measured), getmany() with their default
``max.poll.records``-like batch limit raised to 10000, the same event loop
(uvloop when installed) and default fetch sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.brokers import BrokerProcess  # noqa: E402

QUIET = {"log_level": 3}


def fill(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, **QUIET})
    value = bytes(size)
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, key=b"%d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


async def ours(bootstrap: str, topic: str, partitions: int, total: int) -> float:
    from shoal.client.consumer.consumer import AsyncConsumer
    from shoal.client.core.cluster import TopicPartition

    async with AsyncConsumer(
        {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "max.poll.records": 10000}
    ) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        start = time.perf_counter()
        n = 0
        while n < total:
            for recs in (await c.getmany(timeout_ms=1000)).values():
                n += len(recs)
        return time.perf_counter() - start


async def aiokafka(bootstrap: str, topic: str, partitions: int, total: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        start = time.perf_counter()
        n = 0
        while n < total:
            for recs in (await c.getmany(timeout_ms=1000, max_records=10000)).values():
                n += len(recs)
        return time.perf_counter() - start
    finally:
        await c.stop()


def run(coro_fn, *args) -> float:
    try:
        import uvloop

        return uvloop.run(coro_fn(*args))
    except ImportError:
        return asyncio.run(coro_fn(*args))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data")
        broker.start()
        try:
            topic = "bench-consumer"
            t0 = time.perf_counter()
            fill(broker.bootstrap, topic, args.records, args.size, args.partitions)
            print(f"filled {args.records} x {args.size} B in {time.perf_counter() - t0:.1f} s")
            times: dict[str, list[float]] = {"ours": [], "aiokafka": []}
            clients = [("ours", ours), ("aiokafka", aiokafka)]
            for r in range(args.rounds):
                for name, fn in clients if r % 2 == 0 else clients[::-1]:
                    times[name].append(run(fn, broker.bootstrap, topic, args.partitions, args.records))
            mb = args.records * args.size / 1e6
            for name, ts in times.items():
                best, med = min(ts), statistics.median(ts)
                print(
                    f"{name:9s} best {args.records / best:10,.0f} rec/s {mb / best:7.1f} MB/s"
                    f"   median {args.records / med:10,.0f} rec/s   ({', '.join(f'{t:.2f}s' for t in ts)})"
                )
            ratio = min(times["aiokafka"]) / min(times["ours"])
            print(f"ours / aiokafka (best): {ratio:.2f}x")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
