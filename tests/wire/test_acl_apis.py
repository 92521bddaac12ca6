"""CreateAcls, DescribeAcls and DeleteAcls over real sockets, and the ACLs' durability.

Kafka's answers: SECURITY_DISABLED with no authorizer; CLUSTER_AUTHORIZATION_FAILED
without ALTER (create, delete) or DESCRIBE (describe) on the cluster;
INVALID_REQUEST for a malformed binding (per creation) or filter. The ACLs
survive a clean restart and a kill -9 (answered only once durable). On
PLAINTEXT every connection is User:ANONYMOUS: ``super.users=User:ANONYMOUS`` on a
first start lets it set the ACLs up, a restart without it proves they were
kept and are enforced.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding as CkBinding
from confluent_kafka.admin import AclBindingFilter as CkFilter
from confluent_kafka.admin import AclOperation as CkOp
from confluent_kafka.admin import AclPermissionType as CkPerm
from confluent_kafka.admin import AdminClient, ResourcePatternType, ResourceType

from shoal.protocol.constants import AclOperation, AclPatternType, AclPermissionType, AclResourceType
from shoal.protocol.errors import ErrorCode
from shoal.testing import EmbeddedBroker
from tests.support.brokers import BrokerProcess, RawClient

STANDARD = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANY_FILTER = {
    "resource_type_filter": AclResourceType.ANY,
    "resource_name_filter": None,
    "pattern_type_filter": AclPatternType.ANY,
    "principal_filter": None,
    "host_filter": None,
    "operation": AclOperation.ANY,
    "permission_type": AclPermissionType.ANY,
}


def _creation(req_cls, rt, name, op, perm=AclPermissionType.ALLOW, pt=AclPatternType.LITERAL, who="User:ANONYMOUS"):
    return req_cls.AclCreation(
        resource_type=rt,
        resource_name=name,
        resource_pattern_type=pt,
        principal=who,
        host="*",
        operation=op,
        permission_type=perm,
    )


def _describe_all(c: RawClient, version: int = 3):
    return c.call("DescribeAcls", version, **ANY_FILTER)


def _listed(resp) -> set[tuple]:
    return {
        (r.resource_type, r.resource_name, r.pattern_type, a.principal, a.operation, a.permission_type)
        for r in resp.resources
        for a in r.acls
    }


def _eb(tmp_path, **settings) -> EmbeddedBroker:
    return EmbeddedBroker(settings, data_dir=tmp_path / "d")


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(tmp_path) -> None:
    from shoal.protocol import messages

    with _eb(tmp_path) as eb, RawClient(eb.port) as c:
        versions = {k.api_key: (k.min_version, k.max_version) for k in c.call("ApiVersions", 3).api_keys}
        # v0 too, as Kafka 3.9 (Kafka 4 starts at v1, KIP-896; tests/wire/test_legacy_acl_golden.py)
        assert versions[29] == versions[30] == versions[31] == (0, 3)
        cls = messages.CreateAclsRequest
        r = c.call("CreateAcls", 3, creations=[_creation(cls, AclResourceType.TOPIC, "t", AclOperation.READ)])
        assert [x.error_code for x in r.results] == [ErrorCode.SECURITY_DISABLED]
        assert _describe_all(c).error_code == ErrorCode.SECURITY_DISABLED
        r = c.call("DeleteAcls", 2, filters=[messages.DeleteAclsRequest.DeleteAclsFilter(**ANY_FILTER)])
        assert [x.error_code for x in r.filter_results] == [ErrorCode.SECURITY_DISABLED]


def test_cluster_operations_gate_the_acl_apis(tmp_path) -> None:
    from shoal.protocol import messages

    with _eb(tmp_path, **{"authorizer.class.name": STANDARD.split("=", 1)[1]}) as eb, RawClient(eb.port) as c:
        cls = messages.CreateAclsRequest
        r = c.call("CreateAcls", 1, creations=[_creation(cls, AclResourceType.TOPIC, "t", AclOperation.READ)])
        assert [x.error_code for x in r.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
        assert _describe_all(c, 1).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # DESCRIBE on the cluster opens DescribeAcls but not CreateAcls
        from shoal.broker.security.acl import CLUSTER_NAME, AclBinding

        grant = AclBinding(
            AclResourceType.CLUSTER,
            CLUSTER_NAME,
            AclPatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        )
        eb.call(lambda: eb.broker.authorizer.add([grant]))
        d = _describe_all(c, 1)
        assert d.error_code == 0 and len(_listed(d)) == 1
        r = c.call("CreateAcls", 2, creations=[_creation(cls, AclResourceType.TOPIC, "t", AclOperation.READ)])
        assert [x.error_code for x in r.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]


def test_create_describe_delete_with_kafkas_validation(tmp_path) -> None:
    from shoal.protocol import messages

    cls = messages.CreateAclsRequest
    settings = {"authorizer.class.name": STANDARD.split("=", 1)[1], "super.users": "User:ANONYMOUS"}
    with _eb(tmp_path, **settings) as eb, RawClient(eb.port) as c:
        r = c.call(
            "CreateAcls",
            3,
            creations=[
                _creation(cls, AclResourceType.TOPIC, "orders", AclOperation.READ, who="User:alice"),
                _creation(cls, AclResourceType.TOPIC, "ord", AclOperation.WRITE, pt=AclPatternType.PREFIXED),
                _creation(cls, AclResourceType.GROUP, "*", AclOperation.ALL, perm=AclPermissionType.DENY),
                _creation(cls, AclResourceType.ANY, "x", AclOperation.READ),  # resource type ANY
                _creation(cls, AclResourceType.TOPIC, "x", AclOperation.ANY),  # operation ANY
                _creation(cls, AclResourceType.TOPIC, "x", AclOperation.READ, pt=AclPatternType.MATCH),
                _creation(cls, AclResourceType.CLUSTER, "not-the-cluster", AclOperation.ALTER),
                _creation(cls, AclResourceType.TOPIC, "", AclOperation.READ),
                _creation(cls, AclResourceType.TOPIC, "x", AclOperation.READ, who="nobody"),
            ],
        )
        codes = [x.error_code for x in r.results]
        assert codes[:3] == [0, 0, 0]
        assert codes[3:] == [ErrorCode.INVALID_REQUEST] * 6
        assert all(x.error_message for x in r.results[3:])
        assert len(_listed(_describe_all(c))) == 3
        # MATCH: every pattern that applies to topic "orders"
        match = dict(ANY_FILTER, resource_type_filter=AclResourceType.TOPIC, resource_name_filter="orders")
        match["pattern_type_filter"] = AclPatternType.MATCH
        d = c.call("DescribeAcls", 3, **match)
        assert {(x[1], x[2]) for x in _listed(d)} == {
            ("orders", AclPatternType.LITERAL),
            ("ord", AclPatternType.PREFIXED),
        }
        bad = dict(ANY_FILTER, pattern_type_filter=AclPatternType.UNKNOWN)
        assert c.call("DescribeAcls", 3, **bad).error_code == ErrorCode.INVALID_REQUEST
        flt = messages.DeleteAclsRequest.DeleteAclsFilter
        r = c.call(
            "DeleteAcls",
            3,
            filters=[
                flt(**dict(ANY_FILTER, principal_filter="User:alice")),
                flt(**dict(ANY_FILTER, operation=AclOperation.UNKNOWN)),
            ],
        )
        assert r.filter_results[0].error_code == 0
        assert [(m.resource_name, m.principal) for m in r.filter_results[0].matching_acls] == [("orders", "User:alice")]
        assert r.filter_results[1].error_code == ErrorCode.INVALID_REQUEST
        assert len(_listed(_describe_all(c))) == 2
        # adding the same binding twice keeps one
        c.call("CreateAcls", 3, creations=[_creation(cls, AclResourceType.TOPIC, "ord", AclOperation.WRITE, pt=4)])
        assert len(_listed(_describe_all(c))) == 2


def test_another_authorizer_class_is_refused_at_start(tmp_path) -> None:
    p = BrokerProcess(tmp_path / "d", ["authorizer.class.name=kafka.security.authorizer.AclAuthorizer"])
    with pytest.raises(RuntimeError) as e:
        p.start(timeout=30)
    assert "org.apache.kafka.metadata.authorizer.StandardAuthorizer" in str(e.value)


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "kill-9"])
def test_acls_survive_a_restart(tmp_path, crash: bool) -> None:
    """Set up through librdkafka's AdminClient while User:ANONYMOUS is super, restart without it:
    what it granted (DESCRIBE on the cluster) is kept and enforced, and what it did not (ALTER)
    is refused."""
    data = tmp_path / "d"
    bindings = [
        CkBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                  CkOp.DESCRIBE, CkPerm.ALLOW),
        CkBinding(ResourceType.TOPIC, "pay-", ResourcePatternType.PREFIXED, "User:ANONYMOUS", "*",
                  CkOp.WRITE, CkPerm.ALLOW),
        CkBinding(ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:*", "10.1.1.1",
                  CkOp.READ, CkPerm.DENY),
    ]  # fmt: skip
    p = BrokerProcess(data, [STANDARD, "super.users=User:ANONYMOUS"]).start()
    try:
        a = _admin(p.bootstrap)
        for f in a.create_acls(bindings, request_timeout=10).values():
            assert f.result() is None
        every = CkFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, CkOp.ANY, CkPerm.ANY)
        before = sorted(map(str, a.describe_acls(every, request_timeout=10).result()))
        assert len(before) == 3
    finally:
        p.kill() if crash else p.stop()
    p = BrokerProcess(data, [STANDARD], port=p.port).start()
    try:
        a = _admin(p.bootstrap)
        after = sorted(map(str, a.describe_acls(every, request_timeout=10).result()))
        assert after == before
        extra = CkBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:x", "*", CkOp.READ, CkPerm.ALLOW)
        with pytest.raises(KafkaException) as refused:
            a.create_acls([extra], request_timeout=10)[extra].result()
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    finally:
        p.stop()
