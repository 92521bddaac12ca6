"""The group-commit flusher never leaves a waiter hanging."""

from __future__ import annotations

import asyncio
import os

import pytest

from shoal.broker.log.fileops import FileOps
from shoal.broker.log.flusher import Flusher, Relay


class FakeLog:
    def __init__(self, path, fail_target: bool = False) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT)
        self.end = 0
        self.flushed = 0
        self.fail_target = fail_target
        self.failed = None

    def io_failed(self, error):
        self.failed = error
        return error

    def flush_target(self):
        if self.fail_target:
            raise RuntimeError("log closed")
        return [self.fd], self.end

    def mark_flushed(self, offset: int, *, fds: list[int] | None = None) -> None:
        self.flushed = max(self.flushed, offset)

    @property
    def recovery_point(self) -> int:
        return self.flushed

    @property
    def log_end_offset(self) -> int:
        return self.end

    def when_written(self, end_offset, callback) -> None:
        callback(None)


async def test_waiters_resolve_in_rounds(tmp_path) -> None:
    f = Flusher()
    log = FakeLog(tmp_path / "a")
    log.end = 10
    first = f.flush(log, 10)
    log.end = 20
    second = f.flush(log, 20)
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert log.flushed == 20


async def test_a_failing_log_fails_its_waiters_only(tmp_path) -> None:
    f = Flusher()
    good, bad = FakeLog(tmp_path / "g"), FakeLog(tmp_path / "b", fail_target=True)
    good.end = 5
    ok = f.flush(good, 5)
    broken = f.flush(bad, 1)
    await asyncio.wait_for(ok, 5)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(broken, 5)
    # and the flusher keeps working afterwards
    good.end = 9
    await asyncio.wait_for(f.flush(good, 9), 5)


class CountingLog(FakeLog):
    """A FakeLog that counts the flush targets taken (one per round it is in)."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self.targets = 0
        self.written_callbacks: list = []

    def flush_target(self):
        self.targets += 1
        return super().flush_target()

    def when_written(self, end_offset, callback) -> None:
        self.written_callbacks.append((end_offset, callback))


async def _until(cond, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition never met"
        await asyncio.sleep(0.002)


async def test_the_next_round_starts_while_one_is_syncing(tmp_path) -> None:
    files = FileOps()
    release = files.stall("fsync")
    f = Flusher(files)
    log = CountingLog(tmp_path / "a")
    log.end = 10
    first = f.flush(log, 10)
    await _until(lambda: log.targets == 1)
    log.end = 20
    second = f.flush(log, 20)
    # The second round takes its target (its fsync is queued in the kernel) while the first is held.
    await _until(lambda: log.targets == 2)
    assert not first.done() and not second.done()
    release()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert log.flushed == 20


async def test_one_round_at_a_time_when_asked(tmp_path) -> None:
    files = FileOps()
    release = files.stall("fsync")
    f = Flusher(files, max_rounds=1)
    log = CountingLog(tmp_path / "a")
    log.end = 10
    first = f.flush(log, 10)
    await _until(lambda: log.targets == 1)
    log.end = 20
    second = f.flush(log, 20)
    await asyncio.sleep(0.1)
    assert log.targets == 1
    release()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert log.targets == 2 and log.flushed == 20


async def test_a_waiter_covered_by_the_running_round_joins_it(tmp_path) -> None:
    files = FileOps()
    release = files.stall("fsync")
    f = Flusher(files)
    log = CountingLog(tmp_path / "a")
    log.end = 10
    first = f.flush(log, 10)
    await _until(lambda: log.targets == 1)
    late = f.flush(log, 7)  # its bytes were written before the round took its target
    await asyncio.sleep(0.05)
    assert log.targets == 1, "a covered waiter started a round of its own"
    release()
    await asyncio.wait_for(asyncio.gather(first, late), 5)
    assert log.targets == 1


async def test_durable_bytes_are_answered_at_once_and_unwritten_ones_wait(tmp_path) -> None:
    f = Flusher()
    log = CountingLog(tmp_path / "a")
    log.end = 10
    await asyncio.wait_for(f.flush(log, 10), 5)
    assert f.flush(log, 8).done()  # below the recovery point: no round
    ahead = f.flush(log, 15)  # past what is written: waits for the write, then for a round
    await asyncio.sleep(0.05)
    assert not ahead.done() and log.targets == 1
    ((end, callback),) = log.written_callbacks
    assert end == 15
    log.end = 15
    callback(None)
    await asyncio.wait_for(ahead, 5)
    assert log.targets == 2 and log.flushed == 15
    failing = f.flush(log, 30)
    log.written_callbacks[-1][1](OSError(5, "EIO"))
    with pytest.raises(OSError):
        await asyncio.wait_for(failing, 5)


async def test_close_waits_for_running_rounds(tmp_path) -> None:
    files = FileOps()
    release = files.stall("fsync")
    f = Flusher(files)
    log = CountingLog(tmp_path / "a")
    log.end = 10
    pending = f.flush(log, 10)
    await _until(lambda: log.targets == 1)
    closing = asyncio.ensure_future(f.close())
    await asyncio.sleep(0.05)
    assert not closing.done()
    with pytest.raises(RuntimeError):
        await f.flush(log, 10)
    release()
    await asyncio.wait_for(closing, 5)
    assert pending.done() and pending.exception() is None


async def test_a_relay_is_told_in_the_rounds_own_turn(tmp_path) -> None:
    """flush(into=Relay(cb)): cb gets None when durable, in the same loop turn as the round's
    futures are resolved (a future's callback would come one turn later), and the error when
    the log fails; a relay for bytes already durable is told at once."""
    f = Flusher()
    log = FakeLog(tmp_path / "a")
    log.end = 10
    told: list = []
    fut = f.flush(log, 10)
    relay = Relay(told.append)
    assert f.flush(log, 10, into=relay) is relay
    seen_with_future: list = []
    fut.add_done_callback(lambda _f: seen_with_future.append(list(told)))
    await asyncio.wait_for(fut, 5)
    await asyncio.sleep(0)
    assert told == [None] and seen_with_future == [[None]], "the relay was told before the future's callbacks ran"
    assert relay.done()
    now: list = []
    f.flush(log, 10, into=Relay(now.append))
    assert now == [None]  # durable already: told in the call
    bad = FakeLog(tmp_path / "b", fail_target=True)
    failed: list = []
    f.flush(bad, 1, into=Relay(failed.append))
    await _until(lambda: bool(failed))
    assert isinstance(failed[0], RuntimeError)
    await f.close()


async def test_a_round_that_cannot_start_its_thread_fails_its_waiters(tmp_path) -> None:
    """After close() the fsync threads are gone: a round started then fails, it never hangs."""
    f = Flusher()
    log = FakeLog(tmp_path / "a")
    log.end = 1
    await asyncio.wait_for(f.flush(log, 1), 5)
    await f.close()
    f._closed = False  # a round begun after the pool was shut down (a race at stop)
    log.end = 2
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(f.flush(log, 2), 5)
