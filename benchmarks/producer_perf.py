"""Producer throughput, ours next to aiokafka's, on the same broker and settings.

Why a module of its own: ``benchmarks/clients.py`` and quick manual checks share
one definition of "a producer run" — N records of S bytes sent as fast as ``send``
accepts them, then ``flush`` — so figures quoted anywhere mean the same thing.
aiokafka is imported only when asked for. (It lived in the client package until
the client's layout was cut by role; it is a measurement, not part of the client.)

    python benchmarks/producer_perf.py --bootstrap 127.0.0.1:9092 --count 1000000 --size 1024 --acks 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

from shoal.client.producer.producer import AsyncProducer

__all__ = ["ProduceRun", "produce_aiokafka", "produce_ours"]


@dataclass(frozen=True, slots=True)
class ProduceRun:
    client: str
    records: int
    record_bytes: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * self.record_bytes / self.seconds / 1e6

    def __str__(self) -> str:
        return (
            f"{self.client:10s} {self.records:>9d} x {self.record_bytes} B: "
            f"{self.records_per_s:>9.0f} records/s {self.mb_per_s:7.1f} MB/s ({self.seconds:.2f} s)"
        )


async def produce_ours(bootstrap: str, topic: str, count: int, size: int = 1024, **config: Any) -> ProduceRun:
    """Send ``count`` records of ``size`` random bytes with AsyncProducer; time send..flush."""
    value = os.urandom(size)
    async with AsyncProducer(bootstrap_servers=bootstrap, **config) as p:
        await p.send_and_wait(topic, b"warm-up")
        send = p.send
        start = time.perf_counter()
        for _ in range(count):
            await send(topic, value)
        await p.flush()
        return ProduceRun("shoal", count, size, time.perf_counter() - start)


async def produce_aiokafka(bootstrap: str, topic: str, count: int, size: int = 1024, **config: Any) -> ProduceRun:
    """The same run with aiokafka's AIOKafkaProducer (keyword arguments are aiokafka's)."""
    from aiokafka import AIOKafkaProducer

    value = os.urandom(size)
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
    await p.start()
    try:
        await p.send_and_wait(topic, b"warm-up")
        send = p.send
        start = time.perf_counter()
        for _ in range(count):
            await send(topic, value)
        await p.flush()
        return ProduceRun("aiokafka", count, size, time.perf_counter() - start)
    finally:
        await p.stop()


def _settings(acks: str, linger_ms: int, compression: str) -> tuple[dict[str, Any], dict[str, Any]]:
    ours: dict[str, Any] = {"acks": acks, "linger_ms": linger_ms, "compression_type": compression}
    theirs: dict[str, Any] = {
        "acks": "all" if acks in ("all", "-1") else int(acks),
        "linger_ms": linger_ms,
        "max_batch_size": 16384,
        "compression_type": None if compression == "none" else compression,
    }
    if acks in ("all", "-1"):
        theirs["enable_idempotence"] = True  # as ours by default
    return ours, theirs


async def _main(args: argparse.Namespace) -> None:
    ours, theirs = _settings(args.acks, args.linger_ms, args.compression)
    tag = f"{int(time.time())}-{os.getpid()}"
    for round_ in range(args.rounds):
        run = await produce_ours(args.bootstrap, f"perf-shoal-{tag}-{round_}", args.count, args.size, **ours)
        print(run, flush=True)
        if not args.only_ours:
            run = await produce_aiokafka(
                args.bootstrap, f"perf-aiokafka-{tag}-{round_}", args.count, args.size, **theirs
            )
            print(run, flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only-ours", action="store_true")
    asyncio.run(_main(ap.parse_args(argv)))


if __name__ == "__main__":
    main()
