"""Planning a batch read: offset options to exact per-partition ranges, ranges to Spark tasks.

Why sans-IO: the rules are Spark's Kafka-source rules (earliest/latest,
-2/-1 in JSON, timestamps with a strategy for "no such record", start after
end, offsets below the log start) and they decide which records a backfill
returns, so they are plain functions over numbers the planner looked up with
ListOffsets, tested without a broker. ``split_ranges`` decides the
parallelism: one task per topic-partition by default, more with
``minPartitions`` (proportional to each range's size, as Spark computes it)
or ``maxRecordsPerPartition``. ``split_acquired`` does the same for a stream
micro-batch read on the executors: the share group's acquired ranges.

Ranges are half-open, ``[start, end)``: ``end`` is the first offset *not*
read, exactly like Spark's ``untilOffset``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import ConfigError
from shoal.client.spark.options import OffsetSpec
from shoal.protocol.constants import ListOffsetsTimestamp

__all__ = [
    "AcquiredTask",
    "OffsetRange",
    "check_known_partitions",
    "resolve_ranges",
    "split_acquired",
    "split_ranges",
    "timestamps_to_look_up",
]

Span = tuple[int, int, int]  # first offset, last offset (inclusive), delivery count
AcquiredTask = tuple[str, int, tuple[Span, ...]]  # topic, partition, its spans in offset order


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``start <= offset < end`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def timestamps_to_look_up(spec: OffsetSpec, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """The ListOffsets timestamps a timestamp-based spec needs ({} for the others)."""
    if spec.kind == "timestamp":
        assert spec.timestamp is not None
        return {tp: spec.timestamp for tp in partitions}
    if spec.kind == "timestamps":
        _require_all(spec, partitions)
        return {tp: spec.per_partition[tp] for tp in partitions}
    return {}


def resolve_ranges(
    partitions: Sequence[TopicPartition],
    starting: OffsetSpec,
    ending: OffsetSpec,
    *,
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    start_by_time: Mapping[TopicPartition, int] | None = None,
    end_by_time: Mapping[TopicPartition, int] | None = None,
    timestamp_strategy: str = "error",
    fail_on_data_loss: bool = True,
) -> list[OffsetRange]:
    """Exact ranges for every partition, or ConfigError naming the offending option.

    ``start_by_time`` / ``end_by_time`` hold ListOffsets answers for the
    timestamps of ``timestamps_to_look_up`` (-1: no record at or after it).
    """
    out = []
    for tp in sorted(partitions):
        lo, hi = earliest[tp], latest[tp]
        start = _start(tp, starting, lo, hi, start_by_time, timestamp_strategy)
        end = _end(tp, ending, hi, end_by_time)
        if start < lo:
            if fail_on_data_loss:
                raise ConfigError(
                    starting.option,
                    f"{tp}: offset {start} is below the log start offset {lo} (records were deleted); "
                    "set failOnDataLoss=false to read from the log start instead",
                )
            start = lo
        if end > hi:
            raise ConfigError(ending.option, f"{tp}: offset {end} is beyond the latest offset {hi}")
        if start > end:
            raise ConfigError(starting.option, f"{tp}: start offset {start} is after the end offset {end}")
        out.append(OffsetRange(tp.topic, tp.partition, start, end))
    return out


def _start(
    tp: TopicPartition,
    spec: OffsetSpec,
    lo: int,
    hi: int,
    by_time: Mapping[TopicPartition, int] | None,
    strategy: str,
) -> int:
    if spec.kind == "earliest":
        return lo
    if spec.kind == "latest":
        return hi
    if spec.kind == "offsets":
        _require_all(spec, [tp])
        value = spec.per_partition[tp]
        return lo if value == ListOffsetsTimestamp.EARLIEST else hi if value == ListOffsetsTimestamp.LATEST else value
    assert by_time is not None, "timestamps were not looked up"
    found = by_time[tp]
    if found >= 0:
        return found
    if strategy == "latest":
        return hi
    raise ConfigError(
        spec.option,
        f"{tp}: no record at or after the timestamp (set startingOffsetsByTimestampStrategy=latest to start at the end)",
    )


def _end(tp: TopicPartition, spec: OffsetSpec, hi: int, by_time: Mapping[TopicPartition, int] | None) -> int:
    if spec.kind == "latest":
        return hi
    if spec.kind == "offsets":
        _require_all(spec, [tp])
        value = spec.per_partition[tp]
        return hi if value == ListOffsetsTimestamp.LATEST else value
    if spec.kind == "earliest":
        raise ConfigError(spec.option, "earliest is not allowed as the end of a batch read")
    assert by_time is not None, "timestamps were not looked up"
    found = by_time[tp]
    return found if found >= 0 else hi  # no record at or after the time: read to the end (Spark's rule)


def _require_all(spec: OffsetSpec, partitions: Sequence[TopicPartition]) -> None:
    missing = [str(tp) for tp in partitions if tp not in spec.per_partition]
    if missing:
        raise ConfigError(
            spec.option, f"must name every partition of the subscribed topics; missing {', '.join(missing)}"
        )


def check_known_partitions(spec: OffsetSpec | None, partitions: Sequence[TopicPartition]) -> None:
    """A JSON spec naming a partition the topic does not have is a mistake, not a no-op."""
    if spec is None or not spec.per_partition:
        return
    known = set(partitions)
    unknown = sorted(f"{t}-{p}" for t, p in spec.per_partition if TopicPartition(t, p) not in known)
    if unknown:
        raise ConfigError(spec.option, f"names partitions that do not exist: {', '.join(unknown)}")


def split_ranges(
    ranges: Sequence[OffsetRange], *, min_partitions: int | None = None, max_records: int | None = None
) -> list[OffsetRange]:
    """Spark tasks for ``ranges``: empty ranges dropped, large ones cut into even parts.

    Without options, one task per non-empty range. ``max_records`` caps the
    records of one task. ``min_partitions`` (when above the number of ranges)
    gives each range a share of the tasks proportional to its size, at least
    one, as Spark's KafkaOffsetRangeCalculator does.
    """
    ranges = [r for r in ranges if r.size > 0]
    parts: list[tuple[OffsetRange, int]] = [(r, 1) for r in ranges]
    if min_partitions is not None and min_partitions > len(ranges) and ranges:
        total = sum(r.size for r in ranges)
        parts = [(r, max(1, round(r.size / total * min_partitions))) for r in ranges]
    if max_records is not None:
        parts = [(r, max(n, math.ceil(r.size / max_records))) for r, n in parts]
    out = []
    for r, n in parts:
        n = min(n, r.size)
        for i in range(n):
            lo = r.start + r.size * i // n
            hi = r.start + r.size * (i + 1) // n
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def split_acquired(
    ranges: Sequence[tuple[str, int, int, int, int]], *, min_tasks: int = 1, rows_per_task: int = 65536
) -> list[AcquiredTask]:
    """Tasks of one stream micro-batch from its acquired ranges (topic, partition, first, last, count).

    A task reads one partition: its ranges in offset order, about
    ``rows_per_task`` offsets at most, and the largest tasks are halved until
    there are ``min_tasks``. The result depends only on the ranges, so a
    retried or repeated plan is identical.
    """
    by_tp: dict[tuple[str, int], list[Span]] = {}
    for topic, partition, first, last, count in ranges:
        if last >= first:
            by_tp.setdefault((topic, partition), []).append((first, last, count))
    tasks: list[AcquiredTask] = []
    for (topic, partition), spans in sorted(by_tp.items()):
        spans.sort()
        total = sum(last - first + 1 for first, last, _ in spans)
        for piece in _cut_spans(spans, max(1, -(-total // rows_per_task))):
            tasks.append((topic, partition, piece))
    while len(tasks) < min_tasks:
        sizes = [sum(last - first + 1 for first, last, _ in t[2]) for t in tasks]
        if not sizes or max(sizes) < 2:
            break
        i = sizes.index(max(sizes))
        topic, partition, spans_i = tasks[i]
        tasks[i : i + 1] = [(topic, partition, piece) for piece in _cut_spans(list(spans_i), 2)]
    return tasks


def _cut_spans(spans: list[Span], pieces: int) -> list[tuple[Span, ...]]:
    """``spans`` (sorted) cut into ``pieces`` runs of nearly equal offset counts."""
    total = sum(last - first + 1 for first, last, _ in spans)
    pieces = max(1, min(pieces, total))
    out: list[tuple[Span, ...]] = []
    current: list[Span] = []
    done = 0  # offsets placed in finished pieces and current
    k = 1
    for first, last, count in spans:
        while first <= last:
            bound = total * k // pieces  # offsets the first k pieces hold
            take = min(last - first + 1, bound - done)
            current.append((first, first + take - 1, count))
            done += take
            first += take
            if done == bound:
                out.append(tuple(current))
                current = []
                k += 1
    if current:
        out.append(tuple(current))
    return out
