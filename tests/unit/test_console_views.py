"""The web console's views and pages against real share partitions, with plain-int clocks:
counts per state agree with the partition record by record, lock deadlines and pending
writes are reported, strips are bounded, rates come from the broker's counters, and
every value that reaches a page is escaped."""

from __future__ import annotations

import html
import re
from collections import Counter

import pytest

from shoal.broker.console import pages
from shoal.broker.console.views import STATE_ORDER, RateHistory, decode_bytes, share_partition_view
from shoal.broker.metrics.counters import BrokerStats
from shoal.broker.share.in_flight import STATE_NAMES
from shoal.protocol.constants import ACCEPT, ARCHIVING, REJECT, RELEASE

# check() (called by ack) asserts the partition's invariants: let pytest rewrite its asserts, as the
# SharePartition tests do, whichever module imports it first.
pytest.register_assert_rewrite("tests.support.share_partition")

from tests.support.share_partition import LOCK, ack, batches, make  # noqa: E402

WALL = 1_700_000_000_000  # the wall clock when the page is drawn


def brute_counts(sp) -> Counter:
    out: Counter = Counter()
    for o in range(sp.start_offset, sp.end_offset + 1):
        s = sp.state_of(o)
        if s is not None:
            out[STATE_NAMES[s[0]]] += 1
    return out


def view(sp, mono: int, **kw):
    return share_partition_view(sp, high_watermark=sp.end_offset + 1, mono_ms=mono, now_ms=WALL, **kw)


def test_counts_per_state_match_the_partition_record_by_record() -> None:
    sp = make()
    sp.acquire("m1", batches(10, 10, 10), 30, now_ms=0)
    types = [ACCEPT if o % 3 == 0 else REJECT if o % 3 == 1 else RELEASE for o in range(10)]
    ack(sp, "m1", (0, 9, types))
    ack(sp, "m1", (20, 24, [ACCEPT] * 5))
    v = view(sp, 400)
    want = brute_counts(sp)
    assert v["counts"] == {s: want.get(s, 0) for s in STATE_ORDER}
    # offsets 0 (accepted) and 1 (rejected) are done: the start offset moved past them
    assert v["counts"] == {"AVAILABLE": 3, "ACQUIRED": 15, "ACKNOWLEDGED": 8, "ARCHIVING": 0, "ARCHIVED": 2}
    assert (v["spso"], v["speo"], v["in_flight"], v["holes"]) == (2, 29, 28, 0)
    assert v["delivery_complete"] == sp.delivery_complete_count() == 10
    assert v["lag"] == 30 - 2 - 10
    # every offset of the window is in exactly one run, in order, with the partition's own state
    covered = [o for r in v["runs"] for o in range(r["first"], r["last"] + 1)]
    assert covered == list(range(2, 30))
    for r in v["runs"]:
        for o in range(r["first"], r["last"] + 1):
            state, count, member = sp.state_of(o)
            assert (STATE_NAMES[state], count, member) == (r["state"], r["deliveries"], r["member"])


def test_lock_deadlines_follow_the_fake_clock_and_expiry_moves_the_counts() -> None:
    sp = make()
    sp.acquire("m1", batches(5), 5, now_ms=100)  # lock until 100 + LOCK
    (run,) = view(sp, 400)["runs"]
    assert run["state"] == "ACQUIRED" and run["member"] == "m1"
    assert run["lock_left_ms"] == 100 + LOCK - 400
    assert run["lock_deadline_ms"] == WALL + 100 + LOCK - 400
    assert "lock until" in pages.run_title(run) and "owner m1" in pages.run_title(run)
    sp.expire_locks(100 + LOCK).commit()
    v = view(sp, 100 + LOCK + 1)
    assert v["counts"]["ACQUIRED"] == 0 and v["counts"]["AVAILABLE"] == 5
    assert all("lock_left_ms" not in r for r in v["runs"])


def test_pending_writes_are_counted_until_committed() -> None:
    sp = make()
    sp.acquire("m1", batches(8), 8, now_ms=0)
    change = ack(sp, "m1", (0, 2, [ACCEPT] * 3), commit=False)
    v = view(sp, 10)
    assert v["pending"] == 3
    assert [r for r in v["runs"] if r.get("pending")] == [
        {"first": 0, "last": 2, "state": "ACKNOWLEDGED", "deliveries": 1, "member": None, "pending": True}
    ]
    change.commit()
    v = view(sp, 10)
    assert v["pending"] == 0 and v["spso"] == 3 and v["counts"]["ACKNOWLEDGED"] == 0


def test_strip_is_bounded_but_counts_stay_complete() -> None:
    sp = make()
    sp.acquire("m1", batches(400), 400, now_ms=0)
    ack(sp, "m1", (0, 399, [ACCEPT if o % 2 else RELEASE for o in range(400)]))
    v = view(sp, 0, max_runs=50)
    assert len(v["runs"]) == 50 and v["undrawn_from"] == 50
    assert v["counts"]["AVAILABLE"] == 200 and v["counts"]["ACKNOWLEDGED"] == 200  # offset 0 released: start stays
    svg = pages.strip({**v, "topic": "t"})
    assert svg.count("<rect") == 50 and "Offsets 50 to 399 not drawn" in svg


def test_strip_geometry_spans_the_window() -> None:
    sp = make()
    sp.acquire("m1", batches(10), 10, now_ms=0)
    ack(sp, "m1", (5, 9, [REJECT] * 5))
    svg = pages.strip({**view(sp, 0), "topic": "t"})
    rects = re.findall(r'x="([\d.]+)" width="([\d.]+)".*?data-state="(\w+)"', svg)
    assert [(float(x), float(w), s) for x, w, s in rects] == [(0.0, 500.0, "ACQUIRED"), (500.0, 500.0, "ARCHIVED")]


def test_markup_in_member_ids_topics_and_values_is_escaped() -> None:
    evil = '<img src=x onerror="alert(1)">'
    sp = make()
    sp.acquire(evil, batches(3), 3, now_ms=0)
    part = {**view(sp, 0), "topic": "t<b>"}
    group = {
        "group_id": "g<script>alert(2)</script>",
        "state": "Stable",
        "group_epoch": 1,
        "members": [
            {
                "member_id": evil,
                "client_id": "</td><script>x()</script>",
                "client_host": "h",
                "member_epoch": 1,
                "subscribed": ["t<b>"],
                "assignment": [("t<b>", [0])],
            }
        ],
        "configs": [("errors.deadletterqueue.topic.name", '"><svg onload=alert(3)>', "override")],
        "partitions": [part],
        "totals": part["counts"],
        "lag": 0,
        "dead_letter_topic": "d<i>",
    }
    page = pages.share_group_page(group, poll="/console/api/share-groups/x")
    for raw in (evil, "<script>", "<b>", "<i>", "<svg onload"):
        assert raw not in page
    assert html.escape(evil, quote=True) in page
    assert "/console/share-groups/g%3Cscript%3Ealert%282%29%3C%2Fscript%3E" in page  # links percent-encoded
    assert page.count("<script") == 1  # only the console's own script tag
    record = {
        "offset": 0,
        "timestamp": 0,
        "key": decode_bytes(b"<script>alert(4)</script>", "utf8"),
        "value": decode_bytes(b'{"a": "<b>"}', "json"),
        "headers": [("h<x>", decode_bytes(b"<y>", "utf8"))],
    }
    browse = {
        "topic": "t",
        "partition": 0,
        "partitions": 1,
        "offset": 0,
        "count": 1,
        "format": "json",
        "log_start": 0,
        "high_watermark": 1,
        "records": [record],
        "notes": ["offset <9> is outside"],
    }
    topic = {"name": "t", "topic_id": "x", "internal": False, "configs": [], "partitions": []}
    page = pages.topic_page(topic, browse)
    assert "&lt;script&gt;alert(4)&lt;/script&gt;" in page and "<script>alert" not in page
    assert "&lt;b&gt;" in page and "h&lt;x&gt;" in page and "&lt;9&gt;" in page
    assert "<x>" not in page and "<y>" not in page
    assert "&#x27;" in pages.not_found_page("No topic named '<t>'.") and "<t>" not in pages.not_found_page("<t>")


def test_decode_bytes_formats_and_fallbacks() -> None:
    assert decode_bytes(None, "utf8") == {"text": None, "format": "null", "cut": False}
    assert decode_bytes("héllo".encode(), "utf8") == {"text": "héllo", "format": "utf8", "cut": False}
    assert decode_bytes(b'{"b":1,"a":[2]}', "json")["text"] == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}'
    assert decode_bytes(b"not json", "json") == {"text": "not json", "format": "utf8", "cut": False}
    assert decode_bytes(b"\xff\x00", "utf8") == {"text": "ff 00", "format": "hex", "cut": False}
    assert decode_bytes(b"ab", "hex")["text"] == "61 62"
    big = decode_bytes(b"x" * 10_000, "utf8")
    assert big["cut"] and len(big["text"]) == 4096
    split = decode_bytes(b"x" * 4095 + "é".encode() * 2, "utf8")  # the cut falls inside a character
    assert split == {"text": "x" * 4095, "format": "utf8", "cut": True}


def test_rates_come_from_the_broker_counters_at_most_once_a_second() -> None:
    stats = BrokerStats()
    h = RateHistory(capacity=3)
    for t, n in ((0, 0), (500, 50), (1000, 100), (2000, 400), (3000, 400), (4000, 1400)):
        stats.topic("t").messages_in = n
        stats.share_counts("g", "t").acquired = n // 2
        h.sample(t, stats)
    assert [t for t, _ in h.readings] == [2000, 3000, 4000]  # 500 was too soon; capacity 3
    assert h.series("in", "t") == [0.0, 1000.0]
    assert h.series("acquired", "g") == [0.0, 500.0]
    assert h.series("in", "unknown") == [0.0, 0.0]
    spark = pages.sparkline(h.series("in", "t"), "records <in>")
    assert "<polyline" in spark and "1,000.0/s" in spark and "records &lt;in&gt;" in spark


def test_archiving_records_are_counted_on_their_own_and_not_done() -> None:
    """KIP-1191: records waiting for their dead-letter copy show as ARCHIVING, not in the lag's done count."""
    sp = make()
    sp.archive_to = ARCHIVING
    sp.acquire("m1", batches(4), 4, now_ms=0)
    ack(sp, "m1", (0, 3, [REJECT, ACCEPT, REJECT, ACCEPT]))
    v = view(sp, 400)
    assert v["counts"] == {"AVAILABLE": 0, "ACQUIRED": 0, "ACKNOWLEDGED": 2, "ARCHIVING": 2, "ARCHIVED": 0}
    assert (v["spso"], v["delivery_complete"]) == (0, 2)
    assert [r["state"] for r in v["runs"]] == ["ARCHIVING", "ACKNOWLEDGED", "ARCHIVING", "ACKNOWLEDGED"]
