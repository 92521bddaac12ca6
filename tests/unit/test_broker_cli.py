"""The standalone broker's process settings (shoal/broker/cli.py)."""

from __future__ import annotations

import gc
import sys

from shoal.broker import cli


def test_the_standalone_broker_shortens_the_gil_switch_interval(capsys) -> None:
    """Worker threads (log writer, fsync) hand their results back to the loop: the standalone
    broker lowers CPython's 5 ms switch interval before anything else, even when its
    configuration is then refused (exit code 2)."""
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        assert cli.main(["--override", "num.partitions=not-a-number"]) == 2
        assert sys.getswitchinterval() == cli.SWITCH_INTERVAL_S < 0.005
    finally:
        sys.setswitchinterval(before)
    assert "invalid configuration" in capsys.readouterr().err


def test_the_standalone_broker_collects_cyclic_garbage_less_often(capsys) -> None:
    """The standalone broker raises the garbage collector's thresholds (its objects die by
    reference count; at the default, full collections stopped a loaded loop 90-120 ms), before
    anything else."""
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert cli.main(["--override", "num.partitions=not-a-number"]) == 2
        assert gc.get_threshold() == cli.GC_THRESHOLDS
        assert cli.GC_THRESHOLDS[0] > 700
    finally:
        gc.set_threshold(*before)
    assert "invalid configuration" in capsys.readouterr().err
