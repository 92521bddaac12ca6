"""Group commit: fsync shared by every produce waiting for durability.

An acks=-1 produce is answered only once its bytes are on disk. fsync costs
milliseconds, so waiting requests are batched: while one round of fsyncs runs
in a worker thread, new waiters queue up and are all served by the next round.
Under load one fsync per partition per round covers many requests; at low load
a request waits for exactly one fsync.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from typing import Any, Protocol

from broker.log.fileops import FileOps

log = logging.getLogger("shoal.flusher")


class Flushable(Protocol):
    def flush_target(self) -> tuple[list[int], int]: ...

    def mark_flushed(self, offset: int) -> None: ...


class Flusher:
    def __init__(self, files: FileOps | None = None) -> None:
        self._files = files if files is not None else FileOps()
        self._waiters: dict[Any, list[tuple[int, asyncio.Future]]] = {}
        self._running: asyncio.Task | None = None
        self._closed = False

    def flush(self, log_: Flushable, offset: int) -> asyncio.Future:
        """A future resolved once `log_` is durable up to `offset` (exclusive end)."""
        fut = asyncio.get_running_loop().create_future()
        if self._closed:
            fut.set_exception(RuntimeError("flusher closed"))
            return fut
        self._waiters.setdefault(log_, []).append((offset, fut))
        if self._running is None:
            self._running = asyncio.create_task(self._run())
        return fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiters:
                batch, self._waiters = self._waiters, {}
                targets = []
                for lg, waiters in batch.items():
                    try:
                        targets.append((lg, lg.flush_target()))
                    except Exception as e:  # noqa: BLE001 - e.g. a log closed by a topic deletion
                        _fail(waiters, e)
                try:
                    await loop.run_in_executor(None, self._fsync_all, [fd for _, (fds, _) in targets for fd in fds])
                except OSError as e:
                    log.error("fsync failed: %s", e)
                    for lg, _ in targets:
                        _fail(batch[lg], e)
                    continue
                for lg, (_, flushed) in targets:
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
            self._running = None
            # Waiters that arrived while this task was ending get a new round.
            if self._waiters and not self._closed:
                self._running = asyncio.create_task(self._run())

    def _fsync_all(self, fds: list[int]) -> None:
        for fd in fds:
            try:
                self._files.fsync(fd)
            except OSError as e:
                # A segment closed by a roll between target and fsync was already
                # fsynced when it was rolled; anything else is a real failure.
                if e.errno != errno.EBADF:
                    raise

    async def close(self) -> None:
        self._closed = True
        if self._running is not None:
            await asyncio.shield(self._running)


def _fail(waiters: list[tuple[int, asyncio.Future]], error: BaseException) -> None:
    for _, fut in waiters:
        if not fut.done():
            fut.set_exception(error)
