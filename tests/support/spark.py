"""Fixtures and helpers of the Spark source tests (imported by tests/e2e/test_spark_*.py, tests/unit/test_spark_plan.py only).

One SparkSession for the whole test session (local[2]; a cold session costs
~10 s, its first job a few more), one broker tuned so share groups settle
fast (short heartbeats, lock durations down to 1 s allowed), records
produced with confluent-kafka (a client we did not write), and a
``Collector`` to use as a foreachBatch sink that remembers every row.

The SparkSession lives in this module, not in a fixture's frame, so that
several test modules importing the fixture share one JVM; it is stopped when
the interpreter exits.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from tests.support.brokers import ROOT, BrokerProcess

SPARK_BROKER_OVERRIDES = (
    "group.share.min.record.lock.duration.ms=1000",
    "group.share.min.heartbeat.interval.ms=200",
    "group.share.heartbeat.interval.ms=300",
    "group.share.assignment.interval.ms=0",
    "group.share.min.session.timeout.ms=6000",
    "group.share.session.timeout.ms=10000",
    "num.partitions=3",
)

_session: Any = None
_session_lock = threading.Lock()
_atexit: list[bool] = []


LOCAL = "local[2]"
# Real executor JVMs with their own Python workers: 2 workers of 1 core and 1 GiB each.
LOCAL_CLUSTER = "local-cluster[2,1,1024]"


def get_spark(master: str = LOCAL) -> Any:
    """The test session's SparkSession on ``master``; one of another master is stopped first
    (a process has one SparkContext), so modules on the same master share one."""
    global _session
    with _session_lock:
        if _session is not None and _session.sparkContext.master != master:
            _session.stop()
            _session = None
        if _session is None:
            os.environ["PYSPARK_PYTHON"] = sys.executable
            os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
            os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
            from pyspark.sql import SparkSession

            from shoal.client.spark.source import register

            spark = (
                SparkSession.builder.master(master)
                .appName("shoal-tests")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            _session = spark
            if not _atexit:
                _atexit.append(True)
                atexit.register(lambda: _session is not None and _session.stop())
        return _session


@pytest.fixture
def spark() -> Any:
    # py4j's callback server waits in select(), which fails on a descriptor >= 1024: a test
    # process holding that many (brokers run in it) would hang a streaming query, not fail it
    open_fds = len(os.listdir("/proc/self/fd"))
    assert open_fds < 900, f"this test process holds {open_fds} descriptors: py4j's select() breaks past 1,024"
    return get_spark()


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("spark") / "data", SPARK_BROKER_OVERRIDES)
    b.start()
    yield b
    b.stop()


# -- producing and admin -------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(30)


def produce(
    bootstrap: str, topic: str, records: Iterable[tuple[int, bytes, bytes]], *, headers: Any = None, ts: Any = None
) -> None:
    """``(partition, key, value)`` records, acknowledged by the broker before returning."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    errors: list[Any] = []
    for i, (partition, key, value) in enumerate(records):
        kw: dict[str, Any] = {}
        if headers is not None:
            kw["headers"] = headers(i)
        if ts is not None:
            kw["timestamp"] = ts(i)
        while True:
            try:
                p.produce(
                    topic,
                    key=key,
                    value=value,
                    partition=partition,
                    on_delivery=lambda err, _m: err and errors.append(err),
                    **kw,
                )
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def numbered(n: int, partitions: int = 3, start: int = 0, size: int = 16) -> list[tuple[int, bytes, bytes]]:
    """Records i = start..start+n-1 on partition i % partitions; the value says which one it is."""
    return [(i % partitions, f"k{i}".encode(), f"v{i}".encode().ljust(size, b".")) for i in range(start, start + n)]


def run_async(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(coro_fn())


def set_group_config(bootstrap: str, group: str, **settings: str) -> None:
    """Share-group settings (``share_record_lock_duration_ms="2000"``) before the group starts."""
    from shoal.client.admin.client import AsyncAdmin
    from shoal.client.admin.types import AlterConfigOp, ConfigResource

    ops = [AlterConfigOp(k.replace("_", "."), str(v)) for k, v in settings.items()]

    async def go() -> None:
        async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
            res = await admin.incremental_alter_configs({ConfigResource.group(group): ops})
            for error in res.values():
                if error is not None:
                    raise error

    run_async(go)


def share_lag(bootstrap: str, group: str) -> int | None:
    """Records of the group's partitions not yet acknowledged (None until the group has state)."""
    from shoal.client.admin.client import AsyncAdmin

    async def go() -> int | None:
        async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
            offsets = await admin.list_share_group_offsets(group)
        if not offsets:
            return None
        total = 0
        for info in offsets.values():
            if isinstance(info, Exception) or info.lag is None:
                return None
            total += info.lag
        return total

    return run_async(go)


def wait_for(cond: Callable[[], Any], timeout: float, what: str, query: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        if query is not None and query.exception() is not None:
            raise AssertionError(f"the query failed while waiting for {what}: {query.exception()}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# -- a foreachBatch sink ---------------------------------------------------------------------------


@dataclass
class Row:
    partition: int
    offset: int
    value: bytes
    delivery_count: int
    batch: int
    run: int


@dataclass
class Collector:
    """A foreachBatch sink keeping every row; ``hook(batch_id, rows)`` runs after the rows are kept."""

    rows: list[Row] = field(default_factory=list)
    batches: list[tuple[int, int, int]] = field(default_factory=list)  # (run, batch id, rows)
    run: int = 0
    hook: Callable[[int, list[Row]], None] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, df: Any, batch_id: int) -> None:
        got = [
            Row(r.partition, r.offset, r.value, r.deliveryCount, batch_id, self.run)
            for r in df.select("partition", "offset", "value", "deliveryCount").collect()
        ]
        with self.lock:
            self.rows += got
            self.batches.append((self.run, batch_id, len(got)))
        if self.hook is not None:
            self.hook(batch_id, got)

    def keys(self) -> list[tuple[int, int]]:
        with self.lock:
            return [(r.partition, r.offset) for r in self.rows]

    def distinct(self) -> int:
        return len(set(self.keys()))


def stream(spark: Any, bootstrap: str, topic: str, group: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("shoal")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.group.id", group)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()
