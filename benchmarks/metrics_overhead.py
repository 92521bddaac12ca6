"""What /metrics costs: the same measurements on a broker with metrics on and one with them off,
in one run, alternating rounds (issue 19: at most 3%).

Used by produce_fetch.py and share_fetch.py (``--metrics both``). Two broker processes run side
by side from the start, one with the operations listener (``shoal.http.listeners`` on a free
port) scraped once a second while it is measured (Prometheus scrapes every 15 s by default: this
is the heavier load), one with ``shoal.http.listeners`` empty. Each round measures both, the
order swapped every round so that a drift over the run (page cache filling, a warming CPU) falls
on both alike; the figures are the medians over the rounds and the ratio is on / off.

What "off" leaves out: the listener, the scrapes and the collector's work at scrape time. The
broker's plain-int counters (``shoal.broker.metrics.counters``) are bumped either way (there is
no switch for them): their cost is in both figures, and the ratio does not show it.
"""

from __future__ import annotations

import statistics
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.brokers import BrokerProcess

__all__ = ["Scraper", "alternate", "broker_pair"]


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


def alternate(brokers: dict[str, BrokerProcess], rounds: int, measure: Measure, higher_is_better: bool = True) -> None:
    """Run ``measure`` on both brokers for a warm-up round (printed, not counted) and ``rounds``
    rounds (order swapped each round), and print every round's figures, the medians and the
    ratio on / off per figure."""
    figures: dict[str, dict[str, list[float]]] = {}
    scrapes = 0
    for r in range(rounds + 1):
        order = ("on", "off") if r % 2 == 0 else ("off", "on")
        for mode in order:
            b = brokers[mode]
            scraper = Scraper(b.http_port) if mode == "on" else None
            try:
                got = measure(b, r)
            finally:
                if scraper is not None:
                    scrapes += scraper.stop()
            if r > 0:
                for name, v in got.items():
                    figures.setdefault(name, {"on": [], "off": []})[mode].append(v)
            shown = "  ".join(f"{k} {v:,.1f}" for k, v in got.items())
            print(f"  {'warm-up' if r == 0 else f'round {r}':>8} metrics {mode:>3}: {shown}", flush=True)
    print(f"  (/metrics scraped {scrapes} times, once a second while the metrics-on broker was measured)")
    w = max(len(n) for n in figures)
    head = f"figure (median of {rounds} rounds)"
    print(f"  {head:<{w + 4}} {'metrics on':>12} {'off':>12} {'on/off':>7} {'cost':>7}  per-round on/off (the noise)")
    for name, by in figures.items():
        on, off = statistics.median(by["on"]), statistics.median(by["off"])
        ratio = on / off if off else float("nan")
        cost = (1 - ratio) if higher_is_better else (ratio - 1)
        pairs = sorted(a / b for a, b in zip(by["on"], by["off"]) if b)
        spread = f"{pairs[0]:.2f} .. {pairs[-1]:.2f}" if pairs else ""
        print(f"  {name:<{w + 4}} {on:12,.1f} {off:12,.1f} {ratio:7.3f} {cost:+7.1%}  {spread}")
