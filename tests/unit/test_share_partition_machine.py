"""SharePartition state machine: random traffic checked against a per-offset model.

The machine drives random fetches, acknowledgements, lock expiry, member
release, commits, undos, log-start moves and restarts from the persisted state
accumulated the way the share coordinator merges it, and compares the
partition with ``Model`` (the semantics written per offset, independently of
ranges, splits and caches) after every step. Helpers are in
tests/support/share_partition.py.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from shoal.broker.share.share_partition import Change, SharePartition
from shoal.broker.share_coordinator.shard import merge_batches
from shoal.protocol.constants import ACCEPT, ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, GAP, REJECT, RELEASE, RENEW

# check() asserts the invariants: let pytest rewrite its asserts (as it did when it lived in the test module).
pytest.register_assert_rewrite("tests.support.share_partition")

from tests.support.share_partition import (  # noqa: E402
    LOCK,
    NONE,
    B,
    check,
    snap,
)

# -- the state machine ---------------------------------------------------------------------
MEMBERS = ("a", "b", "c")


class Model:
    """The semantics written per offset, independently of ranges, splits and caches:
    offset -> [state, delivery count, member, lock deadline, pending change]."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.rec: dict[int, list] = {}
        self.saved: dict[Change, list[tuple[int, list]]] = {}

    def restore(self, batches_) -> None:
        self.rec = {o: [s, c, None, -1, None] for f, last, s, c in batches_ for o in range(f, last + 1)}
        self.saved = {}

    def change(self, change: Change, o: int, new: list) -> None:
        self.saved.setdefault(change, []).append((o, list(self.rec[o])))
        self.rec[o] = new

    def held(self, member: str, first: int, last: int, start: int, end: int) -> bool:
        if last > end:
            return False
        return all(
            (r := self.rec.get(o)) is not None and r[0] == ACQUIRED and r[2] == member
            for o in range(max(first, start), last + 1)
        )

    def release(self, change: Change, o: int, start: int, *, decrease: bool, now: int | None = None) -> None:
        _s, c, _m, _d, _p = self.rec[o]
        if o < start:
            self.change(change, o, [ARCHIVED, c, None, -1, change])
        elif decrease:
            self.change(change, o, [AVAILABLE, max(c - 1, 0), None, -1, change])
        else:
            self.change(change, o, [ARCHIVED if c >= self.limit else AVAILABLE, c, None, -1, change])

    def settle(self, start: int) -> None:
        for o, r in self.rec.items():
            if o < start and r[0] == AVAILABLE and r[4] is None:
                r[0] = ARCHIVED

    def resolve(self, change: Change, commit: bool) -> None:
        for o, old in reversed(self.saved.pop(change, [])):
            if commit:
                self.rec[o][4] = None
            else:
                self.rec[o] = old

    def compare(self, sp: SharePartition) -> None:
        start = sp.start_offset
        tracked = {o for a, b, *_ in sp.ranges() for o in range(max(a, start), b + 1)}
        for o in tracked | {o for o in self.rec if o >= start}:
            r = self.rec.get(o)
            assert sp.state_of(o) == (None if r is None else tuple(r[:3])), o
        for o, r in self.rec.items():
            if r[0] == ACQUIRED:
                assert sp.state_of(o) == tuple(r[:3]), o
        deadlines = [r[3] for r in self.rec.values() if r[0] == ACQUIRED]
        assert sp.next_lock_deadline() == (min(deadlines) if deadlines else None)


class SharePartitionMachine(RuleBasedStateMachine):
    """Random traffic against one share partition, checked against `Model`, with a model of
    the persisted state: writes land in order (commit), or fail in any order (undo)."""

    @initialize(limit=st.integers(1, 4), cap=st.sampled_from([4, 12, 50]))
    def setup(self, limit: int, cap: int) -> None:
        self.limit, self.cap = limit, cap
        self.now = 0
        self.log: list[B] = []
        self.log_end = 0
        self.log_start = 0
        self.aborted: list[tuple[int, int, int]] = []
        self.deliverable: set[int] = set()
        self.max_batch = 1
        self.store_start = 0
        self.store_batches: list = []
        self.queue: list[Change] = []  # outstanding changes, in creation order
        self.done: set[int] = set()  # offsets made ACKNOWLEDGED / ARCHIVED for good
        self.model = Model(self.limit)
        self.sp = self._fresh()

    def _fresh(self) -> SharePartition:
        sp = SharePartition(
            "g", "t", 0, max_in_flight_records=self.cap, delivery_count_limit=self.limit, lock_duration_ms=LOCK
        )
        sp.initialize(1, self.store_start, self.store_batches, log_start_offset=self.log_start, high_watermark=0)
        self.model.restore(self.store_batches)
        self.model.settle(sp.start_offset)
        return sp

    def _queue(self, change: Change) -> None:
        if change.needs_write:
            assert change.pending
            self.queue.append(change)
        else:
            assert not change.pending
            self.model.resolve(change, commit=True)
        self.model.settle(self.sp.start_offset)

    # -- log ----------------------------------------------------------------------------
    @rule(
        what=st.lists(
            st.tuples(st.sampled_from(["data", "data", "data", "control", "aborted", "hole"]), st.integers(1, 4)),
            min_size=1,
            max_size=4,
        )
    )
    def produce(self, what: list[tuple[str, int]]) -> None:
        for kind, size in what:
            self._produce(kind, size)

    def _produce(self, kind: str, size: int) -> None:
        o = self.log_end
        if kind == "data":
            self.log.append(B(o, o + size - 1))
            self.deliverable.update(range(o, o + size))
        elif kind == "control":
            self.log.append(B(o, o, is_control=True, producer_id=9))
            size = 1
        elif kind == "aborted":
            self.log.append(B(o, o + size - 1, producer_id=7, is_transactional=True))
            self.log.append(B(o + size, o + size, is_control=True, producer_id=7))
            self.aborted.append((7, o, o + size))
            size += 1
        else:  # offsets compaction removed (no batch holds them), then a record
            self.log.append(B(o + size, o + size))
            self.deliverable.add(o + size)
            size += 1
        self.log_end = o + size
        self.max_batch = max(self.max_batch, size)

    @rule(n=st.integers(1, 6), rare=st.integers(0, 7))
    def retention(self, n: int, rare: int) -> None:
        if rare:
            return
        self.log_start = min(self.log_end, self.log_start + n)
        self.sp.on_log_start_advanced(self.log_start)
        self.model.settle(self.sp.start_offset)

    # -- consumers --------------------------------------------------------------------------
    @rule(
        member=st.sampled_from(MEMBERS),
        max_records=st.integers(1, 8),
        batch_optimized=st.booleans(),
        read_batches=st.integers(1, 5),
        explicit=st.booleans(),
    )
    def fetch(self, member: str, max_records: int, batch_optimized: bool, read_batches: int, explicit: bool) -> None:
        sp, model = self.sp, self.model
        if not sp.acquirable(self.log_end):
            return
        offset = sp.next_fetch_offset()
        fetched = [b for b in self.log if b.last_offset >= offset][:read_batches]
        if not fetched:
            return
        lo, hi = min(offset, fetched[0].base_offset), fetched[-1].last_offset
        before = {o: (list(model.rec[o]) if o in model.rec else None) for o in range(lo, hi + 1)}
        in_flight = sp.in_flight_count
        got = sp.acquire(
            member,
            fetched,
            max_records,
            batch_optimized=batch_optimized,
            now_ms=self.now,
            aborted=self.aborted,
            fetch_offset=offset if explicit else None,
        )
        total = 0
        for r in got:
            assert r.first_offset <= r.last_offset and r.lock_deadline_ms == self.now + LOCK
            for o in range(r.first_offset, r.last_offset + 1):
                old = before[o]
                assert old is None or (old[0] == AVAILABLE and old[4] is None), "acquired twice / while pending"
                assert o not in self.done, "a finished record was delivered again"
                assert o in self.deliverable and o >= sp.start_offset
                assert r.delivery_count == (0 if old is None else old[1]) + 1 <= self.limit
                model.rec[o] = [ACQUIRED, r.delivery_count, member, r.lock_deadline_ms, None]
                total += 1
        for o, old in before.items():  # what the fetch archived instead of delivering
            if old is not None and old[0] == AVAILABLE and sp.state_of(o) == (ARCHIVED, old[1], None):
                assert old[4] is None and (o not in self.deliverable or old[1] >= self.limit or o < sp.start_offset)
                model.rec[o][0] = ARCHIVED
                self.done.add(o)
        if not batch_optimized:
            assert total <= max_records
        assert sp.in_flight_count <= max(in_flight, self.cap + self.max_batch - 1)
        model.settle(sp.start_offset)

    def _held(self, member: str) -> list[tuple[int, int]]:
        return [(a, b) for a, b, s, _c, m in self.sp.ranges() if s == ACQUIRED and m == member]

    def _acknowledge(self, member: str, request: list, *, undo_at_once: bool = False) -> None:
        sp, model = self.sp, self.model
        start, end = sp.start_offset, sp.end_offset
        cached = [(a, b) for a, b, *_rest in sp.ranges()]

        def held(f: int, last: int) -> bool:
            if max(f, start) > last:
                # Wholly below the start: accepted (and skipped) only while a range still in the
                # cache holds some of it; once dropped, Kafka answers INVALID_RECORD_STATE.
                return any(a <= last and b >= f for a, b in cached)
            return model.held(member, f, last, start, end)

        ok = all(0 <= t <= 4 for _f, _l, types in request for t in types) and all(
            held(f, last) for f, last, _t in request
        )
        before = snap(sp)
        errors, change = sp.acknowledge(member, request, self.now)
        if not ok:
            assert all(errors) and snap(sp) == before and not change.needs_write
            return
        assert errors == [NONE] * len(request)
        for f, last, types in request:
            for o in range(max(f, start), last + 1):
                t = types[0] if len(types) == 1 else types[o - f]
                r = model.rec[o]
                if t == RENEW:
                    r[3] = self.now + LOCK
                    continue
                state = {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, RELEASE: AVAILABLE, REJECT: ARCHIVED}[t]
                if state == AVAILABLE and r[1] >= self.limit:
                    state = ARCHIVED
                model.change(change, o, [state, r[1], None, -1, change])
        if undo_at_once and change.needs_write:
            change.undo()  # the write failed at once: exactly as before (renewals aside)
            model.resolve(change, commit=False)
            if not any(RENEW in t for _f, _l, t in request):
                assert snap(sp) == before
            return
        self._queue(change)

    @rule(data=st.data())
    def acknowledge(self, data) -> None:
        holders = [m for m in MEMBERS if self._held(m)]
        if not holders:
            return
        member = data.draw(st.sampled_from(holders))
        held = self._held(member)
        picks = sorted(set(data.draw(st.lists(st.integers(0, len(held) - 1), min_size=1, max_size=3))))
        request = []
        for i in picks:
            a, b = held[i]
            first = data.draw(st.integers(a, b))
            last = data.draw(st.integers(first, b))
            if data.draw(st.booleans()):
                types = [data.draw(st.sampled_from([GAP, ACCEPT, RELEASE, REJECT, RENEW]))]
            else:
                types = data.draw(st.lists(st.sampled_from([ACCEPT, RELEASE, REJECT, RENEW]), min_size=last - first + 1,
                                           max_size=last - first + 1))  # fmt: skip
            request.append((first, last, types))
        self._acknowledge(member, request, undo_at_once=data.draw(st.booleans()))

    @rule(member=st.sampled_from(MEMBERS), first=st.integers(0, 40), n=st.integers(0, 3), t=st.integers(0, 5))
    def random_acknowledge(self, member: str, first: int, n: int, t: int) -> None:
        """Mostly invalid: not held, held by another member, done, past the end, bad type."""
        self._acknowledge(member, [(first, first + n, [t])])

    @rule(
        member=st.sampled_from(MEMBERS),
        max_records=st.integers(1, 8),
        batch_optimized=st.booleans(),
        data=st.data(),
    )
    def consume(self, member: str, max_records: int, batch_optimized: bool, data) -> None:
        """Fetch, then acknowledge what this member holds with one random type per offset."""
        self.fetch(member, max_records, batch_optimized, 3, False)
        request = []
        for a, b in self._held(member):
            kinds = [GAP, ACCEPT, ACCEPT, ACCEPT, RELEASE, REJECT, RENEW]
            request.append((a, b, data.draw(st.lists(st.sampled_from(kinds), min_size=b - a + 1, max_size=b - a + 1))))
        if request:
            self._acknowledge(member, request, undo_at_once=data.draw(st.booleans()))

    @rule(ms=st.sampled_from([1, 10, 100, LOCK // 2, LOCK, 2 * LOCK]))
    def tick(self, ms: int) -> None:
        self.now += ms
        start = self.sp.start_offset
        change = self.sp.expire_locks(self.now)
        for o, r in sorted(self.model.rec.items()):
            if r[0] == ACQUIRED and r[3] <= self.now:
                self.model.release(change, o, start, decrease=False)
        self._queue(change)

    @rule(member=st.sampled_from(MEMBERS), decrease=st.booleans())
    def member_leaves(self, member: str, decrease: bool) -> None:
        start = self.sp.start_offset
        change = self.sp.release_member(member, decrease_delivery_count=decrease)
        for o, r in sorted(self.model.rec.items()):
            if r[0] == ACQUIRED and r[2] == member:
                self.model.release(change, o, start, decrease=decrease)
        self._queue(change)
        assert not self._held(member)

    # -- persistence ---------------------------------------------------------------------------
    @precondition(lambda self: self.queue)
    @rule()
    def write_succeeds(self) -> None:
        """The oldest write reached the share coordinator: merge it as the shard does."""
        change = self.queue.pop(0)
        if change.start_offset != -1:
            assert change.start_offset >= self.store_start, "persisted start offset went back"
            self.store_start = change.start_offset
        self.store_batches = merge_batches(self.store_batches, change.batches, self.store_start)
        for first, last, state, _count in change.batches:
            if state in (ACKNOWLEDGED, ARCHIVED):
                self.done.update(range(first, last + 1))
        change.commit()
        self.model.resolve(change, commit=True)
        self.model.settle(self.sp.start_offset)

    @precondition(lambda self: self.queue)
    @rule(data=st.data())
    def write_fails(self, data) -> None:
        change = self.queue.pop(data.draw(st.integers(0, len(self.queue) - 1)))
        change.undo()
        self.model.resolve(change, commit=False)
        self.model.settle(self.sp.start_offset)

    @rule()
    def restart(self) -> None:
        """The leader moves: outstanding writes are lost, the state comes from the store."""
        self.queue.clear()
        self.sp = self._fresh()

    @invariant()
    def consistent(self) -> None:
        if hasattr(self, "sp"):
            check(self.sp)
            self.model.compare(self.sp)

    def teardown(self) -> None:
        """Once everyone accepts everything, every record ends up done, none skipped."""
        if not hasattr(self, "sp"):
            return
        stalled = 0
        while self.sp.start_offset < self.log_end and stalled < 5:
            while self.queue:
                self.write_succeeds()
            sp = self.sp
            before = (sp.start_offset, sp.end_offset)
            for member in MEMBERS:
                held = self._held(member)
                if held:
                    self._acknowledge(member, [(a, b, [ACCEPT]) for a, b in held])
            while self.queue:
                self.write_succeeds()
            self.fetch("a", 50, True, 10, True)
            if not sp.acquirable(self.log_end):
                self.tick(2 * LOCK)
            self.consistent()
            stalled = stalled + 1 if (sp.start_offset, sp.end_offset) == before else 0
        sp = self.sp
        assert sp.start_offset == self.log_end, (
            f"stuck at {sp.start_offset} (log end {self.log_end}, end {sp.end_offset}, next fetch "
            f"{sp.next_fetch_offset()}, in flight {sp.in_flight_count}/{self.cap}): {list(sp.ranges())[:6]}"
        )
        missed = {o for o in self.deliverable if o >= self.log_start} - self.done
        assert not missed, f"records never finished: {sorted(missed)}"


SharePartitionMachine.TestCase.settings = settings(
    max_examples=400, stateful_step_count=80, deadline=None, suppress_health_check=list(HealthCheck)
)
TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.pytestmark = [pytest.mark.slow]  # many-example state machine: not in the fast loop
