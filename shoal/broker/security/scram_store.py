"""SCRAM credentials, stored durably: per user and mechanism a salt, StoredKey, ServerKey and
iteration count (RFC 5802), never the password, in ``__scram_credentials.json`` in the data
directory, rewritten whole on every change (``log.fileops.write_json_durably``: a crash leaves
the old file or the new one).

The file also holds a random key from which credentials for users that do not exist are
derived (`fake`): a SCRAM server must answer a first message with a salt and an iteration
count before it learns whether the password is right, and answering an unknown user with a
fresh random salt each time (or with an error) would tell a prober which users exist. Derived
from a stored key, an unknown user's salt is as stable as a real one's, across restarts too.
"""

from __future__ import annotations

import base64
import hmac
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from shoal.broker.log.fileops import read_json, write_json_durably
from shoal.protocol.sasl.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential

__all__ = ["FILE_NAME", "Deletion", "ScramStore", "Upsertion"]

FILE_NAME: Final = "__scram_credentials.json"
_FORMAT: Final = 1


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: str
    credential: ScramCredential


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: str


def _enc(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _dec(s: str) -> bytes:
    return base64.b64decode(s)


class ScramStore:
    """User -> mechanism -> credential, loaded at start and written through on every change."""

    def __init__(self, data_dir: str | os.PathLike) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._fake_key = b""

    def load(self) -> None:
        doc = read_json(self.path)
        if doc is None:
            self._fake_key = os.urandom(32)
            self._save()
            return
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise ValueError(f"{self.path} is not a SCRAM credential file Shoal wrote")
        self._fake_key = _dec(doc["fake_key"])
        self._users = {
            user: {
                mech: ScramCredential(_dec(c["salt"]), _dec(c["stored_key"]), _dec(c["server_key"]), c["iterations"])
                for mech, c in creds.items()
            }
            for user, creds in doc["users"].items()
        }

    def _save(self) -> None:
        users = {
            user: {
                mech: {
                    "salt": _enc(c.salt),
                    "stored_key": _enc(c.stored_key),
                    "server_key": _enc(c.server_key),
                    "iterations": c.iterations,
                }
                for mech, c in creds.items()
            }
            for user, creds in self._users.items()
        }
        write_json_durably(self.path, {"format": _FORMAT, "fake_key": _enc(self._fake_key), "users": users})

    # -- reads ---------------------------------------------------------------------
    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> list[str]:
        return sorted(self._users)

    def describe(self, user: str) -> list[tuple[str, int]]:
        """(mechanism, iterations) for each credential ``user`` has, in mechanism order."""
        creds = self._users.get(user, {})
        return [(m, creds[m].iterations) for m in MECHANISMS if m in creds]

    def fake(self, user: str, mechanism: str) -> ScramCredential:
        """A credential for a user with none: stable per (user, mechanism), matching no password."""
        mech = MECHANISMS[mechanism]
        seed = hmac.new(self._fake_key, f"{mechanism}\0{user}".encode(), "sha256").digest()
        salt = seed[:16] + hmac.new(self._fake_key, seed, "sha256").digest()[:16]
        # StoredKey is a hash no client key can be found for; ServerKey is never used.
        return ScramCredential(salt, mech.h(seed + b"no such user"), seed, MIN_ITERATIONS)

    # -- writes --------------------------------------------------------------------
    def apply(self, deletions: Iterable[Deletion], upsertions: Iterable[Upsertion]) -> None:
        """Apply checked changes together with one durable rewrite; if the write fails (OSError)
        nothing changes, in memory either."""
        users = {u: dict(c) for u, c in self._users.items()}
        for d in deletions:
            creds = users.get(d.user, {})
            creds.pop(d.mechanism, None)
            if not creds:
                users.pop(d.user, None)
        for up in upsertions:
            users.setdefault(up.user, {})[up.mechanism] = up.credential
        previous, self._users = self._users, users
        try:
            self._save()
        except OSError:
            self._users = previous
            raise
