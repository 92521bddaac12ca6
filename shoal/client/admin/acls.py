"""ACLs as the admin client sees them: bindings, filters, and the CreateAcls / DescribeAcls /
DeleteAcls requests and answers (sans-IO; ``AsyncAdmin`` sends them).

The types follow Kafka's Admin API (``AclBinding``, ``AclBindingFilter``) and
take the enums of ``shoal.protocol.constants`` or their names ("TOPIC",
"PREFIXED", "READ", "ALLOW"), so ``AclBinding("TOPIC", "orders", "LITERAL",
"User:alice", "*", "READ", "ALLOW")`` is a whole binding.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shoal.client.core.errors import BrokerResponseError
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AclOperation, AclPatternType, AclPermissionType, AclResourceType

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "build_create_acls",
    "build_delete_acls",
    "build_describe_acls",
    "parse_create_acls",
    "parse_delete_acls",
    "parse_describe_acls",
]

Builder = Any


def _as(kind: type, value: Any) -> Any:
    if isinstance(value, str):
        try:
            return kind[value.upper().replace("-", "_")]
        except KeyError:
            raise ValueError(f"{value!r} is not one of {', '.join(m.name for m in kind)}") from None
    return kind(value)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One access control entry on one resource pattern."""

    resource_type: AclResourceType
    name: str
    pattern_type: AclPatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __post_init__(self) -> None:
        for attr, kind in _KINDS:
            object.__setattr__(self, attr, _as(kind, getattr(self, attr)))

    def __str__(self) -> str:
        return (
            f"{self.permission.name} {self.principal} {self.operation.name} from {self.host} "
            f"on {self.resource_type.name}:{self.pattern_type.name}:{self.name}"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings to describe or delete: None (or ANY) fields match everything; the MATCH
    pattern type selects every pattern that applies to ``name``."""

    resource_type: AclResourceType = AclResourceType.ANY
    name: str | None = None
    pattern_type: AclPatternType = AclPatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        for attr, kind in _KINDS:
            object.__setattr__(self, attr, _as(kind, getattr(self, attr)))


_KINDS = (
    ("resource_type", AclResourceType),
    ("pattern_type", AclPatternType),
    ("operation", AclOperation),
    ("permission", AclPermissionType),
)


def _error(code: int, message: str | None, what: str) -> BrokerResponseError:
    return BrokerResponseError(code, f"{what}: {message}" if message else what)


def build_create_acls(bindings: list[AclBinding]) -> Builder:
    req = api_by_name("CreateAcls").request_class()

    def build(version: int) -> Any:
        return req(
            creations=[
                req.AclCreation(
                    resource_type=b.resource_type,
                    resource_name=b.name,
                    resource_pattern_type=b.pattern_type,
                    principal=b.principal,
                    host=b.host,
                    operation=b.operation,
                    permission_type=b.permission,
                )
                for b in bindings
            ]
        )

    return build


def parse_create_acls(resp: Any, bindings: list[AclBinding]) -> dict[AclBinding, BrokerResponseError | None]:
    out: dict[AclBinding, BrokerResponseError | None] = {}
    for b, r in zip(bindings, resp.results):
        out[b] = _error(r.error_code, r.error_message, f"ACL {b}") if r.error_code else None
    return out


def _filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": f.resource_type,
        "resource_name_filter": f.name,
        "pattern_type_filter": f.pattern_type,
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": f.operation,
        "permission_type": f.permission,
    }


def build_describe_acls(flt: AclBindingFilter) -> Builder:
    req = api_by_name("DescribeAcls").request_class()

    def build(version: int) -> Any:
        return req(**_filter_fields(flt))

    return build


def parse_describe_acls(resp: Any) -> list[AclBinding]:
    """The bindings the broker listed; raises BrokerResponseError for an error answer."""
    if resp.error_code:
        raise _error(resp.error_code, resp.error_message, "DescribeAcls")
    return [
        AclBinding(
            r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type
        )
        for r in resp.resources
        for a in r.acls
    ]


def build_delete_acls(filters: list[AclBindingFilter]) -> Builder:
    req = api_by_name("DeleteAcls").request_class()

    def build(version: int) -> Any:
        return req(filters=[req.DeleteAclsFilter(**_filter_fields(f)) for f in filters])

    return build


def parse_delete_acls(
    resp: Any, filters: Iterable[AclBindingFilter]
) -> dict[AclBindingFilter, list[AclBinding] | BrokerResponseError]:
    out: dict[AclBindingFilter, list[AclBinding] | BrokerResponseError] = {}
    for f, r in zip(filters, resp.filter_results):
        if r.error_code:
            out[f] = _error(r.error_code, r.error_message, "DeleteAcls filter")
            continue
        out[f] = [
            AclBinding(
                m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation, m.permission_type
            )
            for m in r.matching_acls
            if not m.error_code
        ]
    return out
