"""AsyncShareConsumer (the bundled client) next to librdkafka's ShareConsumer, in one run.

Run: python benchmarks/share_consumer.py [--records N] [--consumers 1,4] [--quick]

Starts a broker process (temporary data dir, 127.0.0.1, free port), produces
N records of 1 KiB to a one-partition topic with librdkafka (linger 5 ms,
64 KiB batches), then reads all of them in fresh share groups
(share.auto.offset.reset=earliest), implicit acknowledgement, defaults
otherwise:

  * ours: k AsyncShareConsumers on one uvloop event loop in this process;
  * librdkafka: k confluent_kafka.ShareConsumers in threads (the helper of
    benchmarks/share_fetch.py).

Both are timed from the first record any consumer got to every offset
delivered ("delivered/s"), and to the group's persisted state showing lag 0
(DescribeShareGroupOffsets: every record durably acknowledged, "acked/s").
Every offset must be delivered exactly once. The issue's target is ours >=
0.5x librdkafka.

``ours_run`` is the reusable piece: the same measurement for any broker and
topic (benchmarks/clients.py may import it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from share_fetch import (  # noqa: E402
    OVERRIDES,
    create_topic,
    group_config,
    produce,
    share_consumer_run,
    wait_acknowledged,
)

from shoal.client.share.consumer import AsyncShareConsumer  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402


def ours_run(bootstrap: str, port: int, topic: str, group: str, n_consumers: int, hwm: int, **config: Any) -> dict:
    """k AsyncShareConsumers (implicit acknowledgement) on one event loop, reading offsets 0..hwm-1
    of a one-partition topic; timed from the first record to all delivered and to lag 0."""
    import uvloop

    group_config(port, group, share_auto_offset_reset="earliest")
    counts = bytearray(hwm)
    state: dict[str, Any] = {"delivered": 0, "dups": 0, "redelivered": 0, "t0": float("nan"), "t_done": float("nan")}

    async def main() -> float:
        done = asyncio.Event()
        stop = asyncio.Event()
        consumers = [
            AsyncShareConsumer({"bootstrap.servers": bootstrap, "group.id": group}, **config)
            for _ in range(n_consumers)
        ]

        async def run(sc: AsyncShareConsumer) -> None:
            sc.subscribe([topic])
            while not stop.is_set():
                records = await sc.poll(100)
                if not records:
                    continue
                if state["t0"] != state["t0"]:
                    state["t0"] = time.perf_counter()
                for r in records:
                    o = r.offset
                    if r.delivery_count != 1:
                        state["redelivered"] += 1
                    if counts[o]:
                        state["dups"] += 1
                    else:
                        state["delivered"] += 1
                    counts[o] = min(counts[o] + 1, 255)
                if state["delivered"] >= hwm and not done.is_set():
                    state["t_done"] = time.perf_counter()
                    done.set()

        for sc in consumers:
            await sc.start()
        tasks = [asyncio.create_task(run(sc)) for sc in consumers]
        t_acked = float("nan")
        try:
            await asyncio.wait_for(done.wait(), 300)
            t_acked, _ = await asyncio.to_thread(wait_acknowledged, port, group, [hwm], 30)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            for sc in consumers:
                await sc.close()
        return t_acked

    t_acked = uvloop.run(main())
    state["deliver_s"] = state["t_done"] - state["t0"]
    state["ack_s"] = t_acked - state["t0"]
    state["ok"] = counts.count(1) == hwm and t_acked == t_acked
    return state


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:10,.0f} /s" if seconds == seconds and seconds > 0 else "       n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--consumers", default="1,4", help="comma-separated consumer counts")
    ap.add_argument("--rounds", type=int, default=1, help="repeat each pair (ours, librdkafka) this often")
    ap.add_argument("--quick", action="store_true", help="50k records")
    args = ap.parse_args()
    n = 50_000 if args.quick else args.records
    ks = [int(k) for k in args.consumers.split(",") if k.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp) / "data", OVERRIDES)
        b.start()
        try:
            create_topic(b.port, "q", 1)
            secs = produce(b.bootstrap, "q", 1, n, 64 * 1024)
            print(f"produced {n:,} records of 1 KiB in {secs:.1f} s (one partition)")
            for k in ks:
                for r in range(args.rounds):
                    ours = ours_run(b.bootstrap, b.port, "q", f"g-ours-{k}-{r}", k, n)
                    theirs = share_consumer_run(b, "q", f"g-rdk-{k}-{r}", k, n)
                    ratio = ours["deliver_s"] and theirs["deliver_s"] / ours["deliver_s"]
                    ack_ratio = ours["ack_s"] and theirs["ack_s"] / ours["ack_s"]
                    print(
                        f"{k} consumer(s): delivered  ours {rate(n, ours['deliver_s'])}"
                        f"   librdkafka {rate(n, theirs['deliver_s'])}   ours/librdkafka {ratio:.2f}x"
                    )
                    print(
                        f"{k} consumer(s): acked      ours {rate(n, ours['ack_s'])}"
                        f"   librdkafka {rate(n, theirs['ack_s'])}   ours/librdkafka {ack_ratio:.2f}x"
                        f"   exactly once: ours {ours['ok']} (dups {ours['dups']}, redelivered"
                        f" {ours['redelivered']}), librdkafka {theirs['ok']}"
                    )
        finally:
            b.stop()


if __name__ == "__main__":
    main()
