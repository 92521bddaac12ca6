"""The metric-name table, the request-time histogram and the JSON log formatter (socket-free)."""

from __future__ import annotations

import json
import logging
import re
import time

import pytest

from shoal.broker.logformat import JsonFormatter
from shoal.broker.metrics import names
from shoal.broker.metrics.counters import REQUEST_BUCKETS_MS, BrokerStats, RequestTimes
from shoal.broker.metrics.idle import BusyClock, IdleWindow

pytestmark = pytest.mark.unit


def test_every_name_is_unique_valid_and_documented_in_the_table() -> None:
    seen = [row.name for row in names.METRICS.values()]
    assert len(seen) == len(set(seen))
    doc = names.__doc__ or ""
    for row in names.METRICS.values():
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", row.name), row.name
        assert row.kind in ("counter", "gauge", "histogram")
        assert not row.name.endswith("_total"), "counters get _total at exposition"
        shown = row.name + ("_total" if row.kind == "counter" else "")
        assert shown in doc, f"{shown} is missing from the mapping table"


def test_request_times_fall_in_the_right_buckets() -> None:
    t = RequestTimes()
    for ms in (0.05, 0.1, 0.3, 7, 7, 45_000):
        t.observe(int(ms * 1_000_000))
    cumulative = t.cumulative()
    assert len(cumulative) == len(REQUEST_BUCKETS_MS) + 1
    by_bound = dict(zip((*REQUEST_BUCKETS_MS, float("inf")), cumulative))
    assert by_bound[0.1] == 2  # le is inclusive: exactly 0.1 ms counts in the 0.1 bucket
    assert by_bound[0.5] == 3
    assert by_bound[5.0] == 3 and by_bound[10.0] == 5
    assert by_bound[30000.0] == 5 and by_bound[float("inf")] == 6 == t.count
    assert t.sum_ns == int(0.05e6) + int(0.1e6) + int(0.3e6) + 2 * 7_000_000 + 45_000_000_000


def test_forgetting_a_topic_drops_its_counts() -> None:
    s = BrokerStats()
    s.topic("a").messages_in += 3
    s.share_counts("g", "a").acquired += 1
    s.share_counts("g", "b").acquired += 1
    s.forget_topic("a")
    assert "a" not in s.topics and list(s.share) == [("g", "b")]


def test_json_lines_carry_the_fixed_fields_and_the_structured_extras() -> None:
    record = logging.LogRecord("shoal.broker", logging.WARNING, __file__, 1, "hello %s", ("world",), None)
    record.__dict__.update({"topic": "t", "partition": 3, "odd": object()})
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert out["level"] == "WARNING" and out["logger"] == "shoal.broker" and out["message"] == "hello world"
    assert out["topic"] == "t" and out["partition"] == 3 and out["odd"].startswith("<object")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", out["time"])
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    out = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in out["exception"]


def test_the_idle_window_compares_now_with_the_oldest_kept_reading() -> None:
    w = IdleWindow(samples=2)
    assert w.idle(5, 5) is None  # no reading yet
    w.record(0, 0)
    assert w.idle(0, 0) is None  # no wall time passed
    assert w.idle(1_000, 250) == 0.75
    w.record(1_000, 900)
    assert w.idle(2_000, 1_000) == 0.5  # from the reading at 0 (two kept)
    w.record(2_000, 1_000)  # the reading at 0 falls out
    assert w.idle(3_000, 1_000) == 0.95
    assert w.idle(3_000, 5_000) == 0.0  # clamped: busy cannot exceed wall
    assert IdleWindow(samples=0).readings.maxlen == 1


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_the_busy_clock_moves_while_the_thread_runs_and_not_while_it_sleeps() -> None:
    clock = BusyClock()
    try:
        assert clock.source == "schedstat"  # Linux: run-queue waits count as busy too
        a = clock.read()
        _spin(0.3)
        b = clock.read()
        time.sleep(0.3)
        c = clock.read()
    finally:
        clock.close()
    assert b - a >= 0.2e9, "a spinning thread is busy (running or runnable) nearly all the time"
    assert c - b < 0.05e9, "a sleeping thread is not"


def test_the_busy_clock_falls_back_to_thread_cpu_time(tmp_path) -> None:
    clock = BusyClock(str(tmp_path / "missing"))
    assert clock.source == "thread_time"
    a = clock.read()
    _spin(0.05)
    assert clock.read() > a
