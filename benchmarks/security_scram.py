"""SCRAM authentications per second, next to plaintext connections per second.

Run: python benchmarks/security_scram.py [--seconds 3]

Starts a broker process with a PLAINTEXT and a SASL_PLAINTEXT listener, creates one SCRAM
user (both mechanisms, 4096 iterations), then, one connection after another from one
client, measures for each row how many complete setups per second the broker serves:

  * plaintext: connect, ApiVersions, close;
  * PLAIN: connect, ApiVersions, SaslHandshake, one SaslAuthenticate, close;
  * SCRAM-SHA-256 / SCRAM-SHA-512: connect, ApiVersions, SaslHandshake, two
    SaslAuthenticate round trips (the server's signature checked), close.

The client caches its salted password (RFC 5802 allows it), so a row measures the
exchange and the broker, not 4096 PBKDF2 rounds in the client; the "(client salts)"
rows redo the salting on every login, as a client without that cache does.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoal.protocol import messages  # noqa: E402
from shoal.protocol.frames import decode_response, encode_request  # noqa: E402
from shoal.protocol.sasl.plain import encode_plain  # noqa: E402
from shoal.protocol.sasl.scram import (  # noqa: E402
    MECHANISMS,
    client_proof,
    new_nonce,
    parse_server_final,
    parse_server_first,
    salt_password,
)
from tests.support.brokers import BrokerProcess  # noqa: E402

USER, PASSWORD = "bench", "bench-password"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def call(self, key: int, version: int, body) -> object:
        self.corr += 1
        self.sock.sendall(b"".join(encode_request(key, version, self.corr, "bench", body)))
        size = struct.unpack(">i", self._exact(4))[0]
        return decode_response(self._exact(size), key, version)[1]

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


_API_VERSIONS = messages.ApiVersionsRequest(client_software_name="bench", client_software_version="1")


def _plaintext(port: int) -> None:
    c = _Conn(port)
    c.call(18, 3, _API_VERSIONS)
    c.close()


def _plain(port: int) -> None:
    c = _Conn(port)
    c.call(18, 3, _API_VERSIONS)
    c.call(17, 1, messages.SaslHandshakeRequest(mechanism="PLAIN"))
    r = c.call(36, 2, messages.SaslAuthenticateRequest(auth_bytes=encode_plain(USER, PASSWORD)))
    assert r.error_code == 0, r
    c.close()


def _scram(port: int, mech_name: str, cache: dict) -> None:
    mech = MECHANISMS[mech_name]
    c = _Conn(port)
    c.call(18, 3, _API_VERSIONS)
    c.call(17, 1, messages.SaslHandshakeRequest(mechanism=mech_name))
    nonce = new_nonce()
    bare = f"n={USER},r={nonce}"
    r = c.call(36, 2, messages.SaslAuthenticateRequest(auth_bytes=f"n,,{bare}".encode()))
    server_first = bytes(r.auth_bytes)
    sf = parse_server_first(server_first)
    key = (mech_name, sf.salt, sf.iterations)
    salted = cache.get(key)
    if salted is None:
        salted = salt_password(mech, PASSWORD, sf.salt, sf.iterations)
        if cache.get("keep", True):
            cache[key] = salted
    without_proof = f"c=biws,r={sf.nonce}"
    auth_message = f"{bare},{server_first.decode()},{without_proof}".encode()
    proof = base64.b64encode(client_proof(mech, salted, auth_message)).decode()
    r = c.call(36, 2, messages.SaslAuthenticateRequest(auth_bytes=f"{without_proof},p={proof}".encode()))
    assert r.error_code == 0, r
    signature = parse_server_final(bytes(r.auth_bytes))
    assert signature == mech.hmac(mech.hmac(salted, b"Server Key"), auth_message)
    c.close()


def _rate(fn, seconds: float) -> float:
    fn()  # warm up (and fill a cache)
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        fn()
        n += 1
    return n / elapsed


def measure(seconds: float = 3.0) -> dict[str, float]:
    """Setups per second for each row of the module docstring."""
    sasl_port = _free_port()
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{USER}="{PASSWORD}";'
    with tempfile.TemporaryDirectory(prefix="shoal-scram-bench-") as tmp:
        broker = BrokerProcess(
            Path(tmp) / "data",
            [
                f"listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
                "log.level=WARNING",
            ],
        ).start()
        try:
            c = _Conn(broker.port)
            A = messages.AlterUserScramCredentialsRequest
            ups = []
            for mech in MECHANISMS.values():
                salt = os.urandom(32)
                ups.append(
                    A.ScramCredentialUpsertion(
                        name=USER,
                        mechanism=mech.kafka_id,
                        iterations=4096,
                        salt=salt,
                        salted_password=salt_password(mech, PASSWORD, salt, 4096),
                    )
                )
            assert all(r.error_code == 0 for r in c.call(51, 0, A(deletions=[], upsertions=ups)).results)
            c.close()
            out = {"plaintext connections": _rate(lambda: _plaintext(broker.port), seconds)}
            out["PLAIN authentications"] = _rate(lambda: _plain(sasl_port), seconds)
            for name in MECHANISMS:
                cache: dict = {}
                out[f"{name} authentications"] = _rate(lambda n=name, k=cache: _scram(sasl_port, n, k), seconds)
                fresh: dict = {"keep": False}
                out[f"{name} authentications (client salts)"] = _rate(
                    lambda n=name, k=fresh: _scram(sasl_port, n, k), seconds
                )
        finally:
            broker.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measuring time per row")
    args = ap.parse_args()
    rates = measure(args.seconds)
    base = rates["plaintext connections"]
    print(f"{'setup':<44} {'per second':>10}  vs plaintext")
    for name, rate in rates.items():
        print(f"{name:<44} {rate:>10.0f}  {rate / base:>6.0%}")


if __name__ == "__main__":
    main()
