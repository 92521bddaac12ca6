"""Storage faults, handled as Kafka handles a failed log directory.

A write or fsync error (ENOSPC, EIO, EROFS) takes the log directory offline:
its partitions answer Produce, Fetch and ListOffsets with KAFKA_STORAGE_ERROR
at once, requests already waiting on them are answered with it, Metadata
shows them without a leader, their coordinators step back, nothing that was
not made durable is acknowledged, and a shutdown still finishes (exit 0). A
restart recovers the logs, with every acknowledged record kept.

Faults come through the log's own file layer (``broker.log.fileops.FileOps``,
the broker's ``file_ops``): the error is raised where the kernel's would be,
so these tests need no root. When running as root, a real full filesystem (a
16 MiB tmpfs) is used as well; those tests skip, saying why, without root or
when the mount fails.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from shoal.broker.broker import CLEAN_SHUTDOWN, Broker
from shoal.broker.config.settings import BrokerConfig
from shoal.broker.log import LogConfig, LogFailed, PartitionLog
from shoal.broker.log.fileops import FileOps
from shoal.broker.log.log_dir import LogDir
from shoal.broker.share_coordinator.service import coordinator_key
from shoal.client.core.conn import BrokerConnection
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch, iter_batches
from tests.support.brokers import BrokerProcess, RawClient, fetch_request
from tests.support.clients import QUIET
from tests.support.wire import create

STORAGE = ErrorCode.KAFKA_STORAGE_ERROR  # 56
PR = api_by_name("Produce").request_class()
LO = api_by_name("ListOffsets").request_class()
OC = api_by_name("OffsetCommit").request_class()
T0 = 1_700_000_000_000


# -- helpers -------------------------------------------------------------------------
def batch(n: int = 1, value_size: int = 100, tag: bytes = b"v") -> bytearray:
    now = int(time.time() * 1000)
    return bytearray(build_batch([(None, tag + b"%06d" % i + b"x" * value_size, (), now) for i in range(n)]))


async def start_broker(data: Path) -> Broker:
    config = BrokerConfig.from_sources(
        {}, [f"log.dirs={data}", "listeners=PLAINTEXT://127.0.0.1:0", "shoal.http.listeners="]
    )
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


fetch_body = fetch_request


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


async def list_offset(conn: BrokerConnection, topic: str, partition: int):
    body = LO(
        replica_id=-1,
        isolation_level=0,
        topics=[
            LO.ListOffsetsTopic(
                name=topic, partitions=[LO.ListOffsetsPartition(partition_index=partition, timestamp=-1)]
            )
        ],
    )
    resp = await conn.request("ListOffsets", body, version=7)
    return resp.topics[0].partitions[0]


async def metadata(conn: BrokerConnection, topic: str):
    MR = api_by_name("Metadata").request_class()
    body = MR(topics=[MR.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    resp = await conn.request("Metadata", body, version=12)
    return resp.topics[0]


def open_log(path: Path, files: FileOps, log_dir: LogDir, clean: bool = True) -> PartitionLog:
    log = PartitionLog.open(path, LogConfig(retention_ms=-1), lambda: T0, clean)
    log.files, log.log_dir = files, log_dir
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
def test_a_storage_error_takes_the_log_and_its_directory_offline(tmp_path) -> None:
    files, log_dir = FileOps(), LogDir(str(tmp_path))
    a, b = open_log(tmp_path / "a-0", files, log_dir), open_log(tmp_path / "b-0", files, log_dir)
    a.append(batch(3))
    b.append(batch(1))
    size = a.size_bytes
    files.fail_next("write", errno.ENOSPC)
    with pytest.raises(LogFailed):
        a.append(batch(2))
    assert log_dir.offline and log_dir.error.errno == errno.ENOSPC
    assert a.log_end_offset == 3 and os.path.getsize(a.active_segment.path()) == size  # nothing half-written
    with pytest.raises(LogFailed):  # the whole directory: the other partition too, though its disk write would work
        b.append(batch(1))
    for log in (a, b):
        with pytest.raises(LogFailed):  # closed, but not known to be durable
            log.close()
        assert log.closed
    again = open_log(tmp_path / "a-0", FileOps(), LogDir(str(tmp_path)), clean=False)
    assert again.log_end_offset == 3
    again.close()


def test_a_failed_fsync_takes_the_log_offline(tmp_path) -> None:
    files, log_dir = FileOps(), LogDir(str(tmp_path))
    log = open_log(tmp_path / "a-0", files, log_dir)
    log.append(batch(2))
    files.fail_next("fsync", errno.EIO)
    with pytest.raises(LogFailed):
        log.flush()
    assert log_dir.error.errno == errno.EIO and log.recovery_point == 0
    with pytest.raises(LogFailed):
        log.append(batch(1))
    with pytest.raises(LogFailed):
        log.close()


def test_close_on_a_full_disk_still_closes_and_keeps_the_log(tmp_path) -> None:
    """Index files and the recovery-point checkpoint cannot be written: the close
    still flushes the data and finishes, and the next (clean) open is intact."""
    files, log_dir = FileOps(), LogDir(str(tmp_path))
    log = open_log(tmp_path / "a-0", files, log_dir)
    for i in range(5):
        log.append(batch(10, tag=b"%d" % i))
    want = stored(log)
    files.fail_next("write", errno.ENOSPC, times=None)  # every write from now on
    log.close()
    assert log.closed and not log_dir.offline
    again = open_log(tmp_path / "a-0", FileOps(), LogDir(str(tmp_path)), clean=True)
    assert stored(again) == want and again.log_end_offset == 50
    again.close()


# -- the broker, faults injected ---------------------------------------------------------
@pytest.mark.parametrize("value_size", [1_000, 200_000], ids=["inline-1KiB", "writer-thread-200KiB"])
async def test_a_produce_onto_a_full_disk_answers_storage_error(tmp_path, value_size) -> None:
    """Issue 28 item 2: under 64 KiB the write is inline and its OSError closed the connection."""
    broker = await start_broker(tmp_path / "data")
    try:
        broker.topics.create("t", 2, {})
        conn = await connect(broker)
        ok = await produce(conn, "t", 0, batch(2, value_size))
        assert (ok.error_code, ok.base_offset) == (0, 0)
        broker.file_ops.fail_next("write", errno.ENOSPC, times=None)
        failed = await produce(conn, "t", 0, batch(1, value_size))
        assert (failed.error_code, failed.base_offset) == (STORAGE, -1)
        # The connection is still there, and the whole directory is offline:
        assert (await produce(conn, "t", 1, batch(1, 10))).error_code == STORAGE
        assert (await fetch(conn, "t", 0)).error_code == STORAGE
        assert (await list_offset(conn, "t", 0)).error_code == STORAGE
        md = await metadata(conn, "t")
        assert md.error_code == 0
        for p in md.partitions:  # as Kafka's metadata shows the partitions of a failed log dir
            assert p.error_code == ErrorCode.LEADER_NOT_AVAILABLE and p.leader_id == -1
            assert p.replica_nodes == p.isr_nodes == p.offline_replicas == [broker.node_id]
        assert not conn.closed
        conn.close()
    finally:
        await broker.stop()


async def test_a_failed_fsync_answers_storage_error_and_acknowledges_nothing(tmp_path) -> None:
    broker = await start_broker(tmp_path / "data")
    try:
        broker.topics.create("t", 1, {})
        conn = await connect(broker)
        broker.file_ops.fail_next("fsync", errno.EIO)
        r = await produce(conn, "t", 0, batch(3))
        assert (r.error_code, r.base_offset) == (STORAGE, -1)
        assert not conn.closed
        assert (await produce(conn, "t", 0, batch(1))).error_code == STORAGE
        conn.close()
    finally:
        await broker.stop()
    assert not (tmp_path / "data" / CLEAN_SHUTDOWN).exists()


async def test_waiting_requests_are_answered_when_the_directory_goes_offline(tmp_path) -> None:
    """An acks=-1 produce waiting for its fsync and a long-polling fetch are answered
    KAFKA_STORAGE_ERROR as soon as another partition's write fails."""
    broker = await start_broker(tmp_path / "data")
    release = broker.file_ops.stall("fsync")  # the disk stops answering fsyncs
    try:
        broker.topics.create("t", 3, {})
        conns = [await connect(broker) for _ in range(3)]
        waiting = conns[0].send("Produce", produce_body("t", 0, batch(2)), version=9)
        polling = conns[1].send("Fetch", fetch_body("t", 1, 0, max_wait_ms=30_000), version=12)
        await asyncio.sleep(0.3)
        assert not waiting.done() and not polling.done()
        broker.file_ops.fail_next("write", errno.ENOSPC)
        assert (await produce(conns[2], "t", 2, batch(1), acks=1)).error_code == STORAGE
        started = time.monotonic()
        produced, fetched = await asyncio.wait_for(asyncio.gather(waiting, polling), 10)
        assert time.monotonic() - started < 5  # not the 30 s long poll, nor the hung fsync
        assert produced.responses[0].partition_responses[0].error_code == STORAGE
        assert fetched.responses[0].partitions[0].error_code == STORAGE
        for c in conns:
            c.close()
    finally:
        release()
        await broker.stop()


async def test_coordinators_of_an_offline_directory_step_back(tmp_path) -> None:
    """FindCoordinator answers COORDINATOR_NOT_AVAILABLE (no leader for the internal
    partition) and group requests NOT_COORDINATOR, as Kafka's coordinators do."""
    broker = await start_broker(tmp_path / "data")
    try:
        await asyncio.wait_for(broker.groups.runtime.loaded.wait(), 30)
        topic = broker.topics.create("t", 1, {})
        conn = await connect(broker)
        FC = api_by_name("FindCoordinator").request_class()
        share_key = coordinator_key("sg", topic.topic_id, 0)

        async def find(key: str, key_type: int) -> int:
            r = await conn.request("FindCoordinator", FC(key_type=key_type, coordinator_keys=[key]), version=6)
            return r.coordinators[0].error_code

        async def commit() -> int:
            body = OC(
                group_id="g",
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    OC.OffsetCommitRequestTopic(
                        name="t", partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)]
                    )
                ],
            )
            r = await conn.request("OffsetCommit", body, version=8)
            return r.topics[0].partitions[0].error_code

        assert await find("g", 0) == 0 and await commit() == 0
        if broker.share_coordinator is not None:
            assert await find(share_key, 2) == 0
        broker.file_ops.fail_next("write", errno.ENOSPC)
        assert (await produce(conn, "t", 0, batch(1))).error_code == STORAGE
        assert await find("g", 0) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await commit() == ErrorCode.NOT_COORDINATOR
        if broker.share_coordinator is not None:
            assert await find(share_key, 2) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        conn.close()
    finally:
        await broker.stop()


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
    broker = await start_broker(tmp_path / "data")  # recovered as after a crash, nothing lost
    try:
        assert not broker.clean_start
        conn = await connect(broker)
        for p in range(3):
            assert [o for o, _ in await fetch_values(conn, "t", p)] == [0, 1]
        conn.close()
    finally:
        await broker.stop()


async def test_shutdown_after_a_storage_error_finishes_and_restart_keeps_every_ack(tmp_path) -> None:
    data = tmp_path / "data"
    broker = await start_broker(data)
    acked: list[bytes] = []
    try:
        broker.topics.create("t", 1, {})
        conn = await connect(broker)
        for i in range(5):
            b = batch(3, tag=b"a%d-" % i)
            assert (await produce(conn, "t", 0, b)).error_code == 0
            acked += [bytes(r.value) for h, _ in iter_batches(bytes(b)) for r in h.records()]
        broker.file_ops.fail_next("write", errno.ENOSPC, times=None)  # the disk stays full
        assert (await produce(conn, "t", 0, batch(3, tag=b"lost"))).error_code == STORAGE
        conn.close()
    finally:
        await broker.stop()  # finishes: no exception on the way
    assert broker.stopped.is_set()
    assert not (data / CLEAN_SHUTDOWN).exists()  # an offline directory gets no marker, as in Kafka
    broker = await start_broker(data)  # space is back
    try:
        assert not broker.clean_start
        conn = await connect(broker)
        got = await fetch_values(conn, "t")
        assert [o for o, _ in got] == list(range(15)) and [v for _, v in got] == acked
        assert (await produce(conn, "t", 0, batch(1))).base_offset == 15
        conn.close()
    finally:
        await broker.stop()
    assert (data / CLEAN_SHUTDOWN).exists()


def produce_until_storage_error(bootstrap: str, topic: str, arm: object = None) -> tuple[dict, dict, list]:
    """librdkafka, retries=0: produce 1 KiB records until one is refused.

    ``arm()`` (if given) is called after the first 200 are acknowledged. Returns
    (acknowledged value -> offset, failed value -> error code, latencies of the
    KAFKA_STORAGE_ERROR reports in seconds from produce() to the report).
    """
    acked: dict[bytes, int] = {}
    failed: dict[bytes, int] = {}
    storage_latency: list[float] = []
    sent: dict[bytes, float] = {}

    def on_delivery(err, msg) -> None:
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            failed[msg.value()] = err.code()
            if err.code() == KafkaError.KAFKA_STORAGE_ERROR:
                storage_latency.append(time.monotonic() - sent[msg.value()])

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "retries": 0,
            "linger.ms": 5,
            "batch.size": 16384,  # batches under 64 KiB: written inline (issue 28 item 2)
            "message.timeout.ms": 3000,
            **QUIET,
        }
    )
    i = 0
    deadline = time.monotonic() + 60
    while not storage_latency and time.monotonic() < deadline:
        value = b"r%07d" % i + b"x" * 1016
        sent[value] = time.monotonic()
        p.produce(topic, value=value, partition=0, on_delivery=on_delivery)
        i += 1
        p.poll(0.002 if i % 20 == 0 else 0)
        if i == 200:
            assert p.flush(30) == 0 and len(acked) == 200
            if arm is not None:
                arm()  # type: ignore[operator]
    assert p.flush(30) == 0  # everything reported: delivered, refused, or timed out waiting for a leader
    assert not set(acked) & set(failed)  # one report per record
    return acked, failed, storage_latency


async def test_librdkafka_gets_storage_error_within_1s_and_no_false_acknowledgement(tmp_path) -> None:
    data = tmp_path / "data"
    broker = await start_broker(data)
    try:
        broker.topics.create("t", 1, {})
        bootstrap = f"127.0.0.1:{broker.server.bound[0][1]}"
        arm = lambda: broker.file_ops.fail_next("write", errno.ENOSPC, times=None)  # noqa: E731
        acked, failed, latency = await asyncio.to_thread(produce_until_storage_error, bootstrap, "t", arm)
    finally:
        await broker.stop()
    assert latency and max(latency) < 1.0, latency
    assert KafkaError.KAFKA_STORAGE_ERROR in failed.values()
    broker = await start_broker(data)
    try:
        conn = await connect(broker)
        got = await fetch_values(conn, "t")
        conn.close()
    finally:
        await broker.stop()
    assert [o for o, _ in got] == list(range(len(got)))  # contiguous
    stored_at = {v: o for o, v in got}
    assert all(stored_at.get(v) == o for v, o in acked.items())  # every acknowledgement, where it was acknowledged
    assert not set(failed) & set(stored_at)  # refused records were not written


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


def test_a_real_full_disk(tmpfs) -> None:
    """The issue's report, on a real full filesystem: librdkafka (retries=0) gets
    KAFKA_STORAGE_ERROR within 1 s, a produce under 64 KiB gets it too over a live
    connection, SIGTERM exits 0 with its shutdown finished, and a restart with the
    space back has every acknowledged record, contiguous."""
    b = BrokerProcess(tmpfs)  # log.dirs is the tmpfs; the broker's own log file is outside it
    b.start()
    try:
        with RawClient(b.port) as c:
            assert create(c, "t", 1).error_code == 0
        filler = tmpfs / "filler"
        acked, failed, latency = produce_until_storage_error(b.bootstrap, "t", lambda: fill(tmpfs))
        assert latency and max(latency) < 1.0, latency
        with RawClient(b.port) as c:
            small = build_batch([(None, b"s" * 32_000, (), int(time.time() * 1000))])  # under 64 KiB
            r = c.call("Produce", 9, body=produce_body("t", 0, small)).responses[0].partition_responses[0]
            assert r.error_code == STORAGE
            assert c.call("Metadata", 12, topics=None).brokers  # the same connection still answers
        assert b.stop() == 0  # SIGTERM
        text = b.log_text()
        assert "shutdown complete" in text and "Traceback" not in text
        assert "No space left on device" in text and "injected" not in text
        filler.unlink()  # space comes back
        b.start()
        with RawClient(b.port) as c:
            got = []
            while True:
                p = (
                    c.call("Fetch", 12, body=fetch_body("t", 0, got[-1][0] + 1 if got else 0))
                    .responses[0]
                    .partitions[0]
                )
                assert p.error_code == 0
                more = [
                    (r.offset, bytes(r.value)) for h, _ in iter_batches(bytes(p.records or b"")) for r in h.records()
                ]
                if not more:
                    break
                got += more
        assert [o for o, _ in got] == list(range(len(got)))
        stored_at = {v: o for o, v in got}
        assert all(stored_at.get(v) == o for v, o in acked.items())
        assert not set(failed) & set(stored_at)
        assert len(acked) >= 200
    finally:
        b.stop()


def test_sigterm_on_a_full_but_healthy_disk_writes_its_marker(tmpfs) -> None:
    """Nothing failed yet, but the disk is full when SIGTERM comes: index files,
    checkpoints and the producer snapshot cannot be written. The shutdown still
    finishes (it crashed in _write_recovery_point with ENOSPC, exit 1) and its
    marker is still written, so the next start is a clean one."""
    b = BrokerProcess(tmpfs)
    b.start()
    try:
        with RawClient(b.port) as c:
            assert create(c, "t", 1).error_code == 0
            for i in range(3):
                r = c.call("Produce", 9, body=produce_body("t", 0, batch(10, tag=b"%d" % i)))
                assert r.responses[0].partition_responses[0].error_code == 0
        filler = fill(tmpfs)
        assert b.stop() == 0
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
