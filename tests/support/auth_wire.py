"""Raw-wire connections that carry a principal: SASL (PLAIN or SCRAM, handshake v1 and
SaslAuthenticate) and TLS with a client certificate, for tests that ask the broker things
as a given user (the ACL matrix, SASL_SSL bad input).

``RawClient`` opens a plain socket; these helpers wrap it in TLS and/or authenticate on it
before the caller sends anything, and raise if the broker refuses the login (a test that
expects a refusal should see it there, not in a later request).
"""

from __future__ import annotations

import os
import ssl

from shoal.protocol import messages
from shoal.protocol.sasl.plain import encode_plain
from shoal.protocol.sasl.scram import MECHANISMS, ScramClient, salt_password
from tests.support.brokers import RawClient
from tests.support.tls import TlsFiles


def tls_context(files: TlsFiles, client: str | None = None) -> ssl.SSLContext:
    """A client context trusting the test CA, presenting ``client``'s certificate if given."""
    ctx = ssl.create_default_context(cafile=str(files.ca))
    if client is not None:
        ctx.load_cert_chain(str(files.client_cert(client)), str(files.client_key(client)))
    return ctx


def wrap_tls(c: RawClient, ctx: ssl.SSLContext) -> RawClient:
    c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
    return c


def sasl_login(c: RawClient, mechanism: str, user: str, password: str) -> RawClient:
    """SaslHandshake v1 and the exchange on ``c``; raises AssertionError when refused."""
    hs = c.call("SaslHandshake", 1, mechanism=mechanism)
    assert hs.error_code == 0, f"handshake refused: {hs.error_code}"
    if mechanism == "PLAIN":
        r = c.call("SaslAuthenticate", 2, auth_bytes=encode_plain(user, password))
        assert r.error_code == 0, f"PLAIN login of {user} refused: {r.error_message}"
        return c
    client = ScramClient(MECHANISMS[mechanism], user, password)
    first = c.call("SaslAuthenticate", 2, auth_bytes=client.first())
    assert first.error_code == 0, f"SCRAM login of {user} refused: {first.error_message}"
    final = c.call("SaslAuthenticate", 2, auth_bytes=client.final(first.auth_bytes))
    assert final.error_code == 0, f"SCRAM login of {user} refused: {final.error_message}"
    client.verify(final.auth_bytes)
    return c


def connect(
    port: int,
    *,
    tls: ssl.SSLContext | None = None,
    sasl: tuple[str, str, str] | None = None,
) -> RawClient:
    """A RawClient to ``port``, over TLS with ``tls``, logged in with ``sasl`` = (mechanism, user, password)."""
    c = RawClient(port)
    try:
        if tls is not None:
            wrap_tls(c, tls)
        if sasl is not None:
            sasl_login(c, *sasl)
    except BaseException:
        c.close()
        raise
    return c


def scram_upserts(users: dict[str, str], iterations: int = 4096) -> messages.AlterUserScramCredentialsRequest:
    """An AlterUserScramCredentials body giving each user both SCRAM credentials."""
    cls = messages.AlterUserScramCredentialsRequest
    ups = []
    for user, password in users.items():
        for name in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            mech = MECHANISMS[name]
            salt = os.urandom(16)
            ups.append(
                cls.ScramCredentialUpsertion(
                    name=user,
                    mechanism=mech.kafka_id,
                    iterations=iterations,
                    salt=salt,
                    salted_password=salt_password(mech, password, salt, iterations),
                )
            )
    return cls(deletions=[], upsertions=ups)
