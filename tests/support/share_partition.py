"""Helpers of the SharePartition tests (imported by tests/unit/test_share_partition*.py only).

The SharePartition tests are split over three modules to keep each under the
project's 800-line rule; what they share lives here. Clocks are plain ints.
"Log batches" (``B``, ``batches``) are tiny stand-ins for record batch headers
(base/last offset, control flag, producer id). ``make`` builds an initialized
partition; ``check()`` verifies the internal invariants after every step:
ranges ordered and disjoint, locks exactly on ACQUIRED offsets, the start
offset as far as it can go, next fetch offset, lock deadline and completed
count equal to brute force. ``ack`` acknowledges, asserts no error, commits
and checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.broker.share.in_flight import InFlightBatch
from shoal.broker.share.share_partition import SharePartition
from shoal.protocol.constants import ACKNOWLEDGED, ACQUIRED, ARCHIVED, ARCHIVING, AVAILABLE
from shoal.protocol.errors import ErrorCode

NONE = ErrorCode.NONE
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
INVALID_RECORD_STATE = ErrorCode.INVALID_RECORD_STATE
LOCK = 1000


@dataclass(frozen=True)
class B:
    """A log batch header as the shell passes it."""

    base_offset: int
    last_offset: int
    is_control: bool = False
    producer_id: int = -1
    is_transactional: bool = False


def batches(*sizes: int, start: int = 0) -> list[B]:
    out, o = [], start
    for n in sizes:
        out.append(B(o, o + n - 1))
        o += n
    return out


def make(start: int = 0, persisted=(), *, cap: int = 2000, limit: int = 5, log_start: int = 0, hw: int = 10**9):
    sp = SharePartition("g", "topic", 0, max_in_flight_records=cap, delivery_count_limit=limit, lock_duration_ms=LOCK)
    sp.initialize(3, start, list(persisted), log_start_offset=log_start, high_watermark=hw)
    return sp


def snap(sp: SharePartition) -> tuple:
    """Everything observable plus the lock and pending marks of each run."""
    runs = tuple(
        (a, b, s, c, m, d, id(p)) for u in sp._batches.values() for a, b, s, c, m, d, p in u.runs(u.first, u.last)
    )
    return (sp.start_offset, sp.end_offset, runs, sp.next_fetch_offset(), sp.next_lock_deadline(), sp.pending_changes)


def states(sp: SharePartition, first: int, last: int) -> list:
    return [sp.state_of(o) for o in range(first, last + 1)]


def check(sp: SharePartition) -> None:
    """Structural invariants and brute-force agreement of the derived values."""
    start, end = sp.start_offset, sp.end_offset
    assert start <= end + 1
    prev: InFlightBatch | None = None
    deadlines, per_offset = [], {}
    for key, u in sp._batches.items():
        assert key == u.first <= u.last
        assert prev is None or prev.last < u.first
        prev = u
        if u.offsets is not None:
            o = u.offsets
            assert len(o.states) == len(o.counts) == len(o.members) == len(o.deadlines) == len(o.pending) == u.size
            assert o.done == o.states.count(ACKNOWLEDGED) + o.states.count(ARCHIVED), "terminal count drifted"
        if u.last < start:
            assert not u.all_done(), "a finished range below the start was not dropped"
        for a, b, s, c, m, d, p in u.runs(u.first, u.last):
            assert s in (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED)
            assert (s == ACQUIRED) == (d != -1) == (m is not None)
            assert 0 <= c <= sp.delivery_count_limit
            if p is not None:
                assert p in sp._outstanding and s != ACQUIRED
            if s == ACQUIRED:
                deadlines.append(d)
            if a < start:
                assert not (s == AVAILABLE and p is None), "an available record below the start"
            for o in range(a, b + 1):
                per_offset[o] = (s, p)
    assert sp._advance(None) == start, "start offset could move further"
    assert sp.next_lock_deadline() == (min(deadlines) if deadlines else None)
    assert sp.delivery_complete_count() == sum(
        1 for o, (s, _p) in per_offset.items() if start <= o <= end and s in (ACKNOWLEDGED, ARCHIVED)
    )
    gap = sp._gap_start if sp._gap_active() else None
    expected = end + 1
    for o in range(start, end + 1):
        s_p = per_offset.get(o)
        if (s_p is None and gap is not None and o >= gap) or s_p == (AVAILABLE, None):
            expected = o
            break
    assert sp.next_fetch_offset() == expected


def ack(sp, member, *batches_, now=0, commit=True):
    errors, change = sp.acknowledge(member, list(batches_), now)
    assert errors == [NONE] * len(batches_), errors
    if commit:
        change.commit()
    check(sp)
    return change
