"""The offset-translation map of one mirrored partition (sans-IO).

Why a map and not a constant shift: target offsets start wherever the target partition's end
was when mirroring began, and the source may have holes (compaction, transaction markers,
aborted records that a read_committed copy leaves out), while the copy is dense. MirrorMaker 2
keeps sparse "offset syncs" and translates approximately; because ``shoal mirror`` copies every
record itself, it knows the exact correspondence and stores it as runs: a run says that
``length`` consecutive source offsets starting at ``source`` landed at consecutive target
offsets starting at ``target``. A new run starts only where the source skips offsets, so a
plain topic needs one run however many records it holds.

A committed offset means "the next record to read", so a source offset translates to the
target offset of the first copied record at or after it. Offsets past everything copied so far
cannot be translated yet (the group is ahead of the copy) and give None. When the number of runs
exceeds ``max_runs`` the oldest are dropped; an offset older than every kept run then
translates to the start of the oldest kept run, so a group may see records again on the target
but never misses one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MAX_RUNS", "OffsetMap", "Run"]

MAX_RUNS = 256


@dataclass(slots=True)
class Run:
    source: int
    target: int
    length: int

    @property
    def source_end(self) -> int:
        return self.source + self.length


@dataclass(slots=True)
class OffsetMap:
    """Where the copy of one partition stands: ``source_next`` is the next source offset to copy
    (every record below it is on the target), ``target_next`` the target offset right after the
    last copied record; ``runs`` the exact correspondence, oldest first."""

    source_next: int
    target_next: int
    runs: list[Run] = field(default_factory=list)
    max_runs: int = MAX_RUNS

    def add(self, source_offset: int, target_offset: int) -> None:
        """One more copied record, in order: ``source_offset`` is now at ``target_offset``."""
        if source_offset < self.source_next or target_offset < self.target_next:
            raise ValueError(
                f"out of order: source {source_offset} (next {self.source_next}), "
                f"target {target_offset} (next {self.target_next})"
            )
        last = self.runs[-1] if self.runs else None
        if last is not None and source_offset == last.source_end and target_offset == last.target + last.length:
            last.length += 1
        else:
            self.runs.append(Run(source_offset, target_offset, 1))
            if len(self.runs) > self.max_runs:
                del self.runs[: len(self.runs) - self.max_runs]
        self.source_next = source_offset + 1
        self.target_next = target_offset + 1

    def add_dense(self, source_offsets: list[int], target_first: int) -> None:
        """Copied records, in order, that landed at consecutive target offsets from ``target_first``
        (one producer's records in one partition): the same as ``add`` per record, in one step
        when the source offsets are consecutive too."""
        n = len(source_offsets)
        if not n:
            return
        first = source_offsets[0]
        if source_offsets[-1] - first != n - 1:  # holes in the source: record by record
            for i, src in enumerate(source_offsets):
                self.add(src, target_first + i)
            return
        self.add(first, target_first)
        if n > 1:
            self.runs[-1].length += n - 1
            self.source_next += n - 1
            self.target_next += n - 1

    def skip_to(self, source_position: int) -> None:
        """The source has nothing to copy below ``source_position`` (a consumer's position past
        markers or compacted-away offsets): committed offsets up to it translate to ``target_next``."""
        if source_position > self.source_next:
            self.source_next = source_position

    def translate(self, source_offset: int) -> int | None:
        """The target offset a group committed at ``source_offset`` resumes from; None when that
        offset is past what has been copied."""
        if source_offset > self.source_next:
            return None
        for run in self.runs:  # oldest first; runs are few
            if source_offset < run.source_end:
                return run.target + max(0, source_offset - run.source)
        return self.target_next

    def to_json(self) -> dict[str, object]:
        return {
            "source_next": self.source_next,
            "target_next": self.target_next,
            "runs": [[r.source, r.target, r.length] for r in self.runs],
        }

    @classmethod
    def from_json(cls, doc: dict[str, object], max_runs: int = MAX_RUNS) -> OffsetMap:
        runs_doc = doc.get("runs", [])
        if not isinstance(runs_doc, list):
            raise ValueError("runs must be a list")
        runs = [Run(int(s), int(t), int(n)) for s, t, n in runs_doc]
        source_next, target_next = doc["source_next"], doc["target_next"]
        if not isinstance(source_next, int) or not isinstance(target_next, int):
            raise ValueError("source_next and target_next must be integers")
        return cls(source_next, target_next, runs, max_runs)
