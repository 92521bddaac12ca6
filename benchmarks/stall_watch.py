"""Event-loop stall watcher: a probe that says where the broker's loop was when it stalled.

Why: a share-state write's median is a few ms but its tail is tens of ms, and a
stalled loop delays every acknowledgement waiting on it. A profiler shows where
CPU goes on average; this shows what the loop was doing during the stalls only.

How: a thread posts a no-op to the loop every ``tick_ms`` (call_soon_threadsafe)
and waits for it to run. When it has not run ``late_ms`` later, the loop is
stalled: the thread samples the loop thread's Python stack (sys._current_frames)
every few ms until the tick runs, and records the stall's length, whether a
garbage collection was running (gc.callbacks), and the stacks seen. The report
(text) is rewritten every few seconds and at exit.

Use: ``benchmarks/share_scaling.py --stalls FILE`` runs the broker with it (this
module's ``stall_hook/sitecustomize.py`` installs it when SHOAL_STALL_WATCH names
a file); or ``install(loop, path)`` from any asyncio program.
"""

from __future__ import annotations

import atexit
import collections
import gc
import sys
import threading
import time
import traceback
from asyncio import AbstractEventLoop

TICK_MS = 2.0
LATE_MS = 30.0
SAMPLE_MS = 5.0
FRAMES = 8  # innermost frames kept per sample


class StallWatcher:
    def __init__(self, loop: AbstractEventLoop, path: str, tick_ms: float = TICK_MS, late_ms: float = LATE_MS):
        self.loop = loop
        self.path = path
        self.tick_s = tick_ms / 1000
        self.late_s = late_ms / 1000
        self.loop_thread = threading.get_ident()  # install() runs on the loop's thread
        self.stalls: list[tuple[float, float, bool, str]] = []  # (start s, ms, gc seen, stack at its start)
        self.stacks: collections.Counter[str] = collections.Counter()  # stack -> samples
        self.first_stacks: collections.Counter[str] = collections.Counter()  # stack at each stall's start -> stalls
        self.gc_running = False
        self.gc_ms: list[tuple[int, float]] = []  # (generation, ms) of collections over late_ms
        self._gc_started = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self._t0 = time.perf_counter()
        gc.callbacks.append(self._gc)
        self.thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)
        self.thread.start()
        atexit.register(self.write)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.gc_running = True
            self._gc_started = time.perf_counter()
        else:
            self.gc_running = False
            ms = (time.perf_counter() - self._gc_started) * 1000
            if ms >= LATE_MS / 3:
                self.gc_ms.append((info.get("generation", -1), ms))

    def _sample(self) -> str:
        frame = sys._current_frames().get(self.loop_thread)
        if frame is None:
            return "<no frame>"
        entries = traceback.extract_stack(frame)[-FRAMES:]
        return " <- ".join(f"{e.filename.rsplit('/', 2)[-1]}:{e.lineno} {e.name}" for e in reversed(entries))

    def _run(self) -> None:
        last_write = time.monotonic()
        while not self._stop.is_set():
            ran = threading.Event()
            posted = time.perf_counter()
            try:
                self.loop.call_soon_threadsafe(ran.set)
            except RuntimeError:  # the loop closed
                return
            if not ran.wait(self.late_s):
                gc_seen = self.gc_running
                first = self._sample()
                with self._lock:
                    self.first_stacks[first] += 1
                    self.stacks[first] += 1
                while not ran.wait(SAMPLE_MS / 1000):
                    gc_seen = gc_seen or self.gc_running
                    s = self._sample()
                    with self._lock:
                        self.stacks[s] += 1
                with self._lock:
                    ms = (time.perf_counter() - posted) * 1000
                    self.stalls.append((posted - self._t0, ms, gc_seen, first))
            time.sleep(self.tick_s)
            if time.monotonic() - last_write > 5:
                self.write()
                last_write = time.monotonic()

    def report(self, top: int = 12) -> str:
        with self._lock:
            stalls = list(self.stalls)
            firsts = self.first_stacks.most_common(top)
            stacks = self.stacks.most_common(top)
        ms = sorted(m for _, m, _, _ in stalls)
        lines = [f"loop stalls over {LATE_MS:g} ms (tick {TICK_MS:g} ms), {time.monotonic() - self.started:.0f} s"]
        if ms:
            lines.append(
                f"  {len(ms)} stalls: median {ms[len(ms) // 2]:.0f} ms, max {ms[-1]:.0f} ms, "
                f"total {sum(ms):.0f} ms, during a gc {sum(1 for _, _, g, _ in stalls if g)}"
            )
        else:
            lines.append("  none")
        gcs = sorted(self.gc_ms, key=lambda x: -x[1])[:top]
        lines.append(f"  gc collections over {LATE_MS / 3:.0f} ms: " + ", ".join(f"gen{g} {m:.0f}" for g, m in gcs))
        lines.append("the longest stalls (s since start, ms, gc, stack at their start):")
        for t, m, g, first in sorted(stalls, key=lambda x: -x[1])[:top]:
            lines.append(f"  {t:6.1f} {m:6.0f}{' gc' if g else '   '}  {first}")
        lines.append("where each stall started (stalls):")
        lines += [f"  {n:4}  {s}" for s, n in firsts]
        lines.append("all samples while stalled (samples of 5 ms):")
        lines += [f"  {n:4}  {s}" for s, n in stacks]
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        try:
            with open(self.path, "w") as f:
                f.write(self.report())
        except OSError:
            pass


def install(loop: AbstractEventLoop, path: str) -> StallWatcher:
    """Watch `loop` (call from its thread), reporting into `path`."""
    return StallWatcher(loop, path)
