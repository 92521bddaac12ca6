"""AsyncAdmin end to end against a real broker, judged by clients we did not write
(confluent-kafka's AdminClient, Consumer and ShareConsumer) or by raw protocol
requests on our codec; plus the sans-IO request/response layer on its own.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from shoal.client.admin.client import AsyncAdmin, first_error, raise_for_errors
from shoal.client.admin.group_protocol import build_list_groups, parse_describe_group
from shoal.client.admin.protocol import TOPIC_ADMIN_RETRY, EntityBatch, build_delete_topics, entity_error
from shoal.client.admin.types import (
    AlterConfigOp,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    ResourceType,
)
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import BrokerResponseError, KafkaClientError, UnsupportedVersionError
from shoal.protocol.api import api_by_name, codec
from shoal.protocol.coordinator_records import encode_versioned
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess, InProcessBroker, RawClient
from tests.support.wire import raw_share_offsets

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

FAST = (
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
    "group.share.min.heartbeat.interval.ms=200",
    "group.share.heartbeat.interval.ms=200",
    "group.share.assignment.interval.ms=0",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("admin") / "data", FAST).start()
    yield b
    b.stop()


def ck_admin(b: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})


def ck_topics(b: BrokerProcess) -> dict:
    return ck_admin(b).list_topics(timeout=10).topics


def produce(b: BrokerProcess, topic: str, n: int, partition: int = 0, timestamp: int = 0) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap, "log_level": 0, "linger.ms": 2})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=partition, timestamp=timestamp)
    assert p.flush(15) == 0


def err_name(v: object) -> str:
    assert isinstance(v, BrokerResponseError), v
    return v.name


# -- sans-IO ------------------------------------------------------------------------------------


def test_entity_batch_retries_only_listed_codes_and_keeps_the_last_error() -> None:
    b = EntityBatch(["a", "b", "c", "a"], TOPIC_ADMIN_RETRY)
    assert b.start_round() == ["a", "b", "c"]
    b.record("a", None)
    b.record("b", entity_error(ErrorCode.NOT_CONTROLLER, None, "b"))
    b.record("c", entity_error(ErrorCode.TOPIC_ALREADY_EXISTS, None, "c"))
    b.record("zzz", None)  # not asked about: ignored
    b.end_round()
    assert b.pending == ["b"] and not b.done
    assert b.start_round() == ["b"]
    b.end_round()  # no answer for b this round: still pending
    assert b.pending == ["b"]
    b.give_up()
    out = b.outcome()
    assert list(out) == ["a", "b", "c"]
    assert out["a"] is None
    assert err_name(out["b"]) == "NOT_CONTROLLER"
    assert err_name(out["c"]) == "TOPIC_ALREADY_EXISTS"
    with pytest.raises(BrokerResponseError) as e:
        raise_for_errors(out)
    assert e.value.name == "NOT_CONTROLLER" and "1 more of 3 failed" in e.value.__notes__[0]
    assert first_error({"x": None}) is None


def test_builders_respect_old_versions() -> None:
    old = build_delete_topics(["t"], 1000)(5)
    assert old.topic_names == ["t"] and not old.topics
    new = build_delete_topics(["t", uuid.UUID(int=7)], 1000)(6)
    assert [(s.name, s.topic_id.int) for s in new.topics] == [("t", 0), (None, 7)]
    with pytest.raises(UnsupportedVersionError):
        build_delete_topics([uuid.UUID(int=7)], 1000)(5)
    with pytest.raises(UnsupportedVersionError):
        build_list_groups(["share"], None)(4)
    assert build_list_groups(None, ["Stable"])(4).states_filter == ["Stable"]


def test_describe_group_decodes_the_consumer_protocol_and_old_dead_answers() -> None:
    R = api_by_name("DescribeGroups").response_class()
    cls = codec("ConsumerProtocolAssignment", 1).cls
    assignment = encode_versioned(
        "ConsumerProtocolAssignment", 1, cls(assigned_partitions=[cls.TopicPartition(topic="t", partitions=[2, 0])])
    )
    scls = codec("ConsumerProtocolSubscription", 1).cls
    subscription = encode_versioned("ConsumerProtocolSubscription", 1, scls(topics=["t", "u"]))
    g = R.DescribedGroup(
        group_id="g",
        group_state="Stable",
        protocol_type="consumer",
        protocol_data="range",
        members=[
            R.DescribedGroupMember(
                member_id="m",
                client_id="c",
                client_host="/h",
                member_metadata=subscription,
                member_assignment=assignment,
            )
        ],
    )
    d = parse_describe_group(g, 3)
    assert d.members[0].assignment == (TopicPartition("t", 0), TopicPartition("t", 2))
    assert d.members[0].subscription == ("t", "u")
    assert d.coordinator == 3 and d.partition_assignor == "range"
    dead = parse_describe_group(R.DescribedGroup(group_id="x", group_state="Dead"), 1)
    assert err_name(dead) == "GROUP_ID_NOT_FOUND"


# -- topics and cluster -------------------------------------------------------------------------


async def test_topic_lifecycle_judged_by_librdkafka(broker, topic_name) -> None:
    a_name, b_name = topic_name + "-a", topic_name + "-b"
    async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
        dry = await admin.create_topics([NewTopic(a_name, 2)], validate_only=True)
        assert dry == {a_name: None}
        assert a_name not in ck_topics(broker)

        res = await admin.create_topics([NewTopic(a_name, 2, 1, {"retention.ms": "123456"}), NewTopic(b_name)])
        assert res == {a_name: None, b_name: None}
        topics = ck_topics(broker)
        assert len(topics[a_name].partitions) == 2 and len(topics[b_name].partitions) == 1

        described = await admin.describe_topics([a_name, "no-such-topic-" + topic_name])
        d = described[a_name]
        assert [p.partition for p in d.partitions] == [0, 1] and not d.is_internal
        assert err_name(described["no-such-topic-" + topic_name]) == "UNKNOWN_TOPIC_OR_PARTITION"
        with RawClient(broker.port) as c:
            md = c.call(
                "Metadata", 12, topics=[api_by_name("Metadata").request_class().MetadataRequestTopic(name=a_name)]
            )
        assert md.topics[0].topic_id == d.topic_id != uuid.UUID(int=0)
        assert {p.leader for p in d.partitions} == {md.brokers[0].node_id}

        listed = await admin.list_topics()
        assert a_name in listed and listed[a_name].topic_id == d.topic_id
        assert "__consumer_offsets" not in listed
        assert (await admin.list_topics(include_internal=True))["__consumer_offsets"].is_internal

        assert await admin.create_partitions({a_name: 5}) == {a_name: None}
        assert len(ck_topics(broker)[a_name].partitions) == 5

        assert await admin.delete_topics([a_name, b_name]) == {a_name: None, b_name: None}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (a_name in ck_topics(broker) or b_name in ck_topics(broker)):
            await asyncio.sleep(0.1)
        assert a_name not in ck_topics(broker) and b_name not in ck_topics(broker)


async def test_delete_topic_by_id(broker, topic_name) -> None:
    async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
        raise_for_errors(await admin.create_topics([NewTopic(topic_name, 1)]))
        tid = (await admin.describe_topics([topic_name]))[topic_name].topic_id
        assert await admin.delete_topics([tid]) == {tid: None}
        gone = uuid.UUID(int=12345)
        assert err_name((await admin.delete_topics([gone]))[gone]) == "UNKNOWN_TOPIC_ID"
    assert topic_name not in ck_topics(broker)


async def test_invalid_topic_requests_get_kafkas_typed_errors(broker, topic_name) -> None:
    async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
        raise_for_errors(await admin.create_topics([NewTopic(topic_name, 2)]))
        res = await admin.create_topics(
            [
                NewTopic("bad name!"),
                NewTopic("x" * 250),
                NewTopic(topic_name),
                NewTopic(topic_name + "-rf", 1, 3),
                NewTopic(topic_name + "-cfg", 1, configs={"cleanup.policy": "nonsense"}),
                NewTopic(topic_name + "-zero", 0),
            ]
        )
        assert {k: err_name(v) for k, v in res.items()} == {
            "bad name!": "INVALID_TOPIC_EXCEPTION",
            "x" * 250: "INVALID_TOPIC_EXCEPTION",
            topic_name: "TOPIC_ALREADY_EXISTS",
            topic_name + "-rf": "INVALID_REPLICATION_FACTOR",
            topic_name + "-cfg": "INVALID_CONFIG",
            topic_name + "-zero": "INVALID_PARTITIONS",
        }
        assert topic_name in str(res[topic_name])  # the message names the entity
        with pytest.raises(BrokerResponseError) as e:
            raise_for_errors(res)
        assert e.value.name == "INVALID_TOPIC_EXCEPTION" and not e.value.retriable

        cp = await admin.create_partitions({topic_name: 1, topic_name + "-nope": 3})
        assert err_name(cp[topic_name]) == "INVALID_PARTITIONS"
        assert err_name(cp[topic_name + "-nope"]) == "UNKNOWN_TOPIC_OR_PARTITION"
        dt = await admin.delete_topics([topic_name + "-nope", "__consumer_offsets"])
        assert err_name(dt[topic_name + "-nope"]) == "UNKNOWN_TOPIC_OR_PARTITION"
        assert isinstance(dt["__consumer_offsets"], BrokerResponseError)
    for bad in ("bad name!", topic_name + "-rf", topic_name + "-cfg"):
        assert bad not in ck_topics(broker)


async def test_describe_cluster_with_and_without_describe_cluster_api(broker) -> None:
    with RawClient(broker.port) as c:
        md = c.call("Metadata", 12, topics=[])
    async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
        d = await admin.describe_cluster()
        assert d.cluster_id == md.cluster_id and d.controller_id == md.controller_id
        assert [(b.node_id, b.port) for b in d.brokers] == [(md.brokers[0].node_id, broker.port)]
        # A broker without DescribeCluster (Kafka < 2.8): same answer from Metadata.
        for conn in list(admin.core._conns.values()):
            conn.api_versions.pop(api_by_name("DescribeCluster").key, None)
        assert await admin.describe_cluster() == d


async def test_list_offsets_earliest_latest_and_by_time(broker, topic_name) -> None:
    async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
        raise_for_errors(await admin.create_topics([NewTopic(topic_name, 2)]))
        produce(broker, topic_name, 5, partition=0, timestamp=1_000_000)
        produce(broker, topic_name, 3, partition=0, timestamp=2_000_000)
        tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
        res = await admin.list_offsets(
            {
                tp0: OffsetSpec.LATEST,
                tp1: OffsetSpec.EARLIEST,
                TopicPartition(topic_name, 7): OffsetSpec.LATEST,
                TopicPartition(topic_name + "-none", 0): OffsetSpec.LATEST,
            }
        )
        assert res[tp0].offset == 8 and res[tp1].offset == 0
        assert err_name(res[TopicPartition(topic_name, 7)]) == "UNKNOWN_TOPIC_OR_PARTITION"
        assert err_name(res[TopicPartition(topic_name + "-none", 0)]) == "UNKNOWN_TOPIC_OR_PARTITION"
        by_time = await admin.list_offsets({tp0: 1_500_000})
        assert by_time[tp0].offset == 5 and by_time[tp0].timestamp == 2_000_000
        assert (await admin.list_offsets({tp0: 3_000_000}))[tp0].offset == -1
        assert (await admin.list_offsets({tp0: OffsetSpec.EARLIEST}))[tp0].offset == 0


# -- configs ------------------------------------------------------------------------------------


def raw_describe(port: int, rtype: int, name: str) -> dict:
    DC = api_by_name("DescribeConfigs").request_class()
    with RawClient(port) as c:
        r = c.call(
            "DescribeConfigs",
            4,
            resources=[DC.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=None)],
        )
    res = r.results[0]
    assert res.error_code == 0, res
    return {c.name: (c.value, c.config_source) for c in res.configs}


async def test_configs_describe_and_incremental_alter(broker, topic_name) -> None:
    async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
        # (APPEND to cleanup.policy without an override starts from its default: test_incremental_alter_configs.py)
        configs = {"retention.ms": "777000", "cleanup.policy": "delete"}
        raise_for_errors(await admin.create_topics([NewTopic(topic_name, 1, configs=configs)]))
        topic = ConfigResource.topic(topic_name)
        res = await admin.describe_configs(
            [topic, ConfigResource.broker(), ConfigResource.topic(topic_name + "-x")], include_synonyms=True
        )
        entries = res[topic]
        assert entries["retention.ms"].value == "777000"
        assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert entries["segment.ms"].is_default
        assert entries["retention.ms"].synonyms[0].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert any(
            s.name == "log.retention.ms" or s.name == "log.retention.hours" for s in entries["retention.ms"].synonyms
        )
        assert "num.partitions" in res[ConfigResource.broker()]
        assert err_name(res[ConfigResource.topic(topic_name + "-x")]) == "UNKNOWN_TOPIC_OR_PARTITION"
        node = (await admin.describe_cluster()).brokers[0].node_id
        only = await admin.describe_configs(
            [ConfigResource.broker(node)], keys={ConfigResource.broker(node): ["num.partitions"]}
        )
        assert list(only[ConfigResource.broker(node)]) == ["num.partitions"]

        ops = {
            topic: [
                AlterConfigOp.set("segment.ms", "3600000"),
                AlterConfigOp.delete("retention.ms"),
                AlterConfigOp.append("cleanup.policy", "compact"),
            ]
        }
        assert await admin.incremental_alter_configs(ops, validate_only=True) == {topic: None}
        assert raw_describe(broker.port, 2, topic_name)["retention.ms"] == ("777000", 1)
        assert await admin.incremental_alter_configs(ops) == {topic: None}
        # Judged by librdkafka's describe_configs.
        ck_res = confluent_kafka.admin.ConfigResource(confluent_kafka.admin.ResourceType.TOPIC, topic_name)
        ck_client = ck_admin(broker)
        ck = ck_client.describe_configs([ck_res])[ck_res].result(10)
        assert ck["segment.ms"].value == "3600000"
        assert ck["retention.ms"].is_default
        assert set(ck["cleanup.policy"].value.split(",")) == {"delete", "compact"}
        assert await admin.incremental_alter_configs({topic: [AlterConfigOp.subtract("cleanup.policy", "delete")]}) == {
            topic: None
        }
        assert raw_describe(broker.port, 2, topic_name)["cleanup.policy"][0] == "compact"

        bad = await admin.incremental_alter_configs(
            {
                ConfigResource.topic(topic_name + "-x"): [AlterConfigOp.set("retention.ms", "1")],
                topic: [AlterConfigOp.set("retention.ms", "not-a-number")],
                ConfigResource.broker(node): [AlterConfigOp.set("num.partitions", "3")],
            }
        )
        assert err_name(bad[ConfigResource.topic(topic_name + "-x")]) == "UNKNOWN_TOPIC_OR_PARTITION"
        assert err_name(bad[topic]) == "INVALID_CONFIG"
        assert isinstance(bad[ConfigResource.broker(node)], BrokerResponseError)

        # GROUP resources (type 32).
        group = ConfigResource.group(topic_name + "-g")
        assert group.type == ResourceType.GROUP == 32
        assert await admin.incremental_alter_configs(
            {group: [AlterConfigOp.set("share.record.lock.duration.ms", "20000")]}
        ) == {group: None}
        assert raw_describe(broker.port, 32, group.name)["share.record.lock.duration.ms"] == (
            "20000",
            ConfigSource.GROUP_CONFIG,
        )
        mine = (await admin.describe_configs([group]))[group]
        assert mine["share.record.lock.duration.ms"].source == ConfigSource.GROUP_CONFIG
        assert await admin.incremental_alter_configs(
            {group: [AlterConfigOp.delete("share.record.lock.duration.ms")]}
        ) == {group: None}
        assert (
            raw_describe(broker.port, 32, group.name)["share.record.lock.duration.ms"][1] != ConfigSource.GROUP_CONFIG
        )
        invalid = await admin.incremental_alter_configs(
            {group: [AlterConfigOp.set("share.record.lock.duration.ms", "-5")]}
        )
        assert err_name(invalid[group]) == "INVALID_CONFIG"


# -- consumer groups ----------------------------------------------------------------------------


def ck_consumer(b: BrokerProcess, group: str, topic: str):
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": group,
            "log_level": 0,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 30000,
        }
    )
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    got = 0
    while time.monotonic() < deadline and (not c.assignment() or got < 3):
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got += 1
    assert c.assignment(), "the consumer never got its partitions"
    c.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 3)], asynchronous=False)
    return c


async def test_consumer_group_admin_judged_by_librdkafka(broker, topic_name) -> None:
    group = topic_name + "-g"
    async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
        raise_for_errors(await admin.create_topics([NewTopic(topic_name, 2)]))
        produce(broker, topic_name, 6)
        consumer = await asyncio.to_thread(ck_consumer, broker, group, topic_name)
        try:
            listed = {g.group_id: g for g in await admin.list_groups(types=["classic"])}
            assert listed[group].state == "Stable" and listed[group].protocol_type == "consumer"
            assert listed[group].type == "classic"
            assert group in {g.group_id for g in await admin.list_groups(states=["Stable"])}
            assert group not in {g.group_id for g in await admin.list_groups(states=["Empty"])}
            assert group not in {g.group_id for g in await admin.list_groups(types=["share"])}

            desc = await admin.describe_consumer_groups([group, group + "-none"])
            d = desc[group]
            assert err_name(desc[group + "-none"]) == "GROUP_ID_NOT_FOUND"
            assert d.state == "Stable" and d.protocol_type == "consumer" and d.partition_assignor
            assert len(d.members) == 1
            want = sorted(TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment())
            assert (
                list(d.members[0].assignment) == want == [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
            )
            assert d.members[0].subscription == (topic_name,)

            offsets = await admin.list_consumer_group_offsets(group)
            assert offsets == {
                TopicPartition(topic_name, 0): OffsetAndMetadata(
                    3, "", offsets[TopicPartition(topic_name, 0)].leader_epoch
                )
            }

            # A group with a live member: no admin commit, no deletion.
            with pytest.raises(BrokerResponseError) as e:
                await admin.alter_consumer_group_offsets(group, {TopicPartition(topic_name, 0): 1})
            assert e.value.name == "UNKNOWN_MEMBER_ID"
            assert err_name((await admin.delete_consumer_groups([group]))[group]) == "NON_EMPTY_GROUP"
            sub = await admin.delete_consumer_group_offsets(group, [TopicPartition(topic_name, 0)])
            assert err_name(sub[TopicPartition(topic_name, 0)]) == "GROUP_SUBSCRIBED_TO_TOPIC"
        finally:
            await asyncio.to_thread(consumer.close)

        tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
        assert await admin.alter_consumer_group_offsets(group, {tp0: 5, tp1: OffsetAndMetadata(0, "meta")}) == {
            tp0: None,
            tp1: None,
        }
        bad = await admin.alter_consumer_group_offsets(group, {TopicPartition(topic_name + "-none", 0): 1})
        assert err_name(bad[TopicPartition(topic_name + "-none", 0)]) == "UNKNOWN_TOPIC_OR_PARTITION"
        ck = ck_admin(broker)
        req = confluent_kafka.ConsumerGroupTopicPartitions(
            group, [confluent_kafka.TopicPartition(topic_name, p) for p in (0, 1)]
        )
        got = ck.list_consumer_group_offsets([req])[group].result(10)
        assert sorted((tp.partition, tp.offset) for tp in got.topic_partitions) == [(0, 5), (1, 0)]
        assert (await admin.list_consumer_group_offsets(group, [tp1]))[tp1] == OffsetAndMetadata(0, "meta")

        assert await admin.delete_consumer_group_offsets(group, [tp0]) == {tp0: None}
        assert set(await admin.list_consumer_group_offsets(group)) == {tp1}

        assert await admin.delete_consumer_groups([group]) == {group: None}
        assert group not in {g.group_id for g in ck.list_consumer_groups().result(10).valid}
        assert err_name((await admin.delete_consumer_groups([group]))[group]) == "GROUP_ID_NOT_FOUND"
        with pytest.raises(BrokerResponseError) as e:
            await admin.delete_consumer_group_offsets(group, [tp0])
        assert e.value.name == "GROUP_ID_NOT_FOUND"


# -- share groups -------------------------------------------------------------------------------


def share_consume(b: BrokerProcess, group: str, topic: str, accept: int, want: int, close: bool = True):
    """A librdkafka share consumer that accepts the first `accept` records of the `want` it waits for
    and releases the rest; returns (consumer or None, offsets seen)."""
    sc = confluent_kafka.ShareConsumer(
        {"bootstrap.servers": b.bootstrap, "group.id": group, "log_level": 0, "share.acknowledgement.mode": "explicit"}
    )
    sc.subscribe([topic])
    seen: list = []
    deadline = time.monotonic() + 30
    while len(seen) < want and time.monotonic() < deadline:
        for m in sc.poll(0.2):
            assert m.error() is None, m.error()
            seen.append(m.offset())
            kind = (
                confluent_kafka.AcknowledgeType.ACCEPT
                if m.offset() < accept
                else confluent_kafka.AcknowledgeType.RELEASE
            )
            sc.acknowledge(m, kind)
        if seen:
            sc.commit_sync(10)
    if close:
        sc.close()
        return None, seen
    return sc, seen


@pytest.mark.skipif(not hasattr(confluent_kafka, "ShareConsumer"), reason="no ShareConsumer in this confluent-kafka")
async def test_share_group_admin_end_to_end(broker, topic_name) -> None:
    group = topic_name + "-sg"
    tp = TopicPartition(topic_name, 0)
    async with AsyncAdmin(bootstrap_servers=broker.bootstrap) as admin:
        raise_for_errors(await admin.create_topics([NewTopic(topic_name, 1)]))
        gres = ConfigResource.group(group)
        raise_for_errors(
            await admin.incremental_alter_configs({gres: [AlterConfigOp.set("share.auto.offset.reset", "earliest")]})
        )
        produce(broker, topic_name, 10)

        # Unknown share group: typed errors (AlterShareGroupOffsets would create it, as in Kafka 4.2:
        # tests/e2e/test_share_group_seed_offsets.py).
        assert err_name((await admin.describe_share_groups([group]))[group]) == "GROUP_ID_NOT_FOUND"
        for call in (
            admin.list_share_group_offsets(group),
            admin.delete_share_group_offsets(group, [topic_name]),
        ):
            with pytest.raises(BrokerResponseError) as e:
                await call
            assert e.value.name == "GROUP_ID_NOT_FOUND"

        # A live member that accepted offsets 0-3 and released the rest.
        sc, seen = await asyncio.to_thread(share_consume, broker, group, topic_name, 4, 10, False)
        assert sorted(seen)[:10] == list(range(10))
        try:
            listed = {g.group_id: g for g in await admin.list_share_groups()}
            assert listed[group].type == "share" and listed[group].state == "Stable"
            assert group not in {g.group_id for g in await admin.list_groups(types=["classic"])}
            d = (await admin.describe_share_groups([group]))[group]
            assert d.state == "Stable" and d.assignor == "simple" and len(d.members) == 1
            assert d.members[0].assignment == (tp,) and d.members[0].subscribed_topics == (topic_name,)
            assert d.group_epoch >= 1 and d.coordinator >= 0

            offsets = await admin.list_share_group_offsets(group)
            assert offsets[tp].start_offset == 4 and offsets[tp].lag == 6, offsets
            assert raw_share_offsets(broker.port, group) == {(topic_name, 0): (4, 6)}
            assert (await admin.list_share_group_offsets(group, [tp]))[tp].start_offset == 4

            with pytest.raises(BrokerResponseError) as e:
                await admin.alter_share_group_offsets(group, {tp: 8})
            assert e.value.name == "NON_EMPTY_GROUP"
            with pytest.raises(BrokerResponseError) as e:
                await admin.delete_share_group_offsets(group, [topic_name])
            assert e.value.name == "NON_EMPTY_GROUP"
            assert err_name((await admin.delete_share_groups([group]))[group]) == "NON_EMPTY_GROUP"
        finally:
            await asyncio.to_thread(sc.close)

        # Empty now: move the start offset to 8; a new member gets exactly 8 and 9.
        bad = await admin.alter_share_group_offsets(group, {tp: 8, TopicPartition(topic_name, 3): 0})
        assert bad[tp] is None and err_name(bad[TopicPartition(topic_name, 3)]) == "UNKNOWN_TOPIC_OR_PARTITION"
        after = await admin.list_share_group_offsets(group)
        assert after[tp].start_offset == 8 and after[tp].lag == 2
        _, seen = await asyncio.to_thread(share_consume, broker, group, topic_name, 100, 2)
        assert sorted(seen) == [8, 9]
        await asyncio.sleep(0.5)  # nothing more may come
        assert (await admin.list_share_group_offsets(group))[tp].lag == 0

        # Delete the topic's state; unknown topics are per-topic errors.
        dels = await admin.delete_share_group_offsets(group, [topic_name, topic_name + "-none"])
        assert dels[topic_name] is None and err_name(dels[topic_name + "-none"]) == "UNKNOWN_TOPIC_OR_PARTITION"
        assert await admin.list_share_group_offsets(group) == {}
        assert raw_share_offsets(broker.port, group) == {}

        assert await admin.delete_share_groups([group]) == {group: None}
        assert group not in {g.group_id for g in await admin.list_share_groups()}
        LG = api_by_name("ListGroups").request_class()
        with RawClient(broker.port) as c:
            assert group not in {g.group_id for g in c.call("ListGroups", 5, LG(types_filter=["share"])).groups}


# -- failures -----------------------------------------------------------------------------------


async def test_broker_gone_mid_call_is_retried_then_times_out(broker_factory, topic_name) -> None:
    b = broker_factory("offsets.topic.num.partitions=1").start()
    async with AsyncAdmin(
        bootstrap_servers=b.bootstrap, default_api_timeout_ms=20000, retry_backoff_max_ms=200
    ) as admin:
        raise_for_errors(await admin.create_topics([NewTopic(topic_name, 1)]))
        b.kill()
        call = asyncio.ensure_future(admin.describe_topics([topic_name]))
        await asyncio.sleep(1.0)
        assert not call.done()
        await asyncio.to_thread(b.start)
        d = await asyncio.wait_for(call, 20)
        assert len(d[topic_name].partitions) == 1  # a transparent retry

        b.kill()
        t0 = time.monotonic()
        with pytest.raises(KafkaClientError) as e:
            await admin.list_consumer_group_offsets("g", timeout_ms=1500)
        assert e.value.retriable
        assert time.monotonic() - t0 < 10
