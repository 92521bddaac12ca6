"""The group-commit flusher never leaves a waiter hanging."""

from __future__ import annotations

import asyncio
import os

import pytest

from shoal.broker.log.flusher import Flusher


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

    def mark_flushed(self, offset: int) -> None:
        self.flushed = offset


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
