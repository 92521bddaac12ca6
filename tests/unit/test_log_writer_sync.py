"""The syncing log writer (``ThreadedWriter(sync=...)``, the coordinators' logs): a job is
reported only after its file was fsynced, one fsync covers everything queued meanwhile, a
failed fsync fails what it covered, and the log counts such a write durable at once unless
something else (a new segment file, a rolled segment) still needs the flusher."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from shoal.broker.log.flusher import Flusher
from shoal.broker.log.writer import ThreadedWriter
from tests.unit.test_log_writer import batch, open_log


class SyncLog:
    """A sync function that records, per call, the fd and that file's size at that moment."""

    def __init__(self, fail_fd: int | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.fail_fd = fail_fd
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()

    def __call__(self, fd: int) -> None:
        self.entered.set()
        if not self.hold.wait(10):
            raise TimeoutError("sync never released")
        self.calls.append((fd, os.fstat(fd).st_size))
        if fd == self.fail_fd:
            raise OSError(5, "Input/output error")
        os.fsync(fd)


@pytest.fixture
def two_files(tmp_path):
    fds = [os.open(tmp_path / name, os.O_RDWR | os.O_CREAT) for name in ("a", "b")]
    yield fds
    for fd in fds:
        os.close(fd)


async def submit_and_wait(writer: ThreadedWriter, jobs: list[tuple[int, bytes, int]]) -> list:
    """Submit (fd, data, start) jobs on one channel each per fd; their errors, in order, once all are done."""
    loop = asyncio.get_running_loop()
    channels: dict[int, object] = {}
    futs = []
    for fd, data, start in jobs:
        ch = channels.setdefault(fd, writer.channel())
        fut = loop.create_future()
        writer.submit(ch, fd, memoryview(data), start, lambda e, f=fut: f.set_result(e))
        futs.append(fut)
    return await asyncio.wait_for(asyncio.gather(*futs), 10)


async def test_a_job_is_reported_only_after_its_file_was_synced_with_its_bytes(two_files) -> None:
    sync = SyncLog()
    writer = ThreadedWriter(asyncio.get_running_loop(), sync=sync)
    plain = ThreadedWriter(asyncio.get_running_loop())
    assert writer.syncs and not plain.syncs
    plain.close()
    a, b = two_files
    try:
        errors = await submit_and_wait(writer, [(a, b"x" * 10, 0), (b, b"y" * 7, 0), (a, b"z" * 5, 10)])
        assert errors == [None, None, None]
        # Each file's last fsync came after all of its bytes were written (the thread may have
        # taken the first job alone: a syncing writer hands its jobs over at once).
        assert {fd: size for fd, size in sync.calls} == {a: 15, b: 7}
        assert len(sync.calls) <= 3
    finally:
        writer.close()


async def test_a_syncing_writer_takes_a_job_in_the_turn_it_was_submitted(tmp_path) -> None:
    """Not at the end of the loop turn, as the plain writer does: someone waits for each of its
    jobs, and a loaded loop's turn ends milliseconds later."""
    sync = SyncLog()
    writer = ThreadedWriter(asyncio.get_running_loop(), sync=sync)
    fd = os.open(tmp_path / "a", os.O_RDWR | os.O_CREAT)
    fut = asyncio.get_running_loop().create_future()
    try:
        writer.submit(writer.channel(), fd, memoryview(b"now"), 0, lambda e: fut.set_result(e))
        assert sync.entered.wait(5)  # the loop has not turned: the thread already has the job
        assert await asyncio.wait_for(fut, 10) is None
    finally:
        writer.close()
        os.close(fd)


async def test_what_is_queued_while_a_sync_runs_shares_the_next_one(tmp_path) -> None:
    sync = SyncLog()
    sync.hold.clear()
    writer = ThreadedWriter(asyncio.get_running_loop(), sync=sync)
    fd = os.open(tmp_path / "a", os.O_RDWR | os.O_CREAT)
    loop = asyncio.get_running_loop()
    ch = writer.channel()
    futs = []
    try:
        for i in range(6):
            fut = loop.create_future()
            writer.submit(ch, fd, memoryview(b"q" * 4), 4 * i, lambda e, f=fut: f.set_result(e))
            futs.append(fut)
            if i == 0:  # the first job alone; the thread holds in its sync while five more queue
                await asyncio.sleep(0)
                assert await asyncio.to_thread(sync.entered.wait, 5)
            else:
                await asyncio.sleep(0)  # each in a loop turn of its own: five lists queued
        assert not any(f.done() for f in futs)
        sync.hold.set()
        assert await asyncio.wait_for(asyncio.gather(*futs), 10) == [None] * 6
        assert sync.calls == [(fd, 4), (fd, 24)]  # two fsyncs for six writes
    finally:
        sync.hold.set()
        writer.close()
        os.close(fd)


async def test_a_failed_sync_fails_the_jobs_it_covered_and_their_channel_only(two_files) -> None:
    a, b = two_files
    sync = SyncLog(fail_fd=a)
    writer = ThreadedWriter(asyncio.get_running_loop(), sync=sync)
    loop = asyncio.get_running_loop()
    ch_a, ch_b = writer.channel(), writer.channel()

    def submit(ch, fd: int, data: bytes, start: int) -> asyncio.Future:
        fut = loop.create_future()
        writer.submit(ch, fd, memoryview(data), start, lambda e, f=fut: f.set_result(e))
        return fut

    try:
        e_a, e_b = await asyncio.wait_for(
            asyncio.gather(submit(ch_a, a, b"x" * 10, 0), submit(ch_b, b, b"y" * 7, 0)), 10
        )
        assert isinstance(e_a, OSError) and e_b is None
        assert ch_a.error is e_a and ch_b.error is None
        # The failed channel stays failed: its next job is not written; the other one goes on.
        e_a, e_b = await asyncio.wait_for(
            asyncio.gather(submit(ch_a, a, b"w" * 3, 10), submit(ch_b, b, b"v" * 3, 7)), 10
        )
        assert e_a is ch_a.error and e_b is None
        assert os.fstat(a).st_size == 10 and os.fstat(b).st_size == 10
    finally:
        writer.close()


async def test_a_synced_write_is_durable_in_the_log_at_once_unless_a_roll_needs_the_flusher(tmp_path) -> None:
    sync = SyncLog()
    writer = ThreadedWriter(asyncio.get_running_loop(), sync=sync)
    log = open_log(tmp_path / "p", writer, segment_bytes=4096)
    log.checkpoint_on_flush = False  # as a broker's partitions (a new checkpoint file is a new entry)
    flusher = Flusher()
    try:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        info = log.append_async(batch(2, 10), done.set_result)
        assert await asyncio.wait_for(done, 5) is None
        end = info.last_offset + 1
        # The segment file is new (its directory entry not yet synced): the flusher still has work.
        assert log.recovery_point < end
        await asyncio.wait_for(flusher.flush(log, end), 5)
        assert log.recovery_point == end
        syncs = len(sync.calls)
        done = loop.create_future()
        info = log.append_async(batch(3, 10), done.set_result)
        assert await asyncio.wait_for(done, 5) is None
        end = info.last_offset + 1
        assert log.recovery_point == end  # synced by the writer: no round needed
        assert len(sync.calls) == syncs + 1
        waiter = flusher.flush(log, end)
        assert waiter.done() and waiter.exception() is None  # answered at once
        # A roll (a new segment file, the old one's index files) goes through the flusher again.
        for _ in range(4):
            done = loop.create_future()
            info = log.append_async(batch(4, 300), done.set_result)
            assert await asyncio.wait_for(done, 5) is None
        assert len(log.segments) > 1
        end = info.last_offset + 1
        assert log.recovery_point < end  # not claimed before the new file's entry is synced
        await asyncio.wait_for(flusher.flush(log, end), 5)
        assert log.recovery_point == end
        done = loop.create_future()
        info = log.append_async(batch(1, 10), done.set_result)
        assert await asyncio.wait_for(done, 5) is None
        assert log.recovery_point == info.last_offset + 1  # and the writer's syncs count again
    finally:
        await flusher.close()
        log.close()
        writer.close()
