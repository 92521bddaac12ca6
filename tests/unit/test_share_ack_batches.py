"""The shape rules of acknowledgement batches (shoal/broker/share/ack_batches.py), stated as
properties: a well-formed list of batches passes, and each kind of damage is caught whatever
else the batches hold."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shoal.broker.share.ack_batches import ack_batches_problem
from shoal.protocol.constants import ACCEPT, GAP, REJECT, RELEASE, RENEW

PLAIN = [GAP, ACCEPT, RELEASE, REJECT]


@st.composite
def good_batches(draw, renew: bool = False):
    """Ordered, disjoint batches, each with one type or one type per offset."""
    kinds = [*PLAIN, RENEW] if renew else PLAIN
    out = []
    nxt = draw(st.integers(0, 1 << 40))
    for _ in range(draw(st.integers(0, 6))):
        first = nxt + draw(st.integers(0, 5))
        last = first + draw(st.integers(0, 7))
        if draw(st.booleans()):
            types = [draw(st.sampled_from(kinds))]
        else:
            types = draw(st.lists(st.sampled_from(kinds), min_size=last - first + 1, max_size=last - first + 1))
        out.append((first, last, types))
        nxt = last + 1
    return out


def _insert(batches, at, item):
    return [*batches[:at], item, *batches[at:]]


@given(good_batches(), st.booleans())
def test_well_formed_batches_pass(batches, renew) -> None:
    assert ack_batches_problem(batches, renew_ack=renew) is None


@given(good_batches(renew=True))
def test_renew_passes_only_with_is_renew_ack(batches) -> None:
    assert ack_batches_problem(batches, renew_ack=True) is None
    has_renew = any(RENEW in t for _, _, t in batches)
    assert (ack_batches_problem(batches, renew_ack=False) is not None) == has_renew


@given(good_batches(), st.data())
def test_first_above_last_is_refused(batches, data) -> None:
    at = data.draw(st.integers(0, len(batches)))
    start = batches[at - 1][1] + 1 if at else 0
    first = start + data.draw(st.integers(1, 9))
    bad = (first, first - data.draw(st.integers(1, 3)), [ACCEPT])
    # keep the bad batch ordered against its neighbours so only this rule can fire
    tail = [(f + 100, last + 100, t) for f, last, t in batches[at:]]
    assert "above its last" in ack_batches_problem([*batches[:at], bad, *tail], renew_ack=False)


@given(good_batches().filter(lambda b: len(b) >= 1), st.data())
def test_overlapping_or_backward_batches_are_refused(batches, data) -> None:
    i = data.draw(st.integers(0, len(batches) - 1))
    first, last, _ = batches[i]
    # a batch that starts inside (or before the end of) batch i, placed right after it
    start = data.draw(st.integers(max(0, first - 3), last))
    bad = (start, start + data.draw(st.integers(0, 4)), [ACCEPT])
    problem = ack_batches_problem(_insert(batches, i + 1, bad), renew_ack=False)
    assert problem is not None and "overlaps" in problem


@given(good_batches(), st.data())
def test_empty_types_are_refused(batches, data) -> None:
    at = data.draw(st.integers(0, len(batches)))
    start = batches[at - 1][1] + 1 if at else 0
    tail = [(f + 100, last + 100, t) for f, last, t in batches[at:]]
    bad = (start, start + data.draw(st.integers(0, 5)), [])
    assert "no acknowledge types" in ack_batches_problem([*batches[:at], bad, *tail], renew_ack=False)


@given(good_batches(), st.data())
def test_types_length_neither_one_nor_the_range_is_refused(batches, data) -> None:
    at = data.draw(st.integers(0, len(batches)))
    start = batches[at - 1][1] + 1 if at else 0
    span = data.draw(st.integers(1, 8))
    n = data.draw(st.integers(2, 12).filter(lambda k: k != span))
    bad = (start, start + span - 1, [ACCEPT] * n)
    tail = [(f + 100, last + 100, t) for f, last, t in batches[at:]]
    assert "acknowledge types" in ack_batches_problem([*batches[:at], bad, *tail], renew_ack=False)


@given(good_batches(), st.integers(-128, 127).filter(lambda t: t not in (0, 1, 2, 3, 4)), st.booleans())
def test_unknown_types_are_refused(batches, t, renew) -> None:
    start = batches[-1][1] + 1 if batches else 0
    assert "Unknown acknowledge type" in ack_batches_problem([*batches, (start, start, [t])], renew_ack=renew)
