"""The share consumer's sans-IO pieces without a socket: the acknowledgement
tracker (shoal/client/share/acks.py), share-session planning and record decoding
(shoal/client/share/session.py). A hypothesis state machine drives the tracker
with random polls, acknowledgements, sends and answers against a plain
model of what each offset should be."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import IllegalStateError
from shoal.client.core.records import ConsumerRecord
from shoal.client.share.acks import AckBatch, AckTracker, PartitionAcks, ack_batches
from shoal.client.share.session import (
    FINAL_EPOCH,
    PREFETCH_BACKOFF_MAX,
    PrefetchGate,
    ShareSession,
    decode_acquired,
    next_epoch,
    share_acknowledge_body,
    share_fetch_body,
)
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ACCEPT, GAP, REJECT, RELEASE, RENEW, AcknowledgeType
from shoal.protocol.records import build_batch, build_control_batch

TP = TopicPartition("t", 0)
TP2 = TopicPartition("t", 1)


def rec(offset: int, tp: TopicPartition = TP, count: int = 1, deadline: float | None = None) -> ConsumerRecord:
    return ConsumerRecord(tp.topic, tp.partition, offset, 0, 0, None, b"v", [], 0, count, deadline)


def tracker(explicit: bool = True, offsets=range(5), tp: TopicPartition = TP) -> AckTracker:
    t = AckTracker(explicit=explicit)
    t.add_acquired(tp, [rec(o, tp) for o in offsets])
    return t


# -- batches -------------------------------------------------------------------------------


def test_batches_are_contiguous_runs_with_one_type_when_uniform() -> None:
    acks = {0: ACCEPT, 1: ACCEPT, 2: ACCEPT, 5: RELEASE, 6: ACCEPT, 9: GAP}
    assert ack_batches(acks) == [
        AckBatch(0, 2, (ACCEPT,)),
        AckBatch(5, 6, (RELEASE, ACCEPT)),
        AckBatch(9, 9, (GAP,)),
    ]
    assert ack_batches({}) == []


@given(st.dictionaries(st.integers(0, 200), st.sampled_from([0, 1, 2, 3, 4]), max_size=60))
def test_batches_round_trip(acks: dict[int, int]) -> None:
    batches = ack_batches(acks)
    back: dict[int, int] = {}
    prev_last = -2
    for b in batches:
        assert b.first_offset > prev_last + 1  # runs are maximal and ordered
        prev_last = b.last_offset
        n = b.last_offset - b.first_offset + 1
        assert len(b.types) in (1, n)  # the two forms KIP-932 allows
        if len(b.types) == 1 and n > 1:
            pass
        elif n > 1:
            assert len(set(b.types)) > 1  # per-offset types only when they differ
        for i, o in enumerate(range(b.first_offset, b.last_offset + 1)):
            back[o] = b.types[0] if len(b.types) == 1 else b.types[i]
    assert back == acks


# -- tracker -----------------------------------------------------------------------------------


def test_implicit_poll_accepts_what_was_left() -> None:
    t = tracker(explicit=False)
    got = t.take_records(10)
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    t.acknowledge(got[1], AcknowledgeType.RELEASE)
    t.begin_poll()
    pa = t.take(TP)
    assert pa is not None and pa.acks == {0: ACCEPT, 1: RELEASE, 2: ACCEPT, 3: ACCEPT, 4: ACCEPT}
    assert t.take(TP) is None


def test_explicit_poll_refuses_unacknowledged_records() -> None:
    t = tracker()
    got = t.take_records(10)
    for r in got[:4]:
        t.acknowledge(r)
    with pytest.raises(IllegalStateError, match="1 record"):
        t.begin_poll()
    t.acknowledge(got[4], AcknowledgeType.REJECT)
    t.begin_poll()
    assert t.take(TP).acks == {0: ACCEPT, 1: ACCEPT, 2: ACCEPT, 3: ACCEPT, 4: REJECT}


def test_acknowledging_twice_or_a_foreign_record_raises() -> None:
    t = tracker()
    got = t.take_records(10)
    t.acknowledge(got[0])
    with pytest.raises(IllegalStateError, match="already acknowledged"):
        t.acknowledge(got[0], AcknowledgeType.REJECT)
    with pytest.raises(IllegalStateError, match="not returned by this consumer"):
        t.acknowledge(rec(1))  # same offset, but not the object this consumer handed out
    with pytest.raises(IllegalStateError):
        t.acknowledge(rec(3, TP2))  # a partition this consumer never fetched
    with pytest.raises(ValueError):
        t.acknowledge(got[1], AcknowledgeType.GAP)
    with pytest.raises(ValueError):
        t.acknowledge(got[1], 7)
    assert t.take(TP).acks == {0: ACCEPT}  # the refused calls changed nothing


def test_records_of_an_earlier_poll_cannot_be_acknowledged() -> None:
    t = tracker(explicit=False)
    first = t.take_records(2)
    second = t.take_records(3)  # no begin_poll between: both are delivered
    t.begin_poll()
    with pytest.raises(IllegalStateError):
        t.acknowledge(first[0])
    with pytest.raises(IllegalStateError):
        t.acknowledge(second[0])


def test_max_records_leaves_the_rest_buffered_and_expired_records_are_dropped() -> None:
    t = AckTracker(explicit=True)
    t.add_acquired(TP, [rec(o, deadline=100.0) for o in range(3)])
    t.add_acquired(TP2, [rec(o, TP2, deadline=200.0) for o in range(3)])
    assert [r.offset for r in t.take_records(2, now=50.0)] == [0, 1]
    assert t.buffered(TP) == 1
    got = t.take_records(10, now=150.0)  # TP's last record's lock ran out: never handed out
    assert [(r.partition, r.offset) for r in got] == [(1, 0), (1, 1), (1, 2)]
    assert t.buffered(TP) == 0


def test_gaps_are_acknowledged_at_once_and_left_out_of_reported_offsets() -> None:
    t = AckTracker(explicit=True)
    t.add_acquired(TP, [rec(0), rec(3)], gaps=[1, 2])
    pa = t.take(TP)
    assert pa.acks == {1: GAP, 2: GAP}
    assert pa.offsets() == set()


def test_renew_brings_the_record_back_for_the_next_poll() -> None:
    t = tracker(offsets=[0, 1])
    a, b = t.take_records(10)
    t.acknowledge(a, AcknowledgeType.RENEW)
    t.acknowledge(b, AcknowledgeType.ACCEPT)
    t.begin_poll()
    assert t.renewing() == 1
    pa = t.take(TP)
    assert pa.has_renew and pa.acks == {0: RENEW, 1: ACCEPT}
    assert t.take_records(10) == []  # not back before the broker confirmed
    t.complete(pa, None, lock_deadline=99.0)
    assert t.renewing() == 0
    t.add_acquired(TP2, [rec(7, TP2)])  # fetched meanwhile
    (again,) = t.take_records(10)  # renewed records come back alone
    assert again is a and again.acquisition_lock_deadline == 99.0
    t.acknowledge(again, AcknowledgeType.ACCEPT)  # acknowledgeable again
    assert [(r.partition, r.offset) for r in t.take_records(10)] == [(1, 7)]


def test_a_failed_renewal_drops_the_record() -> None:
    t = tracker(offsets=[0])
    (a,) = t.take_records(10)
    t.acknowledge(a, AcknowledgeType.RENEW)
    pa = t.take(TP)
    t.complete(pa, RuntimeError("lock gone"))
    assert t.take_records(10) == [] and t.renewing() == 0
    assert not t.holds(TP)


def test_requeue_puts_acknowledgements_back() -> None:
    t = tracker(offsets=[0, 1])
    a, b = t.take_records(10)
    t.acknowledge(a)
    pa = t.take(TP)
    t.acknowledge(b, AcknowledgeType.REJECT)
    t.requeue(pa)
    assert t.take(TP).acks == {0: ACCEPT, 1: REJECT}


def test_offsets_acquired_again_while_held_are_not_handed_out_twice() -> None:
    t = tracker(offsets=[0, 1, 2])
    a, b, c = t.take_records(10)
    t.acknowledge(b)  # pending
    t.acknowledge(c, AcknowledgeType.REJECT)
    pa = t.take(TP)  # c and b are being sent
    t.add_acquired(TP, [rec(0, count=2, deadline=9.0), rec(1, count=2), rec(2, count=2), rec(3, count=2)])
    assert (a.delivery_count, a.acquisition_lock_deadline) == (2, 9.0)  # the live copy follows the broker
    assert [r.offset for r in t.take_records(10)] == [3]
    t.acknowledge(a)
    t.complete(pa, None)
    assert t.take(TP).acks == {0: ACCEPT}


def test_claim_finds_held_offsets_of_a_new_acquisition() -> None:
    t = tracker(offsets=[0, 1, 2, 3])
    a, b, c, d = t.take_records(10)
    t.acknowledge(b)
    pa = t.take(TP)  # b on its way
    t.acknowledge(c, AcknowledgeType.REJECT)  # c pending
    assert t.claim(TP, [(0, 2, 2), (5, 9, 1)], 7.0) == {0, 1, 2}
    assert (a.delivery_count, a.acquisition_lock_deadline) == (2, 7.0)
    assert (d.delivery_count, d.acquisition_lock_deadline) == (1, None)  # not in the new acquisition
    t.complete(pa, None)
    assert t.claim(TP, [(0, 2, 2)], 7.0) == {0, 2}
    assert t.claim(TP2, [(0, 2, 2)], 7.0) == frozenset()
    t.add_acquired(TP2, [rec(4, TP2), rec(5, TP2)])
    assert t.claim(TP2, [(5, 6, 3)], 8.0) == {5}  # a buffered copy is held too, and takes the new lock
    assert [(r.offset, r.delivery_count, r.acquisition_lock_deadline) for r in t.take_records(10)] == [
        (4, 1, None),
        (5, 3, 8.0),
    ]


def test_a_newer_acquisition_replaces_a_stale_buffered_copy() -> None:
    t = tracker(offsets=[0, 1])
    t.add_acquired(TP, [rec(1, count=2), rec(2)])
    got = t.take_records(10)
    assert [(r.offset, r.delivery_count) for r in got] == [(0, 1), (1, 2), (2, 1)]


def test_release_buffered_and_drop_buffered() -> None:
    t = tracker(offsets=range(4))
    (first,) = t.take_records(1)
    assert t.release_buffered(TP) == 3
    t.acknowledge(first, AcknowledgeType.REJECT)
    pa = t.take(TP)
    assert pa.acks == {0: REJECT, 1: RELEASE, 2: RELEASE, 3: RELEASE}
    assert pa.offsets() == {0}  # the client's own releases are not reported as the application's
    t2 = tracker(offsets=range(4))
    assert t2.drop_buffered([TP]) == 4
    assert t2.take_records(10) == [] and not t2.holds(TP)


class TrackerMachine(RuleBasedStateMachine):
    """Random fetches, polls, acknowledgements, sends and answers; every offset must end up
    acknowledged exactly once per delivery, with the type the application chose."""

    def __init__(self) -> None:
        super().__init__()
        self.t = AckTracker(explicit=True)
        self.next_offset = 0
        self.delivered: list[ConsumerRecord] = []  # the latest poll's records, unacknowledged
        self.chosen: dict[int, int] = {}  # offset -> type, acknowledged and not yet sent
        self.sent: list[PartitionAcks] = []
        self.applied: dict[int, list[int]] = {}  # offset -> types the broker applied, in order
        self.renew_waiting: set[int] = set()

    @rule(n=st.integers(1, 6), gap=st.booleans())
    def fetch(self, n: int, gap: bool) -> None:
        records = [rec(o) for o in range(self.next_offset, self.next_offset + n)]
        gaps = []
        if gap:
            gaps = [self.next_offset + n]
            self.chosen[gaps[0]] = GAP
        self.t.add_acquired(TP, records, gaps)
        self.next_offset += n + len(gaps)

    @rule(limit=st.integers(1, 8))
    def poll(self, limit: int) -> None:
        if self.delivered:
            with pytest.raises(IllegalStateError):
                self.t.begin_poll()
            return
        self.t.begin_poll()
        got = self.t.take_records(limit)
        assert len(got) <= limit
        for r in got:
            self.renew_waiting.discard(r.offset)
        self.delivered = list(got)

    @precondition(lambda self: self.delivered)
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from(self.delivered))
        kind = data.draw(st.sampled_from([ACCEPT, RELEASE, REJECT, RENEW]))
        self.t.acknowledge(r, kind)
        self.delivered.remove(r)
        self.chosen[r.offset] = kind
        with pytest.raises(IllegalStateError):
            self.t.acknowledge(r, ACCEPT)

    @rule()
    def send(self) -> None:
        pa = self.t.take(TP)
        if pa is None:
            assert not self.chosen
            return
        assert pa.acks == self.chosen
        self.chosen = {}
        self.sent.append(pa)

    @precondition(lambda self: self.sent)
    @rule(ok=st.booleans(), requeue=st.booleans(), data=st.data())
    def answer(self, ok: bool, requeue: bool, data: st.DataObject) -> None:
        pa = self.sent.pop(data.draw(st.integers(0, len(self.sent) - 1)))
        if requeue:
            self.t.requeue(pa)
            for o, kind in pa.acks.items():
                self.chosen.setdefault(o, kind)
            return
        self.t.complete(pa, None if ok else RuntimeError("no"))
        for o, kind in pa.acks.items():
            if ok:
                self.applied.setdefault(o, []).append(kind)
            if kind == RENEW and ok:
                self.renew_waiting.add(o)

    @invariant()
    def renewals_counted(self) -> None:
        in_flight_renews = sum(1 for pa in self.sent for k in pa.acks.values() if k == RENEW)
        chosen_renews = sum(1 for k in self.chosen.values() if k == RENEW)
        assert self.t.renewing() == in_flight_renews + chosen_renews

    @invariant()
    def only_renewed_offsets_are_applied_twice(self) -> None:
        for kinds in self.applied.values():
            assert all(k == RENEW for k in kinds[:-1])


TestTrackerMachine = TrackerMachine.TestCase
TestTrackerMachine.pytestmark = [pytest.mark.slow]  # many-example state machine: not in the fast loop
TestTrackerMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# -- share sessions ----------------------------------------------------------------------------

T1 = uuid.UUID(int=1)
K0, K1, K2 = (T1, 0), (T1, 1), (T1, 2)


def test_session_epochs_and_incremental_plans() -> None:
    s = ShareSession(1)
    p0 = s.plan_fetch({K0, K1})
    assert (p0.epoch, p0.topics, p0.forgotten) == (0, [K0, K1], [])
    with pytest.raises(ValueError):
        s.plan_fetch({K0}, {K0: PartitionAcks(TP, {0: ACCEPT})})  # no acknowledgements at epoch 0
    s.on_success(p0)
    assert s.is_open and s.epoch == 1
    pa = PartitionAcks(TP, {0: ACCEPT})
    p1 = s.plan_fetch({K1, K2}, {K0: pa})  # K0 leaves the fetch but its acks ride along (still in session)
    assert (p1.epoch, p1.topics, p1.forgotten) == (1, [K0, K2], [K0])
    s.on_success(p1)
    assert s.partitions == {K1, K2} and s.epoch == 2
    assert not s.can_carry(K0, {K1, K2})
    with pytest.raises(ValueError):
        s.plan_fetch({K1, K2}, {K0: pa})  # K0 is gone: a ShareAcknowledge must carry it
    a = s.plan_acknowledge({K0: pa})
    assert a.epoch == 2 and not a.final
    s.on_success(a)
    assert s.epoch == 3
    final = s.plan_acknowledge({}, final=True)
    assert final.epoch == FINAL_EPOCH
    s.on_success(final)
    assert not s.is_open and s.partitions == frozenset()
    assert next_epoch(2147483647) == 1


def test_request_bodies_encode() -> None:
    s = ShareSession(1)
    s.on_success(s.plan_fetch({K0}))
    pa = PartitionAcks(TP, {0: ACCEPT, 1: ACCEPT, 2: RELEASE, 4: RENEW})
    plan = s.plan_fetch({K0}, {K0: pa})
    sf = api_by_name("ShareFetch")
    body = share_fetch_body(
        plan, 2, group_id="g", member_id="m", max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
        max_records=500, record_limit=True,
    )  # fmt: skip
    back = sf.request_codec(2).decode_all(memoryview(sf.request_codec(2).encode(body)))
    (part,) = back.topics[0].partitions
    assert [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in part.acknowledgement_batches] == [
        (0, 2, [ACCEPT, ACCEPT, RELEASE]),
        (4, 4, [RENEW]),
    ]
    assert back.share_acquire_mode == 1 and back.max_records == 500
    ack = s.plan_acknowledge({K0: pa})
    sa = api_by_name("ShareAcknowledge")
    body = share_acknowledge_body(ack, 2, group_id="g", member_id="m")
    back = sa.request_codec(2).decode_all(memoryview(sa.request_codec(2).encode(body)))
    assert back.is_renew_ack and back.share_session_epoch == 1


def test_prefetch_gate_allows_one_per_poll_and_backs_off_while_prefetches_find_nothing() -> None:
    g = PrefetchGate()
    g.on_poll()
    assert g.may_prefetch()
    g.on_sent()
    assert not g.may_prefetch()  # one prefetch per poll
    g.on_answer(True)
    g.on_poll()
    assert g.may_prefetch()  # prefetches that bring records keep coming

    def polls(n: int, found: bool = False) -> list[bool]:
        allowed = []
        for _ in range(n):
            g.on_poll()
            allowed.append(g.may_prefetch())
            if allowed[-1]:
                g.on_sent()
                g.on_answer(found)
        return allowed

    g.on_sent()
    g.on_answer(False)  # nothing acquirable: skip 1 poll, then 2, 4, ... up to PREFETCH_BACKOFF_MAX
    seen = polls(1 + 1 + 2 + 1 + 4 + 1 + 8 + 1)
    assert seen == [False, True, False, False, True] + [False] * 4 + [True] + [False] * 8 + [True]
    assert PREFETCH_BACKOFF_MAX == 16
    assert polls(2 * (PREFETCH_BACKOFF_MAX + 1)).count(True) == 2  # capped
    g.skip = 0
    assert polls(1, found=True) == [True]  # records: the next poll may prefetch again, the back-off halves
    assert g.backoff == PREFETCH_BACKOFF_MAX // 2
    assert polls(3, found=True) == [True, True, True]
    assert g.backoff == 1


# -- decoding acquired records -------------------------------------------------------------------


def batches(*specs: tuple[int, int], holes: frozenset[int] = frozenset()) -> bytes:
    """Record batches: (base offset, record count) each; offsets in ``holes`` are compacted away
    (the batch keeps its last offset)."""
    out = b""
    for base, n in specs:
        deltas = [i for i in range(n) if base + i not in holes or i == n - 1]
        out += bytes(
            build_batch([(None, b"v%d" % (base + i), (), 0) for i in deltas], base_offset=base, offset_deltas=deltas)
        )
    return out


def test_decode_keeps_only_acquired_offsets_and_finds_gaps() -> None:
    data = batches((0, 5), (8, 2))  # offsets 5-7 hold nothing
    recs, gaps, unseen = decode_acquired(TP, data, [(2, 6, 3), (9, 12, 1)], 42.0)
    assert [(r.offset, r.delivery_count, r.value) for r in recs] == [
        (2, 3, b"v2"),
        (3, 3, b"v3"),
        (4, 3, b"v4"),
        (9, 1, b"v9"),
    ]
    assert all(r.acquisition_lock_deadline == 42.0 for r in recs)
    assert gaps == [5, 6]  # inside the returned data: no record there
    assert unseen == [10, 11, 12]  # past the end of the data: never assumed empty


def test_decode_control_batches_are_gaps() -> None:
    data = batches((0, 2)) + bytes(build_control_batch(1, producer_id=7, producer_epoch=0, base_offset=2, timestamp=0))
    data += batches((3, 1))
    recs, gaps, unseen = decode_acquired(TP, data, [(0, 3, 1)], None)
    assert [r.offset for r in recs] == [0, 1, 3]
    assert (gaps, unseen) == ([2], [])


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6)), max_size=5),
    st.frozensets(st.integers(0, 40), max_size=8),
)
def test_decode_accounts_for_every_acquired_offset_once(layout, raw_ranges, holes) -> None:
    specs, base = [], 0
    for skip, n in layout:
        base += skip
        specs.append((base, n))
        base += n
    present = {b + i for b, n in specs for i in range(n) if b + i not in holes or i == n - 1}
    end = max(present)
    ranges, cursor = [], 0
    for start, length in raw_ranges:  # disjoint, sorted
        first = max(start, cursor)
        ranges.append((first, first + length, len(ranges) + 1))  # each range its own delivery count
        cursor = first + length + 1
    recs, gaps, unseen = decode_acquired(TP, batches(*specs, holes=holes), ranges, None)
    acquired = {o for f, last, _ in ranges for o in range(f, last + 1)}
    got = [r.offset for r in recs]
    assert got == sorted(got)
    assert set(got) == acquired & present
    assert all(r.value == b"v%d" % r.offset for r in recs)
    count_of = {o: n for f, last, n in ranges for o in range(f, last + 1)}
    assert all(r.delivery_count == count_of[r.offset] for r in recs)
    assert set(gaps) == {o for o in acquired - present if o <= end}
    assert set(unseen) == {o for o in acquired if o > end}
    assert len(got) + len(gaps) + len(unseen) == len(acquired)
