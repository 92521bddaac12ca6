"""AsyncShareAcquirer: a share-group member that acquires offset ranges and never decodes records.

    async with AsyncShareAcquirer({"bootstrap.servers": "h:9092", "group.id": "g"}) as a:
        a.subscribe(["jobs"])
        for rng in await a.poll(1000):        # AcquiredRange: topic, partition, first, last, delivery_count
            hand_out(rng)                     # someone else reads offsets first..last with Fetch
        ...
        a.acknowledge(rng, AcknowledgeType.ACCEPT)   # or a piece of it: AcquiredRange(..., first, mid, ...)

Why: ShareFetch answers carry the record batches *and* the AcquiredRecords
ranges (first offset, last offset, delivery count). A member that only
coordinates -- the Spark source's driver, whose executors fetch and decode
the records of the planned ranges themselves -- needs the ranges alone, and
decoding records it never looks at would cost it several microseconds each.
This is the share consumer with two parts swapped: ``RangeFetcher`` keeps
every request round of ``ShareFetcher`` (sessions, prefetch, acknowledgements
riding on fetches, RENEW, failures, close) and replaces only the decoding
step, turning each answer's ranges into ``AcquiredRange`` objects; the
``RangeTracker`` (client.share.ranges) holds them. The public API is the
share consumer's -- ``poll`` returns ranges, ``acknowledge`` takes ranges --
in explicit acknowledgement mode only.

The record bytes still arrive (the protocol has no way to ask for ranges
alone); they are dropped unread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shoal.client.core.config import build_config
from shoal.client.core.errors import ConfigError
from shoal.client.share.consumer import AsyncShareConsumer
from shoal.client.share.fetcher import ShareFetcher, _Raw
from shoal.client.share.ranges import AcquiredRange, RangeTracker, subtract_offsets
from shoal.protocol.constants import AcknowledgeType

__all__ = ["AcknowledgeType", "AcquiredRange", "AsyncShareAcquirer", "RangeFetcher"]


class RangeFetcher(ShareFetcher):
    """``ShareFetcher`` whose answers become acquired ranges, not records."""

    def _decode(self, raw: _Raw) -> None:
        tp = raw.tp
        ranges = subtract_offsets(raw.ranges, raw.held) if raw.held else sorted(raw.ranges)
        if tp not in self.assigned:  # revoked meanwhile: give them back
            self._tracker.add_pending(
                tp, (o for first, last, _ in ranges for o in range(first, last + 1)), AcknowledgeType.RELEASE
            )
            return
        deadline = raw.lock_deadline
        self._tracker.add_ranges(
            tp, [AcquiredRange(tp.topic, tp.partition, f, last, n, deadline) for f, last, n in ranges if last >= f]
        )


class AsyncShareAcquirer(AsyncShareConsumer):
    """A share consumer whose ``poll`` returns ``AcquiredRange`` objects (see module doc)."""

    _tracker_class = RangeTracker
    _fetcher_class = RangeFetcher

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        cfg = build_config("share_consumer", config, kwargs)
        for key in ("key.deserializer", "value.deserializer"):
            if cfg[key] is not None:
                raise ConfigError(key, "records are not decoded by an acquire-only consumer")
        if cfg["share.acknowledgement.mode"] != "explicit":
            raise ConfigError("share.acknowledgement.mode", "an acquire-only consumer acknowledges explicitly")
        super().__init__(cfg)
