"""WritePipeline, the sans-IO order of a share partition's state writes.

Which changes go in which write (coalescing, depth), the order writes settle in
whatever order they finish, failures (undone newest first, later writes in flight
failing with the first, queued changes going on), and the same with the real
share-partition core's Changes: after a failed pipelined write its records are
back where they were, with nothing committed that was not written. The asyncio
shell is exercised against real storage faults in
tests/e2e/test_share_write_pipeline_faults.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from shoal.broker.share.write_pipeline import WritePipeline
from shoal.protocol.constants import ACCEPT, ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, RELEASE

pytest.register_assert_rewrite("tests.support.share_partition")

from tests.support.share_partition import batches, check, make, states  # noqa: E402

EIO = 56  # any non-zero error code


@dataclass(eq=False)
class Recorded:
    """A change that records what the pipeline did to it (into a log shared by all)."""

    name: str
    log: list
    start_offset: int = -1
    batches: list = field(default_factory=list)
    delivery_complete_count: int = -1

    def commit(self) -> None:
        self.log.append(("commit", self.name))

    def undo(self) -> None:
        self.log.append(("undo", self.name))


def changes(log: list, *names: str, first: int = 0) -> list[Recorded]:
    """One change per name, each with its own 10-offset range."""
    return [
        Recorded(n, log, batches=[(first + 10 * i, first + 10 * i + 9, ACKNOWLEDGED, 1)]) for i, n in enumerate(names)
    ]


# -- grouping and depth --------------------------------------------------------------
def test_queued_changes_share_one_write_with_the_furthest_start_and_the_newest_count() -> None:
    log: list = []
    a, b, c = changes(log, "a", "b", "c")
    a.start_offset, b.start_offset, c.start_offset = 10, -1, 30
    c.delivery_complete_count = 7
    pipe = WritePipeline()
    for ch in (a, b, c):
        pipe.add(ch)
    g = pipe.next_group()
    assert g is not None and [p.change for p in g.items] == [a, b, c]
    assert g.start_offset == 30 and g.delivery_complete_count == 7
    assert g.batches == [(0, 29, ACKNOWLEDGED, 1)]  # overlaid in order, equal neighbours joined
    assert pipe.next_group() is None and pipe.queued == 0 and pipe.in_flight == 1


def test_a_write_holds_at_most_max_batches_ranges() -> None:
    log: list = []
    pipe = WritePipeline(max_batches=2)
    parts = [Recorded(str(i), log, batches=[(3 * i, 3 * i, ARCHIVED, i + 1)]) for i in range(5)]
    for ch in parts:
        pipe.add(ch)
    sizes = []
    while (g := pipe.next_group()) is not None:
        sizes.append(len(g.items))
        pipe.finished(g, 0)
    assert sizes == [2, 2, 1]


def test_the_next_write_is_sent_while_one_is_in_flight_and_the_third_waits() -> None:
    log: list = []
    a, b, c, d = changes(log, "a", "b", "c", "d")
    pipe = WritePipeline(depth=2)
    pipe.add(a)
    g1 = pipe.next_group()
    pipe.add(b)
    g2 = pipe.next_group()
    assert g1 is not None and g2 is not None and (g1.seq, g2.seq) == (1, 2)
    pipe.add(c)
    pipe.add(d)
    assert pipe.next_group() is None, "two writes in flight: the third waits"
    assert pipe.finished(g1, 0) == [g1] and log == [("commit", "a")]
    g3 = pipe.next_group()
    assert g3 is not None and [p.change for p in g3.items] == [c, d], "what queued meanwhile goes in one write"
    assert not pipe.idle


def test_writes_settle_in_order_whatever_order_they_finish_in() -> None:
    log: list = []
    a, b, c = changes(log, "a", "b", "c")
    pipe = WritePipeline(depth=3)
    groups = []
    for ch in (a, b, c):
        pipe.add(ch)
        groups.append(pipe.next_group())
    g1, g2, g3 = groups
    assert pipe.finished(g3, 0) == [] and pipe.finished(g2, 0) == []
    assert log == [], "nothing commits while an earlier write may still fail"
    assert pipe.finished(g1, 0) == [g1, g2, g3]
    assert log == [("commit", "a"), ("commit", "b"), ("commit", "c")]
    assert all(g.settled and g.error == 0 for g in groups) and pipe.idle


# -- failures ------------------------------------------------------------------------
def test_a_failed_write_undoes_it_and_every_later_write_newest_first() -> None:
    log: list = []
    a, b, c, d, e = changes(log, "a", "b", "c", "d", "e")
    pipe = WritePipeline(depth=2)
    pipe.add(a)
    pipe.add(b)
    g1 = pipe.next_group()
    pipe.add(c)
    pipe.add(d)
    g2 = pipe.next_group()
    pipe.add(e)  # queued behind the two writes in flight
    assert g1 is not None and g2 is not None
    settled = pipe.finished(g1, EIO)
    assert settled == [g1, g2], "waiters of both are answered, oldest first"
    assert log == [("undo", "d"), ("undo", "c"), ("undo", "b"), ("undo", "a")]
    assert g1.error == g2.error == EIO
    assert pipe.finished(g2, 0) == [], "the later write's own outcome, arriving after, changes nothing"
    assert log[-1] == ("undo", "a")
    g3 = pipe.next_group()
    assert g3 is not None and [p.change for p in g3.items] == [e], "queued changes go on in the next write"
    assert pipe.finished(g3, 0) == [g3] and log[-1] == ("commit", "e")


def test_a_later_write_that_failed_waits_for_the_earlier_one_then_is_undone_alone() -> None:
    log: list = []
    a, b = changes(log, "a", "b")
    pipe = WritePipeline(depth=2)
    pipe.add(a)
    g1 = pipe.next_group()
    pipe.add(b)
    g2 = pipe.next_group()
    assert g1 is not None and g2 is not None
    assert pipe.finished(g2, EIO) == [] and log == [], "answered only after the write before it"
    assert pipe.next_group() is None and pipe.in_flight == 2
    assert pipe.finished(g1, 0) == [g1, g2]
    assert log == [("commit", "a"), ("undo", "b")]
    assert (g1.error, g2.error) == (0, EIO)


def test_changes_nobody_waits_for_are_kept_when_their_write_fails() -> None:
    log: list = []
    ack, expiry = changes(log, "ack", "expiry")
    pipe = WritePipeline()
    pipe.add(ack, "waiter")
    pipe.add(expiry, None, undo=False)
    g = pipe.next_group()
    assert g is not None
    assert pipe.finished(g, EIO) == [g]
    assert log == [("commit", "expiry"), ("undo", "ack")]
    assert [p.waiter for p in g.items] == ["waiter", None]


# -- with the share-partition core ------------------------------------------------------
def _ack(sp, first: int, last: int, t: int = ACCEPT):
    errors, change = sp.acknowledge("m", [(first, last, [t])], 0)
    assert not any(errors) and change.pending
    return change


def test_pipelined_acknowledgements_commit_in_order_and_move_the_start() -> None:
    sp = make()
    sp.acquire("m", batches(10, 10, 10), 30, batch_optimized=True, now_ms=0)
    pipe = WritePipeline(depth=2)
    pipe.add(_ack(sp, 0, 9))
    g1 = pipe.next_group()
    pipe.add(_ack(sp, 10, 19))
    g2 = pipe.next_group()
    pipe.add(_ack(sp, 20, 29, RELEASE))
    assert g1 is not None and g2 is not None and pipe.next_group() is None
    assert g1.start_offset == 10 and g2.start_offset == -1, "a start behind a pending change is not reported"
    assert sp.start_offset == 0
    assert pipe.finished(g2, 0) == [] and sp.start_offset == 0
    assert pipe.finished(g1, 0) == [g1, g2]
    assert sp.start_offset == 20 and states(sp, 20, 20) == [(AVAILABLE, 1, None)]
    g3 = pipe.next_group()
    assert g3 is not None and pipe.finished(g3, 0) == [g3]
    check(sp)


def test_a_failed_pipelined_write_leaves_memory_as_it_was_before_either_change() -> None:
    sp = make()
    sp.acquire("m", batches(10, 10, 10), 30, batch_optimized=True, now_ms=0)
    before = states(sp, 0, 29)
    pipe = WritePipeline(depth=2)
    pipe.add(_ack(sp, 0, 9))
    g1 = pipe.next_group()
    pipe.add(_ack(sp, 10, 19))
    g2 = pipe.next_group()
    pipe.add(_ack(sp, 20, 29))  # made while both were pending
    assert g1 is not None and g2 is not None
    assert states(sp, 0, 29) == [(ACKNOWLEDGED, 1, None)] * 30  # what members see at once
    assert pipe.finished(g1, EIO) == [g1, g2]
    assert states(sp, 0, 19) == before[:20] == [(ACQUIRED, 1, "m")] * 20
    assert sp.start_offset == 0 and sp.pending_changes == 1
    g3 = pipe.next_group()
    assert g3 is not None and g3.start_offset == -1, "the start stays at the undone records"
    assert pipe.finished(g3, 0) == [g3]
    assert sp.start_offset == 0 and states(sp, 20, 29) == [(ACKNOWLEDGED, 1, None)] * 10
    check(sp)
