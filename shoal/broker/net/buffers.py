"""Kafka's ``queued.max.request.bytes`` for the broker's receive side.

The buffers large frames are received into are pooled by ``protocol.buffers``
(shared with the client); this module bounds how many bytes of such frames
the broker holds at once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RequestMemory"]


class RequestMemory:
    """Kafka's ``queued.max.request.bytes``: the bytes of large frames being received, bounded.

    A connection reserves a frame's announced size before its buffer is
    allocated, and gives it back once the frame is handed on (or the
    connection closes). When a reservation does not fit, the connection stops
    reading and ``wait``s; a ``release`` hands back every waiter, to try again.
    A capacity of -1 bounds nothing (Kafka's default). Sans-IO, single-threaded.
    """

    __slots__ = ("_waiters", "capacity", "used")

    def __init__(self, capacity: int = -1) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: dict[Any, None] = {}  # insertion-ordered set

    def try_reserve(self, n: int, *, force: bool = False) -> bool:
        """Take ``n`` bytes if they fit (``force``: bytes that have arrived already)."""
        if force or self.capacity < 0 or self.used + n <= self.capacity:
            self.used += n
            return True
        return False

    def release(self, n: int) -> list[Any]:
        """Give ``n`` bytes back; returns the waiters, oldest first, to try again."""
        self.used -= n
        if not self._waiters:
            return []
        waiters = list(self._waiters)
        self._waiters.clear()
        return waiters

    def wait(self, who: Any) -> None:
        self._waiters[who] = None

    def forget(self, who: Any) -> None:
        self._waiters.pop(who, None)

    @property
    def waiting(self) -> int:
        return len(self._waiters)
