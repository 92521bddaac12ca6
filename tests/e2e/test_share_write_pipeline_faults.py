"""Pipelined share-state writes against real storage, with the log's fault injection.

An acknowledgement is answered once its state write is durable. With a hung
fsync (``FileOps.stall``) the first write of a share partition stays in flight
while the next is sent behind it: two writes in flight, the third change
queued. Released, they are answered in the order they were made; made to fail
(an fsync EIO: the log directory goes offline), both are undone, and the
share partition's memory holds the records as before the acknowledgements --
never a state that is not on disk. A restart after the successful case shows
what the acknowledgements were told is durable. When the user chose periodic
flushing (log.flush.interval.ms), state writes follow it as acks=-1 produces
and Kafka's coordinators do: answered once appended, a hung fsync or not.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import time
from pathlib import Path

import pytest

from shoal.broker.broker import Broker
from shoal.broker.config.settings import BrokerConfig
from shoal.protocol.constants import ACCEPT, ACKNOWLEDGED, ACQUIRED
from shoal.protocol.records import build_batch

pytest.register_assert_rewrite("tests.support.share_partition")

from tests.support.share_partition import states  # noqa: E402

GROUP = "g"


async def start_broker(data: Path, *overrides: str) -> Broker:
    config = BrokerConfig.from_sources(
        {},
        [
            f"log.dirs={data}",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "shoal.http.listeners=",
            "share.coordinator.state.topic.num.partitions=1",
            *overrides,
        ],
    )
    broker = Broker(config)
    await broker.start()
    await broker.share_coordinator.loaded.wait()
    return broker


async def until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.002)


async def share_partition_with_30_acquired(broker: Broker):
    topic = broker.topics.get("t") or broker.topics.create("t", 1, {})
    partition = topic.partitions[0]
    if partition.log_end_offset == 0:
        now = int(time.time() * 1000)
        for b in range(3):
            partition.append(build_batch([(None, b"v%d" % (10 * b + i), (), now) for i in range(10)]), now)
        await broker.flusher.flush(partition.log, partition.log_end_offset)
        assert await broker.share_coordinator.initialize(GROUP, topic.topic_id, 0, 1, 0) == 0
    mgr = broker.share_partitions
    entry = await mgr.get(GROUP, topic.topic_id, 0)
    got = mgr.acquire(entry, "m", 30, 1 << 20, batch_optimized=True)
    assert got is not None and got.ranges[0][0] == entry.sp.start_offset
    return topic, mgr, entry


def acknowledge(mgr, entry, first: int, last: int) -> asyncio.Task:
    return asyncio.create_task(mgr.acknowledge(entry, "m", [(first, last, [ACCEPT])]))


async def two_writes_in_flight_one_queued(broker: Broker, mgr, entry) -> tuple[list[asyncio.Task], list[int]]:
    """Hang fsync, then acknowledge 0-9, 10-19 and 20-29 one after another."""
    state_log = broker.share_coordinator.runtime.partition(0).log
    release = broker.file_ops.stall("fsync")
    order: list[int] = []
    tasks = []
    try:
        for i in range(3):
            tasks.append(acknowledge(mgr, entry, 10 * i, 10 * i + 9))
            tasks[-1].add_done_callback(lambda _t, i=i: order.append(i))
            if i < 2:
                await until(lambda i=i: entry.pipe.in_flight == i + 1)
        await asyncio.sleep(0.05)
        assert entry.pipe.in_flight == 2 and entry.pipe.queued == 1, "the third write waits for the first"
        # Both handed to the log (on the coordinators' writer, each waits there for its fsync).
        assert state_log.pending_end_offset >= state_log.recovery_point + 2, "both in-flight writes are sent"
        assert not any(t.done() for t in tasks), "nothing is answered before its fsync"
    except BaseException:
        release()
        raise
    return tasks, order, release


async def test_pipelined_writes_are_answered_in_order_once_durable(tmp_path) -> None:
    data = tmp_path / "data"
    broker = await start_broker(data)
    try:
        topic, mgr, entry = await share_partition_with_30_acquired(broker)
        tasks, order, release = await two_writes_in_flight_one_queued(broker, mgr, entry)
        release()
        results = await asyncio.gather(*tasks)
        assert results == [(0, None)] * 3
        assert order == [0, 1, 2]
        await until(lambda: entry.pipe.idle and entry.persisted_start == 30)
        assert entry.sp.start_offset == 30
    finally:
        await broker.stop()
    broker = await start_broker(data)
    try:
        result = await broker.share_coordinator.read(GROUP, topic.topic_id, 0, 0)
        assert result.error == 0 and result.start_offset == 30
    finally:
        await broker.stop()


async def test_a_failed_fsync_undoes_every_pipelined_write_and_memory_stays_behind_the_disk(tmp_path, caplog) -> None:
    broker = await start_broker(tmp_path / "data")
    try:
        _, mgr, entry = await share_partition_with_30_acquired(broker)
        tasks, order, release = await two_writes_in_flight_one_queued(broker, mgr, entry)
        # Memory shows the acknowledgements at once (the members' view), pending their writes.
        assert states(entry.sp, 0, 29) == [(ACKNOWLEDGED, 1, None)] * 30
        broker.file_ops.fail_next("fsync", errno.EIO)
        release()
        results = await asyncio.gather(*tasks)
        assert all(code != 0 for code, _ in results), results
        assert order == [0, 1, 2]
        await until(lambda: entry.pipe.idle)
        assert states(entry.sp, 0, 29) == [(ACQUIRED, 1, "m")] * 30, "every failed acknowledgement was undone"
        assert entry.sp.start_offset == 0 and entry.sp.pending_changes == 0
        assert entry.persisted_start == 0
    finally:
        broker.file_ops.clear_faults()
        await broker.stop()
    # Every failed write's future was read: none is reported "never retrieved" when collected.
    del tasks, results
    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_with_periodic_flushing_state_writes_do_not_wait_for_an_fsync(tmp_path) -> None:
    broker = await start_broker(tmp_path / "data", "log.flush.interval.ms=60000")
    try:
        _, mgr, entry = await share_partition_with_30_acquired(broker)
        state_log = broker.share_coordinator.runtime.partition(0).log
        release = broker.file_ops.stall("fsync")
        try:
            result = await asyncio.wait_for(mgr.acknowledge(entry, "m", [(0, 29, [ACCEPT])]), 5)
            assert result == (0, None)
            await until(lambda: entry.pipe.idle and entry.persisted_start == 30)
            assert state_log.recovery_point < state_log.log_end_offset, "written, not fsynced"
        finally:
            release()
    finally:
        await broker.stop()
