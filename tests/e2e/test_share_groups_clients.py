"""librdkafka's ShareConsumer (confluent-kafka) against a running broker:
join, assignment, heartbeats, leave; two consumers share one partition.

What the consumers received is judged from the coordinator's side with
ShareGroupDescribe over our raw client; the consumers themselves are the
outside implementation driving the protocol.
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from tests.support.brokers import RawClient
from tests.support.wire import create

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)

FAST = (
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.share.min.heartbeat.interval.ms=200",
    "group.share.heartbeat.interval.ms=200",
    "group.share.assignment.interval.ms=0",
    # every request and answer in the broker's log (shoal.request): if close() hangs again, the log
    # shows what librdkafka sent last and whether each request was answered
    "log.level=DEBUG",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.support.brokers import BrokerProcess

    b = BrokerProcess(tmp_path_factory.mktemp("share-clients") / "data", FAST).start()
    yield b
    b.stop()


def consumer(bootstrap: str, group: str):
    return confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})


def close(sc, timeout: float = 30.0, broker=None) -> None:
    """``sc.close()`` bounded: librdkafka's preview ShareConsumer has once hung in close
    (rd_kafka_consumer_close waiting on its queue after the leave was answered);
    a hang fails this test instead of holding the whole suite."""
    t = threading.Thread(target=sc.close, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive() and broker is not None:
        tail = "\n".join(broker.log_text().splitlines()[-80:])
        raise AssertionError(f"ShareConsumer.close() did not return within {timeout} s; broker log:\n{tail}")
    assert not t.is_alive(), f"ShareConsumer.close() did not return within {timeout} s"


_SHARE_FETCH_FROM = re.compile(r"(\S+) <- ShareFetch v")


def describe(port: int, group: str):
    with RawClient(port) as c:
        return c.call("ShareGroupDescribe", 1, group_ids=[group], include_authorized_operations=False).groups[0]


def poll_until(consumers, check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for sc in consumers:
            sc.poll(0.05)
        result = check()
        if result:
            return result
    raise AssertionError("condition never held")


def assigned(d) -> dict[str, list[int]]:
    return {m.member_id: sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions) for m in d.members}


def test_share_consumer_joins_heartbeats_and_leaves(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "rdk-one", 2)
    sc = consumer(broker.bootstrap, "rdk-g1")
    try:
        sc.subscribe(["rdk-one"])

        def holds_both():
            d = describe(broker.port, "rdk-g1")
            return d if d.error_code == 0 and list(assigned(d).values()) == [[0, 1]] else None

        d = poll_until([sc], holds_both)
        (member,) = d.members
        assert member.client_id == "rdkafka" and member.subscribed_topic_names == ["rdk-one"]
        assert [tp.topic_name for tp in member.assignment.topic_partitions] == ["rdk-one"]
        # It keeps heartbeating: still a member, same epoch, well past several intervals.
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            sc.poll(0.05)
        later = describe(broker.port, "rdk-g1")
        assert [(m.member_id, m.member_epoch) for m in later.members] == [(member.member_id, member.member_epoch)]
    finally:
        close(sc, broker=broker)
    gone = describe(broker.port, "rdk-g1")
    assert gone.group_state == "Empty" and gone.members == []


def test_two_share_consumers_share_one_partition(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "rdk-shared", 1)
    seen = len(broker.log_text())
    a, b = consumer(broker.bootstrap, "rdk-g2"), consumer(broker.bootstrap, "rdk-g2")
    try:
        a.subscribe(["rdk-shared"])
        b.subscribe(["rdk-shared"])

        def both_hold_partition_0():
            d = describe(broker.port, "rdk-g2")
            got = assigned(d) if d.error_code == 0 else {}
            return len(got) == 2 and all(ps == [0] for ps in got.values())

        def both_fetching():
            # Each consumer fetches on a connection of its own: two connections sending
            # ShareFetch (the broker's request trace) mean both applied their assignment.
            # librdkafka's ShareConsumer hangs in close() when it is closed after the
            # assignment arrived but before its first ShareFetch (the broker had answered
            # its leave in 2 ms, and it sent nothing more); waiting for this is what
            # "sharing one partition" means anyway.
            return len(set(_SHARE_FETCH_FROM.findall(broker.log_text()[seen:]))) >= 2

        poll_until([a, b], lambda: both_hold_partition_0() and both_fetching())
    finally:
        close(a, broker=broker)

    def one_left():
        d = describe(broker.port, "rdk-g2")
        return d if len(d.members) == 1 else None

    d = poll_until([b], one_left)
    assert list(assigned(d).values()) == [[0]]
    close(b, broker=broker)
    assert describe(broker.port, "rdk-g2").members == []
