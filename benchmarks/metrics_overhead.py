"""What /metrics costs: the same measurements on a broker with metrics on and one with them off,
in one run, alternating rounds (issue 19: at most 3%).

Used by produce_fetch.py and share_fetch.py (``--metrics both``). Two broker processes run side
by side from the start, one with the operations listener (``shoal.http.listeners`` on a free
port) scraped once a second while it is measured (Prometheus scrapes every 15 s by default: this
is the heavier load), one with ``shoal.http.listeners`` empty. Each round measures both, the
order swapped every round so that a drift over the run (page cache filling, a warming CPU, other
work on the machine) falls on both alike.

How it resolves a few percent on a shared 2-core machine, where one throughput figure moves by
10 % from one run to the next: many short rounds, and each round's ratio on / off of two
measurements taken back to back, so a slow drift cancels within the pair; the estimate is the
median of those per-round ratios, with a 95 % bootstrap interval (the rounds resampled with
replacement). Next to throughput, the broker's own CPU time for the same work per MB moved: it
does not depend on how fast the client or the other processes on the machine ran, only on how
much work the broker did, so its per-round ratios scatter far less. The CPU time is the sum over
the broker's threads of the nanoseconds on a CPU (/proc/<pid>/task/*/schedstat): utime + stime
of /proc/<pid>/stat count in 10 ms ticks, a tenth of one short round's broker CPU; the tick
total over all rounds is printed next to the nanosecond one as a check (a thread that ends
within a round would be missing from the latter). A figure's verdict says whether the interval
lies below 3 % (shown), above it (refuted) or straddles it (not resolved: more rounds).

The scrapes are paced over the measured time of the whole run (``PacedScraper``), not started
afresh per measurement: a short measurement would otherwise carry a whole scrape. Then the
direct figure, which needs no A/B at all: the broker's CPU per scrape (200 scrapes in a row on
the quiet broker, after the rounds), times the scrapes the counted rounds held, as a share of
the metrics-on broker's CPU in those rounds; and the same at Prometheus' default 15 s.
``--scrape-every 0`` is the control: no scrapes at all, so only the listener and the idle
sampler differ, and whatever else tells two broker processes apart.

Measured here (2 cores shared with other work, load 1 to 2.5; broker CPU per MB, 95 % interval):
produce_fetch.py, 64 rounds: control (no scrapes) +0.6 % (-3.7 .. +2.4), scraped every second
+3.1 % (+0.5 .. +5.7); directly, a scrape of 461 samples costs 7.1 ms of broker CPU, 1.3 % of the
broker's CPU at one a second and 0.09 % at one per 15 s. share_fetch.py, 16 rounds: the A/B does
not resolve it (control +5.3 %, -0.4 .. +15.5); directly, a scrape of 1,345 samples (every share
partition of 48 groups) costs 21.6 ms, 6.0 % at one a second and 0.40 % at one per 15 s. A
scrape costs about 15 µs per sample, 85 % of it in prometheus-client's text exposition.

What "off" leaves out: the listener, the scrapes, the collector's work at scrape time and the
idle sampler's timer (metrics/idle.py). The broker's plain-int counters
(``shoal.broker.metrics.counters``) are bumped either way (there is no switch for them): their
cost is in both figures, and the ratio does not show it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from share_common import cpu_seconds

from tests.support.brokers import BrokerProcess

__all__ = ["Scraper", "alternate", "broker_pair", "median_interval"]


class Scraper:
    """Scrape /metrics once a second on a thread while a measurement runs."""

    def __init__(self, port: int, every: float = 1.0) -> None:
        self.port = port
        self.every = every
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:  # the first scrape at once: a measurement shorter than a second gets one too
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
                r.read()
            self.scrapes += 1
            if self._stop.wait(self.every):
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.scrapes


def _paced_scrapes(port: int, every: float, active: Any, stop: Any, scraping: Any, count: Any) -> None:
    """The scraper process's loop (see PacedScraper)."""
    accrued, last = 0.0, time.monotonic()
    while not stop.is_set():
        time.sleep(0.005)
        now = time.monotonic()
        if active.is_set():
            accrued += now - last
            if accrued >= every:
                accrued -= every
                with scraping:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                        r.read()
                    count.value += 1
        last = time.monotonic()


class PacedScraper:
    """Scrape /metrics once per ``every`` seconds of measured time, over the whole run: it runs
    only between ``resume`` and ``pause`` and keeps its phase across them, so short measurements
    get their fair share of scrapes (a scraper started afresh for each would scrape at once, and
    a 0.2 s measurement would pay for a scrape a second's work should carry). It is a process of
    its own, as Prometheus is: a thread here would take the GIL from the measuring client and
    slow the client, not the broker, in the metrics-on windows."""

    def __init__(self, port: int, every: float) -> None:
        ctx = mp.get_context("spawn")
        self._active = ctx.Event()
        self._stop = ctx.Event()
        self._scraping = ctx.Lock()  # held for a scrape: pause waits for the one under way
        self._count = ctx.Value("i", 0)
        self._proc = ctx.Process(
            target=_paced_scrapes,
            args=(port, every, self._active, self._stop, self._scraping, self._count),
            daemon=True,
        )
        self._proc.start()

    @property
    def scrapes(self) -> int:
        return int(self._count.value)

    def resume(self) -> None:
        self._active.set()

    def pause(self) -> None:
        self._active.clear()
        with self._scraping:  # a scrape begun in the measured window ends in it
            pass

    def stop(self) -> int:
        self._stop.set()
        self._proc.join(10)
        return self.scrapes


@contextmanager
def broker_pair(tmp: str, overrides: list[str]) -> Iterator[dict[str, BrokerProcess]]:
    """{"on": broker with the operations listener, "off": broker without}, both running."""
    on = BrokerProcess(Path(tmp) / "data-on", overrides)
    off = BrokerProcess(Path(tmp) / "data-off", [*overrides, "shoal.http.listeners="])
    on.start()
    try:
        off.start()
        try:
            assert on.http_port and not off.http_port
            yield {"on": on, "off": off}
        finally:
            off.stop()
    finally:
        on.stop()


Measure = Callable[[BrokerProcess, int], dict[str, float]]  # (broker, round) -> {figure: value}

MB_MOVED = "_mb"  # a key a measure may add: MB the broker received and sent, for the CPU figure
CPU_PER_MB = "broker CPU ms per MB"
CPU_TOTAL = "broker CPU s"
GOAL = 0.03


def median_interval(xs: list[float], resamples: int = 4000, seed: int = 19) -> tuple[float, float, float]:
    """The median of ``xs`` and a 95 % bootstrap (percentile) interval of it."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(resamples))
    return statistics.median(xs), meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def threads_cpu_seconds(pid: int) -> float:
    """Seconds on a CPU of a process's live threads, summed from their schedstat (ns resolution)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
    return total / 1e9


class _Totals:
    scrapes = 0
    cpu_ns = 0.0  # the metrics-on broker's CPU over its measured windows, by schedstat
    cpu_ticks = 0.0  # the same by /proc/<pid>/stat
    on_cpu = 0.0  # the metrics-on broker's CPU (schedstat) over its measured windows, warm-up excluded
    on_scrapes = 0  # scrapes in those windows


def _measured(b: BrokerProcess, r: int, measure: Measure, scraper: PacedScraper | None, totals: _Totals) -> dict:
    assert b.proc is not None
    pid = b.proc.pid
    scrapes = scraper.scrapes if scraper is not None else 0
    ticks, cpu = cpu_seconds(pid), threads_cpu_seconds(pid)
    if scraper is not None:
        scraper.resume()
    try:
        got = measure(b, r)
    finally:
        if scraper is not None:
            scraper.pause()
    cpu = threads_cpu_seconds(pid) - cpu
    totals.cpu_ns += cpu
    totals.cpu_ticks += cpu_seconds(pid) - ticks
    if scraper is not None and r > 0:
        totals.on_cpu += cpu
        totals.on_scrapes += scraper.scrapes - scrapes
    mb = got.pop(MB_MOVED, None)
    if mb:
        got[CPU_PER_MB] = cpu * 1000 / mb
    else:
        got[CPU_TOTAL] = cpu
    return got


def scrape_cost(b: BrokerProcess, n: int = 200) -> tuple[float, int]:
    """The broker's CPU seconds per scrape of /metrics (``n`` in a row on the quiet broker, so the
    figure holds nothing else), and the samples one scrape returns."""
    assert b.proc is not None
    pid = b.proc.pid
    url = f"http://127.0.0.1:{b.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        samples = sum(1 for line in r.read().splitlines() if line and not line.startswith(b"#"))
    before = threads_cpu_seconds(pid)
    for _ in range(n):
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
    return (threads_cpu_seconds(pid) - before) / n, samples


def alternate(
    brokers: dict[str, BrokerProcess],
    rounds: int,
    measure: Measure,
    higher_is_better: bool = True,
    scrape_every: float = 1.0,
    cleanup: Callable[[BrokerProcess, int], None] | None = None,
) -> None:
    """Run ``measure`` on both brokers for a warm-up round (printed, not counted) and ``rounds``
    rounds (order swapped each round), then print per figure the medians, the median of the
    per-round ratios on / off with its 95 % bootstrap interval, the cost that gives and the
    verdict against 3 %. ``higher_is_better`` is about the measure's own figures; the broker CPU
    figure (added here) is lower-is-better. ``cleanup`` runs after each measurement, outside the
    measured window (e.g. deleting the round's topics, so that neither the page cache nor the
    exposition grows over the run)."""
    figures: dict[str, dict[str, list[float]]] = {}
    totals = _Totals()
    scraper = PacedScraper(brokers["on"].http_port, scrape_every if scrape_every > 0 else float("inf"))
    try:
        for r in range(rounds + 1):
            _round(brokers, r, measure, scraper, totals, figures, cleanup)
    finally:
        totals.scrapes = scraper.stop()
    _report(figures, rounds, totals, scrape_every, higher_is_better)
    if scrape_every <= 0:
        return  # the control run: the listener and the idle sampler, no scrapes
    per_scrape, samples = scrape_cost(brokers["on"])
    share = totals.on_scrapes * per_scrape / totals.on_cpu if totals.on_cpu else float("nan")
    print(
        f"  direct: one scrape ({samples:,} samples) costs the broker {per_scrape * 1000:.2f} ms of CPU (200 in a "
        f"row, quiet broker); the {totals.on_scrapes} scrapes of the counted rounds are {share:.2%} of the "
        f"metrics-on broker's {totals.on_cpu:.1f} CPU seconds there (at one scrape per 15 s: {share * scrape_every / 15:.3%})"
    )


def _round(
    brokers: dict[str, BrokerProcess],
    r: int,
    measure: Measure,
    scraper: PacedScraper,
    totals: _Totals,
    figures: dict[str, dict[str, list[float]]],
    cleanup: Callable[[BrokerProcess, int], None] | None,
) -> None:
    order = ("on", "off") if r % 2 == 0 else ("off", "on")
    for mode in order:
        got = _measured(brokers[mode], r, measure, scraper if mode == "on" else None, totals)
        if cleanup is not None:
            cleanup(brokers[mode], r)
        if r > 0:
            for name, v in got.items():
                figures.setdefault(name, {"on": [], "off": []})[mode].append(v)
        shown = "  ".join(f"{k} {v:,.1f}" for k, v in got.items())
        print(f"  {'warm-up' if r == 0 else f'round {r}':>8} metrics {mode:>3}: {shown}", flush=True)


def _report(
    figures: dict[str, dict[str, list[float]]], rounds: int, totals: _Totals, scrape_every: float, higher: bool
) -> None:
    print(
        f"  (/metrics scraped {totals.scrapes} times, every {scrape_every:g} s while the metrics-on broker was "
        f"measured; broker CPU over the measured windows {totals.cpu_ns:.2f} s by thread schedstat, "
        f"{totals.cpu_ticks:.2f} s by /proc/<pid>/stat ticks)"
    )
    w = max(len(n) for n in figures)
    print(
        f"  {'figure (' + str(rounds) + ' rounds)':<{w + 2}} {'on':>10} {'off':>10} "
        f"{'on/off':>7} {'95% interval':>15} {'cost':>7} {'cost interval':>17}  verdict (goal <= 3 %)"
    )
    for name, by in figures.items():
        on, off = statistics.median(by["on"]), statistics.median(by["off"])
        ratios = [a / b for a, b in zip(by["on"], by["off"]) if b]
        mid, lo, hi = median_interval(ratios)
        lower_better = name in (CPU_PER_MB, CPU_TOTAL) or not higher
        if lower_better:
            cost, c_lo, c_hi = mid - 1, lo - 1, hi - 1
        else:
            cost, c_lo, c_hi = 1 - mid, 1 - hi, 1 - lo
        verdict = "shown" if c_hi <= GOAL else "refuted" if c_lo > GOAL else "not resolved"
        print(
            f"  {name:<{w + 2}} {on:10,.1f} {off:10,.1f} {mid:7.3f} {f'{lo:.3f} .. {hi:.3f}':>15} "
            f"{cost:+7.1%} {f'{c_lo:+.1%} .. {c_hi:+.1%}':>17}  {verdict}"
        )
