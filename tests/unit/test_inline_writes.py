"""When small appends may be written on the event loop (broker.log.inline_writes), with a fake clock."""

from __future__ import annotations

import logging

import pytest

from shoal.broker.log.inline_writes import InlineWrites


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_quick_writes_keep_small_appends_on_the_loop() -> None:
    clock = Clock()
    guard = InlineWrites(clock, slow_s=0.02, pause_s=10.0)
    assert guard.allowed()
    for seconds in (0.0, 0.00005, 0.0199):
        guard.took(seconds)
    assert guard.allowed() and guard.pauses == 0


def test_a_slow_write_pauses_them_for_pause_s_from_that_write() -> None:
    clock = Clock()
    guard = InlineWrites(clock, slow_s=0.02, pause_s=10.0)
    guard.took(0.02)
    assert not guard.allowed() and guard.pauses == 1
    clock.now += 9.999
    assert not guard.allowed()
    clock.now += 0.001
    assert guard.allowed()


def test_another_slow_write_during_a_pause_extends_it() -> None:
    clock = Clock()
    guard = InlineWrites(clock, slow_s=0.02, pause_s=10.0)
    guard.took(0.2)
    clock.now += 6
    guard.took(0.15)
    clock.now += 6  # 12 s after the first, 6 after the second
    assert not guard.allowed() and guard.pauses == 2
    clock.now += 4
    assert guard.allowed()


def test_a_pause_is_logged_with_the_write_time(caplog: pytest.LogCaptureFixture) -> None:
    guard = InlineWrites(Clock(), slow_s=0.02, pause_s=10.0)
    with caplog.at_level(logging.INFO, logger="shoal.log.writer"):
        guard.took(0.123)
    assert "123 ms" in caplog.text and "10 s" in caplog.text
