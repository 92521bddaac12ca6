"""SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, judged by outside clients
(librdkafka's Producer, Consumer, ShareConsumer and AdminClient, aiokafka, kafka-python), the
bundled clients and the CLI, against a broker in a child process. A wrong password fails in
each with an authentication error; SCRAM users made through librdkafka's AdminClient survive
a clean restart and a kill -9; no password ever reaches the broker's log."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
import uuid

import pytest

from shoal.client import AsyncAdmin, AsyncConsumer, AsyncProducer, AsyncShareConsumer
from shoal.client.cli.shapes import SHAPES, validate
from shoal.client.core.errors import SaslAuthenticationError
from tests.support.brokers import BrokerProcess, RawClient
from tests.support.cli import run_cli
from tests.support.python_clients import aiokafka_round_trip, kafka_python_round_trip
from tests.support.share_clients import FAST
from tests.support.wire import create, group_config

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")
aiokafka = pytest.importorskip("aiokafka")
kafka = pytest.importorskip("kafka")

PASSWORDS = {"alice": "alice-Pl41n-secret", "bob": "bob-Scr4m-secret", "carol": "carol-R3start-secret"}
JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="{PASSWORDS["alice"]}";'
MECHS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
QUIET = {"log_level": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SaslBroker:
    """A BrokerProcess with a PLAINTEXT listener (for setup) and a SASL_PLAINTEXT one on a fixed port."""

    def __init__(self, data_dir) -> None:
        self.sasl_port = _free_port()
        self.proc = BrokerProcess(
            data_dir,
            [
                *FAST,
                f"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
                f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
                "group.initial.rebalance.delay.ms=0",
                "connection.failed.authentication.delay.ms=50",
            ],
        )

    @property
    def plain_bootstrap(self) -> str:
        return self.proc.bootstrap

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


def _user(mech: str) -> str:
    return "alice" if mech == "PLAIN" else "bob"


def rdk(mech: str, password: str | None = None, **extra) -> dict:
    user = _user(mech)
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mech,
        "sasl.username": user,
        "sasl.password": PASSWORDS[user] if password is None else password,
        **QUIET,
        **extra,
    }


def _add_scram_users(bootstrap: str, users: dict[str, str], extra: dict | None = None) -> None:
    a = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap, **QUIET, **(extra or {})})
    ups = [
        admin_mod.UserScramCredentialUpsertion(user, admin_mod.ScramCredentialInfo(m, 4096), pw.encode())
        for user, pw in users.items()
        for m in (admin_mod.ScramMechanism.SCRAM_SHA_256, admin_mod.ScramMechanism.SCRAM_SHA_512)
    ]
    for f in a.alter_user_scram_credentials(ups).values():
        assert f.result(15) is None


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = SaslBroker(tmp_path_factory.mktemp("sasl-e2e") / "data")
    b.proc.start()
    _add_scram_users(b.plain_bootstrap, {"bob": PASSWORDS["bob"]})
    yield b
    b.proc.stop()
    log = b.proc.log_text()
    for pw in PASSWORDS.values():
        assert pw not in log, "a password reached the broker's log"


def _topic(broker, prefix: str, partitions: int = 1) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.proc.port) as c:
        create(c, name, partitions)
    return name


def _rdk_produce(bootstrap: str, mech: str, topic: str, n: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **rdk(mech)})
    for i in range(n):
        p.produce(topic, value=b"v%d" % i)
    assert p.flush(20) == 0


# -- librdkafka ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mech", MECHS)
def test_librdkafka_producer_and_consumer(broker, mech) -> None:
    topic = _topic(broker, "rdk")
    _rdk_produce(broker.sasl_bootstrap, mech, topic, 5)
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.sasl_bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            **rdk(mech),
        }
    )
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert got == [b"v%d" % i for i in range(5)]


@pytest.mark.skipif(not hasattr(confluent_kafka, "ShareConsumer"), reason="no ShareConsumer in this confluent-kafka")
@pytest.mark.parametrize("mech", MECHS)
def test_librdkafka_share_consumer(broker, mech) -> None:
    topic = _topic(broker, "rdk-share")
    group = f"sg-{topic}"
    group_config(broker.proc.port, group, share_auto_offset_reset="earliest")
    _rdk_produce(broker.sasl_bootstrap, mech, topic, 5)
    sc = confluent_kafka.ShareConsumer({"bootstrap.servers": broker.sasl_bootstrap, "group.id": group, **rdk(mech)})
    got: list[bytes] = []
    try:
        sc.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            for m in sc.poll(0.5) or ():
                if m.error() is None:
                    got.append(m.value())
    finally:
        t = threading.Thread(target=sc.close, daemon=True)
        t.start()
        t.join(30)
    assert sorted(got) == [b"v%d" % i for i in range(5)]


@pytest.mark.parametrize("mech", MECHS)
def test_librdkafka_admin_client(broker, mech) -> None:
    a = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.sasl_bootstrap, **rdk(mech)})
    name = f"adm-{uuid.uuid4().hex[:8]}"
    for f in a.create_topics([confluent_kafka.admin.NewTopic(name, 1, 1)]).values():
        assert f.result(15) is None
    assert name in a.list_topics(timeout=15).topics
    described = a.describe_user_scram_credentials(["bob"])["bob"].result(15)
    assert sorted(str(i.mechanism) for i in described.scram_credential_infos) == [
        "ScramMechanism.SCRAM_SHA_256",
        "ScramMechanism.SCRAM_SHA_512",
    ]


# -- aiokafka and kafka-python ------------------------------------------------------------------


@pytest.mark.parametrize("mech", MECHS)
def test_aiokafka(broker, mech) -> None:
    topic = _topic(broker, "aio")
    settings = {"bootstrap_servers": broker.sasl_bootstrap, **_python_sasl(mech)}
    assert aiokafka_round_trip(topic, settings) == [b"a0", b"a1", b"a2"]


@pytest.mark.parametrize("mech", MECHS)
def test_kafka_python(broker, mech) -> None:
    topic = _topic(broker, "kp")
    settings = {"bootstrap_servers": broker.sasl_bootstrap, **_python_sasl(mech)}
    assert kafka_python_round_trip(topic, settings) == [b"k0", b"k1", b"k2"]


def _python_sasl(mech: str) -> dict:
    user = _user(mech)
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mech,
        "sasl_plain_username": user,
        "sasl_plain_password": PASSWORDS[user],
    }


# -- wrong passwords ----------------------------------------------------------------------------


@pytest.mark.parametrize("mech", MECHS)
def test_wrong_password_fails_in_librdkafka(broker, mech) -> None:
    errors: list = []
    p = confluent_kafka.Producer(
        {"bootstrap.servers": broker.sasl_bootstrap, "error_cb": errors.append, **rdk(mech, "wrong")}
    )
    p.produce("never", b"x")
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors
    c = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.sasl_bootstrap, "group.id": "g-x", "error_cb": errors.append, **rdk(mech, "wrong")}
    )
    errors.clear()
    c.subscribe(["never"])
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        c.poll(0.2)
    c.close()
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors
    errors.clear()
    a = confluent_kafka.admin.AdminClient(
        {"bootstrap.servers": broker.sasl_bootstrap, "error_cb": errors.append, **rdk(mech, "wrong")}
    )
    with pytest.raises(confluent_kafka.KafkaException):
        a.list_topics(timeout=1)  # it fails by its timeout whatever the cause: the error below says why
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        a.poll(0.2)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors


@pytest.mark.skipif(not hasattr(confluent_kafka, "ShareConsumer"), reason="no ShareConsumer in this confluent-kafka")
def test_wrong_password_fails_in_librdkafka_share_consumer(broker) -> None:
    errors: list = []
    sc = confluent_kafka.ShareConsumer(
        {
            "bootstrap.servers": broker.sasl_bootstrap,
            "group.id": "sg-x",
            "error_cb": errors.append,
            **rdk("SCRAM-SHA-256", "wrong"),
        }
    )
    try:
        sc.subscribe(["never"])
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            sc.poll(0.2)
    finally:
        t = threading.Thread(target=sc.close, daemon=True)
        t.start()
        t.join(30)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors


@pytest.mark.parametrize("mech", MECHS)
def test_wrong_password_fails_in_aiokafka_and_kafka_python(broker, mech, caplog) -> None:
    caplog.set_level(logging.INFO)
    sasl = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mech,
        "sasl_plain_username": _user(mech),
        "sasl_plain_password": "wrong",
    }

    async def aio() -> None:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.sasl_bootstrap, request_timeout_ms=5000, **sasl)
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises(aiokafka.errors.KafkaError):
        asyncio.run(aio())
    assert "SaslAuthenticationFailed" in caplog.text
    caplog.clear()
    with pytest.raises(kafka.errors.KafkaError):
        # bootstrap_timeout_ms: kafka-python retries a failed authentication until it (30 s by default)
        kafka.KafkaProducer(
            bootstrap_servers=broker.sasl_bootstrap, max_block_ms=3000, bootstrap_timeout_ms=3000, **sasl
        )
    assert "SaslAuthenticationFailedError" in caplog.text


# -- the bundled clients and the CLI --------------------------------------------------------------


def _shoal_sasl(mech: str, password: str | None = None) -> dict:
    user = _user(mech)
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mech,
        "sasl.username": user,
        "sasl.password": PASSWORDS[user] if password is None else password,
    }


@pytest.mark.parametrize("mech", MECHS)
def test_bundled_clients(broker, mech) -> None:
    topic = _topic(broker, "own")
    group = f"sg-{topic}"
    group_config(broker.proc.port, group, share_auto_offset_reset="earliest")
    cfg = {"bootstrap.servers": broker.sasl_bootstrap, **_shoal_sasl(mech)}

    async def go() -> None:
        async with AsyncAdmin(cfg) as admin:
            assert topic in await admin.list_topics()
            users = await admin.describe_user_scram_credentials(["bob"])
            assert [c.mechanism for c in users["bob"].credentials] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        async with AsyncProducer(cfg) as p:
            for i in range(4):
                await (await p.send(topic, b"s%d" % i))
        async with AsyncConsumer(cfg, group_id=f"g-{topic}", auto_offset_reset="earliest") as c:
            c.subscribe([topic])
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < 4:
                    for recs in (await c.getmany(timeout_ms=500)).values():
                        out.extend(r.value for r in recs)
            assert out == [b"s0", b"s1", b"s2", b"s3"]
        async with AsyncShareConsumer(cfg, group_id=group) as sc:
            sc.subscribe([topic])
            seen: list[bytes] = []
            async with asyncio.timeout(30):
                while len(seen) < 4:
                    seen.extend(r.value for r in await sc.poll(timeout_ms=500))
            assert sorted(seen) == [b"s0", b"s1", b"s2", b"s3"]

    asyncio.run(go())


def test_bundled_client_wrong_password(broker) -> None:
    async def go(mech: str) -> None:
        async with AsyncAdmin({"bootstrap.servers": broker.sasl_bootstrap, **_shoal_sasl(mech, "wrong")}) as admin:
            await admin.list_topics()

    for mech in MECHS:
        with pytest.raises(SaslAuthenticationError, match="Authentication failed"):
            asyncio.run(go(mech))


def _cli(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    return run_cli(*args, stdin=stdin)  # main(argv) in this process: no interpreter start-up per verb


@pytest.mark.parametrize("mech", MECHS)
def test_cli_over_sasl(broker, mech, tmp_path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in _shoal_sasl(mech).items()))
    conn = ["--bootstrap-server", broker.sasl_bootstrap, "--command-config", str(props)]
    rc, out, err = _cli("topics", "create", f"cli-{mech.lower()}", *conn)
    assert rc == 0, err
    pw_file = tmp_path / "pw"
    pw_file.write_text(f"dave-{mech}-pw\n")
    user = f"dave-{mech.lower()}"
    rc, out, err = _cli(
        "users",
        "add",
        user,
        "--mechanism",
        "SCRAM-SHA-512",
        "--iterations",
        "8192",
        "--password-file",
        str(pw_file),
        *conn,
    )
    assert rc == 0, err
    assert f"dave-{mech}-pw" not in out + err
    rc, out, err = _cli("users", "list", user, *conn)
    assert rc == 0 and f"{user}" in out and "SCRAM-SHA-512" in out and "8192" in out, out + err
    rc, out, err = _cli("users", "list", user, "--output", "json", *conn)
    assert rc == 0 and validate(json.loads(out), SHAPES["users list"]) == []
    assert json.loads(out) == {"users": [{"user": user, "mechanism": "SCRAM-SHA-512", "iterations": 8192}]}
    # The new user logs in with the password from the file.
    p = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": f"dave-{mech}-pw",
            **QUIET,
        }
    )
    p.produce(f"cli-{mech.lower()}", b"x")
    assert p.flush(15) == 0
    rc, out, err = _cli("users", "delete", user, *conn)
    assert rc == 0, err
    rc, out, err = _cli("users", "list", user, *conn)
    assert rc == 1 and "RESOURCE_NOT_FOUND" in err
    bad = tmp_path / "bad.properties"
    bad.write_text("".join(f"{k}={v}\n" for k, v in _shoal_sasl(mech, "wrong").items()))
    rc, out, err = _cli("topics", "list", "--bootstrap-server", broker.sasl_bootstrap, "--command-config", str(bad))
    assert rc == 1 and "Authentication failed" in err
    rc, out, err = _cli(
        "users", "add", "erin", "--bootstrap-server", broker.sasl_bootstrap, "--command-config", str(props), stdin=""
    )
    assert rc == 2 and "--password-file" in err  # no terminal to prompt on, and no password on the command line


# -- durability ---------------------------------------------------------------------------------


def _can_log_in(b: SaslBroker, user: str, mech: str) -> bool:
    errors: list = []
    p = confluent_kafka.Producer(
        {
            "bootstrap.servers": b.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mech,
            "sasl.username": user,
            "sasl.password": PASSWORDS[user],
            "error_cb": errors.append,
            **QUIET,
        }
    )
    # Metadata in short tries until it comes or an authentication error does (waiting out one
    # 10 s call made every expected refusal cost 10 s); neither within 10 s is a refusal too.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            md = p.list_topics(timeout=0.5)
        except confluent_kafka.KafkaException:
            p.poll(0.1)  # serves error_cb
            if any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors):
                return False
            continue
        return md is not None and not any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors)
    return False


def test_scram_credentials_survive_clean_restart_and_kill(tmp_path) -> None:
    b = SaslBroker(tmp_path / "data")
    b.proc.start()
    try:
        _add_scram_users(b.plain_bootstrap, {"bob": PASSWORDS["bob"]})
        assert _can_log_in(b, "bob", "SCRAM-SHA-256")
        b.proc.stop()
        b.proc.start()
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            assert _can_log_in(b, "bob", mech)
        # Made over SASL this time, then a crash.
        _add_scram_users(b.sasl_bootstrap, {"carol": PASSWORDS["carol"]}, rdk("SCRAM-SHA-256"))
        b.proc.kill()
        b.proc.start()
        for user in ("bob", "carol"):
            assert _can_log_in(b, user, "SCRAM-SHA-512")
        assert not _can_log_in(b, "alice", "SCRAM-SHA-256")  # a PLAIN user has no SCRAM credential
    finally:
        b.proc.stop()
    log = b.proc.log_text()
    assert "SASL authentication failed" in log  # the failed login above was logged ...
    for pw in PASSWORDS.values():
        assert pw not in log  # ... without any password
    stored = (tmp_path / "data" / "__scram_credentials.json").read_text()
    assert "bob" in stored and all(pw not in stored for pw in PASSWORDS.values())
