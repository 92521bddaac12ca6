"""Key-ordered delivery (shoal.share.key.ordering) of the sans-IO share partition.

Invariants, checked after every step of random runs (Hypothesis): never two records of one key
ACQUIRED at once; a record of a key is acquired only when every earlier record of that key is
done (so each key's records go out, and are accepted, in offset order, and a released record
goes out again before its key's later records); records without a key are not held back; and a
group that keeps consuming finishes everything."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.register_assert_rewrite("tests.support.share_partition")

from shoal.broker.share.key_order import KeyOrder  # noqa: E402
from shoal.protocol.constants import (  # noqa: E402
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    REJECT,
    RELEASE,
)
from shoal.protocol.records import build_batch, iter_batches  # noqa: E402
from tests.support.share_partition import batches, make  # noqa: E402

DONE = (ACKNOWLEDGED, ARCHIVED)


def ordered(keys: dict[int, bytes | None], **kw):
    sp = make(**kw)
    sp.key_order = KeyOrder(decode=lambda h: [keys.get(o) for o in range(h.base_offset, h.last_offset + 1)])
    return sp


def take(sp, member, log, n=100, now=0, optimized=False):
    out = sp.acquire(member, log, n, now_ms=now, batch_optimized=optimized)
    return [o for r in out for o in range(r.first_offset, r.last_offset + 1)]


def done(sp, o) -> bool:
    s = sp.state_of(o)
    return o < sp.start_offset if s is None else s[0] in DONE


def accept(sp, member, offsets, t=ACCEPT):
    for o in offsets:
        errors, change = sp.acknowledge(member, [(o, o, [t])], 0)
        assert not any(errors), errors
        change.commit()


def test_one_record_per_key_in_flight_in_offset_order() -> None:
    keys = {0: b"a", 1: b"b", 2: b"a", 3: None, 4: b"a", 5: b"b"}
    sp = ordered(keys)
    log = batches(6)
    assert take(sp, "m1", log) == [0, 1, 3]
    assert take(sp, "m2", log) == []  # 2, 4 wait for 0; 5 for 1
    assert sp.state_of(2) == (AVAILABLE, 0, None) and sp.end_offset == 5
    assert not sp.acquirable(6)
    accept(sp, "m1", [1])
    assert take(sp, "m2", log) == [5]
    accept(sp, "m1", [0])
    assert take(sp, "m2", log) == [2]
    accept(sp, "m2", [2])
    assert take(sp, "m3", log) == [4]


def test_released_record_goes_before_its_keys_later_records() -> None:
    keys = {0: b"k", 1: b"k", 2: b"k"}
    sp = ordered(keys)
    log = batches(3)
    assert take(sp, "m1", log) == [0]
    accept(sp, "m1", [0], RELEASE)
    assert take(sp, "m2", log) == [0]
    assert sp.state_of(0) == (ACQUIRED, 2, "m2")
    accept(sp, "m2", [0], REJECT)  # archived: done, the key moves on
    assert take(sp, "m1", log) == [1]


def test_lock_timeout_keeps_the_key_order() -> None:
    keys = {0: b"k", 1: b"k"}
    sp = ordered(keys)
    log = batches(2)
    assert take(sp, "m1", log, now=0) == [0]
    sp.expire_locks(10**6).commit()
    assert take(sp, "m2", log, now=10**6) == [0]


def test_batch_optimized_mode_acquires_only_the_admitted_records() -> None:
    keys = {o: b"k%d" % (o % 3) for o in range(9)}
    sp = ordered(keys)
    assert take(sp, "m", batches(9), optimized=True) == [0, 1, 2]


def test_restart_rebuilds_the_order_from_the_log() -> None:
    """Nothing of key ordering is persisted: a reloaded partition re-reads keys as it scans."""
    keys = {0: b"k", 1: b"x", 2: b"k"}
    sp = ordered(keys)
    log = batches(3)
    assert take(sp, "m", log) == [0, 1]
    accept(sp, "m", [0], RELEASE)  # persisted: 0 AVAILABLE (count 1); 1 ACQUIRED is not persisted
    persisted = [(a, b, s, c) for a, b, s, c, _m in sp.ranges() if s != ACQUIRED]
    sp.initialize(4, sp.start_offset, persisted, log_start_offset=0, high_watermark=3)
    assert take(sp, "n", log) == [0, 1]  # 2 waits behind 0 again
    accept(sp, "n", [0])
    assert take(sp, "n", log) == [2]


def test_real_batches_decode_keys() -> None:
    data = build_batch([(k, b"v", [], 0) for k in (b"a", b"a", None, b"b")], base_offset=0)
    headers = [h for h, _ in iter_batches(bytes(data))]
    sp = make()
    sp.key_order = KeyOrder()
    got = sp.acquire("m", headers, 10, now_ms=0, batch_optimized=False)
    assert [(r.first_offset, r.last_offset) for r in got] == [(0, 0), (2, 3)]


OPS = st.lists(
    st.tuples(
        st.sampled_from(["fetch", "ack", "expire", "leave"]),
        st.integers(0, 7),  # member
        st.integers(1, 12),  # max records / how many to acknowledge
        st.sampled_from([ACCEPT, ACCEPT, RELEASE, REJECT]),
        st.booleans(),  # batch optimized
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key_of=st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=1, max_size=40),
    ops=OPS,
)
def test_random_runs_keep_the_key_invariants(key_of, ops) -> None:
    keys = {o: None if k is None else b"%d" % k for o, k in enumerate(key_of)}
    n = len(key_of)
    sp = ordered(keys, limit=4)
    log = batches(*([3] * (n // 3) + ([n % 3] if n % 3 else [])))
    now = 0
    held: dict[str, list[int]] = {}

    def invariants(newly: list[int]) -> None:
        acquired = [o for o in range(n) if (s := sp.state_of(o)) is not None and s[0] == ACQUIRED]
        per_key = [keys[o] for o in acquired if keys[o] is not None]
        assert len(per_key) == len(set(per_key)), "two records of one key in flight"
        for o in newly:
            if keys[o] is not None:
                earlier = [p for p in range(o) if keys[p] == keys[o]]
                assert all(done(sp, p) for p in earlier), f"{o} acquired before an earlier record of its key"
        # the next fetch offset (remembered between scans) is the first record ready now, by brute force
        ready = [
            o
            for o in range(sp.start_offset, sp.end_offset + 1)
            if (s := sp.state_of(o)) is not None
            and s[0] == AVAILABLE
            and (keys[o] is None or all(done(sp, p) for p in range(o) if keys[p] == keys[o]))
        ]
        assert sp.next_fetch_offset() == (ready[0] if ready else sp.end_offset + 1)

    for op, m, k, t, optimized in ops:
        member = f"m{m}"
        now += 7
        if op == "fetch":
            got = take(sp, member, log, n=k, now=now, optimized=optimized)
            held.setdefault(member, []).extend(got)
            invariants(got)
        elif op == "ack":
            # what the member holds now: a record it fetched twice (its lock ran out in between) once,
            # and none that is gone from the window (another member accepted it after the expiry)
            mine = [
                o
                for o in dict.fromkeys(held.get(member, []))
                if (s := sp.state_of(o)) is not None and s[0] == ACQUIRED and s[2] == member
            ]
            accept(sp, member, mine[:k], t)
            held[member] = [o for o in held.get(member, []) if o not in mine[:k]]
        elif op == "expire":
            sp.expire_locks(now + 1000).commit()
            now += 1000
        else:
            sp.release_member(member).commit()
            held.pop(member, None)
        invariants([])
    # liveness: one member consuming and accepting everything finishes the partition
    for _ in range(4 * n + 10):
        sp.expire_locks(now + 10**6).commit()
        now += 10**6
        got = take(sp, "last", log, n=5, now=now)
        invariants(got)
        accept(sp, "last", got)
    assert all(done(sp, o) for o in range(n))
