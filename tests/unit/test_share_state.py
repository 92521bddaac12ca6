"""The share coordinator's shard: records in, state out.

Operations only propose records; state changes only by replaying them, so
every test drives the shard through `replay`, and the crash tests rebuild a
fresh shard from the encoded records (and from a real partition log) to show
the records alone carry the whole state.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.broker.coordinator.shard import Record
from shoal.broker.log import LogConfig, PartitionLog
from shoal.broker.share_coordinator.shard import Batch, ShareStateShard, merge_batches
from shoal.protocol.constants import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE
from shoal.protocol.coordinator_records import CoordinatorRecord, serde
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch

SERDE = serde("share")
TOPIC = uuid.UUID("12345678-1234-5678-1234-567812345678")
G = "g"


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Harness:
    """A shard plus the log of everything it was asked to persist (as bytes)."""

    def __init__(self, snapshot_every: int = 500) -> None:
        self.clock = Clock()
        self.shard = ShareStateShard(0, snapshot_every=snapshot_every, now_ms=self.clock)
        self.log: list[tuple[bytes, bytes | None]] = []

    def apply(self, records: Sequence[Record]) -> None:
        for r in records:
            self.log.append((SERDE.encode_key(r.name, r.key), SERDE.encode_value(r.name, r.value)))
            rt = SERDE.record_type(r.name)
            self.shard.replay(CoordinatorRecord(rt, r.key, r.value, 0), len(self.log) - 1)
        self.clock.now += 1

    def run(self, result: tuple[list[Record], object]) -> object:
        records, answer = result
        self.apply(records)
        return answer

    def replayed(self) -> ShareStateShard:
        fresh = ShareStateShard(0, snapshot_every=self.shard.snapshot_every, now_ms=Clock())
        for offset, (key, value) in enumerate(self.log):
            fresh.replay(SERDE.decode(key, value), offset)
        return fresh


def expand(batches: Sequence[Batch]) -> dict[int, tuple[int, int]]:
    return {o: (s, c) for f, last, s, c in batches for o in range(f, last + 1)}


def assert_canonical(batches: Sequence[Batch]) -> None:
    for (_f1, l1, s1, c1), (f2, _l2, s2, c2) in itertools.pairwise(batches):
        assert l1 < f2, batches
        assert not (l1 + 1 == f2 and (s1, c1) == (s2, c2)), batches
    for f, last, _, _ in batches:
        assert f <= last


# -- merge ---------------------------------------------------------------------


def test_merge_splits_existing_batches_around_update() -> None:
    current = [(0, 9, AVAILABLE, 1)]
    merged = merge_batches(current, [(3, 5, ACKNOWLEDGED, 1)], -1)
    assert merged == [(0, 2, AVAILABLE, 1), (3, 5, ACKNOWLEDGED, 1), (6, 9, AVAILABLE, 1)]


def test_merge_trims_at_start_offset_and_coalesces() -> None:
    current = [(0, 4, ARCHIVED, 5), (5, 9, AVAILABLE, 2), (10, 12, ACKNOWLEDGED, 1)]
    merged = merge_batches(current, [(8, 9, ACKNOWLEDGED, 1)], 7)
    assert merged == [(7, 7, AVAILABLE, 2), (8, 12, ACKNOWLEDGED, 1)]


def test_update_spanning_several_batches_replaces_them() -> None:
    current = [(0, 2, AVAILABLE, 1), (4, 6, ARCHIVED, 3), (8, 9, AVAILABLE, 2)]
    merged = merge_batches(current, [(1, 8, ACKNOWLEDGED, 4)], -1)
    assert merged == [(0, 0, AVAILABLE, 1), (1, 8, ACKNOWLEDGED, 4), (9, 9, AVAILABLE, 2)]


# -- operations ----------------------------------------------------------------


def test_initialize_write_read_round_trip() -> None:
    h = Harness()
    assert h.run(h.shard.initialize(G, TOPIC, 3, 1, -1)) == ErrorCode.NONE
    rd = h.run(h.shard.read(G, TOPIC, 3, -1))
    assert (rd.state_epoch, rd.start_offset, rd.batches, rd.error) == (1, -1, [], ErrorCode.NONE)

    err = h.run(h.shard.write(G, TOPIC, 3, 1, 0, 10, [(10, 19, AVAILABLE, 1)], 0))
    assert err == ErrorCode.NONE
    err = h.run(h.shard.write(G, TOPIC, 3, 1, 0, 12, [(12, 14, ACKNOWLEDGED, 1), (15, 15, ARCHIVED, 5)], 3))
    assert err == ErrorCode.NONE
    rd = h.run(h.shard.read(G, TOPIC, 3, 0))
    assert rd.error == ErrorCode.NONE
    assert rd.state_epoch == 1 and rd.start_offset == 12
    assert rd.batches == [(12, 14, ACKNOWLEDGED, 1), (15, 15, ARCHIVED, 5), (16, 19, AVAILABLE, 1)]
    _, summary = h.shard.read_summary(G, TOPIC, 3)
    assert (summary.state_epoch, summary.leader_epoch, summary.start_offset, summary.delivery_complete_count) == (
        1,
        0,
        12,
        3,
    )
    # other partitions are untouched
    assert h.shard.state(G, TOPIC, 4) is None


def test_read_of_unknown_key_is_uninitialized_and_writes_nothing() -> None:
    h = Harness()
    records, rd = h.shard.read(G, TOPIC, 0, 7)
    assert records == []
    assert (rd.state_epoch, rd.start_offset, rd.batches, rd.error) == (0, -1, [], ErrorCode.NONE)
    _, summary = h.shard.read_summary(G, TOPIC, 0)
    assert (summary.state_epoch, summary.start_offset, summary.error) == (0, -1, ErrorCode.NONE)


def test_read_records_a_newer_leader_epoch_and_fences_older_ones() -> None:
    h = Harness()
    h.run(h.shard.initialize(G, TOPIC, 0, 1, 5))
    records, rd = h.shard.read(G, TOPIC, 0, 4)
    assert len(records) == 1 and records[0].name == "ShareUpdate" and records[0].value.leader_epoch == 4
    assert rd.start_offset == 5
    h.apply(records)
    assert h.shard.state(G, TOPIC, 0).leader_epoch == 4
    # same epoch again: nothing to record
    assert h.shard.read(G, TOPIC, 0, 4)[0] == []
    before = h.shard.state(G, TOPIC, 0)
    snapshot = (before.leader_epoch, before.start_offset, list(before.state_batches))
    records, rd = h.shard.read(G, TOPIC, 0, 3)
    assert records == [] and rd.error == ErrorCode.FENCED_LEADER_EPOCH
    records, err = h.shard.write(G, TOPIC, 0, 1, 3, 9, [(9, 9, ACKNOWLEDGED, 1)])
    assert records == [] and err == ErrorCode.FENCED_LEADER_EPOCH
    after = h.shard.state(G, TOPIC, 0)
    assert (after.leader_epoch, after.start_offset, after.state_batches) == snapshot
    # -1: do not check
    assert h.run(h.shard.write(G, TOPIC, 0, 1, -1, 9, [])) == ErrorCode.NONE
    assert h.shard.state(G, TOPIC, 0).leader_epoch == 4


def test_state_epoch_fencing() -> None:
    h = Harness()
    h.run(h.shard.initialize(G, TOPIC, 0, 2, 0))
    h.run(h.shard.write(G, TOPIC, 0, 2, 0, 0, [(0, 3, AVAILABLE, 1)]))
    records, err = h.shard.write(G, TOPIC, 0, 1, 0, 2, [(2, 3, ACKNOWLEDGED, 1)])
    assert records == [] and err == ErrorCode.FENCED_STATE_EPOCH
    # re-initialization needs a newer state epoch
    for epoch in (1, 2):
        records, err = h.shard.initialize(G, TOPIC, 0, epoch, 100)
        assert records == [] and err == ErrorCode.FENCED_STATE_EPOCH
    assert h.shard.state(G, TOPIC, 0).state_batches == [(0, 3, AVAILABLE, 1)]
    assert h.run(h.shard.initialize(G, TOPIC, 0, 3, 100)) == ErrorCode.NONE
    st_ = h.shard.state(G, TOPIC, 0)
    assert (st_.state_epoch, st_.start_offset, st_.state_batches, st_.snapshot_epoch) == (3, 100, [], 1)
    assert st_.leader_epoch == 0  # a re-initialization keeps fencing deposed leaders


def test_invalid_batches_are_rejected() -> None:
    h = Harness()
    h.run(h.shard.initialize(G, TOPIC, 0, 1, 0))
    bad = [
        [(5, 4, AVAILABLE, 1)],  # first > last
        [(0, 4, AVAILABLE, 1), (4, 6, AVAILABLE, 1)],  # overlap
        [(5, 6, AVAILABLE, 1), (0, 1, AVAILABLE, 1)],  # unsorted
        [(0, 1, ACQUIRED, 1)],  # ACQUIRED is never persisted
        [(0, 1, 5, 1)],  # no such state
        [(-2, 1, AVAILABLE, 1)],
    ]
    for batches in bad:
        records, err = h.shard.write(G, TOPIC, 0, 1, 0, 0, batches)
        assert (records, err) == ([], ErrorCode.INVALID_REQUEST), batches
    records, err = h.shard.write(G, TOPIC, 0, 1, 0, -5, [])
    assert (records, err) == ([], ErrorCode.INVALID_REQUEST)
    # ARCHIVING (KIP-1191, Kafka's state 3) is persisted: a restart re-drives its dead-letter copy
    records, err = h.shard.write(G, TOPIC, 0, 1, 0, 0, [(0, 1, 3, 1)])
    assert err == ErrorCode.NONE and len(records) == 1
    assert [b.delivery_state for b in records[0].value.state_batches] == [3]


def test_snapshot_after_exactly_snapshot_every_updates() -> None:
    every = 3
    h = Harness(snapshot_every=every)
    h.run(h.shard.initialize(G, TOPIC, 0, 1, 0))
    names = []
    for i in range(2 * (every + 1)):
        records, err = h.shard.write(G, TOPIC, 0, 1, 0, i, [(i, i + 2, ACKNOWLEDGED if i % 2 else AVAILABLE, 1)])
        assert err == ErrorCode.NONE and len(records) == 1
        names.append(records[0].name)
        h.apply(records)
        expected_count = 0 if records[0].name == "ShareSnapshot" else i % (every + 1) + 1
        assert h.shard.state(G, TOPIC, 0).updates_since_snapshot == expected_count
    assert names == ["ShareUpdate"] * every + ["ShareSnapshot"] + ["ShareUpdate"] * every + ["ShareSnapshot"]
    st_ = h.shard.state(G, TOPIC, 0)
    assert st_.snapshot_epoch == 2
    # the snapshot carries the full merged state
    last = h.log[-1]
    decoded = SERDE.decode(*last)
    assert decoded.type.name == "ShareSnapshot"
    assert [
        (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in decoded.value.state_batches
    ] == (st_.state_batches)
    # the last write (start 7, 7..9 acknowledged) covers what is left
    assert st_.state_batches == [(7, 9, ACKNOWLEDGED, 1)]


def test_delete_tombstones_both_record_types() -> None:
    h = Harness()
    h.run(h.shard.initialize(G, TOPIC, 0, 1, 0))
    records, err = h.shard.delete(G, TOPIC, 0)
    assert err == ErrorCode.NONE and [(r.name, r.value) for r in records] == [("ShareSnapshot", None)]
    h.run(h.shard.write(G, TOPIC, 0, 1, 0, 0, [(0, 1, ARCHIVED, 5)]))
    h.run(h.shard.initialize(G, TOPIC, 1, 1, 0))
    records, err = h.shard.delete(G, TOPIC, 0)
    assert sorted((r.name, r.value) for r in records) == [("ShareSnapshot", None), ("ShareUpdate", None)]
    # tombstone keys are the live keys' bytes
    live_keys = {k for k, v in h.log if v is not None}
    assert {SERDE.encode_key(r.name, r.key) for r in records} <= live_keys
    h.apply(records)
    assert h.shard.state(G, TOPIC, 0) is None
    assert h.shard.state(G, TOPIC, 1) is not None
    assert h.shard.read(G, TOPIC, 0, 0)[1].start_offset == -1
    assert h.shard.delete(G, TOPIC, 0) == ([], ErrorCode.NONE)
    assert h.replayed().states == h.shard.states


def test_operations_do_not_mutate() -> None:
    h = Harness(snapshot_every=1)
    h.run(h.shard.initialize(G, TOPIC, 0, 1, 0))
    h.run(h.shard.write(G, TOPIC, 0, 1, 0, 0, [(0, 4, AVAILABLE, 1)]))
    before = repr(h.shard.states)
    h.shard.write(G, TOPIC, 0, 1, 2, 3, [(3, 9, ACKNOWLEDGED, 1)])
    h.shard.read(G, TOPIC, 0, 5)
    h.shard.initialize(G, TOPIC, 0, 9, 50)
    h.shard.delete(G, TOPIC, 0)
    assert repr(h.shard.states) == before


# -- model-based ---------------------------------------------------------------

batch_specs = st.lists(
    st.tuples(
        st.integers(0, 6),  # gap before the batch
        st.integers(0, 8),  # length - 1
        st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED]),
        st.integers(0, 3),  # delivery count
    ),
    max_size=4,
)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 40), batch_specs, st.one_of(st.just(-1), st.integers(0, 40))),
        st.tuples(st.just("read"), st.integers(-1, 6)),
        st.tuples(st.just("epoch"), st.integers(-1, 6)),
    ),
    max_size=30,
)


def build_batches(base: int, specs: list[tuple[int, int, int, int]]) -> list[Batch]:
    out: list[Batch] = []
    cur = base
    for gap, length, state, count in specs:
        first = cur + gap
        out.append((first, first + length, state, count))
        cur = first + length + 1
    return out


@settings(max_examples=200, deadline=None)
@given(ops=ops, every=st.integers(1, 4))
def test_random_writes_match_per_offset_model(ops, every) -> None:
    h = Harness(snapshot_every=every)
    h.run(h.shard.initialize(G, TOPIC, 0, 1, -1))
    model: dict[int, tuple[int, int]] = {}
    start = -1
    leader_epoch = -1
    for op in ops:
        if op[0] == "write":
            _, base, specs, new_start = op
            batches = build_batches(base, specs)
            err = h.run(h.shard.write(G, TOPIC, 0, 1, leader_epoch, new_start, batches))
            assert err == ErrorCode.NONE
            for f, last, s, c in batches:
                for o in range(f, last + 1):
                    model[o] = (s, c)
            if new_start != -1:
                start = new_start
            if start >= 0:
                model = {o: v for o, v in model.items() if o >= start}
        elif op[0] == "read":
            stored = h.shard.state(G, TOPIC, 0).leader_epoch
            rd = h.run(h.shard.read(G, TOPIC, 0, op[1]))
            if op[1] != -1 and op[1] < stored:
                assert rd.error == ErrorCode.FENCED_LEADER_EPOCH
            else:
                assert rd.error == ErrorCode.NONE
                assert expand(rd.batches) == model
                leader_epoch = max(leader_epoch, op[1])
        else:  # a stale or current leader writes nothing
            stored = h.shard.state(G, TOPIC, 0).leader_epoch
            records, err = h.shard.write(G, TOPIC, 0, 1, op[1], -1, [])
            fenced = op[1] != -1 and op[1] < stored
            assert (err == ErrorCode.FENCED_LEADER_EPOCH) == fenced
            assert (records == []) == fenced
        state = h.shard.state(G, TOPIC, 0)
        assert state.start_offset == start
        assert expand(state.state_batches) == model
        assert_canonical(state.state_batches)
        assert state.updates_since_snapshot <= every
    # kill -9: a fresh shard fed the encoded records ends up identical
    assert h.replayed().states == h.shard.states


@settings(max_examples=50, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20), batch_specs), max_size=25))
def test_replay_of_encoded_records_reproduces_many_keys(ops) -> None:
    h = Harness(snapshot_every=2)
    for p in range(4):
        h.run(h.shard.initialize(G, TOPIC, p, 1, 0))
    for p, base, specs in ops:
        if base == 20:
            h.run(h.shard.delete(G, TOPIC, p))
            h.run(h.shard.initialize(G, TOPIC, p, 1, 0))
        else:
            h.run(h.shard.write(G, TOPIC, p, 1, -1, base, build_batches(base, specs)))
    assert h.replayed().states == h.shard.states


# -- real log ------------------------------------------------------------------


def test_crash_and_replay_from_partition_log(tmp_path) -> None:
    clock = Clock()
    path = tmp_path / "__share_group_state-0"
    log = PartitionLog.open(path, LogConfig(segment_bytes=4096), clock, True)
    shard = ShareStateShard(0, snapshot_every=3, now_ms=clock)

    def persist(result: tuple[list[Record], object]) -> None:
        records, _ = result
        if not records:
            return
        encoded = [
            (SERDE.encode_key(r.name, r.key), SERDE.encode_value(r.name, r.value), [], clock.now) for r in records
        ]
        info = log.append(build_batch(encoded), now_ms=clock.now)
        for i, r in enumerate(records):
            shard.replay(CoordinatorRecord(SERDE.record_type(r.name), r.key, r.value, 0), info.first_offset + i)
        clock.now += 1

    for p in range(3):
        persist(shard.initialize(G, TOPIC, p, 1, -1))
    persist(shard.read(G, TOPIC, 0, 2))
    for i in range(20):
        p = i % 3
        persist(shard.write(G, TOPIC, p, 1, 2, i, [(i, i + 4, [AVAILABLE, ACKNOWLEDGED, ARCHIVED][i % 3], i % 4)], i))
    persist(shard.delete(G, TOPIC, 2))
    log.flush()
    assert len(shard.states) == 2

    # kill -9: no close; reopen as after an unclean shutdown and replay
    reopened = PartitionLog.open(path, LogConfig(segment_bytes=4096), clock, False)
    fresh = ShareStateShard(0, snapshot_every=3, now_ms=Clock())
    for header, view in reopened.scan(reopened.log_start_offset):
        for rec in header.records():
            fresh.replay(SERDE.decode(rec.key, rec.value), rec.offset)
        view.release()
    assert fresh.states == shard.states
    reopened.close()


def test_delete_after_snapshot_still_tombstones_older_updates() -> None:
    h = Harness(snapshot_every=1)
    h.run(h.shard.initialize(G, TOPIC, 0, 1, 0))
    h.run(h.shard.write(G, TOPIC, 0, 1, 0, 0, [(0, 1, AVAILABLE, 1)]))  # update
    records, _ = h.shard.write(G, TOPIC, 0, 1, 0, 0, [(0, 1, ACKNOWLEDGED, 1)])
    assert records[0].name == "ShareSnapshot"
    h.apply(records)
    # the update record still sits in the log under its own key: tombstone it too
    records, _ = h.shard.delete(G, TOPIC, 0)
    assert sorted(r.name for r in records) == ["ShareSnapshot", "ShareUpdate"]
    assert h.replayed().states == h.shard.states
