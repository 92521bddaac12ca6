"""Delayed operations and the purgatory that holds them until done or timed out.

A request that cannot be answered yet (a fetch finding no data, a JoinGroup
waiting for the other members, a share fetch waiting for records to become
available) becomes a ``DelayedOperation``. It is *watched* under keys naming
what could let it finish, e.g. ``("fetch", topic, partition)``, a group id or a
member, and it sits in a timer until its deadline. Whoever changes the state
behind a key (a produce, a release, a join, a heartbeat) calls
``check_and_complete(key)``; the operations watched under that key try again.
If the deadline passes first, the timer force-completes the operation and then
calls ``on_expiration()``.

Design points
-------------
* Completion is decided in one place, ``force_complete()``: the first caller
  wins, cancels the timer entry and runs ``on_complete()``; every later call
  (another key firing, the timer, an explicit force) returns False. The broker
  is single-threaded (asyncio), so a flag is enough; there are no locks.
  Callbacks may re-enter the purgatory (watch new operations, check other
  keys): ``check_and_complete`` detaches the list it iterates while it runs.
* An operation watched under several keys is removed only from the list of the
  key that completed it. Its other entries go stale and are dropped lazily:
  when a later check visits them, or by a purge over all watch lists once more
  than ``purge_interval`` stale entries exist. Finding the other lists eagerly
  would cost memory on every operation for a rare benefit; the count of stale
  entries is kept exactly, so lists stay bounded by live entries plus
  ``purge_interval``.
* The operation is itself the timer task (``DelayedOperation`` extends
  ``TimerTask``), so a delayed request costs one object plus one list entry
  per key, and completing it removes it from the timing wheel in O(1).
* A ``try_complete`` that raises is contained (``_try``): the operation is
  force-completed and the error logged, so neither the caller that fired the
  key nor the waiting request is left hanging.
* The timer is injected (anything with ``now_ms``, ``add`` and
  ``advance_to``): ``broker.timing.wheel.Timer`` for sans-IO tests,
  ``broker.timing.timer.AsyncTimer`` in the broker. Several purgatories may share one
  timer.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from typing import Protocol

from shoal.broker.timing.wheel import TimerTask

__all__ = ["DelayedOperation", "Purgatory", "Scheduler"]

log = logging.getLogger("shoal.purgatory")


def _try(op: DelayedOperation) -> None:
    """``op.try_complete()``, contained: an operation whose check raises is completed as it
    stands (its request is answered with what it has) and the error is logged. The check runs
    inside whoever fired the key -- a produce, another member's acknowledgement write -- and
    must neither fail that caller nor leave its own request unanswered until its deadline."""
    try:
        op.try_complete()
    except Exception:
        log.exception("%s: completing a delayed operation failed; it is answered as it stands", op)
        op.force_complete()


class Scheduler(Protocol):
    """What a purgatory needs from a timer."""

    @property
    def now_ms(self) -> int: ...

    def add(self, task: TimerTask) -> None: ...

    def advance_to(self, now_ms: int) -> int: ...


class DelayedOperation(TimerTask, ABC):
    """A response waiting for a condition or for ``timeout_ms`` to pass.

    Subclasses implement ``try_complete()`` (check the condition; if met, call
    and return ``force_complete()``, else return False), ``on_complete()``
    (build and send the response; runs exactly once, whether the condition was
    met or time ran out) and ``on_expiration()`` (runs after ``on_complete``
    when time ran out). The deadline is fixed when the operation enters a
    purgatory: the timer's ``now_ms`` plus ``timeout_ms``.
    """

    __slots__ = ("_completed", "_purgatory", "_watch_count", "timeout_ms")

    def __init__(self, timeout_ms: int) -> None:
        super().__init__(0)
        self.timeout_ms = timeout_ms
        self._completed = False
        self._purgatory: Purgatory | None = None
        self._watch_count = 0

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now unless already completed; True only for the call that did it."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        purgatory = self._purgatory
        if purgatory is not None:
            self._purgatory = None
            purgatory._completed_one(self)
        self.on_complete()
        return True

    def run(self) -> None:
        """Timer hook: the deadline passed."""
        purgatory = self._purgatory
        if purgatory is not None and purgatory._closed:
            return
        if self.force_complete():
            if purgatory is not None:
                purgatory._expired += 1
            self.on_expiration()

    @abstractmethod
    def try_complete(self) -> bool:
        """Complete (via ``force_complete()``) if the condition holds; return whether it did."""

    @abstractmethod
    def on_complete(self) -> None:
        """The one completion action (send the response)."""

    @abstractmethod
    def on_expiration(self) -> None:
        """Called after ``on_complete`` when the operation timed out."""


class Purgatory:
    """Delayed operations watched by key, expired by a shared timer."""

    def __init__(self, name: str, timer: Scheduler, purge_interval: int = 1000) -> None:
        self.name = name
        self.purge_interval = purge_interval
        self._timer = timer
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._entries = 0  # watch-list entries, over all keys (stale ones included)
        self._live_entries = 0  # entries whose operation is not completed
        self._delayed = 0  # operations waiting (in the timer, not completed)
        self._expired = 0  # operations completed by the timer, ever
        self._busy = 0  # depth of check_and_complete calls in progress
        self._closed = False

    def __repr__(self) -> str:
        return f"<Purgatory {self.name!r} delayed={self._delayed} keys={len(self._watchers)} entries={self._entries}>"

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Try ``op`` once; if it did not complete, watch it under every key and start its timer.

        Returns True if the operation completed here.
        """
        if self._closed:
            raise RuntimeError(f"purgatory {self.name!r} is shut down")
        if op._purgatory is not None or op.pending:
            raise ValueError(f"{op!r} is already waiting")
        if op.is_completed:
            return True
        _try(op)
        if op.is_completed:
            return True
        unique = list(dict.fromkeys(keys))
        watchers = self._watchers
        for key in unique:
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = [op]
            else:
                ops.append(op)
        n = len(unique)
        op._watch_count = n
        op._purgatory = self
        self._entries += n
        self._live_entries += n
        self._delayed += 1
        op.deadline_ms = self._timer.now_ms + op.timeout_ms
        self._timer.add(op)
        self._maybe_purge()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Let every operation watched under ``key`` try to complete; return how many did."""
        ops = self._watchers.pop(key, None)
        if ops is None:
            return 0
        completed = 0
        self._busy += 1
        try:
            for op in ops:
                if op._completed:
                    continue
                _try(op)
                if op._completed:
                    completed += 1
        finally:
            self._busy -= 1
            survivors = [op for op in ops if not op._completed]
            self._entries -= len(ops) - len(survivors)
            added = self._watchers.get(key)  # watched by callbacks meanwhile
            if added:
                survivors.extend(added)
            if survivors:
                self._watchers[key] = survivors
            else:
                self._watchers.pop(key, None)
        self._maybe_purge()
        return completed

    def expire(self, now_ms: int) -> int:
        """Advance the timer to ``now_ms``; return how many of this purgatory's operations expired.

        Expired operations are force-completed, then ``on_expiration()`` runs.
        A shared timer also runs other due tasks.
        """
        before = self._expired
        self._timer.advance_to(now_ms)
        self._maybe_purge()
        return self._expired - before

    def watched(self, key: Hashable) -> int:
        """Entries under ``key``, including completed ones not yet purged."""
        ops = self._watchers.get(key)
        return 0 if ops is None else len(ops)

    def delayed(self) -> int:
        """Operations waiting (watched or timed, not completed)."""
        return self._delayed

    def keys(self) -> int:
        """How many keys have a watch list."""
        return len(self._watchers)

    def stale(self) -> int:
        """Watch-list entries of completed operations, awaiting a purge."""
        return self._entries - self._live_entries

    def purge(self) -> int:
        """Drop completed operations from every watch list; return how many entries went."""
        removed = 0
        watchers = self._watchers
        for key, ops in list(watchers.items()):
            live = [op for op in ops if not op._completed]
            if len(live) != len(ops):
                removed += len(ops) - len(live)
                if live:
                    watchers[key] = live
                else:
                    del watchers[key]
        self._entries -= removed
        return removed

    def shutdown(self) -> None:
        """Stop: pending operations are dropped without completing; the timer is left running."""
        self._closed = True
        for ops in self._watchers.values():
            for op in ops:
                if op._purgatory is self:
                    op._purgatory = None
                    op.cancel()
        # Operations watched under no key stay in the timer; run() ignores them.
        self._watchers.clear()
        self._entries = self._live_entries = self._delayed = 0

    def _completed_one(self, op: DelayedOperation) -> None:
        if self._closed:
            return
        self._delayed -= 1
        self._live_entries -= op._watch_count
        self._maybe_purge()

    def _maybe_purge(self) -> None:
        if not self._busy and self._entries - self._live_entries > self.purge_interval:
            self.purge()
