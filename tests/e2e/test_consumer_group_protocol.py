"""KIP-848 consumer groups with librdkafka (``group.protocol=consumer``) against a broker process.

Three consumers split a 6-partition topic, by name and then by regex, and
read every record once, committing after each record. Then one leaves
(close), one joins and one is killed (SIGKILL, so its session must expire):
its partitions move and no record is read twice by the members that stayed
alive. The committed offsets survive a clean restart and a kill -9.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from shoal.protocol.api import api_by_name
from tests.support.brokers import RawClient
from tests.support.clients import QUIET, create_topic

PARTITIONS = 6
SETTINGS = (
    "offsets.topic.num.partitions=3",
    "group.consumer.min.heartbeat.interval.ms=200",
    "group.consumer.heartbeat.interval.ms=300",
    "group.consumer.min.session.timeout.ms=1000",
    "group.consumer.session.timeout.ms=3000",
)


def consumer_config(bootstrap: str, group: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **QUIET,
    }


def produce(bootstrap: str, topic: str, start: int, count: int, partitions: int = PARTITIONS) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(start, start + count):
        p.produce(topic, value=b"%s:%d" % (topic.encode(), i), partition=i % partitions)
    assert p.flush(30) == 0


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[bytes, list[str]] = {}

    def add(self, who: str, value: bytes) -> None:
        with self.lock:
            self.seen.setdefault(value, []).append(who)

    def values(self) -> set[bytes]:
        with self.lock:
            return set(self.seen)

    def read_twice_by(self, members: set[str]) -> list[bytes]:
        with self.lock:
            return [v for v, who in self.seen.items() if len([w for w in who if w in members]) > 1]


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def commit(c: Consumer, m: Message) -> None:
    """Commit a processed record before polling again (a partition is only handed over from poll).

    Kafka 4.2 refuses a commit made with an epoch older than the member's
    (STALE_MEMBER_EPOCH): the member's epoch moved on in between, so retry with the new one.
    """
    for _ in range(50):
        try:
            c.commit(message=m, asynchronous=False)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError.STALE_MEMBER_EPOCH:
                raise
            time.sleep(0.05)
    raise AssertionError("the commit stayed stale")


class Member(threading.Thread):
    """A librdkafka consumer in a thread: records each value, then commits it synchronously."""

    def __init__(self, name: str, bootstrap: str, group: str, topics: list[str], tally: Tally) -> None:
        super().__init__(daemon=True)
        self.name_, self.tally = name, tally
        self.c = Consumer(consumer_config(bootstrap, group))
        self.c.subscribe(topics)
        self.running = True
        self.errors: list[str] = []

    def run(self) -> None:
        while self.running:
            m = self.c.poll(0.1)
            if m is None:
                continue
            if m.error():
                self.errors.append(str(m.error()))
                continue
            self.tally.add(self.name_, m.value())
            commit(self.c, m)

    def close(self) -> None:
        self.running = False
        self.join(10)
        self.c.close()


CHILD = """
import sys, time
from confluent_kafka import Consumer, KafkaError, KafkaException
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0})
c.subscribe(sys.argv[3].split(","))
while True:
    m = c.poll(0.1)
    if m is None or m.error():
        continue
    sys.stdout.write(m.value().decode() + "\\n")
    sys.stdout.flush()
    while True:
        try:
            c.commit(message=m, asynchronous=False)
            break
        except KafkaException as e:
            if e.args[0].code() != KafkaError.STALE_MEMBER_EPOCH:
                raise
            time.sleep(0.05)
"""


class ChildMember:
    """A librdkafka consumer in its own process, so that it can be killed."""

    def __init__(self, name: str, bootstrap: str, group: str, topics: list[str], tally: Tally) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, bootstrap, group, ",".join(topics)], stdout=subprocess.PIPE
        )
        self.reader = threading.Thread(target=self._read, args=(name, tally), daemon=True)
        self.reader.start()

    def _read(self, name: str, tally: Tally) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            tally.add(name, line.rstrip(b"\n"))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def expected(topic: str, start: int, count: int) -> set[bytes]:
    return {b"%s:%d" % (topic.encode(), i) for i in range(start, start + count)}


def committed(port: int, group: str) -> dict[tuple[str, int], int]:
    OF = api_by_name("OffsetFetch").request_class()
    with RawClient(port) as c:
        r = c.call(
            "OffsetFetch", 9, groups=[OF.OffsetFetchRequestGroup(group_id=group, topics=None)], require_stable=False
        )
    return {(t.name, p.partition_index): p.committed_offset for t in r.groups[0].topics for p in t.partitions}


def describe_state(port: int, group: str) -> tuple[str, int]:
    with RawClient(port) as c:
        g = c.call("ConsumerGroupDescribe", 1, group_ids=[group], include_authorized_operations=False).groups[0]
    return g.group_state, len(g.members)


def test_librdkafka_consumer_protocol(broker_factory) -> None:
    b = broker_factory(*SETTINGS, process=True).start()
    bs = b.bootstrap
    topic = "cgp-names"
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 0, 600)

    # 1. three members by name read everything once
    tally = Tally()
    a = Member("a", bs, "g-names", [topic], tally)
    c = Member("c", bs, "g-names", [topic], tally)
    k = ChildMember("k", bs, "g-names", [topic], tally)
    a.start()
    c.start()
    want = expected(topic, 0, 600)
    wait_for(lambda: tally.values() >= want, 60, "the first 600 records")
    assert tally.read_twice_by({"a", "c", "k"}) == []
    wait_for(lambda: describe_state(b.port, "g-names") == ("Stable", 3), 20, "three stable members")

    # 2. a leaves, d joins, k is killed: every record still read, none twice by the live members
    a.close()
    d = Member("d", bs, "g-names", [topic], tally)
    d.start()
    k.kill()
    produce(bs, topic, 600, 600)
    want |= expected(topic, 600, 600)
    wait_for(lambda: tally.values() >= want, 60, "the next 600 records")
    assert tally.read_twice_by({"a", "c", "d"}) == []
    wait_for(lambda: describe_state(b.port, "g-names") == ("Stable", 2), 20, "k's session to expire")
    assert not (a.errors or c.errors or d.errors)
    c.close()
    d.close()
    offsets = committed(b.port, "g-names")
    assert offsets == {(topic, p): 200 for p in range(PARTITIONS)}

    # 3. by regex, over two topics
    for t in ("cgre-1", "cgre-2"):
        create_topic(bs, t, 3)
        produce(bs, t, 0, 90, partitions=3)
    rtally = Tally()
    rs = [Member(n, bs, "g-regex", ["^cgre-.*"], rtally) for n in ("r1", "r2", "r3")]
    for m in rs:
        m.start()
    rwant = expected("cgre-1", 0, 90) | expected("cgre-2", 0, 90)
    wait_for(lambda: rtally.values() >= rwant, 60, "the regex members to read both topics")
    assert rtally.read_twice_by({"r1", "r2", "r3"}) == []
    for m in rs:
        m.close()

    # 4. committed offsets survive a clean restart and a kill -9; a new member resumes from them
    for crash in (False, True):
        if crash:
            b.kill()
        else:
            b.stop()
        b.start()
        assert committed(b.port, "g-names") == offsets
    produce(bs, topic, 1200, 60)
    after = Tally()
    e = Member("e", bs, "g-names", [topic], after)
    e.start()
    wait_for(lambda: after.values() >= expected(topic, 1200, 60), 60, "the records after the restarts")
    time.sleep(1)
    e.close()
    assert after.values() == expected(topic, 1200, 60)
