"""Hierarchical timing wheel: where the broker keeps its pending deadlines.

Why a wheel and not a heap
--------------------------
Almost every deadline the broker sets is cancelled before it fires: a delayed
fetch is answered when data arrives, a heartbeat deadline is pushed back by the
next heartbeat, a record lock ends with an acknowledgement. A binary heap makes
each insert O(log n) and can only cancel lazily (a flag), so cancelled entries
stay in memory until their original deadline comes round. A timing wheel puts a
task into the bucket covering its deadline in O(1) and unlinks it in O(1), so
the store holds only live tasks, however many are added and withdrawn.

Shape (the idea of Kafka's TimingWheel and SystemTimer)
------------------------------------------------------
Level 0 has ``wheel_size`` buckets of 1 ms each. Level ``k`` has the same number
of buckets, each ``wheel_size ** k`` ms wide, so with 20 buckets level 3 spans
160 s and level 7 about two weeks. Levels are created only when a deadline
needs them. A task goes into the lowest level whose window, counted from the
current time, still reaches its deadline. When the clock reaches a bucket of a
higher level, the bucket is emptied and its tasks are inserted again: they fall
into finer levels, and eventually into a 1 ms bucket whose time is exactly
their deadline.

Each bucket is a circular doubly linked list whose sentinel is the bucket
itself, and the links live in the task (two slots), so there is no node object
per entry, adding is four pointer writes and ``cancel()`` unlinks without
searching. The only ordered structure is a small heap of *buckets* (at most
``wheel_size`` per level, each present once), keyed by the time the bucket
becomes due; it tells the driver when to wake up and gives the order of
expiry.

The module does no I/O and reads no clock: the caller passes the time in
milliseconds. ``TimingWheel`` stores tasks; ``Timer`` adds the policy of
running them (tasks already due when added, failures, re-entrancy) and is the
base of the asyncio driver in ``broker.timing.timer``.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from operator import attrgetter
from typing import Any

__all__ = ["WHEEL_SIZE", "Timer", "TimerTask", "TimingWheel"]

WHEEL_SIZE = 20

_by_deadline = attrgetter("deadline_ms")


class _Bucket:
    """A slot of one level: a circular doubly linked list; the bucket is its own sentinel."""

    __slots__ = ("_next", "_prev", "count", "expiration", "order", "span")

    def __init__(self, order: int, span: int) -> None:
        self._next: Any = self  # a task, or this bucket when empty
        self._prev: Any = self
        self.count = 0  # live tasks linked here
        self.expiration = -1  # start of the time range it holds; -1: not in the heap
        self.order = order  # tie-break in the heap (lower level first)
        self.span = span  # width of the range in ms (the level's tick)

    def tasks(self) -> list[TimerTask]:
        """The linked tasks in insertion order (diagnostics and tests)."""
        out: list[TimerTask] = []
        node = self._next
        while node is not self:
            assert isinstance(node, TimerTask)
            out.append(node)
            node = node._next
        return out


# Sentinel stored in TimerTask._bucket once a task is cancelled. It is never linked.
_CANCELLED = _Bucket(-2, 0)


class TimerTask:
    """Something to do at ``deadline_ms``: override ``run()`` or pass ``callback``.

    The task is its own list node (``_prev``/``_next``), so it can be pending in
    one timer at a time. ``_bucket`` encodes the state: ``None`` idle (never
    added, or already handed out as expired), a bucket while pending, the
    ``_CANCELLED`` sentinel once cancelled. A task that expired may be given a
    new deadline and added again; a cancelled one cannot. Do not change
    ``deadline_ms`` while the task is pending.
    """

    __slots__ = ("_bucket", "_next", "_prev", "callback", "deadline_ms")

    # Neighbours in the bucket's list while linked (a bucket or a task), None once unlinked:
    # typed loosely, as the intrusive list's hot paths follow them without checks.
    _prev: Any
    _next: Any

    def __init__(self, deadline_ms: int, callback: Callable[[], object] | None = None) -> None:
        self.deadline_ms = deadline_ms
        self.callback = callback
        self._bucket: _Bucket | None = None
        # _prev/_next are set when the task is linked into a bucket.

    @property
    def cancelled(self) -> bool:
        return self._bucket is _CANCELLED

    @property
    def pending(self) -> bool:
        """True while the task sits in a timer waiting for its deadline."""
        b = self._bucket
        return b is not None and b is not _CANCELLED

    def cancel(self) -> None:
        """Withdraw the task in O(1). Idempotent; also stops an expired task not yet run."""
        b = self._bucket
        if b is _CANCELLED:
            return
        self._bucket = _CANCELLED
        if b is not None:
            prev = self._prev
            nxt = self._next
            prev._next = nxt
            nxt._prev = prev
            self._prev = self._next = None
            b.count -= 1

    def run(self) -> None:
        """Called once when the deadline has passed; the default calls ``callback``."""
        cb = self.callback
        if cb is not None:
            cb()

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else "pending" if self.pending else "idle"
        return f"<{type(self).__name__} deadline_ms={self.deadline_ms} {state}>"


def _link(bucket: _Bucket, task: TimerTask) -> None:
    tail = bucket._prev
    task._prev = tail
    task._next = bucket
    tail._next = task
    bucket._prev = task
    task._bucket = bucket
    bucket.count += 1


def _drain(bucket: _Bucket, out: list[TimerTask]) -> None:
    """Move every task of ``bucket`` to ``out`` (in list order), leaving them idle."""
    node = bucket._next
    bucket._next = bucket._prev = bucket
    bucket.count = 0
    while node is not bucket:
        assert isinstance(node, TimerTask)
        nxt = node._next
        node._bucket = None
        node._prev = node._next = None
        out.append(node)
        node = nxt


class TimingWheel:
    """Stores tasks by deadline (ms); ``advance(now)`` hands back the ones due.

    ``add`` refuses a task whose deadline is not after the wheel's current
    time (returns False and keeps nothing): the caller decides whether such a
    task runs at once or later. ``advance`` returns expired tasks sorted by
    deadline and never a task early: a task is due exactly when
    ``deadline_ms <= now_ms``.
    """

    __slots__ = ("_levels", "_limits", "_now", "_queue", "_size", "_ticks")

    def __init__(self, start_ms: int = 0, wheel_size: int = WHEEL_SIZE) -> None:
        if wheel_size < 2:
            raise ValueError("wheel_size must be at least 2")
        self._size = wheel_size
        self._now = start_ms
        self._levels: list[list[_Bucket]] = []
        self._ticks: list[int] = []  # bucket width per level
        self._limits: list[int] = []  # per level: first deadline past its window
        self._queue: list[tuple[int, int, _Bucket]] = []  # (expiration, order, bucket)
        self._add_level()

    @property
    def now_ms(self) -> int:
        return self._now

    @property
    def levels(self) -> int:
        """How many levels exist so far (overflow levels are made on demand)."""
        return len(self._levels)

    def __len__(self) -> int:
        return sum(b.count for level in self._levels for b in level)

    def _add_level(self) -> None:
        level = len(self._levels)
        size = self._size
        tick = size**level
        self._ticks.append(tick)
        self._levels.append([_Bucket(level * size + i, tick) for i in range(size)])
        now = self._now
        self._limits.append(now - now % tick + tick * size)

    def _set_clock(self, now: int) -> None:
        self._now = now
        size = self._size
        self._limits = [now - now % tick + tick * size for tick in self._ticks]

    def add(self, task: TimerTask) -> bool:
        """Store ``task``; False (nothing stored) if its deadline is already due."""
        if task._bucket is not None:
            raise ValueError(f"{task!r} is already pending or was cancelled")
        deadline = task.deadline_ms
        if deadline <= self._now:
            return False
        self._insert(task, deadline)
        return True

    def _insert(self, task: TimerTask, deadline: int) -> None:
        limits = self._limits
        if deadline < limits[0]:
            bucket = self._levels[0][deadline % self._size]
            expiration = deadline
        else:
            level = 1
            while True:
                if level == len(limits):
                    self._add_level()
                    limits = self._limits
                if deadline < limits[level]:
                    break
                level += 1
            tick = self._ticks[level]
            slot = deadline // tick
            bucket = self._levels[level][slot % self._size]
            expiration = slot * tick
        tail = bucket._prev
        task._prev = tail
        task._next = bucket
        tail._next = task
        bucket._prev = task
        task._bucket = bucket
        bucket.count += 1
        if bucket.expiration != expiration:
            bucket.expiration = expiration
            heappush(self._queue, (expiration, bucket.order, bucket))

    def advance(self, now_ms: int) -> list[TimerTask]:
        """Move the clock to ``now_ms``; return the tasks now due, by deadline.

        The returned tasks are idle again (not pending). The clock never goes
        backwards: an earlier ``now_ms`` returns nothing.
        """
        expired: list[TimerTask] = []
        if now_ms <= self._now:
            return expired
        queue = self._queue
        needs_sort = False
        while queue and queue[0][0] <= now_ms:
            expiration, _, bucket = heappop(queue)
            if bucket.expiration != expiration:
                continue  # stale entry
            bucket.expiration = -1
            if bucket.count == 0:
                continue  # every task in it was cancelled
            if expiration + bucket.span <= now_ms + 1:
                # The whole range is due: hand the tasks out without cascading.
                # Ranges of different levels interleave, hence the final sort.
                needs_sort = needs_sort or bucket.span > 1
                _drain(bucket, expired)
                continue
            # Only the start of the range is due: re-insert each task at the
            # bucket's time, so it drops into a finer level.
            if expiration > self._now:
                self._set_clock(expiration)
            node = bucket._next
            bucket._next = bucket._prev = bucket
            bucket.count = 0
            while node is not bucket:
                assert isinstance(node, TimerTask)
                nxt = node._next
                deadline = node.deadline_ms
                if deadline <= expiration:
                    node._bucket = None
                    node._prev = node._next = None
                    expired.append(node)
                else:
                    self._insert(node, deadline)
                node = nxt
        self._set_clock(now_ms)
        if needs_sort:
            expired.sort(key=_by_deadline)
        return expired

    def next_deadline_ms(self) -> int | None:
        """When ``advance`` next has work: at or before the earliest deadline.

        Bucket-granular: for a task on a coarse level this is the start of its
        bucket's range, when the task moves to a finer level. None when empty.
        """
        queue = self._queue
        while queue:
            expiration, _, bucket = queue[0]
            if bucket.expiration == expiration and bucket.count:
                return expiration
            heappop(queue)  # stale, or emptied by cancellations
            if bucket.expiration == expiration:
                bucket.expiration = -1
        return None


class Timer:
    """Runs ``TimerTask``s when told the time: ``add`` then ``advance_to(now)``.

    A task already due when added is not run inside ``add`` (the caller may be
    half-way through its own bookkeeping); it runs on the next ``advance_to``.
    Tasks run in deadline order; a task cancelled, or added again, by an
    earlier task of the same batch is skipped. Tasks added while running that
    are already due run in the same ``advance_to`` call. If tasks raise, the
    rest still run and the failure is raised at the end (an ``ExceptionGroup``
    if several failed); subclasses may report failures instead.
    """

    def __init__(self, start_ms: int = 0, wheel_size: int = WHEEL_SIZE) -> None:
        self.wheel = TimingWheel(start_ms, wheel_size)
        self._due = _Bucket(-1, 0)  # added when already due; runs on the next advance
        self._failures: list[Exception] = []

    @property
    def now_ms(self) -> int:
        return self.wheel.now_ms

    def __len__(self) -> int:
        return len(self.wheel) + self._due.count

    def add(self, task: TimerTask) -> None:
        if not self.wheel.add(task):
            _link(self._due, task)

    def next_deadline_ms(self) -> int | None:
        if self._due.count:
            return self.wheel.now_ms
        return self.wheel.next_deadline_ms()

    def advance_to(self, now_ms: int) -> int:
        """Run every task due at ``now_ms``; return how many ran."""
        ran = 0
        while True:
            batch: list[TimerTask] = []
            _drain(self._due, batch)
            # Due tasks were added in any order, but all before the wheel's
            # clock reached them, so they precede every task the wheel returns.
            batch.sort(key=_by_deadline)
            batch.extend(self.wheel.advance(now_ms))
            if not batch:
                break
            ran += self._run_batch(batch)
        if self._failures:
            failures, self._failures = self._failures, []
            if len(failures) == 1:
                raise failures[0]
            raise ExceptionGroup("timer tasks failed", failures)
        return ran

    def _run_batch(self, batch: list[TimerTask]) -> int:
        ran = 0
        for i, task in enumerate(batch):
            if task._bucket is not None:
                continue  # cancelled or re-added by an earlier task
            try:
                task.run()
            except Exception as exc:  # noqa: BLE001 - one failing task must not stop the others
                self._task_failed(task, exc)
            except BaseException:
                # Interrupted: keep what has not run for the next advance.
                for rest in batch[i + 1 :]:
                    if rest._bucket is None:
                        _link(self._due, rest)
                raise
            ran += 1
        return ran

    def _task_failed(self, task: TimerTask, exc: Exception) -> None:
        """Hook for a task that raised; the base class re-raises after the batch."""
        self._failures.append(exc)
