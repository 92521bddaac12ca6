"""KIP-848 consumer groups over a real socket: ConsumerGroupHeartbeat's errors and reconciliation,
ConsumerGroupDescribe, ListGroups/DescribeGroups, OffsetCommit/OffsetFetch member-epoch checks,
the classic/consumer id clash, and a restart that replays __consumer_offsets."""

from __future__ import annotations

import time
import uuid

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import RawClient
from tests.support.wire import create

FAST = (
    "offsets.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
    "group.consumer.min.heartbeat.interval.ms=100",
    "group.consumer.heartbeat.interval.ms=100",
    "group.consumer.min.session.timeout.ms=1000",
    "group.consumer.session.timeout.ms=1000",
)
HB = api_by_name("ConsumerGroupHeartbeat").request_class()
OC = api_by_name("OffsetCommit").request_class()
OF = api_by_name("OffsetFetch").request_class()


@pytest.fixture
def broker(broker_factory):
    return broker_factory(*FAST).start()


def hb(
    c: RawClient,
    gid: str,
    member: str,
    epoch: int,
    subs=None,
    *,
    owned=None,
    regex=None,
    instance=None,
    assignor=None,
    version: int = 1,
    rebalance_timeout: int | None = None,
):
    if epoch == 0 and owned is None:
        owned = {}
    return c.call(
        "ConsumerGroupHeartbeat",
        version,
        group_id=gid,
        member_id=member,
        member_epoch=epoch,
        instance_id=instance,
        rebalance_timeout_ms=(30000 if epoch == 0 else -1) if rebalance_timeout is None else rebalance_timeout,
        subscribed_topic_names=subs,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=None
        if owned is None
        else [HB.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in owned.items()],
    )


def parts(r) -> dict[uuid.UUID, set[int]] | None:
    if r.assignment is None:
        return None
    return {tp.topic_id: set(tp.partitions) for tp in r.assignment.topic_partitions}


def describe(c: RawClient, gid: str, version: int = 1):
    return c.call("ConsumerGroupDescribe", version, group_ids=[gid], include_authorized_operations=False).groups[0]


def topic_id(c: RawClient, name: str) -> uuid.UUID:
    md = c.call("Metadata", 12, topics=[api_by_name("Metadata").request_class().MetadataRequestTopic(name=name)])
    return md.topics[0].topic_id


def test_advertised_and_bad_requests(broker) -> None:
    with RawClient(broker.port) as c:
        apis = {a.api_key: (a.min_version, a.max_version) for a in c.call("ApiVersions", 3).api_keys}
        assert apis[68] == (0, 1) and apis[69] == (0, 1)
        create(c, "cg-bad")
        assert hb(c, "", "m", 0, ["cg-bad"]).error_code == ErrorCode.INVALID_REQUEST
        assert hb(c, "g", "", 0, ["cg-bad"]).error_code == ErrorCode.INVALID_REQUEST
        assert hb(c, "g", "m", 0, None).error_code == ErrorCode.INVALID_REQUEST  # nothing subscribed
        r = hb(c, "g", "m", 0, ["cg-bad"], rebalance_timeout=-1)
        assert (r.error_code, r.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "RebalanceTimeoutMs must be provided in first request.",
        )
        assert hb(c, "g", "m", -2, None).error_code == ErrorCode.INVALID_REQUEST  # static leave without instance
        # librdkafka sends an empty regex with names, and an empty name list with a regex
        r = hb(c, "g-e1", "m", 0, ["cg-bad"], regex="")
        assert r.error_code == 0 and parts(r) == {topic_id(c, "cg-bad"): {0}}
        r = hb(c, "g-e2", "m", 0, [], regex="(^cg-b.*)")
        assert r.error_code == 0 and parts(r) == {topic_id(c, "cg-bad"): {0}}
        r = hb(c, "g", "m", 0, None, regex="cg-.*+")
        assert r.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION and "possessive" in r.error_message
        assert hb(c, "g", "m", 0, None, regex="(open").error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
        assert hb(c, "g", "m", 0, ["cg-bad"], assignor="sticky").error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
        assert hb(c, "g-none", "m", 3, None).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # v0 lets the coordinator choose the member id
        r = hb(c, "g0", "", 0, ["cg-bad"], version=0)
        assert r.error_code == 0 and r.member_id and r.member_epoch == 1


def test_reconciliation_fencing_and_describe(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "cg-t", 6)
        tid = topic_id(c, "cg-t")
        a = hb(c, "g", "a", 0, ["cg-t"])
        assert a.error_code == 0 and a.member_epoch == 1 and parts(a) == {tid: set(range(6))}
        assert a.heartbeat_interval_ms == 100
        b = hb(c, "g", "b", 0, ["cg-t"])
        assert b.member_epoch == 2 and parts(b) == {}  # a still holds everything
        # a must revoke three first: it keeps its epoch until it reports them gone
        a2 = hb(c, "g", "a", 1, owned={tid: set(range(6))})
        assert a2.member_epoch == 1 and len(parts(a2)[tid]) == 3
        kept = parts(a2)[tid]
        d = describe(c, "g")
        assert d.group_state == "Reconciling" and d.group_epoch == 2 and d.assignment_epoch == 2
        assert d.assignor_name == "uniform"
        # b gets nothing while a has not revoked
        b2 = hb(c, "g", "b", 2, owned={})
        assert b2.error_code == 0 and not parts(b2)
        a3 = hb(c, "g", "a", 1, owned={tid: kept})
        assert a3.error_code == 0 and a3.member_epoch == 2
        b3 = hb(c, "g", "b", 2, owned={})
        assert parts(b3) == {tid: set(range(6)) - kept}
        d = describe(c, "g")
        assert d.group_state == "Stable"
        by = {m.member_id: m for m in d.members}
        assert {tp.topic_name for tp in by["a"].assignment.topic_partitions} == {"cg-t"}
        assert by["b"].target_assignment.topic_partitions[0].partitions == sorted(set(range(6)) - kept)
        assert by["b"].member_type == 1
        # errors
        r = hb(c, "g", "a", 7)
        assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert hb(c, "g", "a", 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH  # old epoch, owned unknown
        assert hb(c, "g", "zz", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert hb(c, "g", "zz", -1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # leave: b's partitions go back to a
        r = hb(c, "g", "b", -1)
        assert (r.error_code, r.member_epoch) == (0, -1)
        a4 = hb(c, "g", "a", 2, owned={tid: kept})
        assert a4.member_epoch == 3 and parts(a4) == {tid: set(range(6))}
        # lists and classic describe
        lg = c.call("ListGroups", 5, states_filter=[], types_filter=["consumer"])
        assert [(g.group_id, g.group_type, g.protocol_type) for g in lg.groups if g.group_id == "g"] == [
            ("g", "consumer", "consumer")
        ]
        assert not [
            g for g in c.call("ListGroups", 5, states_filter=["Empty"], types_filter=[]).groups if g.group_id == "g"
        ]
        assert not [
            g for g in c.call("ListGroups", 5, states_filter=[], types_filter=["classic"]).groups if g.group_id == "g"
        ]
        dg = c.call("DescribeGroups", 6, groups=["g"], include_authorized_operations=False).groups[0]
        assert dg.error_code == ErrorCode.GROUP_ID_NOT_FOUND and dg.error_message == "Group g is not a classic group."
        dg = c.call("DescribeGroups", 5, groups=["g"], include_authorized_operations=False).groups[0]
        assert (dg.error_code, dg.group_state) == (0, "Dead")
        assert describe(c, "nope").error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_regex_subscription_follows_new_topics(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "rx-a", 2)
        create(c, "other", 2)
        ta = topic_id(c, "rx-a")
        r = hb(c, "g", "m", 0, None, regex="rx-.*")
        assert parts(r) == {ta: {0, 1}}
        create(c, "rx-b", 1)
        tb = topic_id(c, "rx-b")
        r2 = hb(c, "g", "m", r.member_epoch, owned={ta: {0, 1}})
        assert r2.member_epoch > r.member_epoch and parts(r2) == {ta: {0, 1}, tb: {0}}
        assert describe(c, "g").members[0].subscribed_topic_regex == "rx-.*"


def test_static_member_replacement(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "st-t", 2)
        tid = topic_id(c, "st-t")
        a = hb(c, "g", "a1", 0, ["st-t"], instance="i1")
        assert parts(a) == {tid: {0, 1}}
        # the instance id is held: another member id cannot take it while a1 is active
        assert hb(c, "g", "a2", 0, ["st-t"], instance="i1").error_code == ErrorCode.UNRELEASED_INSTANCE_ID
        assert hb(c, "g", "a1", a.member_epoch, instance="i2").error_code == ErrorCode.FENCED_INSTANCE_ID
        r = hb(c, "g", "a1", -2, instance="i1")
        assert (r.error_code, r.member_epoch) == (0, -2)
        # the replacement takes over a1's partitions and epoch, without a rebalance
        n = hb(c, "g", "a2", 0, ["st-t"], instance="i1")
        assert n.error_code == 0 and parts(n) == {tid: {0, 1}} and n.member_epoch == a.member_epoch
        d = describe(c, "g")
        assert [(m.member_id, m.instance_id) for m in d.members] == [("a2", "i1")] and d.group_epoch == 1


def test_session_timeout_moves_partitions(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "ss-t", 2)
        tid = topic_id(c, "ss-t")
        a = hb(c, "g", "a", 0, ["ss-t"])
        b = hb(c, "g", "b", 0, ["ss-t"])
        a = hb(c, "g", "a", a.member_epoch, owned={tid: {0, 1}})
        a = hb(c, "g", "a", a.member_epoch, owned={tid: parts(a)[tid]})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # b stops heartbeating; a keeps going and gets everything back
            a = hb(c, "g", "a", a.member_epoch, owned=None)
            assert a.error_code == 0
            if parts(a) == {tid: {0, 1}}:
                break
            time.sleep(0.1)
        assert parts(a) == {tid: {0, 1}}
        assert hb(c, "g", "b", b.member_epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_offsets_check_member_epoch(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "oc-t", 1)
        a = hb(c, "g", "a", 0, ["oc-t"])

        def commit(member: str, epoch: int, version: int = 9):
            r = c.call(
                "OffsetCommit",
                version,
                group_id="g",
                generation_id_or_member_epoch=epoch,
                member_id=member,
                topics=[
                    OC.OffsetCommitRequestTopic(
                        name="oc-t", partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)]
                    )
                ],
            )
            return r.topics[0].partitions[0].error_code

        def fetch(member: str | None, epoch: int):
            r = c.call(
                "OffsetFetch",
                9,
                groups=[OF.OffsetFetchRequestGroup(group_id="g", member_id=member, member_epoch=epoch, topics=None)],
                require_stable=False,
            )
            g = r.groups[0]
            return g.error_code, {
                (t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
            }

        assert commit("a", a.member_epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
        assert commit("zz", a.member_epoch) == ErrorCode.UNKNOWN_MEMBER_ID
        assert commit("", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # the group has members
        assert commit("a", a.member_epoch, version=8) == ErrorCode.UNSUPPORTED_VERSION
        assert commit("a", a.member_epoch) == 0
        assert fetch("a", a.member_epoch + 5)[0] == ErrorCode.STALE_MEMBER_EPOCH
        assert fetch("zz", 1)[0] == ErrorCode.UNKNOWN_MEMBER_ID
        assert fetch("a", a.member_epoch) == (0, {("oc-t", 0): 5})
        assert fetch(None, -1) == (0, {("oc-t", 0): 5})


def test_classic_and_consumer_ids_clash(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "cl-t", 1)
        hb(c, "cg", "a", 0, ["cl-t"])
        r = c.call(
            "JoinGroup",
            9,
            group_id="cg",
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            member_id="",
            protocol_type="consumer",
            protocols=[],
        )
        assert r.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        J = api_by_name("JoinGroup").request_class()
        r = c.call(
            "JoinGroup",
            9,
            group_id="classic",
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            member_id="",
            protocol_type="consumer",
            protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")],
        )
        r = c.call(
            "JoinGroup",
            9,
            group_id="classic",
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            member_id=r.member_id,
            protocol_type="consumer",
            protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")],
        )
        assert r.error_code == 0
        assert hb(c, "classic", "x", 0, ["cl-t"]).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_empty_classic_group_with_offsets_becomes_consumer_group(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "conv-t", 1)
        r = c.call(
            "OffsetCommit",
            9,
            group_id="conv",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                OC.OffsetCommitRequestTopic(
                    name="conv-t", partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=7)]
                )
            ],
        )
        assert r.topics[0].partitions[0].error_code == 0
        a = hb(c, "conv", "a", 0, ["conv-t"])
        assert a.error_code == 0 and a.member_epoch == 1
        r = c.call(
            "OffsetFetch",
            9,
            groups=[OF.OffsetFetchRequestGroup(group_id="conv", member_id="a", member_epoch=1, topics=None)],
            require_stable=False,
        )
        assert r.groups[0].topics[0].partitions[0].committed_offset == 7
        types = {g.group_id: g.group_type for g in c.call("ListGroups", 5, states_filter=[], types_filter=[]).groups}
        assert types["conv"] == "consumer"


@pytest.mark.parametrize("kill", [False, True])
def test_group_survives_restart(broker_factory, kill: bool) -> None:
    b = broker_factory(
        *FAST, "group.consumer.session.timeout.ms=45000", "group.consumer.min.session.timeout.ms=45000"
    ).start()
    with RawClient(b.port) as c:
        create(c, "rs-t", 4)
        tid = topic_id(c, "rs-t")
        a = hb(c, "g", "a", 0, ["rs-t"])
        bb = hb(c, "g", "b", 0, ["rs-t"])
        a = hb(c, "g", "a", a.member_epoch, owned={tid: set(range(4))})
        before = describe(c, "g")
    if kill:
        b.kill()
    else:
        b.stop()
    b.start()
    with RawClient(b.port) as c:
        after = describe(c, "g")
        assert after.error_code == 0
        assert (after.group_epoch, after.assignment_epoch, after.group_state) == (
            before.group_epoch,
            before.assignment_epoch,
            before.group_state,
        )
        assert after.members == before.members
        # the members carry on where they were
        a2 = hb(c, "g", "a", a.member_epoch, owned={tid: parts(a)[tid]})
        assert a2.error_code == 0 and a2.member_epoch == 2
        assert hb(c, "g", "b", bb.member_epoch, owned={}).error_code == 0


def test_group_config_overrides_interval_and_session(broker) -> None:
    from shoal.protocol.constants import AlterConfigOpType, ConfigResourceType

    IAC = api_by_name("IncrementalAlterConfigs").request_class()

    def alter(name: str, value: str) -> int:
        resp = c.call(
            "IncrementalAlterConfigs",
            1,
            resources=[
                IAC.AlterConfigsResource(
                    resource_type=ConfigResourceType.GROUP,
                    resource_name="cfg-g",
                    configs=[IAC.AlterableConfig(name=name, config_operation=AlterConfigOpType.SET, value=value)],
                )
            ],
            validate_only=False,
        )
        return resp.responses[0].error_code

    with RawClient(broker.port) as c:
        create(c, "cfg-t")
        # bounded by group.consumer.{min,max}.session.timeout.ms (1000..60000 here)
        assert alter("consumer.session.timeout.ms", "500") == ErrorCode.INVALID_CONFIG
        assert alter("consumer.heartbeat.interval.ms", "250") == 0
        assert alter("consumer.session.timeout.ms", "3000") == 0
        r = hb(c, "cfg-g", "m", 0, ["cfg-t"])
        assert r.heartbeat_interval_ms == 250
        assert hb(c, "other-g", "m", 0, ["cfg-t"]).heartbeat_interval_ms == 100
        start = time.monotonic()
        while describe(c, "cfg-g").members and time.monotonic() - start < 10:
            time.sleep(0.1)
        gone_after = time.monotonic() - start
        assert describe(c, "cfg-g").members == []
        assert 2.0 <= gone_after <= 8, gone_after  # the group's 3 s session, not the broker's 1 s


def test_delete_group(broker) -> None:
    with RawClient(broker.port) as c:
        create(c, "del-t")
        a = hb(c, "dg", "a", 0, ["del-t"])
        assert c.call("DeleteGroups", 2, groups_names=["dg"]).results[0].error_code == ErrorCode.NON_EMPTY_GROUP
        assert hb(c, "dg", "a", -1).error_code == 0
        assert c.call("DeleteGroups", 2, groups_names=["dg"]).results[0].error_code == 0
        assert describe(c, "dg").error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert hb(c, "dg", "a", a.member_epoch).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_only_served_when_the_consumer_protocol_is_enabled(broker_factory) -> None:
    b = broker_factory("group.coordinator.rebalance.protocols=classic").start()
    with RawClient(b.port) as c:
        keys = {a.api_key for a in c.call("ApiVersions", 3).api_keys}
    assert 68 not in keys and 69 not in keys
