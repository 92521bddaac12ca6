"""Appends written on the log writer thread (PartitionLog.append_async +
broker.log.writer.ThreadedWriter): order, visibility only once written,
flush targets that never claim bytes still in flight, rolls and closes that
wait for the writer, and a failed write that takes the log offline without
leaving a byte the log does not know about."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import signal
import threading

import pytest

from shoal.broker.log import LogConfig, LogFailed, PartitionLog
from shoal.broker.log.inline_writes import InlineWrites
from shoal.broker.log.segment import write_all
from shoal.broker.log.writer import ThreadedWriter
from shoal.broker.timing.clock import SystemClock
from shoal.protocol.records import BatchHeader, build_batch, iter_batches

T0 = 1_700_000_000_000


def batch(n: int, value_size: int, tag: int = 0) -> bytearray:
    return bytearray(build_batch([(b"k", bytes([tag % 251]) * value_size, (), T0) for _ in range(n)]))


def open_log(path, writer=None, clean=True, **cfg) -> PartitionLog:
    log = PartitionLog.open(path, LogConfig(retention_ms=-1, **cfg), lambda: T0, clean)
    log.writer = writer
    return log


class Gate:
    """A write function that holds every write until opened (then writes for real)."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.threads: set[int] = set()

    def __call__(self, fd: int, data: memoryview, start: int) -> None:
        self.threads.add(threading.get_ident())
        if not self.open.wait(10):
            raise TimeoutError("gate never opened")
        write_all(fd, data, start)


def append_all(log: PartitionLog, bufs: list[bytearray]) -> tuple[list, list[asyncio.Future]]:
    loop = asyncio.get_running_loop()
    infos, futs = [], []
    for b in bufs:
        fut = loop.create_future()
        infos.append(log.append_async(b, lambda e, f=fut: f.set_result((e, threading.get_ident()))))
        futs.append(fut)
    return infos, futs


def stored(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    return [(h.base_offset, h.last_offset, bytes(d)) for h, d in log.scan()]


async def test_async_appends_become_visible_in_order_only_once_written(tmp_path) -> None:
    gate = Gate()
    writer = ThreadedWriter(asyncio.get_running_loop(), write=gate)
    log = open_log(tmp_path / "p", writer)
    log.append(batch(2, 10))  # something durable before
    log.flush()
    bufs = [batch(n, size, i) for i, (n, size) in enumerate([(3, 100), (1, 70_000), (5, 9), (2, 300_000)])]
    infos, futs = append_all(log, bufs)
    assert [(i.first_offset, i.last_offset) for i in infos] == [(2, 4), (5, 5), (6, 10), (11, 12)]
    await asyncio.sleep(0.05)
    # Nothing of it is in the log yet: not readable, not counted, not in a flush target.
    assert log.log_end_offset == log.high_watermark == 2 and log.writes_in_flight == 4
    assert log.read(2, 1 << 20).size == 0
    assert log.flush_target()[1] == 2
    gate.open.set()
    results = await asyncio.gather(*futs)
    assert [e for e, _ in results] == [None] * 4
    assert {t for _, t in results} == {threading.get_ident()}  # completions on the loop's thread
    assert gate.threads and threading.get_ident() not in gate.threads  # writes on the writer's
    assert log.log_end_offset == 13 and log.writes_in_flight == 0
    assert [b for _, _, b in stored(log)][1:] == [bytes(b) for b in bufs]  # offsets assigned in place
    assert [(f, last) for f, last, _ in stored(log)] == [(0, 1), (2, 4), (5, 5), (6, 10), (11, 12)]
    assert os.path.getsize(log.active_segment.path()) == log.size_bytes
    log.close()
    writer.close()
    again = open_log(tmp_path / "p", clean=True)
    assert [b for _, _, b in stored(again)][1:] == [bytes(b) for b in bufs]
    again.close()


async def test_sync_append_and_flush_wait_for_writes_in_flight(tmp_path) -> None:
    gate = Gate()
    writer = ThreadedWriter(asyncio.get_running_loop(), write=gate)
    log = open_log(tmp_path / "p", writer)
    _, futs = append_all(log, [batch(1, 100_000, 1), batch(1, 100_000, 2)])
    threading.Timer(0.2, gate.open.set).start()
    info = log.append(batch(1, 10, 3))  # blocks until the two before it are in
    assert info.first_offset == 2 and log.log_end_offset == 3
    assert all(f.done() and f.result()[0] is None for f in futs)
    gate.open.clear()
    append_all(log, [batch(1, 100_000, 4)])
    threading.Timer(0.2, gate.open.set).start()
    log.flush()
    assert log.recovery_point == log.log_end_offset == 4
    log.close()
    writer.close()


async def test_rolls_with_writes_in_flight_keep_segments_and_indexes_right(tmp_path) -> None:
    writer = ThreadedWriter(asyncio.get_running_loop())
    log = open_log(tmp_path / "p", writer, segment_bytes=250_000, index_interval_bytes=50_000)
    bufs = [batch(1 + i % 3, 20_000 + 7_000 * (i % 5), i) for i in range(40)]
    infos, futs = append_all(log, bufs)
    assert all(e is None for e, _ in await asyncio.gather(*futs))
    assert len(log.segments) > 5
    for seg in log.segments:
        assert seg.size <= 250_000
        assert os.path.getsize(seg.path()) == seg.size
    for info, b in zip(infos, bufs):
        got = log.read(info.last_offset, 1, min_one_message=True).data
        assert bytes(got) == bytes(b) and BatchHeader.read(got).base_offset == info.first_offset
    expected = stored(log)
    log.close()
    writer.close()
    for clean in (True, False):  # index files as written, and a full recovery walk
        again = open_log(tmp_path / "p", clean=clean)
        assert stored(again) == expected
        assert not again.recovery.truncated
        again.close()


async def test_when_written_waits_for_the_write_holding_the_offset(tmp_path) -> None:
    gate = Gate()
    writer = ThreadedWriter(asyncio.get_running_loop(), write=gate)
    log = open_log(tmp_path / "p", writer)
    seen: list = []
    log.when_written(0, lambda e: seen.append(("now", e)))
    _, futs = append_all(log, [batch(2, 100_000), batch(2, 100_000)])
    log.when_written(3, lambda e: seen.append(("second", e, log.log_end_offset)))
    assert seen == [("now", None)]
    gate.open.set()
    await asyncio.gather(*futs)
    assert seen == [("now", None), ("second", None, 4)]
    log.close()
    writer.close()


def test_submit_blocks_beyond_max_inflight(tmp_path) -> None:
    loop = asyncio.new_event_loop()
    gate = Gate()
    writer = ThreadedWriter(loop, write=gate, max_inflight=100)
    channel = writer.channel()
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        writer.submit(channel, fd, memoryview(b"a" * 150), 0, lambda e: None)  # over the limit now
        second = threading.Thread(target=writer.submit, args=(channel, fd, memoryview(b"b" * 10), 150, lambda e: None))
        second.start()
        second.join(0.2)
        assert second.is_alive()  # held back until the first write is done
        gate.open.set()
        second.join(5)
        assert not second.is_alive()
        writer.wait(channel)
        assert writer.inflight_bytes == 0
    finally:
        writer.close()
        os.close(fd)
        loop.close()
    assert (tmp_path / "f").read_bytes() == b"a" * 150 + b"b" * 10


@contextlib.contextmanager
def file_size_limit(limit: int):
    """Writes past ``limit`` fail with EFBIG (a full disk, for this process)."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)


async def test_a_failed_write_takes_the_log_offline_and_leaves_no_stray_bytes(tmp_path) -> None:
    gate = Gate()
    writer = ThreadedWriter(asyncio.get_running_loop(), write=gate)
    log = open_log(tmp_path / "p", writer)
    bufs = [batch(1, 300_000, i) for i in range(6)]
    infos, futs = append_all(log, bufs)
    with file_size_limit(1_000_000):  # the 4th write crosses it: a short write, then EFBIG
        gate.open.set()
        results = await asyncio.gather(*futs)
    errors = [e for e, _ in results]
    assert errors[:3] == [None] * 3
    assert all(isinstance(e, OSError) and e.errno == errno.EFBIG for e in errors[3:])
    assert isinstance(log.failed, OSError)
    assert log.log_end_offset == infos[2].last_offset + 1
    assert os.path.getsize(log.active_segment.path()) == log.size_bytes  # the short write was cut back
    assert [b for _, _, b in stored(log)] == [bytes(b) for b in bufs[:3]]
    with pytest.raises(LogFailed):
        log.append(batch(1, 10))
    with pytest.raises(LogFailed):
        log.append_async(batch(1, 10), lambda e: None)
    with pytest.raises(LogFailed):  # closed, but not durable: the next open must recover
        log.close()
    assert log.closed
    writer.close()
    again = open_log(tmp_path / "p", clean=False)
    assert [b for _, _, b in stored(again)] == [bytes(b) for b in bufs[:3]]
    again.close()


def test_batches_are_the_buffers_given(tmp_path) -> None:
    """append_async writes the caller's buffer (offsets set in place), not a copy."""

    async def main() -> None:
        writer = ThreadedWriter(asyncio.get_running_loop())
        log = open_log(tmp_path / "p", writer)
        buf = batch(3, 200_000)
        done = asyncio.get_running_loop().create_future()
        log.append(batch(2, 5))
        log.append_async(buf, done.set_result)
        assert BatchHeader.read(buf).base_offset == 2
        assert await done is None
        (h, _), *_ = list(iter_batches(log.read(2, 1 << 20).data))
        assert h.base_offset == 2 and h.verify_crc()
        log.close()
        writer.close()

    asyncio.run(main())


async def test_a_closed_writer_refuses_the_append_and_leaves_the_log_usable(tmp_path) -> None:
    writer = ThreadedWriter(asyncio.get_running_loop())
    log = open_log(tmp_path / "p", writer)
    writer.close()
    with pytest.raises(RuntimeError):
        log.append_async(batch(1, 100_000), lambda e: None)
    assert log.writes_in_flight == 0 and log.log_end_offset == 0
    assert log.append(batch(1, 10)).first_offset == 0  # nothing left waiting for a write that never comes
    log.close()


async def test_the_writer_reports_each_write_time_to_the_inline_guard(tmp_path) -> None:
    """A write the page cache holds up, on the thread too, keeps small appends off the loop."""
    gate = Gate()
    guard = InlineWrites(SystemClock().monotonic_ms, slow_s=0.2, pause_s=60.0)  # far above a preempted quick write
    writer = ThreadedWriter(asyncio.get_running_loop(), write=gate, inline=guard)
    log = open_log(tmp_path / "p", writer)
    gate.open.set()
    _, futs = append_all(log, [batch(1, 10)])
    await asyncio.gather(*futs)
    assert guard.allowed() and guard.pauses == 0  # a quick write
    gate.open.clear()
    _, futs = append_all(log, [batch(1, 10, 1)])
    await asyncio.sleep(0.4)
    gate.open.set()
    assert [e for e, _ in await asyncio.gather(*futs)] == [None]
    assert not guard.allowed() and guard.pauses == 1  # held 0.4 s
    log.close()
    writer.close()
