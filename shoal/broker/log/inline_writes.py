"""When a small append may be written on the event loop, and when it goes to the writer thread.

Why: the writer thread (``log.writer``) keeps a ``write()`` that the page cache
holds up off the event loop, but every hop to it costs a thread wake-up there
and back. A producer with one request in flight per connection (aiokafka,
kafka-python) waits for that hop on every request: on this project's 2-core
VM aiokafka's produce ran at 0.6-0.9 of what it reached with small appends
written on the loop (``benchmarks/clients.py``'s row; the ratio wanders with
the machine's load), and a waited-for hand-over (the loop blocking until the
thread had written) did not win it back: the thread's two wake-ups are the
cost, not the loop turns around them.

So small appends are written on the loop while writes are quick, and all of
them go to the thread for ``pause_s`` once any log write, on the loop or on the
thread, took ``slow_s`` or more: that is the page cache throttling dirty pages,
which blocks a ``write()`` for 100-230 ms at a time and lasts for seconds
(benchmarks/stall_watch.py). The loop then stalls at most once per pause
instead of on every small append. A disk that hangs outright hangs the first
write on the loop for good, as it hangs Kafka's request handler threads one by
one; a disk that is merely slow is what this guards against.

A plain object with an injected clock (the broker's ``monotonic_ms``, as every
core here takes): the owner reports how long each write took, and asks before
each small append.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PAUSE_S", "SLOW_WRITE_S", "InlineWrites"]

log = logging.getLogger("shoal.log.writer")

# A write() this slow means the page cache pushes back (a quick one takes tens of microseconds;
# a throttled one 100 ms and more). Well above a GIL hand-over (5 ms at CPython's default).
SLOW_WRITE_S = 0.02
# How long small appends stay on the writer thread after a slow write.
PAUSE_S = 10.0


@dataclass(slots=True)
class InlineWrites:
    """Whether small appends may be written on the event loop right now.

    ``took`` may be called from the writer thread too: it only assigns floats
    and counts (a lost count under a race is harmless; the pause is not lost,
    since each slow write sets it on its own).
    """

    clock: Callable[[], int]  # monotonic milliseconds
    slow_s: float = SLOW_WRITE_S
    pause_s: float = PAUSE_S
    paused_until_ms: int = 0  # clock reading; 0: never paused
    pauses: int = 0  # slow writes seen, for the log and /metrics

    def allowed(self) -> bool:
        """True unless a slow write was seen within the last ``pause_s``."""
        return self.paused_until_ms == 0 or self.clock() >= self.paused_until_ms

    def took(self, seconds: float) -> None:
        """Report one write of log bytes that took ``seconds``."""
        if seconds < self.slow_s:
            return
        self.paused_until_ms = self.clock() + round(self.pause_s * 1000)
        self.pauses += 1
        log.info(
            "a log write took %.0f ms: small appends go to the writer thread for the next %.0f s",
            seconds * 1000,
            self.pause_s,
        )
