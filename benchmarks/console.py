"""What the web console (/console, issue #20) costs: page render time with 10,000 in-flight records,
and the broker's produce and share throughput with a console page polling next to none.

Run: python benchmarks/console.py [--quick] [--rounds N] [--records N]
     python benchmarks/console.py --saturated [--sample-seconds S] [--pairs N] [--window S] [--amplify R]

1. Render, in-process (no socket): the view and the HTML of one share partition holding 10,000
   in-flight records, in two shapes: acquired in log batches (few runs) and every offset alone
   (acknowledged and archived alternating: 10,000 runs, the worst case for the strip).
2. Render over HTTP, against a broker process: the two shapes made by real share consumers
   (one member holding 10,000 records; then, in another group, one member holding a record so
   the window stays open while another accepts even offsets and rejects odd ones), each page and
   its JSON fetched 20 times. The strip draws at most 1,000 runs (``views.MAX_RUNS``); the
   counts always cover the whole window.
3. Overhead: one broker process, rounds of (produce n records with librdkafka, then consume them
   with 4 share members), with a console poller and without, the order swapped every round. The
   poller is a process of its own (as a browser is) that fetches the share-group page of the
   round's group and its JSON once a second each, twice what the page's own script asks for.
   Figures per round: produce records/s, acknowledged records/s and the broker's CPU per MB (the
   figure least disturbed by other work on the machine); reported as the median of the per-round
   ratios with a 95 % bootstrap interval, against the goal of at most 2 % slower. Then the
   direct figure, which needs no A/B: the broker's CPU per poll (100 in a row on the quiet broker)
   as a share of one second of the event loop.

4. ``--saturated``: the console on a broker whose event loop is the limit. A load process keeps
   it busy with small Fetch requests (4 connections x 8 in flight, pre-built frames; the loop
   thread is runnable 96-98 % of the time), and the console polls the share-group page and its
   JSON once a second (and, as a check that the method sees a cost when there is one, 20 times a
   second). First, sampled: py-spy (200 Hz) counts the event loop's samples and those inside the
   console (its handlers and aiohttp's request handling, which serves nothing else here); on a
   saturated loop, that share of its time is the throughput the console costs, and sampling is
   immune to the machine's noise, which only changes how fast the loop runs, not where its time
   goes. Then the A/B: windows with the console polling and without, alternating.

Measured here (2 cores shared with other work, load 6 to 10): render of 10,000 in-flight records
in log batches 0.3 ms in process, page 1.7-5 ms and JSON 1.1-4 ms over HTTP; every offset alone
(1,000 runs drawn) view 10 ms + HTML 30 ms in process, page 55 ms and JSON 25 ms over HTTP. The
A/B over 16 rounds of 60,000 records did not resolve 2 % on this machine (acked records/s +2.0 %,
95 % interval -28.6 % .. +31.7 %; broker CPU per MB +8.0 %, -8.6 % .. +24.2 %); directly, a poll
(page and JSON of a share group) costs the broker 1.34 ms of CPU: 0.13 % of the event loop at
one a second, which bounds the slowdown of a saturated broker.

``--saturated`` (load 2, 3,600-5,300 Fetch answers/s, loop runnable 99 %): sampled over 60 s,
the console polling once a second took 46 of 9,468 event-loop samples, 0.49 % (95 % upper
bound 0.65 %): the goal of <= 2 % is shown. Polling 20 times a second it took 8.98 %, and there
the A/B, which can resolve an effect that large, agrees: Fetch answers/s -10.3 % (+2.7 ..
+12.1 %). At one poll a second the A/B's windows scatter too much to resolve anything (+6.2 %,
-5.2 .. +12.7 %).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import math
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from metrics_overhead import median_interval, threads_cpu_seconds  # noqa: E402
from share_common import OVERRIDES, RECORD, create_topic, group_config, high_watermarks, produce  # noqa: E402
from share_members import share_run  # noqa: E402

from shoal.broker.console import pages  # noqa: E402
from shoal.broker.console.views import share_partition_view  # noqa: E402
from shoal.broker.share.share_partition import SharePartition  # noqa: E402
from shoal.protocol.constants import ACCEPT, REJECT  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402

IN_FLIGHT = 10_000
GOAL = 0.02
MIB = 1 << 20


class _Batch:
    __slots__ = ("base_offset", "is_control", "is_transactional", "last_offset", "producer_id")

    def __init__(self, first: int, last: int) -> None:
        self.base_offset, self.last_offset = first, last
        self.is_control, self.is_transactional, self.producer_id = False, False, -1


def _partition(split: bool) -> SharePartition:
    sp = SharePartition("g", "t", 0, max_in_flight_records=IN_FLIGHT + 1, lock_duration_ms=30_000)
    sp.initialize(1, 0, [], log_start_offset=0, high_watermark=IN_FLIGHT + 1)
    log = [_Batch(o, o + 99) for o in range(0, IN_FLIGHT, 100)]
    for k in range(4):  # four members, a quarter each, in log batches
        sp.acquire(f"member-{k}", log[k * 25 : (k + 1) * 25], IN_FLIGHT, now_ms=k)
    if split:  # offset 0 stays acquired (the window stays open); the rest alternate accepted / rejected
        for k in range(4):
            first, last = max(1, k * IN_FLIGHT // 4), (k + 1) * IN_FLIGHT // 4 - 1
            types = [ACCEPT if o % 2 == 0 else REJECT for o in range(first, last + 1)]
            errors, change = sp.acknowledge(f"member-{k}", [(first, last, types)], 10)
            assert not any(errors)
            change.commit()
    return sp


def render_in_process(repeat: int) -> None:
    print(f"render in process: one share partition, {IN_FLIGHT:,} in-flight records (median of {repeat})")
    for split in (False, True):
        sp = _partition(split)
        times_view, times_html, times_json = [], [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            v = share_partition_view(sp, high_watermark=IN_FLIGHT, mono_ms=20, now_ms=1_700_000_000_000)
            t1 = time.perf_counter()
            group = {
                "group_id": "g",
                "state": "Stable",
                "group_epoch": 1,
                "members": [],
                "configs": [],
                "partitions": [{**v, "topic": "t"}],
                "totals": v["counts"],
                "lag": v["lag"],
                "dead_letter_topic": None,
            }
            page = pages.share_group_page(group, poll="/x")
            t2 = time.perf_counter()
            body = json.dumps(group, separators=(",", ":"))
            t3 = time.perf_counter()
            times_view.append(t1 - t0)
            times_html.append(t2 - t1)
            times_json.append(t3 - t2)
        shape = "every offset alone" if split else "in log batches"
        print(
            f"  {shape:<20} runs {len(v['runs']):>6,}  view {statistics.median(times_view) * 1000:7.2f} ms  "
            f"HTML {statistics.median(times_html) * 1000:7.2f} ms ({len(page) / 1024:,.0f} KiB)  "
            f"JSON {statistics.median(times_json) * 1000:7.2f} ms ({len(body) / 1024:,.0f} KiB)"
        )


def _get(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        n = len(r.read())
    return time.perf_counter() - t0, n


def render_over_http(repeat: int, tmp: str) -> None:
    from shoal.client.share.consumer import AcknowledgeType, AsyncShareConsumer

    overrides = [*OVERRIDES, f"group.share.max.partition.max.record.locks={IN_FLIGHT}"]
    b = BrokerProcess(Path(tmp) / "render", overrides).start()
    try:
        create_topic(b.port, "render", 1)
        produce(b.bootstrap, "render", 1, IN_FLIGHT, 16 * 1024, value_bytes=100)
        for g in ("batches", "split"):
            group_config(b.port, g, share_auto_offset_reset="earliest", share_partition_max_record_locks=str(IN_FLIGHT))

        async def measure(g: str) -> None:
            base = f"http://127.0.0.1:{b.http_port}/console"
            with urllib.request.urlopen(f"{base}/api/share-groups/{g}", timeout=30) as r:
                p = json.loads(r.read())["partitions"][0]
            page_t = [await asyncio.to_thread(_get, f"{base}/share-groups/{g}") for _ in range(repeat)]
            json_t = [await asyncio.to_thread(_get, f"{base}/api/share-groups/{g}") for _ in range(repeat)]
            counts = ", ".join(f"{k.lower()} {v:,}" for k, v in p["counts"].items())
            print(
                f"  {g:<8} window {p['spso']:,}..{p['speo']:,} ({p['in_flight']:,} in flight, {len(p['runs']):,} runs "
                f"drawn; {counts})\n"
                f"           page {statistics.median(t for t, _ in page_t) * 1000:7.1f} ms ({page_t[0][1] / 1024:,.0f} KiB)"
                f"   JSON {statistics.median(t for t, _ in json_t) * 1000:7.1f} ms ({json_t[0][1] / 1024:,.0f} KiB)"
            )

        async def scenario() -> None:
            cfg = {"bootstrap.servers": b.bootstrap, "share.acknowledgement.mode": "explicit"}
            print(f"render over HTTP (broker process, page and JSON fetched {repeat} times each, median):")
            deadline = time.monotonic() + 120
            async with AsyncShareConsumer({**cfg, "group.id": "batches", "max.poll.records": IN_FLIGHT}) as holder:
                holder.subscribe(["render"])  # holds what it got: explicit mode, never acknowledged
                while not await holder.poll(1000) and time.monotonic() < deadline:
                    pass
                await measure("batches")
            one = {**cfg, "group.id": "split", "share.acquire.mode": "record_limit"}
            async with (
                AsyncShareConsumer(one, max_poll_records=1) as first,
                AsyncShareConsumer(one, max_poll_records=500) as worker,
            ):
                first.subscribe(["render"])  # takes offset 0 and holds it: the window stays open
                while not await first.poll(500) and time.monotonic() < deadline:
                    pass
                worker.subscribe(["render"])  # the rest: even offsets accepted, odd ones rejected
                done = 0
                while done < IN_FLIGHT - 1 and time.monotonic() < deadline:
                    for r in await worker.poll(500):
                        worker.acknowledge(r, AcknowledgeType.ACCEPT if r.offset % 2 == 0 else AcknowledgeType.REJECT)
                        done += 1
                await worker.commit_sync()
                await measure("split")

        asyncio.run(scenario())
    finally:
        b.stop()


# -- overhead -------------------------------------------------------------------------------------
def _poll_loop(port: int, path: Any, active: Any, stop: Any, count: Any, every: float) -> None:
    """The poller process: while active, the page and its JSON once every ``every`` seconds, on one
    kept-alive connection (as a browser does)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        if not active.wait(0.05):
            continue
        gid = path.value.decode()
        t0 = time.monotonic()
        for url in (f"/console/share-groups/{gid}", f"/console/api/share-groups/{gid}"):
            try:
                conn.request("GET", url)
                with conn.getresponse() as r:
                    r.read()
                count.value += 1
            except (OSError, http.client.HTTPException):
                conn.close()  # a reset: open a new connection
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        stop.wait(max(0.0, every - (time.monotonic() - t0)))


class Poller:
    def __init__(self, port: int, every: float = 1.0) -> None:
        ctx = mp.get_context("spawn")
        self.path = ctx.Array("c", 256)
        self.active, self.stopping, self.count = ctx.Event(), ctx.Event(), ctx.Value("i", 0)
        self.proc = ctx.Process(
            target=_poll_loop,
            args=(port, self.path, self.active, self.stopping, self.count, every),
            daemon=True,
        )
        self.proc.start()

    def watch(self, gid: str) -> None:
        self.path.value = gid.encode()
        self.active.set()

    def pause(self) -> None:
        self.active.clear()

    def stop(self) -> int:
        self.stopping.set()
        self.proc.join(10)
        return int(self.count.value)


def poll_cost(b: BrokerProcess, gid: str, n: int = 100) -> float:
    """The broker's CPU seconds per poll (page + JSON of one share group), ``n`` in a row."""
    assert b.proc is not None
    urls = [f"http://127.0.0.1:{b.http_port}/console/{p}{gid}" for p in ("share-groups/", "api/share-groups/")]
    before = threads_cpu_seconds(b.proc.pid)
    for _ in range(n):
        for url in urls:
            with urllib.request.urlopen(url, timeout=10) as r:
                r.read()
    return (threads_cpu_seconds(b.proc.pid) - before) / n


def overhead(rounds: int, n: int, tmp: str) -> None:
    b = BrokerProcess(Path(tmp) / "overhead", OVERRIDES).start()
    poller = Poller(b.http_port)
    figures: dict[str, dict[str, list[float]]] = {}
    print(
        f"console overhead: {rounds} rounds (+1 warm-up) of {n:,} records of 1 KiB produced, then shared by 4 members;"
        " console polling (page + JSON once a second) vs none, order swapped each round"
    )
    off_cpu = off_wall = 0.0  # the broker's CPU and the wall time of the counted rounds without the console
    try:
        assert b.proc is not None
        pid = b.proc.pid
        for r in range(rounds + 1):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                topic, gid = f"q-{r}-{mode}", f"g-{r}-{mode}"
                create_topic(b.port, topic, 1)
                if mode == "on":
                    poller.watch(gid)
                cpu0 = threads_cpu_seconds(pid)
                t0 = time.perf_counter()
                produce(b.bootstrap, topic, 1, n, 64 * 1024)
                produce_s = time.perf_counter() - t0
                hwms = high_watermarks(b.port, topic, 1)
                run = share_run(b, topic, 1, 4, gid, hwms)
                cpu = threads_cpu_seconds(pid) - cpu0
                poller.pause()
                if r > 0 and mode == "off":
                    off_cpu += cpu
                    off_wall += time.perf_counter() - t0
                got = {
                    "produce rec/s": n / produce_s,
                    "share acked rec/s": n / run.ack_s,
                    "broker CPU ms/MB": cpu * 1000 / (2 * n * RECORD / MIB),
                }
                if not run.ok:
                    print(f"  round {r} {mode}: the share run lost, duplicated or redelivered records")
                if r > 0:
                    for k, v in got.items():
                        figures.setdefault(k, {"on": [], "off": []})[mode].append(v)
                shown = "  ".join(f"{k} {v:,.1f}" for k, v in got.items())
                print(f"  {'warm-up' if r == 0 else f'round {r}':>8} console {mode:>3}: {shown}", flush=True)
        per_poll = poll_cost(b, f"g-{rounds}-on")
    finally:
        polls = poller.stop()
        b.stop()
    print(f"  ({polls} console requests answered while measured)")
    busy = off_cpu / off_wall if off_wall else float("nan")
    print(
        f"  direct: one poll (the share-group page and its JSON) costs the broker {per_poll * 1000:.2f} ms of CPU "
        f"(100 in a row, quiet broker). At one a second that is {per_poll:.2%} of the event loop's time, the most "
        f"it can slow a broker whose one loop is saturated; and {per_poll / busy:.1%} of the {busy:.2f} cores this "
        "broker used on average while measured without the console (it mostly waited for the clients)"
    )
    print(
        f"  {'figure':<20} {'on':>10} {'off':>10} {'on/off':>7} {'95% interval':>15} {'cost':>7}  verdict (goal <= 2 %)"
    )
    for name, by in figures.items():
        on, off = statistics.median(by["on"]), statistics.median(by["off"])
        mid, lo, hi = median_interval([a / b_ for a, b_ in zip(by["on"], by["off"]) if b_])
        if name.startswith("broker CPU"):
            cost, c_lo, c_hi = mid - 1, lo - 1, hi - 1
        else:
            cost, c_lo, c_hi = 1 - mid, 1 - hi, 1 - lo
        verdict = "shown" if c_hi <= GOAL else "refuted" if c_lo > GOAL else "not resolved"
        print(
            f"  {name:<20} {on:10,.1f} {off:10,.1f} {mid:7.3f} {f'{lo:.3f} .. {hi:.3f}':>15} {cost:+7.1%}"
            f"  ({c_lo:+.1%} .. {c_hi:+.1%}) {verdict}"
        )


# -- saturated loop ---------------------------------------------------------------------------------
def _fetch_load(port: int, topic: str, offsets: list[int], answered: Any, stop: Any) -> None:
    """The load process: ``LOAD_CONNECTIONS`` connections, each keeping ``LOAD_IN_FLIGHT`` small
    Fetch requests (v12, 16 KiB, offsets cycling over the topic) unanswered. Pre-built frames and a
    bare uvloop protocol that only splits answers by their length: the client does a fraction of
    the broker's work per request, so the broker's event loop, not the client, sets the rate."""
    import struct

    import uvloop

    from shoal.protocol.api import api_by_name
    from shoal.protocol.frames import encode_request
    from tests.support.brokers import fetch_request

    key = api_by_name("Fetch").key
    frames = [
        b"".join(encode_request(key, 12, 1, "load", fetch_request(topic, 0, o, max_bytes=16 * 1024))) for o in offsets
    ]
    size_of = struct.Struct(">i").unpack_from

    async def run() -> None:
        loop = asyncio.get_running_loop()

        class Load(asyncio.Protocol):
            def __init__(self) -> None:
                self.buf = bytearray()
                self.next = 0

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport
                for _ in range(LOAD_IN_FLIGHT):
                    self.send()

            def send(self) -> None:
                self.transport.write(frames[self.next])  # type: ignore[attr-defined]
                self.next = (self.next + 1) % len(frames)

            def data_received(self, data: bytes) -> None:
                buf = self.buf
                buf += data
                pos, n = 0, 0
                while len(buf) - pos >= 4:
                    (size,) = size_of(buf, pos)
                    if len(buf) - pos - 4 < size:
                        break
                    pos += 4 + size
                    n += 1
                del buf[:pos]
                answered.value += n
                for _ in range(n):
                    self.send()

        for _ in range(LOAD_CONNECTIONS):
            await loop.create_connection(Load, "127.0.0.1", port)
        while not stop.is_set():
            await asyncio.sleep(0.1)

    uvloop.run(run())


LOAD_CONNECTIONS = 4
LOAD_IN_FLIGHT = 8


def _thread_runnable(pid: int, tid: int) -> float:
    """Seconds a thread was on a CPU or waiting in the run queue for one: its busy time, even when
    other processes on the machine hold the cores."""
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        on_cpu, waiting = f.read().split()[:2]
    return (int(on_cpu) + int(waiting)) / 1e9


@contextmanager
def _saturated_broker(tmp: str, name: str, every: float) -> Iterator[tuple[BrokerProcess, Poller, Any]]:
    """A broker with 20,000 records and a share group to draw, its event loop kept busy by the
    load process (warmed up 3 s), and a console poller (paused) at ``every`` seconds: (broker,
    poller, the load's answered counter). Everything is stopped on exit."""
    b = BrokerProcess(Path(tmp) / name, OVERRIDES).start()
    ctx = mp.get_context("spawn")
    answered, stop = ctx.RawValue("q", 0), ctx.Event()
    load = None
    poller = Poller(b.http_port, every)
    try:
        n = 20_000
        create_topic(b.port, "sat", 1)
        produce(b.bootstrap, "sat", 1, n, 64 * 1024)
        share_run(b, "sat", 1, 4, "sat-group", high_watermarks(b.port, "sat", 1))  # members' history to draw
        load = ctx.Process(target=_fetch_load, args=(b.port, "sat", list(range(0, n, 97)), answered, stop), daemon=True)
        load.start()
        time.sleep(3.0)  # warm-up: connections made, the page cache and the loop settled
        poller.path.value = b"sat-group"
        yield b, poller, answered
    finally:
        stop.set()
        if load is not None:
            load.join(10)
        poller.stop()
        b.stop()


def saturated(pairs: int, window: float, every: float, tmp: str) -> None:
    """The broker's event loop kept busy by small Fetch requests without end; windows with the
    console polling and without alternate (order swapped every pair). Per window: Fetch answers
    per second, and the broker's CPU per 1,000 answers."""
    with _saturated_broker(tmp, f"saturated-{every:g}", every) as (b, poller, answered):
        assert b.proc is not None
        pid = b.proc.pid
        rate: dict[str, list[float]] = {"on": [], "off": []}
        cpu_k: dict[str, list[float]] = {"on": [], "off": []}
        loop_busy: list[float] = []
        polls0 = poller.count.value
        for r in range(pairs):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                if mode == "on":
                    poller.watch("sat-group")
                time.sleep(0.2)  # the switch settles
                a0, c0, m0, t0 = (
                    answered.value,
                    threads_cpu_seconds(pid),
                    _thread_runnable(pid, pid),
                    time.perf_counter(),
                )
                time.sleep(window)
                a1, c1, m1, t1 = (
                    answered.value,
                    threads_cpu_seconds(pid),
                    _thread_runnable(pid, pid),
                    time.perf_counter(),
                )
                poller.pause()
                rate[mode].append((a1 - a0) / (t1 - t0))
                cpu_k[mode].append((c1 - c0) * 1e6 / max(1, a1 - a0))
                if mode == "off":
                    loop_busy.append((m1 - m0) / (t1 - t0))
        polls = (poller.count.value - polls0) // 2
    print(
        f"  console every {every:g} s ({1 / every:g} polls/s, page + JSON each): {pairs} pairs of {window:g} s windows; "
        f"{polls} polls answered; broker event-loop thread runnable (on a CPU or queued for one) {statistics.median(loop_busy):.0%} of the time without the console"
    )
    for name, by, higher in (("Fetch answers/s", rate, True), ("broker CPU us per answer", cpu_k, False)):
        ratios = [a / o for a, o in zip(by["on"], by["off"]) if o]
        mid, lo, hi = median_interval(ratios)
        cost, c_lo, c_hi = (1 - mid, 1 - hi, 1 - lo) if higher else (mid - 1, lo - 1, hi - 1)
        verdict = "shown" if c_hi <= GOAL else "refuted" if c_lo > GOAL else "not resolved"
        if pairs < 10:
            verdict = "(too few pairs for a verdict)"
        print(
            f"    {name:<30} on {statistics.median(by['on']):10,.0f}  off {statistics.median(by['off']):10,.0f}  "
            f"on/off {mid:.4f} ({lo:.4f} .. {hi:.4f})  cost {cost:+.2%} ({c_lo:+.2%} .. {c_hi:+.2%})  {verdict} (goal <= 2 %)"
        )


def _loop_share(raw: str) -> tuple[int, int]:
    """(event-loop samples, those inside the console) of py-spy's raw stacks. The loop's stacks
    run under uvloop's ``run`` (other threads start in ``threading``); the console's are its
    handlers (``broker/console/``) and aiohttp's request handling, which serves nothing else here
    (no /metrics scrapes)."""
    loop = console = 0
    with open(raw) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if "run (uvloop/__init__.py" not in stack:
                continue
            loop += int(n)
            if "/console/" in stack or "aiohttp/" in stack:
                console += int(n)
    return loop, console


def _wilson_upper(k: int, n: int, z: float = 1.96) -> float:
    """The upper end of the 95 % Wilson interval of a proportion k / n."""
    if n == 0:
        return float("nan")
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre + spread) / (1 + z * z / n)


def saturated_share(seconds: float, every: float, tmp: str) -> None:
    """The console's share of a saturated event loop, sampled (py-spy, 200 Hz) while it polls:
    on a loop that is the limit, the share of its time the console takes is the throughput it
    costs. Immune to the machine's noise that defeats the A/B: it counts where the loop's own
    samples are, not how fast the loop ran."""
    from py_spy_profile import start_profile, stop_profile

    raw = str(Path(tmp) / f"console-{every:g}.raw")
    with _saturated_broker(tmp, f"share-{every:g}", every) as (b, poller, answered):
        assert b.proc is not None
        poller.watch("sat-group")
        polls0, a0 = poller.count.value, answered.value
        spy = start_profile(b.proc.pid, raw)
        time.sleep(seconds)
        stop_profile(spy)
        polls, answers = (poller.count.value - polls0) // 2, answered.value - a0
        poller.pause()
    loop, console = _loop_share(raw)
    share = console / loop if loop else float("nan")
    print(
        f"  console every {every:g} s: {seconds:g} s sampled, {polls} polls, {answers / seconds:,.0f} Fetch answers/s; "
        f"{loop:,} event-loop samples, {console:,} in the console: {share:.3%} of the loop "
        f"(95 % upper bound {_wilson_upper(console, loop):.3%}); goal <= 2 %: "
        f"{'shown' if _wilson_upper(console, loop) <= GOAL else 'not shown'}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds and records (a smoke run)")
    ap.add_argument("--rounds", type=int, default=0, help="overhead rounds (default 10, 2 with --quick)")
    ap.add_argument("--records", type=int, default=0, help="records per overhead measurement (default 50k)")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument(
        "--saturated",
        action="store_true",
        help="only the saturated-loop A/B: endless small Fetches, console windows on/off, at one poll a second "
        "and at --amplify polls a second (the check that the method sees a cost when there is one)",
    )
    ap.add_argument("--pairs", type=int, default=30, help="window pairs of the saturated A/B (default 30)")
    ap.add_argument("--window", type=float, default=3.0, help="seconds per window of the saturated A/B")
    ap.add_argument("--sample-seconds", type=float, default=60.0, help="seconds py-spy samples the saturated loop")
    ap.add_argument("--amplify", type=float, default=20.0, help="polls a second of the sensitivity check (0: none)")
    args = ap.parse_args()
    if args.saturated:
        print("saturated event loop: Fetch answers/s with the console polling vs not, windows alternating")
        with tempfile.TemporaryDirectory(prefix="shoal-bench-console-") as tmp:
            print("  sampled: the console's share of the saturated loop's time (py-spy)")
            saturated_share(args.sample_seconds, 1.0, tmp)
            if args.amplify > 0:
                saturated_share(args.sample_seconds, 1.0 / args.amplify, tmp)
            print("  A/B: windows with the console polling and without, alternating")
            saturated(args.pairs, args.window, 1.0, tmp)
            if args.amplify > 0:
                saturated(args.pairs, args.window, 1.0 / args.amplify, tmp)
        return
    render_in_process(5 if args.quick else 20)
    with tempfile.TemporaryDirectory(prefix="shoal-bench-console-") as tmp:
        render_over_http(5 if args.quick else 20, tmp)
        if not args.skip_overhead:
            overhead(args.rounds or (2 if args.quick else 10), args.records or (10_000 if args.quick else 50_000), tmp)


if __name__ == "__main__":
    main()
