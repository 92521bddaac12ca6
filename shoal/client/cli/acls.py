"""``shoal acls add|list|remove``: kafka-acls.sh's verbs and spellings, on AsyncAdmin.

    shoal acls add --allow-principal User:alice --operation Read --operation Describe --topic orders
    shoal acls add --allow-principal User:app --operation All --group app- --resource-pattern-type prefixed
    shoal acls list --topic orders
    shoal acls remove --deny-principal User:mallory --operation Write --topic orders

A resource is ``--topic``, ``--group``, ``--transactional-id`` or ``--cluster``
(each repeatable); principals come from ``--allow-principal`` /
``--deny-principal`` (with ``--allow-host`` / ``--deny-host``, default ``*``);
``add`` makes every combination of principal, operation and resource, as
kafka-acls.sh does. ``list`` and ``remove`` turn the same options into filters
(nothing named: everything; ``--resource-pattern-type`` defaults to literal
for add, any for list and remove, and takes match too).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from shoal.client.admin.acls import AclBinding, AclBindingFilter
from shoal.client.admin.client import AsyncAdmin
from shoal.client.cli.admin import _json, _report, emit, err, out
from shoal.client.cli.support import UsageError
from shoal.protocol.constants import AclOperation, AclPatternType, AclPermissionType, AclResourceType

__all__ = ["VERBS", "add_parsers"]

_CLUSTER = "kafka-cluster"
_OPERATIONS = {
    o.name.replace("_", ""): o.name for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY)
}


def _op_name(text: str) -> str:
    """Kafka's spellings (Read, ClusterAction, DescribeConfigs) or ours (CLUSTER_ACTION)."""
    name = _OPERATIONS.get(text.replace("-", "").replace("_", "").upper())
    if name is None:
        raise argparse.ArgumentTypeError(f"unknown operation {text!r}")
    return name


def add_parsers(areas: Any, verb: Callable[..., argparse.ArgumentParser], output: Callable[..., None]) -> None:
    acls = areas.add_parser("acls", help="add, list and remove ACLs (the kafka-acls.sh verbs)")
    av = acls.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name, text in (
        ("add", "add ACLs: every principal x operation x resource named"),
        ("list", "list the ACLs matching the options (all by default)"),
        ("remove", "remove the ACLs matching the options"),
    ):
        p = verb(av, name, text)
        p.add_argument("--topic", action="append", default=[], metavar="TOPIC")
        p.add_argument("--group", action="append", default=[], metavar="GROUP")
        p.add_argument("--transactional-id", action="append", default=[], metavar="ID")
        p.add_argument("--cluster", action="store_true", help="the cluster resource")
        p.add_argument(
            "--resource-pattern-type",
            default=None,
            type=str.lower,
            choices=("literal", "prefixed", "match", "any"),
            help="how resource names match (default: literal for add, any for list and remove)",
        )
        p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
        p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        p.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="default: * (any host)")
        p.add_argument("--deny-host", action="append", default=[], metavar="HOST", help="default: * (any host)")
        p.add_argument(
            "--operation",
            action="append",
            default=[],
            type=_op_name,
            metavar="OPERATION",
            help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
            "IdempotentWrite, All (repeatable; add defaults to All)",
        )
        p.add_argument("--principal", action="append", default=[], metavar="User:NAME", help="list: only these")
        if name == "list":
            output(p)


def _resources(args: argparse.Namespace) -> list[tuple[AclResourceType, str]]:
    found = [(AclResourceType.TOPIC, n) for n in args.topic]
    found += [(AclResourceType.GROUP, n) for n in args.group]
    found += [(AclResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id]
    if args.cluster:
        found.append((AclResourceType.CLUSTER, _CLUSTER))
    return found


def _operation(name: str) -> AclOperation:
    return AclOperation[name]


def _entries(args: argparse.Namespace) -> list[tuple[str, str, AclPermissionType]]:
    """(principal, host, permission) for every --allow/--deny principal and host."""
    out_ = []
    for principals, hosts, perm in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for p in principals:
            if ":" not in p:
                raise UsageError(f"{p!r} is not a principal of the form User:name")
            for h in hosts or ["*"]:
                out_.append((p, h, perm))
    return out_


def _pattern(args: argparse.Namespace, default: str) -> AclPatternType:
    return AclPatternType[(args.resource_pattern_type or default).upper()]


def _filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    pattern = _pattern(args, "any")
    resources: list[tuple[AclResourceType, str | None]] = list(_resources(args)) or [(AclResourceType.ANY, None)]
    ops = [_operation(o) for o in args.operation] or [AclOperation.ANY]
    entries: list[tuple[str | None, str | None, AclPermissionType]] = list(_entries(args))
    if not entries:
        entries = [(p, None, AclPermissionType.ANY) for p in args.principal] or [(None, None, AclPermissionType.ANY)]
    return [
        AclBindingFilter(rt, name, pattern, principal, host, op, perm)
        for rt, name in resources
        for op in ops
        for principal, host, perm in entries
    ]


async def acls_add(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    resources = _resources(args)
    entries = _entries(args)
    if not resources:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not entries:
        raise UsageError("name a principal: --allow-principal or --deny-principal")
    pattern = _pattern(args, "literal")
    if pattern not in (AclPatternType.LITERAL, AclPatternType.PREFIXED):
        raise UsageError("add takes --resource-pattern-type literal or prefixed")
    ops = [_operation(o) for o in args.operation] or [AclOperation.ALL]
    bindings = [
        AclBinding(rt, name, pattern, principal, host, op, perm)
        for rt, name in resources
        for principal, host, perm in entries
        for op in ops
    ]
    async with AsyncAdmin(settings) as admin:
        res = await admin.create_acls(bindings)
    return _report(res, "Added ACL {}")


async def acls_list(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    found: dict[AclBinding, None] = {}
    async with AsyncAdmin(settings) as admin:
        for f in _filters(args):
            found.update(dict.fromkeys(await admin.describe_acls(f)))
    bindings = sorted(found, key=lambda b: (b.resource_type, b.name, b.pattern_type, b.principal, b.operation))
    if _json(args):
        emit({"acls": [_doc(b) for b in bindings]})
        return 0
    by_resource: dict[tuple, list[AclBinding]] = {}
    for b in bindings:
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for (rt, name, pt), group in by_resource.items():
        out(f"Current ACLs for resource `ResourcePattern(resourceType={rt.name}, name={name}, patternType={pt.name})`:")
        for b in group:
            out(
                f" \t(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                f"permissionType={b.permission.name})"
            )
        out()
    return 0


def _doc(b: AclBinding) -> dict[str, str]:
    return {
        "resource_type": b.resource_type.name,
        "name": b.name,
        "pattern_type": b.pattern_type.name,
        "principal": b.principal,
        "host": b.host,
        "operation": b.operation.name,
        "permission": b.permission.name,
    }


async def acls_remove(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    filters = _filters(args)
    async with AsyncAdmin(settings) as admin:
        res = await admin.delete_acls(filters)
    rc = 0
    for v in res.values():
        if isinstance(v, BaseException):
            err(f"Error: {v}")
            rc = 1
            continue
        for b in v:
            out(f"Removed ACL {b}")
    return rc


VERBS = {"add": acls_add, "list": acls_list, "remove": acls_remove}
