"""CreateAcls, DescribeAcls and DeleteAcls: managing the authorizer's bindings.

As Kafka: with no authorizer configured the three answer SECURITY_DISABLED;
with one, the caller needs ALTER (create, delete) or DESCRIBE (describe) on the
CLUSTER, checked before the handler by ``authz.CLUSTER_GATES``. A binding or
filter with an unknown or misplaced code is refused with INVALID_REQUEST
(per creation, per filter, or for the whole DescribeAcls). Changes are written
durably (``security.acl_store``) before the answer, so what a client was told
survives a crash.
"""

from __future__ import annotations

from typing import Any

from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.contract import Broker
from shoal.broker.net.contract import RequestContext
from shoal.broker.security.acl import AclBinding, AclBindingFilter, InvalidAcl
from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode

_DISABLED = "No Authorizer is configured on the broker"


def _filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter.of(
        f.resource_type_filter,
        f.resource_name_filter,
        f.pattern_type_filter,
        f.principal_filter,
        f.host_filter,
        f.operation,
        f.permission_type,
    )


def _commit(broker: Broker, before: list[AclBinding]) -> None:
    """Make the authorizer's new bindings durable; if that fails, put the old ones back (and let
    the failure answer the request as an unexpected error: nothing was changed)."""
    try:
        broker.save_acls()
    except BaseException:
        assert broker.authorizer is not None
        broker.authorizer.replace_all(before)
        raise


def handle_create_acls(broker: Broker, ctx: RequestContext, req: messages.CreateAclsRequest) -> Any:
    cls = messages.CreateAclsResponse
    az = broker.authorizer
    if az is None:
        return cls(
            throttle_time_ms=0,
            results=[
                cls.AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=_DISABLED)
                for _ in req.creations
            ],
        )
    results = []
    valid: list[AclBinding] = []
    for c in req.creations:
        b = AclBinding.of(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        r = cls.AclCreationResult(error_code=0, error_message=None)
        results.append(r)
        try:
            b.validate()
        except InvalidAcl as e:
            r.error_code, r.error_message = ErrorCode.INVALID_REQUEST, str(e)
            continue
        valid.append(b)
    before = az.bindings
    if valid and az.add(valid):
        _commit(broker, before)
    return cls(throttle_time_ms=0, results=results)


def handle_describe_acls(broker: Broker, ctx: RequestContext, req: messages.DescribeAclsRequest) -> Any:
    cls = messages.DescribeAclsResponse
    az = broker.authorizer
    if az is None:
        return cls(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED, error_message=_DISABLED, resources=[])
    flt = _filter(req)
    try:
        flt.validate()
    except InvalidAcl as e:
        return cls(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=str(e), resources=[])
    grouped: dict[tuple, Any] = {}
    for b in az.matching(flt):
        key = (b.resource_type, b.name, b.pattern_type)
        res = grouped.get(key)
        if res is None:
            res = grouped[key] = cls.DescribeAclsResource(
                resource_type=b.resource_type, resource_name=b.name, pattern_type=b.pattern_type
            )
        res.acls.append(
            cls.AclDescription(principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)
        )
    return cls(throttle_time_ms=0, error_code=0, error_message=None, resources=list(grouped.values()))


def handle_delete_acls(broker: Broker, ctx: RequestContext, req: messages.DeleteAclsRequest) -> Any:
    cls = messages.DeleteAclsResponse
    az = broker.authorizer
    if az is None:
        return cls(
            throttle_time_ms=0,
            filter_results=[
                cls.DeleteAclsFilterResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=_DISABLED)
                for _ in req.filters
            ],
        )
    out = []
    changed = False
    before = az.bindings
    for f in req.filters:
        r = cls.DeleteAclsFilterResult(error_code=0, error_message=None)
        out.append(r)
        flt = _filter(f)
        try:
            flt.validate()
        except InvalidAcl as e:
            r.error_code, r.error_message = ErrorCode.INVALID_REQUEST, str(e)
            continue
        gone = az.remove(flt)
        changed = changed or bool(gone)
        r.matching_acls = [
            cls.DeleteAclsMatchingAcl(
                error_code=0,
                error_message=None,
                resource_type=b.resource_type,
                resource_name=b.name,
                pattern_type=b.pattern_type,
                principal=b.principal,
                host=b.host,
                operation=b.operation,
                permission_type=b.permission,
            )
            for b in gone
        ]
    if changed:
        _commit(broker, before)
    return cls(throttle_time_ms=0, filter_results=out)


def register(table: HandlerTable) -> None:
    table.add("DescribeAcls", handle_describe_acls)
    table.add("CreateAcls", handle_create_acls)
    table.add("DeleteAcls", handle_delete_acls)
