"""How idle the broker's event loop is: Shoal's reading of Kafka's two idle-percent metrics.

Kafka has network processor threads (``kafka.network:type=SocketServer,
name=NetworkProcessorAvgIdlePercent``) and request handler threads
(``kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent``);
each reports the share of time its threads sat waiting for work, as a fraction
between 0 and 1 despite the names. Shoal does both jobs on one event-loop
thread, so both names carry the same number: the fraction of wall time over
the recent window in which the loop thread was neither running nor waiting to
run. That is the time it slept in the poller (epoll, via uvloop) with nothing
to do, plus (rarely) time blocked in a system call; log writes and fsyncs run
on other threads and do not make the loop busy. A loop that is runnable but
kept off the CPU by other processes counts as busy: it had work and could not
do it, which is what an operator alerting on "idle below 0.3" wants to know.

How it is measured: the kernel keeps, per thread, the nanoseconds spent on a
CPU and the nanoseconds spent runnable in a run queue
(``/proc/thread-self/schedstat``). ``BusyClock`` opens that file once, on the
loop thread, and reads it with one ``pread`` (about 4 µs here); where the
file is missing (not Linux) it falls back to the thread's CPU time, which
leaves out run-queue waits. ``IdleWindow`` (sans-IO) keeps one reading per
``metrics.sample.window.ms`` (taken by a timer of the operations listener)
and at scrape time compares the oldest kept reading with one taken then: as
Kafka's sampled rates, the value covers the last ``metrics.num.samples``
windows, the current partial one included (30 to 60 s by default). Cost: one
read and one timer per window and one read per scrape (about 5 µs each
here, so some 2e-7 of a core at the default window); nothing on the request
path.
"""

from __future__ import annotations

import os
import time
from collections import deque

__all__ = ["BusyClock", "IdleWindow"]

_SCHEDSTAT = "/proc/thread-self/schedstat"


class BusyClock:
    """Nanoseconds the thread that created it has been running or runnable (see the module doc).

    Create and read it on the same thread: the file names the opening thread."""

    __slots__ = ("_fd", "source")

    def __init__(self, path: str = _SCHEDSTAT) -> None:
        self._fd: int | None = None
        self.source = "thread_time"  # what the readings mean, for the doc and the tests
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            _parse(os.pread(fd, 128, 0))
        except (OSError, ValueError):
            os.close(fd)
            return
        self._fd = fd
        self.source = "schedstat"

    def read(self) -> int:
        fd = self._fd
        if fd is None:
            return time.thread_time_ns()
        return _parse(os.pread(fd, 128, 0))

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _parse(raw: bytes) -> int:
    """schedstat's first two fields: ns on a CPU, ns waiting in a run queue."""
    on_cpu, waiting = raw.split()[:2]
    return int(on_cpu) + int(waiting)


class IdleWindow:
    """Readings (wall ns, busy ns) of the last ``samples`` windows; ``idle`` is the idle fraction
    from the oldest of them to a reading taken now."""

    __slots__ = ("readings",)

    def __init__(self, samples: int) -> None:
        self.readings: deque[tuple[int, int]] = deque(maxlen=max(1, samples))

    def record(self, wall_ns: int, busy_ns: int) -> None:
        self.readings.append((wall_ns, busy_ns))

    def idle(self, wall_ns: int, busy_ns: int) -> float | None:
        """1 - busy/wall since the oldest reading, within [0, 1]; None before any wall time passed."""
        if not self.readings:
            return None
        wall0, busy0 = self.readings[0]
        wall = wall_ns - wall0
        if wall <= 0:
            return None
        busy = (busy_ns - busy0) / wall
        return min(1.0, max(0.0, 1.0 - busy))
