"""Storage faults, handled as Kafka handles a failed log directory.

A shutdown still finishes (exit 0) whatever fails on the way, closes every
partition, and writes its clean-shutdown marker only when every log closed
durably; a restart then recovers the logs, with every acknowledged record
kept.

Faults come through the log's own file layer (``broker.log.fileops.FileOps``,
the broker's ``file_ops``): the error is raised where the kernel's would be,
so these tests need no root. When running as root, a real full filesystem (a
16 MiB tmpfs) is used as well; those tests skip, saying why, without root or
when the mount fails.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.broker import CLEAN_SHUTDOWN, Broker
from broker.config import BrokerConfig
from broker.log import LogConfig, PartitionLog
from broker.log.fileops import FileOps
from client.conn import BrokerConnection
from protocol.api import api_by_name
from protocol.records import build_batch, iter_batches
from tests.brokers import BrokerProcess, RawClient
from tests.test_broker_protocol import create

PR = api_by_name("Produce").request_class()
FR = api_by_name("Fetch").request_class()
T0 = 1_700_000_000_000


# -- helpers -------------------------------------------------------------------------
def batch(n: int = 1, value_size: int = 100, tag: bytes = b"v") -> bytearray:
    now = int(time.time() * 1000)
    return bytearray(build_batch([(None, tag + b"%06d" % i + b"x" * value_size, (), now) for i in range(n)]))


async def start_broker(data: Path) -> Broker:
    config = BrokerConfig.from_sources({}, [f"log.dirs={data}", "listeners=PLAINTEXT://127.0.0.1:0"])
    broker = Broker(config)
    await broker.start()
    return broker


async def connect(broker: Broker) -> BrokerConnection:
    return await BrokerConnection.connect("127.0.0.1", broker.server.bound[0][1])


def produce_body(topic: str, partition: int, records: bytes, acks: int = -1) -> PR:
    return PR(
        acks=acks,
        timeout_ms=30000,
        topic_data=[
            PR.TopicProduceData(name=topic, partition_data=[PR.PartitionProduceData(index=partition, records=records)])
        ],
    )


async def produce(conn: BrokerConnection, topic: str, partition: int, records: bytes, acks: int = -1):
    resp = await conn.request("Produce", produce_body(topic, partition, records, acks), version=9)
    return resp.responses[0].partition_responses[0]


def fetch_body(topic: str, partition: int, offset: int = 0, max_wait_ms: int = 0) -> FR:
    return FR(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=64 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FR.FetchTopic(
                topic=topic,
                partitions=[FR.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=64 << 20)],
            )
        ],
    )


async def fetch(conn: BrokerConnection, topic: str, partition: int, offset: int = 0):
    resp = await conn.request("Fetch", fetch_body(topic, partition, offset), version=12)
    return resp.responses[0].partitions[0]


async def fetch_values(conn: BrokerConnection, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """Every (offset, value) of the partition, through Fetch."""
    out: list[tuple[int, bytes]] = []
    while True:
        p = await fetch(conn, topic, partition, out[-1][0] + 1 if out else 0)
        assert p.error_code == 0, p
        got = [(r.offset, bytes(r.value)) for h, _ in iter_batches(bytes(p.records or b"")) for r in h.records()]
        if not got:
            return out
        out += got


def open_log(path: Path, files: FileOps, clean: bool = True) -> PartitionLog:
    log = PartitionLog.open(path, LogConfig(retention_ms=-1), lambda: T0, clean)
    log.files = files
    return log


def stored(log: PartitionLog) -> list[bytes]:
    return [bytes(d) for _, d in log.scan()]


# -- the seam ------------------------------------------------------------------------
def test_file_ops_fail_the_next_calls_and_stall_until_released(tmp_path) -> None:
    files = FileOps()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        files.fail_next("write", errno.ENOSPC, times=2)
        for _ in range(2):
            with pytest.raises(OSError) as e:
                files.write_all(fd, memoryview(b"abc"), 0)
            assert e.value.errno == errno.ENOSPC
        files.write_all(fd, memoryview(b"abc"), 0)  # disarmed after two
        files.fsync(fd)
        assert os.path.getsize(tmp_path / "f") == 3
        release = files.stall("fsync")
        done = threading.Event()
        t = threading.Thread(target=lambda: (files.fsync(fd), done.set()))
        t.start()
        assert not done.wait(0.3)  # hangs, as on a disk that stopped answering
        release()
        assert done.wait(5)
        t.join()
    finally:
        os.close(fd)


# -- the log -------------------------------------------------------------------------
def test_close_on_a_full_disk_still_closes_and_keeps_the_log(tmp_path) -> None:
    """Index files and the recovery-point checkpoint cannot be written: the close
    still flushes the data and finishes, and the next (clean) open is intact."""
    files = FileOps()
    log = open_log(tmp_path / "a-0", files)
    for i in range(5):
        log.append(batch(10, tag=b"%d" % i))
    want = stored(log)
    files.fail_next("write", errno.ENOSPC, times=None)  # every write from now on
    log.close()
    assert log.closed
    again = open_log(tmp_path / "a-0", FileOps(), clean=True)
    assert stored(again) == want and again.log_end_offset == 50
    again.close()


# -- shutdown -------------------------------------------------------------------------
async def test_topics_close_closes_every_partition_even_if_one_fails(tmp_path) -> None:
    broker = await start_broker(tmp_path / "data")
    try:
        broker.topics.create("t", 3, {})
        conn = await connect(broker)
        for p in range(3):
            assert (await produce(conn, "t", p, batch(2))).error_code == 0
        conn.close()
        broker.file_ops.fail_next("fsync", errno.EIO, times=None)  # no partition can flush
        unclean = broker.topics.close()
        partitions = [p for t in broker.topics for p in t.partitions]
        assert all(p.log.closed for p in partitions)
        assert {"t-0", "t-1", "t-2"} <= set(unclean)
        broker.file_ops.clear_faults()
    finally:
        await broker.stop()
    broker = await start_broker(tmp_path / "data")  # nothing lost
    try:
        conn = await connect(broker)
        for p in range(3):
            assert [o for o, _ in await fetch_values(conn, "t", p)] == [0, 1]
        conn.close()
    finally:
        await broker.stop()


# -- a real full filesystem (root) ------------------------------------------------------------
@pytest.fixture
def tmpfs(tmp_path) -> Iterator[Path]:
    """A 16 MiB tmpfs, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected-fault tests cover the same paths")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> Path:
    """Fill the filesystem to the last byte with one file; remove it to give the space back."""
    path = directory / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return path


def test_sigterm_on_a_full_but_healthy_disk_writes_its_marker(tmpfs) -> None:
    """Nothing failed yet, but the disk is full when SIGTERM comes: index files,
    checkpoints and the producer snapshot cannot be written. The shutdown still
    finishes (it crashed in _write_recovery_point with ENOSPC, exit 1) and its
    marker is still written, so the next start is a clean one."""
    b = BrokerProcess(tmpfs)  # log.dirs is the tmpfs; the broker's own log file is outside it
    b.start()
    try:
        with RawClient(b.port) as c:
            assert create(c, "t", 1).error_code == 0
            for i in range(3):
                r = c.call("Produce", 9, body=produce_body("t", 0, batch(10, tag=b"%d" % i)))
                assert r.responses[0].partition_responses[0].error_code == 0
        filler = fill(tmpfs)
        assert b.stop() == 0  # SIGTERM
        text = b.log_text()
        assert "shutdown complete" in text and "Traceback" not in text
        assert (tmpfs / CLEAN_SHUTDOWN).exists()
        filler.unlink()
        b.start()
        assert "did not shut down cleanly" not in b.log_text()
        with RawClient(b.port) as c:
            p = c.call("Fetch", 12, body=fetch_body("t", 0)).responses[0].partitions[0]
            assert p.error_code == 0 and p.high_watermark == 30
    finally:
        b.stop()
