"""In-flight record state of one share partition: the building blocks of
:mod:`broker.share.share_partition`.

Why per batch: consumers nearly always acquire and acknowledge whole ranges
(implicit acknowledgement accepts everything a poll returned), so one
:class:`InFlightBatch` per acquired range, holding a single (state, delivery
count, member, lock deadline), describes most of a partition in a few hundred
bytes per batch rather than per record. Only when a batch is acknowledged
unevenly (one record released, the rest accepted), renewed in part, or only
partly acquired does it *split*: its state moves into :class:`OffsetStates`,
parallel compact arrays with one slot per offset (about 30 bytes a record,
like Kafka's per-offset ``offsetState`` map but without an object per
record). A split batch collapses back to batch form once its offsets agree
again.

Every offset also carries a *pending* mark: the :class:`Change` (see
share_partition) whose persistence is still in flight. A pending offset is
not acquirable, not acknowledgeable and does not let the start offset pass,
so several writes can be outstanding at once and each can still be undone
without touching what the others changed (Kafka's "ongoing state
transition").
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from shoal.protocol.constants import ACKNOWLEDGED, ACQUIRED, ARCHIVED, ARCHIVING, AVAILABLE

# Record states are Kafka's RecordState ids (ACQUIRED is never persisted). ARCHIVING (KIP-1191:
# waiting for its dead-letter copy) is not terminal: the start offset stops at it, so it stays in
# the persisted state until it becomes ARCHIVED and a restart can finish the copy.
TERMINAL = frozenset({ACKNOWLEDGED, ARCHIVED})
STATE_NAMES = {
    AVAILABLE: "AVAILABLE",
    ACQUIRED: "ACQUIRED",
    ACKNOWLEDGED: "ACKNOWLEDGED",
    ARCHIVING: "ARCHIVING",
    ARCHIVED: "ARCHIVED",
}

NO_DEADLINE = -1

# byte table mapping terminal states to 1 and every other state to 0
_DONE = bytes(1 if i in TERMINAL else 0 for i in range(256))

# (first, last, state, delivery count, member, lock deadline, pending change): a
# maximal range of one batch whose offsets agree on everything.
Run = tuple[int, int, int, int, "str | None", int, "object | None"]


@dataclass(slots=True)
class OffsetStates:
    """Per-offset state of a split batch, one slot per offset from the batch's first."""

    states: bytearray
    counts: array
    members: list[str | None]
    deadlines: array
    pending: list[object | None]
    # No offset's count is above this (counts only grow; a slice cut off keeps it an upper
    # bound): lets an acquisition skip scanning a long batch for counts that reached the
    # poison threshold.
    max_count: int = 0
    # How many offsets are terminal (ACKNOWLEDGED / ARCHIVED), kept by every write to ``states``:
    # a share partition's delivery-complete count sums it over its ranges on every change, and
    # counting each split range's states there cost 8-15 % of a loaded broker's loop (128 members
    # acquiring 5 records at a time split nearly every batch).
    done: int = 0

    @classmethod
    def uniform(
        cls, n: int, state: int, count: int, member: str | None, deadline: int, pending: object | None
    ) -> OffsetStates:
        return cls(
            bytearray([state]) * n,
            array("H", [count]) * n,
            [member] * n,
            array("q", [deadline]) * n,
            [pending] * n,
            count,
            n if state in TERMINAL else 0,
        )

    def key(self, i: int) -> tuple[int, int, str | None, int, int]:
        return (self.states[i], self.counts[i], self.members[i], self.deadlines[i], id(self.pending[i]))


@dataclass(slots=True, eq=False)
class InFlightBatch:
    """One range of in-flight offsets. Batch form when ``offsets`` is None."""

    first: int
    last: int
    state: int
    count: int
    member: str | None = None
    deadline: int = NO_DEADLINE
    pending: object | None = None
    offsets: OffsetStates | None = None

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def __lt__(self, other: InFlightBatch) -> bool:  # ties in the lock heap
        return self.first < other.first

    def at(self, offset: int) -> tuple[int, int, str | None, int, object | None]:
        """(state, count, member, deadline, pending) of one offset of this batch."""
        o = self.offsets
        if o is None:
            return self.state, self.count, self.member, self.deadline, self.pending
        i = offset - self.first
        return o.states[i], o.counts[i], o.members[i], o.deadlines[i], o.pending[i]

    def max_count(self) -> int:
        """An upper bound of the delivery counts of this batch's offsets."""
        return self.count if self.offsets is None else self.offsets.max_count

    def runs(self, a: int, b: int, cap: int | None = None) -> Iterator[Run]:
        """Maximal uniform runs covering [a, b] ∩ this batch, in offset order; with `cap`, a
        split batch's runs are cut after `cap` offsets (a caller taking a few offsets of a
        long uniform stretch reads only those)."""
        a, b = max(a, self.first), min(b, self.last)
        if a > b:
            return
        o = self.offsets
        if o is None:
            yield (a, b, self.state, self.count, self.member, self.deadline, self.pending)
            return
        base = self.first
        i, j = a - base, b - base
        start, key = i, o.key(i)
        for k in range(i + 1, j + 1):
            kk = o.key(k)
            if kk != key or (cap is not None and k - start >= cap):
                yield (start + base, k - 1 + base, o.states[start], o.counts[start], o.members[start],
                       o.deadlines[start], o.pending[start])  # fmt: skip
                start, key = k, kk
        yield (start + base, j + base, o.states[start], o.counts[start], o.members[start],
               o.deadlines[start], o.pending[start])  # fmt: skip

    def split(self) -> OffsetStates:
        """Move the batch state into per-offset arrays (idempotent)."""
        if self.offsets is None:
            self.offsets = OffsetStates.uniform(
                self.size, self.state, self.count, self.member, self.deadline, self.pending
            )
        return self.offsets

    def set_range(
        self, a: int, b: int, state: int, count: int, member: str | None, deadline: int, pending: object | None
    ) -> None:
        """Give every offset of [a, b] (within this batch) the same state; splits when partial."""
        if self.offsets is None and a == self.first and b == self.last:
            self.state, self.count, self.member, self.deadline, self.pending = state, count, member, deadline, pending
            return
        o = self.split()
        i, j = a - self.first, b - self.first + 1
        n = j - i
        old = o.states[i:j]
        o.done += (n if state in TERMINAL else 0) - old.count(ACKNOWLEDGED) - old.count(ARCHIVED)
        o.states[i:j] = bytes((state,)) * n
        o.counts[i:j] = array("H", (count,)) * n
        if count > o.max_count:
            o.max_count = count
        o.members[i:j] = [member] * n
        o.deadlines[i:j] = array("q", (deadline,)) * n
        o.pending[i:j] = [pending] * n

    def append(self, n: int, state: int, count: int, member: str | None, deadline: int) -> None:
        """Grow the batch by `n` offsets at its end, all with the given state (not pending)."""
        if (
            self.offsets is None
            and (state, count, member, deadline) == (self.state, self.count, self.member, self.deadline)
            and self.pending is None
        ):
            self.last += n
            return
        o = self.split()
        o.states.extend(bytes((state,)) * n)
        if state in TERMINAL:
            o.done += n
        o.counts.extend(array("H", (count,)) * n)
        if count > o.max_count:
            o.max_count = count
        o.members.extend([member] * n)
        o.deadlines.extend(array("q", (deadline,)) * n)
        o.pending.extend([None] * n)
        self.last += n

    def clear_pending(self, a: int, b: int) -> None:
        if self.offsets is None:
            self.pending = None
        else:
            i, j = a - self.first, b - self.first + 1
            self.offsets.pending[i:j] = [None] * (j - i)

    def maybe_merge(self) -> None:
        """Collapse a split batch whose offsets all agree (and none is pending)."""
        o = self.offsets
        if o is None:
            return
        n = self.size
        if (
            o.pending.count(None) == n
            and o.states.count(o.states[0]) == n
            and o.counts.count(o.counts[0]) == n
            and o.deadlines.count(o.deadlines[0]) == n
            and o.members.count(o.members[0]) == n
        ):
            self.state, self.count, self.member, self.deadline = o.states[0], o.counts[0], o.members[0], o.deadlines[0]
            self.pending = None
            self.offsets = None

    def has_deadline(self, deadline: int) -> bool:
        """Whether some offset still holds a lock with exactly this deadline."""
        if self.offsets is None:
            return self.deadline == deadline
        return deadline in self.offsets.deadlines

    def any_pending(self) -> bool:
        if self.offsets is None:
            return self.pending is not None
        return self.offsets.pending.count(None) != self.size

    def all_done(self) -> bool:
        """Every offset terminal and none pending (the batch may be forgotten once below the start)."""
        if self.offsets is None:
            return self.state in TERMINAL and self.pending is None
        o = self.offsets
        n = self.size
        return o.done == n and o.pending.count(None) == n

    def first_not_done(self, a: int, token: object | None = None) -> int:
        """The first offset from `a` on that is not terminal, or is pending for a change
        other than `token`; ``last + 1`` when there is none."""
        o = self.offsets
        if o is None:
            done = self.state in TERMINAL and (self.pending is None or self.pending is token)
            return self.last + 1 if done else max(a, self.first)
        i = max(a, self.first) - self.first
        j = o.states.translate(_DONE).find(0, i)
        end = self.size if j < 0 else j
        if o.pending.count(None) != self.size:
            for k in range(i, end):
                p = o.pending[k]
                if p is not None and p is not token:
                    return self.first + k
        return self.first + end

    def first_available(self, a: int, b: int) -> int | None:
        """The first AVAILABLE, not pending offset of [a, b] ∩ this batch."""
        a, b = max(a, self.first), min(b, self.last)
        if a > b:
            return None
        o = self.offsets
        if o is None:
            return a if self.state == AVAILABLE and self.pending is None else None
        i, j = a - self.first, b - self.first + 1
        k = o.states.find(AVAILABLE, i, j)
        while k >= 0 and o.pending[k] is not None:
            k = o.states.find(AVAILABLE, k + 1, j)
        return None if k < 0 else self.first + k

    def terminal_count(self, a: int, b: int) -> int:
        """Terminal offsets within [a, b] ∩ this batch."""
        a, b = max(a, self.first), min(b, self.last)
        if a > b:
            return 0
        o = self.offsets
        if o is None:
            return b - a + 1 if self.state in TERMINAL else 0
        if a == self.first and b == self.last:
            return o.done
        s = o.states[a - self.first : b - self.first + 1]
        return s.count(ACKNOWLEDGED) + s.count(ARCHIVED)
