"""SCRAM users through the admin API (DescribeUserScramCredentials / AlterUserScramCredentials).

Sans-IO: request bodies and answers. An upsertion is salted here, on the client, so only the
salt and Hi(password, salt, iterations) travel (as Kafka's AdminClient does); the broker
derives StoredKey and ServerKey from them and never sees the password.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shoal.client.core.errors import BrokerResponseError, ConfigError
from shoal.protocol import messages
from shoal.protocol.sasl.scram import MECHANISMS, MIN_ITERATIONS, mechanism_by_id, salt_password

__all__ = [
    "ScramCredentialInfo",
    "ScramDeletion",
    "ScramUpsertion",
    "UserScramCredentials",
    "build_alter",
    "build_describe",
    "parse_alter",
    "parse_describe",
]


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    mechanism: str  # "SCRAM-SHA-256" or "SCRAM-SHA-512"
    iterations: int


@dataclass(frozen=True, slots=True)
class UserScramCredentials:
    user: str
    credentials: tuple[ScramCredentialInfo, ...]


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """Create or replace ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str
    password: str = field(repr=False)
    iterations: int = MIN_ITERATIONS
    salt: bytes | None = field(default=None, repr=False)  # random when None


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    """Remove ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str


def _mechanism(name: str) -> Any:
    mech = MECHANISMS.get(name.upper())
    if mech is None:
        raise ConfigError("mechanism", f"{name!r} is not one of {', '.join(MECHANISMS)}")
    return mech


def build_describe(users: Iterable[str] | None) -> Any:
    cls = messages.DescribeUserScramCredentialsRequest
    return cls(users=None if users is None else [cls.UserName(name=u) for u in users])


def parse_describe(resp: Any) -> dict[str, UserScramCredentials | BrokerResponseError]:
    if resp.error_code:
        raise BrokerResponseError(resp.error_code, resp.error_message)
    out: dict[str, UserScramCredentials | BrokerResponseError] = {}
    for r in resp.results:
        if r.error_code:
            out[r.user] = BrokerResponseError(r.error_code, r.error_message)
            continue
        infos = []
        for c in r.credential_infos:
            mech = mechanism_by_id(c.mechanism)
            infos.append(ScramCredentialInfo(mech.name if mech else f"UNKNOWN({c.mechanism})", c.iterations))
        out[r.user] = UserScramCredentials(r.user, tuple(infos))
    return out


def build_alter(alterations: Iterable[ScramUpsertion | ScramDeletion]) -> Any:
    cls = messages.AlterUserScramCredentialsRequest
    deletions, upsertions = [], []
    for a in alterations:
        mech = _mechanism(a.mechanism)
        if isinstance(a, ScramDeletion):
            deletions.append(cls.ScramCredentialDeletion(name=a.user, mechanism=mech.kafka_id))
            continue
        salt = a.salt if a.salt is not None else os.urandom(32)
        # Iteration counts the broker refuses (outside 4096..16384) are sent as asked: its
        # UNACCEPTABLE_CREDENTIAL comes back for that user (and the salting stays cheap).
        salted = salt_password(mech, a.password, salt, a.iterations) if 0 < a.iterations <= 16384 else b""
        upsertions.append(
            cls.ScramCredentialUpsertion(
                name=a.user, mechanism=mech.kafka_id, iterations=a.iterations, salt=salt, salted_password=salted
            )
        )
    return cls(deletions=deletions, upsertions=upsertions)


def parse_alter(resp: Any) -> dict[str, BrokerResponseError | None]:
    return {r.user: BrokerResponseError(r.error_code, r.error_message) if r.error_code else None for r in resp.results}
