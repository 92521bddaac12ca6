"""Dead-letter records of share groups (KIP-1191, Kafka 4.4): what is written and where. Sans-IO.

A share group may name a dead-letter topic (group config
errors.deadletterqueue.topic.name). A record a consumer REJECTs, or that
reaches share.delivery.count.limit, then goes ARCHIVING (persisted) instead of
ARCHIVED; the share-partition shell writes one dead-letter record per offset
and only then makes it ARCHIVED, so a crash in between re-drives the copy when
the share partition loads again (a record may then be copied twice; none is
lost). The copy is best effort: a topic that may not serve, or a failed append,
is logged and the records are archived without it.

Each dead-letter record carries Kafka's context headers, every value a UTF-8
string: ``__dlq.errors.topic``, ``.partition``, ``.offset``, ``.group``,
``.delivery.count`` and ``.message`` (Kafka's cause text). Its timestamp is the
time of the copy; key and value are the original's only when
errors.deadletterqueue.copy.record.enable is true (the original headers are
not copied). It goes to partition ``source partition % partitions``.

Which topic may serve, checked as Kafka does before every copy
(:func:`refusal`): the name must not start with ``__``; a topic that exists
must have errors.deadletterqueue.group.enable=true (its owner's opt-in: a
broker writes anywhere, so a consumer must not be able to make it write onto a
business topic); a missing topic is created only with the broker's
errors.deadletterqueue.auto.create.topics.enable; and with a non-empty
errors.deadletterqueue.topic.name.prefix (``dlq.`` by default) the name must
start with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from shoal.protocol.constants import REJECT
from shoal.protocol.records import build_batch, iter_batches

__all__ = [
    "CLIENT_REJECT",
    "DELIVERY_COUNT_EXCEEDED",
    "HEADERS",
    "HEADER_PREFIX",
    "Archived",
    "classify",
    "dead_letter_batches",
    "refusal",
    "rejected_ranges",
]

HEADER_PREFIX = "__dlq.errors."
HEADERS = (
    "__dlq.errors.topic",
    "__dlq.errors.partition",
    "__dlq.errors.offset",
    "__dlq.errors.group",
    "__dlq.errors.delivery.count",
    "__dlq.errors.message",
)
# Kafka's cause texts (the __dlq.errors.message header)
CLIENT_REJECT = "Offset rejected by client."
DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."

BATCH_RECORDS = 500  # dead-letter records per appended batch


@dataclass(slots=True)
class Archived:
    """Offsets of one source partition going to the dead-letter topic."""

    first_offset: int
    last_offset: int
    delivery_count: int
    message: str


def refusal(name: str, *, exists: bool, opted_in: bool, auto_create: bool, prefix: str) -> str | None:
    """Why topic `name` may not take a group's dead-letter records now (None: it may), in Kafka's order."""
    if not name:
        return "no dead-letter topic is configured"
    if name.startswith("__"):
        return f"the dead-letter topic {name} must not start with __"
    if exists and not opted_in:
        return f"topic {name} does not have errors.deadletterqueue.group.enable=true"
    if not exists and not auto_create:
        return f"topic {name} does not exist and errors.deadletterqueue.auto.create.topics.enable is false"
    if prefix and not name.startswith(prefix):
        return f"topic {name} does not start with errors.deadletterqueue.topic.name.prefix {prefix!r}"
    return None


def rejected_ranges(batches: Iterable[Any]) -> list[tuple[int, int]]:
    """The offsets acknowledgement batches (first, last, types) REJECT, as (first, last) runs."""
    out: list[tuple[int, int]] = []
    for first, last, types in batches:
        if len(types) == 1:
            if types[0] == REJECT:
                out.append((first, last))
            continue
        run = None
        for i, t in enumerate(types):
            if t == REJECT:
                run = (run[0] if run else first + i, first + i)
            elif run:
                out.append(run)
                run = None
        if run:
            out.append(run)
    return out


def classify(ranges: Iterable[tuple[int, int, int]], rejects: Sequence[tuple[int, int]], limit: int) -> list[Archived]:
    """Split ARCHIVING (first, last, delivery count) ranges by cause: offsets a consumer REJECTed
    (`rejects`, as noted when the acknowledgement came) are CLIENT_REJECT; the others reached the
    delivery limit. Without a note (a re-drive after a restart) the count decides."""
    out: list[Archived] = []
    for first, last, count in ranges:
        other = DELIVERY_COUNT_EXCEEDED if count >= limit else CLIENT_REJECT
        cur = first
        for a, b in sorted(rejects):
            if b < cur or a > last:
                continue
            if a > cur:
                out.append(Archived(cur, a - 1, count, other))
            hi = min(b, last)
            out.append(Archived(max(a, cur), hi, count, CLIENT_REJECT))
            cur = hi + 1
            if cur > last:
                break
        if cur <= last:
            out.append(Archived(cur, last, count, other))
    return out


def _originals(log_data: Any, first: int, last: int) -> dict[int, tuple[Any, Any]]:
    """(key, value) of the records of [first, last] found in raw log batches (control batches skipped)."""
    found: dict[int, tuple[Any, Any]] = {}
    for header, _ in iter_batches(log_data, allow_partial=True):
        if header.is_control or header.last_offset < first:
            continue
        if header.base_offset > last:
            break
        for rec in header.records():
            if first <= rec.offset <= last:
                found[rec.offset] = (rec.key, rec.value)
    return found


def dead_letter_batches(
    group_id: str,
    topic: str,
    partition: int,
    archived: Archived,
    now_ms: int,
    log_data: Any = None,
    *,
    max_bytes: int = 1 << 20,
) -> Iterator[bytes]:
    """The dead-letter batches of one archived range: a record per offset, with the original key
    and value when `log_data` (raw log batches covering the range) is given and holds it. A batch
    is kept under `max_bytes` (the topic's max.message.bytes) unless one record alone is larger."""
    originals = _originals(log_data, archived.first_offset, archived.last_offset) if log_data is not None else {}
    fixed = (
        topic.encode(),
        str(partition).encode(),
        None,
        group_id.encode(),
        str(archived.delivery_count).encode(),
        archived.message.encode(),
    )
    out: list[tuple[Any, Any, list, int]] = []
    for offset in range(archived.first_offset, archived.last_offset + 1):
        values = (*fixed[:2], str(offset).encode(), *fixed[3:])
        key, value = originals.get(offset, (None, None))
        out.append((key, value, list(zip(HEADERS, values, strict=True)), now_ms))
        if len(out) >= BATCH_RECORDS:
            yield from _fitted(out, max_bytes)
            out = []
    if out:
        yield from _fitted(out, max_bytes)


def _fitted(records: list, max_bytes: int) -> Iterator[bytes]:
    """`records` as one batch, or halved until each part fits in `max_bytes`."""
    batch = build_batch(records)
    if len(batch) <= max_bytes or len(records) == 1:
        yield batch
        return
    half = len(records) // 2
    yield from _fitted(records[:half], max_bytes)
    yield from _fitted(records[half:], max_bytes)
