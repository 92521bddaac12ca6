"""Bad input on a TLS listener, and TLS settings that cannot work.

Each bad peer gets a closed connection; the broker keeps serving a good client afterwards
and holds nothing for the bad one (its connection counters go back). Settings that cannot
work (a wrong key password, a JKS store, a missing file) stop the start with a ConfigError
that names the setting and never shows the password; the broker's command exits 2.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest

from shoal.broker.config.keys import ConfigError
from shoal.testing import EmbeddedBroker
from tests.support.brokers import ROOT, RawClient
from tests.support.tls import KEY_PASSWORD, TlsFiles, broker_settings, make_tls_files, principals

IDLE_MS = 1500


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def broker(files, tmp_path_factory):
    settings = broker_settings(files, "required", **{"connections.max.idle.ms": str(IDLE_MS)})
    with EmbeddedBroker(settings, data_dir=tmp_path_factory.mktemp("bad") / "d") as eb:
        yield eb


def _api_versions_frame() -> bytes:
    body = struct.pack(">hhih", 18, 0, 7, -1)  # ApiVersions v0, correlation 7, null client id
    return struct.pack(">i", len(body)) + body


def _read_to_eof(sock: socket.socket, timeout: float) -> bytes:
    """Everything until the peer closes; fails if it does not close within ``timeout``."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            return data
        if not chunk:
            return data
        data += chunk
    raise AssertionError("the broker kept the connection open")


def _good_client_works(broker, files: TlsFiles) -> None:
    ctx = ssl.create_default_context(cafile=str(files.ca))
    ctx.load_cert_chain(str(files.client_cert("alice")), str(files.client_key("alice")))
    with ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", broker.listener_port("SSL"))), server_hostname="localhost"
    ) as s:
        s.settimeout(10)
        s.sendall(_api_versions_frame())
        size = struct.unpack(">i", s.recv(4))[0]
        body = b""
        while len(body) < size:
            body += s.recv(size - len(body))
        assert struct.unpack(">ih", body[:6]) == (7, 0)  # correlation id 7, no error


def _no_leftovers(broker) -> None:
    """Only the broker's own bookkeeping for live peers remains (none here)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        server = broker.broker.server
        if not server.connections and not server.per_ip and not server.per_listener.get("SSL"):
            return
        time.sleep(0.05)
    raise AssertionError(f"connections left: {server.connections}, per ip {server.per_ip}")


def test_garbage_during_the_handshake_is_closed(broker, files) -> None:
    with socket.create_connection(("127.0.0.1", broker.listener_port("SSL"))) as s:
        s.sendall(b"\x16\x03\x01\x00\x30" + os.urandom(48) + b"not a client hello at all" * 20)
        _read_to_eof(s, 10)
    _good_client_works(broker, files)
    _no_leftovers(broker)


def test_plaintext_kafka_request_to_the_tls_port_is_closed(broker, files) -> None:
    with socket.create_connection(("127.0.0.1", broker.listener_port("SSL"))) as s:
        s.sendall(_api_versions_frame())
        answer = _read_to_eof(s, 10)
    assert not answer.startswith(struct.pack(">i", 0)[:2] + b"\x00\x00\x00\x07")  # never a Kafka answer
    _good_client_works(broker, files)
    _no_leftovers(broker)


def test_client_without_certificate_is_refused_when_required(broker, files) -> None:
    ctx = ssl.create_default_context(cafile=str(files.ca))  # no client certificate
    raw = socket.create_connection(("127.0.0.1", broker.listener_port("SSL")))
    try:
        s = ctx.wrap_socket(raw, server_hostname="localhost")
    except (ssl.SSLError, ConnectionResetError):
        pass  # TLS 1.2: the handshake itself fails
    else:
        with s:  # TLS 1.3: the client learns it at its first read
            with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
                s.sendall(_api_versions_frame())
                if not s.recv(4):
                    raise ConnectionResetError("closed")
    finally:
        raw.close()
    assert principals(broker, "SSL", timeout=0.2, want=1) == []
    _good_client_works(broker, files)
    _no_leftovers(broker)


def test_client_stopping_mid_handshake_is_dropped_after_the_idle_time(broker, files) -> None:
    # The first bytes of a real ClientHello, then silence.
    hello = ssl.MemoryBIO()
    obj = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), hello, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    first = hello.read()
    with socket.create_connection(("127.0.0.1", broker.listener_port("SSL"))) as s:
        s.sendall(first[: len(first) // 2])
        started = time.monotonic()
        _read_to_eof(s, IDLE_MS / 1000 + 8)
        assert time.monotonic() - started >= IDLE_MS / 1000 * 0.8
    _good_client_works(broker, files)
    _no_leftovers(broker)


def test_sensitive_settings_are_not_described(broker) -> None:
    with RawClient(broker.port) as c:
        from shoal.protocol.api import api_by_name

        req = api_by_name("DescribeConfigs").request_class()
        res = req.DescribeConfigsResource(
            resource_type=4, resource_name="1", configuration_keys=["ssl.key.password", "ssl.client.auth"]
        )
        r = c.call("DescribeConfigs", 4, resources=[res], include_synonyms=True, include_documentation=False)
    entries = {e.name: e for e in r.results[0].configs}
    assert entries["ssl.client.auth"].value == "required"
    assert entries["ssl.key.password"].is_sensitive and entries["ssl.key.password"].value is None


@pytest.mark.parametrize(
    "change,key,says",
    [
        (
            {"ssl.keystore.location": "{enc}", "ssl.key.password": "wrong-" + KEY_PASSWORD},
            "ssl.keystore.location",
            "ssl.key.password",
        ),
        ({"ssl.keystore.location": "{enc}"}, "ssl.keystore.location", "ssl.key.password"),
        ({"ssl.keystore.location": "/no/such/file.pem"}, "ssl.keystore.location", "no file"),
        ({"ssl.keystore.location": "{ca}"}, "ssl.keystore.location", "no PEM private key"),
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type", "PEM"),
        ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type", "PEM"),
        ({"ssl.truststore.location": None, "ssl.client.auth": "required"}, "ssl.client.auth", "truststore"),
        ({"ssl.principal.mapping.rules": "RULE:^CN=(.*$/$1/"}, "ssl.principal.mapping.rules", "pattern"),
        (
            {"listener.name.ssl.ssl.keystore.location": "/nope.pem"},
            "listener.name.ssl.ssl.keystore.location",
            "no file",
        ),
    ],
)
def test_settings_that_cannot_work_stop_the_start(files, tmp_path, change, key, says) -> None:
    settings = broker_settings(files)
    for k, v in change.items():
        if v is None:
            settings.pop(k, None)
        else:
            settings[k] = v.format(enc=files.broker_encrypted, ca=files.ca) if isinstance(v, str) else v
    with pytest.raises(ConfigError) as e:
        with EmbeddedBroker(settings, data_dir=tmp_path / "d"):
            pass
    assert e.value.key == key
    assert says in str(e.value)
    assert KEY_PASSWORD not in str(e.value)


def test_broker_command_exits_2_on_a_wrong_key_password(files, tmp_path) -> None:
    secret = "wrong-" + KEY_PASSWORD
    argv = [
        sys.executable,
        "-m",
        "shoal.broker.cli",
        "--override",
        f"log.dirs={tmp_path / 'd'}",
        "--override",
        "listeners=SSL://127.0.0.1:0",
        "--override",
        f"ssl.keystore.location={files.broker_encrypted}",
        "--override",
        f"ssl.key.password={secret}",
        "--override",
        "shoal.http.listeners=",
    ]
    p = subprocess.run(
        argv, capture_output=True, text=True, cwd=ROOT, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert p.returncode == 2, p.stderr
    assert "ssl.key.password" in p.stderr
    assert "Traceback" not in p.stderr
    assert secret not in p.stderr


def test_inline_pem_key_chain_and_truststore(files, tmp_path) -> None:
    """ssl.keystore.key / ssl.keystore.certificate.chain / ssl.truststore.certificates as text
    (newlines written as \\n, as a properties file holds them) instead of files."""
    pem = files.broker.read_text()
    end = pem.index("PRIVATE KEY-----", pem.index("-----END")) + len("PRIVATE KEY-----")
    key = pem[:end]
    chain = pem[len(key) :].strip()
    settings = broker_settings(files, "required")
    del settings["ssl.keystore.location"], settings["ssl.truststore.location"]
    settings["ssl.keystore.key"] = key.replace("\n", "\\n")
    settings["ssl.keystore.certificate.chain"] = chain.replace("\n", "\\n")
    settings["ssl.truststore.certificates"] = files.ca.read_text()
    with EmbeddedBroker(settings, data_dir=tmp_path / "d") as eb:
        _good_client_works(eb, files)
