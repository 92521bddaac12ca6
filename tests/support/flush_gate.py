"""Holding one log's fsync completions in an in-process broker until a test releases them.

The gate replaces ``broker.flusher.flush`` on that broker only (an instance attribute):
waits for other logs go through unchanged, and a held wait is answered only after its
real fsync finished, so a test never makes the broker claim durability it lacks.
"""

from __future__ import annotations

import asyncio
from typing import Any


class FlushGate:
    """Holds the durability of `log_`'s writes until ``release``."""

    def __init__(self, broker: Any, log_: Any) -> None:
        self.flusher = broker.flusher
        self.real = broker.flusher.flush
        self.log = log_
        self.held: list[tuple[asyncio.Future, asyncio.Future]] = []  # (real fsync, what the broker waits on)
        self.flusher.flush = self._flush

    def _flush(self, log_: Any, offset: int, into: Any = None) -> Any:
        if log_ is not self.log:
            return self.real(log_, offset, into)
        real = self.real(log_, offset)
        gated = asyncio.get_running_loop().create_future()
        self.held.append((real, gated))
        if into is None:
            return gated
        # a caller's own waiter (Flusher.flush(into=...)) is told when the gate opens
        gated.add_done_callback(lambda f: into.set_exception(f.exception()) if f.exception() else into.set_result(None))
        return into

    async def wait_held(self, timeout: float = 5.0) -> None:
        """Until a write asked for its fsync (the append itself runs on the log writer thread first)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.held and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.001)

    async def release(self, error: BaseException | None = None, *, wait: bool = True) -> None:
        """Answer every held wait (with `error`, if given) once its real fsync is done; with
        `wait`, first wait for something to be held."""
        if wait:
            await self.wait_held()
        held, self.held = self.held, []
        for real, gated in held:
            await real  # the bytes really are on disk before we say so
            if error is None:
                gated.set_result(None)
            else:
                gated.set_exception(error)
        await asyncio.sleep(0)

    def close(self) -> None:
        del self.flusher.flush
