"""Security settings a container is given as files, made ready before the broker starts.

The image's entrypoint (docker/entrypoint.sh) runs this step, then execs the broker. Two jobs:

- SCRAM users from a file of ``user:password`` lines (a mounted file or a Docker secret):
  their salted credentials are written to the data directory's credential store, the one the
  broker reads at start. Never the password. Idempotent: a user who already has a credential
  for a mechanism keeps it (a password later changed with ``shoal users add`` is not undone by
  the next restart); a line whose password no longer matches is reported, without the password.
- Secrets the broker reads as settings (the TLS key's password, PLAIN users as a JAAS value,
  any sensitive ``SHOAL_CFG_*`` variable) are written to a properties file of mode 600 that
  the entrypoint passes with ``--config``. A process's command line is readable by every user
  of the machine (``/proc/<pid>/cmdline``), so no secret may travel as ``--override``.

    python -m shoal.broker.security_bootstrap --data-dir DIR [--scram-users FILE]
        [--plain-users FILE] [--ssl-key-password-file FILE] [--sensitive-env] [--secrets-out FILE]

The secrets file is written only when there is a secret to put in it.

With ``--sensitive-env`` the names of the ``SHOAL_CFG_*`` variables moved into the secrets file
are printed on stdout, one a line (names only), so that the entrypoint leaves them off the
command line. Exit codes: 0 done, 2 unusable input (a malformed line, a data directory a
running broker holds).
"""

from __future__ import annotations

import argparse
import hmac
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from shoal.broker.config.broker_keys import BROKER_CONFIGS
from shoal.broker.log.dir_lock import DataDirLocked, DirLock
from shoal.broker.security.jaas import PLAIN_MODULE
from shoal.broker.security.scram_store import ScramStore, Upsertion
from shoal.protocol.sasl.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    make_credential,
    salt_password,
)

__all__ = ["BootstrapError", "bootstrap_scram", "main", "read_users", "secret_properties"]

ENV_PREFIX: Final = "SHOAL_CFG_"
_SENSITIVE: Final = frozenset(k.name for k in BROKER_CONFIGS if k.sensitive)


class BootstrapError(ValueError):
    """Input that cannot be used; the message never holds a password."""


@dataclass(frozen=True, slots=True)
class Outcome:
    user: str
    created: tuple[str, ...]  # mechanisms given a credential now
    kept: tuple[str, ...]  # mechanisms that already had one
    stale: tuple[str, ...]  # of the kept ones, those the file's password no longer opens


def read_users(path: str | os.PathLike) -> dict[str, str]:
    """``user:password`` lines (split at the first colon); blank lines and ``#`` comments skipped.
    A later line for the same user wins."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise BootstrapError(f"cannot read {path}: {e.strerror or e}") from None
    users: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, password = line.partition(":")
        user = user.strip()
        if not sep or not user or not password:
            raise BootstrapError(f"{path} line {n}: expected user:password")  # the line is not quoted
        if any(c in user for c in ",= \t"):
            raise BootstrapError(f"{path} line {n}: a user name may not hold ',', '=' or blanks")
        users[user] = password
    return users


def _opens(cred: ScramCredential, mechanism: str, password: str) -> bool:
    mech = MECHANISMS[mechanism]
    salted = salt_password(mech, password, cred.salt, cred.iterations)
    return hmac.compare_digest(mech.h(mech.hmac(salted, b"Client Key")), cred.stored_key)


def bootstrap_scram(
    data_dir: str | os.PathLike,
    users: Mapping[str, str],
    mechanisms: Iterable[str] = tuple(MECHANISMS),
    iterations: int = MIN_ITERATIONS,
) -> list[Outcome]:
    """Give every user a credential for every mechanism it lacks, in one durable write, holding
    the data directory's lock (DataDirLocked while a broker runs on it)."""
    mechs = tuple(dict.fromkeys(mechanisms))
    if unknown := [m for m in mechs if m not in MECHANISMS]:
        raise BootstrapError(f"unknown SCRAM mechanism {', '.join(unknown)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise BootstrapError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    lock = DirLock(directory)
    lock.acquire()
    try:
        store = ScramStore(directory)
        store.load()
        outcomes, upserts = [], []
        for user, password in users.items():
            created, kept, stale = [], [], []
            for m in mechs:
                cred = store.get(user, m)
                if cred is None:
                    upserts.append(Upsertion(user, m, make_credential(MECHANISMS[m], password, iterations)))
                    created.append(m)
                else:
                    kept.append(m)
                    if not _opens(cred, m, password):
                        stale.append(m)
            outcomes.append(Outcome(user, tuple(created), tuple(kept), tuple(stale)))
        if upserts:
            store.apply((), upserts)
        return outcomes
    finally:
        lock.release()


def _escape(value: str) -> str:
    """A value as a .properties line keeps it (shoal.broker.config.settings.parse_properties)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    out = out.replace("\f", "\\f")
    return "\\" + out if out[:1] == " " else out


def _jaas_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plain_jaas(users: Mapping[str, str]) -> str:
    """A sasl.jaas.config value for PLAIN listing ``users``."""
    options = " ".join(f"user_{u}={_jaas_quote(p)}" for u, p in users.items())
    return f"{PLAIN_MODULE} required {options};"


def _sensitive_key(key: str) -> bool:
    return key in _SENSITIVE or any(key.endswith("." + name) for name in _SENSITIVE)


def sensitive_env(environ: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``SHOAL_CFG_*`` variables naming a sensitive setting: variable -> (key, value)."""
    found = {}
    for var, value in environ.items():
        if var.startswith(ENV_PREFIX):
            key = var[len(ENV_PREFIX) :].lower().replace("_", ".")
            if _sensitive_key(key):
                found[var] = (key, value)
    return found


def secret_properties(settings: Mapping[str, str]) -> str:
    lines = ["# Written by shoal.broker.security_bootstrap at container start: secrets, mode 600."]
    lines += [f"{key}={_escape(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def write_private(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only, from its first byte on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its old mode through O_CREAT
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = -1
            f.write(text)
    finally:
        if fd >= 0:
            os.close(fd)


def _first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    except OSError as e:
        raise BootstrapError(f"cannot read {path}: {e.strerror or e}") from None


def _report(outcomes: list[Outcome]) -> None:
    for o in outcomes:
        parts = []
        if o.created:
            parts.append(f"created {', '.join(o.created)}")
        if o.kept:
            parts.append(f"kept the stored {', '.join(o.kept)}")
        print(f"shoal: SCRAM user {o.user}: {'; '.join(parts)}", file=sys.stderr)
        if o.stale:
            print(
                f"shoal: SCRAM user {o.user}: the users file's password does not open the stored "
                f"{', '.join(o.stale)} credential; the stored one stays (change it with shoal users add)",
                file=sys.stderr,
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shoal.broker.security_bootstrap", description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True, help="the broker's log.dirs")
    p.add_argument("--scram-users", action="append", default=[], metavar="FILE", help="user:password lines")
    p.add_argument("--mechanism", action="append", choices=tuple(MECHANISMS), help="default: both")
    p.add_argument("--iterations", type=int, default=MIN_ITERATIONS)
    p.add_argument("--plain-users", metavar="FILE", help="user:password lines: the PLAIN users (sasl.jaas.config)")
    p.add_argument("--ssl-key-password-file", metavar="FILE", help="its first line is ssl.key.password")
    p.add_argument("--sensitive-env", action="store_true", help="move sensitive SHOAL_CFG_* settings to the file")
    p.add_argument("--secrets-out", metavar="FILE", help="the mode-600 properties file to write")
    args = p.parse_args(argv)
    try:
        users: dict[str, str] = {}
        for path in args.scram_users:
            users.update(read_users(path))
        secrets: dict[str, str] = {}
        moved: list[str] = []
        if args.sensitive_env:
            for var, (key, value) in sorted(sensitive_env(os.environ).items()):
                secrets[key] = value
                moved.append(var)
        if args.ssl_key_password_file:
            secrets["ssl.key.password"] = _first_line(args.ssl_key_password_file)
        if args.plain_users:
            plain = read_users(args.plain_users)
            if plain:
                secrets["sasl.jaas.config"] = plain_jaas(plain)
        if secrets and not args.secrets_out:
            raise BootstrapError("secrets to write but no --secrets-out")
        if users:
            _report(bootstrap_scram(args.data_dir, users, args.mechanism or tuple(MECHANISMS), args.iterations))
    except (BootstrapError, DataDirLocked) as e:
        print(f"shoal: security bootstrap: {e}", file=sys.stderr)
        return 2
    if args.secrets_out and secrets:
        write_private(args.secrets_out, secret_properties(secrets))
    for var in moved:
        print(var)
    return 0


if __name__ == "__main__":
    sys.exit(main())
