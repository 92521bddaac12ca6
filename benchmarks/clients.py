"""The bundled client next to aiokafka, kafka-python and librdkafka: one run, one broker.

Run: python benchmarks/clients.py [--records 1000000] [--quick]

Starts a broker process (temporary data dir, 127.0.0.1, free port) and, with
the same workload for everyone (1 KiB records, ``--records`` of them, a
4-partition topic):

  * produce: AsyncProducer, aiokafka, kafka-python and confluent-kafka
    (librdkafka) each write the whole workload to a topic of their own
    (acks=1, linger 5 ms, default batch sizes, no compression); timed from
    the first send to the last acknowledgement;
  * consume: AsyncConsumer, aiokafka, kafka-python and confluent-kafka each
    read one of those topics from the beginning with assign() (no group, so
    no rebalance is timed); timed from the first poll to the last record;
    two rounds with the order rotated so no client always reads first, right
    after the produce phase, best round per client reported;
  * share-consume: AsyncShareConsumer and librdkafka's ShareConsumer read a
    one-partition topic holding the same number of records in fresh share
    groups (implicit acknowledgement), 1 and 4 consumers; timed from the first
    record to every offset delivered exactly once, and to the group's state
    showing every record durably acknowledged (lag 0).

Targets (issue #7): our producer and consumer >= aiokafka; our share
consumer >= 0.5x librdkafka's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import consumer as consumer_bench  # noqa: E402
import share_consumer as share_bench  # noqa: E402
import uvloop  # noqa: E402
from producer_perf import ProduceRun, produce_aiokafka, produce_ours  # noqa: E402
from share_fetch import OVERRIDES, create_topic  # noqa: E402
from share_fetch import produce as produce_one_partition  # noqa: E402

from tests.support.brokers import BrokerProcess  # noqa: E402

PARTITIONS = 4
SIZE = 1024
QUIET = {"log_level": 3}
CONSUME_ROUNDS = 2


# -- produce -----------------------------------------------------------------------------------


def produce_kafka_python(bootstrap: str, topic: str, count: int, size: int = SIZE) -> ProduceRun:
    from kafka import KafkaProducer

    value = os.urandom(size)
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
    try:
        p.send(topic, b"warm-up").get(30)
        send = p.send
        start = time.perf_counter()
        for _ in range(count):
            send(topic, value)
        p.flush()
        return ProduceRun("kafka-python", count, size, time.perf_counter() - start)
    finally:
        p.close()


def produce_confluent(bootstrap: str, topic: str, count: int, size: int = SIZE) -> ProduceRun:
    from confluent_kafka import Producer

    value = os.urandom(size)
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, **QUIET})
    p.produce(topic, b"warm-up")
    p.flush(30)
    produce = p.produce
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(300) == 0
    return ProduceRun("confluent", count, size, time.perf_counter() - start)


# -- consume -----------------------------------------------------------------------------------


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, total: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        start = time.perf_counter()
        n = 0
        while n < total:
            for recs in c.poll(timeout_ms=1000, max_records=10000).values():
                n += len(recs)
        return time.perf_counter() - start
    finally:
        c.close()


def consume_confluent(bootstrap: str, topic: str, partitions: int, total: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused", "enable.auto.commit": False, **QUIET})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        start = time.perf_counter()
        n = 0
        while n < total:
            for m in c.consume(num_messages=10000, timeout=1.0):
                if m.error() is None:
                    n += 1
        return time.perf_counter() - start
    finally:
        c.close()


def run_async(fn: Any, *args: Any, **kw: Any) -> Any:
    return uvloop.run(fn(*args, **kw))


# -- report ------------------------------------------------------------------------------------


def line(label: str, records: int, seconds: float, ref: float | None = None, ref_name: str = "") -> None:
    rate = records / seconds
    mb = records * SIZE / seconds / 1e6
    extra = f"   {ref / seconds:5.2f}x {ref_name}" if ref else ""
    print(f"  {label:14s} {rate:10,.0f} records/s {mb:8.1f} MB/s  ({seconds:6.2f} s){extra}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="100,000 records")
    args = ap.parse_args()
    n = 100_000 if args.quick else args.records
    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp) / "data", OVERRIDES)
        b.start()
        bs = b.bootstrap
        try:
            print(f"workload: {n:,} records of {SIZE} B ({n * SIZE / 1e6:,.0f} MB), {PARTITIONS} partitions")
            print("produce (acks=1, linger 5 ms):", flush=True)
            runs: dict[str, ProduceRun] = {}
            for name in ("shoal", "aiokafka", "kafka-python", "confluent"):
                create_topic(b.port, f"t-{name}", PARTITIONS)
            runs["shoal"] = run_async(produce_ours, bs, "t-shoal", n, SIZE, acks="1", linger_ms=5)
            runs["aiokafka"] = run_async(produce_aiokafka, bs, "t-aiokafka", n, SIZE, acks=1, linger_ms=5)
            runs["kafka-python"] = produce_kafka_python(bs, "t-kafka-python", n)
            runs["confluent"] = produce_confluent(bs, "t-confluent", n)
            ref = runs["aiokafka"].seconds
            for name, run in runs.items():
                line(name, n, run.seconds, ref if name == "shoal" else None, "aiokafka")

            print(f"consume (assign, from the beginning; best of {CONSUME_ROUNDS} rounds, order rotated):", flush=True)
            total = n + 1  # each topic also holds its producer's warm-up record
            readers = [
                ("shoal", lambda: run_async(consumer_bench.ours, bs, "t-shoal", PARTITIONS, total)),
                ("aiokafka", lambda: run_async(consumer_bench.aiokafka, bs, "t-aiokafka", PARTITIONS, total)),
                ("kafka-python", lambda: consume_kafka_python(bs, "t-kafka-python", PARTITIONS, total)),
                ("confluent", lambda: consume_confluent(bs, "t-confluent", PARTITIONS, total)),
            ]
            best: dict[str, float] = {}
            for r in range(CONSUME_ROUNDS):
                for name, read in readers[r:] + readers[:r]:
                    t = read()
                    best[name] = min(t, best.get(name, t))
            for name, _ in readers:
                line(name, total, best[name], best["aiokafka"] if name == "shoal" else None, "aiokafka")

            print("share-consume (one partition, implicit acknowledgement):", flush=True)
            create_topic(b.port, "q", 1)
            produce_one_partition(bs, "q", 1, n, 64 * 1024)
            for k in (1, 4):
                ours = share_bench.ours_run(bs, b.port, "q", f"g-ours-{k}", k, n)
                theirs = share_bench.share_consumer_run(b, "q", f"g-rdk-{k}", k, n)
                print(f"  {k} consumer(s), every offset delivered:")
                line("shoal", n, ours["deliver_s"], theirs["deliver_s"], "librdkafka")
                line("librdkafka", n, theirs["deliver_s"])
                print(f"  {k} consumer(s), every record durably acknowledged (lag 0):")
                line("shoal", n, ours["ack_s"], theirs["ack_s"], "librdkafka")
                line("librdkafka", n, theirs["ack_s"])
                print(
                    f"  exactly once: shoal {ours['ok']} (duplicates {ours['dups']}), librdkafka {theirs['ok']}",
                    flush=True,
                )
        finally:
            b.stop()


if __name__ == "__main__":
    main()
