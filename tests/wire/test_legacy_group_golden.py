"""Golden bytes for the group and admin request versions of Kafka 3.9 that Kafka 4 removed
(KIP-896), and for the oldest group versions Kafka 4 kept, as Shoal serves them.

Each vector is written by hand, field by field (the comment names the field), from the JSON
specs of Kafka 3.9.0 (apache/kafka, tag 3.9.0-rc3, clients/src/main/resources/common/message),
not produced by our encoder. The oracle that checks the hand-written bytes is named per case:

- ``kio-0.6.5`` (installed; generated from Kafka 4 specs) for the versions Kafka 4 still has:
  JoinGroup v0/v1, SyncGroup/Heartbeat/LeaveGroup v0, DescribeGroups/ListGroups v0,
  FindCoordinator v0, InitProducerId v0. Checked in every run.
- ``kio-0.5.0`` (generated from Kafka 3.x specs) for the versions kio 0.6.5 lacks: OffsetCommit
  v0/v1, OffsetFetch v0, DescribeConfigs v0, CreateTopics v0/v1, DeleteTopics v0. kio 0.5.0
  cannot be installed next to 0.6.5 (same package), so ``test_kio_050_reads_the_legacy_bytes``
  runs it in a child interpreter when ``SHOAL_KIO_OLD`` names a directory holding it
  (``pip install --no-deps --target DIR kio==0.5.0``), and is skipped otherwise.

Every vector is decoded whole, fed to the frame reader one byte at a time, and decoded with
trailing bytes after it (Kafka reads what the version defines). The last test sends the request
vectors, as bytes, to a real broker over a socket and compares its answers with the response
vectors (with the member id, which the broker draws, put in its slot).
"""

from __future__ import annotations

import time

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.frames import decode_response
from tests.support.brokers import RawClient
from tests.support.legacy_golden import (
    MEMBER,
    Case,
    check_request,
    check_response,
    frame,
    header,
    kio_agrees,
    run_old_kio,
    s16,
)

TOPIC_CONFIG = ("CreatableTopicConfig", dict(name="cleanup.policy", value="compact"))
PROTOCOLS = [("JoinGroupRequestProtocol", dict(name="range", metadata=b"\x00\x01"))]
FAR_FUTURE_MS = 4102444800000  # 2100-01-01: a v1 commit time that no retention reaches

# In the order the broker run sends them: each answer below is what that broker gives.
CASES = [
    Case(
        "CreateTopics",
        0,
        "kio-0.5.0",
        dict(
            topics=[
                (
                    "CreatableTopic",
                    dict(name="lt", num_partitions=1, replication_factor=1, assignments=[], configs=[TOPIC_CONFIG]),
                )
            ],
            timeout_ms=5000,
        ),
        (
            header(19, 0),
            "00000001",  # Topics: 1
            "0002 6c74",  # Name "lt"
            "00000001",  # NumPartitions 1
            "0001",  # ReplicationFactor 1
            "00000000",  # Assignments: none
            "00000001",  # Configs: 1
            s16("cleanup.policy"),  # Name
            s16("compact"),  # Value
            "00001388",  # timeoutMs 5000 (no validateOnly before v1)
        ),
        dict(topics=[("CreatableTopicResult", dict(name="lt", error_code=0))]),
        ("00000001", "0002 6c74", "0000"),  # Topics: [Name, ErrorCode]; no throttle, no message in v0
    ),
    Case(
        "CreateTopics",
        1,
        "kio-0.5.0",
        dict(
            topics=[("CreatableTopic", dict(name="lv", num_partitions=2, replication_factor=1))],
            timeout_ms=5000,
            validate_only=True,
        ),
        (
            header(19, 1),
            "00000001 0002 6c76",  # Topics: 1, Name "lv"
            "00000002 0001",  # NumPartitions 2, ReplicationFactor 1
            "00000000 00000000",  # Assignments, Configs: none
            "00001388",  # timeoutMs
            "01",  # validateOnly true: nothing is created
        ),
        dict(topics=[("CreatableTopicResult", dict(name="lv", error_code=0, error_message=None))]),
        ("00000001", "0002 6c76", "0000", "ffff"),  # Name, ErrorCode, ErrorMessage null (v1)
    ),
    Case(
        "DescribeConfigs",
        0,
        "kio-0.5.0",
        dict(
            resources=[
                (
                    "DescribeConfigsResource",
                    dict(resource_type=2, resource_name="lt", configuration_keys=["retention.ms", "cleanup.policy"]),
                )
            ]
        ),
        (
            header(32, 0),
            "00000001",  # Resources: 1
            "02",  # ResourceType TOPIC
            "0002 6c74",  # ResourceName
            "00000002",  # ConfigurationKeys: 2
            s16("retention.ms"),
            s16("cleanup.policy"),
            # no IncludeSynonyms before v1
        ),
        dict(
            throttle_time_ms=0,
            results=[
                (
                    "DescribeConfigsResult",
                    dict(
                        error_code=0,
                        error_message=None,
                        resource_type=2,
                        resource_name="lt",
                        configs=[
                            (
                                "DescribeConfigsResourceResult",
                                dict(name="retention.ms", value="604800000", read_only=False, is_default=True),
                            ),
                            (
                                "DescribeConfigsResourceResult",
                                dict(name="cleanup.policy", value="compact", read_only=False, is_default=False),
                            ),
                        ],
                    ),
                )
            ],
        ),
        (
            "00000000",  # ThrottleTimeMs
            "00000001",  # Results: 1
            "0000 ffff",  # ErrorCode, ErrorMessage null
            "02 0002 6c74",  # ResourceType, ResourceName
            "00000002",  # Configs: 2
            s16("retention.ms"),
            s16("604800000"),
            "00 01 00",  # ReadOnly false, IsDefault true (the broker default), IsSensitive false
            s16("cleanup.policy"),
            s16("compact"),
            "00 00 00",  # IsDefault false: set on the topic
        ),
    ),
    Case(
        "FindCoordinator",
        0,
        "kio-0.6.5",
        dict(key="g0"),
        (header(10, 0), "0002 6730"),  # Key "g0"; no KeyType before v1
        dict(error_code=0, node_id=1, host="127.0.0.1", port=9092),
        # ErrorCode, NodeId, Host, Port (the broker run puts its own port in the last four bytes)
        ("0000", "00000001", s16("127.0.0.1"), "00002384"),
    ),
    Case(
        "OffsetCommit",
        0,
        "kio-0.5.0",
        dict(
            group_id="g0",
            topics=[
                (
                    "OffsetCommitRequestTopic",
                    dict(
                        name="lt",
                        partitions=[
                            (
                                "OffsetCommitRequestPartition",
                                dict(partition_index=0, committed_offset=5, committed_metadata="m"),
                            )
                        ],
                    ),
                )
            ],
        ),
        (
            header(8, 0),
            "0002 6730",  # GroupId "g0"; no generation, no member before v1
            "00000001 0002 6c74",  # Topics: 1, Name "lt"
            "00000001 00000000",  # Partitions: 1, PartitionIndex 0
            "0000000000000005",  # CommittedOffset 5
            "0001 6d",  # CommittedMetadata "m"
        ),
        dict(
            topics=[
                (
                    "OffsetCommitResponseTopic",
                    dict(name="lt", partitions=[("OffsetCommitResponsePartition", dict(partition_index=0))]),
                )
            ]
        ),
        ("00000001 0002 6c74", "00000001 00000000 0000"),  # Topics [Name, Partitions [index, ErrorCode]]
    ),
    Case(
        "OffsetCommit",
        1,
        "kio-0.5.0",
        dict(
            group_id="g1",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                (
                    "OffsetCommitRequestTopic",
                    dict(
                        name="lt",
                        partitions=[
                            (
                                "OffsetCommitRequestPartition",
                                dict(
                                    partition_index=0,
                                    committed_offset=7,
                                    commit_timestamp=FAR_FUTURE_MS,
                                    committed_metadata=None,
                                ),
                            )
                        ],
                    ),
                )
            ],
        ),
        (
            header(8, 1),
            "0002 6731",  # GroupId "g1"
            "ffffffff",  # GenerationIdOrMemberEpoch -1: a commit outside group management
            "0000",  # MemberId ""
            "00000001 0002 6c74",  # Topics: 1, Name
            "00000001 00000000",  # Partitions: 1, PartitionIndex 0
            "0000000000000007",  # CommittedOffset 7
            "000003bb2cc3d800",  # CommitTimestamp (v1 only)
            "ffff",  # CommittedMetadata null
        ),
        dict(
            topics=[
                (
                    "OffsetCommitResponseTopic",
                    dict(name="lt", partitions=[("OffsetCommitResponsePartition", dict(partition_index=0))]),
                )
            ]
        ),
        ("00000001 0002 6c74", "00000001 00000000 0000"),
    ),
    Case(
        "OffsetFetch",
        0,
        "kio-0.5.0",
        dict(group_id="g0", topics=[("OffsetFetchRequestTopic", dict(name="lt", partition_indexes=[0, 1]))]),
        (
            header(9, 0),
            "0002 6730",  # GroupId "g0"
            "00000001 0002 6c74",  # Topics: 1 (never null before v2), Name
            "00000002 00000000 00000001",  # PartitionIndexes [0, 1]
        ),
        dict(
            topics=[
                (
                    "OffsetFetchResponseTopic",
                    dict(
                        name="lt",
                        partitions=[
                            (
                                "OffsetFetchResponsePartition",
                                dict(partition_index=0, committed_offset=5, metadata="", error_code=0),
                            ),
                            (
                                "OffsetFetchResponsePartition",
                                dict(partition_index=1, committed_offset=-1, metadata="", error_code=0),
                            ),
                        ],
                    ),
                )
            ]
        ),
        (
            "00000001 0002 6c74",  # Topics: 1, Name
            "00000002",  # Partitions: 2
            "00000000 0000000000000005 0000 0000",  # index 0, offset 5, Metadata "" (as v0 had it), ErrorCode
            "00000001 ffffffffffffffff 0000 0000",  # index 1: no such partition, no offset, no error
        ),
    ),
    Case(
        "JoinGroup",
        0,
        "kio-0.6.5",
        dict(group_id="g2", session_timeout_ms=6000, member_id="", protocol_type="consumer", protocols=PROTOCOLS),
        (
            header(11, 0),
            "0002 6732",  # GroupId "g2"
            "00001770",  # SessionTimeoutMs 6000 (also the rebalance timeout in v0)
            "0000",  # MemberId "": v0 joins at once (no MEMBER_ID_REQUIRED round before v4)
            s16("consumer"),  # ProtocolType
            "00000001",  # Protocols: 1
            s16("range"),
            "00000002 0001",  # Metadata
        ),
        dict(
            error_code=0,
            generation_id=1,
            protocol_name="range",
            leader=MEMBER,
            member_id=MEMBER,
            members=[("JoinGroupResponseMember", dict(member_id=MEMBER, metadata=b"\x00\x01"))],
        ),
        (
            "0000",  # ErrorCode (no throttle before v2)
            "00000001",  # GenerationId 1
            s16("range"),  # ProtocolName
            "{member}",  # Leader
            "{member}",  # MemberId
            "00000001 {member} 00000002 0001",  # Members: [MemberId, Metadata]
        ),
    ),
    Case(
        "JoinGroup",
        1,
        "kio-0.6.5",
        dict(
            group_id="g3",
            session_timeout_ms=6000,
            rebalance_timeout_ms=3000,
            member_id="",
            protocol_type="consumer",
            protocols=PROTOCOLS,
        ),
        (
            header(11, 1),
            "0002 6733",  # GroupId "g3"
            "00001770",  # SessionTimeoutMs 6000
            "00000bb8",  # RebalanceTimeoutMs 3000 (v1+)
            "0000",  # MemberId ""
            s16("consumer"),
            "00000001",
            s16("range"),
            "00000002 0001",
        ),
        dict(
            error_code=0,
            generation_id=1,
            protocol_name="range",
            leader=MEMBER,
            member_id=MEMBER,
            members=[("JoinGroupResponseMember", dict(member_id=MEMBER, metadata=b"\x00\x01"))],
        ),
        ("0000", "00000001", s16("range"), "{member}", "{member}", "00000001 {member} 00000002 0001"),  # as v0
    ),
    Case(
        "SyncGroup",
        0,
        "kio-0.6.5",
        dict(
            group_id="g2",
            generation_id=1,
            member_id=MEMBER,
            assignments=[("SyncGroupRequestAssignment", dict(member_id=MEMBER, assignment=b"\x00\x02"))],
        ),
        (
            header(14, 0),
            "0002 6732",  # GroupId
            "00000001",  # GenerationId
            "{member}",  # MemberId
            "00000001 {member} 00000002 0002",  # Assignments: [MemberId, Assignment]
        ),
        dict(error_code=0, assignment=b"\x00\x02"),
        ("0000", "00000002 0002"),  # ErrorCode, Assignment (no throttle before v1)
    ),
    Case(
        "Heartbeat",
        0,
        "kio-0.6.5",
        dict(group_id="g2", generation_id=1, member_id=MEMBER),
        (header(12, 0), "0002 6732", "00000001", "{member}"),  # GroupId, GenerationId, MemberId
        dict(error_code=0),
        ("0000",),  # ErrorCode
    ),
    Case(
        "DescribeGroups",
        0,
        "kio-0.6.5",
        dict(groups=["g2"]),
        (header(15, 0), "00000001 0002 6732"),  # Groups ["g2"]
        dict(
            groups=[
                (
                    "DescribedGroup",
                    dict(
                        error_code=0,
                        group_id="g2",
                        group_state="Stable",
                        protocol_type="consumer",
                        protocol_data="range",
                        members=[
                            (
                                "DescribedGroupMember",
                                dict(
                                    member_id=MEMBER,
                                    client_id="shoal",
                                    client_host="/127.0.0.1",
                                    member_metadata=b"\x00\x01",
                                    member_assignment=b"\x00\x02",
                                ),
                            )
                        ],
                    ),
                )
            ]
        ),
        (
            "00000001",  # Groups: 1 (no throttle before v1)
            "0000 0002 6732",  # ErrorCode, GroupId
            s16("Stable"),  # GroupState
            s16("consumer"),  # ProtocolType
            s16("range"),  # ProtocolData
            "00000001 {member}",  # Members: 1, MemberId (no instance id before v4)
            s16("shoal"),  # ClientId
            s16("/127.0.0.1"),  # ClientHost
            "00000002 0001",  # MemberMetadata
            "00000002 0002",  # MemberAssignment
        ),
    ),
    Case(
        "LeaveGroup",
        0,
        "kio-0.6.5",
        dict(group_id="g2", member_id=MEMBER),
        (header(13, 0), "0002 6732", "{member}"),  # GroupId, MemberId (one member before v3)
        dict(error_code=0),
        ("0000",),
    ),
    Case(
        "ListGroups",
        0,
        "kio-0.6.5",
        dict(),
        (header(16, 0),),  # no fields
        dict(error_code=0, groups=[("ListedGroup", dict(group_id="g2", protocol_type="consumer"))]),
        ("0000", "00000001", "0002 6732", s16("consumer")),  # ErrorCode, Groups [GroupId, ProtocolType]
    ),
    Case(
        "InitProducerId",
        0,
        "kio-0.6.5",
        dict(transactional_id=None, transaction_timeout_ms=60000),
        (header(22, 0), "ffff", "0000ea60"),  # TransactionalId null, TransactionTimeoutMs 60000
        dict(throttle_time_ms=0, error_code=0, producer_id=0, producer_epoch=0),
        ("00000000 0000", "0000000000000000 0000"),  # ThrottleTimeMs, ErrorCode, ProducerId, ProducerEpoch
    ),
    Case(
        "DeleteTopics",
        0,
        "kio-0.5.0",
        dict(topic_names=["lt", "lv"], timeout_ms=5000),
        (header(20, 0), "00000002 0002 6c74 0002 6c76", "00001388"),  # TopicNames, TimeoutMs
        dict(
            responses=[
                ("DeletableTopicResult", dict(name="lt", error_code=0)),
                ("DeletableTopicResult", dict(name="lv", error_code=3)),  # validateOnly created nothing
            ]
        ),
        ("00000002", "0002 6c74 0000", "0002 6c76 0003"),  # Responses [Name, ErrorCode] (no throttle in v0)
    ),
]
IDS = [c.id for c in CASES]


def test_every_case_is_a_served_version_kafka_39_had() -> None:
    """The vectors cover each (api, version) of the brief, and each is one the codec serves."""
    wanted = {
        ("OffsetCommit", 0),
        ("OffsetCommit", 1),
        ("OffsetFetch", 0),
        ("JoinGroup", 0),
        ("JoinGroup", 1),
        ("SyncGroup", 0),
        ("Heartbeat", 0),
        ("LeaveGroup", 0),
        ("DescribeConfigs", 0),
        ("CreateTopics", 0),
        ("CreateTopics", 1),
        ("DeleteTopics", 0),
        ("DescribeGroups", 0),
        ("ListGroups", 0),
        ("FindCoordinator", 0),
        ("InitProducerId", 0),
    }
    have = {(c.api, c.version) for c in CASES}
    assert wanted <= have
    for api, version in wanted:
        assert api_by_name(api).min_version <= version


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_request_golden(case: Case) -> None:
    check_request(case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_response_golden(case: Case) -> None:
    check_response(case)


@pytest.mark.parametrize("case", [c for c in CASES if c.oracle == "kio-0.6.5"], ids=lambda c: c.id)
def test_kio_065_reads_the_bytes(case: Case) -> None:
    kio_agrees(case)


def test_kio_050_reads_the_legacy_bytes() -> None:
    """kio 0.5.0, generated from Kafka 3.x specs, has the versions Kafka 4 removed."""
    assert run_old_kio(__name__) == sum(c.oracle == "kio-0.5.0" for c in CASES)


def test_broker_answers_the_golden_requests(broker_factory) -> None:
    """The request vectors, as bytes on a socket, get the response vectors back from a broker."""
    b = broker_factory("group.initial.rebalance.delay.ms=0")
    b.start()
    by_id = {c.id: c for c in CASES}
    with RawClient(b.port) as c:

        def exchange(case: Case, member: str = MEMBER) -> bytes:
            c.sock.sendall(frame(case.request_bytes(member)))
            return c.recv_frame()

        _until(lambda: c.call("FindCoordinator", 0, key="g0").error_code == 0)
        for cid in ("CreateTopics-v0", "CreateTopics-v1", "DescribeConfigs-v0"):
            assert exchange(by_id[cid]) == by_id[cid].response_bytes(), cid
        got = exchange(by_id["FindCoordinator-v0"])
        assert got == by_id["FindCoordinator-v0"].response_bytes()[:-4] + b.port.to_bytes(4, "big")
        for cid in ("OffsetCommit-v0", "OffsetCommit-v1"):
            _until(lambda cid=cid: exchange(by_id[cid])[-2:] == b"\x00\x00")  # the group's partition may still load
            assert exchange(by_id[cid]) == by_id[cid].response_bytes(), cid
        assert exchange(by_id["OffsetFetch-v0"]) == by_id["OffsetFetch-v0"].response_bytes()

        got = exchange(by_id["JoinGroup-v0"])
        _, joined = decode_response(memoryview(got), api_by_name("JoinGroup").key, 0)
        member = joined.member_id
        assert member and got == by_id["JoinGroup-v0"].response_bytes(member)
        for cid in ("SyncGroup-v0", "Heartbeat-v0", "DescribeGroups-v0"):
            assert exchange(by_id[cid], member) == by_id[cid].response_bytes(member), cid
        assert exchange(by_id["LeaveGroup-v0"], member) == by_id["LeaveGroup-v0"].response_bytes()
        _, listed = decode_response(memoryview(exchange(by_id["ListGroups-v0"])), api_by_name("ListGroups").key, 0)
        # g0 and g1 hold offsets only (protocol type ""), g2 is the consumer group, now empty
        assert listed.error_code == 0
        assert sorted((g.group_id, g.protocol_type) for g in listed.groups) == [
            ("g0", ""),
            ("g1", ""),
            ("g2", "consumer"),
        ]
        assert exchange(by_id["InitProducerId-v0"]) == by_id["InitProducerId-v0"].response_bytes()
        assert exchange(by_id["DeleteTopics-v0"]) == by_id["DeleteTopics-v0"].response_bytes()


def _until(cond, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
