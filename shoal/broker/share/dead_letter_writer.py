"""Writing share groups' dead-letter records (KIP-1191) onto the broker's own partitions.

The share-partition manager calls :meth:`DeadLetterWriter.archive` with the
ARCHIVING ranges of a share partition -- right after the write that made them
ARCHIVING is durable, and again for those found ARCHIVING when the share
partition loads (a crash came between that write and the copy). It checks the
group's topic as Kafka does (:func:`dead_letter.refusal`), creates it when the
broker allows, appends the records (read back from the source log only when
the group copies key and value), and then gives every range back to the core
to become ARCHIVED, whether the copy was made or not: the copy is best effort,
the archive is not.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.share.dead_letter import Archived, dead_letter_batches, refusal
from shoal.protocol.records import BatchHeader, iter_batches

__all__ = ["HOLD_POINT", "DeadLetterWriter"]

log = logging.getLogger("shoal.share.dead_letter")

HOLD_POINT = "share.dead_letter"  # faults.hold(): records stay ARCHIVING, uncopied (tests of the re-drive)
READ_BYTES = 1 << 20  # source log read per step when copying records (Kafka reads 1 MiB too)
OPT_IN = "errors.deadletterqueue.group.enable"


class DeadLetterWriter:
    def __init__(self, broker: Any) -> None:
        self.broker = broker

    def held(self) -> bool:
        return self.broker.faults.held(HOLD_POINT)

    def archive(self, gid: str, source: Any, ranges: Sequence[Archived], settings: Any) -> int:
        """Copy the archived ranges of partition `source` to group `gid`'s dead-letter topic;
        `settings(name)` reads the group's configs. Returns the records written."""
        if not ranges:
            return 0
        name = settings("errors.deadletterqueue.topic.name")
        target = self._target(gid, name)
        if target is None:
            return 0
        copy = settings("errors.deadletterqueue.copy.record.enable")
        dest = target.partitions[source.index % len(target.partitions)]
        written = 0
        for archived in ranges:
            try:
                for batch in self._batches(gid, source, archived, copy, dest.settings["max.message.bytes"]):
                    dest.append(batch, self.broker.clock.now_ms())
                    written += BatchHeader.read(batch).records_count
                    self.broker.on_append(dest)
            except ErrorAnswer as e:
                log.warning("share group %s: dead-letter append to %s failed: %s", gid, name, e.message or e.code)
        if written:
            self.broker.stats.share_counts(gid, source.topic.name).dead_lettered += written
        return written

    def _batches(self, gid: str, source: Any, archived: Archived, copy: bool, max_bytes: int) -> Any:
        name, index = source.topic.name, source.index
        if not copy:
            yield from dead_letter_batches(gid, name, index, archived, self.broker.clock.now_ms(), max_bytes=max_bytes)
            return
        first = archived.first_offset
        while first <= archived.last_offset:
            part = Archived(first, archived.last_offset, archived.delivery_count, archived.message)
            data = None
            if first >= source.log_start_offset:
                try:
                    read = source.read(first, READ_BYTES, read_committed=False, min_one=True)
                    data = read.records
                except ErrorAnswer:
                    data = None
            covered = _last_offset(data)
            if covered is not None and covered >= first:
                part.last_offset = min(part.last_offset, covered)
            now = self.broker.clock.now_ms()
            yield from dead_letter_batches(gid, name, index, part, now, data, max_bytes=max_bytes)
            first = part.last_offset + 1

    def _target(self, gid: str, name: str) -> Any:
        """The topic that takes `gid`'s dead-letter records, created if allowed; None (logged) if none may."""
        config = self.broker.config
        topic = self.broker.topics.get(name) if name else None
        opted_in = topic is not None and bool(topic.partitions) and topic.partitions[0].settings.get(OPT_IN) is True
        problem = refusal(
            name,
            exists=topic is not None,
            opted_in=opted_in,
            auto_create=config.get("errors.deadletterqueue.auto.create.topics.enable"),
            prefix=config.get("errors.deadletterqueue.topic.name.prefix"),
        )
        if problem is not None:
            log.warning("share group %s: records archived without a dead-letter copy: %s", gid, problem)
            return None
        if topic is not None:
            return topic
        overrides = {OPT_IN: "true", "message.timestamp.type": "CreateTime"}
        try:
            topic = self.broker.topics.create(name, config.get("num.partitions"), overrides)
        except ErrorAnswer as e:
            log.warning("share group %s: creating dead-letter topic %s failed: %s", gid, name, e.message or e.code)
            return None
        log.info("share group %s: created dead-letter topic %s", gid, name)
        return topic


def _last_offset(data: Any) -> int | None:
    """The last offset held by raw log batches (None when there are none)."""
    if data is None or len(data) == 0:
        return None
    last = None
    for header, _ in iter_batches(data, allow_partial=True):
        last = header.last_offset
    return last
