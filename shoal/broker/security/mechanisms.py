"""The broker's side of each SASL mechanism: fed client tokens, answers server tokens.

Sans-IO: `evaluate(token)` returns the next server token, or raises `AuthFailed`. When
an exchange fails the client learns one thing, the same for every cause (an unknown
user, a wrong password, a malformed message): that mechanism's `failure_message`. Why
it failed goes to the broker's DEBUG log without user names or secrets.

An unknown SCRAM user is taken through the whole exchange with a stand-in credential
(`ScramStore.fake`), so the server-first message looks like a real user's and the
failure comes at the same step, after the same work, as a wrong password's.
"""

from __future__ import annotations

import base64
import hmac
import logging
from collections.abc import Callable, Mapping

from shoal.protocol.sasl.plain import PlainError, parse_plain
from shoal.protocol.sasl.scram import (
    ClientFirst,
    ScramCredential,
    ScramError,
    ScramMechanism,
    ServerFirst,
    new_nonce,
    parse_client_final,
    parse_client_first,
    recovered_client_key_matches,
    server_signature,
)

__all__ = ["AuthFailed", "PlainExchange", "ScramExchange", "failure_message"]

log = logging.getLogger("shoal.security.sasl")


def failure_message(mechanism: str) -> str:
    return f"Authentication failed: invalid credentials for SASL mechanism {mechanism}"


class AuthFailed(Exception):
    """The exchange failed; ``str(e)`` is what the client is told (never which part was wrong)."""


class PlainExchange:
    """PLAIN: one client token, checked against the listener's JAAS users."""

    __slots__ = ("_users", "complete", "username")
    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username = ""

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise AuthFailed(failure_message(self.mechanism))
        try:
            t = parse_plain(token)
        except PlainError as e:
            log.debug("PLAIN: %s", e)
            raise AuthFailed(failure_message(self.mechanism)) from None
        expected = self._users.get(t.username)
        # Compared in constant time, against a stand-in when the user is unknown.
        ok = hmac.compare_digest(t.password.encode(), (expected if expected is not None else "\0" * 16).encode())
        if not ok or expected is None or not t.username or t.authzid not in ("", t.username):
            log.debug("PLAIN: credentials refused")
            raise AuthFailed(failure_message(self.mechanism))
        self.complete = True
        self.username = t.username
        return b""


class ScramExchange:
    """SCRAM-SHA-256/512, the server's two steps (RFC 5802 section 5)."""

    __slots__ = (
        "_combined",
        "_cred",
        "_failed",
        "_fake",
        "_first",
        "_known",
        "_lookup",
        "_nonce",
        "_server_first",
        "complete",
        "mech",
        "username",
    )

    def __init__(
        self,
        mech: ScramMechanism,
        lookup: Callable[[str], ScramCredential | None],
        fake: Callable[[str], ScramCredential],
        nonce: str | None = None,
    ) -> None:
        self.mech = mech
        self._lookup = lookup
        self._fake = fake
        self._nonce = nonce
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._combined = ""
        self._cred: ScramCredential | None = None
        self._known = False
        self._failed = False  # one failure ends the exchange
        self.complete = False
        self.username = ""

    @property
    def mechanism(self) -> str:
        return self.mech.name

    def _fail(self, why: str) -> AuthFailed:
        log.debug("%s: %s", self.mech.name, why)
        self._failed = True
        return AuthFailed(failure_message(self.mech.name))

    def evaluate(self, token: bytes) -> bytes:
        if self.complete or self._failed:
            raise self._fail("a token after the exchange ended")
        if self._first is None:
            return self._client_first(token)
        return self._client_final(token)

    def _client_first(self, token: bytes) -> bytes:
        try:
            first = parse_client_first(token)
        except ScramError as e:
            raise self._fail(str(e)) from None
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise self._fail("delegation tokens are not served")
        if first.authzid and first.authzid != first.username:
            raise self._fail("an authorization id other than the user name")
        cred = self._lookup(first.username)
        self._known = cred is not None
        self._cred = cred if cred is not None else self._fake(first.username)
        self._first = first
        nonce = self._combined = first.nonce + (self._nonce or new_nonce())
        self._server_first = ServerFirst(nonce, self._cred.salt, self._cred.iterations).encode()
        return self._server_first.encode()

    def _client_final(self, token: bytes) -> bytes:
        first, cred = self._first, self._cred
        assert first is not None and cred is not None
        try:
            final = parse_client_final(token)
        except ScramError as e:
            raise self._fail(str(e)) from None
        if final.nonce != self._combined:
            raise self._fail("the nonce of the final message is not the one agreed")
        if final.channel_binding != first.gs2_header.encode():
            raise self._fail("the channel binding does not repeat the gs2 header")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        ok = recovered_client_key_matches(self.mech, cred, auth_message, final.proof)
        if not ok or not self._known:
            raise self._fail("the proof does not match")
        self.complete = True
        self.username = first.username
        return f"v={_b64(server_signature(self.mech, cred.server_key, auth_message))}".encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
