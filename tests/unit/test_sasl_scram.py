"""SCRAM (RFC 5802/7677) and PLAIN: messages, crypto, and both sides' sans-IO exchanges."""

from __future__ import annotations

import base64

import pytest

from shoal.broker.security.mechanisms import AuthFailed, PlainExchange, ScramExchange, failure_message
from shoal.broker.security.scram_store import ScramStore
from shoal.protocol.sasl.plain import PlainError, encode_plain, parse_plain
from shoal.protocol.sasl.scram import (
    MECHANISMS,
    ScramClient,
    ScramError,
    make_credential,
    parse_client_final,
    parse_client_first,
    parse_server_first,
    saslname_encode,
)

SHA256 = MECHANISMS["SCRAM-SHA-256"]
SHA512 = MECHANISMS["SCRAM-SHA-512"]

# RFC 7677, section 3: user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_client_side() -> None:
    c = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert c.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    c.verify(RFC_SERVER_FINAL)
    with pytest.raises(ScramError, match="signature"):
        c.verify(b"v=" + base64.b64encode(b"\0" * 32))


def test_rfc7677_server_side() -> None:
    cred = make_credential(SHA256, "pencil", 4096, salt=RFC_SALT)
    server = ScramExchange(SHA256, {"user": cred}.get, lambda u: pytest.fail("not a fake user"), nonce=RFC_SERVER_NONCE)
    assert server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == RFC_SERVER_FIRST
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("mech", [SHA256, SHA512], ids=lambda m: m.name)
@pytest.mark.parametrize("user", ["alice", "we,ird=name"])
def test_client_and_server_agree(mech, user) -> None:
    cred = make_credential(mech, "s3cret", 4096)
    server = ScramExchange(mech, {user: cred}.get, lambda u: pytest.fail("fake"))
    client = ScramClient(mech, user, "s3cret")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.username == user


def _run(server: ScramExchange, client: ScramClient) -> None:
    server.evaluate(client.final(server.evaluate(client.first())))


def test_wrong_password_and_unknown_user_fail_alike(tmp_path) -> None:
    store = ScramStore(tmp_path)
    store.load()
    cred = make_credential(SHA256, "right", 4096)

    def server() -> ScramExchange:
        return ScramExchange(SHA256, {"alice": cred}.get, lambda u: store.fake(u, SHA256.name))

    msgs = []
    for user, pw in (("alice", "wrong"), ("mallory", "whatever")):
        with pytest.raises(AuthFailed) as e:
            _run(server(), ScramClient(SHA256, user, pw))
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1] == failure_message("SCRAM-SHA-256")
    # An unknown user's server-first looks like a real one: a salt, 4096 iterations, stable per user.
    first = [parse_server_first(server().evaluate(ScramClient(SHA256, "mallory", "x").first())) for _ in range(2)]
    assert first[0].salt == first[1].salt and len(first[0].salt) == 32 and first[0].iterations == 4096
    other = parse_server_first(server().evaluate(ScramClient(SHA256, "eve", "x").first()))
    assert other.salt != first[0].salt
    # ... and stays the same after a restart (the key is stored).
    again = ScramStore(tmp_path)
    again.load()
    assert again.fake("mallory", SHA256.name).salt == first[0].salt


@pytest.mark.parametrize(
    "first",
    [
        b"y,,n=alice,r=abc",  # client supports channel binding
        b"p=tls-unique,,n=alice,r=abc",  # client requires channel binding
        b"n,,r=abc",  # no user
        b"n,,n=alice",  # no nonce
        b"n,,n=,r=abc",
        b"n,,n=al=ice,r=abc",  # a bare '=' in a saslname
        b"n,,m=ext,n=alice,r=abc",
        b"n,,n=alice,r=a b",  # unprintable nonce
        b"garbage",
        b"\xff\xfe",
        b"n,a=bob,n=alice,r=abc",  # authorization id other than the user
        b"n,,n=alice,r=abc,tokenauth=true",  # delegation tokens: not served
    ],
)
def test_malformed_client_first_fails(first) -> None:
    cred = make_credential(SHA256, "pw", 4096)
    server = ScramExchange(SHA256, {"alice": cred}.get, lambda u: cred)
    with pytest.raises(AuthFailed, match="invalid credentials"):
        server.evaluate(first)


def _final_variants() -> list:
    return [
        # (the nonce is random: its last character changed to one it is not)
        ("wrong nonce", lambda f, n: f.replace(n.encode(), n[:-1].encode() + (b"Y" if n.endswith("X") else b"X"))),
        ("bad proof", lambda f, n: f[: f.index(b",p=") + 3] + base64.b64encode(b"\1" * 32)),
        ("bad base64", lambda f, n: f[: f.index(b",p=") + 3] + b"!!notbase64"),
        ("short proof", lambda f, n: f[: f.index(b",p=") + 3] + base64.b64encode(b"\1" * 5)),
        ("no proof", lambda f, n: f[: f.index(b",p=")]),
        ("binding changed", lambda f, n: f.replace(b"c=biws", b"c=" + base64.b64encode(b"y,,"))),
        ("no binding", lambda f, n: f[f.index(b"r=") :]),
    ]


@pytest.mark.parametrize("name,mutate", _final_variants(), ids=[v[0] for v in _final_variants()])
def test_malformed_client_final_fails(name, mutate) -> None:
    cred = make_credential(SHA256, "pw", 4096)
    server = ScramExchange(SHA256, {"alice": cred}.get, lambda u: cred)
    client = ScramClient(SHA256, "alice", "pw")
    server_first = server.evaluate(client.first())
    final = client.final(server_first)
    nonce = parse_server_first(server_first).nonce
    with pytest.raises(AuthFailed, match="invalid credentials"):
        server.evaluate(mutate(final, nonce))
    with pytest.raises(AuthFailed):  # failed stays failed
        server.evaluate(final)


def test_client_refuses_a_bad_server() -> None:
    c = ScramClient(SHA256, "u", "p", nonce="abc")
    with pytest.raises(ScramError, match="nonce"):
        c.final(b"r=xyz123,s=AAAA,i=4096")
    with pytest.raises(ScramError, match="nonce"):
        c.final(b"r=abc,s=AAAA,i=4096")  # the server added nothing
    with pytest.raises(ScramError, match="iterations"):
        c.final(b"r=abcdef,s=AAAA,i=10")
    with pytest.raises(ScramError, match="base64"):
        c.final(b"r=abcdef,s=###,i=4096")
    with pytest.raises(ScramError, match="refused"):
        c.final(b"e=other-error")


def test_message_parsing() -> None:
    f = parse_client_first(b"n,,n=a=2Cb=3Dc,r=nonce,ext=1")
    assert (f.username, f.nonce, f.extensions, f.bare) == ("a,b=c", "nonce", {"ext": "1"}, "n=a=2Cb=3Dc,r=nonce,ext=1")
    assert saslname_encode("a,b=c") == "a=2Cb=3Dc"
    final = parse_client_final(b"c=biws,r=xyz,p=AAAA")
    assert (final.channel_binding, final.nonce, final.proof, final.without_proof) == (
        b"n,,",
        "xyz",
        b"\0\0\0",
        "c=biws,r=xyz",
    )


def test_plain() -> None:
    assert parse_plain(encode_plain("alice", "pw")).password == "pw"
    assert "pw" not in repr(parse_plain(encode_plain("alice", "pw")))
    for bad in (b"alice\0pw", b"a\0b\0c\0d", b"\xff\0a\0b"):
        with pytest.raises(PlainError):
            parse_plain(bad)
    users = {"alice": "alice-pw"}
    assert PlainExchange(users).evaluate(b"\0alice\0alice-pw") == b""
    assert PlainExchange(users).evaluate(b"alice\0alice\0alice-pw") == b""
    messages = set()
    for token in (b"\0alice\0wrong", b"\0bob\0alice-pw", b"bob\0alice\0alice-pw", b"\0\0", b"junk"):
        with pytest.raises(AuthFailed) as e:
            PlainExchange(users).evaluate(token)
        messages.add(str(e.value))
    assert messages == {failure_message("PLAIN")}
