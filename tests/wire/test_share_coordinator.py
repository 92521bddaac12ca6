"""The share coordinator on a real broker: APIs 83-87 over the wire,
fencing, validation, snapshots every N updates, crash recovery and pruning
of __share_group_state; in process: load-in-progress answers, pruning and the
log-start offset it moves.

Expected states come from a per-offset model written here, not from the
shard's own merge code, so a merge or replay bug shows up as a difference.
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shoal.broker.broker import Broker
from shoal.broker.config.settings import BrokerConfig
from shoal.broker.log import LogConfig, OffsetOutOfRange, PartitionLog
from shoal.broker.share_coordinator.service import TOPIC, ShareCoordinator, coordinator_key, kafka_uuid, state_partition
from shoal.broker.share_coordinator.shard import ShareStateShard
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE
from shoal.protocol.coordinator_records import CoordinatorRecord, serde
from shoal.protocol.errors import ErrorCode
from shoal.protocol.records import build_batch
from tests.support.brokers import BrokerProcess, RawClient

SERDE = serde("share")
INIT = api_by_name("InitializeShareGroupState").request_class()
READ = api_by_name("ReadShareGroupState").request_class()
WRITE = api_by_name("WriteShareGroupState").request_class()
DELETE = api_by_name("DeleteShareGroupState").request_class()
SUMMARY = api_by_name("ReadShareGroupStateSummary").request_class()
CT = api_by_name("CreateTopics").request_class()
LO = api_by_name("ListOffsets").request_class()

Batch = tuple[int, int, int, int]


# -- wire helpers -----------------------------------------------------------------
def create_topic(c: RawClient, name: str, partitions: int) -> uuid.UUID:
    resp = c.call(
        "CreateTopics",
        7,
        topics=[CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, configs=[])],
        timeout_ms=5000,
    )
    assert resp.topics[0].error_code == 0, resp
    return resp.topics[0].topic_id


def initialize(c: RawClient, group: str, tid: uuid.UUID, partition: int, state_epoch: int, start: int) -> Any:
    resp = c.call(
        "InitializeShareGroupState",
        0,
        group_id=group,
        topics=[
            INIT.InitializeStateData(
                topic_id=tid,
                partitions=[INIT.PartitionData(partition=partition, state_epoch=state_epoch, start_offset=start)],
            )
        ],
    )
    return resp.results[0].partitions[0]


def write(
    c: RawClient,
    group: str,
    tid: uuid.UUID,
    partition: int,
    batches: list[Batch],
    *,
    state_epoch: int = 1,
    leader_epoch: int = 0,
    start: int = -1,
    dcc: int = -1,
    version: int = 1,
) -> Any:
    resp = c.call(
        "WriteShareGroupState",
        version,
        group_id=group,
        topics=[
            WRITE.WriteStateData(
                topic_id=tid,
                partitions=[
                    WRITE.PartitionData(
                        partition=partition,
                        state_epoch=state_epoch,
                        leader_epoch=leader_epoch,
                        start_offset=start,
                        delivery_complete_count=dcc,
                        state_batches=[
                            WRITE.StateBatch(first_offset=f, last_offset=last, delivery_state=s, delivery_count=n)
                            for f, last, s, n in batches
                        ],
                    )
                ],
            )
        ],
    )
    return resp.results[0].partitions[0]


def read(c: RawClient, group: str, tid: uuid.UUID, partition: int, leader_epoch: int = -1) -> Any:
    resp = c.call(
        "ReadShareGroupState",
        0,
        group_id=group,
        topics=[
            READ.ReadStateData(
                topic_id=tid, partitions=[READ.PartitionData(partition=partition, leader_epoch=leader_epoch)]
            )
        ],
    )
    return resp.results[0].partitions[0]


def summary(c: RawClient, group: str, tid: uuid.UUID, partition: int, version: int = 1) -> Any:
    resp = c.call(
        "ReadShareGroupStateSummary",
        version,
        group_id=group,
        topics=[
            SUMMARY.ReadStateSummaryData(
                topic_id=tid, partitions=[SUMMARY.PartitionData(partition=partition, leader_epoch=-1)]
            )
        ],
    )
    return resp.results[0].partitions[0]


def delete(c: RawClient, group: str, tid: uuid.UUID, partition: int) -> Any:
    resp = c.call(
        "DeleteShareGroupState",
        0,
        group_id=group,
        topics=[DELETE.DeleteStateData(topic_id=tid, partitions=[DELETE.PartitionData(partition=partition)])],
    )
    return resp.results[0].partitions[0]


def earliest(c: RawClient, topic: str, partition: int) -> int:
    return list_offset(c, topic, partition, -2)


def latest(c: RawClient, topic: str, partition: int) -> int:
    return list_offset(c, topic, partition, -1)


def list_offset(c: RawClient, topic: str, partition: int, timestamp: int) -> int:
    resp = c.call(
        "ListOffsets",
        7,
        replica_id=-1,
        topics=[
            LO.ListOffsetsTopic(
                name=topic, partitions=[LO.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)]
            )
        ],
    )
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def until(cond: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def loaded_read(c: RawClient, group: str, tid: uuid.UUID, partition: int) -> Any:
    """Read, waiting out COORDINATOR_LOAD_IN_PROGRESS after a start."""
    return until(
        lambda: (r := read(c, group, tid, partition)).error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and r
    )


# -- the model ----------------------------------------------------------------------
class Model:
    """Per-offset delivery state of one share-partition, as the writes describe it."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.offsets: dict[int, tuple[int, int]] = {}

    def write(self, start: int, batches: list[Batch]) -> None:
        for first, last, state, count in batches:
            for o in range(first, last + 1):
                self.offsets[o] = (state, count)
        if start != -1:
            self.start = start
        if self.start >= 0:
            self.offsets = {o: v for o, v in self.offsets.items() if o >= self.start}


def expand(batches: Any) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for b in batches:
        for o in range(b.first_offset, b.last_offset + 1):
            assert o not in out, f"offset {o} in two batches"
            out[o] = (b.delivery_state, b.delivery_count)
    return out


def random_write(rng: random.Random, model: Model) -> tuple[int, list[Batch]]:
    base = max(model.start, 0)
    start = -1 if rng.random() < 0.6 else base + rng.randrange(0, 5)
    batches: list[Batch] = []
    cur = base + rng.randrange(0, 10)
    for _ in range(rng.randrange(0, 4)):
        length = rng.randrange(1, 8)
        batches.append((cur, cur + length - 1, rng.choice((AVAILABLE, ACKNOWLEDGED, ARCHIVED)), rng.randrange(0, 6)))
        cur += length + rng.randrange(0, 4)
    return start, batches


def assert_matches(r: Any, model: Model, state_epoch: int) -> None:
    assert r.error_code == 0, r
    assert r.state_epoch == state_epoch
    assert r.start_offset == model.start
    assert expand(r.state_batches) == model.offsets


def state_log(data_dir: Path, p: int) -> list[tuple[int, str, Any, Any]]:
    """(offset, record type, key, value) of a stopped broker's __share_group_state-p."""
    plog = PartitionLog.open(data_dir / f"{TOPIC}-{p}", LogConfig(), lambda: int(time.time() * 1000), True)
    out = []
    try:
        for header, _ in plog.scan(plog.log_start_offset):
            for rec in header.records():
                d = SERDE.decode(rec.key, rec.value)
                out.append((rec.offset, d.type.name, d.key, d.value))
    finally:
        plog.close()
    return out


# -- one broker for the request/response tests -----------------------------------
@pytest.fixture(scope="module")
def state_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("share-state") / "data",
        ["share.coordinator.state.topic.num.partitions=3"],
    )
    b.start()
    yield b
    b.stop()


@pytest.fixture
def client(state_broker: BrokerProcess) -> Iterator[RawClient]:
    with RawClient(state_broker.port) as c:
        yield c


def test_find_coordinator_for_a_share_key_answers_this_broker(client, state_broker) -> None:
    key = coordinator_key("g", uuid.uuid4(), 3)
    group, tid, part = key.rsplit(":", 2)
    assert len(tid) == 22 and "=" not in tid and part == "3" and group == "g"
    resp = client.call("FindCoordinator", 6, key_type=2, coordinator_keys=[key])
    (c,) = resp.coordinators
    assert (c.error_code, c.node_id, c.port) == (0, 1, state_broker.port)


def test_kafka_uuid_text_form() -> None:
    u = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
    assert kafka_uuid(u) == "AAECAwQFBgcICQoLDA0ODw"
    assert kafka_uuid(uuid.UUID(int=(1 << 128) - 1)) == "_____________________w"  # URL-safe alphabet


def test_initialize_write_read_summary_delete_round_trip(client) -> None:
    tid = create_topic(client, "rt", 2)
    r = read(client, "g1", tid, 0)  # Kafka >= 4.1: no state, no read
    assert r.error_code == ErrorCode.INVALID_REQUEST and "initialized" in r.error_message
    assert write(client, "g1", tid, 0, [(0, 0, ACKNOWLEDGED, 1)]).error_code == ErrorCode.INVALID_REQUEST
    s = summary(client, "g1", tid, 0)  # the summary of unknown state is the defaults
    assert (s.error_code, s.state_epoch, s.start_offset) == (0, 0, -1)

    r = initialize(client, "g1", tid, 0, 1, 10)
    assert (r.error_code, r.error_message) == (0, None)
    model = Model(10)
    r = read(client, "g1", tid, 0, leader_epoch=0)
    assert_matches(r, model, 1)

    steps = [
        (-1, [(10, 19, AVAILABLE, 1)], 0),
        (-1, [(12, 13, ACKNOWLEDGED, 1), (15, 15, ARCHIVED, 5)], 3),
        (14, [(16, 30, ACKNOWLEDGED, 2)], 16),
        (-1, [(20, 22, AVAILABLE, 3)], 14),
    ]
    for start, batches, dcc in steps:
        r = write(client, "g1", tid, 0, batches, start=start, dcc=dcc)
        assert (r.error_code, r.error_message) == (0, None)
        model.write(start, batches)
        assert_matches(read(client, "g1", tid, 0), model, 1)
    # the canonical form: ranges are coalesced, not echoed back as written
    batches = read(client, "g1", tid, 0).state_batches
    assert [(b.first_offset, b.last_offset) for b in batches] == [(14, 14), (15, 15), (16, 19), (20, 22), (23, 30)]

    s = summary(client, "g1", tid, 0)
    assert (s.error_code, s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count) == (0, 1, 0, 14, 14)
    s0 = summary(client, "g1", tid, 0, version=0)
    assert (s0.error_code, s0.start_offset) == (0, 14)
    # the other partition of the topic and another group are separate keys
    assert read(client, "g1", tid, 1).error_code == ErrorCode.INVALID_REQUEST
    assert read(client, "g2", tid, 0).error_code == ErrorCode.INVALID_REQUEST

    assert delete(client, "g1", tid, 0).error_code == 0
    r = read(client, "g1", tid, 0)
    assert r.error_code == ErrorCode.INVALID_REQUEST and r.state_batches == []
    s = summary(client, "g1", tid, 0)
    assert (s.state_epoch, s.start_offset, s.delivery_complete_count) == (0, -1, -1)
    assert delete(client, "g1", tid, 0).error_code == 0  # deleting nothing succeeds
    # a new lifetime starts from the initialize
    assert initialize(client, "g1", tid, 0, 2, -1).error_code == 0
    r = read(client, "g1", tid, 0)
    assert (r.error_code, r.state_epoch, r.start_offset, r.state_batches) == (0, 2, -1, [])


def test_write_v0_leaves_delivery_complete_count_unknown(client) -> None:
    tid = create_topic(client, "v0", 1)
    assert initialize(client, "g", tid, 0, 1, 0).error_code == 0
    assert write(client, "g", tid, 0, [(0, 4, ACKNOWLEDGED, 1)], dcc=5).error_code == 0
    assert summary(client, "g", tid, 0).delivery_complete_count == 5
    assert write(client, "g", tid, 0, [(5, 5, ACKNOWLEDGED, 1)], dcc=6, version=0).error_code == 0
    assert summary(client, "g", tid, 0).delivery_complete_count == -1


def test_fencing_refuses_and_leaves_state_unchanged(client) -> None:
    tid = create_topic(client, "fence", 1)
    assert initialize(client, "g", tid, 0, 3, 0).error_code == 0
    model = Model(0)
    assert write(client, "g", tid, 0, [(0, 9, ACKNOWLEDGED, 1)], state_epoch=3, leader_epoch=2).error_code == 0
    model.write(-1, [(0, 9, ACKNOWLEDGED, 1)])

    r = write(client, "g", tid, 0, [(0, 4, AVAILABLE, 2)], state_epoch=2, leader_epoch=2)
    assert r.error_code == ErrorCode.FENCED_STATE_EPOCH and r.error_message
    r = write(client, "g", tid, 0, [(0, 4, AVAILABLE, 2)], state_epoch=3, leader_epoch=1)
    assert r.error_code == ErrorCode.FENCED_LEADER_EPOCH and r.error_message
    # a read by a newer leader is recorded: the old leader's writes and reads are fenced
    assert_matches(read(client, "g", tid, 0, leader_epoch=7), model, 3)
    assert write(client, "g", tid, 0, [(0, 4, AVAILABLE, 2)], state_epoch=3, leader_epoch=6).error_code == (
        ErrorCode.FENCED_LEADER_EPOCH
    )
    assert read(client, "g", tid, 0, leader_epoch=6).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert summary(client, "g", tid, 0).leader_epoch == 7
    # re-initializing at the same state epoch would wipe live state: refused
    assert initialize(client, "g", tid, 0, 3, 100).error_code == ErrorCode.FENCED_STATE_EPOCH
    assert_matches(read(client, "g", tid, 0), model, 3)
    # a newer state epoch resets the state
    assert initialize(client, "g", tid, 0, 4, 100).error_code == 0
    assert_matches(read(client, "g", tid, 0), Model(100), 4)


@pytest.mark.parametrize(
    "batches",
    [
        [(0, 5, ACKNOWLEDGED, 1), (5, 9, ACKNOWLEDGED, 1)],  # overlapping
        [(6, 9, ACKNOWLEDGED, 1), (0, 5, ACKNOWLEDGED, 1)],  # unordered
        [(5, 4, ACKNOWLEDGED, 1)],  # first > last
        [(0, 5, ACQUIRED, 1)],  # ACQUIRED is never persisted
        [(-3, 5, ACKNOWLEDGED, 1)],
        [(0, 5, ACKNOWLEDGED, -1)],
    ],
)
def test_invalid_batches_are_refused_and_change_nothing(client, batches) -> None:
    tid = create_topic(client, f"bad-{uuid.uuid4().hex[:8]}", 1)
    assert initialize(client, "g", tid, 0, 1, 0).error_code == 0
    assert write(client, "g", tid, 0, [(0, 3, ARCHIVED, 2)]).error_code == 0
    model = Model(0)
    model.write(-1, [(0, 3, ARCHIVED, 2)])

    def fields(s: Any) -> tuple:
        return (s.error_code, s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count)

    before = fields(summary(client, "g", tid, 0))
    r = write(client, "g", tid, 0, batches, start=2, leader_epoch=9, dcc=99)
    assert r.error_code == ErrorCode.INVALID_REQUEST and r.error_message
    assert_matches(read(client, "g", tid, 0), model, 1)
    assert fields(summary(client, "g", tid, 0)) == before


def test_request_level_problems(client) -> None:
    tid = create_topic(client, "rq", 1)
    unknown = uuid.uuid4()
    r = initialize(client, "g", unknown, 0, 1, 0)
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and r.error_message
    assert initialize(client, "g", tid, 1, 1, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    r = initialize(client, "g", tid, -1, 1, 0)
    assert r.error_code == ErrorCode.INVALID_REQUEST and "negative" in r.error_message
    assert initialize(client, "g", tid, 0, 1, -5).error_code == ErrorCode.INVALID_REQUEST
    assert read(client, "g", unknown, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert write(client, "g", unknown, 0, []).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # the state of a topic that is gone is gone too: deleting it succeeds, its summary is empty
    assert delete(client, "g", unknown, 0).error_code == 0
    assert (summary(client, "g", unknown, 0).error_code, summary(client, "g", unknown, 0).start_offset) == (0, -1)
    # Kafka answers an empty group id, or no partitions, with an empty response
    resp = client.call(
        "ReadShareGroupState",
        0,
        group_id="",
        topics=[READ.ReadStateData(topic_id=tid, partitions=[READ.PartitionData(partition=0, leader_epoch=0)])],
    )
    assert resp.results == []
    resp = client.call("WriteShareGroupState", 1, group_id="g", topics=[WRITE.WriteStateData(topic_id=tid)])
    assert resp.results == []
    # several topics and partitions in one request: answers grouped per topic, in order
    tid2 = create_topic(client, "rq2", 3)
    resp = client.call(
        "InitializeShareGroupState",
        0,
        group_id="multi",
        topics=[
            INIT.InitializeStateData(
                topic_id=t, partitions=[INIT.PartitionData(partition=p, state_epoch=1, start_offset=0) for p in ps]
            )
            for t, ps in ((tid2, (2, 0, 1)), (tid, (0,)), (unknown, (0,)))
        ],
    )
    got = [(r.topic_id, [(p.partition, p.error_code) for p in r.partitions]) for r in resp.results]
    assert got == [
        (tid2, [(2, 0), (0, 0), (1, 0)]),
        (tid, [(0, 0)]),
        (unknown, [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
    ]


# -- snapshots, crashes, pruning: brokers of their own ------------------------------
def test_a_snapshot_follows_every_five_updates(broker_factory) -> None:
    b = broker_factory(
        "share.coordinator.state.topic.num.partitions=2",
        "share.coordinator.snapshot.update.records.per.snapshot=5",
    ).start()
    with RawClient(b.port) as c:
        tid = create_topic(c, "snap", 1)
        assert initialize(c, "g", tid, 0, 1, 0).error_code == 0
        model = Model(0)
        for i in range(12):
            batches = [(i, i, ACKNOWLEDGED, 1)]
            assert write(c, "g", tid, 0, batches).error_code == 0
            model.write(-1, batches)
        assert_matches(read(c, "g", tid, 0), model, 1)
    assert b.stop() == 0
    p = state_partition("g", tid, 0, 2)
    kinds = [(kind, v.snapshot_epoch) for _, kind, k, v in state_log(b.data_dir, p) if k.group_id == "g"]
    snap, upd = "ShareSnapshot", "ShareUpdate"
    # initialize, 5 updates, then the 6th write is a merged snapshot (epoch + 1), and so on
    assert kinds == [(snap, 0)] + [(upd, 0)] * 5 + [(snap, 1)] + [(upd, 1)] * 5 + [(snap, 2)]
    last_snapshot = [v for _, kind, _, v in state_log(b.data_dir, p) if kind == snap][-1]
    assert [(x.first_offset, x.last_offset) for x in last_snapshot.state_batches] == [(0, 11)]


def test_kill_9_then_restart_gives_back_every_acknowledged_state(broker_factory) -> None:
    b = broker_factory(
        "share.coordinator.state.topic.num.partitions=3",
        "share.coordinator.snapshot.update.records.per.snapshot=4",
    ).start()
    rng = random.Random(932)
    keys = [(g, p) for g in ("ga", "gb", "gc") for p in range(4)]
    models: dict[tuple[str, int], Model] = {}
    with RawClient(b.port) as c:
        tid = create_topic(c, "crash", 4)
        for g, p in keys:
            start = rng.randrange(0, 50)
            assert initialize(c, g, tid, p, 1, start).error_code == 0
            models[(g, p)] = Model(start)
        for _ in range(300):
            g, p = rng.choice(keys)
            start, batches = random_write(rng, models[(g, p)])
            r = write(c, g, tid, p, batches, start=start)
            assert r.error_code == 0, r
            models[(g, p)].write(start, batches)
        assert delete(c, "gc", tid, 3).error_code == 0
        del models[("gc", 3)]
    b.kill()
    b.start()
    with RawClient(b.port) as c:
        for g, p in keys:
            r = loaded_read(c, g, tid, p)
            if (g, p) in models:
                assert_matches(r, models[(g, p)], 1)
            else:
                assert r.error_code == ErrorCode.INVALID_REQUEST


def test_pruning_advances_the_log_start_and_restarts_replay_the_same_state(broker_factory) -> None:
    b = broker_factory(
        "share.coordinator.state.topic.num.partitions=1",
        "share.coordinator.snapshot.update.records.per.snapshot=3",
        "share.coordinator.state.topic.prune.interval.ms=100",
    ).start()
    with RawClient(b.port) as c:
        tid = create_topic(c, "prune", 2)
        models = {0: Model(0), 1: Model(0)}
        for p in models:
            assert initialize(c, "g", tid, p, 1, 0).error_code == 0
        for i in range(20):
            for p, m in models.items():
                batches = [(i, i, ACKNOWLEDGED, 1 + p)]
                assert write(c, "g", tid, p, batches).error_code == 0
                m.write(-1, batches)
        # snapshots every 4th write: both keys' 20th writes are snapshots, the last two records
        end = latest(c, TOPIC, 0)
        until(lambda: earliest(c, TOPIC, 0) == end - 2)
        # one key goes: only the other one now holds the log start back
        assert delete(c, "g", tid, 1).error_code == 0
        del models[1]
        for i in range(20, 30):
            assert write(c, "g", tid, 0, [(i, i, ARCHIVED, 2)]).error_code == 0
            models[0].write(-1, [(i, i, ARCHIVED, 2)])
        end = latest(c, TOPIC, 0)
        until(lambda: earliest(c, TOPIC, 0) == end - 3)  # writes 28 (a snapshot), 29, 30 remain
        first = end - 3
        assert_matches(read(c, "g", tid, 0), models[0], 1)
    b.kill()
    b.start()
    with RawClient(b.port) as c:
        assert earliest(c, TOPIC, 0) == first  # the log start survived the crash
        assert_matches(loaded_read(c, "g", tid, 0), models[0], 1)
        assert loaded_read(c, "g", tid, 1).error_code == ErrorCode.INVALID_REQUEST
        # once every key is gone, nothing is needed: the whole log goes
        assert delete(c, "g", tid, 0).error_code == 0
        end = latest(c, TOPIC, 0)
        until(lambda: earliest(c, TOPIC, 0) == end)
    assert b.stop() == 0
    # the restart replayed only what the pruning kept: key 0's last snapshot and two updates
    replayed = [int(n) for n in re.findall(r"loaded __share_group_state: (\d+) records replayed", b.log_text())]
    assert replayed[-1] == 3, replayed


# -- in process --------------------------------------------------------------------
async def start_broker(data_dir: Path, *overrides: str) -> Broker:
    config = BrokerConfig.from_sources(
        {},
        [f"log.dirs={data_dir}", "listeners=PLAINTEXT://127.0.0.1:0", "shoal.http.listeners=", *overrides],
    )
    broker = Broker(config)
    await broker.start()
    return broker


async def test_answers_before_and_during_load_are_error_codes(tmp_path) -> None:
    broker = await start_broker(tmp_path, "share.coordinator.state.topic.num.partitions=4")
    try:
        coord = broker.share_coordinator
        await coord.loaded.wait()
        topic = broker.topics.create("inproc", 2, {})
        tid = topic.topic_id
        assert await coord.initialize("g", tid, 1, 1, 0) == ErrorCode.NONE
        assert await coord.write("g", tid, 1, 1, 0, -1, [(0, 4, ACKNOWLEDGED, 1)], 5) == ErrorCode.NONE

        # a second coordinator on the same topic: nothing before start, loading right after
        other = ShareCoordinator(broker)
        assert await other.initialize("g", tid, 0, 1, 0) == ErrorCode.NOT_COORDINATOR
        other.start()
        try:
            assert await other.initialize("g", tid, 0, 1, 0) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            r = await other.read("g", tid, 1, 0)
            assert (r.error, r.batches) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [])
            assert await other.write("g", tid, 1, 1, 0, -1, []) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert await other.delete("g", tid, 1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            s = await other.read_summary("g", tid, 1)
            assert s.error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            await other.loaded.wait()
            r = await other.read("g", tid, 1, -1)  # replayed what the first one wrote
            assert (r.error, r.state_epoch, r.start_offset, r.batches) == (ErrorCode.NONE, 1, 0, [(0, 4, 2, 1)])
        finally:
            other.close()
        assert await coord.initialize("", tid, 0, 1, 0) == ErrorCode.INVALID_REQUEST
        assert coord.key_partition("g", tid, 1) == state_partition("g", tid, 1, 4)
    finally:
        await broker.stop()


async def test_prune_and_topic_deletion_in_process(tmp_path) -> None:
    broker = await start_broker(
        tmp_path,
        "share.coordinator.state.topic.num.partitions=1",
        "share.coordinator.snapshot.update.records.per.snapshot=0",  # every write is a snapshot
    )
    try:
        coord = broker.share_coordinator
        await coord.loaded.wait()
        part = coord.runtime.partition(0)
        assert part.topic.configs["cleanup.policy"] == "delete" and part.topic.configs["retention.ms"] == "-1"
        assert await coord.prune() == {}  # empty log: nothing to do
        a = broker.topics.create("a", 1, {}).topic_id
        b = broker.topics.create("b", 1, {}).topic_id
        for tid in (a, b):
            assert await coord.initialize("g", tid, 0, 1, 0) == ErrorCode.NONE  # offsets 0, 1
        for i in range(3):
            assert await coord.write("g", a, 0, 1, 0, -1, [(i, i, ARCHIVED, 1)]) == ErrorCode.NONE  # 2, 3, 4
        assert await coord.prune() == {0: 1}  # b's snapshot at 1 is still needed
        assert await coord.prune() == {}
        assert part.log_start_offset == 1
        broker.delete_topic("b")  # its state goes with it
        await broker.flusher.flush(part.log, part.log_end_offset)
        assert await coord.prune() == {0: 4}  # a's latest snapshot
        s = await coord.read_summary("g", b, 0)
        assert (s.error, s.state_epoch, s.start_offset) == (ErrorCode.NONE, 0, -1)
        r = await coord.read("g", a, 0, -1)
        assert r.batches == [(0, 2, ARCHIVED, 1)]
    finally:
        await broker.stop()


async def test_a_write_reports_durability_in_the_turn_it_is_known(tmp_path) -> None:
    """The runtime's on_durable runs before anything the durable future's completion schedules
    (a done-callback waits one more turn of the loop): the share partitions' state writes hear of
    their durability through it. Fsync is on (the default), so the write waits for the disk."""
    broker = await start_broker(tmp_path, "share.coordinator.state.topic.num.partitions=1")
    try:
        coord = broker.share_coordinator
        await coord.loaded.wait()
        tid = broker.topics.create("turns", 1, {}).topic_id
        assert await coord.initialize("g", tid, 0, 1, 0) == ErrorCode.NONE
        order: list[Any] = []
        result, fut = coord.runtime.submit(
            0,
            lambda shard: shard.write("g", tid, 0, 1, 0, -1, [(0, 0, ARCHIVED, 1)], 1),
            lambda error: order.append(("hook", error, fut.done())),
        )
        assert result == ErrorCode.NONE and fut is not None and not fut.done()
        fut.add_done_callback(lambda f: order.append("future's callback"))
        await fut
        assert order == [("hook", None, True), "future's callback"]
        part = coord.runtime.partition(0)
        assert part.log.recovery_point >= part.log_end_offset  # durable when the hook ran
        r = await coord.read("g", tid, 0, -1)
        assert r.batches == [(0, 0, ARCHIVED, 1)]
    finally:
        await broker.stop()


# -- the redundant offset, sans IO ------------------------------------------------
def _persist(plog: PartitionLog, shard: ShareStateShard, records: list[Any]) -> None:
    if not records:
        return
    encoded = [(SERDE.encode_key(r.name, r.key), SERDE.encode_value(r.name, r.value), [], 1000) for r in records]
    info = plog.append(build_batch(encoded), now_ms=1000)
    for i, r in enumerate(records):
        shard.replay(CoordinatorRecord(SERDE.record_type(r.name), r.key, r.value, 0), info.first_offset + i)


def _replayed(plog: PartitionLog, snapshot_every: int) -> ShareStateShard:
    fresh = ShareStateShard(0, snapshot_every=snapshot_every, now_ms=lambda: 1000)
    for header, view in plog.scan(plog.log_start_offset):
        for rec in header.records():
            fresh.replay(SERDE.decode(rec.key, rec.value), rec.offset)
        view.release()
    return fresh


def _essence(shard: ShareStateShard) -> dict:
    """What a replay must rebuild (whether update records still exist is moot once pruned)."""
    return {
        k: (
            v.snapshot_epoch,
            v.state_epoch,
            v.leader_epoch,
            v.start_offset,
            v.delivery_complete_count,
            tuple(v.state_batches),
            v.updates_since_snapshot,
            v.snapshot_offset,
        )
        for k, v in shard.states.items()
    }


def test_redundant_offset_follows_the_latest_snapshots() -> None:
    shard = ShareStateShard(0, snapshot_every=1, now_ms=lambda: 1000)
    a, b = uuid.uuid4(), uuid.uuid4()
    offset = iter(range(100))

    def run(result: tuple[list[Any], Any]) -> None:
        for r in result[0]:
            shard.replay(CoordinatorRecord(SERDE.record_type(r.name), r.key, r.value, 0), next(offset))

    assert shard.redundant_offset(7) == 7  # nothing live: everything below the end
    run(shard.initialize("g", a, 0, 1, 0))  # 0: snapshot a
    run(shard.initialize("g", b, 0, 1, 0))  # 1: snapshot b
    run(shard.write("g", a, 0, 1, 0, -1, [(0, 0, 2, 1)]))  # 2: update a
    assert shard.redundant_offset(3) == 0
    run(shard.write("g", a, 0, 1, 0, -1, [(1, 1, 2, 1)]))  # 3: snapshot a (one update per snapshot)
    assert shard.redundant_offset(4) == 1
    run(shard.delete("g", b, 0))  # 4: tombstone b
    assert shard.redundant_offset(5) == 3
    run(shard.delete("g", a, 0))  # 5, 6: tombstones a
    assert shard.redundant_offset(7) == 7


def test_replay_from_the_redundant_offset_rebuilds_the_same_state(tmp_path) -> None:
    rng = random.Random(4)
    every = 2
    plog = PartitionLog.open(tmp_path / "s", LogConfig(segment_bytes=2048), lambda: 1000, True)
    shard = ShareStateShard(0, snapshot_every=every, now_ms=lambda: 1000)
    tids = [uuid.uuid4() for _ in range(3)]
    keys = [("g", t, p) for t in tids for p in range(2)]
    epochs = dict.fromkeys(keys, 0)
    pruned = 0
    for step in range(600):
        g, t, p = rng.choice(keys)
        live = shard.state(g, t, p) is not None
        roll = rng.random()
        if not live or roll < 0.03:
            epochs[(g, t, p)] += 1
            _persist(plog, shard, shard.initialize(g, t, p, epochs[(g, t, p)], rng.randrange(0, 20))[0])
        elif roll < 0.06:
            _persist(plog, shard, shard.delete(g, t, p)[0])
        elif roll < 0.1:
            _persist(plog, shard, shard.read(g, t, p, rng.randrange(0, 4))[0])
        else:
            cur = shard.state(g, t, p)
            base = max(cur.start_offset, 0)
            start, batches = random_write(rng, Model(base))
            _persist(plog, shard, shard.write(g, t, p, cur.state_epoch, -1, start, batches, step)[0])
        if rng.random() < 0.1:
            pruned += plog.advance_log_start(shard.redundant_offset(plog.log_end_offset))
            assert _essence(_replayed(plog, every)) == _essence(shard)
    assert pruned > 10 and plog.log_start_offset > 0 and len(plog.segments) < 10
    plog.close()


# -- the log start the pruning moves -----------------------------------------------
def _append(plog: PartitionLog, n: int) -> None:
    for i in range(n):
        plog.append(build_batch([(b"k", b"v%d" % i, [], 1000)]), now_ms=1000)


def test_advance_log_start_is_durable_and_drops_whole_segments(tmp_path) -> None:
    clock = lambda: 1000  # noqa: E731
    plog = PartitionLog.open(tmp_path / "p", LogConfig(segment_bytes=300), clock, True)
    _append(plog, 20)
    segments = len(plog.segments)
    assert segments > 3
    second = plog.segments[1].base_offset
    assert plog.advance_log_start(second + 1)
    assert plog.log_start_offset == second + 1
    assert plog.segments[0].base_offset == second  # the first segment went, the second is only hidden
    assert len(plog.segments) == segments - 1
    assert not plog.advance_log_start(second)  # never backwards
    with pytest.raises(OffsetOutOfRange):
        plog.read(second, 1000)
    with pytest.raises(OffsetOutOfRange):
        plog.advance_log_start(plog.log_end_offset + 1)
    assert next(h.base_offset for h, _ in plog.scan()) == second + 1  # one record per batch here
    plog.close()
    # a crash keeps it too: the start is written before segments go
    again = PartitionLog.open(tmp_path / "p", LogConfig(segment_bytes=300), clock, False)
    assert again.log_start_offset == second + 1
    assert again.advance_log_start(again.log_end_offset)  # everything
    assert again.log_start_offset == again.log_end_offset == 20
    assert len(again.segments) == 1
    _append(again, 1)
    assert [h.base_offset for h, _ in again.scan()] == [20]
    # a truncation below the start moves the start down with it
    again.truncate_to(15)
    assert again.log_start_offset == again.log_end_offset
    again.close()
