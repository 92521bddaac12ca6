"""ACLs that name real principals, with librdkafka over SASL_PLAINTEXT (SCRAM-SHA-256).

A broker in a child process with StandardAuthorizer, a SASL_PLAINTEXT listener and a
PLAINTEXT one for setup (its User:ANONYMOUS is a super user there, so the test can create
topics and users before any ACL exists; every check below goes through SASL). Users:
admin (super.users), alice (given ACLs), bob (none).

- alice with WRITE on a PREFIXED topic pattern produces; outside the prefix, and bob
  anywhere, get TOPIC_AUTHORIZATION_FAILED;
- a share group: alice with READ on the group and the topic consumes through
  librdkafka's ShareConsumer, bob is refused with GROUP_AUTHORIZATION_FAILED;
- User:admin does everything, a DENY for User:* notwithstanding;
- SCRAM admin (AlterUserScramCredentials) needs ALTER on the CLUSTER;
- ACLs and SCRAM credentials survive a clean restart and a kill -9 together: alice logs in
  with her password afterwards and her ACLs still decide.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest

from tests.support.brokers import BrokerProcess, RawClient
from tests.support.share_clients import FAST
from tests.support.wire import create, group_config

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")
from confluent_kafka import KafkaError  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

PASSWORDS = {"admin": "admin-Acl-secret", "alice": "alice-Acl-secret", "bob": "bob-Acl-secret"}
MECH = "SCRAM-SHA-256"
QUIET = {"log_level": 0}
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AclBroker:
    """A BrokerProcess with the authorizer on, PLAINTEXT (setup) and SASL_PLAINTEXT on a fixed port."""

    def __init__(self, data_dir) -> None:
        self.sasl_port = _free_port()
        self.proc = BrokerProcess(
            data_dir,
            [
                *FAST,
                f"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
                f"authorizer.class.name={STANDARD}",
                "super.users=User:admin;User:ANONYMOUS",
                "group.initial.rebalance.delay.ms=0",
                "connection.failed.authentication.delay.ms=50",
            ],
        )

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def cfg(self, user: str, password: str | None = None, **extra) -> dict:
        return {
            "bootstrap.servers": self.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": MECH,
            "sasl.username": user,
            "sasl.password": PASSWORDS[user] if password is None else password,
            **QUIET,
            **extra,
        }

    def admin(self, user: str = "admin") -> admin_mod.AdminClient:
        return admin_mod.AdminClient(self.cfg(user))

    def topic(self, name: str, partitions: int = 1) -> str:
        with RawClient(self.proc.port) as c:
            assert create(c, name, partitions).error_code == 0
        return name


def _add_users(bootstrap: str, users: dict[str, str]) -> None:
    a = admin_mod.AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    ups = [
        admin_mod.UserScramCredentialUpsertion(u, admin_mod.ScramCredentialInfo(m, 4096), pw.encode())
        for u, pw in users.items()
        for m in (admin_mod.ScramMechanism.SCRAM_SHA_256, admin_mod.ScramMechanism.SCRAM_SHA_512)
    ]
    for f in a.alter_user_scram_credentials(ups).values():
        assert f.result(15) is None


def _allow(rt: ResourceType, name: str, op: AclOperation, who: str, pt=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rt, name, pt, who, "*", op, AclPermissionType.ALLOW)


def _create_acls(b: AclBroker, bindings: list[AclBinding]) -> None:
    a = b.admin()  # (held: a client collected early cancels its requests)
    for f in a.create_acls(bindings).values():
        assert f.result(15) is None


def _delete_acls(b: AclBroker, principal: str) -> None:
    flt = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY, AclPermissionType.ANY
    )
    a = b.admin()
    for f in a.delete_acls([flt]).values():
        f.result(15)


def _produce(b: AclBroker, user: str, topic: str, password: str | None = None) -> int:
    """One record as ``user``; the delivery's error code (0 when stored)."""
    extra = {"message.timeout.ms": 5000, "allow.auto.create.topics": False}
    p = confluent_kafka.Producer(b.cfg(user, password, **extra))
    out: list[int] = []
    p.produce(topic, b"v-" + user.encode(), on_delivery=lambda err, msg: out.append(err.code() if err else 0))
    p.flush(10)
    return out[0] if out else -999


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = AclBroker(tmp_path_factory.mktemp("acl-sasl") / "data")
    b.proc.start()
    _add_users(b.proc.bootstrap, PASSWORDS)
    yield b
    b.proc.stop()
    log = b.proc.log_text()
    assert all(pw not in log for pw in PASSWORDS.values()), "a password reached the broker's log"


def test_prefixed_write_for_alice_and_nothing_for_bob(broker) -> None:
    stem = f"pay{uuid.uuid4().hex[:6]}-"
    mine, other = broker.topic(stem + "eu"), broker.topic(f"other-{uuid.uuid4().hex[:6]}")
    _create_acls(
        broker, [_allow(ResourceType.TOPIC, stem, AclOperation.WRITE, "User:alice", ResourcePatternType.PREFIXED)]
    )
    try:
        assert _produce(broker, "alice", mine) == 0
        assert _produce(broker, "alice", other) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert _produce(broker, "bob", mine) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        _delete_acls(broker, "User:alice")


def _share_consume(b: AclBroker, user: str, topic: str, group: str, want: int) -> tuple[list[bytes], list]:
    errors: list = []
    sc = confluent_kafka.ShareConsumer(b.cfg(user, **{"group.id": group, "error_cb": errors.append}))
    got: list[bytes] = []
    try:
        sc.subscribe([topic])
        deadline = time.monotonic() + (30 if want else 8)
        while time.monotonic() < deadline and len(got) < max(want, 1):
            try:
                batch = sc.poll(0.5) or ()
            except confluent_kafka.KafkaException as e:  # a refused group surfaces from poll
                errors.append(e.args[0])
                batch = ()
            for m in batch:
                if m.error() is None:
                    got.append(m.value())
                else:
                    errors.append(m.error())
            if not want and errors:
                break
    finally:
        t = threading.Thread(target=sc.close, daemon=True)
        t.start()
        t.join(30)
    return got, errors


@pytest.mark.skipif(not hasattr(confluent_kafka, "ShareConsumer"), reason="no ShareConsumer in this confluent-kafka")
def test_share_group_read_for_alice_refused_for_bob(broker) -> None:
    topic = broker.topic(f"sh-{uuid.uuid4().hex[:6]}")
    group = f"sg-{topic}"
    group_config(broker.proc.port, group, share_auto_offset_reset="earliest")
    for _ in range(3):
        assert _produce(broker, "admin", topic) == 0
    _create_acls(
        broker,
        [
            _allow(ResourceType.GROUP, group, AclOperation.READ, "User:alice"),
            _allow(ResourceType.TOPIC, topic, AclOperation.READ, "User:alice"),
        ],
    )
    try:
        got, errors = _share_consume(broker, "alice", topic, group, 3)
        assert got == [b"v-admin"] * 3, errors
        got, errors = _share_consume(broker, "bob", topic, group, 0)
        assert got == []
        assert any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors), errors
    finally:
        _delete_acls(broker, "User:alice")


def test_the_super_user_does_everything(broker) -> None:
    deny = AclBinding(
        ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:*", "*", AclOperation.ALL, AclPermissionType.DENY
    )
    _create_acls(broker, [deny])
    try:
        a = broker.admin()
        name = f"su-{uuid.uuid4().hex[:6]}"
        for f in a.create_topics([admin_mod.NewTopic(name, 1, 1)]).values():
            assert f.result(15) is None
        assert _produce(broker, "admin", name) == 0
        assert _produce(broker, "alice", name) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        c = confluent_kafka.Consumer(broker.cfg("admin", **{"group.id": f"g-{name}", "auto.offset.reset": "earliest"}))
        try:
            c.subscribe([name])
            m = None
            deadline = time.monotonic() + 20
            while (m is None or m.error() is not None) and time.monotonic() < deadline:
                m = c.poll(0.5)
            assert m is not None and m.error() is None and m.value() == b"v-admin"
        finally:
            c.close()
        for f in a.delete_topics([name]).values():
            assert f.result(15) is None
    finally:
        _delete_acls(broker, "User:*")


def test_scram_admin_needs_alter_on_the_cluster(broker) -> None:
    up = admin_mod.UserScramCredentialUpsertion(
        f"new-{uuid.uuid4().hex[:6]}",
        admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_256, 4096),
        b"new-user-pw",
    )
    a = broker.admin("alice")
    (f,) = a.alter_user_scram_credentials([up]).values()
    with pytest.raises(confluent_kafka.KafkaException) as e:
        f.result(15)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    cluster = ResourceType.BROKER if not hasattr(ResourceType, "CLUSTER") else ResourceType.CLUSTER
    _create_acls(broker, [_allow(cluster, "kafka-cluster", AclOperation.ALTER, "User:alice")])
    try:
        (f,) = a.alter_user_scram_credentials([up]).values()
        assert f.result(15) is None
    finally:
        _delete_acls(broker, "User:alice")


# -- durability -----------------------------------------------------------------------------------


def test_acls_and_credentials_survive_restart_and_kill(tmp_path) -> None:
    b = AclBroker(tmp_path / "data")
    b.proc.start()
    try:
        _add_users(
            b.proc.bootstrap, {"alice": PASSWORDS["alice"], "bob": PASSWORDS["bob"], "admin": PASSWORDS["admin"]}
        )
        mine, other = b.topic("ord-1"), b.topic("misc")
        _create_acls(
            b, [_allow(ResourceType.TOPIC, "ord-", AclOperation.WRITE, "User:alice", ResourcePatternType.PREFIXED)]
        )

        def decided() -> None:
            assert _produce(b, "alice", mine) == 0
            assert _produce(b, "alice", other) == KafkaError.TOPIC_AUTHORIZATION_FAILED
            assert _produce(b, "bob", mine) == KafkaError.TOPIC_AUTHORIZATION_FAILED
            assert _produce(b, "alice", mine) == 0  # (bob's refusal was about bob)

        decided()
        b.proc.stop()
        b.proc.start()
        decided()
        # Changes made just before a crash: a new password for alice and a second ACL.
        new_pw = "alice-N3w-secret"
        info = admin_mod.ScramCredentialInfo(admin_mod.ScramMechanism.SCRAM_SHA_256, 4096)
        ups = [admin_mod.UserScramCredentialUpsertion("alice", info, new_pw.encode())]
        a = b.admin()
        for f in a.alter_user_scram_credentials(ups).values():
            assert f.result(15) is None
        _create_acls(b, [_allow(ResourceType.TOPIC, "misc", AclOperation.WRITE, "User:alice")])
        b.proc.kill()
        b.proc.start()
        errors: list = []
        p = confluent_kafka.Producer(b.cfg("alice", error_cb=errors.append))
        with pytest.raises(confluent_kafka.KafkaException):
            p.list_topics(timeout=3)
        p.poll(1)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors  # the old password is gone
        assert _produce(b, "alice", mine, new_pw) == 0
        assert _produce(b, "alice", other, new_pw) == 0  # the ACL made just before the crash decides
        assert _produce(b, "bob", other) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        b.proc.stop()
