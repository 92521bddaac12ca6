"""The bundled AsyncConsumer with ``group.protocol=consumer`` in one group with librdkafka members.

One AsyncConsumer (``s``) and two librdkafka consumers (``a``, ``b``), all on
KIP-848, split a 6-partition topic and read every record once, each
committing what it processed before polling again. Then ``b`` leaves: its
partitions move and no record is read twice by the members still alive; then
the AsyncConsumer itself leaves and ``a`` takes everything, again without a
record read twice. The committed offsets survive a broker restart, and a new
AsyncConsumer resumes from them (reading only what was produced after). A
second part subscribes the AsyncConsumer by regex.
"""

from __future__ import annotations

import asyncio
import threading
import time

from shoal.client import AsyncConsumer
from shoal.client.core.cluster import TopicPartition
from tests.e2e.test_consumer_group_protocol import (
    PARTITIONS,
    SETTINGS,
    Member,
    Tally,
    committed,
    describe_state,
    expected,
    produce,
    wait_for,
)
from tests.support.clients import create_topic


class Recorder:
    """A rebalance listener that keeps every callback, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []
        self.held: set[TopicPartition] = set()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(revoked)))
        self.held -= revoked

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(assigned)))
        self.held |= assigned

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", frozenset(lost)))
        self.held -= lost


class BundledMember(threading.Thread):
    """An AsyncConsumer on its own event loop: records each value, commits each batch, polls again."""

    def __init__(
        self, name: str, bootstrap: str, group: str, tally: Tally, *, topics=(), pattern=None, **config
    ) -> None:
        super().__init__(daemon=True)
        self.name_, self.tally = name, tally
        self.config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **config,
        }
        self.block_s = 0.0  # set: the next loop turn blocks the event loop this long (no heartbeats)
        self.topics, self.pattern = list(topics), pattern
        self.listener = Recorder()
        self.running = True
        self.errors: list[BaseException] = []
        self.epochs: list[int] = []

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        try:
            async with AsyncConsumer(self.config) as c:
                self.consumer = c
                c.subscribe(self.topics, self.listener, pattern=self.pattern)
                while self.running:
                    if self.block_s:
                        time.sleep(self.block_s)  # deliberately blocking: the session must expire
                        self.block_s = 0.0
                    batch = await c.getmany(timeout_ms=100)
                    for records in batch.values():
                        for r in records:
                            self.tally.add(self.name_, r.value)
                    if batch:
                        await c.commit()
                        self.epochs.append(c._coordinator.membership.member_epoch)  # type: ignore[union-attr]
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.errors.append(e)

    def close(self) -> None:
        self.running = False
        self.join(30)
        assert not self.is_alive()


def test_bundled_consumer_with_librdkafka_members(broker_factory) -> None:
    b = broker_factory(*SETTINGS, process=True).start()
    bs = b.bootstrap
    topic = "k848-mixed"
    group = "g-mixed"
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 0, 600)

    # 1. one bundled and two librdkafka members: every record read once, everyone gets partitions
    tally = Tally()
    s = BundledMember("s", bs, group, tally, topics=[topic])
    try:
        a = Member("a", bs, group, [topic], tally)
        bm = Member("b", bs, group, [topic], tally)
        s.start()
        a.start()
        bm.start()
        want = expected(topic, 0, 600)
        wait_for(lambda: tally.values() >= want, 60, "the first 600 records")
        wait_for(lambda: describe_state(b.port, group) == ("Stable", 3), 20, "three stable members")
        wait_for(lambda: len(s.listener.held) == 2, 20, "the bundled member to hold its two partitions")
        assert tally.read_twice_by({"s", "a", "b"}) == []
        assert s.epochs and all(e > 0 for e in s.epochs)

        # 2. b leaves: its partitions move, nothing read twice by s and a
        # (s may have given up partitions while the three joined: only what follows b's leaving counts)
        seen = len(s.listener.events)
        bm.close()
        produce(bs, topic, 600, 600)
        want |= expected(topic, 600, 600)
        wait_for(lambda: tally.values() >= want, 60, "the next 600 records")
        wait_for(lambda: describe_state(b.port, group) == ("Stable", 2), 20, "two stable members")
        wait_for(lambda: len(s.listener.held) == 3, 20, "the bundled member to take over")
        assert tally.read_twice_by({"s", "a"}) == []
        # incremental: the bundled member never gave up a partition it kept (no revoked in the callbacks)
        assert [kind for kind, parts in s.listener.events[seen:] if parts and kind != "assigned"] == []

        # 3. the bundled member leaves: it gives up exactly the three partitions it held (what it
        # gave up while the three joined in step 1 does not count), a takes everything, nothing read twice
        held, seen = set(s.listener.held), len(s.listener.events)
        s.close()
        assert s.errors == []
        revoked = set().union(*(parts for kind, parts in s.listener.events[seen:] if kind == "revoked"))
        assert len(held) == 3 and revoked == held
        produce(bs, topic, 1200, 600)
        want |= expected(topic, 1200, 600)
        wait_for(lambda: tally.values() >= want, 60, "the records after the bundled member left")
        assert tally.read_twice_by({"s", "a"}) == []
        a.close()
        assert not a.errors and not bm.errors
        offsets = committed(b.port, group)
        assert offsets == {(topic, p): 300 for p in range(PARTITIONS)}
    finally:
        s.running = False  # a failure above must not leave its thread retrying a stopped broker

    # 4. the commits survive a restart; a new bundled member resumes from them
    b.stop()
    b.start()
    assert committed(b.port, group) == offsets
    produce(bs, topic, 1800, 60)
    after = Tally()
    s2 = BundledMember("s2", bs, group, after, topics=[topic])
    s2.start()
    wait_for(lambda: after.values() >= expected(topic, 1800, 60), 60, "the records after the restart")
    time.sleep(1)
    s2.close()
    assert s2.errors == []
    assert after.values() == expected(topic, 1800, 60)


def test_bundled_consumer_regex_subscription(broker_factory) -> None:
    b = broker_factory(*SETTINGS, process=True).start()
    bs = b.bootstrap
    for t in ("k848re-1", "k848re-2", "k848other"):
        create_topic(bs, t, 3)
        produce(bs, t, 0, 90, partitions=3)
    tally = Tally()
    s = BundledMember("s", bs, "g-k848-regex", tally, pattern="k848re-.*")
    r = Member("r", bs, "g-k848-regex", ["^k848re-.*"], tally)
    s.start()
    r.start()
    want = expected("k848re-1", 0, 90) | expected("k848re-2", 0, 90)
    wait_for(lambda: tally.values() >= want, 60, "both matching topics")
    wait_for(lambda: describe_state(b.port, "g-k848-regex") == ("Stable", 2), 20, "two stable members")
    time.sleep(0.5)
    assert tally.values() == want  # the other topic does not match
    assert tally.read_twice_by({"s", "r"}) == []
    assert {tp.topic for tp in s.listener.held} <= {"k848re-1", "k848re-2"} and s.listener.held
    s.close()
    r.close()
    assert s.errors == [] and not r.errors


def test_static_member_comes_back_and_a_fenced_member_rejoins(broker_factory) -> None:
    b = broker_factory(*SETTINGS, process=True).start()
    bs = b.bootstrap
    topic, group = "k848-static", "g-k848-static"
    create_topic(bs, topic, PARTITIONS)
    tally = Tally()
    a = BundledMember("a", bs, group, tally, topics=[topic], **{"group.instance.id": "inst-a"})
    d = BundledMember("d", bs, group, tally, topics=[topic])
    a.start()
    d.start()
    wait_for(lambda: len(a.listener.held) == 3 and len(d.listener.held) == 3, 30, "three partitions each")
    held_by_a = set(a.listener.held)
    mark = len(d.listener.events)

    # a static member leaves with epoch -2: the group keeps its partitions for it, and gives them back
    a.close()
    assert a.errors == []
    time.sleep(1)  # well within the 3 s session
    assert describe_state(b.port, group)[1] == 2  # still a member
    assert len(d.listener.held) == 3
    a2 = BundledMember("a2", bs, group, tally, topics=[topic], **{"group.instance.id": "inst-a"})
    a2.start()
    wait_for(lambda: a2.listener.held == held_by_a, 30, "the static member's partitions back")
    assert [k for k, p in d.listener.events[mark:] if p] == []  # d neither gave up nor got anything

    # d stops heartbeating past its session: fenced, it reports its partitions lost and rejoins
    held_by_d = set(d.listener.held)
    d.block_s = 5.0
    wait_for(lambda: len(a2.listener.held) == PARTITIONS, 30, "a2 to take everything while d is gone")
    wait_for(lambda: ("lost", frozenset(held_by_d)) in d.listener.events, 30, "d to see its partitions lost")
    wait_for(lambda: len(a2.listener.held) == 3 and len(d.listener.held) == 3, 30, "d back in the group")
    produce(bs, topic, 0, 120)
    wait_for(lambda: tally.values() >= expected(topic, 0, 120), 30, "records to both")
    assert tally.read_twice_by({"a2", "d"}) == []
    a2.close()
    d.close()
    assert a2.errors == [] and d.errors == []
