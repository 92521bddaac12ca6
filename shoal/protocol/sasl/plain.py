"""PLAIN (RFC 4616): one client message, ``authzid NUL authcid NUL password``.

Kept beside SCRAM so the client builds and the broker parses the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PlainError", "PlainToken", "encode_plain", "parse_plain"]


class PlainError(ValueError):
    """A PLAIN token that is not ``authzid NUL authcid NUL password`` (the message never holds the password)."""


@dataclass(frozen=True, slots=True)
class PlainToken:
    authzid: str
    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"PlainToken(authzid={self.authzid!r}, username={self.username!r}, password=***)"


def encode_plain(username: str, password: str, authzid: str = "") -> bytes:
    return b"\0".join(s.encode() for s in (authzid, username, password))


def parse_plain(token: bytes) -> PlainToken:
    parts = bytes(token).split(b"\0")
    if len(parts) != 3:
        raise PlainError("a PLAIN token has three NUL-separated parts")
    try:
        authzid, username, password = (p.decode() for p in parts)
    except UnicodeDecodeError:
        raise PlainError("a PLAIN token is UTF-8") from None
    return PlainToken(authzid, username, password)
