"""What a share partition's state change must persist, and how it is taken back.

Apart from :mod:`broker.share.share_partition` (which makes them) because the
shell only needs this: a :class:`Change` is written by the share-state write
pipeline, then committed or undone; :class:`AcquiredRange` is what a fetch
hands a member. Sans-IO.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from shoal.broker.share.in_flight import InFlightBatch

__all__ = ["AcquiredRange", "Batch", "Change"]

_PENDING, _COMMITTED, _UNDONE = 0, 1, 2


class _Owner(Protocol):
    """The share partition that made a change (share_partition.SharePartition)."""

    def _commit(self, change: Change) -> None: ...

    def _undo_change(self, change: Change) -> None: ...


# (first_offset, last_offset, delivery_state, delivery_count), as the share coordinator stores it.
Batch = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets handed to one member by a fetch (ShareFetch AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int
    lock_deadline_ms: int


@dataclass(slots=True, eq=False)
class Change:
    """What one state change needs persisted, and how to take it back.

    ``batches`` are the changed ranges as (first, last, state, count), states
    AVAILABLE / ACKNOWLEDGED / ARCHIVED; ``start_offset`` is -1 when the
    persisted start need not move. ``needs_write`` is False when there is
    nothing to persist (a RENEW, a rejected request): such a Change is
    already committed. Otherwise it stays pending until :meth:`commit` or
    :meth:`undo`.
    """

    start_offset: int = -1
    batches: list[Batch] = field(default_factory=list)
    delivery_complete_count: int = -1
    _owner: _Owner | None = field(default=None, repr=False)
    _status: int = field(default=_COMMITTED, repr=False)
    # (batch, first, last, old state, old count, old member, old deadline)
    _undo: list[tuple[InFlightBatch, int, int, int, int, str | None, int]] = field(default_factory=list, repr=False)
    _marked: list[tuple[InFlightBatch, int, int]] = field(default_factory=list, repr=False)

    @property
    def needs_write(self) -> bool:
        return bool(self.batches) or self.start_offset != -1

    @property
    def pending(self) -> bool:
        return self._status == _PENDING

    def commit(self) -> None:
        """The write succeeded: the new states become final (idempotent)."""
        if self._status == _UNDONE:
            raise RuntimeError("change was undone")
        if self._status == _PENDING and self._owner is not None:
            self._owner._commit(self)
        self._status = _COMMITTED

    def undo(self) -> None:
        """The write failed: restore what the touched offsets were before (idempotent)."""
        if self._status == _COMMITTED and self.needs_write:
            raise RuntimeError("change was committed")
        if self._status == _PENDING and self._owner is not None:
            self._owner._undo_change(self)
        self._status = _UNDONE
