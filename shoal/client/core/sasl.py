"""The client's SASL login, run on every new connection right after ApiVersions.

librdkafka's settings name it: ``security.protocol=SASL_PLAINTEXT``,
``sasl.mechanism`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), ``sasl.username`` and
``sasl.password``. The exchange is Kafka's: SaslHandshake v1 naming the mechanism, then
the mechanism's tokens in SaslAuthenticate requests (the token formats and the SCRAM
crypto are ``shoal.protocol.sasl``'s, shared with the broker). A SCRAM login also checks
the server's final signature, so a broker that does not hold the credential is refused
too. Any failure raises `SaslAuthenticationError`, which the clients do not retry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from shoal.client.core.errors import SaslAuthenticationError
from shoal.protocol import messages
from shoal.protocol.sasl.plain import encode_plain
from shoal.protocol.sasl.scram import MECHANISMS, ScramClient, ScramError

__all__ = ["SASL_MECHANISMS", "SASL_PROTOCOLS", "SaslLogin", "authenticate", "login_from_config"]

SASL_PROTOCOLS: Final = ("SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class SaslLogin:
    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"SaslLogin({self.mechanism}, {self.username!r})"


def login_from_config(cfg: Any) -> SaslLogin | None:
    """The login a client's (checked) settings ask for, or None for a protocol without SASL."""
    if cfg["security.protocol"] not in SASL_PROTOCOLS:
        return None
    return SaslLogin(cfg["sasl.mechanism"], cfg["sasl.username"], cfg["sasl.password"])


async def authenticate(conn: Any, login: SaslLogin) -> None:
    """Log in on ``conn`` (a BrokerConnection that has just negotiated versions)."""
    where = f"{conn.host}:{conn.port}"
    if not conn.supports("SaslHandshake", 1) or not conn.supports("SaslAuthenticate"):
        raise SaslAuthenticationError(f"{where} does not offer SASL (SaslHandshake v1 and SaslAuthenticate)")
    hs = await conn.request("SaslHandshake", messages.SaslHandshakeRequest(mechanism=login.mechanism), version=1)
    if hs.error_code:
        raise SaslAuthenticationError(
            f"{where} refused SASL mechanism {login.mechanism} (it offers {', '.join(hs.mechanisms) or 'none'})"
        )
    version = conn.version("SaslAuthenticate")

    async def step(token: bytes) -> bytes:
        r = await conn.request("SaslAuthenticate", messages.SaslAuthenticateRequest(auth_bytes=token), version=version)
        if r.error_code:
            raise SaslAuthenticationError(f"{where}: {r.error_message or 'SASL authentication failed'}")
        return bytes(r.auth_bytes)

    if login.mechanism == "PLAIN":
        await step(encode_plain(login.username, login.password))
        return
    mech = MECHANISMS.get(login.mechanism)
    if mech is None:
        raise SaslAuthenticationError(f"unknown SASL mechanism {login.mechanism}")
    client = ScramClient(mech, login.username, login.password)
    try:
        server_first = await step(client.first())
        server_final = await step(client.final(server_first))
        client.verify(server_final)
    except ScramError as e:
        raise SaslAuthenticationError(f"{where}: {e}") from None
