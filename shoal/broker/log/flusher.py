"""Group commit: fsync shared by every produce waiting for durability.

An acks=-1 produce is answered only once its bytes are on disk. fsync costs
milliseconds, so waiting requests are batched: a round takes every waiter
queued, notes per log the offset its fsyncs will make durable (the target), and
fsyncs in a worker thread. Under load one fsync per partition per round covers
many requests; at low load a request waits for exactly one fsync.

Why rounds overlap (``max_rounds``, 2): with one round at a time, a write that
arrived while a round ran waited for the rest of it, then for the loop to
notice its end, then for its own. Pipelined writers (share-state writes,
``broker.share.write_pipeline``) had each write wait for the previous one's
round. Now the next round starts at once, so its fsync is already queued in
the kernel behind the running one (fsync makes durable whatever was written
before it was called, whichever thread asked first). A waiter whose bytes a
running round's target covers joins that round instead of starting one, and
a waiter for bytes already durable is answered at once. Bytes still on the
log writer thread are waited for (``when_written``) before they are queued.

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from shoal.broker.log.fileops import FileOps
from shoal.broker.log.segment import LogFailed
from shoal.broker.metrics.counters import RequestTimes

__all__ = ["Flushable", "Flusher", "Relay"]

log = logging.getLogger("shoal.flusher")


class Flushable(Protocol):
    def flush_target(self) -> tuple[list[int], int]: ...

    def mark_flushed(self, offset: int, *, fds: list[int] | None = None) -> None: ...

    @property
    def failed(self) -> BaseException | None: ...

    def io_failed(self, error: BaseException) -> BaseException: ...

    @property
    def recovery_point(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def when_written(self, end_offset: int, callback: Callable[[BaseException | None], None]) -> None: ...


MAX_ROUNDS = 2  # fsync rounds running at once: one syncing, the next already asking the kernel


@dataclass(slots=True, eq=False)
class _Round:
    """One round of fsyncs: per log, the offset durable once it ends, and who waits for it."""

    waiters: dict[Any, list[tuple[int, asyncio.Future]]]
    targets: dict[Any, int] = field(default_factory=dict)
    fds: dict[Any, list[int]] = field(default_factory=dict)  # per log, the descriptors fsynced


class Flusher:
    def __init__(self, files: FileOps | None = None, *, max_rounds: int = MAX_ROUNDS) -> None:
        self._files = files if files is not None else FileOps()
        self.max_rounds = max(1, max_rounds)
        self._waiters: dict[Any, list[tuple[int, asyncio.Future]]] = {}  # for the next round
        self._rounds: list[_Round] = []  # running, oldest first
        self._starting = False  # a round starts at the end of this loop turn
        self._idle: asyncio.Future | None = None  # close() waits on it
        self._pool: ThreadPoolExecutor | None = None  # the fsync threads, started on first use
        self._closed = False
        # fsync time of each log flushed (all its descriptors), for kafka.log:LogFlushStats on /metrics
        self.flush_times = RequestTimes()

    def flush(self, log_: Flushable, offset: int, into: Any = None) -> Any:
        """A future resolved once `log_` is durable up to `offset` (exclusive end).

        `offset` may lie past what is written yet (appends still on the writer
        thread): the wait for the fsync then starts when they are written.
        `into`: resolve this instead (anything with ``done``, ``set_result`` and
        ``set_exception``, such as ``Relay``), and return it: a caller that would
        only pass the outcome on saves the loop turn a future's callback costs.
        """
        fut = asyncio.get_running_loop().create_future() if into is None else into
        if self._closed:
            fut.set_exception(RuntimeError("flusher closed"))
            return fut
        if log_.failed is not None:
            fut.set_exception(_offline(log_))
            return fut
        if offset <= log_.recovery_point:  # durable already
            fut.set_result(None)
        elif offset > log_.log_end_offset:
            log_.when_written(offset, lambda error: self._written(log_, offset, fut, error))
        else:
            self._enqueue(log_, offset, fut)
        return fut

    def _written(self, log_: Flushable, offset: int, fut: asyncio.Future, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None or log_.failed is not None:
            fut.set_exception(_offline(log_) if log_.failed is not None else error)
        elif self._closed:
            fut.set_exception(RuntimeError("flusher closed"))
        else:
            self._enqueue(log_, offset, fut)

    def _enqueue(self, log_: Flushable, offset: int, fut: asyncio.Future) -> None:
        # A running round whose target covers these bytes serves this waiter too:
        # its fsync was asked for after they were written.
        for r in self._rounds:
            target = r.targets.get(log_)
            if target is not None and offset <= target:
                r.waiters[log_].append((offset, fut))
                return
        self._waiters.setdefault(log_, []).append((offset, fut))
        self._start_soon()

    def _start_soon(self) -> None:
        # At the end of this loop turn, so that every waiter of the turn shares the round.
        if not self._starting and self._waiters and len(self._rounds) < self.max_rounds:
            self._starting = True
            asyncio.get_running_loop().call_soon(self._begin)

    def fail_offline(self) -> None:
        """Fail now every waiter whose log is offline (its directory just failed), queued or
        in a running round: that round's fsync may hang on the failed disk."""
        for lg, waiters in list(self._waiters.items()):
            if lg.failed is not None:
                del self._waiters[lg]
                _fail(waiters, _offline(lg))
        for r in self._rounds:
            for lg, waiters in r.waiters.items():
                if lg.failed is not None:
                    _fail(waiters, _offline(lg))
        self._check_idle()

    def _begin(self) -> None:
        """Start a round with every waiter queued: take each log's target, fsync in a worker thread."""
        self._starting = False
        if not self._waiters or len(self._rounds) >= self.max_rounds:
            return
        r = _Round(self._waiters)
        self._waiters = {}
        fds: list[list[int]] = []
        for lg, waiters in list(r.waiters.items()):
            try:
                lg_fds, target = lg.flush_target()
            except Exception as e:  # noqa: BLE001 - offline, or a log closed by a topic deletion
                _fail(waiters, e)
                del r.waiters[lg]
                continue
            r.targets[lg] = target
            r.fds[lg] = lg_fds
            fds.append(lg_fds)
        if not r.targets:
            self._check_idle()
            return
        self._rounds.append(r)
        loop = asyncio.get_running_loop()

        def work() -> None:  # on a worker thread: the round ends on the loop's next turn
            try:
                outcome: Any = self._fsync_each(fds)
            except BaseException as e:  # noqa: BLE001 - handed to the loop, never lost
                outcome = e
            try:
                loop.call_soon_threadsafe(self._end, r, outcome)
            except RuntimeError:  # the loop is closed: nobody is left to answer
                pass

        try:
            self._executor().submit(work)
        except RuntimeError as e:  # the executor is shut down (the broker is stopping): fail, never hang
            self._end(r, e)

    def _executor(self) -> ThreadPoolExecutor:
        # Our own threads rather than run_in_executor's future: that one reaches the loop
        # through a second callback, one more loop turn between the fsync and its waiters.
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_rounds, thread_name_prefix="shoal-fsync")
        return self._pool

    def _end(self, r: _Round, outcome: list[tuple[OSError | None, int]] | BaseException) -> None:
        self._rounds.remove(r)
        try:
            if isinstance(outcome, BaseException):
                for waiters in r.waiters.values():
                    _fail(waiters, outcome if isinstance(outcome, Exception) else RuntimeError("flusher stopped"))
                return
            results = outcome
            for (lg, flushed), (error, elapsed_ns) in zip(r.targets.items(), results):
                waiters = r.waiters[lg]
                if error is not None:
                    log.error("fsync of %s failed: %s", getattr(lg, "path", lg), error)
                    _fail(waiters, lg.io_failed(error))
                    continue
                if lg.failed is not None:  # went offline while this round ran: confirm nothing
                    _fail(waiters, _offline(lg))
                    continue
                self.flush_times.observe(elapsed_ns)
                try:
                    lg.mark_flushed(flushed, fds=r.fds[lg])
                except Exception as e:  # noqa: BLE001 - never leave a waiter hanging
                    _fail(waiters, e)
                    continue
                for offset, fut in waiters:
                    if fut.done():
                        continue
                    if offset <= flushed:
                        fut.set_result(None)
                    else:  # cannot happen (a round only takes waiters its target covers); never hang
                        self._waiters.setdefault(lg, []).append((offset, fut))
        finally:
            self._start_soon()
            self._check_idle()

    def _check_idle(self) -> None:
        idle = self._idle
        if idle is not None and not idle.done() and not self._rounds and not self._waiters and not self._starting:
            idle.set_result(None)

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
        """Refuse new waiters; return once the ones queued or in a round are answered."""
        self._closed = True
        if self._rounds or self._waiters or self._starting:
            self._idle = asyncio.get_running_loop().create_future()
            self._check_idle()
            await asyncio.shield(self._idle)
        if self._pool is not None:
            self._pool.shutdown(wait=False)


class Relay:
    """A waiter for ``Flusher.flush(into=...)`` that passes the outcome straight to a callback
    (None, or the exception), in the flusher's own turn of the loop."""

    __slots__ = ("_callback", "_done")

    def __init__(self, callback: Callable[[BaseException | None], None]) -> None:
        self._callback = callback
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, _value: object) -> None:
        self._finish(None)

    def set_exception(self, error: BaseException) -> None:
        self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        if not self._done:
            self._done = True
            self._callback(error)


def _offline(lg: Any) -> LogFailed:
    return LogFailed(f"log {getattr(lg, 'path', lg)} is offline: {lg.failed}")


def _fail(waiters: list[tuple[int, asyncio.Future]], error: BaseException) -> None:
    for _, fut in waiters:
        if not fut.done():
            fut.set_exception(error)
