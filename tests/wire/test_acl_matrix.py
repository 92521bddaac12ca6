"""The ACL matrix: for every API family, the operations Kafka checks, over real sockets.

Each case runs its request as the principal under test in steps: with no ACL
(Kafka's error), then with part of what it needs where Kafka checks two
resources (the second error), then with everything it needs (the API's normal
answer). The ACLs are set through the broker's own authorizer object (the
real component, on the broker's loop); each case's resources are set up first
while the principal may do everything, and the ACLs are cleared after.

The principal under test is a parameter, and the cases do not change with it:
``User:ANONYMOUS`` on PLAINTEXT, ``User:alice`` logged in with SCRAM on
SASL_PLAINTEXT, and ``User:tls-alice`` on a mutual-TLS listener, whose
ssl.principal.mapping.rules turn the certificate's CN into the name. With the
ACLs of the last step in place, ``User:bob`` (SCRAM, no ACLs) still gets the
first step's error: the grants belong to the principal they name.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from shoal.broker.security.acl import CLUSTER_NAME, AclBinding
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AclOperation as Op
from shoal.protocol.constants import AclPatternType as Pt
from shoal.protocol.constants import AclPermissionType as Perm
from shoal.protocol.constants import AclResourceType as Rt
from shoal.protocol.constants import AlterConfigOpType, ConfigResourceType
from shoal.protocol.errors import ErrorCode as E
from shoal.protocol.records import build_batch
from shoal.testing import EmbeddedBroker
from tests.support.auth_wire import connect, scram_upserts, tls_context
from tests.support.brokers import RawClient
from tests.support.share_wire import FAST, fetch, ready_topic
from tests.support.tls import make_tls_files
from tests.support.wire import create

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


PASSWORDS = {"alice": "alice-m4trix-pw", "bob": "bob-m4trix-pw"}
TLS_RULES = r"RULE:^CN=([^,]+),.*$/tls-$1/,DEFAULT"


@dataclass(frozen=True)
class Principal:
    name: str
    connect: Callable[[EmbeddedBroker], RawClient]


def _sasl(user: str, mechanism: str) -> Callable[[EmbeddedBroker], RawClient]:
    return lambda eb: connect(eb.listener_port("SASL_PLAINTEXT"), sasl=(mechanism, user, PASSWORDS[user]))


def _mtls(client: str) -> Callable[[EmbeddedBroker], RawClient]:
    return lambda eb: connect(eb.listener_port("SSL"), tls=tls_context(eb.tls_files, client))


PRINCIPALS = [
    Principal("User:ANONYMOUS", lambda eb: RawClient(eb.port)),
    Principal("User:alice", _sasl("alice", "SCRAM-SHA-256")),
    Principal("User:tls-alice", _mtls("alice")),
]
# Holds no ACL: asked with the last step's grants in place, it gets the first step's error.
OTHER = Principal("User:bob", _sasl("bob", "SCRAM-SHA-512"))


def req(api: str) -> Any:
    return api_by_name(api).request_class()


def grant(who: str, rt: Rt, name: str, op: Op, perm: Perm = Perm.ALLOW, pt: Pt = Pt.LITERAL) -> AclBinding:
    return AclBinding(rt, name, pt, who, "*", op, perm)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    files = make_tls_files(tmp_path_factory.mktemp("acl-matrix-tls"))
    settings = {
        "authorizer.class.name": STANDARD,
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": str(files.broker),
        "ssl.truststore.location": str(files.ca),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": TLS_RULES,
        "connection.failed.authentication.delay.ms": "0",
    }
    settings.update(dict(s.split("=", 1) for s in FAST))
    with EmbeddedBroker(settings, data_dir=tmp_path_factory.mktemp("acl-matrix") / "d") as eb:
        eb.tls_files = files  # for the mutual-TLS principal's connections
        set_acls(eb, everything("User:ANONYMOUS"))
        with RawClient(eb.port) as c:
            r = c.call("AlterUserScramCredentials", 0, body=scram_upserts(PASSWORDS))
        assert [x.error_code for x in r.results] == [0, 0]
        set_acls(eb, [])
        yield eb


def set_acls(eb: EmbeddedBroker, acls: list[AclBinding]) -> None:
    eb.call(lambda: eb.broker.authorizer.replace_all(acls))


def everything(who: str) -> list[AclBinding]:
    return [
        grant(who, Rt.TOPIC, "*", Op.ALL),
        grant(who, Rt.GROUP, "*", Op.ALL),
        grant(who, Rt.CLUSTER, CLUSTER_NAME, Op.ALL),
        grant(who, Rt.TRANSACTIONAL_ID, "*", Op.ALL),
    ]


# -- the requests, each returning the one error code that tells the outcome ---------------------


def produce(c, ctx):
    P = req("Produce")
    batch = build_batch([(None, b"v", [], int(time.time() * 1000))])
    data = [P.TopicProduceData(name=ctx.topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]
    return (
        c.call("Produce", 9, acks=-1, timeout_ms=5000, topic_data=data).responses[0].partition_responses[0].error_code
    )


def init_producer_id(c, ctx):
    r = c.call(
        "InitProducerId", 4, transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )
    return r.error_code


def fetch_topic(c, ctx):
    F = req("Fetch")
    part = F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    r = c.call(
        "Fetch",
        12,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[F.FetchTopic(topic=ctx.topic, partitions=[part])],
    )
    return r.responses[0].partitions[0].error_code


def list_offsets(c, ctx):
    L = req("ListOffsets")
    t = L.ListOffsetsTopic(name=ctx.topic, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)])
    return c.call("ListOffsets", 7, replica_id=-1, isolation_level=0, topics=[t]).topics[0].partitions[0].error_code


def metadata(c, ctx):
    M = req("Metadata")
    return (
        c.call("Metadata", 12, topics=[M.MetadataRequestTopic(name=ctx.topic)], allow_auto_topic_creation=False)
        .topics[0]
        .error_code
    )


def metadata_listing(c, ctx):
    names = [t.name for t in c.call("Metadata", 12, topics=None, allow_auto_topic_creation=False).topics]
    return 0 if ctx.topic in names else E.TOPIC_AUTHORIZATION_FAILED  # hidden, not refused


def metadata_auto_create(c, ctx):
    M = req("Metadata")
    name = ctx.topic + "-auto"
    return (
        c.call("Metadata", 12, topics=[M.MetadataRequestTopic(name=name)], allow_auto_topic_creation=True)
        .topics[0]
        .error_code
    )


def create_topics(c, ctx):
    CT = req("CreateTopics")
    t = CT.CreatableTopic(name=ctx.topic + "-new", num_partitions=1, replication_factor=1, configs=[])
    return c.call("CreateTopics", 7, topics=[t], timeout_ms=5000, validate_only=True).topics[0].error_code


def delete_topics(c, ctx):
    return c.call("DeleteTopics", 4, topic_names=[ctx.topic], timeout_ms=5000).responses[0].error_code


def delete_records(c, ctx):
    DR = req("DeleteRecords")
    t = DR.DeleteRecordsTopic(name=ctx.topic, partitions=[DR.DeleteRecordsPartition(partition_index=0, offset=-1)])
    return c.call("DeleteRecords", 2, topics=[t], timeout_ms=5000).topics[0].partitions[0].error_code


def create_partitions(c, ctx):
    CP = req("CreatePartitions")
    t = CP.CreatePartitionsTopic(name=ctx.topic, count=2, assignments=None)
    return c.call("CreatePartitions", 3, topics=[t], timeout_ms=5000, validate_only=True).results[0].error_code


def describe_topic_configs(c, ctx):
    D = req("DescribeConfigs")
    res = D.DescribeConfigsResource(
        resource_type=ConfigResourceType.TOPIC, resource_name=ctx.topic, configuration_keys=None
    )
    return c.call("DescribeConfigs", 4, resources=[res]).results[0].error_code


def describe_broker_configs(c, ctx):
    D = req("DescribeConfigs")
    res = D.DescribeConfigsResource(resource_type=ConfigResourceType.BROKER, resource_name="", configuration_keys=None)
    return c.call("DescribeConfigs", 4, resources=[res]).results[0].error_code


def alter_topic_configs(c, ctx):
    I = req("IncrementalAlterConfigs")  # noqa: E741
    op = I.AlterableConfig(name="retention.ms", config_operation=AlterConfigOpType.SET, value="60000")
    res = I.AlterConfigsResource(resource_type=ConfigResourceType.TOPIC, resource_name=ctx.topic, configs=[op])
    return c.call("IncrementalAlterConfigs", 1, resources=[res], validate_only=True).responses[0].error_code


def find_coordinator(c, ctx):
    return c.call("FindCoordinator", 4, key_type=0, coordinator_keys=[ctx.group]).coordinators[0].error_code


def join_group(c, ctx):
    J = req("JoinGroup")
    r = c.call(
        "JoinGroup", 5, group_id=ctx.group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        group_instance_id=None, protocol_type="consumer", protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )  # fmt: skip
    return r.error_code  # v4+: a new member is first told MEMBER_ID_REQUIRED


def heartbeat(c, ctx):
    return c.call("Heartbeat", 3, group_id=ctx.group, generation_id=1, member_id="m", group_instance_id=None).error_code


def commit(c, ctx):
    OC = req("OffsetCommit")
    p = OC.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""
    )
    r = c.call(
        "OffsetCommit", 8, group_id=ctx.group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[OC.OffsetCommitRequestTopic(name=ctx.topic, partitions=[p])],
    )  # fmt: skip
    return r.topics[0].partitions[0].error_code


def offset_fetch(c, ctx):
    OF = req("OffsetFetch")
    g = OF.OffsetFetchRequestGroup(
        group_id=ctx.group, topics=[OF.OffsetFetchRequestTopics(name=ctx.topic, partition_indexes=[0])]
    )
    r = c.call("OffsetFetch", 8, groups=[g], require_stable=False).groups[0]
    return r.error_code or r.topics[0].partitions[0].error_code


def offset_delete(c, ctx):
    OD = req("OffsetDelete")
    t = OD.OffsetDeleteRequestTopic(name=ctx.topic, partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)])
    r = c.call("OffsetDelete", 0, group_id=ctx.group, topics=[t])
    return r.error_code or r.topics[0].partitions[0].error_code


def describe_groups(c, ctx):
    return c.call("DescribeGroups", 5, groups=[ctx.group], include_authorized_operations=True).groups[0].error_code


def list_groups(c, ctx):
    ids = [g.group_id for g in c.call("ListGroups", 5, states_filter=[], types_filter=[]).groups]
    return 0 if ctx.group in ids else E.GROUP_AUTHORIZATION_FAILED  # hidden, not refused


def delete_groups(c, ctx):
    return c.call("DeleteGroups", 2, groups_names=[ctx.group]).results[0].error_code


def share_heartbeat(c, ctx):
    r = c.call(
        "ShareGroupHeartbeat", 1, group_id=ctx.group, member_id=uuid.uuid4().hex[:22], member_epoch=0, rack_id=None,
        subscribed_topic_names=[ctx.topic],
    )  # fmt: skip
    return r.error_code


def consumer_heartbeat(c, ctx):
    r = c.call(
        "ConsumerGroupHeartbeat", 1, group_id=ctx.group, member_id=uuid.uuid4().hex[:22], member_epoch=0,
        rebalance_timeout_ms=30000, subscribed_topic_names=[ctx.topic], topic_partitions=[],
    )  # fmt: skip
    return r.error_code


def consumer_describe(c, ctx):
    r = c.call("ConsumerGroupDescribe", 1, group_ids=[ctx.group], include_authorized_operations=True)
    return r.groups[0].error_code


def share_fetch(c, ctx):
    r = fetch(c, ctx.group, uuid.uuid4().hex[:22], 0, [(ctx.topic_id, 0)])
    return r.error_code or r.responses[0].partitions[0].error_code


def share_describe(c, ctx):
    return (
        c.call("ShareGroupDescribe", 1, group_ids=[ctx.group], include_authorized_operations=True).groups[0].error_code
    )


def describe_share_offsets(c, ctx):
    D = req("DescribeShareGroupOffsets")
    t = D.DescribeShareGroupOffsetsRequestTopic(topic_name=ctx.topic, partitions=[0])
    g = c.call(
        "DescribeShareGroupOffsets", 1, groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=ctx.group, topics=[t])]
    ).groups[0]
    return g.error_code or g.topics[0].partitions[0].error_code


def alter_share_offsets(c, ctx):
    A = req("AlterShareGroupOffsets")
    p = A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)
    r = c.call(
        "AlterShareGroupOffsets",
        0,
        group_id=ctx.group,
        topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name=ctx.topic, partitions=[p])],
    )
    return r.error_code or r.responses[0].partitions[0].error_code


def delete_share_offsets(c, ctx):
    D = req("DeleteShareGroupOffsets")
    r = c.call(
        "DeleteShareGroupOffsets",
        0,
        group_id=ctx.group,
        topics=[D.DeleteShareGroupOffsetsRequestTopic(topic_name=ctx.topic)],
    )
    return r.error_code or r.responses[0].error_code


def read_share_state(c, ctx):
    R = req("ReadShareGroupState")
    t = R.ReadStateData(topic_id=ctx.topic_id, partitions=[R.PartitionData(partition=0, leader_epoch=0)])
    return c.call("ReadShareGroupState", 0, group_id=ctx.group, topics=[t]).results[0].partitions[0].error_code


def describe_acls(c, ctx):
    r = c.call(
        "DescribeAcls", 3, resource_type_filter=Rt.ANY, resource_name_filter=None, pattern_type_filter=Pt.ANY,
        principal_filter=None, host_filter=None, operation=Op.ANY, permission_type=Perm.ANY,
    )  # fmt: skip
    return r.error_code


def create_acls(c, ctx):
    C = req("CreateAcls")
    a = C.AclCreation(resource_type=Rt.TOPIC, resource_name="x", resource_pattern_type=Pt.LITERAL, principal="User:x",
                      host="*", operation=Op.READ, permission_type=Perm.ALLOW)  # fmt: skip
    return c.call("CreateAcls", 3, creations=[a]).results[0].error_code


def describe_scram(c, ctx):
    D = req("DescribeUserScramCredentials")
    r = c.call("DescribeUserScramCredentials", 0, users=[D.UserName(name="alice")])
    assert [x.user for x in r.results] == ["" if r.error_code else "alice"]  # Kafka's refusal names no user
    return r.error_code or r.results[0].error_code


def alter_scram(c, ctx):
    user = f"u-{ctx.topic}"
    r = c.call("AlterUserScramCredentials", 0, body=scram_upserts({user: "pw"}))
    assert [x.user for x in r.results] == [user]  # refused or not, the user is named once
    return r.results[0].error_code


# -- the cases ---------------------------------------------------------------------------------

T, G, C = Rt.TOPIC, Rt.GROUP, Rt.CLUSTER
CL = CLUSTER_NAME


@dataclass(frozen=True)
class Case:
    family: str
    act: Callable[[RawClient, Any], int]
    # (what the principal holds: (resource type, "topic"|"group"|name, operation), the answer)
    steps: tuple[tuple[tuple[tuple[Rt, str, Op], ...], int], ...]
    setup: str = "topic"  # topic | group (topic + committed offsets) | share (topic + share group state)


CASES = [
    Case("produce", produce, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "topic", Op.WRITE),), 0))),
    Case("produce", init_producer_id, (((), E.CLUSTER_AUTHORIZATION_FAILED), (((T, "topic", Op.WRITE),), 0))),
    Case("produce", init_producer_id, (((), E.CLUSTER_AUTHORIZATION_FAILED), (((C, CL, Op.IDEMPOTENT_WRITE),), 0))),
    Case("fetch", fetch_topic, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "topic", Op.READ),), 0))),
    Case("fetch", list_offsets, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "topic", Op.DESCRIBE),), 0))),
    Case("metadata", metadata, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "topic", Op.READ),), 0))),
    Case("metadata", metadata_listing, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "topic", Op.DESCRIBE),), 0))),
    Case(
        "metadata",
        metadata_auto_create,
        (
            ((), E.TOPIC_AUTHORIZATION_FAILED),
            (((T, "*", Op.DESCRIBE),), E.TOPIC_AUTHORIZATION_FAILED),  # describe alone does not create
            (((T, "*", Op.DESCRIBE), (C, CL, Op.CREATE)), 0),
        ),
    ),
    Case("admin", create_topics, (((), E.TOPIC_AUTHORIZATION_FAILED), (((C, CL, Op.CREATE),), 0))),
    Case("admin", create_topics, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "*", Op.CREATE),), 0))),
    Case("admin", create_partitions, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "topic", Op.ALTER),), 0))),
    Case("admin", describe_topic_configs, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "topic", Op.ALTER_CONFIGS),), 0))),
    Case(
        "admin", describe_broker_configs, (((), E.CLUSTER_AUTHORIZATION_FAILED), (((C, CL, Op.DESCRIBE_CONFIGS),), 0))
    ),
    Case("admin", alter_topic_configs, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "topic", Op.ALTER_CONFIGS),), 0))),
    Case("admin", delete_topics, (((), E.TOPIC_AUTHORIZATION_FAILED), (((T, "topic", Op.DELETE),), 0))),
    Case(
        "admin",
        delete_records,
        (
            ((), E.TOPIC_AUTHORIZATION_FAILED),
            (((T, "topic", Op.WRITE),), E.TOPIC_AUTHORIZATION_FAILED),  # DELETE, not WRITE
            (((T, "topic", Op.DELETE),), 0),
        ),
    ),
    Case("groups", find_coordinator, (((), E.GROUP_AUTHORIZATION_FAILED), (((G, "group", Op.DESCRIBE),), 0))),
    Case("groups", join_group, (((), E.GROUP_AUTHORIZATION_FAILED), (((G, "group", Op.READ),), E.MEMBER_ID_REQUIRED))),
    Case("groups", heartbeat, (((), E.GROUP_AUTHORIZATION_FAILED), (((G, "group", Op.READ),), E.UNKNOWN_MEMBER_ID))),
    Case(
        "groups",
        commit,
        (
            ((), E.GROUP_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ),), E.TOPIC_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ), (T, "topic", Op.READ)), 0),
        ),
    ),
    Case(
        "groups",
        offset_fetch,
        (
            ((), E.GROUP_AUTHORIZATION_FAILED),
            (((G, "group", Op.DESCRIBE),), E.TOPIC_AUTHORIZATION_FAILED),
            (((G, "group", Op.DESCRIBE), (T, "topic", Op.DESCRIBE)), 0),
        ),
        setup="group",
    ),
    Case(
        "groups",
        offset_delete,
        (
            ((), E.GROUP_AUTHORIZATION_FAILED),
            (((G, "group", Op.DELETE),), E.TOPIC_AUTHORIZATION_FAILED),
            (((G, "group", Op.DELETE), (T, "topic", Op.READ)), 0),
        ),
        setup="group",
    ),
    Case(
        "groups",
        describe_groups,
        (((), E.GROUP_AUTHORIZATION_FAILED), (((G, "group", Op.DESCRIBE),), 0)),
        setup="group",
    ),
    Case("groups", list_groups, (((), E.GROUP_AUTHORIZATION_FAILED), (((G, "group", Op.DESCRIBE),), 0)), setup="group"),
    Case("groups", list_groups, (((), E.GROUP_AUTHORIZATION_FAILED), (((C, CL, Op.DESCRIBE),), 0)), setup="group"),
    Case("groups", delete_groups, (((), E.GROUP_AUTHORIZATION_FAILED), (((G, "group", Op.DELETE),), 0)), setup="group"),
    Case(
        "share-groups",
        share_heartbeat,
        (
            ((), E.GROUP_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ),), E.TOPIC_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ), (T, "topic", Op.DESCRIBE)), 0),
        ),
    ),
    Case(
        "consumer-groups",
        consumer_heartbeat,
        (
            ((), E.GROUP_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ),), E.TOPIC_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ), (T, "topic", Op.DESCRIBE)), 0),
        ),
    ),
    Case(
        "consumer-groups",
        consumer_describe,
        (((), E.GROUP_AUTHORIZATION_FAILED), (((G, "group", Op.DESCRIBE),), E.GROUP_ID_NOT_FOUND)),
    ),
    Case(
        "share-groups",
        share_fetch,
        (
            ((), E.GROUP_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ),), E.TOPIC_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ), (T, "topic", Op.READ)), 0),
        ),
        setup="share",
    ),
    Case(
        "share-groups",
        share_describe,
        (((), E.GROUP_AUTHORIZATION_FAILED), (((G, "group", Op.DESCRIBE),), 0)),
        setup="share",
    ),
    Case(
        "share-admin",
        describe_share_offsets,
        (
            ((), E.GROUP_AUTHORIZATION_FAILED),
            (((G, "group", Op.DESCRIBE),), E.TOPIC_AUTHORIZATION_FAILED),
            (((G, "group", Op.DESCRIBE), (T, "topic", Op.DESCRIBE)), 0),
        ),
        setup="share",
    ),
    Case(
        "share-admin",
        alter_share_offsets,
        (
            ((), E.GROUP_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ),), E.TOPIC_AUTHORIZATION_FAILED),
            (((G, "group", Op.READ), (T, "topic", Op.READ)), 0),
        ),
        setup="share",
    ),
    Case(
        "share-admin",
        delete_share_offsets,
        (
            ((), E.GROUP_AUTHORIZATION_FAILED),
            (((G, "group", Op.DELETE),), E.TOPIC_AUTHORIZATION_FAILED),
            (((G, "group", Op.DELETE), (T, "topic", Op.READ)), 0),
        ),
        setup="share",
    ),
    Case(
        "share-admin",
        read_share_state,
        (((), E.CLUSTER_AUTHORIZATION_FAILED), (((C, CL, Op.CLUSTER_ACTION),), 0)),
        setup="share",
    ),
    Case("acl-admin", describe_acls, (((), E.CLUSTER_AUTHORIZATION_FAILED), (((C, CL, Op.DESCRIBE),), 0))),
    Case("acl-admin", create_acls, (((), E.CLUSTER_AUTHORIZATION_FAILED), (((C, CL, Op.ALTER),), 0))),
    Case("scram-admin", describe_scram, (((), E.CLUSTER_AUTHORIZATION_FAILED), (((C, CL, Op.DESCRIBE),), 0))),
    Case("scram-admin", alter_scram, (((), E.CLUSTER_AUTHORIZATION_FAILED), (((C, CL, Op.ALTER),), 0))),
]


@dataclass
class Ctx:
    topic: str
    group: str
    topic_id: uuid.UUID | None = None


def _prepare(eb: EmbeddedBroker, who: Principal, case: Case, n: int) -> Ctx:
    tag = f"{n}-{who.name.split(':', 1)[1]}-{case.act.__name__}"
    ctx = Ctx(topic=f"m{tag}", group=f"g{tag}")
    # (share setups go through PLAINTEXT helpers, as User:ANONYMOUS)
    set_acls(eb, everything(who.name) + everything("User:ANONYMOUS"))
    try:
        if case.setup.startswith("share"):
            where = SimpleNamespace(port=eb.port, bootstrap=eb.bootstrap_servers)
            ctx.topic_id = ready_topic(where, ctx.topic, ctx.group, 2)
            if case.setup == "share-member":
                _stay_assigned(eb, ctx)
            return ctx
        with who.connect(eb) as c:
            assert create(c, ctx.topic).error_code == 0
            if case.setup == "group":
                assert commit(c, ctx) == 0
    finally:
        set_acls(eb, [])
    return ctx


def _stay_assigned(eb: EmbeddedBroker, ctx: Ctx) -> None:
    """A member that joins, is assigned the topic and stays (until its session times out)."""
    with RawClient(eb.port) as c:
        epoch = 0
        for _ in range(100):
            r = c.call(
                "ShareGroupHeartbeat", 1, group_id=ctx.group, member_id="stay", member_epoch=epoch, rack_id=None,
                subscribed_topic_names=[ctx.topic] if epoch == 0 else None,
            )  # fmt: skip
            epoch = r.member_epoch
            if r.assignment is not None and any(tp.partitions for tp in r.assignment.topic_partitions):
                return
            time.sleep(0.05)
    raise AssertionError("the member was never assigned the topic")


def _bindings(who: str, ctx: Ctx, held: tuple[tuple[Rt, str, Op], ...]) -> list[AclBinding]:
    names = {"topic": ctx.topic, "group": ctx.group}
    return [grant(who, rt, names.get(name, name), op) for rt, name, op in held]


@pytest.mark.parametrize("who", PRINCIPALS, ids=lambda p: p.name)
@pytest.mark.parametrize(
    ("n", "case"), list(enumerate(CASES)), ids=[f"{c.family}-{c.act.__name__}-{i}" for i, c in enumerate(CASES)]
)
def test_acl_matrix(broker, who: Principal, n: int, case: Case) -> None:
    ctx = _prepare(broker, who, case, n)
    refused = case.steps[0][1]
    try:
        for i, (held, expected) in enumerate(case.steps):
            set_acls(broker, _bindings(who.name, ctx, held))
            if i == len(case.steps) - 1:  # someone else is not helped by these grants
                with OTHER.connect(broker) as c:
                    got = case.act(c, ctx)
                assert got == refused, (OTHER.name, held, E(got).name, E(refused).name)
            with who.connect(broker) as c:
                got = case.act(c, ctx)
            assert got == expected, (held, E(got).name, E(expected).name)
    finally:
        set_acls(broker, [])


def test_every_family_is_in_the_matrix() -> None:
    families = {c.family for c in CASES}
    assert families == {
        "produce",
        "fetch",
        "metadata",
        "admin",
        "groups",
        "consumer-groups",
        "share-groups",
        "share-admin",
        "acl-admin",
        "scram-admin",
    }


def test_topic_ids_are_answered_without_their_names(broker) -> None:
    """Metadata and DeleteTopics by id: an id the caller may not describe is refused with the id
    and no name (Kafka treats ids as no secret, names as one); an unknown id stays UNKNOWN_TOPIC_ID."""
    who = PRINCIPALS[0]
    set_acls(broker, everything(who.name))
    try:
        with who.connect(broker) as c:
            assert create(c, "by-id").error_code == 0
            M = req("Metadata")
            tid = c.call("Metadata", 12, topics=[M.MetadataRequestTopic(name="by-id")]).topics[0].topic_id
    finally:
        set_acls(broker, [])
    D = req("DeleteTopics")
    with who.connect(broker) as c:
        md = c.call("Metadata", 12, topics=[M.MetadataRequestTopic(name=None, topic_id=tid)]).topics[0]
        assert (md.error_code, md.name, md.topic_id) == (E.TOPIC_AUTHORIZATION_FAILED, None, tid)
        unknown = uuid.uuid4()
        md = c.call("Metadata", 12, topics=[M.MetadataRequestTopic(name=None, topic_id=unknown)]).topics[0]
        assert md.error_code == E.UNKNOWN_TOPIC_ID
        r = c.call("DeleteTopics", 6, topics=[D.DeleteTopicState(name=None, topic_id=tid)], timeout_ms=5000)
        assert (r.responses[0].error_code, r.responses[0].name) == (E.TOPIC_AUTHORIZATION_FAILED, None)
        set_acls(broker, [grant(who.name, Rt.TOPIC, "by-id", Op.DESCRIBE)])
        r = c.call("DeleteTopics", 6, topics=[D.DeleteTopicState(name=None, topic_id=tid)], timeout_ms=5000)
        assert (r.responses[0].error_code, r.responses[0].name) == (E.TOPIC_AUTHORIZATION_FAILED, "by-id")
        set_acls(broker, [grant(who.name, Rt.TOPIC, "by-id", Op.DELETE)])
        r = c.call("DeleteTopics", 6, topics=[D.DeleteTopicState(name=None, topic_id=tid)], timeout_ms=5000)
        assert r.responses[0].error_code == 0
    set_acls(broker, [])


def test_metadata_lists_only_what_may_be_described(broker) -> None:
    who = PRINCIPALS[0]
    set_acls(broker, everything(who.name))
    try:
        with who.connect(broker) as c:
            for t in ("seen-1", "seen-2", "unseen"):
                assert create(c, t).error_code == 0
    finally:
        set_acls(broker, [])
    set_acls(broker, [grant(who.name, Rt.TOPIC, "seen-", Op.READ, pt=Pt.PREFIXED)])
    try:
        with who.connect(broker) as c:
            names = {t.name for t in c.call("Metadata", 12, topics=None, allow_auto_topic_creation=False).topics}
        assert names == {"seen-1", "seen-2"}
    finally:
        set_acls(broker, [])


def test_share_acknowledge_checks_the_group_and_each_topic(broker) -> None:
    """ShareAcknowledge (KIP-932): READ on the group, then READ on each topic acknowledged; a
    topic the caller lost READ on is answered TOPIC_AUTHORIZATION_FAILED and not acknowledged."""
    from tests.support.share_wire import acknowledge, batch

    who = PRINCIPALS[0]
    ctx = _prepare(broker, who, Case("share-groups", share_fetch, (), setup="share"), 900)
    member = uuid.uuid4().hex[:22]
    g_read, t_read = grant(who.name, G, ctx.group, Op.READ), grant(who.name, T, ctx.topic, Op.READ)
    try:
        set_acls(broker, [g_read, t_read])
        with who.connect(broker) as c:
            r = fetch(c, ctx.group, member, 0, [(ctx.topic_id, 0)])
            p = r.responses[0].partitions[0]
            assert (r.error_code, p.error_code) == (0, 0) and p.acquired_records
            first, last = p.acquired_records[0].first_offset, p.acquired_records[0].last_offset
            set_acls(broker, [g_read])
            r = acknowledge(c, ctx.group, member, 1, ctx.topic_id, 0, batch(first, last, 1))
            assert r.error_code == 0
            assert r.responses[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
            set_acls(broker, [])
            r = acknowledge(c, ctx.group, member, 2, ctx.topic_id, 0, batch(first, last, 1))
            assert r.error_code == E.GROUP_AUTHORIZATION_FAILED
            set_acls(broker, [g_read, t_read])
            r = acknowledge(c, ctx.group, member, 2, ctx.topic_id, 0, batch(first, last, 1))
            assert (r.error_code, r.responses[0].partitions[0].error_code) == (0, 0)
    finally:
        set_acls(broker, [])
