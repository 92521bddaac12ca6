"""The metric-name table, the request-time histogram and the JSON log formatter (socket-free)."""

from __future__ import annotations

import json
import logging
import re

import pytest

from shoal.broker.logformat import JsonFormatter
from shoal.broker.metrics import names
from shoal.broker.metrics.counters import REQUEST_BUCKETS_MS, BrokerStats, RequestTimes

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
