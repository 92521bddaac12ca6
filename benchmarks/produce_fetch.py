"""Produce/fetch throughput and latency of a Shoal broker, next to raw loopback.

Run: python benchmarks/produce_fetch.py [--quick] [--metrics on|off|both] [--profile FILE]

--metrics both measures only what /metrics costs: codec-pump produce (acks=1
and -1), librdkafka produce of 1 KiB records and codec-pump fetch on a broker
with metrics on and one with them off, in many short alternating rounds, and
the broker's CPU time per MB moved; each figure's cost comes with a 95 %
bootstrap interval (metrics_overhead.py). --rounds N, --scrape-every S.

Starts a broker process (temporary data dir, 127.0.0.1, free port) and prints:
  * raw loopback: a uvloop socket pump (client process -> server process,
    1 MiB writes), the ceiling any broker on this machine can reach;
  * produce MB/s and records/s for confluent-kafka (librdkafka), aiokafka and
    kafka-python with 16 KiB and 1 KiB records in ~1 MiB batches, acks=1 and
    acks=-1 (-1 waits for the fsync);
  * the same produce with our codec as the client (pre-built 1 MiB batches,
    8 requests in flight): what the broker itself sustains when the client
    is not the limit;
  * the produce reference (issue #21), measured before and again after the
    produce rows (benchmarks/loopback_refs.py): the same loopback with the
    server os.writing every byte into a new file — what storing new bytes
    costs at that point of the run. On a VM whose fresh page-cache pages
    fault in slowly once recently freed memory is used up, it drops to a few
    hundred MB/s, and so does any produce that runs in that state. After the
    rows also the same made durable (a second thread fdatasyncing in back to
    back rounds): the most acks=-1 can reach. Every confluent and codec-pump
    row as a share of each, and the broker's CPU ms per MB for every row;
  * fetch MB/s (librdkafka consumer, and our codec with 32, 8 and 1 MiB
    fetches: on this VM the larger answers measured slower, also with a
    minimal mmap-and-write server in place of the broker);
  * each figure as a share of raw loopback;
  * produce-to-consume latency (median, p99) at low load;
  * timer: 1M adds + 1M cancels on the timing wheel.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from loopback_refs import loopback_into_file, raw_loopback  # noqa: E402
from metrics_overhead import MB_MOVED, Scraper, alternate, broker_pair  # noqa: E402
from py_spy_profile import start_profile, stop_profile, summarize_profile  # noqa: E402
from share_common import cpu_seconds  # noqa: E402

from tests.support.brokers import BrokerProcess  # noqa: E402

QUIET = {"log_level": 3}
MIB = 1 << 20


# -- producers ----------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)


def produce_confluent(
    bootstrap: str, topic: str, size: int, total: int, acks: str, extra: dict | None = None
) -> tuple[float, int]:
    """``extra``: more librdkafka settings (security_tls.py passes its TLS ones)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            **(extra or {}),
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": MIB,
            "message.max.bytes": 2 * MIB,
            "queue.buffering.max.kbytes": 256 * 1024,
            "enable.idempotence": False,
            "compression.type": "none",
            **QUIET,
        }
    )
    value = os.urandom(size)
    n = total // size
    failed: list = []

    def report(err, _msg) -> None:
        if err is not None:
            failed.append(err)

    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.001)
    p.flush(120)
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed: {failed[0]}")
    return time.perf_counter() - start, n


def produce_aiokafka(bootstrap: str, topic: str, size: int, total: int, acks: str) -> tuple[float, int]:
    from aiokafka import AIOKafkaProducer

    value = os.urandom(size)
    n = total // size

    async def run() -> float:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks=-1 if acks == "all" else 1,
            linger_ms=5,
            max_batch_size=MIB,
            max_request_size=2 * MIB,
        )
        await p.start()
        start = time.perf_counter()
        pending = []
        for _ in range(n):
            pending.append(await p.send(topic, value=value, partition=0))
            if len(pending) >= 2000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        elapsed = time.perf_counter() - start
        await p.stop()
        return elapsed

    return asyncio.run(run()), n


def produce_kafka_python(bootstrap: str, topic: str, size: int, total: int, acks: str) -> tuple[float, int]:
    from kafka import KafkaProducer

    value = os.urandom(size)
    n = total // size
    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all" if acks == "all" else 1,
        linger_ms=5,
        batch_size=MIB,
        max_request_size=2 * MIB,
    )
    start = time.perf_counter()
    for _ in range(n):
        p.send(topic, value=value, partition=0)
    p.flush(300)
    elapsed = time.perf_counter() - start
    p.close()
    return elapsed, n  # kafka-python: send futures would raise on failure; checked by the fetch count below


def fetch_confluent(bootstrap: str, topic: str, expect_bytes: int, extra: dict | None = None) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            **(extra or {}),
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * MIB,
            "max.partition.fetch.bytes": 16 * MIB,
            "receive.message.max.bytes": 100 * MIB,
            "queued.max.messages.kbytes": 1024 * 1024,
            **QUIET,
        }
    )
    start = time.perf_counter()
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    while got < expect_bytes and time.perf_counter() - start < 120:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                got += len(m.value())
    elapsed = time.perf_counter() - start
    c.close()
    if got < expect_bytes:
        raise RuntimeError(f"fetched {got} of {expect_bytes} bytes")
    return got / elapsed


# -- our codec as the client: what the broker itself sustains --------------------------


def codec_pump_produce(
    bootstrap: str, topic: str, acks: int, total: int, in_flight: int = 8, record_size: int = 16 * 1024
) -> tuple[float, int]:
    """Pre-built ~1 MiB batches (63 x 16 KiB records, or as many ``record_size`` ones), pipelined;
    returns (bytes/s, bytes written)."""
    from shoal.protocol.api import api_by_name
    from shoal.protocol.frames import encode_request
    from shoal.protocol.records import build_batch

    P = api_by_name("Produce").request_class()
    count = 63 * (16 * 1024) // record_size
    batch = build_batch([(None, os.urandom(record_size), [], int(time.time() * 1000)) for _ in range(count)])
    body = P(
        acks=acks,
        timeout_ms=30000,
        topic_data=[P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])],
    )
    frame = b"".join(encode_request(0, 9, 1, "pump", body))
    n = max(1, total // len(batch))
    return n * len(batch) / _pump(bootstrap, [frame] * n, in_flight), n * len(batch)


def codec_pump_fetch(bootstrap: str, topic: str, total: int, fetch_bytes: int = 32 * MIB, version: int = 12) -> float:
    """Fetch requests (v12, or v3: magic 1 message sets down-converted by the broker) of
    `fetch_bytes`, one at a time (as consumers do), until `total` bytes; the response lands
    in one reused buffer. Returns bytes/s."""
    import socket as so
    import struct

    from shoal.protocol.api import api_by_name
    from shoal.protocol.frames import decode_response, encode_request
    from shoal.protocol.records import iter_batches

    F = api_by_name("Fetch")
    Req = F.request_class()
    host, port = bootstrap.split(":")
    s = so.create_connection((host, int(port)))
    buf = bytearray(fetch_bytes + MIB)
    view = memoryview(buf)
    offset, got = 0, 0
    start = time.perf_counter()
    while got < total:
        body = Req(
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=fetch_bytes,
            topics=[
                Req.FetchTopic(
                    topic=topic,
                    partitions=[Req.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=fetch_bytes)],
                )
            ],
        )
        s.sendall(b"".join(encode_request(F.key, version, 1, "pump", body)))
        _recv_into(s, view[:4])
        size = struct.unpack_from(">i", buf)[0]
        if size > len(buf):
            buf = bytearray(size)
            view = memoryview(buf)
        _recv_into(s, view[:size])
        _, resp = decode_response(view[:size], F.key, version)
        records = resp.responses[0].partitions[0].records
        last = None
        if version >= 4:
            for header, _ in iter_batches(records, allow_partial=True):
                last = header.next_offset
        else:  # legacy entries: offset, size; a compressed wrapper holds its last inner offset
            pos = 0
            while pos + 12 <= len(records):
                entry_offset, entry_size = struct.unpack_from(">qi", records, pos)
                if pos + 12 + entry_size > len(records):
                    break
                last = entry_offset + 1
                pos += 12 + entry_size
        if last is None:
            break
        offset = last
        got += len(records)
        del records, resp
    elapsed = time.perf_counter() - start
    s.close()
    if got < total:
        raise RuntimeError(f"fetched {got} of {total} bytes")
    return got / elapsed


def _recv_into(s: socket.socket, view: memoryview) -> None:
    pos, n = 0, len(view)
    while pos < n:
        k = s.recv_into(view[pos:])
        if not k:
            raise ConnectionError("closed")
        pos += k


def _pump(bootstrap: str, frames: list[bytes], in_flight: int) -> float:
    """Send `frames` keeping `in_flight` unanswered, check every answer; returns seconds.

    A bare uvloop protocol, so that the client costs little more than the raw
    loopback pump: the frames are pre-built, responses are parsed from one
    receive buffer and only their error code is looked at.
    """
    import struct

    import uvloop

    from shoal.protocol.frames import decode_response

    host, port = bootstrap.split(":")
    size_of = struct.Struct(">i").unpack_from

    async def run() -> float:
        loop = asyncio.get_running_loop()
        finished = loop.create_future()

        class Pump(asyncio.Protocol):
            def __init__(self) -> None:
                self.buf = bytearray()
                self.sent = 0
                self.answered = 0

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def send(self) -> None:
                while self.sent < len(frames) and self.sent - self.answered < in_flight:
                    self.transport.write(frames[self.sent])
                    self.sent += 1

            def data_received(self, data: bytes) -> None:
                buf = self.buf
                buf += data
                pos = 0
                while len(buf) - pos >= 4:
                    (size,) = size_of(buf, pos)
                    if len(buf) - pos - 4 < size:
                        break
                    _, resp = decode_response(bytes(buf[pos + 4 : pos + 4 + size]), 0, 9)
                    code = resp.responses[0].partition_responses[0].error_code
                    if code and not finished.done():
                        finished.set_exception(RuntimeError(f"produce failed with error {code}"))
                    pos += 4 + size
                    self.answered += 1
                del buf[:pos]
                if self.answered == len(frames):
                    if not finished.done():
                        finished.set_result(None)
                else:
                    self.send()

            def connection_lost(self, exc: Exception | None) -> None:
                if not finished.done():
                    finished.set_exception(ConnectionError(f"broker closed the connection: {exc}"))

        transport, pump = await loop.create_connection(Pump, host, int(port))
        start = time.perf_counter()
        pump.send()
        await finished
        elapsed = time.perf_counter() - start
        transport.close()
        return elapsed

    return uvloop.run(run())


# -- latency ------------------------------------------------------------------------


def latency(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "lat",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 500,
            "fetch.min.bytes": 1,
            **QUIET,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    results: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                results.append(time.time_ns() - int(m.value()))

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(1.0)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1", **QUIET})
    for _ in range(count + 20):
        p.produce(topic, value=str(time.time_ns()).encode(), partition=0)
        p.poll(0)
        time.sleep(0.005)  # ~200 records/s: low load
    p.flush(10)
    deadline = time.monotonic() + 10
    while len(results) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    t.join()
    c.close()
    ms = sorted(r / 1e6 for r in results[20:])  # the first records also measure connection set-up
    return statistics.median(ms), ms[int(len(ms) * 0.99) - 1]


# -- timer --------------------------------------------------------------------------


def timer_figures() -> tuple[float, float]:
    from shoal.broker.timing.wheel import TimerTask, TimingWheel

    wheel = TimingWheel(0)
    tasks = [TimerTask(1 + (i * 7919) % 600_000) for i in range(1_000_000)]
    start = time.perf_counter()
    for t in tasks:
        wheel.add(t)
    added = time.perf_counter() - start
    start = time.perf_counter()
    for t in tasks:
        t.cancel()
    cancelled = time.perf_counter() - start
    return added, cancelled


# -- main -----------------------------------------------------------------------------


def metrics_overhead(quick: bool, rounds: int, scrape_every: float) -> None:
    """--metrics both: the figures most sensitive to per-request and per-record work, on and off,
    in many short rounds (metrics_overhead.py says how the interval is worked out)."""
    volume = 16 * MIB if quick else 64 * MIB

    def measure(b: BrokerProcess, r: int) -> dict[str, float]:
        bs, out, written, moved = b.bootstrap, {}, 0, 0
        for acks in (1, -1):
            topic = f"ovh-pump-{acks}-{r}"
            create_topic(bs, topic)
            rate, n_bytes = codec_pump_produce(bs, topic, acks, volume)
            written = written or n_bytes
            moved += n_bytes
            out[f"pump produce acks={acks} MB/s"] = rate / MIB
        topic = f"ovh-confluent-{r}"
        create_topic(bs, topic)
        elapsed, n = produce_confluent(bs, topic, 1024, volume // 2, "1")
        moved += n * 1024
        out["librdkafka produce 1 KiB records/s"] = n / elapsed
        out["pump fetch 8 MiB MB/s"] = codec_pump_fetch(bs, f"ovh-pump-1-{r}", written, 8 * MIB) / MIB
        out[MB_MOVED] = (moved + written) / MIB
        return out

    def cleanup(b: BrokerProcess, r: int) -> None:
        """The round's topics go (outside the measured window): the page cache the next round
        writes into is recycled rather than new, and the exposition keeps its size."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": b.bootstrap, **QUIET})
        for f in admin.delete_topics([f"ovh-pump-1-{r}", f"ovh-pump--1-{r}", f"ovh-confluent-{r}"]).values():
            f.result(30)
        time.sleep(0.5)  # the files' pages are freed before the next window opens

    print(f"/metrics overhead: {rounds} rounds, a broker with metrics on and one with them off, alternating")
    with tempfile.TemporaryDirectory(prefix="shoal-bench-metrics-") as tmp:
        with broker_pair(tmp, ["log.segment.bytes=536870912"]) as brokers:
            alternate(brokers, rounds, measure, scrape_every=scrape_every, cleanup=cleanup)


def downconversion(quick: bool) -> None:
    """Fetch v3 (down-converted) next to v12 of the same stored data, one broker, one run."""
    volume = 32 * MIB if quick else 128 * MIB
    with tempfile.TemporaryDirectory(prefix="shoal-bench-") as tmp:
        b = BrokerProcess(Path(tmp) / "data", ["log.segment.bytes=536870912", "shoal.http.listeners="])
        b.start()
        try:
            bs = b.bootstrap
            print(f"{'fetch (one partition, 32 MiB requests)':44} {'v12 MB/s':>9} {'v3 MB/s':>9} {'v3/v12':>7}")
            for record_size in (16 * 1024, 1024):
                topic = f"bench-down-{record_size}"
                create_topic(bs, topic)
                _, written = codec_pump_produce(bs, topic, 1, volume, record_size=record_size)
                modern = codec_pump_fetch(bs, topic, written)
                old = codec_pump_fetch(bs, topic, written, version=3)
                label = f"{record_size // 1024} KiB records, uncompressed"
                print(f"{label:44} {modern / MIB:9.1f} {old / MIB:9.1f} {old / modern:7.0%}")
        finally:
            b.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller volumes (for a smoke run)")
    ap.add_argument(
        "--metrics",
        choices=("on", "off", "both"),
        default="on",
        help="on: the operations listener runs and /metrics is scraped every second; off: shoal.http.listeners "
        "empty; both: only the overhead figures, on and off in alternating rounds",
    )
    ap.add_argument("--rounds", type=int, default=0, help="rounds of --metrics both (default 24, 6 with --quick)")
    ap.add_argument(
        "--scrape-every",
        type=float,
        default=1.0,
        help="seconds between scrapes of --metrics both (0: none, the control run)",
    )
    ap.add_argument(
        "--security",
        action="store_true",
        help="only the security figures: produce and fetch MB/s and new connections/s over SSL next to "
        "PLAINTEXT, one broker with both listeners (benchmarks/security_tls.py), then SASL authentications/s "
        "(PLAIN, SCRAM-SHA-256/512) next to plaintext connections/s (benchmarks/security_scram.py)",
    )
    ap.add_argument(
        "--downconversion",
        action="store_true",
        help="only fetch MB/s of Fetch v3 (old clients: stored batches down-converted to magic 1 message sets) "
        "next to Fetch v12 of the same data (16 KiB and 1 KiB records, uncompressed)",
    )
    ap.add_argument(
        "--profile",
        default="",
        help="py-spy the broker of the produce and fetch rows into this raw file; print its top frames",
    )
    args = ap.parse_args()
    if args.downconversion:
        downconversion(args.quick)
        return
    if args.security:
        import security_scram
        from security_tls import report

        report(args.quick)
        print()
        rates = security_scram.measure(1.5 if args.quick else 3.0)
        base = rates["plaintext connections"]
        print(f"{'setup (one client, one at a time)':<44} {'per second':>10}  vs plaintext")
        for name, rate in rates.items():
            print(f"{name:<44} {rate:>10.0f}  {rate / base:>6.0%}")
        return
    if args.metrics == "both":
        metrics_overhead(args.quick, args.rounds or (6 if args.quick else 24), args.scrape_every)
        return
    volume = 64 * MIB if args.quick else 256 * MIB
    small_volume = 16 * MIB if args.quick else 64 * MIB
    seconds = 2.0 if args.quick else 5.0

    raw = raw_loopback(seconds)
    print(f"raw loopback (uvloop pump, 1 MiB writes): {raw / MIB:8.1f} MB/s")
    print()
    with tempfile.TemporaryDirectory(prefix="shoal-bench-") as tmp:
        overrides = ["log.segment.bytes=536870912"]
        if args.metrics == "off":
            overrides.append("shoal.http.listeners=")
        b = BrokerProcess(Path(tmp) / "data", overrides)
        b.start()
        assert b.proc is not None
        spy = start_profile(b.proc.pid, args.profile) if args.profile else None
        scraper = Scraper(b.http_port) if args.metrics == "on" else None
        try:
            bs = b.bootstrap
            # Latency first, on an idle broker: "low load" also means no writeback
            # of the gigabytes the throughput runs leave in the page cache.
            # The reference for produce (issue #21): storing new bytes on this machine, measured
            # before the produce rows and again after them (fresh page-cache pages get slower as
            # memory fills), each produce row shown as a share of both below.
            into_file_before = loopback_into_file(tmp, volume * 2)
            create_topic(bs, "bench-latency")
            med, p99 = latency(bs, "bench-latency", 300 if args.quick else 1000)
            print(f"produce-to-consume latency at ~200 records/s: median {med:.2f} ms, p99 {p99:.2f} ms\n")
            print(
                f"{'producer':14} {'record':>7} {'acks':>4} {'MB/s':>8} {'records/s':>10} {'vs raw':>7}"
                f" {'broker CPU':>11}\n{'':>49} {'ms per MB':>11}"
            )
            fetch_topic = None
            fetch_bytes = 0
            produced: list[tuple[str, str, float]] = []  # (row, acks, bytes/s) against the file reference
            for name, fn in (
                ("confluent", produce_confluent),
                ("aiokafka", produce_aiokafka),
                ("kafka-python", produce_kafka_python),
            ):
                for size in (16 * 1024, 1024):
                    for acks in ("1", "all"):
                        topic = f"bench-{name}-{size}-{acks}"
                        create_topic(bs, topic)
                        vol = volume if size > 1024 else small_volume
                        if name != "confluent":
                            vol //= 2
                        cpu0 = cpu_seconds(b.proc.pid)
                        elapsed, n = fn(bs, topic, size, vol, acks)
                        cpu_ms_per_mb = (cpu_seconds(b.proc.pid) - cpu0) * 1000 / (n * size / MIB)
                        rate = n * size / elapsed
                        print(
                            f"{name:14} {size // 1024:>5}Ki {acks:>4} {rate / MIB:8.1f} {n / elapsed:10.0f} "
                            f"{rate / raw:6.0%} {cpu_ms_per_mb:11.2f}"
                        )
                        if name == "confluent" and size > 1024 and acks == "1":
                            fetch_topic, fetch_bytes = topic, n * size
                        if name == "confluent":
                            produced.append((f"confluent {size // 1024} KiB", acks, rate))
            pumped = 0
            for acks in (1, -1):
                topic = f"bench-pump-{acks}"
                create_topic(bs, topic)
                cpu0 = cpu_seconds(b.proc.pid)
                rate, written = codec_pump_produce(bs, topic, acks, volume * 2)
                cpu_ms_per_mb = (cpu_seconds(b.proc.pid) - cpu0) * 1000 / (written / MIB)
                pumped = pumped or written
                print(
                    f"{'codec pump':14} {16:>5}Ki {acks:>4} {rate / MIB:8.1f} {rate / 16384:10.0f} {rate / raw:6.0%}"
                    f" {cpu_ms_per_mb:11.2f}"
                )
                produced.append(("codec pump 16 KiB", "1" if acks == 1 else "all", rate))
            assert fetch_topic is not None
            # After the produce rows, so it cannot disturb them: storing new bytes as things
            # stand now, with the runs above in the page cache.
            into_file = loopback_into_file(tmp, volume * 2)
            # What acks=-1 can reach at most: the same, with the bytes fdatasynced as they come.
            into_disk = loopback_into_file(tmp, volume * 2, durable=True)
            print(
                f"\nreference: loopback whose server os.writes all it gets into a new file: "
                f"before the produce rows {into_file_before / MIB:8.1f} MB/s ({into_file_before / raw:.0%} of raw), "
                f"after them {into_file / MIB:8.1f} MB/s ({into_file / raw:.0%} of raw); "
                f"the same made durable (fdatasync rounds back to back) {into_disk / MIB:8.1f} MB/s"
            )
            print(
                f"{'produce (goal >= 0.8 of the reference)':40} {'acks':>4} {'MB/s':>8} {'/before':>8} {'/after':>7}"
                f" {'/durable':>8}"
            )
            for row, acks_, rate in produced:
                print(
                    f"{row:40} {acks_:>4} {rate / MIB:8.1f} {rate / into_file_before:8.2f} {rate / into_file:7.2f}"
                    f" {rate / into_disk:8.2f}"
                )
            print()
            rate = fetch_confluent(bs, fetch_topic, fetch_bytes)
            print(f"fetch, confluent consumer (16 KiB records): {rate / MIB:8.1f} MB/s  {rate / raw:6.0%} of raw")
            for size in (32, 8, 1):  # the share of raw loopback depends on the answer size: all shown
                rate = codec_pump_fetch(bs, "bench-pump-1", pumped, size * MIB)
                label = f"fetch, codec pump ({size} MiB fetches):"
                print(f"{label:43} {rate / MIB:8.1f} MB/s  {rate / raw:6.0%} of raw")
        finally:
            if scraper is not None:
                print(f"\n/metrics scraped {scraper.stop()} times during the run")
            if spy is not None:
                stop_profile(spy)
            b.stop()
    if args.profile:
        summarize_profile(args.profile, 25)
    added, cancelled = timer_figures()
    print(f"\ntiming wheel: 1M adds {added:.2f} s, 1M cancels {cancelled:.2f} s")


if __name__ == "__main__":
    main()
