"""Timer speed and memory: our timing wheel next to a heapq timer, same run, same deadlines.

Run: python benchmarks/timer.py [--n 1000000] [--repeat 1]

Deadlines are spread uniformly over 30 s (fetch waits, record locks, session
timeouts live in that range). Each figure is the best of ``--repeat`` runs.

- adds + cancels: the broker's common case, a deadline set and withdrawn.
  The heap reference cancels lazily (a flag), as heap timers do; its entries
  stay until their deadline is popped, which the "retained" memory line shows.
- adds + expire: everything added, then one advance past the last deadline,
  and the same driven in 1 ms steps (what the asyncio driver does).
- memory per pending task, measured with tracemalloc: task object plus the
  timer's own bookkeeping (the deadline ints are shared and not counted).
- the asyncio driver (AsyncTimer on uvloop) next to one ``loop.call_later``
  handle per deadline, for adds + cancels.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from heapq import heappop, heappush

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import uvloop

from shoal.broker.timing.timer import AsyncTimer
from shoal.broker.timing.wheel import TimerTask, TimingWheel

SPREAD_MS = 30_000


class HeapTask:
    """The reference's task: a deadline and a cancelled flag."""

    __slots__ = ("callback", "cancelled", "deadline_ms")

    def __init__(self, deadline_ms: int, callback: Callable[[], object] | None = None) -> None:
        self.deadline_ms = deadline_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class HeapTimer:
    """The reference: a binary heap of (deadline, seq, task), lazy cancellation."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, HeapTask]] = []
        self._seq = itertools.count()

    def add(self, task: HeapTask) -> bool:
        heappush(self._heap, (task.deadline_ms, next(self._seq), task))
        return True

    def advance(self, now_ms: int) -> list[HeapTask]:
        heap = self._heap
        out: list[HeapTask] = []
        while heap and heap[0][0] <= now_ms:
            task = heappop(heap)[2]
            if not task.cancelled:
                out.append(task)
        return out


Impl = tuple[str, Callable[[int], object], Callable[[], TimingWheel | HeapTimer]]
IMPLS: list[Impl] = [
    ("timing wheel", TimerTask, lambda: TimingWheel(0)),
    ("heapq", HeapTask, HeapTimer),
]


def best(repeat: int, run: Callable[[], dict[str, float]]) -> dict[str, float]:
    results = [run() for _ in range(repeat)]
    return {k: min(r[k] for r in results) for k in results[0]}


def clocked(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_cpu(make_task: Callable[[int], object], make_timer: Callable, deadlines: list[int]) -> dict:
    out: dict[str, float] = {}
    tasks: list = []
    timer = make_timer()

    def create() -> None:
        tasks[:] = [make_task(d) for d in deadlines]

    def add_all() -> None:
        add = timer.add
        for t in tasks:
            add(t)

    def cancel_all() -> None:
        for t in tasks:
            t.cancel()

    out["create"] = clocked(create)
    out["add"] = clocked(add_all)
    out["cancel"] = clocked(cancel_all)

    timer = make_timer()
    create()
    add_all()
    out["expire_jump"] = clocked(lambda: timer.advance(SPREAD_MS + 1))

    timer = make_timer()
    create()
    add_all()

    def stepped() -> None:
        advance = timer.advance
        for now in range(1, SPREAD_MS + 1):
            advance(now)

    out["expire_steps"] = clocked(stepped)
    tasks.clear()
    return out


def memory(make_task: Callable[[int], object], make_timer: Callable, deadlines: list[int]) -> tuple[float, float]:
    """Bytes per task while pending, and still held after every task was cancelled."""
    n = len(deadlines)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    timer = make_timer()
    tasks = [make_task(d) for d in deadlines]
    for t in tasks:
        timer.add(t)
    del t
    pending = tracemalloc.get_traced_memory()[0] - base - sys.getsizeof(tasks)
    for t in tasks:
        t.cancel()
    del tasks, t
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del timer
    return pending / n, retained / n


async def driver_figures(deadlines: list[int]) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    now = loop.time()

    def noop() -> None:
        pass

    timer = AsyncTimer(loop)
    base = timer.now_ms
    tasks = [TimerTask(base + d, noop) for d in deadlines]
    gc.collect()
    start = time.perf_counter()
    for t in tasks:
        timer.add(t)
    for t in tasks:
        t.cancel()
    ours = time.perf_counter() - start
    timer.close()
    del tasks

    gc.collect()
    start = time.perf_counter()
    handles = [loop.call_at(now + d / 1000, noop) for d in deadlines]
    for h in handles:
        h.cancel()
    theirs = time.perf_counter() - start
    del handles
    return ours, theirs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="tasks per run")
    ap.add_argument("--repeat", type=int, default=1, help="runs per figure (best is shown)")
    args = ap.parse_args()
    n = args.n
    rng = random.Random(7)
    deadlines = [rng.randrange(1, SPREAD_MS) for _ in range(n)]

    print(f"Python {sys.version.split()[0]}, {n:,} tasks, deadlines uniform over {SPREAD_MS / 1000:.0f} s")
    print(f"best of {args.repeat}; seconds (ns per task)\n")
    rows: dict[str, dict[str, float]] = {}
    for name, make_task, make_timer in IMPLS:
        rows[name] = best(args.repeat, lambda m=make_task, t=make_timer: run_cpu(m, t, deadlines))

    def cell(seconds: float) -> str:
        return f"{seconds:6.3f} s ({seconds / n * 1e9:5.0f})"

    lines = [
        ("create tasks", lambda r: r["create"]),
        ("add", lambda r: r["add"]),
        ("cancel", lambda r: r["cancel"]),
        ("adds + cancels", lambda r: r["add"] + r["cancel"]),
        ("expire: one jump past all", lambda r: r["expire_jump"]),
        ("expire: 1 ms steps over 30 s", lambda r: r["expire_steps"]),
        ("adds + expire (jump)", lambda r: r["add"] + r["expire_jump"]),
    ]
    wheel, heap = rows["timing wheel"], rows["heapq"]
    print(f"{'':30} {'timing wheel':>20} {'heapq (reference)':>20} {'wheel/heap':>10}")
    for label, pick in lines:
        a, b = pick(wheel), pick(heap)
        print(f"{label:30} {cell(a):>20} {cell(b):>20} {a / b:10.2f}")

    mem_n = min(n, 200_000)
    print(f"\nmemory per task (tracemalloc, {mem_n:,} tasks)")
    print(f"{'':30} {'timing wheel':>20} {'heapq (reference)':>20}")
    mem = {name: memory(mt, tm, deadlines[:mem_n]) for name, mt, tm in IMPLS}
    print(f"{'pending':30} {mem['timing wheel'][0]:>18.0f} B {mem['heapq'][0]:>18.0f} B")
    print(f"{'retained after cancelling all':30} {mem['timing wheel'][1]:>18.0f} B {mem['heapq'][1]:>18.0f} B")

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        ours, theirs = min((runner.run(driver_figures(deadlines)) for _ in range(args.repeat)), key=sum)
    print(f"\nasyncio driver on uvloop, {n:,} adds + cancels")
    print(f"{'AsyncTimer (one loop handle)':30} {cell(ours):>20}")
    print(f"{'loop.call_at per deadline':30} {cell(theirs):>20}   ratio {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
