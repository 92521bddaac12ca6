"""JAAS parsing, the SASL settings, and the per-connection SASL state machine (no sockets)."""

from __future__ import annotations

import pytest

from shoal.broker.config.keys import ConfigError
from shoal.broker.config.settings import BrokerConfig
from shoal.broker.security.authenticator import AuthFailed, SaslServer, State
from shoal.broker.security.jaas import PLAIN_MODULE, parse_jaas, plain_users
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from shoal.protocol.sasl.plain import encode_plain
from shoal.protocol.sasl.scram import MECHANISMS, ScramClient, make_credential

SECRET = "s3cr3t-Value"


def test_jaas_options_quoting_and_escapes() -> None:
    text = (
        f"{PLAIN_MODULE} required\n  username=\"admin\" password='single quoted'\n"
        r'  user_alice="with \"quotes\" and \\ backslash" user_bob=bare-word user_carol="a;b=c";'
    )
    e = parse_jaas(text)
    assert (e.module, e.flag) == (PLAIN_MODULE, "required")
    assert e.options == {
        "username": "admin",
        "password": "single quoted",
        "user_alice": 'with "quotes" and \\ backslash',
        "user_bob": "bare-word",
        "user_carol": "a;b=c",
    }
    assert plain_users(e) == {"alice": 'with "quotes" and \\ backslash', "bob": "bare-word", "carol": "a;b=c"}
    assert SECRET not in repr(parse_jaas(f'{PLAIN_MODULE} required user_x="{SECRET}";'))
    assert parse_jaas("org.apache.kafka.common.security.scram.ScramLoginModule optional ;").options == {}


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "empty"),
        (f'{PLAIN_MODULE} required user_a="{SECRET}"', "end with ';'"),
        (f'{PLAIN_MODULE} user_a="{SECRET}";', "control flag"),
        (f'{PLAIN_MODULE} mandatory user_a="{SECRET}";', "control flag"),
        (f'{PLAIN_MODULE} required user_a="{SECRET};', "never closed"),
        (f"{PLAIN_MODULE} required user_a {SECRET};", "needs '=value'"),
        (f"{PLAIN_MODULE} required user_a=unquoted {SECRET} words;", "needs '=value'"),
        (f"{PLAIN_MODULE} required user_a=;{SECRET}", "no value"),
        (f'{PLAIN_MODULE} required user_a="{SECRET}" user_a="{SECRET}";', "twice"),
        (f'{PLAIN_MODULE} required user_a="{SECRET}"; {PLAIN_MODULE} required;', "exactly one"),
        (f'"{PLAIN_MODULE}" required user_a="{SECRET}";', "class name"),
        (f'{PLAIN_MODULE} required "{SECRET}"=x;', "option name"),
        (f'{PLAIN_MODULE} required user_a="{SECRET}\\', "escapes nothing"),
    ],
)
def test_bad_jaas_names_the_setting_never_the_secret(text, reason) -> None:
    with pytest.raises(ConfigError, match=reason) as e:
        parse_jaas(text, "listener.name.sasl_plaintext.plain.sasl.jaas.config")
    assert SECRET not in str(e.value)
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in str(e.value)


def _config(*items: str) -> BrokerConfig:
    base = ["listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0"]
    base.append("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,OTHER:SASL_PLAINTEXT")
    return BrokerConfig.from_sources(overrides=[*base, *items])


def test_settings_and_defaults() -> None:
    c = BrokerConfig.defaults()
    assert c.get("sasl.enabled.mechanisms") == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert c.get("connection.failed.authentication.delay.ms") == 100
    assert c.get("sasl.server.max.receive.size") == 524288
    assert c.get("connections.max.reauth.ms") == 0
    with pytest.raises(ConfigError, match="GSSAPI"):
        _config("sasl.enabled.mechanisms=GSSAPI,PLAIN")
    with pytest.raises(ConfigError, match="KIP-368"):
        _config("connections.max.reauth.ms=60000")


def test_bad_jaas_stops_the_broker_without_the_secret() -> None:
    c = _config(f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_MODULE} required user_a={SECRET}")
    with pytest.raises(ConfigError) as e:
        SaslServer(c)
    assert SECRET not in str(e.value) and "plain.sasl.jaas.config" in str(e.value)


_ANY = {name: api_by_name(name).key for name in ("ApiVersions", "SaslHandshake", "SaslAuthenticate", "Metadata")}


def _server(tmp_path, *items: str) -> SaslServer:
    s = SaslServer(
        _config(
            f'listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_MODULE} required user_alice="alice-pw";',
            "listener.name.other.sasl.enabled.mechanisms=SCRAM-SHA-512",
            *items,
        )
    )
    s.open(tmp_path)
    return s


def test_per_listener_mechanisms(tmp_path) -> None:
    s = _server(tmp_path)
    assert s.mechanisms("SASL_PLAINTEXT") == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert s.mechanisms("other") == ("SCRAM-SHA-512",)
    session = s.session("OTHER", lambda p: None)
    assert session.handshake("PLAIN", 1) == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, ["SCRAM-SHA-512"])
    assert session.state is State.FAILED
    with pytest.raises(KeyError):
        s.session("PLAINTEXT", lambda p: None)


def test_gating_plain_success(tmp_path) -> None:
    done = []
    session = _server(tmp_path).session("SASL_PLAINTEXT", done.append)
    assert session.refusal(_ANY["ApiVersions"]) is None
    assert session.refusal(_ANY["SaslHandshake"]) is None
    assert session.refusal(_ANY["Metadata"]) is not None
    assert session.refusal(_ANY["SaslAuthenticate"]) is not None  # not before the handshake
    assert session.handshake("PLAIN", 1) == (ErrorCode.NONE, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    assert session.refusal(_ANY["SaslAuthenticate"]) is None
    assert session.refusal(_ANY["ApiVersions"]) is not None and session.refusal(_ANY["Metadata"]) is not None
    assert session.authenticate(encode_plain("alice", "alice-pw")) == b""
    assert session.complete and [str(p) for p in done] == ["User:alice"]
    assert session.refusal(_ANY["Metadata"]) is None
    assert session.handshake("PLAIN", 1)[0] == ErrorCode.ILLEGAL_SASL_STATE


def test_gating_scram_and_failure(tmp_path) -> None:
    s = _server(tmp_path)
    mech = MECHANISMS["SCRAM-SHA-256"]
    from shoal.broker.security.scram_store import Upsertion

    assert s.store is not None
    s.store.apply([], [Upsertion("bob", mech.name, make_credential(mech, "bob-pw"))])
    done = []
    session = s.session("SASL_PLAINTEXT", done.append)
    session.handshake("SCRAM-SHA-256", 0)
    assert session.raw  # v0: bare tokens
    client = ScramClient(mech, "bob", "bob-pw")
    client.verify(session.authenticate(client.final(session.authenticate(client.first()))))
    assert [str(p) for p in done] == ["User:bob"]

    failing = s.session("SASL_PLAINTEXT", done.append)
    failing.handshake("SCRAM-SHA-256", 1)
    client = ScramClient(mech, "bob", "wrong")
    with pytest.raises(AuthFailed):
        failing.authenticate(client.final(failing.authenticate(client.first())))
    assert failing.state is State.FAILED and len(done) == 1
    assert failing.refusal(_ANY["SaslAuthenticate"]) is not None
