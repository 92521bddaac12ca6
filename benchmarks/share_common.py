"""What the share-group benchmarks share: settings, the figures table, admin calls, the producer.

Not a benchmark itself. Split out of benchmarks/share_fetch.py (which runs the
share-group data path benchmark and re-exports these names, as chaos.py,
clients.py, share_consumer.py, share_scaling.py and soak.py import them from
there) to keep each module well under the project's 800-line rule. Holds the
broker overrides and protocol constants, the figures table every measurement
adds a row to (``ROWS``, printed by share_fetch.main), per-process CPU and RSS
readings, blocking admin calls on our codec (CreateTopics, group configs,
DescribeShareGroupOffsets, ListOffsets) and librdkafka's bulk producer.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from shoal.protocol.api import api_by_name  # noqa: E402
from shoal.protocol.constants import (  # noqa: E402
    IsolationLevel,
    ListOffsetsTimestamp,
)
from tests.support.brokers import RawClient  # noqa: E402
from tests.support.wire import group_config  # noqa: E402,F401 (the benchmarks take it from here)

MIB = 1 << 20
RECORD = 1024
QUIET = {"log_level": 3}
MAX_RECORDS = 500
FETCH_WAIT_MS = 500
OVERRIDES = [
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.share.min.heartbeat.interval.ms=100",
    "group.share.heartbeat.interval.ms=200",
    "log.segment.bytes=536870912",
]

SF = api_by_name("ShareFetch")
SA = api_by_name("ShareAcknowledge")
HB = api_by_name("ShareGroupHeartbeat")
FETCH = api_by_name("Fetch")
SF_V = SA_V = HB_V = 1
FETCH_V = 12

ROWS: list[tuple[str, str, str, str]] = []  # (figure, ours, reference, target)


def row(label: str, ours: str, ref: str, target: str = "") -> None:
    ROWS.append((label, ours, ref, target))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_anon(pid: int) -> int:
    """Anonymous resident memory of a process (Linux), bytes: no page cache, no mapped log files."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def quantiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))]


# -- admin (blocking, our codec) -------------------------------------------------------------


def create_topic(port: int, name: str, partitions: int) -> None:
    CT = api_by_name("CreateTopics").request_class()
    with RawClient(port) as c:
        resp = c.call(
            "CreateTopics",
            7,
            topics=[CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
            timeout_ms=10000,
        )
    assert resp.topics[0].error_code == 0, resp.topics[0]


def share_offsets(c: RawClient, group: str) -> list[tuple[int, int, int]]:
    """(partition, persisted start offset, lag) of every partition `group` has state for."""
    DSO = api_by_name("DescribeShareGroupOffsets").request_class()
    req = [DSO.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]
    g = c.call("DescribeShareGroupOffsets", 1, groups=req).groups[0]
    return [(p.partition_index, p.start_offset, p.lag) for t in g.topics for p in t.partitions]


def wait_acknowledged(
    port: int, group: str, hwms: list[int], timeout: float = 30.0, every: float = 0.005
) -> tuple[float, list[int]]:
    """Poll the group's persisted state (DescribeShareGroupOffsets) until every partition has a
    start offset and lag 0: every record below the high watermark is durably acknowledged.
    Returns the perf_counter time it first was (nan after `timeout`) and the persisted start
    offsets then."""
    deadline = time.perf_counter() + timeout
    seen: list[tuple[int, int, int]] = []
    with RawClient(port) as c:
        while time.perf_counter() < deadline:
            seen = sorted(share_offsets(c, group))
            if len(seen) == len(hwms) and all(start >= 0 and lag == 0 for _, start, lag in seen):
                acked = time.perf_counter()
                # Lag 0 can be durable one write before the start offset is: the write that moves
                # the start past acknowledgements made while an earlier one was pending follows
                # them. The starts reported are those once that write landed (or after 5 s).
                settle = acked + 5.0
                while any(start < hwm for (_, start, _), hwm in zip(seen, hwms)) and time.perf_counter() < settle:
                    time.sleep(every)
                    seen = sorted(share_offsets(c, group))
                return acked, [start for _, start, _ in seen]
            time.sleep(every)
    return float("nan"), [start for _, start, _ in seen]


def high_watermarks(port: int, topic: str, partitions: int) -> list[int]:
    LO = api_by_name("ListOffsets").request_class()
    with RawClient(port) as c:
        resp = c.call(
            "ListOffsets",
            7,
            replica_id=-1,
            isolation_level=IsolationLevel.READ_UNCOMMITTED,
            topics=[
                LO.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        LO.ListOffsetsPartition(partition_index=i, timestamp=ListOffsetsTimestamp.LATEST)
                        for i in range(partitions)
                    ],
                )
            ],
        )
    out = sorted((p.partition_index, p.offset) for p in resp.topics[0].partitions)
    return [o for _, o in out]


def produce(
    bootstrap: str, topic: str, partitions: int, n: int, batch_bytes: int, value_bytes: int = RECORD, keys: int = 0
) -> float:
    """n records of `value_bytes` (1 KiB), spread evenly over the partitions; returns seconds.
    `keys` > 0: record i has key ``k<i % keys>`` (else no key)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": batch_bytes,
            "batch.num.messages": 1_000_000,  # small records fill batch.size, not a record count
            "queue.buffering.max.kbytes": 256 * 1024,
            "enable.idempotence": False,
            "compression.type": "none",
            **QUIET,
        }
    )
    value = os.urandom(value_bytes)
    failed: list = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                key = None if not keys else b"k%d" % (i % keys)
                p.produce(topic, key=key, value=value, partition=i % partitions, on_delivery=report)
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(120) == 0
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed: {failed[0]}")
    return time.perf_counter() - start
