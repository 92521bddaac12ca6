"""Clocks, injected everywhere time matters.

Cores (share partitions, groups, the timing wheel) take plain millisecond
integers; the broker owns one Clock and passes readings in. Tests swap in
`ManualClock` to drive timeouts without sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the broker's parts read: SystemClock in production, ManualClock in tests."""

    def now_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...


class SystemClock:
    """Wall-clock ms for timestamps, monotonic ms for timeouts."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to (tests)."""

    __slots__ = ("_mono", "_wall")

    def __init__(self, wall_ms: int = 1_700_000_000_000, mono_ms: int = 0) -> None:
        self._wall = wall_ms
        self._mono = mono_ms

    def now_ms(self) -> int:
        return self._wall

    def monotonic_ms(self) -> int:
        return self._mono

    def advance(self, ms: int) -> None:
        self._wall += ms
        self._mono += ms
