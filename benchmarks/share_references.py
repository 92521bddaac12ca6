"""The reference measurements share_fetch.py prints next to the share-group figures.

Not a benchmark itself: split out of benchmarks/share_fetch.py to keep each
module under the project's 800-line rule. The classic Fetch path reading the
same records (our codec on one connection; librdkafka's Consumer), librdkafka's
ShareConsumer on the same broker, and the produce-to-delivery latency runs (one
share-group member in ShareFetch, and a classic Fetch long poll) fed by a
producer that writes its send time into every record.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from share_common import (  # noqa: E402
    FETCH,
    FETCH_V,
    FETCH_WAIT_MS,
    MIB,
    QUIET,
    RECORD,
    group_config,
    wait_acknowledged,
)
from share_members import Conn, Group, Tally, member_loop  # noqa: E402

from shoal.protocol.records import iter_batches  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402

# -- references: classic Fetch ------------------------------------------------------------------


def classic_fetch_codec(port: int, topic: str, hwms: list[int], partition_max: int = MIB) -> tuple[float, int, int]:
    """One connection, Fetch v12 long polls of every partition (partition_max each), until the
    high watermarks; (seconds, records, log batches)."""
    import uvloop

    R = FETCH.request_class()

    async def main() -> tuple[float, int, int]:
        conn = await Conn.open(port)
        offsets = [0] * len(hwms)
        got = batches = 0
        start = time.perf_counter()
        try:
            while any(o < h for o, h in zip(offsets, hwms)):
                body = R(
                    replica_id=-1,
                    max_wait_ms=FETCH_WAIT_MS,
                    min_bytes=1,
                    max_bytes=50 * MIB,
                    isolation_level=0,
                    topics=[
                        R.FetchTopic(
                            topic=topic,
                            partitions=[
                                R.FetchPartition(partition=i, fetch_offset=o, partition_max_bytes=partition_max)
                                for i, (o, h) in enumerate(zip(offsets, hwms))
                                if o < h
                            ],
                        )
                    ],
                )
                resp = await conn.call(FETCH, FETCH_V, body)
                for pd in resp.responses[0].partitions:
                    assert pd.error_code == 0, pd
                    i = pd.partition_index
                    for h, _ in iter_batches(pd.records, allow_partial=True):
                        if h.last_offset >= offsets[i]:
                            got += h.last_offset + 1 - max(h.base_offset, offsets[i])
                            batches += 1
                            offsets[i] = h.last_offset + 1
        finally:
            conn.close()
        return time.perf_counter() - start, got, batches

    return uvloop.run(main())


def classic_fetch_confluent(bootstrap: str, topic: str, hwms: list[int]) -> tuple[float, int]:
    """librdkafka's Consumer, assigned every partition from offset 0, defaults otherwise."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "classic-ref", "enable.auto.commit": False, **QUIET})
    total = sum(hwms)
    got = 0
    start = time.perf_counter()
    c.assign([TopicPartition(topic, i, 0) for i in range(len(hwms))])
    try:
        while got < total and time.perf_counter() - start < 120:
            for m in c.consume(10000, 1.0):
                if m.error() is None:
                    got += 1
        return time.perf_counter() - start, got
    finally:
        c.close()


# -- reference: librdkafka's ShareConsumer ---------------------------------------------------------


def share_consumer_run(b: BrokerProcess, topic: str, group: str, n_consumers: int, hwm: int) -> dict[str, Any]:
    """n ShareConsumers (implicit acknowledgement) in threads on a one-partition topic. Timed from
    the first record any of them got (their join is not counted), to every offset delivered and to
    the persisted state at the high watermark."""
    from confluent_kafka import ShareConsumer

    group_config(b.port, group, share_auto_offset_reset="earliest")
    counts = bytearray(hwm)
    state = {"delivered": 0, "dups": 0, "redelivered": 0, "errors": 0, "t0": float("nan"), "t_done": float("nan")}
    lock = threading.Lock()
    done = threading.Event()  # every offset delivered
    stop = threading.Event()  # the persisted state reached the high watermark (or we gave up)
    consumers = [
        ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group, **QUIET}) for _ in range(n_consumers)
    ]

    def run(sc: Any) -> None:
        sc.subscribe([topic])
        while not stop.is_set():  # as an application does: polling sends the implicit ACCEPTs
            msgs = sc.poll(0.1)
            if not msgs:
                continue
            offs = []
            errors = redelivered = 0
            for m in msgs:
                if m.error() is not None:
                    errors += 1
                    continue
                offs.append(m.offset())
                if m.delivery_count() != 1:
                    redelivered += 1
            with lock:
                if state["t0"] != state["t0"]:
                    state["t0"] = time.perf_counter()
                state["errors"] += errors
                state["redelivered"] += redelivered
                for o in offs:
                    if counts[o]:
                        state["dups"] += 1
                    else:
                        state["delivered"] += 1
                    counts[o] = min(counts[o] + 1, 255)
                if state["delivered"] >= hwm and not done.is_set():
                    state["t_done"] = time.perf_counter()
                    done.set()

    threads = [threading.Thread(target=run, args=(sc,)) for sc in consumers]
    for t in threads:
        t.start()
    t_acked, starts = float("nan"), []
    try:
        if done.wait(180):
            t_acked, starts = wait_acknowledged(b.port, group, [hwm], timeout=15)
    finally:
        stop.set()
        for t in threads:
            t.join()
        for sc in consumers:
            sc.close()
    state["deliver_s"] = state["t_done"] - state["t0"]
    state["ack_s"] = t_acked - state["t0"]
    state["starts"] = starts
    state["ok"] = counts.count(1) == hwm and not state["errors"] and t_acked == t_acked
    return state


# -- latency ----------------------------------------------------------------------------------


def timed_producer(bootstrap: str, topic: str, count: int, every: float) -> None:
    """One 1 KiB record every `every` s, its value starting with the send time (ns, 20 digits)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1", **QUIET})
    pad = b"x" * (RECORD - 20)
    nxt = time.perf_counter()
    for _ in range(count):
        p.produce(topic, value=b"%020d" % time.time_ns() + pad, partition=0)
        p.poll(0)
        nxt += every
        time.sleep(max(0.0, nxt - time.perf_counter()))
    p.flush(10)


def share_latency(b: BrokerProcess, topic: str, group: str, count: int, skip: int) -> list[float]:
    import uvloop

    group_config(b.port, group, share_auto_offset_reset="earliest")

    async def main() -> list[float]:
        g = Group(b.port, group, topic, 1)
        tally = Tally({0: count + skip})
        tally.latencies = []
        await g.join(1)
        loop = asyncio.get_running_loop()
        try:
            fetching = asyncio.create_task(member_loop(g.members[0], b.port, tally))
            await asyncio.sleep(0.5)  # the member waits in ShareFetch
            await loop.run_in_executor(None, timed_producer, b.bootstrap, topic, count + skip, 0.005)
            await asyncio.wait_for(fetching, 15)
        finally:
            await g.leave()
        assert not tally.errors and tally.exactly_once(), (dict(tally.errors), tally.duplicates)
        return tally.latencies

    lat = uvloop.run(main())
    return lat[skip:]


def classic_latency(b: BrokerProcess, topic: str, count: int, skip: int) -> list[float]:
    """A classic Fetch v12 long poll (MaxWaitMs 500, MinBytes 1) on our codec."""
    import uvloop

    R = FETCH.request_class()

    async def main() -> list[float]:
        conn = await Conn.open(b.port)
        loop = asyncio.get_running_loop()
        out: list[float] = []
        offset = 0

        async def consume() -> None:
            nonlocal offset
            while offset < count + skip:
                body = R(
                    replica_id=-1,
                    max_wait_ms=FETCH_WAIT_MS,
                    min_bytes=1,
                    max_bytes=50 * MIB,
                    isolation_level=0,
                    topics=[
                        R.FetchTopic(
                            topic=topic,
                            partitions=[R.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=MIB)],
                        )
                    ],
                )
                resp = await conn.call(FETCH, FETCH_V, body)
                now = time.time_ns()
                for h, _ in iter_batches(resp.responses[0].partitions[0].records, allow_partial=True):
                    for rec in h.records():
                        if rec.offset >= offset:
                            out.append((now - int(bytes(rec.value[:20]))) / 1e6)
                    offset = max(offset, h.last_offset + 1)

        try:
            fetching = asyncio.create_task(consume())
            await asyncio.sleep(0.5)
            await loop.run_in_executor(None, timed_producer, b.bootstrap, topic, count + skip, 0.005)
            await asyncio.wait_for(fetching, 15)
        finally:
            conn.close()
        return out

    return uvloop.run(main())[skip:]
