"""AsyncConsumer in classic consumer groups: the sans-IO member rules, then real groups on a real broker.

The member state machine (``client.consumer.group.membership``) is driven directly
with error codes and a clock. The end-to-end tests run our consumers as
asyncio tasks and confluent-kafka (librdkafka) consumers in threads in the
same group on a broker process, and check what Kafka promises: every record
consumed exactly once while members commit, a leaving member's partitions
move to the others, rebalance callbacks with the right partitions (a commit
in ``on_partitions_revoked`` works), ``max.poll.interval.ms`` evicts a member
that stopped polling, and committed offsets survive a broker restart.

Tests wait on state, never on fixed sleeps; sessions are 30 s so a loaded
machine cannot expire a member mid-rebalance.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from shoal.client.consumer.assignors.builtin import range_assign, roundrobin_assign
from shoal.client.consumer.assignors.subscription import MemberSubscription, decode_assignment
from shoal.client.consumer.consumer import AsyncConsumer, ConsumerRebalanceListener
from shoal.client.consumer.group.membership import Generation, GroupMembership, MemberState, Next
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import BrokerResponseError, ClientClosedError, CommitFailedError, KafkaTimeoutError
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess, RawClient

GROUP_SETTINGS = ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000")
QUIET = {"log_level": 0}
E = ErrorCode


# -- the member state machine (sans-IO) -----------------------------------------------------


def member(now: float = 0.0, instance: str | None = None) -> GroupMembership:
    return GroupMembership(
        "g",
        group_instance_id=instance,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=60_000,
        heartbeat_interval_ms=1_000,
        retry_backoff_ms=100,
        now_ms=now,
    )


def answer(
    m: GroupMembership, code: int, gen: int = -1, member_id: str = "", leader: str = "", now: float = 0.0
) -> Next:
    """Hand ``m`` a JoinGroup response (protocol "range" when it succeeded)."""
    protocol = "range" if code == E.NONE else None
    return m.on_join_response(code, generation_id=gen, member_id=member_id, leader=leader, protocol_name=protocol,
                              now_ms=now)  # fmt: skip


def joined(m: GroupMembership, generation: int = 1, member_id: str = "m-1", now: float = 0.0) -> Generation:
    m.join_started(now)
    assert answer(m, E.NONE, generation, member_id, member_id, now) is Next.SYNC
    sent = m.sync_generation()
    assert m.on_sync_response(E.NONE, sent, now) is Next.DONE
    return sent


def test_member_id_required_then_join_and_sync() -> None:
    m = member()
    assert m.needs_join and m.join_started(0) == ""
    assert answer(m, E.MEMBER_ID_REQUIRED, member_id="m-7", now=1) is Next.REJOIN
    assert m.generation.member_id == "m-7" and m.state is MemberState.UNJOINED
    assert m.join_started(2) == "m-7"
    assert answer(m, E.NONE, 3, "m-7", "m-7", now=3) is Next.SYNC
    assert m.is_leader and m.state is MemberState.COMPLETING_REBALANCE and m.generation_if_stable() is None
    assert m.on_sync_response(E.NONE, m.sync_generation(), 4) is Next.DONE
    assert m.state is MemberState.STABLE and not m.needs_join
    assert m.generation_if_stable() == Generation(3, "m-7", "range")


def test_join_errors() -> None:
    m = member()
    m.generation = Generation(-1, "m-1")
    m.join_started(0)
    assert answer(m, E.UNKNOWN_MEMBER_ID) is Next.REJOIN
    assert m.generation.member_id == ""
    for code, step in [
        (E.REBALANCE_IN_PROGRESS, Next.REJOIN),
        (E.NOT_COORDINATOR, Next.FIND_COORDINATOR),
        (E.COORDINATOR_LOAD_IN_PROGRESS, Next.BACKOFF),
    ]:
        m.join_started(0)
        assert answer(m, code) is step
        assert m.fatal_error is None
    for code in (E.FENCED_INSTANCE_ID, E.INCONSISTENT_GROUP_PROTOCOL, E.GROUP_MAX_SIZE_REACHED):
        m = member()
        m.join_started(0)
        assert answer(m, code) is Next.FATAL
        assert m.fatal_error == code and not m.needs_join


def test_sync_errors_reset_only_the_generation_they_answer() -> None:
    m = member()
    joined(m, 1)
    m.request_rejoin("test")
    m.join_started(10)
    answer(m, E.NONE, 2, "m-1", "x", now=10)
    sent = m.sync_generation()
    # ILLEGAL_GENERATION keeps the member id, UNKNOWN_MEMBER_ID does not (as Java's AbstractCoordinator)
    assert m.on_sync_response(E.ILLEGAL_GENERATION, sent, 11) is Next.REJOIN
    assert m.generation == Generation(-1, "m-1") and m.needs_join
    m2 = member()
    joined(m2, 1)
    m2.request_rejoin("test")
    m2.join_started(0)
    answer(m2, E.NONE, 2, "m-1", "x")
    assert m2.on_sync_response(E.UNKNOWN_MEMBER_ID, m2.sync_generation(), 1) is Next.REJOIN
    assert m2.generation == Generation()
    # an answer to an older generation changes nothing
    m3 = member()
    current = joined(m3, 5)
    stale = Generation(4, "m-1", "range")
    assert m3.on_heartbeat_response(E.ILLEGAL_GENERATION, stale, 1) is False
    assert m3.generation == current and m3.state is MemberState.STABLE
    m3.on_commit_error(E.UNKNOWN_MEMBER_ID, stale)
    assert m3.generation == current


def test_heartbeat_rules() -> None:
    m = member(now=0)
    assert m.heartbeat_wait_ms(0) is None  # not joined: no heartbeats
    sent = joined(m, 1, now=0)
    assert m.heartbeat_wait_ms(0) == 1000 and m.heartbeat_wait_ms(1500) == 0
    assert m.on_heartbeat_sent(1500) == sent
    assert m.heartbeat_wait_ms(1600) is None  # one in flight
    assert m.on_heartbeat_response(E.NONE, sent, 1600) is False
    assert m.heartbeat_wait_ms(1600) == 900
    # REBALANCE_IN_PROGRESS while stable: rejoin at the next poll, membership kept
    m.on_heartbeat_sent(2500)
    m.on_heartbeat_response(E.REBALANCE_IN_PROGRESS, sent, 2500)
    assert m.needs_join and m.generation_if_stable() == sent
    # a failed heartbeat is retried after retry.backoff.ms
    m.on_heartbeat_sent(3500)
    m.on_heartbeat_failed(3500)
    assert m.heartbeat_wait_ms(3500) == 100
    # coordinator errors ask for rediscovery
    m.on_heartbeat_sent(3600)
    assert m.on_heartbeat_response(E.NOT_COORDINATOR, sent, 3600) is True
    # session: no successful answer for session.timeout.ms
    assert not m.session_expired(12_000) and m.session_expired(13_000)
    # FENCED_INSTANCE_ID is fatal
    m.on_heartbeat_sent(4000)
    m.on_heartbeat_response(E.FENCED_INSTANCE_ID, sent, 4000)
    assert m.fatal_error == E.FENCED_INSTANCE_ID and m.heartbeat_wait_ms(4000) is None


def test_poll_interval_and_leave() -> None:
    m = member(now=0)
    assert not m.poll_expired(10**9)  # not a member yet
    joined(m, 1, now=0)
    m.on_poll(0)
    assert not m.poll_expired(60_000) and m.poll_expired(60_001)
    assert m.leave() == Generation(1, "m-1", "range")  # dynamic: LeaveGroup, then forget the member id
    assert m.generation == Generation() and m.needs_join and m.state is MemberState.UNJOINED
    assert m.leave() is None  # nothing to leave
    static = member(instance="i-1")
    joined(static, 1)
    assert static.leave() is None  # static members never send LeaveGroup


# -- helpers for real groups ------------------------------------------------------------


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory):
    b = BrokerProcess(tmp_path_factory.mktemp("groups") / "data", GROUP_SETTINGS)
    b.start()
    yield b
    b.stop()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


def produce_sync(bootstrap: str, topic: str, start: int, count: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET})
    for i in range(start, start + count):
        p.produce(topic, key=b"k%d" % i, value=b"%d" % i, partition=i % partitions)
    assert p.flush(30) == 0


async def produce(bootstrap: str, topic: str, start: int, count: int, partitions: int) -> None:
    """In a thread: librdkafka calls that hold the GIL while waiting would stall our consumers' loop."""
    await asyncio.to_thread(produce_sync, bootstrap, topic, start, count, partitions)


async def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


class Tally:
    """Which member saw which value (threads and tasks alike)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[bytes, list[str]] = {}

    def add(self, who: str, value: bytes) -> None:
        with self.lock:
            self.seen.setdefault(value, []).append(who)

    def count(self) -> int:
        with self.lock:
            return len(self.seen)

    def duplicates(self) -> dict[bytes, list[str]]:
        with self.lock:
            return {v: who for v, who in self.seen.items() if len(who) > 1}


def consumer_config(bootstrap: str, group: str, strategy: str = "range", **extra) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": strategy,
        **extra,
    }


class AsyncMember:
    """One of our consumers: poll, record, commit synchronously after each batch."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, tally: Tally, strategy: str = "range"):
        self.name, self.topic, self.tally = name, topic, tally
        self.consumer = AsyncConsumer(consumer_config(bootstrap, group, strategy))
        self.holding: set[int] = set()
        self.stop = asyncio.Event()
        self.commit_failures = 0
        self.task: asyncio.Task | None = None

    def start(self) -> AsyncMember:
        self.task = asyncio.get_running_loop().create_task(self.run())
        return self

    async def run(self) -> None:
        async with self.consumer as c:
            c.subscribe([self.topic])
            while not self.stop.is_set():
                batch = await c.getmany(timeout_ms=100)
                self.holding = {tp.partition for tp in c.assignment()}
                for records in batch.values():
                    for r in records:
                        self.tally.add(self.name, r.value)
                if batch:
                    try:
                        await c.commit()
                    except CommitFailedError:
                        self.commit_failures += 1
        self.holding = set()

    async def leave(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 30)


class ConfluentMember(threading.Thread):
    """A librdkafka consumer in a thread: poll, record, commit each message synchronously."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, tally: Tally, strategy: str = "range"):
        super().__init__(daemon=True)
        self.name_, self.tally, self.topic = name, tally, topic
        self.config = {**consumer_config(bootstrap, group, strategy), **QUIET}
        self.c: Consumer | None = None
        self.halt = threading.Event()
        self.holding: set[int] = set()
        self.commit_failures = 0

    def run(self) -> None:
        # librdkafka joins as soon as it subscribes, so both happen when the thread starts.
        self.c = Consumer(self.config)
        self.c.subscribe([self.topic])
        while not self.halt.is_set():
            m = self.c.poll(0.1)
            self.holding = {tp.partition for tp in self.c.assignment()}
            if m is None or m.error():
                continue
            self.tally.add(self.name_, m.value())
            try:
                self.c.commit(m, asynchronous=False)
            except KafkaException:
                self.commit_failures += 1
        self.c.close()
        self.holding = set()

    async def leave(self) -> None:
        self.halt.set()
        await asyncio.get_running_loop().run_in_executor(None, self.join, 30)


def union(members) -> set[int]:
    out: set[int] = set()
    for m in members:
        out |= m.holding
    return out


def disjoint(members) -> bool:
    return sum(len(m.holding) for m in members) == len(union(members))


# -- real groups ----------------------------------------------------------------------------


async def test_three_async_consumers_split_a_topic_exactly_once(group_broker, topic_name) -> None:
    bs, parts = group_broker.bootstrap, 6
    create_topic(bs, topic_name, parts)
    tally = Tally()
    members = [AsyncMember(f"a{i}", bs, topic_name, "g-" + topic_name, tally).start() for i in range(3)]
    try:
        await wait_for(lambda: sorted(len(m.holding) for m in members) == [2, 2, 2] and disjoint(members), 60,
                       "a 2/2/2 split")  # fmt: skip
        await produce(bs, topic_name, 0, 600, parts)
        await wait_for(lambda: tally.count() == 600, 60, "600 records")
        assert tally.duplicates() == {}
        # one leaves: its partitions move to the other two
        await members[2].leave()
        taken = await wait_for(lambda: union(members[:2]) == set(range(parts)) and disjoint(members[:2]), 30,
                               "takeover")  # fmt: skip
        assert taken < 15  # it left explicitly: far sooner than the 30 s session timeout
        await produce(bs, topic_name, 600, 300, parts)
        await wait_for(lambda: tally.count() == 900, 60, "900 records")
        assert tally.duplicates() == {}
        assert all(m.commit_failures == 0 for m in members)
    finally:
        for m in members:
            m.stop.set()
        await asyncio.gather(*(m.task for m in members), return_exceptions=True)


def described_assignment(port: int, group: str) -> tuple[str, str, dict[str, set[int]]]:
    """(state, protocol, member id -> partitions) as the broker stores them (DescribeGroups)."""
    with RawClient(port) as rc:
        g = rc.call("DescribeGroups", 5, groups=[group], include_authorized_operations=False).groups[0]
        members = {m.member_id: {tp.partition for tp in decode_assignment(m.member_assignment)[0]} for m in g.members}
        return g.group_state, g.protocol_data, members


async def check_leader_plan(port: int, group: str, topic: str, parts: int, strategy: str, members: list) -> None:
    """The stored assignment is exactly Java's for these member ids, and it is what members hold."""
    state, protocol, stored = await asyncio.to_thread(described_assignment, port, group)
    assert (state, protocol, len(stored)) == ("Stable", strategy, len(members))
    assign = range_assign if strategy == "range" else roundrobin_assign
    plan = assign({topic: parts}, {member_id: MemberSubscription((topic,)) for member_id in stored})
    assert stored == {member_id: {tp.partition for tp in tps} for member_id, tps in plan.items()}
    holdings = sorted(sorted(m.holding) for m in members)
    assert holdings == sorted(sorted(p) for p in stored.values())


@pytest.mark.parametrize("first", ["ours", "librdkafka"])
@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
async def test_one_group_with_confluent_consumers(group_broker, topic_name, strategy, first) -> None:
    """Ours and librdkafka's in ONE group, each kind as leader: the same assignment, exactly once, takeover."""
    bs, parts, group = group_broker.bootstrap, 8, "g-" + topic_name
    create_topic(bs, topic_name, parts)
    tally = Tally()
    ours = [AsyncMember(f"a{i}", bs, topic_name, group, tally, strategy) for i in range(2)]
    theirs = [ConfluentMember(f"c{i}", bs, topic_name, group, tally, strategy) for i in range(2)]
    if first == "ours":
        ours[0].start()
        await wait_for(lambda: len(ours[0].holding) == parts, 60, "the first member alone")
    else:
        theirs[0].start()
        await wait_for(lambda: len(theirs[0].holding) == parts, 60, "the first member alone")
    for m in ours:
        if m.task is None:
            m.start()
    for t in theirs:
        if not t.is_alive():
            t.start()
    everyone = [*ours, *theirs]
    try:
        await wait_for(lambda: sorted(len(m.holding) for m in everyone) == [2, 2, 2, 2] and disjoint(everyone), 90,
                       "a 2/2/2/2 split")  # fmt: skip
        # the group leader is the first member, and it computed what Java's assignor computes
        leaders = [m for m in ours if m.consumer._coordinator.membership.is_leader]
        assert len(leaders) == (1 if first == "ours" else 0)
        await check_leader_plan(group_broker.port, group, topic_name, parts, strategy, everyone)
        await produce(bs, topic_name, 0, 800, parts)
        await wait_for(lambda: tally.count() == 800, 60, "800 records")
        assert tally.duplicates() == {}
        assert {who[0][0] for who in tally.seen.values()} == {"a", "c"}  # both kinds consumed
        # one of ours and one of theirs leave: the remaining pair holds everything
        await ours[1].leave()
        await theirs[1].leave()
        rest = [ours[0], theirs[0]]
        await wait_for(lambda: union(rest) == set(range(parts)) and disjoint(rest) and
                       sorted(len(m.holding) for m in rest) == [4, 4], 60, "takeover")  # fmt: skip
        await produce(bs, topic_name, 800, 400, parts)
        await wait_for(lambda: tally.count() == 1200, 60, "1200 records")
        assert tally.duplicates() == {}
    finally:
        for m in ours:
            m.stop.set()
        for t in theirs:
            t.halt.set()
        await asyncio.gather(*(m.task for m in ours), return_exceptions=True)
        for t in theirs:
            await asyncio.get_running_loop().run_in_executor(None, t.join, 30)


class Recorder(ConsumerRebalanceListener):
    """Logs callbacks; commits in on_partitions_revoked, as applications do."""

    def __init__(self) -> None:
        self.consumer: AsyncConsumer | None = None
        self.calls: list[tuple[str, set[TopicPartition]]] = []
        self.committed_in_revoke: dict[TopicPartition, int | None] = {}

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", set(revoked)))
        if revoked:
            await self.consumer.commit()
            for tp in revoked:
                self.committed_in_revoke[tp] = await self.consumer.committed(tp)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", set(assigned)))


async def test_rebalance_listener_and_commit_in_revoke(group_broker, topic_name) -> None:
    bs, parts, group = group_broker.bootstrap, 4, "g-" + topic_name
    create_topic(bs, topic_name, parts)
    await produce(bs, topic_name, 0, 40, parts)
    everything = {TopicPartition(topic_name, p) for p in range(parts)}
    first = AsyncConsumer(consumer_config(bs, group))
    listener = Recorder()
    listener.consumer = first
    async with first:
        first.subscribe([topic_name], listener=listener)
        assert len(await consume(first, 40)) == 40
        assert listener.calls == [("assigned", everything)]  # first join: no revoke callback
        positions = {tp: await first.position(tp) for tp in everything}
        assert positions == {tp: 10 for tp in everything}
        second = AsyncConsumer(consumer_config(bs, group))
        async with second:
            second.subscribe([topic_name])
            poll_second = asyncio.ensure_future(_poll_until(second, lambda: len(second.assignment()) == 2))
            await _poll_until(first, lambda: len(listener.calls) >= 3 and len(first.assignment()) == 2)
            await poll_second
            # eager: everything revoked (and committed there), then the new half assigned
            assert listener.calls[1] == ("revoked", everything)
            assert listener.committed_in_revoke == {tp: 10 for tp in everything}
            assert listener.calls[2] == ("assigned", first.assignment())
            assert first.assignment() | second.assignment() == everything
            assert not first.assignment() & second.assignment()
            # the second member starts where the first committed
            for tp in second.assignment():
                assert await second.position(tp) == 10


async def consume(c: AsyncConsumer, n: int, timeout: float = 60) -> list[bytes]:
    """Values of the next ``n`` records (fails after ``timeout`` seconds instead of hanging)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"only {len(got)} of {n} records"
        for records in (await c.getmany(timeout_ms=200)).values():
            got += [r.value for r in records]
    return got


async def _poll_until(c: AsyncConsumer, cond: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached while polling"
        await c.getmany(timeout_ms=100)


async def test_max_poll_interval_evicts_a_member_that_stops_polling(group_broker, topic_name) -> None:
    bs, parts, group = group_broker.bootstrap, 4, "g-" + topic_name
    create_topic(bs, topic_name, parts)
    lost: list[set[TopicPartition]] = []

    class Lost(ConsumerRebalanceListener):
        def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
            lost.append(partitions)

    slow = AsyncConsumer(consumer_config(bs, group, **{"max.poll.interval.ms": 3000}))
    busy = AsyncConsumer(consumer_config(bs, group))
    async with slow, busy:
        slow.subscribe([topic_name], listener=Lost())
        busy.subscribe([topic_name])
        task = asyncio.ensure_future(_poll_until(busy, lambda: len(busy.assignment()) == 2))
        await _poll_until(slow, lambda: len(slow.assignment()) == 2 and task.done())
        await task
        await produce(bs, topic_name, 0, 8, parts)
        records = await slow.getmany(timeout_ms=5000)
        # now "slow" stops polling: it must leave, and "busy" takes everything
        took = time.monotonic()
        await _poll_until(busy, lambda: len(busy.assignment()) == parts, timeout=60)
        took = time.monotonic() - took
        assert took < 25  # evicted by max.poll.interval.ms (3 s), well before the 30 s session timeout
        assert slow._coordinator.membership.state is MemberState.UNJOINED
        if records:
            with pytest.raises(CommitFailedError):
                await slow.commit()
        # polling again rejoins (while busy keeps polling): what it held is reported lost, not revoked
        held = slow.assignment()
        assert len(held) == 2 and not lost
        stable = MemberState.STABLE
        again = asyncio.ensure_future(_poll_until(busy, lambda: len(busy.assignment()) == 2, timeout=60))
        await _poll_until(slow, lambda: slow._coordinator.membership.state is stable and bool(lost), timeout=60)
        await again
        assert lost == [held]
        assert len(slow.assignment()) == 2 and not slow.assignment() & busy.assignment()


async def test_new_partitions_and_a_changed_subscription_rebalance(group_broker, topic_name) -> None:
    """The leader watches partition counts; any member's subscription change makes it rejoin."""
    bs, group = group_broker.bootstrap, "g-" + topic_name
    other = topic_name + "-b"
    create_topic(bs, topic_name, 2)
    create_topic(bs, other, 1)
    cfg = consumer_config(bs, group, **{"metadata.max.age.ms": 500})
    async with AsyncConsumer(cfg) as c:
        c.subscribe([topic_name])
        await _poll_until(c, lambda: len(c.assignment()) == 2)
        admin = AdminClient({"bootstrap.servers": bs, **QUIET})
        for f in admin.create_partitions([NewPartitions(topic_name, 4)]).values():
            await asyncio.to_thread(f.result, 15)
        await _poll_until(c, lambda: len(c.assignment()) == 4)
        c.subscribe([topic_name, other])
        await _poll_until(c, lambda: TopicPartition(other, 0) in c.assignment())
        assert c.subscription() == {topic_name, other} and len(c.assignment()) == 5
        # unsubscribe leaves the group; assign() works afterwards
        await c.unsubscribe()
        assert c.assignment() == set() and c.subscription() == set()
        c.assign([TopicPartition(other, 0)])
        assert c.assignment() == {TopicPartition(other, 0)}
        state, _, members = await asyncio.to_thread(described_assignment, group_broker.port, group)
        assert state == "Empty" and members == {}


async def test_closing_while_parked_in_join_group_leaves(group_broker, topic_name) -> None:
    """A member closed while its JoinGroup waits must still send LeaveGroup, or the group waits for it."""
    bs, group = group_broker.bootstrap, "g-" + topic_name
    create_topic(bs, topic_name, 2)
    async with AsyncConsumer(consumer_config(bs, group)) as first:
        first.subscribe([topic_name])
        await _poll_until(first, lambda: len(first.assignment()) == 2)
        gen0 = first._coordinator.membership.generation.generation_id
        late = AsyncConsumer(consumer_config(bs, group))
        await late.start()
        late.subscribe([topic_name])
        # "first" does not poll now, so the group keeps "late" parked in JoinGroup (up to 300 s)
        poll = asyncio.ensure_future(late.getmany(timeout_ms=60_000))
        await wait_for(lambda: late._coordinator.membership.state is MemberState.PREPARING_REBALANCE
                       and late._coordinator.membership.generation.has_member_id, 30, "late parked in JoinGroup")  # fmt: skip
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        await late.close()
        with pytest.raises(ClientClosedError):
            await poll
        # "first" rejoins alone, promptly: the parked member is gone
        m = first._coordinator.membership
        await _poll_until(first, lambda: m.generation_if_stable() is not None and m.generation.generation_id > gen0
                          and not m.needs_join, timeout=30)  # fmt: skip
        assert time.monotonic() - t0 < 20
        state, _, members = await asyncio.to_thread(described_assignment, group_broker.port, group)
        assert state == "Stable" and list(members.values()) == [{0, 1}]


async def test_static_member_fenced_by_a_newer_instance(group_broker, topic_name) -> None:
    bs, group = group_broker.bootstrap, "g-" + topic_name
    create_topic(bs, topic_name, 2)
    cfg = consumer_config(bs, group, **{"group.instance.id": "instance-1"})
    old, new = AsyncConsumer(cfg), AsyncConsumer(cfg)
    async with old:
        old.subscribe([topic_name])
        await _poll_until(old, lambda: len(old.assignment()) == 2)
        async with new:
            new.subscribe([topic_name])
            await _poll_until(new, lambda: len(new.assignment()) == 2)
            # the broker gave instance-1 to the new member; the old one is fenced for good
            with pytest.raises(BrokerResponseError) as err:
                await _poll_until(old, lambda: False, timeout=30)
            assert err.value.error.code == ErrorCode.FENCED_INSTANCE_ID


def test_commit_while_group_prepares_rebalance_is_accepted(group_broker, topic_name) -> None:
    """Broker, as Kafka: a current-generation commit is refused only in CompletingRebalance."""
    from shoal.client.consumer.assignors.subscription import MemberSubscription, encode_subscription

    group = "g-" + topic_name
    meta = encode_subscription(MemberSubscription((topic_name,)))
    protocol = [{"name": "range", "metadata": meta}]

    def join(c: RawClient, member_id: str) -> None:
        from shoal.protocol.api import api_by_name

        cls = api_by_name("JoinGroup").request_class()
        body = cls(group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id=member_id,
                   protocol_type="consumer",
                   protocols=[cls.JoinGroupRequestProtocol(**p) for p in protocol])  # fmt: skip
        c.send("JoinGroup", 5, body)

    def commit(c: RawClient, generation: int, member_id: str) -> int:
        from shoal.protocol.api import api_by_name

        cls = api_by_name("OffsetCommit").request_class()
        body = cls(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, topics=[
            cls.OffsetCommitRequestTopic(name=topic_name, partitions=[
                cls.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])])  # fmt: skip
        return c.call("OffsetCommit", 7, body).topics[0].partitions[0].error_code

    create_topic(group_broker.bootstrap, topic_name, 1)
    with RawClient(group_broker.port) as a, RawClient(group_broker.port) as b:
        join(a, "")
        mid = a.receive("JoinGroup", 5).member_id  # MEMBER_ID_REQUIRED
        join(a, mid)
        r = a.receive("JoinGroup", 5)
        assert r.error_code == 0
        sync = a.call("SyncGroup", 3, group_id=group, generation_id=r.generation_id, member_id=mid, assignments=[])
        assert sync.error_code == 0
        join(b, "")
        b_id = b.receive("JoinGroup", 5).member_id
        join(b, b_id)  # parks: the group is PreparingRebalance until "a" rejoins
        time.sleep(0.3)
        assert commit(a, r.generation_id, mid) == ErrorCode.NONE
        join(a, mid)
        r2 = a.receive("JoinGroup", 5)
        assert r2.error_code == 0 and r2.generation_id == r.generation_id + 1
        b.receive("JoinGroup", 5)
        # CompletingRebalance: joined but not synced
        assert commit(a, r2.generation_id, mid) == ErrorCode.REBALANCE_IN_PROGRESS


async def test_broker_restart_resumes_from_committed_offsets(broker_factory, topic_name) -> None:
    b = broker_factory(*GROUP_SETTINGS)
    b.start()
    bs, parts, group = b.bootstrap, 3, "g-" + topic_name
    create_topic(bs, topic_name, parts)
    await produce(bs, topic_name, 0, 300, parts)
    seen: list[bytes] = []
    cfg = consumer_config(
        bs, group, **{"reconnect.backoff.max.ms": 200, "retry.backoff.max.ms": 200, "default.api.timeout.ms": 3000}
    )
    async with AsyncConsumer(cfg) as c:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 60
        while len(seen) < 300:
            assert time.monotonic() < deadline, f"only {len(seen)} records"
            for records in (await c.getmany(timeout_ms=500)).values():
                seen += [r.value for r in records]
            await c.commit()
        assert b.stop() == 0
        # the broker is gone: polls return nothing within their timeout, no hang
        t0 = time.monotonic()
        assert await c.getmany(timeout_ms=500) == {}
        assert time.monotonic() - t0 < 10
        # a commit fails with a typed, retriable error once default.api.timeout.ms (3 s) ran out
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError) as err:
            await c.commit()
        assert err.value.retriable and time.monotonic() - t0 < 15
        b.start()  # same port, same data
        await produce(b.bootstrap, topic_name, 300, 150, parts)
        deadline = time.monotonic() + 60
        while len(seen) < 450 and time.monotonic() < deadline:
            for records in (await c.getmany(timeout_ms=500)).values():
                seen += [r.value for r in records]
        assert sorted(seen, key=int) == [b"%d" % i for i in range(450)]
        await c.commit()
        committed = {p: await c.committed(TopicPartition(topic_name, p)) for p in range(parts)}
        assert committed == {p: 150 for p in range(parts)}
    # a new member after the restart starts exactly at the committed offsets
    await produce(bs, topic_name, 450, 30, parts)
    async with AsyncConsumer(consumer_config(bs, group)) as fresh:
        fresh.subscribe([topic_name])
        got = await consume(fresh, 30)
        assert sorted(got, key=int) == [b"%d" % i for i in range(450, 480)]
