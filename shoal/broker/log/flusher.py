"""Group commit: fsync shared by every produce waiting for durability.

An acks=-1 produce is answered only once its bytes are on disk. fsync costs
milliseconds, so waiting requests are batched: while one round of fsyncs runs
in a worker thread, new waiters queue up and are all served by the next round.
Under load one fsync per partition per round covers many requests; at low load
a request waits for exactly one fsync.

A failed fsync is a storage error: the log it belonged to goes offline (with
its directory, ``broker.log.log_dir``) and its waiters get LogFailed. Nothing
is confirmed for a log that is offline, whether it went offline before the
request arrived, while it waited, or while its round was running:
``fail_offline`` fails the waiters of logs that went offline, at once.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from typing import Any, Protocol

from shoal.broker.log.fileops import FileOps
from shoal.broker.log.segment import LogFailed
from shoal.broker.metrics.counters import RequestTimes

__all__ = ["Flushable", "Flusher"]

log = logging.getLogger("shoal.flusher")


class Flushable(Protocol):
    def flush_target(self) -> tuple[list[int], int]: ...

    def mark_flushed(self, offset: int) -> None: ...

    @property
    def failed(self) -> BaseException | None: ...

    def io_failed(self, error: BaseException) -> BaseException: ...


class Flusher:
    def __init__(self, files: FileOps | None = None) -> None:
        self._files = files if files is not None else FileOps()
        self._waiters: dict[Any, list[tuple[int, asyncio.Future]]] = {}
        self._round: dict[Any, list[tuple[int, asyncio.Future]]] = {}  # the waiters of the running round
        self._running: asyncio.Task | None = None
        self._closed = False
        # fsync time of each log flushed (all its descriptors), for kafka.log:LogFlushStats on /metrics
        self.flush_times = RequestTimes()

    def flush(self, log_: Flushable, offset: int) -> asyncio.Future:
        """A future resolved once `log_` is durable up to `offset` (exclusive end)."""
        fut = asyncio.get_running_loop().create_future()
        if self._closed:
            fut.set_exception(RuntimeError("flusher closed"))
            return fut
        if log_.failed is not None:
            fut.set_exception(_offline(log_))
            return fut
        self._waiters.setdefault(log_, []).append((offset, fut))
        if self._running is None:
            self._running = asyncio.create_task(self._run())
        return fut

    def fail_offline(self) -> None:
        """Fail now every waiter whose log is offline (its directory just failed), queued or
        in the running round: that round's fsync may hang on the failed disk."""
        for lg, waiters in list(self._waiters.items()):
            if lg.failed is not None:
                del self._waiters[lg]
                _fail(waiters, _offline(lg))
        for lg, waiters in self._round.items():
            if lg.failed is not None:
                _fail(waiters, _offline(lg))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiters:
                batch, self._waiters = self._waiters, {}
                self._round = batch
                targets = []
                for lg, waiters in batch.items():
                    try:
                        targets.append((lg, lg.flush_target()))
                    except Exception as e:  # noqa: BLE001 - offline, or a log closed by a topic deletion
                        _fail(waiters, e)
                done = await loop.run_in_executor(None, self._fsync_each, [fds for _, (fds, _) in targets])
                for (lg, (_, flushed)), (error, elapsed_ns) in zip(targets, done):
                    if error is not None:
                        log.error("fsync of %s failed: %s", getattr(lg, "path", lg), error)
                        _fail(batch[lg], lg.io_failed(error))
                        continue
                    if lg.failed is not None:  # went offline while this round ran: confirm nothing
                        _fail(batch[lg], _offline(lg))
                        continue
                    self.flush_times.observe(elapsed_ns)
                    try:
                        lg.mark_flushed(flushed)
                    except Exception as e:  # noqa: BLE001 - never leave a waiter hanging
                        _fail(batch[lg], e)
                        continue
                    for offset, fut in batch[lg]:
                        if fut.done():
                            continue
                        if offset <= flushed:
                            fut.set_result(None)
                        else:  # appended after the target was taken: next round
                            self._waiters.setdefault(lg, []).append((offset, fut))
        finally:
            self._round = {}
            self._running = None
            # Waiters that arrived while this task was ending get a new round.
            if self._waiters and not self._closed:
                self._running = asyncio.create_task(self._run())

    def _fsync_each(self, groups: list[list[int]]) -> list[tuple[OSError | None, int]]:
        """fsync each log's descriptors (worker thread); per log the first error (or None) and the ns
        its fsyncs took."""
        out: list[tuple[OSError | None, int]] = []
        for fds in groups:
            error = None
            started = time.perf_counter_ns()
            for fd in fds:
                try:
                    self._files.fsync(fd)
                except OSError as e:
                    # A segment closed by a roll between target and fsync was already
                    # fsynced when it was rolled; anything else is a real failure.
                    if e.errno != errno.EBADF:
                        error = e
                        break
            out.append((error, time.perf_counter_ns() - started))
        return out

    async def close(self) -> None:
        self._closed = True
        if self._running is not None:
            await asyncio.shield(self._running)


def _offline(lg: Any) -> LogFailed:
    return LogFailed(f"log {getattr(lg, 'path', lg)} is offline: {lg.failed}")


def _fail(waiters: list[tuple[int, asyncio.Future]], error: BaseException) -> None:
    for _, fut in waiters:
        if not fut.done():
            fut.set_exception(error)
