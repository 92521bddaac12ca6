"""Dead-letter copies of share-group records (KIP-1191).

A share group may name a dead-letter topic (group config
errors.deadletterqueue.topic.name). A record that ends ARCHIVED because a
consumer REJECTed it, or because it reached share.delivery.count.limit, is
then copied onto that topic once its state change is durable, with context
headers saying where it came from and why; the original key and value come
along only when errors.deadletterqueue.copy.record.enable is true (the
headers alone identify the record).

The copy is best effort and after the fact: the archived state is already
persisted and is what the share group relies on; a missing dead-letter topic
is logged, not fatal. Offsets archived by a GAP acknowledgement hold no
record and produce no copy.

This module only builds the dead-letter batch from records read back from
the source log (`dead_letter_batch`); the share-partition shell decides when
and appends it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shoal.protocol.records import build_batch, iter_batches

__all__ = ["HEADER_PREFIX", "Reason", "dead_letter_batch"]

HEADER_PREFIX = "__dlq.errors."


class Reason:
    REJECTED = "REJECTED"
    DELIVERY_LIMIT = "DELIVERY_COUNT_LIMIT_REACHED"


@dataclass(slots=True)
class Archived:
    first_offset: int
    last_offset: int
    delivery_count: int
    reason: str


def dead_letter_batch(
    group_id: str,
    topic: str,
    partition: int,
    log_data: Any,
    archived: Iterable[Archived],
    *,
    copy_record: bool,
    now_ms: int,
) -> bytes | None:
    """One batch of dead-letter records for the `archived` offsets found in `log_data`.

    `log_data` is raw log batches covering those offsets (control batches are
    skipped). Returns None when none of the offsets holds a record.
    """
    wanted = sorted(archived, key=lambda a: a.first_offset)
    if not wanted:
        return None
    out = []
    for header, _ in iter_batches(log_data, allow_partial=True):
        if header.is_control or header.last_offset < wanted[0].first_offset:
            continue
        if header.base_offset > wanted[-1].last_offset:
            break
        for rec in header.records():
            hit = next((a for a in wanted if a.first_offset <= rec.offset <= a.last_offset), None)
            if hit is None:
                continue
            headers = [
                (HEADER_PREFIX + "group.id", group_id.encode()),
                (HEADER_PREFIX + "topic", topic.encode()),
                (HEADER_PREFIX + "partition", str(partition).encode()),
                (HEADER_PREFIX + "offset", str(rec.offset).encode()),
                (HEADER_PREFIX + "delivery.count", str(hit.delivery_count).encode()),
                (HEADER_PREFIX + "reason", hit.reason.encode()),
            ]
            if copy_record:
                out.append((rec.key, rec.value, [*headers, *rec.headers], rec.timestamp))
            else:
                out.append((None, None, headers, now_ms))
    return build_batch(out) if out else None
