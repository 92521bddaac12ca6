#!/usr/bin/env python3
"""One-shot setup of docker/compose.sasl-ssl.yaml: certificates, SCRAM users, client settings.

    python docker/security_setup.py --out DIR [--host broker ...]

Run once by the compose file's ``security-setup`` service into a shared volume (the broker
and the ``acls`` service mount it read-only); a second run keeps what is there, so restarting
the stack keeps its passwords and certificates. It writes:

- ``tls/ca.pem``, ``tls/broker.pem``, ``tls/client.crt``, ``tls/client.key``
  (examples/make_certs.py; the broker's certificate names every ``--host``);
- ``scram-users``: ``admin`` and ``app`` with random passwords, ``user:password`` lines read by
  the entrypoint's SHOAL_SCRAM_USERS_FILE (salted into the broker's data directory at start);
- ``admin.properties`` and ``app.properties``: client settings (Kafka's and librdkafka's names)
  for SASL_SSL with SCRAM-SHA-512, for ``shoal --command-config`` and any Kafka client.

Secrets are written readable by their owner only; ``--owner UID:GID`` hands the files to the
image's unprivileged user (the setup service runs as root).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

USERS = ("admin", "app")


def _private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def client_properties(user: str, password: str, ca: str) -> str:
    return (
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username={user}\n"
        f"sasl.password={password}\n"
        f"ssl.ca.location={ca}\n"
    )


def setup(out: Path, hosts: list[str], ca_path_seen_by_clients: str | None = None) -> None:
    tls = out / "tls"
    if not (tls / "broker.pem").exists():
        here = Path(__file__).resolve().parent
        for candidate in (here.parent / "examples", Path("/examples")):
            if (candidate / "make_certs.py").exists():
                sys.path.insert(0, str(candidate))
                break
        from make_certs import make_certs  # examples/make_certs.py

        make_certs(tls, hosts)
    users = out / "scram-users"
    if not users.exists():
        passwords = {u: secrets.token_urlsafe(18) for u in USERS}
        _private(users, "".join(f"{u}:{p}\n" for u, p in passwords.items()))
        ca = ca_path_seen_by_clients or str(tls / "ca.pem")
        for u, p in passwords.items():
            _private(out / f"{u}.properties", client_properties(u, p, ca))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--host", action="append", help="a name clients reach the broker by (default: localhost, 127.0.0.1)")
    p.add_argument("--ca-path", help="where clients find ca.pem (default: OUT/tls/ca.pem)")
    p.add_argument("--owner", metavar="UID:GID", help="chown everything written to this user")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    setup(args.out, args.host or ["localhost", "127.0.0.1"], args.ca_path)
    if args.owner:
        uid, _, gid = args.owner.partition(":")
        for path in [args.out, *args.out.rglob("*")]:
            os.chown(path, int(uid), int(gid or uid))
    print(f"security setup in {args.out}: tls/, scram-users, {', '.join(u + '.properties' for u in USERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
