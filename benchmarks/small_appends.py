"""Produce of small batches: requests/s of small appends, pipelined.

Why: appends under ``ASYNC_APPEND_BYTES`` are written on the event loop while
writes are quick, and handed to the log writer thread once one was slow (on a
VM whose page cache throttles dirty pages, a write can block the loop for
100 ms and more: benchmarks/stall_watch.py, ``broker.log.inline_writes``).
This measures that path: requests/s of pre-built small batches from our
codec, pipelined on one connection and on several (so requests of different
partitions interleave), acks=1 and acks=-1. Compare two checkouts by running
it from each.

Run: python benchmarks/small_appends.py [--seconds S] [--rounds N]
Run it from the checkout whose broker you want to measure (the broker child
process imports ``shoal`` from this file's repository).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from produce_fetch import _pump, create_topic  # noqa: E402

from tests.support.brokers import BrokerProcess  # noqa: E402

# (name, record bytes, records per batch, acks, connections, requests in flight per connection)
ROWS = [
    ("1KiB acks=1 x1", 1024, 1, 1, 1, 8),
    ("1KiB acks=1 x4", 1024, 1, 1, 4, 8),
    ("16KiB acks=1 x1", 1024, 16, 1, 1, 8),
    ("1KiB acks=-1 x4", 1024, 1, -1, 4, 8),
]


def frames(topic: str, record_size: int, count: int, acks: int, n: int) -> list[bytes]:
    from shoal.protocol.api import api_by_name
    from shoal.protocol.frames import encode_request
    from shoal.protocol.records import build_batch

    P = api_by_name("Produce").request_class()
    batch = build_batch([(None, os.urandom(record_size), [], int(time.time() * 1000)) for _ in range(count)])
    body = P(
        acks=acks,
        timeout_ms=30000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])],
    )
    frame = b"".join(encode_request(0, 9, 1, "small", body))
    return [frame] * n


def run_row(bootstrap: str, tag: str, row: tuple, seconds: float) -> float:
    _, size, count, acks, conns, in_flight = row
    topics = [f"small-{tag}-{c}" for c in range(conns)]
    for t in topics:
        create_topic(bootstrap, t)
    # a short probe for the rate, then a run of about `seconds`
    probe = _pump(bootstrap, frames(topics[0], size, count, acks, 200), in_flight)
    n = max(200, int(200 / probe * seconds / conns))
    results: list[float] = [0.0] * conns

    def one(c: int) -> None:
        results[c] = _pump(bootstrap, frames(topics[c], size, count, acks, n), in_flight)

    threads = [threading.Thread(target=one, args=(c,)) for c in range(conns)]
    started = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return n * conns / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per row")
    ap.add_argument("--rounds", type=int, default=1, help="rounds over all rows (one broker)")
    args = ap.parse_args()
    figures: dict[str, list[float]] = {r[0]: [] for r in ROWS}
    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp) / "data", ["num.partitions=1"]).start()
        try:
            for r in range(args.rounds):
                for i, row in enumerate(ROWS):
                    figures[row[0]].append(run_row(b.bootstrap, f"{r}-{i}", row, args.seconds))
        finally:
            b.stop()
    print(f"{'row':18} {'requests/s (median of rounds)':>30}  all")
    for name, vals in figures.items():
        print(f"{name:18} {statistics.median(vals):30.0f}  {' '.join(f'{v:.0f}' for v in vals)}")


if __name__ == "__main__":
    main()
