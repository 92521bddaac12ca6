"""The asyncio shell around the timing wheel.

All the bookkeeping lives in the sans-IO ``broker.timing.wheel.Timer``; this
class only decides when to call ``advance_to``. It keeps at most one
``loop.call_at`` handle, armed for the earliest bucket of the wheel, and moves
it only when a new task becomes due earlier than the armed time. A million
pending deadlines therefore cost the event loop one timer handle, not a
million (which is what one ``call_later`` per deadline would cost, and those
handles stay in the loop's heap until their time even when cancelled).

Time comes from an injected clock returning milliseconds, so tests can run on
fake time (set the clock, call ``advance_to``) and the broker on the
monotonic clock. Sleep lengths are computed from the injected clock and
converted to the loop's own time base, so the two clocks need not agree on
their origin.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from shoal.broker.timing.wheel import WHEEL_SIZE, Timer, TimerTask

__all__ = ["AsyncTimer", "monotonic_ms"]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class AsyncTimer(Timer):
    """A ``Timer`` that wakes itself up on an asyncio loop.

    Due tasks run from the loop's callback, in deadline order; a task that
    raises is reported to the loop's exception handler and the others still
    run. After ``close()`` nothing runs and ``add`` raises.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        clock: Callable[[], int] = monotonic_ms,
        wheel_size: int = WHEEL_SIZE,
    ) -> None:
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._clock = clock
        super().__init__(clock(), wheel_size)
        self._handle: asyncio.TimerHandle | None = None
        self._armed_ms: int | None = None  # clock time the handle is for
        self._closed = False

    @property
    def now_ms(self) -> int:
        """The injected clock (the wheel's own time may lag behind it)."""
        return self._clock()

    @property
    def closed(self) -> bool:
        return self._closed

    def add(self, task: TimerTask) -> None:
        if self._closed:
            raise RuntimeError("timer is closed")
        if self._handle is None and not self._due.count and not len(self.wheel):
            # Idle: bring the wheel's clock up to date first (it returns nothing,
            # as nothing is pending), so the new task is filed relative to the
            # present instead of waking the loop to cascade from a stale time.
            self.wheel.advance(self._clock())
        super().add(task)
        self._arm()

    def advance_to(self, now_ms: int | None = None) -> int:
        """Run what is due at ``now_ms`` (default: the clock); return how many ran."""
        if self._closed:
            return 0
        if now_ms is None:
            now_ms = self._clock()
        try:
            return super().advance_to(now_ms)
        finally:
            if not self._closed:
                if self._armed_ms is not None and self._armed_ms <= now_ms:
                    self._disarm()  # that wake-up has been done by hand
                self._arm()

    def close(self) -> None:
        """Stop waking up; pending tasks never run."""
        self._closed = True
        self._disarm()

    def _arm(self) -> None:
        target = self.next_deadline_ms()
        if target is None:
            self._disarm()
            return
        if self._handle is not None:
            if self._armed_ms is not None and self._armed_ms <= target:
                return  # already waking up early enough
            self._handle.cancel()
        delay_ms = max(0, target - self._clock())
        loop = self._loop
        self._handle = loop.call_at(loop.time() + delay_ms / 1000, self._on_timer)
        self._armed_ms = target

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._armed_ms = None

    def _on_timer(self) -> None:
        self._handle = None
        self._armed_ms = None
        self.advance_to(self._clock())

    def _task_failed(self, task: TimerTask, exc: Exception) -> None:
        self._loop.call_exception_handler({"message": f"timer task {task!r} failed", "exception": exc, "timer": self})
