"""Helpers shared by several test files (share clients)."""

from __future__ import annotations

import time

import pytest

from shoal.client.share.consumer import AsyncShareConsumer
from shoal.protocol.api import api_by_name
from tests.support.brokers import RawClient
from tests.support.wire import (
    create,
    group_config,
)

confluent_kafka = pytest.importorskip("confluent_kafka")


FAST = (
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.share.min.heartbeat.interval.ms=200",
    "group.share.heartbeat.interval.ms=200",
    "group.share.assignment.interval.ms=0",
    "group.share.min.record.lock.duration.ms=1000",
)


def produce(
    bootstrap: str, topic: str, n: int, partition: int | None = None, start: int = 0, *, prefix: str = "v"
) -> None:
    """Values ``f"{prefix}{i}"`` for i in [start, start + n), by librdkafka, to one partition or spread."""
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5})
    for i in range(start, start + n):
        if partition is None:
            p.produce(topic, value=f"{prefix}{i}".encode())
        else:
            p.produce(topic, value=f"{prefix}{i}".encode(), partition=partition)
    assert p.flush(10) == 0


def setup(broker, topic: str, group: str, partitions: int = 1, **configs: str) -> None:
    with RawClient(broker.port) as c:
        create(c, topic, partitions)
    group_config(broker.port, group, share_auto_offset_reset="earliest", **configs)


def acknowledged_up_to(port: int, group: str) -> list[tuple[int, int]]:
    """(start offset, lag) of each partition of the group, as the broker persisted them."""
    DSO = api_by_name("DescribeShareGroupOffsets").request_class()
    with RawClient(port) as c:
        req = [DSO.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]
        d = c.call("DescribeShareGroupOffsets", 1, groups=req).groups[0]
    return sorted((p.start_offset, p.lag) for t in d.topics for p in t.partitions)


async def poll_until(sc: AsyncShareConsumer, want: int, timeout: float = 20.0, ack=None) -> list:
    out: list = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        got = await sc.poll(200)
        for r in got:
            if ack is not None:
                sc.acknowledge(r, ack)
        out += got
    return out
