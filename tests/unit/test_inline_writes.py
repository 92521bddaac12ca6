"""When small appends may be written on the event loop (broker.log.inline_writes), with a fake clock."""

from __future__ import annotations

import logging

import pytest

from shoal.broker.log.inline_writes import InlineWrites
from shoal.broker.timing.clock import ManualClock


def test_quick_writes_keep_small_appends_on_the_loop() -> None:
    clock = ManualClock(mono_ms=100_000)
    guard = InlineWrites(clock.monotonic_ms, slow_s=0.02, pause_s=10.0)
    assert guard.allowed()
    for seconds in (0.0, 0.00005, 0.0199):
        guard.took(seconds)
    assert guard.allowed() and guard.pauses == 0


def test_a_slow_write_pauses_them_for_pause_s_from_that_write() -> None:
    clock = ManualClock(mono_ms=100_000)
    guard = InlineWrites(clock.monotonic_ms, slow_s=0.02, pause_s=10.0)
    guard.took(0.02)
    assert not guard.allowed() and guard.pauses == 1
    clock.advance(9_999)
    assert not guard.allowed()
    clock.advance(1)
    assert guard.allowed()


def test_another_slow_write_during_a_pause_extends_it() -> None:
    clock = ManualClock(mono_ms=100_000)
    guard = InlineWrites(clock.monotonic_ms, slow_s=0.02, pause_s=10.0)
    guard.took(0.2)
    clock.advance(6_000)
    guard.took(0.15)
    clock.advance(6_000)  # 12 s after the first, 6 after the second
    assert not guard.allowed() and guard.pauses == 2
    clock.advance(4_000)
    assert guard.allowed()


def test_a_pause_is_logged_with_the_write_time(caplog: pytest.LogCaptureFixture) -> None:
    guard = InlineWrites(ManualClock().monotonic_ms, slow_s=0.02, pause_s=10.0)
    with caplog.at_level(logging.INFO, logger="shoal.log.writer"):
        guard.took(0.123)
    assert "123 ms" in caplog.text and "10 s" in caplog.text
