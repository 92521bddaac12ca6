"""Committed offsets of an emptied consumer group outlive the expiry checks.

Kafka keeps an Empty group's offsets for `offsets.retention.minutes` after the
group emptied: the base of the expiry is the group's currentStateTimestamp, a
wall-clock time written in its GroupMetadata record. Shoal once stamped that
time from the monotonic clock while the expiry compared it with the wall clock,
so every offset of an emptied group expired at the first check (every
`offsets.retention.check.interval.ms`, 10 minutes by default) instead of days
later. Here checks run every 50 ms: after 20 of them, and after a crash
restart, the offsets committed by a librdkafka group consumer are all there,
and the group's state time in the record is a wall-clock time.
"""

from __future__ import annotations

import time

import pytest

from shoal.testing import EmbeddedBroker

confluent_kafka = pytest.importorskip("confluent_kafka")

QUIET = {"log_level": 0}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        tps = c.committed([confluent_kafka.TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}


def test_an_emptied_groups_offsets_survive_the_expiry_checks_and_a_restart() -> None:
    with EmbeddedBroker(fast_timers=True, offsets_retention_check_interval_ms=50) as eb:
        eb.create_topic("kept", 2)
        for p in range(2):
            for i in range(5):
                eb.produce("kept", f"v{i}", partition=p)
        c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": eb.bootstrap_servers,
                "group.id": "keepers",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        c.subscribe(["kept"])
        got = 0
        deadline = time.monotonic() + 20
        while got < 10 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got += 1
        assert got == 10
        c.commit(asynchronous=False)
        before_close = time.time() * 1000
        c.close()  # the only member leaves: the group is Empty, its offsets start their retention
        assert committed(eb.bootstrap_servers, "keepers", "kept", 2) == {0: 5, 1: 5}

        time.sleep(1.0)  # 20 expiry checks
        assert committed(eb.bootstrap_servers, "keepers", "kept", 2) == {0: 5, 1: 5}

        def state_time() -> int:
            shard = eb.broker.groups.runtime.shard_for("keepers")
            return shard.groups["keepers"].state_timestamp

        stamped = eb.call(state_time)
        assert before_close - 5_000 <= stamped <= time.time() * 1000  # wall clock, when it emptied

        eb.restart(clean=False)
        assert eb.call(state_time) == stamped  # read back from the GroupMetadata record
        time.sleep(0.5)
        assert committed(eb.bootstrap_servers, "keepers", "kept", 2) == {0: 5, 1: 5}
