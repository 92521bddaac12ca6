"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): messages, key derivation, the client.

The exchange is four messages::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce + server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<nonce>,p=<base64 proof>
    server-final   v=<base64 server signature>   (or e=<error>)

What a server keeps per user is a `ScramCredential` (salt, StoredKey, ServerKey,
iterations), from which a password cannot be recovered; a client proves it knows
the password by sending ClientKey XOR HMAC(StoredKey, AuthMessage), which the
server undoes and hashes back to StoredKey. Kafka's AlterUserScramCredentials
carries the salted password (never the password), so `credential_from_salted`
is what the broker stores from it. Channel binding is not offered (Kafka does
not either): a client-first message must start with ``n,``.

Parsing is strict and every failure is a `ScramError` whose text never holds a
secret; `ScramClient` is the client's sans-IO side of the exchange (the
broker's side, which needs the stored credentials, is in the broker).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MAX_ITERATIONS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "ClientFinal",
    "ClientFirst",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramMechanism",
    "ServerFirst",
    "client_proof",
    "credential_from_salted",
    "make_credential",
    "mechanism_by_id",
    "mechanism_by_name",
    "new_nonce",
    "parse_client_final",
    "parse_client_first",
    "parse_server_final",
    "parse_server_first",
    "recovered_client_key_matches",
    "salt_password",
    "server_signature",
]

# Kafka's bounds on a credential's iteration count (AlterUserScramCredentials refuses others).
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384


class ScramError(ValueError):
    """A SCRAM message that does not parse, or an exchange that cannot go on."""


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str  # as in SaslHandshake: "SCRAM-SHA-256"
    hash_name: str  # hashlib's name
    kafka_id: int  # the int8 of Describe/AlterUserScramCredentials

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_SHA_256: Final = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512: Final = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: Final = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


def mechanism_by_name(name: str) -> ScramMechanism | None:
    return MECHANISMS.get(name.upper())


def mechanism_by_id(kafka_id: int) -> ScramMechanism | None:
    return next((m for m in MECHANISMS.values() if m.kafka_id == kafka_id), None)


# -- keys ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server stores for one user and mechanism: enough to check a proof, not to make one."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations}, salt={len(self.salt)} bytes)"


def salt_password(mech: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC (SASLprep is not applied; Kafka's
    clients do not apply it either, so ASCII and UTF-8 passwords agree with them)."""
    return hashlib.pbkdf2_hmac(mech.hash_name, password.encode(), salt, iterations)


def credential_from_salted(mech: ScramMechanism, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    client_key = mech.hmac(salted, b"Client Key")
    return ScramCredential(salt, mech.h(client_key), mech.hmac(salted, b"Server Key"), iterations)


def make_credential(
    mech: ScramMechanism, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted(mech, salt_password(mech, password, salt, iterations), salt, iterations)


def client_proof(mech: ScramMechanism, salted: bytes, auth_message: bytes) -> bytes:
    client_key = mech.hmac(salted, b"Client Key")
    signature = mech.hmac(mech.h(client_key), auth_message)
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


def recovered_client_key_matches(
    mech: ScramMechanism, cred: ScramCredential, auth_message: bytes, proof: bytes
) -> bool:
    """The server's check: proof XOR HMAC(StoredKey, AuthMessage) must hash to StoredKey."""
    signature = mech.hmac(cred.stored_key, auth_message)
    if len(proof) != len(signature):
        return False
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    return hmac.compare_digest(mech.h(client_key), cred.stored_key)


def server_signature(mech: ScramMechanism, server_key: bytes, auth_message: bytes) -> bytes:
    return mech.hmac(server_key, auth_message)


def new_nonce() -> str:
    """A printable nonce without ',' (base64 of 24 random bytes, RFC 5802's alphabet allows it)."""
    return base64.b64encode(os.urandom(24)).decode()


# -- messages ------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError(f"{what} is not valid base64") from None


def _saslname_decode(text: str) -> str:
    """RFC 5802's saslname: ',' and '=' travel as '=2C' and '=3D'; any other '=' is an error."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "=":
            code = text[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("a user name has an '=' that is not =2C or =3D")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)


def saslname_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(text: str, expected: str, what: str) -> list[str]:
    """Split ``a=..,b=..`` whose first attributes must be ``expected`` (in order); values back."""
    parts = text.split(",")
    if len(parts) < len(expected):
        raise ScramError(f"{what} lacks attributes: expected {','.join(expected)}")
    values = []
    for letter, part in zip(expected, parts, strict=False):
        if not part.startswith(letter + "="):
            raise ScramError(f"{what} lacks its {letter}= attribute where it belongs")
        values.append(part[2:])
    return values + parts[len(expected) :]


def _printable_nonce(nonce: str, what: str) -> str:
    if not nonce or any(not (0x21 <= ord(c) <= 0x7E) or c == "," for c in nonce):
        raise ScramError(f"{what} has an empty or unprintable nonce")
    return nonce


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=<authzid>,"
    authzid: str
    username: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # the part after the gs2 header: what goes into AuthMessage


def parse_client_first(data: bytes) -> ClientFirst:
    text = _text(data, "client-first message")
    flag, sep1, rest = text.partition(",")
    authz, sep2, bare = rest.partition(",")
    if not sep1 or not sep2:
        raise ScramError("client-first message lacks its gs2 header")
    if flag != "n":
        # "y" or "p=...": channel binding, which neither Kafka nor Shoal offers.
        raise ScramError("channel binding is not supported: the gs2 header must start with n")
    authzid = ""
    if authz:
        if not authz.startswith("a="):
            raise ScramError("client-first message has a malformed authorization id")
        authzid = _saslname_decode(authz[2:])
    if bare.startswith("m="):
        raise ScramError("mandatory extensions (m=) are not supported")
    name, nonce, *extra = _attributes(bare, "nr", "client-first message")
    extensions = {}
    for item in extra:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ScramError("client-first message has a malformed extension")
        extensions[key] = value
    username = _saslname_decode(name)
    if not username:
        raise ScramError("client-first message has an empty user name")
    return ClientFirst(
        f"{flag},{authz},", authzid, username, _printable_nonce(nonce, "client-first message"), extensions, bare
    )


@dataclass(frozen=True, slots=True)
class ServerFirst:
    nonce: str
    salt: bytes
    iterations: int

    def encode(self) -> str:
        return f"r={self.nonce},s={_b64(self.salt)},i={self.iterations}"


def parse_server_first(data: bytes) -> ServerFirst:
    text = _text(data, "server-first message")
    if text.startswith("e="):
        raise ScramError(f"the server refused: {text[2:]}")
    nonce, salt, iterations, *_ = _attributes(text, "rsi", "server-first message")
    try:
        count = int(iterations)
    except ValueError:
        raise ScramError("server-first message has a non-numeric iteration count") from None
    return ServerFirst(_printable_nonce(nonce, "server-first message"), _unb64(salt, "the salt"), count)


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str


def parse_client_final(data: bytes) -> ClientFinal:
    text = _text(data, "client-final message")
    head, sep, proof = text.rpartition(",p=")
    if not sep:
        raise ScramError("client-final message lacks its proof (p=)")
    binding, nonce, *_ = _attributes(head, "cr", "client-final message")
    return ClientFinal(_unb64(binding, "the channel binding"), nonce, _unb64(proof, "the proof"), head)


def parse_server_final(data: bytes) -> bytes:
    """The server signature of a ``v=`` message; ScramError for ``e=`` or anything else."""
    text = _text(data, "server-final message")
    if text.startswith("e="):
        raise ScramError(f"the server refused: {text[2:]}")
    if not text.startswith("v="):
        raise ScramError("server-final message lacks its verifier (v=)")
    return _unb64(text[2:].split(",")[0], "the server signature")


def _text(data: bytes, what: str) -> str:
    try:
        return bytes(data).decode()
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None


# -- the client's side ---------------------------------------------------------------


class ScramClient:
    """One client exchange: ``first()``, then ``final(server_first)``, then ``verify(server_final)``.

    Sans-IO: the caller carries the tokens (SaslAuthenticate bodies); each step raises
    ScramError when the server's message is malformed or does not prove the server
    knows the credential (a wrong nonce, a signature that does not match, too few iterations).
    """

    __slots__ = ("_auth_message", "_first_bare", "_nonce", "_password", "_salted", "mech", "username")

    def __init__(self, mech: ScramMechanism, username: str, password: str, nonce: str | None = None) -> None:
        self.mech = mech
        self.username = username
        self._password = password
        self._nonce = _printable_nonce(nonce or new_nonce(), "the client nonce")
        self._first_bare = f"n={saslname_encode(username)},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        sf = parse_server_first(server_first)
        if not sf.nonce.startswith(self._nonce) or len(sf.nonce) == len(self._nonce):
            raise ScramError("the server's nonce does not extend ours")
        if sf.iterations < MIN_ITERATIONS:
            raise ScramError(f"the server asks for {sf.iterations} iterations, fewer than {MIN_ITERATIONS}")
        without_proof = f"c={_b64(b'n,,')},r={sf.nonce}"
        self._auth_message = f"{self._first_bare},{bytes(server_first).decode()},{without_proof}".encode()
        self._salted = salt_password(self.mech, self._password, sf.salt, sf.iterations)
        proof = client_proof(self.mech, self._salted, self._auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        signature = parse_server_final(server_final)
        server_key = self.mech.hmac(self._salted, b"Server Key")
        if not hmac.compare_digest(signature, server_signature(self.mech, server_key, self._auth_message)):
            raise ScramError("the server's signature does not match: it does not know our credential")
