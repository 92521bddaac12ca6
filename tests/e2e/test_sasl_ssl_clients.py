"""SASL_SSL end to end: TLS, then a SASL login (SCRAM-SHA-512 or PLAIN), judged by outside
clients (librdkafka's Producer, Consumer, ShareConsumer and AdminClient, aiokafka,
kafka-python), the bundled clients and the CLI (``--command-config``).

One in-process broker per module with three listeners: PLAINTEXT (setup only), SASL_SSL
(no client certificates) and MTLSSASL (SASL_SSL with ssl.client.auth=required and a
principal rule that would make alice's certificate ``User:cert-alice`` and maps no other).
On MTLSSASL the broker must use the SASL principal, as Kafka does on SASL_SSL: the
certificate only opens the TLS session, so one that no rule maps is no reason to refuse. Bad input: plaintext bytes to the SASL_SSL port, and a TLS client that
skips the SASL handshake, are both closed.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
import time
import uuid

import pytest

from shoal.client import AsyncAdmin, AsyncConsumer, AsyncProducer, AsyncShareConsumer
from shoal.client.core.errors import SaslAuthenticationError
from shoal.protocol import messages
from shoal.testing import EmbeddedBroker
from tests.support.auth_wire import connect, scram_upserts, tls_context
from tests.support.brokers import RawClient
from tests.support.cli import run_cli
from tests.support.python_clients import aiokafka_round_trip, kafka_python_round_trip
from tests.support.tls import TlsFiles, make_tls_files, principals
from tests.support.wire import create, group_config

confluent_kafka = pytest.importorskip("confluent_kafka")
admin_mod = pytest.importorskip("confluent_kafka.admin")

PASSWORD = "alice-S4sl-ssl-secret"
JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="{PASSWORD}";'
MECHS = ["SCRAM-SHA-512", "PLAIN"]
QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("sasl-ssl-certs"))


@pytest.fixture(scope="module")
def broker(files, tmp_path_factory):
    eb = EmbeddedBroker(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,MTLSSASL://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,MTLSSASL:SASL_SSL",
            "ssl.keystore.location": str(files.broker),
            "ssl.truststore.location": str(files.ca),
            "ssl.principal.mapping.rules": r"RULE:^CN=([^,]+),.*$/cert-$1/,DEFAULT",
            "listener.name.mtlssasl.ssl.client.auth": "required",
            # (no DEFAULT: bob's certificate maps to nothing, which SASL_SSL must not care about)
            "listener.name.mtlssasl.ssl.principal.mapping.rules": r"RULE:^CN=(alice),.*$/cert-$1/",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "listener.name.mtlssasl.plain.sasl.jaas.config": JAAS,
            "connection.failed.authentication.delay.ms": "50",
            "offsets.topic.num.partitions": "1",
            "share.coordinator.state.topic.num.partitions": "1",
            "group.share.min.heartbeat.interval.ms": "200",
            "group.share.heartbeat.interval.ms": "200",
            "group.share.assignment.interval.ms": "0",
            "group.initial.rebalance.delay.ms": "0",
        },
        data_dir=tmp_path_factory.mktemp("sasl-ssl") / "d",
    )
    with eb:
        with RawClient(eb.port) as c:
            r = c.call("AlterUserScramCredentials", 0, body=scram_upserts({"alice": PASSWORD}))
        assert [x.error_code for x in r.results] == [0]
        yield eb


def _bootstrap(broker, listener: str = "SASL_SSL") -> str:
    return f"127.0.0.1:{broker.listener_port(listener)}"


def _topic(broker, partitions: int = 1) -> str:
    name = f"ss-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as c:
        assert create(c, name, partitions).error_code == 0
    return name


def _ck(files: TlsFiles, broker, mech: str, password: str = PASSWORD, **extra) -> dict:
    return {
        "bootstrap.servers": _bootstrap(broker),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(files.ca),
        "sasl.mechanism": mech,
        "sasl.username": "alice",
        "sasl.password": password,
        **QUIET,
        **extra,
    }


def _shoal(files: TlsFiles, broker, mech: str, password: str = PASSWORD) -> dict:
    return {
        "bootstrap.servers": _bootstrap(broker),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(files.ca),
        "sasl.mechanism": mech,
        "sasl.username": "alice",
        "sasl.password": password,
    }


def _produce(cfg: dict, topic: str, n: int, prefix: str = "v") -> None:
    p = confluent_kafka.Producer(cfg)
    for i in range(n):
        p.produce(topic, value=f"{prefix}{i}".encode())
    assert p.flush(20) == 0


def _close_soon(closable) -> None:
    t = threading.Thread(target=closable.close, daemon=True)
    t.start()
    t.join(30)


# -- librdkafka ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mech", MECHS)
def test_librdkafka_producer_consumer_admin(files, broker, mech) -> None:
    a = admin_mod.AdminClient(_ck(files, broker, mech))
    topic = f"ck-{uuid.uuid4().hex[:8]}"
    for f in a.create_topics([admin_mod.NewTopic(topic, 2, 1)]).values():
        assert f.result(15) is None
    assert topic in a.list_topics(timeout=15).topics
    described = a.describe_user_scram_credentials(["alice"])["alice"].result(15)
    assert len(described.scram_credential_infos) == 2
    _produce(_ck(files, broker, mech), topic, 20)
    c = confluent_kafka.Consumer(
        _ck(files, broker, mech, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    )
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))


@pytest.mark.skipif(not hasattr(confluent_kafka, "ShareConsumer"), reason="no ShareConsumer in this confluent-kafka")
@pytest.mark.parametrize("mech", MECHS)
def test_librdkafka_share_consumer(files, broker, mech) -> None:
    topic = _topic(broker)
    group = f"sg-{topic}"
    group_config(broker.port, group, share_auto_offset_reset="earliest")
    _produce(_ck(files, broker, mech), topic, 10, "s")
    sc = confluent_kafka.ShareConsumer(_ck(files, broker, mech, **{"group.id": group}))
    got: list[bytes] = []
    try:
        sc.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            for m in sc.poll(0.5) or ():
                assert m.error() is None, m.error()
                got.append(m.value())
        assert principals(broker, "SASL_SSL") and set(principals(broker, "SASL_SSL")) == {"User:alice"}
    finally:
        _close_soon(sc)
    assert sorted(got) == sorted(f"s{i}".encode() for i in range(10))


def test_librdkafka_wrong_password_is_an_authentication_error(files, broker) -> None:
    errors: list = []
    a = admin_mod.AdminClient(_ck(files, broker, "SCRAM-SHA-512", "wrong", error_cb=errors.append))
    with pytest.raises(confluent_kafka.KafkaException):
        a.list_topics(timeout=3)
    a.poll(1)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors


# -- aiokafka and kafka-python ------------------------------------------------------------------


@pytest.mark.parametrize("mech", MECHS)
def test_aiokafka(files, broker, mech) -> None:
    from aiokafka.helpers import create_ssl_context

    settings = {"ssl_context": create_ssl_context(cafile=str(files.ca)), **_python_sasl(broker, mech)}
    assert aiokafka_round_trip(_topic(broker), settings) == [b"a0", b"a1", b"a2"]


@pytest.mark.parametrize("mech", MECHS)
def test_kafka_python(files, broker, mech) -> None:
    settings = {"ssl_cafile": str(files.ca), **_python_sasl(broker, mech)}
    assert kafka_python_round_trip(_topic(broker), settings) == [b"k0", b"k1", b"k2"]


def _python_sasl(broker, mech: str) -> dict:
    return {
        "bootstrap_servers": _bootstrap(broker),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mech,
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
    }


# -- the bundled clients and the CLI ------------------------------------------------------------


@pytest.mark.parametrize("mech", MECHS)
def test_bundled_clients(files, broker, mech) -> None:
    topic = _topic(broker)
    group = f"sg-{topic}"
    group_config(broker.port, group, share_auto_offset_reset="earliest")
    cfg = _shoal(files, broker, mech)
    values = [b"b%d" % i for i in range(4)]

    async def go() -> None:
        async with AsyncAdmin(cfg) as admin:
            assert topic in await admin.list_topics()
            users = await admin.describe_user_scram_credentials(["alice"])
            assert [c.mechanism for c in users["alice"].credentials] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        async with AsyncProducer(cfg) as p:
            for v in values:
                await (await p.send(topic, v))
        async with AsyncConsumer(cfg, group_id=f"g-{topic}", auto_offset_reset="earliest") as c:
            c.subscribe([topic])
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < 4:
                    for recs in (await c.getmany(timeout_ms=500)).values():
                        out.extend(r.value for r in recs)
            assert out == values
        async with AsyncShareConsumer(cfg, group_id=group) as sc:
            sc.subscribe([topic])
            seen: list[bytes] = []
            async with asyncio.timeout(30):
                while len(seen) < 4:
                    seen.extend(r.value for r in await sc.poll(timeout_ms=500))
            assert sorted(seen) == values

    asyncio.run(go())


def test_bundled_client_wrong_password(files, broker) -> None:
    async def go() -> None:
        async with AsyncAdmin(_shoal(files, broker, "SCRAM-SHA-512", "wrong")) as admin:
            await admin.list_topics()

    with pytest.raises(SaslAuthenticationError, match="Authentication failed"):
        asyncio.run(go())


def _cli(*args: str) -> tuple[int, str, str]:
    return run_cli(*args)  # main(argv) in this process: no interpreter start-up per verb


def test_cli_over_sasl_ssl(files, broker, tmp_path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in _shoal(files, broker, "SCRAM-SHA-512").items()))
    conn = ["--bootstrap-server", _bootstrap(broker), "--command-config", str(props)]
    name = f"cli-{uuid.uuid4().hex[:8]}"
    rc, out, err = _cli("topics", "create", name, *conn)
    assert rc == 0, err
    rc, out, err = _cli("topics", "list", *conn)
    assert rc == 0 and name in out, out + err
    rc, out, err = _cli("users", "list", "alice", *conn)
    assert rc == 0 and "SCRAM-SHA-512" in out, out + err
    assert PASSWORD not in out + err
    # Without the CA the broker's certificate is not trusted: the CLI fails, it does not fall back.
    bare = tmp_path / "bare.properties"
    bare.write_text(props.read_text().replace(f"ssl.ca.location={files.ca}\n", ""))
    rc, out, err = _cli("topics", "list", "--bootstrap-server", _bootstrap(broker), "--command-config", str(bare))
    assert rc != 0 and PASSWORD not in out + err


# -- client certificates and SASL together -------------------------------------------------------


def test_sasl_principal_wins_over_the_certificate(files, broker) -> None:
    """On a SASL_SSL listener that requires client certificates, the connection's principal
    is the SASL user, not the (mapped) certificate name; a certificate no rule maps is fine."""
    topic = _topic(broker)
    for cert in ("alice", "bob"):  # mapped to User:cert-alice; not mapped at all
        cfg = _ck(
            files,
            broker,
            "SCRAM-SHA-512",
            **{
                "bootstrap.servers": _bootstrap(broker, "MTLSSASL"),
                "ssl.certificate.location": str(files.client_cert(cert)),
                "ssl.key.location": str(files.client_key(cert)),
            },
        )
        p = confluent_kafka.Producer(cfg)
        p.produce(topic, b"x")
        assert p.flush(15) == 0, cert
        seen = principals(broker, "MTLSSASL")
        assert seen and set(seen) == {"User:alice"}, (cert, seen)
        del p
    # The raw wire, PLAIN this time: a TLS session with alice's certificate, then the login.
    with connect(
        broker.listener_port("MTLSSASL"), tls=tls_context(files, "alice"), sasl=("PLAIN", "alice", PASSWORD)
    ) as c:
        assert c.call("Metadata", 12, topics=None, allow_auto_topic_creation=False).brokers
        seen = principals(broker, "MTLSSASL")
        assert "User:alice" in seen and "User:cert-alice" not in seen, seen


def test_the_certificate_is_still_required(files, broker) -> None:
    """ssl.client.auth=required on the SASL_SSL listener: a password alone does not get in."""
    errors: list = []
    a = admin_mod.AdminClient(
        _ck(
            files,
            broker,
            "SCRAM-SHA-512",
            **{"bootstrap.servers": _bootstrap(broker, "MTLSSASL")},
            error_cb=errors.append,
        )
    )
    with pytest.raises(confluent_kafka.KafkaException):
        a.list_topics(timeout=3)
    a.poll(0.5)
    assert errors and not any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors


# -- bad input -----------------------------------------------------------------------------------


def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the peer closes within ``timeout`` (any bytes before the close are ignored)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if sock.recv(65536) == b"":
                return True
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def test_plaintext_bytes_to_the_sasl_ssl_port_are_closed(broker) -> None:
    body = struct.pack(">hhih", 18, 0, 7, -1)  # ApiVersions v0, correlation 7, null client id
    with socket.create_connection(("127.0.0.1", broker.listener_port("SASL_SSL")), timeout=5) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        assert _closed(s)


def test_tls_without_the_sasl_handshake_is_closed(files, broker) -> None:
    with connect(broker.listener_port("SASL_SSL"), tls=tls_context(files)) as c:
        c.send("Metadata", 12, messages.MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert _closed(c.sock)
    # ... and so is one that asks for ApiVersions first, then skips the handshake.
    with connect(broker.listener_port("SASL_SSL"), tls=tls_context(files)) as c:
        assert c.call("ApiVersions", 3, client_software_name="t", client_software_version="1").error_code == 0
        c.send("Metadata", 12, messages.MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert _closed(c.sock)
    # A logged-in one is served (the refusals above are about the missing login).
    with connect(
        broker.listener_port("SASL_SSL"), tls=tls_context(files), sasl=("SCRAM-SHA-512", "alice", PASSWORD)
    ) as c:
        assert c.call("Metadata", 12, topics=None, allow_auto_topic_creation=False).brokers
