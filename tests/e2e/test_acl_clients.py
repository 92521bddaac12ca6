"""ACLs with outside clients and the bundled ones: DENY beats ALLOW, the super user, PREFIXED
patterns, allow.everyone.if.no.acl.found, kafka-python's and librdkafka's ACL admin calls,
AsyncAdmin and ``shoal acls``, and the authorized-operations fields.

Every connection here is User:ANONYMOUS (PLAINTEXT); the ACLs name it or User:*.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from shoal.broker.security.acl import CLUSTER_NAME, AclBinding
from shoal.client.admin.acls import AclBinding as ClientBinding
from shoal.client.admin.acls import AclBindingFilter as ClientFilter
from shoal.client.admin.client import AsyncAdmin
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AclOperation as Op
from shoal.protocol.constants import AclPatternType as Pt
from shoal.protocol.constants import AclPermissionType as Perm
from shoal.protocol.constants import AclResourceType as Rt
from shoal.protocol.errors import ErrorCode
from shoal.testing import EmbeddedBroker
from tests.support.brokers import RawClient
from tests.support.cli import run_cli

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ME = "User:ANONYMOUS"


def acl(rt, name, op, perm=Perm.ALLOW, pt=Pt.LITERAL, who=ME) -> AclBinding:
    return AclBinding(rt, name, pt, who, "*", op, perm)


def _broker(tmp_path, **settings) -> EmbeddedBroker:
    return EmbeddedBroker({"authorizer.class.name": STANDARD, **settings}, data_dir=tmp_path / "d")


def _set(eb: EmbeddedBroker, bindings: list[AclBinding]) -> None:
    eb.call(lambda: eb.broker.authorizer.replace_all(bindings))


def _topics(eb: EmbeddedBroker, *names: str) -> None:
    """Create topics while the caller may do anything (EmbeddedBroker creates them over the wire)."""
    _set(eb, [acl(Rt.CLUSTER, CLUSTER_NAME, Op.ALL), acl(Rt.TOPIC, "*", Op.ALL)])
    for t in names:
        eb.create_topic(t)
    _set(eb, [])


def _produce(bootstrap: str, topic: str) -> int:
    """Produce one record with librdkafka; the delivery's error code (0 when stored)."""
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000, "allow.auto.create.topics": False})
    out: list[int] = []
    p.produce(topic, b"v", on_delivery=lambda err, msg: out.append(err.code() if err else 0))
    p.flush(10)
    return out[0] if out else -999


def _consume_one(bootstrap: str, topic: str, group: str) -> bytes:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    try:
        for _ in range(40):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                c.commit(m, asynchronous=False)
                return m.value()
            if m is not None and m.error().code() != KafkaError._PARTITION_EOF:
                raise AssertionError(m.error())
        raise AssertionError("nothing consumed")
    finally:
        c.close()


def test_deny_beats_allow_for_librdkafka(tmp_path) -> None:
    with _broker(tmp_path) as eb:
        _topics(eb, "open", "locked")
        _set(eb, [acl(Rt.TOPIC, "*", Op.ALL), acl(Rt.TOPIC, "locked", Op.WRITE, Perm.DENY, who="User:*")])
        assert _produce(eb.bootstrap_servers, "open") == 0
        assert _produce(eb.bootstrap_servers, "locked") == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_prefixed_acls_for_a_producer_and_a_consumer_group(tmp_path) -> None:
    with _broker(tmp_path) as eb:
        _topics(eb, "pay-eu", "other")
        _set(
            eb,
            [
                acl(Rt.TOPIC, "pay-", Op.WRITE, pt=Pt.PREFIXED),
                acl(Rt.TOPIC, "pay-", Op.READ, pt=Pt.PREFIXED),
                acl(Rt.GROUP, "billing-", Op.READ, pt=Pt.PREFIXED),
            ],
        )
        assert _produce(eb.bootstrap_servers, "pay-eu") == 0
        assert _produce(eb.bootstrap_servers, "other") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert _consume_one(eb.bootstrap_servers, "pay-eu", "billing-1") == b"v"
        with pytest.raises(AssertionError, match=r"GROUP_AUTHORIZATION_FAILED|[Gg]roup authorization"):
            _consume_one(eb.bootstrap_servers, "pay-eu", "reporting")


def test_the_super_user_is_allowed_everything_even_when_denied(tmp_path) -> None:
    with _broker(tmp_path, **{"super.users": "User:admin;" + ME}) as eb:
        eb.create_topic("t")
        _set(eb, [acl(Rt.TOPIC, "*", Op.ALL, Perm.DENY, who="User:*")])
        assert _produce(eb.bootstrap_servers, "t") == 0
        assert _consume_one(eb.bootstrap_servers, "t", "g") == b"v"


def test_allow_everyone_if_no_acl_found(tmp_path) -> None:
    with _broker(tmp_path, **{"allow.everyone.if.no.acl.found": "true"}) as eb:
        _topics(eb, "free", "guarded")
        _set(eb, [acl(Rt.TOPIC, "guarded", Op.WRITE, who="User:bob")])
        assert _produce(eb.bootstrap_servers, "free") == 0
        assert _produce(eb.bootstrap_servers, "guarded") == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_kafka_python_admin_acl_calls(tmp_path) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    with _broker(tmp_path, **{"super.users": ME}) as eb:
        admin = KafkaAdminClient(bootstrap_servers=eb.bootstrap_servers)
        try:
            pattern = ResourcePattern(ResourceType.TOPIC, "orders", ACLResourcePatternType.PREFIXED)
            a = ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
            assert admin.create_acls([a])["succeeded"] == [a]
            flt = ACLFilter(
                None,
                None,
                ACLOperation.ANY,
                ACLPermissionType.ANY,
                ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
            )
            found, error = admin.describe_acls(flt)
            assert [(x.principal, x.resource_pattern.resource_name) for x in found] == [("User:alice", "orders")]
            ((_, deleted, error),) = admin.delete_acls([flt])
            assert len(deleted) == 1 and error.errno == 0
            assert admin.describe_acls(flt)[0] == []
        finally:
            admin.close()


def test_async_admin_and_the_cli(tmp_path) -> None:
    with _broker(tmp_path, **{"super.users": ME}) as eb:
        bs = eb.bootstrap_servers

        async def admin_calls() -> None:
            async with AsyncAdmin(bootstrap_servers=bs) as admin:
                b = ClientBinding("GROUP", "app-", "PREFIXED", "User:app", "*", "READ", "ALLOW")
                bad = ClientBinding("TOPIC", "", "LITERAL", "User:app", "*", "READ", "ALLOW")
                res = await admin.create_acls([b, bad])
                assert res[b] is None
                assert res[bad].code == ErrorCode.INVALID_REQUEST
                assert await admin.describe_acls(ClientFilter(Rt.GROUP, "app-1", Pt.MATCH)) == [b]
                assert await admin.describe_acls(ClientFilter(Rt.TOPIC)) == []
                gone = await admin.delete_acls([ClientFilter(principal="User:app")])
                assert list(gone.values()) == [[b]]

        asyncio.run(admin_calls())

        def shoal(*args: str) -> subprocess.CompletedProcess:
            # main(argv) in this process; the next test runs ``python -m shoal.client.cli`` for real
            rc, out, err = run_cli("acls", *args, "--bootstrap-server", bs)
            return subprocess.CompletedProcess(args, rc, out, err)

        r = shoal("add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
                  "--topic", "orders")  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("Added ACL") == 2
        r = shoal("add", "--deny-principal", "User:mallory", "--operation", "ClusterAction", "--cluster")
        assert r.returncode == 0, r.stderr
        r = shoal("list", "--topic", "orders", "--output", "json")
        assert r.returncode == 0, r.stderr
        listed = json.loads(r.stdout)["acls"]
        assert sorted(x["operation"] for x in listed) == ["DESCRIBE", "READ"]
        r = shoal("list")
        assert "ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)" in r.stdout
        assert "principal=User:mallory" in r.stdout and "permissionType=DENY" in r.stdout
        r = shoal("remove", "--allow-principal", "User:alice", "--topic", "orders")
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("Removed ACL") == 2
        assert json.loads(shoal("list", "--output", "json").stdout)["acls"] == [
            {
                "resource_type": "CLUSTER",
                "name": CLUSTER_NAME,
                "pattern_type": "LITERAL",
                "principal": "User:mallory",
                "host": "*",
                "operation": "CLUSTER_ACTION",
                "permission": "DENY",
            }
        ]
        r = shoal("add", "--topic", "x")
        assert r.returncode == 2 and "principal" in r.stderr


def test_the_cli_on_a_broker_without_authorizer_says_security_disabled(tmp_path) -> None:
    with EmbeddedBroker(data_dir=tmp_path / "d") as eb:
        cmd = [sys.executable, "-m", "shoal.client.cli", "acls", "list", "--bootstrap-server", eb.bootstrap_servers]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "SECURITY_DISABLED" in r.stderr


def test_authorized_operations_fields(tmp_path) -> None:
    M = api_by_name("Metadata").request_class()
    with _broker(tmp_path) as eb:
        _topics(eb, "t")
        _set(eb, [acl(Rt.TOPIC, "t", Op.READ), acl(Rt.TOPIC, "t", Op.ALTER_CONFIGS), acl(Rt.GROUP, "g", Op.READ)])
        with RawClient(eb.port) as c:
            md = c.call(
                "Metadata", 10, topics=[M.MetadataRequestTopic(name="t")], allow_auto_topic_creation=False,
                include_cluster_authorized_operations=True, include_topic_authorized_operations=True,
            )  # fmt: skip
            assert md.topics[0].topic_authorized_operations == sum(
                1 << o for o in (Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)
            )
            assert md.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
            dc = c.call("DescribeCluster", 1, include_cluster_authorized_operations=True, endpoint_type=1)
            assert dc.error_code == 0 and dc.cluster_authorized_operations == 0
            _set(eb, [acl(Rt.CLUSTER, CLUSTER_NAME, Op.DESCRIBE), acl(Rt.GROUP, "g", Op.READ)])
            dc = c.call("DescribeCluster", 1, include_cluster_authorized_operations=True, endpoint_type=1)
            assert dc.cluster_authorized_operations == 1 << Op.DESCRIBE
            g = c.call("DescribeGroups", 5, groups=["g"], include_authorized_operations=True).groups[0]
            assert g.error_code == 0 and g.authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
