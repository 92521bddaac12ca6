"""``shoal users add|list|delete``: SCRAM users, as kafka-configs.sh --entity-type users manages them.

A password is read from a prompt (not echoed) or from ``--password-file`` (its first line),
never from the command line, where it would land in shell history and ``ps``. Only its salted
form leaves this process (AsyncAdmin salts it, see admin/scram.py).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

from shoal.client.cli.support import UsageError
from shoal.client.core.errors import BrokerResponseError
from shoal.protocol.sasl.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS

__all__ = ["VERBS", "add_parsers"]

_DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_parsers(users: Any, verb: Any) -> None:
    """The ``users`` verbs; ``verb(sub, name, help)`` makes a verb parser with the connection options."""
    uv = users.add_subparsers(dest="verb", metavar="VERB", required=True)
    p = verb(uv, "add", "create a SCRAM user, or set a new password (prompted, or --password-file)")
    p.add_argument("user")
    p.add_argument(
        "--mechanism",
        action="append",
        choices=tuple(MECHANISMS),
        help="SCRAM-SHA-256 and/or SCRAM-SHA-512 (repeatable; default both)",
    )
    p.add_argument("--iterations", type=int, default=MIN_ITERATIONS, help=f"{MIN_ITERATIONS}..{MAX_ITERATIONS}")
    p.add_argument("--password-file", metavar="FILE", help="read the password from the first line of FILE")
    p = verb(uv, "list", "SCRAM users with their mechanisms and iteration counts")
    p.add_argument("users", nargs="*", metavar="USER", help="default: every user")
    p.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="text (a table, the default) or json (one document; shape in shoal.client.cli.shapes)",
    )
    p = verb(uv, "delete", "remove a SCRAM user's credentials")
    p.add_argument("user")
    p.add_argument("--mechanism", action="append", choices=tuple(MECHANISMS), help="default: every mechanism")


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                text = f.readline().rstrip("\r\n")
        except OSError as e:
            raise UsageError(f"--password-file {args.password_file}: {e.strerror or e}") from None
    else:
        if not sys.stdin.isatty():
            raise UsageError("no terminal to prompt for the password: use --password-file FILE")
        text = getpass.getpass(f"Password for {args.user}: ")
        if getpass.getpass("Again: ") != text:
            raise UsageError("the two passwords differ")
    if not text:
        raise UsageError("the password is empty")
    return text


async def users_add(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    password = _password(args)
    mechanisms = list(dict.fromkeys(args.mechanism or _DEFAULT_MECHANISMS))
    from shoal.client.admin.client import AsyncAdmin
    from shoal.client.admin.scram import ScramUpsertion

    changes = [ScramUpsertion(args.user, m, password, args.iterations) for m in mechanisms]
    async with AsyncAdmin(settings) as admin:
        res = await admin.alter_user_scram_credentials(changes)
    return _report(res, f"Set {', '.join(mechanisms)} credentials of user {{}}.")


async def users_list(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    from shoal.client.admin.client import AsyncAdmin
    from shoal.client.admin.scram import UserScramCredentials

    async with AsyncAdmin(settings) as admin:
        res = await admin.describe_user_scram_credentials(args.users or None)
    rc = 0
    rows = []
    for user, v in res.items():
        if isinstance(v, BaseException):
            print(f"Error: {user}: {v}", file=sys.stderr, flush=True)
            rc = 1
            continue
        assert isinstance(v, UserScramCredentials)
        rows += [{"user": user, "mechanism": c.mechanism, "iterations": c.iterations} for c in v.credentials]
    if args.output == "json":
        print(json.dumps({"users": rows}, indent=2), flush=True)
    else:
        print(f"{'USER':<24} {'MECHANISM':<15} ITERATIONS", flush=True)
        for r in rows:
            print(f"{r['user']:<24} {r['mechanism']:<15} {r['iterations']}", flush=True)
    return rc


async def users_delete(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    from shoal.client.admin.client import AsyncAdmin
    from shoal.client.admin.scram import ScramDeletion, UserScramCredentials

    async with AsyncAdmin(settings) as admin:
        mechanisms = args.mechanism
        if not mechanisms:
            found = (await admin.describe_user_scram_credentials([args.user]))[args.user]
            if isinstance(found, BaseException):
                print(f"Error: {args.user}: {found}", file=sys.stderr, flush=True)
                return 1
            assert isinstance(found, UserScramCredentials)
            mechanisms = [c.mechanism for c in found.credentials]
        res = await admin.alter_user_scram_credentials([ScramDeletion(args.user, m) for m in mechanisms])
    return _report(res, f"Deleted {', '.join(mechanisms)} credentials of user {{}}.")


def _report(res: dict[str, BrokerResponseError | None], ok: str) -> int:
    rc = 0
    for user, e in res.items():
        if e is not None:
            print(f"Error: {user}: {e}", file=sys.stderr, flush=True)
            rc = 1
        else:
            print(ok.format(user), flush=True)
    return rc


VERBS = {"add": users_add, "list": users_list, "delete": users_delete}
