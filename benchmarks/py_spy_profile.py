"""py-spy on a running broker: start, stop, and a summary of its raw (collapsed) stacks.

Not a benchmark itself: the --profile helpers of benchmarks/share_fetch.py,
split out to keep each module under the project's 800-line rule. Nothing in
here is specific to share groups; any benchmark holding a broker's pid can use
it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path


def start_profile(pid: int, path: str) -> subprocess.Popen:
    spy = Path(sys.executable).with_name("py-spy")
    cmd = [
        str(spy if spy.exists() else "py-spy"),
        "record",
        "--format",
        "raw",
        "--nonblocking",
        "--threads",
        "-r",
        "200",
    ]
    return subprocess.Popen(
        [*cmd, "-o", path, "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def stop_profile(spy: subprocess.Popen) -> str:
    time.sleep(0.3)
    spy.send_signal(signal.SIGINT)
    try:
        _, err = spy.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    return err or ""


def _frame_name(frame: str, line: bool = True) -> str:
    """'func (path/to/file.py:123)' -> 'func (file.py:123)', or 'func (file.py)' without the line."""
    name, _, where = frame.partition(" (")
    if not where:
        return name
    where = Path(where.rstrip(")")).name
    return f"{name} ({where if line else where.rsplit(':', 1)[0]})"


# Frames that only carry every stack of their thread (interpreter start-up, the event loop's
# Python entry, thread bootstrap): left out of the inclusive list.
_WRAPPERS = {
    "<module> (__main__.py)",
    "_run_module_as_main (<frozen runpy>)",
    "_run_code (<frozen runpy>)",
    "main (cli.py)",
    "run (__init__.py)",
    "Runner.run (runners.py)",
    "Thread._bootstrap (threading.py)",
    "Thread._bootstrap_inner (threading.py)",
    "Thread.run (threading.py)",
}


def _thread_of(root: str) -> str | None:
    """'thread (1234): MainThread' -> 'MainThread'; None when the stack has no thread frame."""
    if not root.startswith("thread ("):
        return None
    name = root.partition("): ")[2]
    return name.rstrip("0123456789_-") or name or root


def summarize_profile(path: str, top: int) -> None:
    """Samples per thread, then self time per frame (with its line) and inclusive time per
    function of the event loop's thread, from py-spy's raw (collapsed) stacks.

    py-spy counts a thread blocked on a lock (a queue's ``get``, a condition's wait) as busy,
    so the writer and fsync threads show their waits as samples: only the loop thread's
    figures say where the broker's Python time goes."""
    per_thread: Counter = Counter()
    self_t: Counter = Counter()
    incl: Counter = Counter()
    other_self: Counter = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            count = int(n)
            frames = stack.split(";")
            thread = _thread_of(frames[0])
            if thread is not None:
                frames = frames[1:] or ["(no Python frame)"]
            else:
                thread = "MainThread" if any("Runner.run" in x for x in frames) else "other"
            per_thread[thread] += count
            if thread != "MainThread":
                other_self[f"{thread}: {_frame_name(frames[-1])}"] += count
                continue
            total += count
            self_t[_frame_name(frames[-1])] += count
            for fr in {_frame_name(x, line=False) for x in frames}:
                incl[fr] += count
    print(
        "  samples per thread (a thread waiting on a lock counts as busy): "
        + ", ".join(f"{name} {n}" for name, n in per_thread.most_common())
    )
    for fr, n in other_self.most_common(4):
        print(f"    {n:6}  {fr}")
    if not total:
        print("  (no samples of the event loop's thread)")
        return
    print(f"  {total} samples of the event loop's thread; top self time (uvloop's own C code shows as Runner.run):")
    for fr, n in self_t.most_common(top):
        print(f"    {n / total:6.1%}  {fr}")
    print("  top inclusive time per function (event loop's thread):")
    for fr, n in [(fr, n) for fr, n in incl.most_common() if fr not in _WRAPPERS][:top]:
        print(f"    {n / total:6.1%}  {fr}")
