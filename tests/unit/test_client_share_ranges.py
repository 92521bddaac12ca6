"""RangeTracker: what an acquire-only share consumer holds and owes, by offset range (no sockets)."""

from __future__ import annotations

import pytest

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import IllegalStateError
from shoal.client.share.ranges import AcquiredRange, RangeTracker, subtract_offsets
from shoal.protocol.constants import ACCEPT, RELEASE, RENEW

TP = TopicPartition("t", 0)


def rng(first: int, last: int, count: int = 1, deadline: float | None = 100.0) -> AcquiredRange:
    return AcquiredRange("t", 0, first, last, count, deadline)


def test_take_cuts_the_last_range_to_fit_and_drops_expired_ones() -> None:
    t = RangeTracker()
    t.add_ranges(TP, [rng(0, 9, deadline=5.0), rng(10, 29), rng(30, 39)])
    got = t.take_records(15, now=10.0)  # [0, 9] expired
    assert [(r.first, r.last) for r in got] == [(10, 24)]
    assert t.buffered(TP) == 5 + 10
    assert t.unacknowledged() == 15
    with pytest.raises(IllegalStateError, match="explicit"):
        t.begin_poll()


def test_pieces_acknowledged_once_each_become_one_request() -> None:
    t = RangeTracker()
    t.add_ranges(TP, [rng(0, 9)])
    (whole,) = t.take_records(100)
    head, rest = whole.split(4)
    t.acknowledge(head, ACCEPT)
    with pytest.raises(IllegalStateError, match="already acknowledged"):
        t.acknowledge(head, ACCEPT)
    with pytest.raises(IllegalStateError, match="cannot be acknowledged"):
        t.acknowledge(rng(8, 12), ACCEPT)  # 10..12 were never delivered
    with pytest.raises(ValueError):
        t.acknowledge(rest, 0)  # GAP is not for applications
    t.acknowledge(rest, RELEASE)
    t.begin_poll()  # nothing left unacknowledged
    pa = t.take(TP)
    assert pa is not None and pa.acks == {**dict.fromkeys(range(4), ACCEPT), **dict.fromkeys(range(4, 10), RELEASE)}
    assert [(b.first_offset, b.last_offset, b.types) for b in pa.batches()] == [(0, 9, (ACCEPT,) * 4 + (RELEASE,) * 6)]
    assert t.holds(TP)
    t.complete(pa, None)
    assert not t.holds(TP)


def test_renewed_ranges_come_back_as_the_same_objects_with_the_new_deadline() -> None:
    t = RangeTracker()
    t.add_ranges(TP, [rng(0, 4), rng(7, 9)])
    held = t.take_records(100)
    for r in held:
        t.acknowledge(r, RENEW)
    assert t.renewing() == 8
    pa = t.take(TP)
    assert pa is not None and pa.has_renew
    t.add_ranges(TP, [rng(20, 29)])  # fetched meanwhile: waits behind the renewed ones
    t.complete(pa, None, lock_deadline=200.0)
    back = t.take_records(100)
    assert [id(r) for r in back] == [id(r) for r in held]
    assert {r.acquisition_lock_deadline for r in back} == {200.0}
    # only the renewed ones came back; the new ones come with the next poll
    assert [(r.first, r.last) for r in t.take_records(100)] == [(20, 29)]


def test_a_failed_renewal_drops_the_ranges() -> None:
    t = RangeTracker()
    t.add_ranges(TP, [rng(0, 4)])
    (r,) = t.take_records(10)
    t.acknowledge(r, RENEW)
    pa = t.take(TP)
    assert pa is not None
    t.complete(pa, RuntimeError("lock lost"))
    assert t.take_records(10) == [] and not t.holds(TP)


def test_claim_keeps_held_copies_live_and_replaces_stale_buffered_ones() -> None:
    t = RangeTracker()
    t.add_ranges(TP, [rng(0, 9, deadline=1.0)])
    (held,) = t.take_records(10)
    t.add_ranges(TP, [rng(10, 19, deadline=1.0)])  # buffered; its lock runs out
    # The broker hands 5..14 to us again (delivery count 2).
    again = t.claim(TP, [(5, 14, 2)], 50.0)
    assert again == frozenset(range(5, 10))  # delivered to the application: not handed out twice
    assert (held.acquisition_lock_deadline, held.delivery_count) == (50.0, 2)
    # The stale buffered copy of 10..14 is cut away; the new acquisition's copy replaces it.
    assert t.buffered(TP) == 5
    new = [AcquiredRange("t", 0, f, last, c, 50.0) for f, last, c in subtract_offsets([(5, 14, 2)], again)]
    t.add_ranges(TP, new)
    t.acknowledge(held, ACCEPT)
    got = t.take_records(100, now=10.0)  # 15..19 expired
    assert [(r.first, r.last, r.delivery_count) for r in got] == [(10, 14, 2)]
    # Wholly above anything held: nothing to check.
    assert t.claim(TP, [(100, 120, 1)], 60.0) == frozenset()


def test_release_buffered_and_drop_buffered() -> None:
    t = RangeTracker()
    t.add_ranges(TP, [rng(0, 2), rng(5, 6)])
    assert t.release_buffered(TP) == 5
    pa = t.take(TP)
    assert pa is not None and pa.acks == dict.fromkeys([0, 1, 2, 5, 6], RELEASE) and pa.offsets() == set()
    t.add_ranges(TP, [rng(10, 19)])
    assert t.drop_buffered([TP]) == 10 and t.buffered(TP) == 0


def test_subtract_offsets_cuts_ranges() -> None:
    assert subtract_offsets([(5, 9, 1), (0, 3, 2)], frozenset({0, 6, 7, 9, 42})) == [(1, 3, 2), (5, 5, 1), (8, 8, 1)]
    assert subtract_offsets([(0, 3, 1)], frozenset()) == [(0, 3, 1)]
    with pytest.raises(ValueError):
        rng(0, 3).split(4)
