"""The shape rules of one partition's acknowledgement batches (ShareFetch and ShareAcknowledge).

Why a module of its own: Kafka checks these rules in its request handler, before any share
partition is loaded or locked, and answers a partition that breaks one with INVALID_REQUEST in
that partition's acknowledgement error (the request itself still succeeds; other partitions are
applied). Keeping the rules in one pure function lets both handlers call it, lets the Hypothesis
tests (tests/unit/test_share_ack_batches.py) state them without a broker, and leaves the share
partition's own checks (offsets it actually holds) to ``SharePartition.acknowledge``.

The rules, in the order they are tested (the first broken one names the problem):

* a batch's first offset is above its last offset;
* a batch starts at or below the previous batch's last offset (overlapping or out of order).
  Kafka's handler compares with ``<`` against the previous last offset, so it lets two batches
  share one boundary offset; Shoal refuses that too, since one offset would be acknowledged
  twice in one request (stricter, never looser);
* the acknowledge types array is empty;
* it holds more than one type and its length is not last - first + 1 (one type per offset);
* a type is not a known acknowledge type; RENEW (4) counts as known only when the request set
  IsRenewAck (ShareFetch / ShareAcknowledge v2, KIP-1222).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from shoal.protocol.constants import ACCEPT, GAP, REJECT, RELEASE, RENEW

__all__ = ["ack_batches_problem", "ack_fields", "coalesce", "type_runs"]

# (first_offset, last_offset, delivery_state, delivery_count), as the share coordinator stores it.
Batch = tuple[int, int, int, int]

_PLAIN_TYPES = frozenset((GAP, ACCEPT, RELEASE, REJECT))
_WITH_RENEW = _PLAIN_TYPES | {RENEW}


def ack_batches_problem(batches: Iterable[tuple[int, int, Sequence[int]]], *, renew_ack: bool) -> str | None:
    """None when ``batches`` (first, last, types) of one partition are well formed, else why not.

    ``renew_ack`` is the request's IsRenewAck flag (False before version 2)."""
    known = _WITH_RENEW if renew_ack else _PLAIN_TYPES
    prev_last: int | None = None
    for first, last, types in batches:
        if first > last:
            return f"Batch first offset {first} is above its last offset {last}."
        if prev_last is not None and first <= prev_last:
            return f"Batch starting at {first} overlaps or precedes the batch ending at {prev_last}."
        if not types:
            return f"Batch {first}-{last} has no acknowledge types."
        if len(types) != 1 and len(types) != last - first + 1:
            return f"Batch {first}-{last} has {len(types)} acknowledge types; it needs 1 or {last - first + 1}."
        for t in types:
            if t not in known:
                if t == RENEW:
                    return "RENEW acknowledgements need IsRenewAck."
                return f"Unknown acknowledge type {t}."
        prev_last = last
    return None


def ack_fields(raw: Any) -> tuple[int, int, list[int]]:
    """(first, last, types) of a batch given as a tuple or as a message object."""
    if isinstance(raw, tuple | list):
        first, last, types = raw
    else:
        first, last, types = raw.first_offset, raw.last_offset, raw.acknowledge_types
    return int(first), int(last), [int(t) for t in types]


def type_runs(first: int, types: Sequence[int], a: int, b: int) -> Iterator[tuple[int, int, int]]:
    """Maximal runs of equal acknowledge type within [a, b] of a batch starting at `first`."""
    if len(types) == 1:
        yield a, b, types[0]
        return
    run_start, t = a, types[a - first]
    for o in range(a + 1, b + 1):
        if types[o - first] != t:
            yield run_start, o - 1, t
            run_start, t = o, types[o - first]
    yield run_start, b, t


def coalesce(batches: list[Batch]) -> list[Batch]:
    """Sorted ranges (first, last, state, count), adjacent ones that agree joined."""
    out: list[Batch] = []
    for b in sorted(batches):
        if out and out[-1][1] + 1 == b[0] and out[-1][2:] == b[2:]:
            out[-1] = (out[-1][0], b[1], b[2], b[3])
        else:
            out.append(b)
    return out
