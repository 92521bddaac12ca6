"""Certificates for the TLS tests, made with trustme (no openssl command line).

``TlsFiles`` holds one CA, a broker certificate for localhost/127.0.0.1, client
certificates for alice and bob (CN=<name>, trustme's O and OU), a certificate for another
host name, and an encrypted copy of the broker key; ``broker_settings`` gives the ssl.*
settings of a broker with a PLAINTEXT and an SSL listener; ``principals`` reads, in process,
which principals the broker's live connections carry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

trustme = pytest.importorskip("trustme")

KEY_PASSWORD = "k3y-pa55"


@dataclass(frozen=True)
class TlsFiles:
    dir: Path
    ca: Path  # the CA certificate (PEM)
    broker: Path  # key + chain for localhost and 127.0.0.1
    broker_encrypted: Path  # the same, the key encrypted with KEY_PASSWORD
    other_host: Path  # key + chain for another.example only
    clients: dict[str, tuple[Path, Path]]  # name -> (certificate chain, key)
    dn: dict[str, str]  # name -> subject DN as Kafka prints it
    foreign_ca: Path  # a CA nobody's certificate chains to

    def client_cert(self, name: str) -> Path:
        return self.clients[name][0]

    def client_key(self, name: str) -> Path:
        return self.clients[name][1]


def make_tls_files(directory: Path) -> TlsFiles:
    from cryptography.hazmat.primitives import serialization

    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    broker = ca.issue_cert("localhost", "127.0.0.1")
    broker.private_key_and_cert_chain_pem.write_to_path(str(directory / "broker.pem"))
    key = serialization.load_pem_private_key(broker.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
    )
    chain = b"".join(b.bytes() for b in broker.cert_chain_pems)
    (directory / "broker-encrypted.pem").write_bytes(encrypted + chain)
    other = ca.issue_cert("another.example")
    other.private_key_and_cert_chain_pem.write_to_path(str(directory / "other.pem"))
    clients: dict[str, tuple[Path, Path]] = {}
    dn: dict[str, str] = {}
    for name in ("alice", "bob"):
        cert = ca.issue_cert(f"{name}.clients.example", common_name=name, organization_unit_name="Clients")
        chain_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
        chain_path.write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
        key_path.write_bytes(cert.private_key_pem.bytes())
        clients[name] = (chain_path, key_path)
        from cryptography import x509

        subject = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).subject
        dn[name] = subject.rfc4514_string()
    trustme.CA().cert_pem.write_to_path(str(directory / "foreign-ca.pem"))
    return TlsFiles(
        directory,
        directory / "ca.pem",
        directory / "broker.pem",
        directory / "broker-encrypted.pem",
        directory / "other.pem",
        clients,
        dn,
        directory / "foreign-ca.pem",
    )


def broker_settings(files: TlsFiles, client_auth: str = "none", **extra: str) -> dict[str, str]:
    """A PLAINTEXT and an SSL listener on free ports, the SSL one with the broker certificate."""
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": str(files.broker),
        "ssl.truststore.location": str(files.ca),
        "ssl.client.auth": client_auth,
    }
    settings.update(extra)
    return settings


def principals(embedded, listener: str = "SSL", timeout: float = 5.0, want: int = 1) -> list[str]:
    """Principals (``User:x``) of the broker's live connections on ``listener``, read in process;
    waits up to ``timeout`` for at least ``want`` of them."""
    deadline = time.monotonic() + timeout
    while True:
        conns = list(embedded.broker.server.connections)
        seen = sorted(str(c.principal) for c in conns if c.listener == listener)
        if len(seen) >= want or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)
