"""The sans-IO side of share-group dead letters (KIP-1191): which topic may serve (Kafka's
order of checks), the records written (Kafka's six headers, one record per offset, the
original key and value only when copied) and the cause of each archived offset."""

from __future__ import annotations

from shoal.broker.share.dead_letter import (
    CLIENT_REJECT,
    DELIVERY_COUNT_EXCEEDED,
    HEADERS,
    Archived,
    classify,
    dead_letter_batches,
    refusal,
    rejected_ranges,
)
from shoal.protocol.constants import ACCEPT, REJECT, RELEASE
from shoal.protocol.records import build_batch, iter_batches


def ok(name: str, **kw) -> str | None:
    args = {"exists": True, "opted_in": True, "auto_create": False, "prefix": "dlq."} | kw
    return refusal(name, **args)


def test_which_topic_may_serve() -> None:
    assert ok("dlq.orders") is None
    assert ok("") == "no dead-letter topic is configured"
    assert "must not start with __" in ok("__consumer_offsets", opted_in=False, prefix="")
    assert "errors.deadletterqueue.group.enable" in ok("dlq.orders", opted_in=False)
    assert "does not exist" in ok("dlq.orders", exists=False, opted_in=False)
    assert ok("dlq.orders", exists=False, opted_in=False, auto_create=True) is None
    assert "prefix" in ok("orders")
    assert ok("orders", prefix="") is None
    # Kafka's order: the opt-in is checked before the prefix
    assert "group.enable" in ok("orders", opted_in=False)


def records(batches) -> list:
    out = []
    for data in batches:
        for h, _ in iter_batches(data):
            out += [(r.key, r.value, r.headers, r.timestamp) for r in h.records()]
    return out


def test_one_record_per_offset_with_kafkas_headers() -> None:
    got = records(dead_letter_batches("g", "t", 3, Archived(10, 11, 2, CLIENT_REJECT), 1234))
    assert got == [
        (
            None,
            None,
            list(zip(HEADERS, [b"t", b"3", str(o).encode(), b"g", b"2", CLIENT_REJECT.encode()], strict=True)),
            1234,
        )
        for o in (10, 11)
    ]


def test_the_record_is_copied_from_the_log_when_given() -> None:
    log = build_batch([(b"k%d" % i, b"v%d" % i, [("h", b"x")], 5) for i in range(4)], base_offset=20)
    got = records(dead_letter_batches("g", "t", 0, Archived(21, 22, 5, DELIVERY_COUNT_EXCEEDED), 99, log))
    assert [(k, v, ts) for k, v, _h, ts in got] == [(b"k1", b"v1", 99), (b"k2", b"v2", 99)]
    assert [h[0] for _k, _v, hs, _t in got for h in hs] == list(HEADERS) * 2  # the original headers stay behind


def test_large_ranges_are_split_into_batches() -> None:
    batches = list(dead_letter_batches("g", "t", 0, Archived(0, 1199, 1, CLIENT_REJECT), 1))
    assert len(batches) == 3 and len(records(batches)) == 1200


def test_batches_stay_under_the_topics_max_message_bytes() -> None:
    log = build_batch([(None, bytes(1000), [], 5) for _ in range(40)])
    batches = list(dead_letter_batches("g", "t", 0, Archived(0, 39, 1, CLIENT_REJECT), 1, log, max_bytes=8000))
    assert all(len(b) <= 8000 for b in batches) and len(records(batches)) == 40
    assert [r[1] for r in records(batches)] == [bytes(1000)] * 40
    # one record larger than the limit still goes (the append decides)
    (one,) = dead_letter_batches("g", "t", 0, Archived(0, 0, 1, CLIENT_REJECT), 1, log, max_bytes=100)
    assert len(one) > 100


def test_rejected_runs_of_acknowledgement_batches() -> None:
    assert rejected_ranges([(0, 4, [REJECT]), (5, 9, [ACCEPT])]) == [(0, 4)]
    assert rejected_ranges([(0, 5, [REJECT, REJECT, ACCEPT, REJECT, RELEASE, REJECT])]) == [(0, 1), (3, 3), (5, 5)]


def test_the_cause_of_each_offset() -> None:
    # 0-9 ARCHIVING at count 5 (the limit): 2-3 were REJECTed on their last delivery
    got = classify([(0, 9, 5)], [(2, 3)], 5)
    assert [(a.first_offset, a.last_offset, a.message) for a in got] == [
        (0, 1, DELIVERY_COUNT_EXCEEDED),
        (2, 3, CLIENT_REJECT),
        (4, 9, DELIVERY_COUNT_EXCEEDED),
    ]
    # without a note (a re-drive after a restart) the delivery count decides
    assert [a.message for a in classify([(0, 0, 1), (1, 1, 5)], [], 5)] == [CLIENT_REJECT, DELIVERY_COUNT_EXCEEDED]
