"""Round trips with the two pure-Python Kafka clients (aiokafka, kafka-python), given their settings.

The security tests run the same produce-then-consume exchange over every security protocol;
only the connection settings differ (TLS context, SASL mechanism, user), so the exchange
lives here once. Each returns the values read back, in partition order.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any


def aiokafka_round_trip(topic: str, settings: dict[str, Any], n: int = 3, *, group: bool = True) -> list[bytes]:
    """Produce ``a0..a{n-1}`` with AIOKafkaProducer and read them back with AIOKafkaConsumer
    (in a group of its own unless ``group`` is False), both built from ``settings``."""
    import aiokafka

    async def go() -> list[bytes]:
        p = aiokafka.AIOKafkaProducer(**settings)
        await p.start()
        try:
            for i in range(n):
                await p.send_and_wait(topic, b"a%d" % i)
        finally:
            await p.stop()
        group_id = {"group_id": f"g-{topic}"} if group else {}
        c = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **group_id, **settings)
        await c.start()
        try:
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < n:
                    for batch in (await c.getmany(timeout_ms=500)).values():
                        out.extend(m.value for m in batch)
            return out
        finally:
            await c.stop()

    return asyncio.run(go())


def kafka_python_round_trip(topic: str, settings: dict[str, Any], n: int = 3, *, group: bool = True) -> list[bytes]:
    """Produce ``k0..k{n-1}`` (acks=all) with kafka-python's KafkaProducer and read them back with
    its KafkaConsumer (in a group of its own unless ``group`` is False), both built from ``settings``."""
    import kafka

    p = kafka.KafkaProducer(acks="all", **settings)
    for i in range(n):
        p.send(topic, b"k%d" % i).get(15)
    p.close()
    group_id = {"group_id": f"g-{topic}"} if group else {}
    c = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", **group_id, **settings)
    try:
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < n and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=500).values():
                out.extend(m.value for m in batch)
    finally:
        c.close()
    return out
