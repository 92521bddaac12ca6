"""SASL on a connection: what a SASL listener takes before the peer has authenticated.

Kafka's order, which clients rely on: a connection to a SASL listener may send
ApiVersions, then SaslHandshake naming a mechanism, then the mechanism's tokens,
and nothing else until the exchange succeeds. After a SaslHandshake v1 the tokens
travel in SaslAuthenticate requests; after a v0 handshake (still served by Kafka
4.2, for old clients) they travel as bare size-prefixed frames with no request
header, answered the same way (`RawToken`). Any other request before success
closes the connection, as Kafka does; so does a frame above
sasl.server.max.receive.size (the connection frames with that bound until then).

A failed exchange is answered (SASL_AUTHENTICATION_FAILED in SaslAuthenticate, an
UNSUPPORTED_SASL_MECHANISM handshake) after connection.failed.authentication.delay.ms,
and the connection then closes; the shells do the waiting and the closing.

`SaslServer` holds what every connection shares (per-listener mechanisms and PLAIN
users from the JAAS settings, the SCRAM credential store); `SaslSession` is one
connection's state machine. Both are sans-IO. Re-authentication (KIP-368,
connections.max.reauth.ms) is not served: SaslAuthenticate answers a session
lifetime of 0, meaning the session never expires.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from shoal.broker.config.keys import ConfigError
from shoal.broker.security.jaas import PLAIN_MODULE, parse_jaas, plain_users
from shoal.broker.security.mechanisms import AuthFailed, PlainExchange, ScramExchange, failure_message
from shoal.broker.security.principal import USER_TYPE, KafkaPrincipal
from shoal.broker.security.scram_store import ScramStore
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from shoal.protocol.sasl.scram import MECHANISMS, credential_from_salted, salt_password

__all__ = ["SASL_PROTOCOLS", "AuthFailed", "RawToken", "SaslServer", "SaslSession", "State"]

SASL_PROTOCOLS: Final = ("SASL_PLAINTEXT", "SASL_SSL")
_API_VERSIONS: Final = api_by_name("ApiVersions").key
_HANDSHAKE: Final = api_by_name("SaslHandshake").key
_AUTHENTICATE: Final = api_by_name("SaslAuthenticate").key


@dataclass(frozen=True, slots=True)
class RawToken:
    """A server token after a SaslHandshake v0: written with its size prefix and nothing else."""

    data: bytes


class State(enum.Enum):
    HANDSHAKE = "waiting for ApiVersions or SaslHandshake"
    AUTHENTICATE = "waiting for the mechanism's tokens"
    COMPLETE = "authenticated"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class _ListenerSasl:
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]


class SaslServer:
    """The broker's SASL settings per listener and its SCRAM credentials."""

    def __init__(self, config: Any) -> None:
        self.store: ScramStore | None = None
        self._listeners: dict[str, _ListenerSasl] = {}
        self.max_receive = 524288
        self.failure_delay_ms = 100
        sasl = [e for e in getattr(config, "endpoints", ()) if e.security_protocol in SASL_PROTOCOLS]
        if sasl:  # (a stand-in config in unit tests may lack the SASL rows)
            self.max_receive = config.get("sasl.server.max.receive.size")
            self.failure_delay_ms = config.get("connection.failed.authentication.delay.ms")
        for e in sasl:
            self._listeners[e.name] = _listener_sasl(config, e.name)

    def open(self, data_dir: Any) -> None:
        """Load (or create) the SCRAM credential file."""
        store = ScramStore(data_dir)
        store.load()
        self.store = store

    def session(self, listener: str, on_complete: Callable[[KafkaPrincipal], None]) -> SaslSession:
        own = self._listeners.get(listener.upper())
        if own is None:
            raise KeyError(f"listener {listener} does not speak SASL")
        return SaslSession(self, own, on_complete)

    def mechanisms(self, listener: str) -> tuple[str, ...]:
        return self._listeners[listener.upper()].mechanisms

    # -- the same users for the operations listener (HTTP basic auth) ---------------------
    def has_users(self) -> bool:
        """Whether any SASL user is configured: a PLAIN user in a JAAS setting or a SCRAM credential."""
        if any(own.plain_users for own in self._listeners.values()):
            return True
        return self.store is not None and bool(self.store.users())

    def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s, as a PLAIN user of any SASL listener or against any
        of the user's SCRAM credentials (salted as the credential says; the stored key compared)."""
        supplied = password.encode()
        for own in self._listeners.values():
            known = own.plain_users.get(user)
            if known is not None and hmac.compare_digest(known.encode(), supplied):
                return True
        if self.store is None:
            return False
        for name, mech in MECHANISMS.items():
            cred = self.store.get(user, name)
            if cred is not None:
                candidate = credential_from_salted(
                    mech, salt_password(mech, password, cred.salt, cred.iterations), cred.salt, cred.iterations
                )
                if hmac.compare_digest(candidate.stored_key, cred.stored_key):
                    return True
        return False


def _listener_sasl(config: Any, listener: str) -> _ListenerSasl:
    mechanisms = tuple(config.for_listener(listener, "sasl.enabled.mechanisms"))
    users: Mapping[str, str] = {}
    if "PLAIN" in mechanisms:
        scoped = config.for_listener(listener, "sasl.jaas.config", mechanism="PLAIN")
        key = f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
        if scoped is not None:
            users = plain_users(parse_jaas(scoped, key), key)
        else:
            general = config.for_listener(listener, "sasl.jaas.config")
            if general is not None:
                entry = parse_jaas(general, "sasl.jaas.config")
                users = plain_users(entry) if entry.module == PLAIN_MODULE else {}
    # A SCRAM-scoped JAAS value must at least parse (Kafka reads a login module from it).
    for mech in mechanisms:
        if mech in MECHANISMS:
            scoped = config.for_listener(listener, "sasl.jaas.config", mechanism=mech)
            if scoped is not None:
                parse_jaas(scoped, f"listener.name.{listener.lower()}.{mech.lower()}.sasl.jaas.config")
    if not mechanisms:
        raise ConfigError(f"listener.name.{listener.lower()}.sasl.enabled.mechanisms", "must name a mechanism")
    return _ListenerSasl(mechanisms, users)


class SaslSession:
    """One connection's SASL state: which requests it may send now, and its exchange."""

    __slots__ = ("_exchange", "_on_complete", "_own", "_server", "failure", "mechanism", "raw", "state")

    def __init__(self, server: SaslServer, own: _ListenerSasl, on_complete: Callable[[KafkaPrincipal], None]) -> None:
        self._server = server
        self._own = own
        self._on_complete = on_complete
        self._exchange: PlainExchange | ScramExchange | None = None
        self.state = State.HANDSHAKE
        self.mechanism = ""
        self.raw = False  # tokens travel as bare frames (after a SaslHandshake v0)
        self.failure = ""  # what the client was told, once failed

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def max_receive(self) -> int:
        return self._server.max_receive

    @property
    def failure_delay_ms(self) -> int:
        return self._server.failure_delay_ms

    def refusal(self, api_key: int) -> str | None:
        """Why a request with ``api_key`` may not come now (the connection then closes), or None."""
        state = self.state
        if state is State.COMPLETE:
            return None
        if state is State.HANDSHAKE and api_key in (_API_VERSIONS, _HANDSHAKE):
            return None
        if state is State.AUTHENTICATE and api_key == _AUTHENTICATE and not self.raw:
            return None
        return f"API {api_key} is not allowed while SASL authentication is {state.value}"

    def handshake(self, mechanism: str, version: int) -> tuple[ErrorCode, list[str]]:
        """SaslHandshake: the error code and the listener's mechanisms to answer with. Any error
        fails the session (the shell closes the connection after answering)."""
        enabled = list(self._own.mechanisms)
        if self.state is not State.HANDSHAKE:
            return ErrorCode.ILLEGAL_SASL_STATE, enabled
        if mechanism not in enabled:
            self._failed(f"SASL mechanism {mechanism!r} is not enabled")
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled
        self.mechanism = mechanism
        self.raw = version == 0
        if mechanism == "PLAIN":
            self._exchange = PlainExchange(self._own.plain_users)
        else:
            store = self._server.store
            assert store is not None, "SaslServer.open was not called"
            self._exchange = ScramExchange(
                MECHANISMS[mechanism],
                lambda user: store.get(user, mechanism),
                lambda user: store.fake(user, mechanism),
            )
        self.state = State.AUTHENTICATE
        return ErrorCode.NONE, enabled

    def authenticate(self, token: bytes) -> bytes:
        """One client token; the server's answer, or AuthFailed (the session is then failed)."""
        exchange = self._exchange
        if self.state is not State.AUTHENTICATE or exchange is None:
            self._failed("a SASL token outside the exchange")
            raise AuthFailed(self.failure)
        try:
            answer = exchange.evaluate(token)
        except AuthFailed as e:
            self._failed(str(e))
            raise
        if exchange.complete:
            self.state = State.COMPLETE
            self._on_complete(KafkaPrincipal(USER_TYPE, exchange.username))
        return answer

    def _failed(self, message: str) -> None:
        self.state = State.FAILED
        self.failure = message or failure_message(self.mechanism)
