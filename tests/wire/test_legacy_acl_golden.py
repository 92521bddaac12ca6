"""Golden bytes for CreateAcls, DescribeAcls and DeleteAcls v0, which Kafka 3.9 served and Kafka 4
removed (KIP-896), as Shoal serves them.

v0 has no pattern type: a creation is LITERAL, and a filter matches LITERAL patterns only (the
field's default), so a v0 client neither sees nor deletes PREFIXED bindings. Vectors written by
hand from Kafka 3.9.0's JSON specs (tag 3.9.0-rc3); oracle: kio 0.5.0 (Kafka 3.x specs; kio
0.6.5 has no v0 of these), run when ``SHOAL_KIO_OLD`` names a directory holding it (see
tests/support/legacy_golden.py). Each vector is decoded whole, byte by byte and with trailing
bytes, and the requests go to a real broker (an authorizer, User:ANONYMOUS a super user) whose
answers must be the response vectors.
"""

from __future__ import annotations

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AclOperation, AclPatternType, AclPermissionType, AclResourceType
from tests.support.brokers import RawClient
from tests.support.legacy_golden import (
    Case,
    check_request,
    check_response,
    frame,
    header,
    kio_agrees,
    run_old_kio,
    s16,
)

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
READ_T_BY_ALICE = dict(resource_type=2, resource_name="t", principal="User:alice", host="*", operation=3)
ANY = dict(
    resource_type_filter=1, resource_name_filter=None, principal_filter=None, host_filter=None, operation=1
)  # ANY type, any name, principal and host, ANY operation (permission below)
ANY_HEX = "01 ffff ffff ffff 01 01"  # ResourceTypeFilter ANY, three null filters, Operation ANY, Permission ANY

CASES = [
    Case(
        "CreateAcls",
        0,
        "kio-0.5.0",
        dict(creations=[("AclCreation", dict(**READ_T_BY_ALICE, permission_type=3))]),
        (
            header(30, 0),
            "00000001",  # Creations: 1
            "02",  # ResourceType TOPIC
            s16("t"),  # ResourceName (no pattern type before v1: LITERAL)
            s16("User:alice"),  # Principal
            s16("*"),  # Host
            "03",  # Operation READ
            "03",  # PermissionType ALLOW
        ),
        dict(throttle_time_ms=0, results=[("AclCreationResult", dict(error_code=0, error_message=None))]),
        ("00000000", "00000001 0000 ffff"),  # ThrottleTimeMs, Results [ErrorCode, ErrorMessage null]
    ),
    Case(
        "DescribeAcls",
        0,
        "kio-0.5.0",
        dict(**ANY, permission_type=1),
        (header(29, 0), ANY_HEX),
        dict(
            throttle_time_ms=0,
            error_code=0,
            error_message=None,
            resources=[
                (
                    "DescribeAclsResource",
                    dict(
                        resource_type=2,
                        resource_name="t",
                        acls=[
                            (
                                "AclDescription",
                                dict(principal="User:alice", host="*", operation=3, permission_type=3),
                            )
                        ],
                    ),
                )
            ],
        ),
        (
            "00000000",  # ThrottleTimeMs
            "0000 ffff",  # ErrorCode, ErrorMessage null
            "00000001",  # Resources: 1 (the PREFIXED binding is not LITERAL: not matched)
            "02",  # ResourceType
            s16("t"),  # ResourceName (no pattern type before v1)
            "00000001",  # Acls: 1
            s16("User:alice"),
            s16("*"),
            "03 03",  # Operation READ, PermissionType ALLOW
        ),
    ),
    Case(
        "DeleteAcls",
        0,
        "kio-0.5.0",
        dict(filters=[("DeleteAclsFilter", dict(**ANY, permission_type=1))]),
        (header(31, 0), "00000001", ANY_HEX),  # Filters: 1
        dict(
            throttle_time_ms=0,
            filter_results=[
                (
                    "DeleteAclsFilterResult",
                    dict(
                        error_code=0,
                        error_message=None,
                        matching_acls=[
                            (
                                "DeleteAclsMatchingAcl",
                                dict(error_code=0, error_message=None, **READ_T_BY_ALICE, permission_type=3),
                            )
                        ],
                    ),
                )
            ],
        ),
        (
            "00000000",  # ThrottleTimeMs
            "00000001 0000 ffff",  # FilterResults: 1, ErrorCode, ErrorMessage null
            "00000001 0000 ffff",  # MatchingAcls: 1, ErrorCode, ErrorMessage null
            "02",  # ResourceType
            s16("t"),  # ResourceName (no pattern type before v1)
            s16("User:alice"),
            s16("*"),
            "03 03",
        ),
    ),
]
IDS = [c.id for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_request_golden(case: Case) -> None:
    check_request(case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_response_golden(case: Case) -> None:
    check_response(case)


def test_kio_050_reads_the_legacy_bytes() -> None:
    assert run_old_kio(__name__) == len(CASES)


def test_kio_065_has_no_v0() -> None:
    """Why the oracle is kio 0.5.0: the installed kio (Kafka 4 specs) starts these APIs at v1."""
    from tests.support import kio_bridge as kb

    for name in ("CreateAclsRequest", "DescribeAclsRequest", "DeleteAclsRequest"):
        assert kb.kio_versions(name)[0] == 1
    with pytest.raises(Exception):  # noqa: B017 - kio raises several types for an unknown version
        kio_agrees(CASES[0])


def test_broker_answers_the_golden_requests(broker_factory) -> None:
    b = broker_factory(f"authorizer.class.name={STANDARD}", "super.users=User:ANONYMOUS")
    b.start()
    with RawClient(b.port) as c:

        def exchange(case: Case) -> bytes:
            c.sock.sendall(frame(case.request_bytes()))
            return c.recv_frame()

        creation = c.call("CreateAcls", 3, creations=[_creation(AclResourceType.TOPIC, "t-", AclPatternType.PREFIXED)])
        assert creation.results[0].error_code == 0
        for case in CASES:  # create (LITERAL), describe and delete see the LITERAL binding only
            assert exchange(case) == case.response_bytes(), case.id
        left = c.call("DescribeAcls", 3, **ANY, pattern_type_filter=AclPatternType.ANY, permission_type=1)
        assert [(r.resource_name, r.pattern_type) for r in left.resources] == [("t-", AclPatternType.PREFIXED)]


def _creation(resource_type: int, name: str, pattern_type: int):
    cls = api_by_name("CreateAcls").request_class()
    return cls.AclCreation(
        resource_type=resource_type,
        resource_name=name,
        resource_pattern_type=pattern_type,
        principal="User:bob",
        host="*",
        operation=AclOperation.WRITE,
        permission_type=AclPermissionType.ALLOW,
    )
