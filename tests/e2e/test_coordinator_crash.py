"""kill -9 of a broker while offsets are being committed: every acknowledged commit survives.

Coordinator appends (``__consumer_offsets``, ``__share_group_state``) are
written on the log writer thread. An acknowledgement must still mean what it
meant when they were written on the loop: with fsync per write (the default)
the record is on disk; with periodic flushing (``log.flush.interval.ms``) it
is at least in the page cache, which outlives the process.
"""

from __future__ import annotations

import threading
import time

import pytest

from shoal.protocol.api import api_by_name
from tests.support.brokers import RawClient
from tests.support.clients import create_topic

OC = api_by_name("OffsetCommit").request_class()
OF = api_by_name("OffsetFetch").request_class()
GROUP = "crash-commits"


def commit(c: RawClient, topic: str, offset: int) -> int:
    body = OC(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[OC.OffsetCommitRequestPartition(0, offset)])],
    )
    return c.call("OffsetCommit", 8, body).topics[0].partitions[0].error_code


def committed(port: int, topic: str) -> int:
    deadline = time.monotonic() + 30
    while True:
        with RawClient(port) as c:
            r = c.call(
                "OffsetFetch",
                7,
                OF(group_id=GROUP, topics=[OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]),
            )
        if r.error_code == 0 and r.topics[0].partitions[0].error_code == 0:
            return r.topics[0].partitions[0].committed_offset
        assert time.monotonic() < deadline, r
        time.sleep(0.1)  # the coordinator is still loading


@pytest.mark.parametrize("flush", ["fsync", "periodic"])
def test_kill9_keeps_every_acknowledged_commit(broker_factory, topic_name, flush) -> None:
    overrides = ["log.flush.interval.ms=60000"] if flush == "periodic" else []
    b = broker_factory(*overrides, process=True)
    b.start()
    create_topic(b.bootstrap, topic_name, 1)
    acked = -1
    stop = threading.Event()

    def committer() -> None:
        nonlocal acked
        offset = 0
        try:
            with RawClient(b.port) as c:
                while not stop.is_set():
                    offset += 1
                    if commit(c, topic_name, offset) == 0:
                        acked = offset
        except (ConnectionError, OSError):
            return  # the broker died under us

    t = threading.Thread(target=committer, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while acked < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert acked >= 300, "the commits did not get going"
    b.kill()
    stop.set()
    t.join(10)
    last = acked
    b.start()
    assert committed(b.port, topic_name) >= last
