"""Durability and robustness under abuse, as figures: kill -9 cycles, then hostile frames.

Run: python benchmarks/chaos.py [--cycles 50] [--frames 100000] [--quick]

(a) **kill -9 cycles.** A broker process (temporary data dir, fixed port) is killed with
SIGKILL every 1-3 s and restarted on the same port and directory, `--cycles` times, while:
  * two idempotent acks=all producers -- librdkafka (confluent_kafka.Producer) and the bundled
    AsyncProducer -- write keyed sequences (key "<producer>-<k>", value "<n>") to a 3-partition
    topic; a record counts as acknowledged when its delivery report / future says so;
  * two share consumers in one group -- librdkafka's ShareConsumer and AsyncShareConsumer,
    explicit mode -- ACCEPT every record; an ACCEPT counts as confirmed when the
    acknowledgement-commit callback reports it without error.
Afterwards the whole topic is read back and the table says: records acknowledged, lost
(acknowledged, absent from the log), duplicated (one key+value twice in the log), whether
every partition's offsets are contiguous, ACCEPTs confirmed, confirmed ACCEPTs delivered
again, and the recovery time per restart (spawn to the first answered Metadata).

(b) **hostile frames.** `--frames` frames from 100 connections: random bytes, lying size
prefixes, truncated bodies, unknown API keys and versions, produce batches with a corrupted
CRC, and well-formed ShareFetch / ShareAcknowledge / ShareGroupHeartbeat / OffsetCommit
requests full of nonsense (random ids, epochs, offsets, acknowledge types). A connection the
broker closes is reopened. Meanwhile a well-behaved client produces (acks=-1) in a loop.
Printed: broker crashes, broker RSS before and after, the good client's round-trip p99 before
and during the attack, and how many of its requests failed.

Both parts must show zeros where zeros are due; the process exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from share_fetch import create_topic, group_config, rss_anon  # noqa: E402

from shoal.protocol.api import api_by_name  # noqa: E402
from shoal.protocol.frames import encode_request  # noqa: E402
from shoal.protocol.records import build_batch  # noqa: E402
from tests.support.brokers import BrokerProcess, RawClient  # noqa: E402

TOPIC, GROUP, PARTITIONS = "chaos", "chaos-share", 3
OVERRIDES = [
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.share.min.heartbeat.interval.ms=100",
    "group.share.heartbeat.interval.ms=500",
    "group.share.min.record.lock.duration.ms=1000",
]
QUIET = {"log_level": 0}  # librdkafka: the refused connections of every restart are expected
LOCK_MS = "5000"  # the group's record lock: records of a killed session come back soon


# -- (a) kill -9 cycles --------------------------------------------------------------------


class Ledger:
    """What the clients were told, shared by their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[tuple[str, str]] = set()  # (key, value) acknowledged by the broker
        self.deliveries: Counter = Counter()  # (partition, offset) -> times delivered
        self.confirmed: set[tuple[int, int]] = set()  # ACCEPTs the broker confirmed
        self.after_confirm = 0  # deliveries of an offset whose ACCEPT was confirmed before
        self.ack_failures = 0  # ACCEPTs reported failed (their fate unknown: may come back)

    def delivered(self, partition: int, offset: int) -> None:
        with self.lock:
            if (partition, offset) in self.confirmed:
                self.after_confirm += 1
            self.deliveries[partition, offset] += 1

    def confirm(self, partition: int, offsets: Any, failed: bool) -> None:
        with self.lock:
            if failed:
                self.ack_failures += len(offsets)
            else:
                self.confirmed.update((partition, o) for o in offsets)


def rdk_producer(bootstrap: str, ledger: Ledger, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 300_000,
            "reconnect.backoff.max.ms": 200,
            **QUIET,
        }
    )

    def report(err: Any, msg: Any) -> None:
        if err is None:
            with ledger.lock:
                ledger.acked.add((msg.key().decode(), msg.value().decode()))

    n = 0
    while not stop.is_set():
        try:
            p.produce(TOPIC, key=f"rdk-{n % 64}".encode(), value=str(n).encode(), on_delivery=report)
            n += 1
        except BufferError:
            pass
        p.poll(0.002)
    p.flush(120)


async def ours_producer(bootstrap: str, ledger: Ledger, stop: threading.Event) -> None:
    from shoal.client.producer.producer import AsyncProducer

    async with AsyncProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "delivery.timeout.ms": 300_000}
    ) as p:
        futures: list[tuple[Any, str, str]] = []
        n = 0
        while not stop.is_set():
            key, value = f"ours-{n % 64}", str(n)
            futures.append((await p.send(TOPIC, value=value.encode(), key=key.encode()), key, value))
            n += 1
            await asyncio.sleep(0.002)
        await p.flush(120)
        for fut, key, value in futures:
            try:
                await fut
            except Exception:  # noqa: BLE001 - not acknowledged: not counted
                continue
            with ledger.lock:
                ledger.acked.add((key, value))


def rdk_share_consumer(bootstrap: str, ledger: Ledger, stop: threading.Event) -> None:
    from confluent_kafka import ShareConsumer

    sc = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "share.acknowledgement.mode": "explicit",
            "reconnect.backoff.max.ms": 200,
            **QUIET,
        }
    )
    sc.set_acknowledgement_commit_callback(
        lambda offsets, err: [ledger.confirm(tp.partition, o, err is not None) for tp, o in offsets.items()]
    )
    sc.subscribe([TOPIC])
    while not stop.is_set():
        for m in sc.poll(0.2) or ():
            if m.error() is None:
                ledger.delivered(m.partition(), m.offset())
                sc.acknowledge(m)
    sc.commit_sync()
    sc.close()


async def ours_share_consumer(bootstrap: str, ledger: Ledger, stop: threading.Event) -> None:
    from shoal.client.share.consumer import AsyncShareConsumer

    sc = AsyncShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "share.acknowledgement.mode": "explicit"}
    )
    sc.set_acknowledgement_commit_callback(
        lambda offsets, err: [ledger.confirm(tp.partition, o, err is not None) for tp, o in offsets.items()]
    )
    await sc.start()
    sc.subscribe([TOPIC])
    while not stop.is_set():
        try:
            records = await sc.poll(200)
        except Exception:  # noqa: BLE001 - a poll error during a restart: poll again
            await asyncio.sleep(0.1)
            continue
        for r in records:
            ledger.delivered(r.partition, r.offset)
            sc.acknowledge(r)
    try:
        await sc.commit_sync(10_000)
    finally:
        await sc.close()


def metadata_ok(port: int) -> bool:
    try:
        with RawClient(port, timeout=2.0) as c:
            md = c.call("Metadata", 12, topics=None)
        return md.brokers != []
    except OSError:
        return False


def read_back(port: int) -> tuple[Counter, bool, int]:
    """(key, value) counts over the whole topic, whether offsets are contiguous, records read."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "chaos-readback", **QUIET})
    seen: Counter = Counter()
    contiguous, total = True, 0
    try:
        for p in range(PARTITIONS):
            lo, hi = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            c.assign([TopicPartition(TOPIC, p, lo)])
            expect = lo
            while expect < hi:
                for m in c.consume(1000, 1.0):
                    if m.error() is not None:
                        continue
                    contiguous &= m.offset() == expect
                    expect = m.offset() + 1
                    seen[m.key().decode(), m.value().decode()] += 1
                    total += 1
            c.unassign()
    finally:
        c.close()
    return seen, contiguous, total


def kill_cycles(tmp: str, cycles: int) -> dict[str, Any]:
    b = BrokerProcess(Path(tmp) / "data-a", OVERRIDES).start()
    create_topic(b.port, TOPIC, PARTITIONS)
    group_config(b.port, GROUP, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LOCK_MS)
    ledger = Ledger()
    stop_producing, stop_consuming = threading.Event(), threading.Event()

    def in_loop(coro_fn: Any, stop: threading.Event) -> threading.Thread:
        return threading.Thread(target=lambda: asyncio.run(coro_fn(b.bootstrap, ledger, stop)), daemon=True)

    threads = [
        threading.Thread(target=rdk_producer, args=(b.bootstrap, ledger, stop_producing), daemon=True),
        in_loop(ours_producer, stop_producing),
        threading.Thread(target=rdk_share_consumer, args=(b.bootstrap, ledger, stop_consuming), daemon=True),
        in_loop(ours_share_consumer, stop_consuming),
    ]
    for t in threads:
        t.start()
    recovery: list[float] = []
    rng = random.Random(7)
    try:
        for _ in range(cycles):
            time.sleep(rng.uniform(1.0, 3.0))
            b.kill()
            t0 = time.perf_counter()
            b.start(timeout=60)
            while not metadata_ok(b.port):
                time.sleep(0.01)
            recovery.append(time.perf_counter() - t0)
        time.sleep(2.0)
        stop_producing.set()
        for t in threads[:2]:
            t.join(180)
        # Let the consumers take what is left (and their locks of the last kill run out).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with ledger.lock:
                done = len(ledger.confirmed) >= len(ledger.acked)
            if done:
                break
            time.sleep(0.5)
        stop_consuming.set()
        for t in threads[2:]:
            t.join(60)
        seen, contiguous, total = read_back(b.port)
    finally:
        stop_producing.set()
        stop_consuming.set()
        b.stop()
    return {
        "cycles": cycles,
        "acked": len(ledger.acked),
        "in_log": total,
        "lost": sum(1 for kv in ledger.acked if kv not in seen),
        "duplicated": sum(n - 1 for n in seen.values() if n > 1),
        "contiguous": contiguous,
        "confirmed": len(ledger.confirmed),
        "redelivered_after_confirm": ledger.after_confirm,
        "ack_failures": ledger.ack_failures,
        "recovery": recovery,
    }


# -- (b) hostile frames ---------------------------------------------------------------------

_P = api_by_name("Produce").request_class()
_SF = api_by_name("ShareFetch").request_class()
_SA = api_by_name("ShareAcknowledge").request_class()
_HB = api_by_name("ShareGroupHeartbeat").request_class()
_OC = api_by_name("OffsetCommit").request_class()


def _frame(name: str, version: int, body: Any, corr: int) -> bytes:
    return b"".join(encode_request(api_by_name(name).key, version, corr, "chaos", body))


def _s(rng: random.Random) -> str:
    return rng.choice(["", "x" * rng.randint(1, 300), str(uuid.uuid4()), "\u00e9\u2603", GROUP])


def hostile(rng: random.Random, corr: int, topic_id: uuid.UUID) -> tuple[bytes, bool]:
    """One hostile frame, and whether the broker may answer it (else it closes the connection)."""
    kind = rng.randrange(9)
    i32 = lambda: rng.choice([0, -1, 1, 2**31 - 1, -(2**31), rng.randint(-5, 5000)])  # noqa: E731
    i64 = lambda: rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-5, 10**6)])  # noqa: E731
    tid = rng.choice([topic_id, uuid.uuid4(), uuid.UUID(int=0)])
    if kind == 0:  # random bytes, a plausible size
        body = os.urandom(rng.randint(0, 200))
        return struct.pack(">i", len(body)) + body, False
    if kind == 1:  # a size that lies (bigger than what follows, or negative)
        body = os.urandom(rng.randint(8, 64))
        return struct.pack(">i", rng.choice([len(body) + 1000, -7, 2**31 - 1])) + body, False
    if kind == 2:  # a truncated body: header says more, connection sees less
        ok = _frame("Metadata", 12, api_by_name("Metadata").request_class()(topics=None), corr)
        return ok[: rng.randint(5, len(ok) - 1)], False
    if kind == 3:  # unknown API key or version
        key, version = rng.choice([(rng.randint(200, 32767), 0), (0, 99), (78, 7), (-1, 0)])
        return struct.pack(">ihhi", 10 + 2, key, version, corr) + struct.pack(">h", -1), False
    if kind == 4:  # a produce batch whose CRC is wrong
        batch = bytearray(build_batch([(b"k", os.urandom(20), [], int(time.time() * 1000))]))
        batch[rng.randrange(21, len(batch))] ^= 0xFF
        body = _P(
            acks=-1,
            timeout_ms=1000,
            topic_data=[
                _P.TopicProduceData(name=TOPIC, partition_data=[_P.PartitionProduceData(index=0, records=bytes(batch))])
            ],
        )
        return _frame("Produce", 9, body, corr), True
    if kind == 5:
        body = _SF(
            group_id=_s(rng),
            member_id=_s(rng),
            share_session_epoch=i32(),
            max_wait_ms=rng.choice([0, 1, 10]),
            min_bytes=i32(),
            max_bytes=i32(),
            max_records=i32(),
            batch_size=i32(),
            topics=[
                _SF.FetchTopic(
                    topic_id=tid,
                    partitions=[
                        _SF.FetchPartition(
                            partition_index=i32(),
                            acknowledgement_batches=[
                                _SF.AcknowledgementBatch(
                                    first_offset=i64(),
                                    last_offset=i64(),
                                    acknowledge_types=[rng.randint(-2, 6) for _ in range(rng.randint(0, 3))],
                                )
                            ],
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
        )
        return _frame("ShareFetch", 1, body, corr), True
    if kind == 6:
        body = _SA(
            group_id=_s(rng),
            member_id=_s(rng),
            share_session_epoch=i32(),
            topics=[
                _SA.AcknowledgeTopic(
                    topic_id=tid,
                    partitions=[
                        _SA.AcknowledgePartition(
                            partition_index=i32(),
                            acknowledgement_batches=[
                                _SA.AcknowledgementBatch(
                                    first_offset=i64(), last_offset=i64(), acknowledge_types=[rng.randint(-2, 6)]
                                )
                            ],
                        )
                    ],
                )
            ],
        )
        return _frame("ShareAcknowledge", 1, body, corr), True
    if kind == 7:
        body = _HB(
            group_id=_s(rng),
            member_id=_s(rng),
            member_epoch=i32(),
            rack_id=rng.choice([None, "r"]),
            subscribed_topic_names=rng.choice([None, [], [TOPIC], ["nope", TOPIC, ""]]),
        )
        return _frame("ShareGroupHeartbeat", 1, body, corr), True
    body = _OC(
        group_id=_s(rng),
        generation_id_or_member_epoch=i32(),
        member_id=_s(rng),
        group_instance_id=rng.choice([None, "i"]),
        topics=[
            _OC.OffsetCommitRequestTopic(
                name=rng.choice([TOPIC, "", "nope"]),
                partitions=[
                    _OC.OffsetCommitRequestPartition(
                        partition_index=i32(),
                        committed_offset=i64(),
                        committed_leader_epoch=i32(),
                        committed_metadata=None,
                    )
                ],
            )
        ],
    )
    return _frame("OffsetCommit", 8, body, corr), True


async def attacker(port: int, frames: int, seed: int, topic_id: uuid.UUID, counts: Counter) -> None:
    rng = random.Random(seed)
    corr = 0
    writer = None
    reader_task = None

    async def drain(reader: asyncio.StreamReader) -> None:
        try:
            while await reader.read(65536):
                pass
        except (ConnectionError, OSError):
            pass

    try:
        for _ in range(frames):
            if writer is None or writer.is_closing() or (reader_task is not None and reader_task.done()):
                if writer is not None:
                    writer.close()
                if reader_task is not None:
                    counts["reconnects"] += 1
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                reader_task = asyncio.create_task(drain(reader))
            corr += 1
            data, answerable = hostile(rng, corr, topic_id)
            try:
                writer.write(data)
                await writer.drain()
            except (ConnectionError, OSError):
                writer = None
            counts["frames"] += 1
            if (not answerable or rng.random() < 0.02) and writer is not None:
                # After a frame the broker must drop the connection for, start clean (the next
                # frame glued onto a half-read one would only test the framing again).
                writer.close()
                writer = None
    finally:
        if writer is not None:
            writer.close()
        if reader_task is not None:
            reader_task.cancel()


def good_client(port: int, stop: threading.Event, lat: list[float], errors: list[int]) -> None:
    """Produce (acks=-1), one request at a time; round trips in seconds."""
    value = os.urandom(100)
    while not stop.is_set():
        try:
            with RawClient(port, timeout=10.0) as c:
                while not stop.is_set():
                    batch = build_batch([(b"good", value, [], int(time.time() * 1000))])
                    t0 = time.perf_counter()
                    r = c.call(
                        "Produce",
                        9,
                        acks=-1,
                        timeout_ms=5000,
                        topic_data=[
                            _P.TopicProduceData(
                                name=TOPIC, partition_data=[_P.PartitionProduceData(index=1, records=batch)]
                            )
                        ],
                    )
                    lat.append(time.perf_counter() - t0)
                    if r.responses[0].partition_responses[0].error_code:
                        errors.append(r.responses[0].partition_responses[0].error_code)
                    time.sleep(0.005)
        except (OSError, ConnectionError):
            errors.append(-1)


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98] if len(xs) >= 100 else max(xs, default=float("nan"))


def hostile_frames(tmp: str, frames: int, connections: int = 100) -> dict[str, Any]:
    b = BrokerProcess(Path(tmp) / "data-b", OVERRIDES).start()
    try:
        create_topic(b.port, TOPIC, PARTITIONS)
        with RawClient(b.port) as c:
            md = c.call(
                "Metadata", 12, topics=[api_by_name("Metadata").request_class().MetadataRequestTopic(name=TOPIC)]
            )
        topic_id = md.topics[0].topic_id
        assert b.proc is not None
        pid = b.proc.pid
        stop = threading.Event()
        lat: list[float] = []
        errors: list[int] = []
        good = threading.Thread(target=good_client, args=(b.port, stop, lat, errors), daemon=True)
        good.start()
        time.sleep(3.0)
        before = list(lat)
        rss_before = rss_anon(pid)
        counts: Counter = Counter()

        async def attack() -> None:
            per = frames // connections
            await asyncio.gather(
                *(attacker(b.port, per + (i < frames % connections), i, topic_id, counts) for i in range(connections))
            )

        t0 = time.perf_counter()
        asyncio.run(attack())
        attack_s = time.perf_counter() - t0
        during = lat[len(before) :]
        alive = b.proc.poll() is None and metadata_ok(b.port)
        time.sleep(1.0)
        rss_after = rss_anon(pid) if b.proc.poll() is None else 0
        stop.set()
        good.join(15)
        return {
            "frames": counts["frames"],
            "attack_s": attack_s,
            "reconnects": counts["reconnects"],
            "crashes": 0 if alive else 1,
            "rss_before": rss_before,
            "rss_after": rss_after,
            "p99_before": p99(before),
            "p99_during": p99(during),
            "good_requests": len(lat),
            "good_errors": len(errors),
        }
    finally:
        b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="3 cycles, 5,000 frames")
    args = ap.parse_args()
    cycles, frames = (3, 5000) if args.quick else (args.cycles, args.frames)
    with tempfile.TemporaryDirectory() as tmp:
        a = kill_cycles(tmp, cycles)
        h = hostile_frames(tmp, frames)
    rec = a["recovery"] or [float("nan")]
    mib = 1 << 20
    rows = [
        ("(a) kill -9 cycles", f"{a['cycles']}", ""),
        ("records acknowledged", f"{a['acked']:,}", f"{a['in_log']:,} in the log"),
        ("lost", f"{a['lost']}", "must be 0"),
        ("duplicated", f"{a['duplicated']}", "must be 0"),
        ("offsets contiguous", "yes" if a["contiguous"] else "NO", ""),
        ("ACCEPTs confirmed", f"{a['confirmed']:,}", f"{a['ack_failures']} reported failed (may come back)"),
        ("confirmed ACCEPTs delivered again", f"{a['redelivered_after_confirm']}", "must be 0"),
        ("recovery per restart, median", f"{statistics.median(rec) * 1000:,.0f} ms", "spawn to first Metadata"),
        ("recovery per restart, max", f"{max(rec) * 1000:,.0f} ms", ""),
        (
            "(b) hostile frames",
            f"{h['frames']:,}",
            f"100 connections, {h['attack_s']:.1f} s, {h['reconnects']:,} reconnects",
        ),
        ("broker crashes", f"{h['crashes']}", "must be 0"),
        (
            "broker RSS before / after",
            f"{h['rss_before'] / mib:.0f} / {h['rss_after'] / mib:.0f} MiB",
            "anonymous memory",
        ),
        ("good client p99 before", f"{h['p99_before'] * 1000:.1f} ms", "produce acks=-1 round trip"),
        (
            "good client p99 during",
            f"{h['p99_during'] * 1000:.1f} ms",
            f"{h['good_requests']:,} requests, {h['good_errors']} failed",
        ),
    ]
    width = max(len(r[0]) for r in rows) + 2
    for name, value, note in rows:
        print(f"{name:<{width}}{value:>22}   {note}")
    bad = a["lost"] or a["duplicated"] or not a["contiguous"] or a["redelivered_after_confirm"] or h["crashes"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
