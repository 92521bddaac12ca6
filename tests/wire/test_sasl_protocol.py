"""SASL on the wire, with raw frames: what a SASL listener takes before authentication, the
handshake (v0 bare tokens and v1 SaslAuthenticate), failures (same message, delayed, closed),
malformed SCRAM messages, oversized frames, and the SCRAM credential admin APIs' errors."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode
from shoal.protocol.sasl.plain import encode_plain
from shoal.protocol.sasl.scram import MECHANISMS, ScramClient, salt_password
from shoal.testing import EmbeddedBroker
from tests.support.brokers import RawClient

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";'
DELAY_MS = 300
MAX_RECEIVE = 2048


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    eb = EmbeddedBroker(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SCRAMONLY://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
            "SCRAMONLY:SASL_PLAINTEXT",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.scramonly.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "connection.failed.authentication.delay.ms": str(DELAY_MS),
            "sasl.server.max.receive.size": str(MAX_RECEIVE),
        },
        data_dir=tmp_path_factory.mktemp("sasl") / "d",
    )
    with eb:
        with RawClient(eb.listener_port("PLAINTEXT")) as c:
            r = c.call(
                "AlterUserScramCredentials", 0, body=_alter(upserts=[("bob", 1, "bob-pw"), ("bob", 2, "bob-pw")])
            )
        assert [x.error_code for x in r.results] == [0]
        yield eb


def _alter(upserts=(), deletes=(), iterations=4096):
    cls = messages.AlterUserScramCredentialsRequest
    ups = []
    for name, mech_id, pw in upserts:
        salt = os.urandom(16)
        mech = next((m for m in MECHANISMS.values() if m.kafka_id == mech_id), MECHANISMS["SCRAM-SHA-256"])
        ups.append(
            cls.ScramCredentialUpsertion(
                name=name,
                mechanism=mech_id,
                iterations=iterations,
                salt=salt,
                salted_password=salt_password(mech, pw, salt, 4096),
            )
        )
    dels = [cls.ScramCredentialDeletion(name=n, mechanism=m) for n, m in deletes]
    return cls(deletions=dels, upsertions=ups)


def _sasl(broker, name="SASL_PLAINTEXT") -> RawClient:
    return RawClient(broker.listener_port(name))


def _closed(c: RawClient) -> bool:
    """True if the broker closed the connection (nothing more arrives)."""
    try:
        c.sock.settimeout(5)
        return c.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _authenticate(c: RawClient, token: bytes):
    return c.call("SaslAuthenticate", 2, auth_bytes=token)


def _scram_v1(c: RawClient, mech: str, user: str, pw: str):
    """Handshake v1 and a SCRAM exchange; the last SaslAuthenticate answer."""
    assert c.call("SaslHandshake", 1, mechanism=mech).error_code == 0
    client = ScramClient(MECHANISMS[mech], user, pw)
    first = _authenticate(c, client.first())
    if first.error_code:
        return first
    final = _authenticate(c, client.final(first.auth_bytes))
    if final.error_code == 0:
        client.verify(final.auth_bytes)
    return final


def _raw(c: RawClient, token: bytes) -> bytes:
    c.sock.sendall(struct.pack(">i", len(token)) + token)
    return c.recv_frame()


def _metadata_ok(c: RawClient) -> bool:
    return c.call("Metadata", 12, topics=None, allow_auto_topic_creation=False).brokers != []


# -- before authentication ---------------------------------------------------------------


@pytest.mark.parametrize("after", ["nothing", "ApiVersions", "handshake"])
def test_requests_before_authentication_close_the_connection(broker, after) -> None:
    with _sasl(broker) as c:
        if after == "ApiVersions":
            c.call("ApiVersions", 3, client_software_name="t", client_software_version="1")
        elif after == "handshake":
            assert c.call("SaslHandshake", 1, mechanism="PLAIN").error_code == 0
        c.send("Metadata", 12, messages.MetadataRequest(topics=None, allow_auto_topic_creation=False))
        assert _closed(c)


def test_api_versions_advertises_sasl_and_scram_apis(broker) -> None:
    with _sasl(broker) as c:
        r = c.call("ApiVersions", 3, client_software_name="t", client_software_version="1")
    keys = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert keys[17] == (0, 1) and keys[36] == (0, 2) and keys[50] == (0, 0) and keys[51] == (0, 0)


@pytest.mark.parametrize(
    "listener,mech,enabled",
    [
        ("SASL_PLAINTEXT", "GSSAPI", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
        ("SCRAMONLY", "PLAIN", ["SCRAM-SHA-512"]),
    ],
)
def test_unknown_mechanism(broker, listener, mech, enabled) -> None:
    with _sasl(broker, listener) as c:
        started = time.monotonic()
        r = c.call("SaslHandshake", 1, mechanism=mech)
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
        assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert list(r.mechanisms) == enabled
        assert _closed(c)


def test_oversized_frame_before_authentication_closes(broker) -> None:
    with _sasl(broker) as c:
        c.sock.sendall(struct.pack(">i", MAX_RECEIVE + 1) + b"\0" * 64)
        assert _closed(c)
    # After authentication the connection takes frames up to socket.request.max.bytes.
    with _sasl(broker) as c:
        assert c.call("SaslHandshake", 1, mechanism="PLAIN").error_code == 0
        assert _authenticate(c, encode_plain("alice", "alice-pw")).error_code == 0
        big = messages.MetadataRequest(
            topics=[messages.MetadataRequest.MetadataRequestTopic(name=f"t{i:05d}") for i in range(400)],
            allow_auto_topic_creation=False,
        )
        r = c.call("Metadata", 12, body=big)
        assert len(r.topics) == 400


# -- successful exchanges -------------------------------------------------------------------


def test_plain_v1_then_requests(broker) -> None:
    with _sasl(broker) as c:
        c.call("ApiVersions", 3, client_software_name="t", client_software_version="1")
        hs = c.call("SaslHandshake", 1, mechanism="PLAIN")
        assert hs.error_code == 0 and "PLAIN" in hs.mechanisms
        r = _authenticate(c, encode_plain("alice", "alice-pw"))
        assert (r.error_code, r.error_message, bytes(r.auth_bytes), r.session_lifetime_ms) == (0, None, b"", 0)
        assert _metadata_ok(c)
        again = _authenticate(c, encode_plain("alice", "alice-pw"))  # no re-authentication
        assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert c.call("SaslHandshake", 1, mechanism="PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert _metadata_ok(c)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_v1(broker, mech) -> None:
    with _sasl(broker) as c:
        r = _scram_v1(c, mech, "bob", "bob-pw")
        assert r.error_code == 0 and bytes(r.auth_bytes).startswith(b"v=")
        assert _metadata_ok(c)


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256"])
def test_handshake_v0_bare_tokens(broker, mech) -> None:
    with _sasl(broker) as c:
        assert c.call("SaslHandshake", 0, mechanism=mech).error_code == 0
        if mech == "PLAIN":
            assert _raw(c, encode_plain("alice", "alice-pw")) == b""
        else:
            client = ScramClient(MECHANISMS[mech], "bob", "bob-pw")
            client.verify(_raw(c, client.final(_raw(c, client.first()))))
        assert _metadata_ok(c)


def test_handshake_v0_failure_closes_without_answer(broker) -> None:
    with _sasl(broker) as c:
        assert c.call("SaslHandshake", 0, mechanism="PLAIN").error_code == 0
        c.sock.sendall(struct.pack(">i", 16) + encode_plain("alice", "wrong-pw!").ljust(16, b"x"))
        started = time.monotonic()
        assert _closed(c)
        assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mech", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_and_unknown_user_look_the_same(broker, mech) -> None:
    answers = []
    for user, pw in (("alice" if mech == "PLAIN" else "bob", "wrong"), ("nobody", "wrong")):
        with _sasl(broker) as c:
            started = time.monotonic()
            if mech == "PLAIN":
                assert c.call("SaslHandshake", 1, mechanism=mech).error_code == 0
                r = _authenticate(c, encode_plain(user, pw))
            else:
                r = _scram_v1(c, mech, user, pw)
            assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
            answers.append((r.error_code, r.error_message))
            assert _closed(c)
    assert answers[0] == answers[1]
    assert answers[0][0] == ErrorCode.SASL_AUTHENTICATION_FAILED and mech in answers[0][1]


@pytest.mark.parametrize(
    "first",
    [b"garbage", b"y,,n=bob,r=abc", b"p=tls-unique,,n=bob,r=abc", b"n,,r=abc", b"n,,n=bob", b"\xff\xfe\xfd"],
)
def test_malformed_client_first(broker, first) -> None:
    with _sasl(broker) as c:
        assert c.call("SaslHandshake", 1, mechanism="SCRAM-SHA-256").error_code == 0
        r = _authenticate(c, first)
        assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert _closed(c)


@pytest.mark.parametrize("how", ["wrong nonce", "bad proof", "bad base64", "missing proof", "binding flag"])
def test_malformed_client_final(broker, how) -> None:
    with _sasl(broker) as c:
        assert c.call("SaslHandshake", 1, mechanism="SCRAM-SHA-256").error_code == 0
        client = ScramClient(MECHANISMS["SCRAM-SHA-256"], "bob", "bob-pw")
        server_first = bytes(_authenticate(c, client.first()).auth_bytes)
        final = client.final(server_first)
        head, _, proof = final.rpartition(b",p=")
        final = {
            "wrong nonce": final.replace(b",r=", b",r=X"),
            "bad proof": head + b",p=" + bytes(reversed(proof)),
            "bad base64": head + b",p=%%%",
            "missing proof": head,
            "binding flag": final.replace(b"c=biws", b"c=eSws"),  # base64("y,,")
        }[how]
        r = _authenticate(c, final)
        assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert _closed(c)


def test_a_failed_login_is_answered_before_the_close_and_closes_when_the_client_does(broker) -> None:
    """The error is not followed at once by the FIN: kafka-python drops an answer it reads together
    with EOF and reports a bare disconnect. The broker closes when the client closes its side."""
    with _sasl(broker) as c:
        assert c.call("SaslHandshake", 1, mechanism="SCRAM-SHA-256").error_code == 0
        client = ScramClient(MECHANISMS["SCRAM-SHA-256"], "bob", "bob-pw")
        final = client.final(bytes(_authenticate(c, client.first()).auth_bytes))
        head, _, proof = final.rpartition(b",p=")
        assert (
            _authenticate(c, head + b",p=" + bytes(reversed(proof))).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        )
        c.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            c.sock.recv(1)  # neither more bytes nor EOF yet
        c.sock.shutdown(socket.SHUT_WR)
        t0 = time.monotonic()
        assert _closed(c)
        assert time.monotonic() - t0 < 0.9  # at the client's close, not at the linger's end (1 s)


def test_sasl_apis_on_a_plaintext_listener(broker) -> None:
    with RawClient(broker.listener_port("PLAINTEXT")) as c:
        assert c.call("SaslHandshake", 1, mechanism="PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert _authenticate(c, b"x").error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert _metadata_ok(c)


# -- credential admin ---------------------------------------------------------------------------


def test_alter_user_scram_credentials_errors(broker) -> None:
    cls = messages.AlterUserScramCredentialsRequest
    with RawClient(broker.listener_port("PLAINTEXT")) as c:

        def alter(**kw):
            return {
                r.user: (r.error_code, r.error_message) for r in c.call("AlterUserScramCredentials", 0, **kw).results
            }

        low = _alter(upserts=[("low", 1, "pw")], iterations=4095)
        high = _alter(upserts=[("high", 1, "pw")], iterations=16385)
        absurd = _alter(upserts=[("absurd", 2, "pw")], iterations=2**31 - 1)
        for body, user in ((low, "low"), (high, "high"), (absurd, "absurd")):
            r = c.call("AlterUserScramCredentials", 0, body=body).results
            assert [(x.user, x.error_code) for x in r] == [(user, ErrorCode.UNACCEPTABLE_CREDENTIAL)]
        r = alter(deletions=[cls.ScramCredentialDeletion(name="carol", mechanism=9)], upsertions=[])
        assert r["carol"][0] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        r = alter(deletions=[cls.ScramCredentialDeletion(name="nobody", mechanism=1)], upsertions=[])
        assert r["nobody"][0] == ErrorCode.RESOURCE_NOT_FOUND
        dup = _alter(upserts=[("dave", 1, "a"), ("dave", 1, "b"), ("erin", 1, "e")])
        r = {x.user: x.error_code for x in c.call("AlterUserScramCredentials", 0, body=dup).results}
        assert r == {"dave": ErrorCode.DUPLICATE_RESOURCE, "erin": 0}
        r = alter(deletions=[cls.ScramCredentialDeletion(name="", mechanism=1)], upsertions=[])
        assert r[""][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL

        D = messages.DescribeUserScramCredentialsRequest
        d = c.call(
            "DescribeUserScramCredentials", 0, users=[D.UserName(name=n) for n in ("erin", "dave", "low", "erin")]
        )
        got = {x.user: (x.error_code, [(i.mechanism, i.iterations) for i in x.credential_infos]) for x in d.results}
        assert got == {
            "erin": (ErrorCode.DUPLICATE_RESOURCE, []),
            "dave": (ErrorCode.RESOURCE_NOT_FOUND, []),  # nothing of a refused user was applied
            "low": (ErrorCode.RESOURCE_NOT_FOUND, []),
        }
        everyone = {
            x.user: [i.mechanism for i in x.credential_infos]
            for x in c.call("DescribeUserScramCredentials", 0, users=None).results
        }
        assert everyone["bob"] == [1, 2] and everyone["erin"] == [1]
        # Deleting works, and erin can no longer log in.
        assert alter(deletions=[cls.ScramCredentialDeletion(name="erin", mechanism=1)], upsertions=[]) == {
            "erin": (0, None)
        }
    with _sasl(broker) as c:
        assert _scram_v1(c, "SCRAM-SHA-256", "erin", "e").error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
