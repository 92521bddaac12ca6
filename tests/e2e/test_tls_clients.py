"""Every client over TLS, and over TLS with client certificates (mutual TLS).

One broker per module with three listeners: PLAINTEXT, SSL (ssl.client.auth=required,
principal rule CN=<name>,... -> <name>) and OPEN (SSL without client certificates, its own
settings through listener.name.open.*). librdkafka's Producer, Consumer, ShareConsumer and
AdminClient, aiokafka, kafka-python, the bundled clients and the CLI each produce, read or
administer through them; the broker's side of each mutual-TLS connection is checked in
process (``Connection.principal``). Certificates are made by trustme (tests/support/tls.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from shoal.client.admin.client import AsyncAdmin
from shoal.client.admin.types import NewTopic
from shoal.client.cli.main import main as shoal_cli
from shoal.client.consumer.consumer import AsyncConsumer
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import ConfigError, KafkaClientError
from shoal.client.producer.producer import AsyncProducer
from shoal.client.share.consumer import AsyncShareConsumer
from shoal.testing import EmbeddedBroker
from tests.support.brokers import RawClient
from tests.support.tls import TlsFiles, make_tls_files, principals
from tests.support.wire import create, group_config

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.admin import NewTopic as CkNewTopic  # noqa: E402

RULES = r"RULE:^CN=([^,]+),.*$/$1/L,DEFAULT"
QUIET = {"log_level": 0}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def broker(files, tmp_path_factory):
    eb = EmbeddedBroker(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,OPEN://127.0.0.1:0,OTHER://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,OPEN:SSL,OTHER:SSL",
            "ssl.keystore.location": str(files.broker_encrypted),
            "ssl.key.password": "k3y-pa55",
            "ssl.truststore.location": str(files.ca),
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": RULES,
            "listener.name.open.ssl.client.auth": "none",
            "listener.name.open.ssl.keystore.location": str(files.broker),
            "listener.name.open.ssl.key.password": "",
            # a certificate for another host name: host name verification must refuse it
            "listener.name.other.ssl.keystore.location": str(files.other_host),
            "listener.name.other.ssl.client.auth": "none",
            "offsets.topic.num.partitions": "1",
            "share.coordinator.state.topic.num.partitions": "1",
            "group.share.min.heartbeat.interval.ms": "200",
            "group.share.heartbeat.interval.ms": "200",
            "group.share.assignment.interval.ms": "0",
        },
        data_dir=tmp_path_factory.mktemp("tlsb") / "d",
    )
    with eb:
        yield eb


def _bootstrap(broker, listener: str) -> str:
    return f"127.0.0.1:{broker.listener_port(listener)}"


def _topic(broker, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.port) as c:
        create(c, name, partitions)
    return name


def _ck(files: TlsFiles, broker, mtls: bool, **extra) -> dict:
    cfg = {
        "bootstrap.servers": _bootstrap(broker, "SSL" if mtls else "OPEN"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(files.ca),
        **QUIET,
        **extra,
    }
    if mtls:
        cfg["ssl.certificate.location"] = str(files.client_cert("alice"))
        cfg["ssl.key.location"] = str(files.client_key("alice"))
    return cfg


def _bundled(files: TlsFiles, broker, mtls: bool, user: str = "alice", **extra) -> dict:
    cfg = {
        "bootstrap.servers": _bootstrap(broker, "SSL" if mtls else "OPEN"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(files.ca),
        **extra,
    }
    if mtls:
        cfg["ssl.certificate.location"] = str(files.client_cert(user))
        cfg["ssl.key.location"] = str(files.client_key(user))
    return cfg


@pytest.mark.parametrize("mtls", [False, True], ids=["ssl", "mtls"])
def test_librdkafka_producer_consumer_admin(files, broker, mtls) -> None:
    admin = AdminClient(_ck(files, broker, mtls))
    topic = f"ck-{uuid.uuid4().hex[:8]}"
    admin.create_topics([CkNewTopic(topic, 2, 1)])[topic].result(15)
    assert topic in admin.list_topics(timeout=10).topics
    p = confluent_kafka.Producer(_ck(files, broker, mtls, **{"linger.ms": 5}))
    for i in range(50):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert p.flush(15) == 0
    if mtls:
        assert "User:alice" in principals(broker, "SSL")
    c = confluent_kafka.Consumer(
        _ck(files, broker, mtls, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    )
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 50 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(50))


@pytest.mark.parametrize("mtls", [False, True], ids=["ssl", "mtls"])
def test_librdkafka_share_consumer(files, broker, mtls) -> None:
    topic = _topic(broker)
    group = f"sg-{topic}"
    group_config(broker.port, group, share_auto_offset_reset="earliest")
    p = confluent_kafka.Producer(_ck(files, broker, mtls))
    for i in range(20):
        p.produce(topic, value=f"s{i}".encode())
    assert p.flush(15) == 0
    sc = confluent_kafka.ShareConsumer(_ck(files, broker, mtls, **{"group.id": group}))
    sc.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        for m in sc.poll(0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
    if mtls:
        assert "User:alice" in principals(broker, "SSL")
    sc.close()
    assert sorted(got) == sorted(f"s{i}".encode() for i in range(20))


@pytest.mark.parametrize("mtls", [False, True], ids=["ssl", "mtls"])
def test_aiokafka(files, broker, mtls) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context

    topic = _topic(broker)

    async def run() -> list[bytes]:
        kw = {"cafile": str(files.ca)}
        if mtls:
            kw.update(certfile=str(files.client_cert("bob")), keyfile=str(files.client_key("bob")))
        ctx = create_ssl_context(**kw)
        bootstrap = _bootstrap(broker, "SSL" if mtls else "OPEN")
        prod = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=ctx)
        await prod.start()
        try:
            for i in range(10):
                await prod.send_and_wait(topic, f"a{i}".encode())
            if mtls:
                assert "User:bob" in await asyncio.to_thread(principals, broker, "SSL")
        finally:
            await prod.stop()
        cons = aiokafka.AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=ctx, auto_offset_reset="earliest"
        )
        await cons.start()
        try:
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < 10:
                    batch = await cons.getmany(timeout_ms=500)
                    out += [r.value for rs in batch.values() for r in rs]
            return out
        finally:
            await cons.stop()

    assert sorted(asyncio.run(run())) == sorted(f"a{i}".encode() for i in range(10))


@pytest.mark.parametrize("mtls", [False, True], ids=["ssl", "mtls"])
def test_kafka_python(files, broker, mtls) -> None:
    kafka = pytest.importorskip("kafka")
    topic = _topic(broker)
    kw = {
        "bootstrap_servers": _bootstrap(broker, "SSL" if mtls else "OPEN"),
        "security_protocol": "SSL",
        "ssl_cafile": str(files.ca),
        "ssl_check_hostname": True,
    }
    if mtls:
        kw.update(ssl_certfile=str(files.client_cert("alice")), ssl_keyfile=str(files.client_key("alice")))
    admin = kafka.KafkaAdminClient(**kw)
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()
    prod = kafka.KafkaProducer(**kw)
    for i in range(10):
        prod.send(topic, f"k{i}".encode()).get(timeout=15)
    if mtls:
        assert "User:alice" in principals(broker, "SSL")
    prod.close()
    cons = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **kw)
    got = [m.value for _, m in zip(range(10), cons, strict=False)]
    cons.close()
    assert sorted(got) == sorted(f"k{i}".encode() for i in range(10))


@pytest.mark.parametrize("mtls", [False, True], ids=["ssl", "mtls"])
def test_bundled_clients(files, broker, mtls) -> None:
    async def run() -> None:
        topic = f"b-{uuid.uuid4().hex[:8]}"
        async with AsyncAdmin(_bundled(files, broker, mtls)) as admin:
            assert (await admin.create_topics([NewTopic(topic, 1)]))[topic] is None
            assert topic in await admin.list_topics()
        async with AsyncProducer(_bundled(files, broker, mtls, user="bob")) as prod:
            for i in range(30):
                await prod.send(topic, f"b{i}".encode())
            await prod.flush()
            if mtls:
                assert "User:bob" in await asyncio.to_thread(principals, broker, "SSL")
        async with AsyncConsumer(_bundled(files, broker, mtls, **{"auto.offset.reset": "earliest"})) as cons:
            cons.assign([TopicPartition(topic, 0)])
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < 30:
                    batch = await cons.getmany(timeout_ms=500)
                    out += [r.value for rs in batch.values() for r in rs]
        assert sorted(out) == sorted(f"b{i}".encode() for i in range(30))
        group = f"sg-{topic}"
        await asyncio.to_thread(group_config, broker.port, group, share_auto_offset_reset="earliest")
        async with AsyncShareConsumer(_bundled(files, broker, mtls, **{"group.id": group})) as sc:
            sc.subscribe([topic])
            shared: list[bytes] = []
            async with asyncio.timeout(30):
                while len(shared) < 30:
                    shared += [r.value for r in await sc.poll(500)]
            if mtls:
                assert "User:alice" in await asyncio.to_thread(principals, broker, "SSL")
        assert sorted(shared) == sorted(out)

    asyncio.run(run())


def test_bundled_client_checks_the_host_name_by_default(files, broker) -> None:
    """The OTHER listener's certificate names another.example: refused unless the check is off."""

    async def topics(**extra) -> dict:
        cfg = {
            "bootstrap.servers": _bootstrap(broker, "OTHER"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(files.ca),
            "default.api.timeout.ms": 3000,
            "socket.connection.setup.timeout.ms": 3000,
            **extra,
        }
        async with AsyncAdmin(cfg) as admin:
            return await admin.list_topics()

    with pytest.raises(KafkaClientError) as e:
        asyncio.run(topics())
    assert "CERTIFICATE_VERIFY_FAILED" in str(e.value) or "certificate" in str(e.value).lower()
    assert isinstance(asyncio.run(topics(**{"ssl.endpoint.identification.algorithm": "none"})), dict)


def test_bundled_client_refuses_an_untrusted_broker(files, broker) -> None:
    async def run() -> None:
        cfg = {
            "bootstrap.servers": _bootstrap(broker, "OPEN"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(files.foreign_ca),
            "socket.connection.setup.timeout.ms": 3000,
        }
        async with AsyncAdmin(cfg) as admin:
            await admin.list_topics()

    with pytest.raises(KafkaClientError, match=r"(?i)certificate"):
        asyncio.run(run())


def test_bundled_client_settings_are_checked_before_connecting(files) -> None:
    with pytest.raises(ConfigError, match=r"ssl\.ca\.location"):
        AsyncAdmin({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL", "ssl.ca.location": "/nope.pem"})
    with pytest.raises(ConfigError, match=r"security\.protocol"):
        AsyncAdmin({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "KERBEROS"})
    with pytest.raises(ConfigError, match=r"sasl\.username"):  # SASL_SSL logs in: it needs a user
        AsyncAdmin({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL"})
    with pytest.raises(ConfigError, match=r"ssl\.key\.location"):
        AsyncProducer({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL", "ssl.key.location": "/k"})


def test_cli_over_tls_through_command_config(files, broker, tmp_path: Path, capsys) -> None:
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SSL\n"
        f"ssl.ca.location={files.ca}\n"
        f"ssl.certificate.location={files.client_cert('alice')}\n"
        f"ssl.key.location={files.client_key('alice')}\n"
    )
    base = ["--bootstrap-server", _bootstrap(broker, "SSL"), "--command-config", str(props)]
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    assert shoal_cli(["topics", "create", topic, "--partitions", "1", *base]) == 0
    assert shoal_cli(["topics", "list", *base]) == 0
    assert topic in capsys.readouterr().out
    import io
    import sys

    old = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(b"one\ntwo\nthree\n"))
    try:
        assert shoal_cli(["produce", topic, *base]) == 0
    finally:
        sys.stdin = old
    capsys.readouterr()
    assert shoal_cli(["consume", topic, "--from-beginning", "--max-messages", "3", *base]) == 0
    assert capsys.readouterr().out.split() == ["one", "two", "three"]
    # without the client certificate the mutual-TLS listener refuses: a clean failure, not a hang
    props.write_text(f"security.protocol=SSL\nssl.ca.location={files.ca}\nsocket.connection.setup.timeout.ms=3000\n")
    assert shoal_cli(["topics", "list", "--command-property", "default.api.timeout.ms=4000", *base]) == 1
