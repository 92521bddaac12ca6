"""Authorization as the handlers ask it: the broker's authorizer (or none) and the request's caller.

With no authorizer configured (``authorizer.class.name`` empty) every check
passes, and a handler pays one attribute test per request: handlers test
``broker.authorizer is None`` once and skip their checks. With one, each check
is a cached decision of ``security.authorizer.Authorizer``; ``TopicChecks``
memoises per request, so a request asks at most once per topic however many
of its partitions it names.

``CLUSTER_GATES`` lists the APIs whose whole request needs one operation on the
CLUSTER resource and nothing else; ``Broker.dispatch`` refuses them with
CLUSTER_AUTHORIZATION_FAILED (Kafka's error response for the API: every item
of the request gets the code) before the handler runs. Adding such an API is
one line here.
"""

from __future__ import annotations

from typing import Any

from shoal.broker.handlers.contract import Broker
from shoal.broker.net.contract import RequestContext
from shoal.broker.security.acl import CLUSTER_NAME
from shoal.protocol.constants import AclOperation, AclResourceType

__all__ = ["CLUSTER_GATES", "TopicChecks", "allowed", "authorized_operations"]

READ = AclOperation.READ
WRITE = AclOperation.WRITE
CREATE = AclOperation.CREATE
DELETE = AclOperation.DELETE
ALTER = AclOperation.ALTER
DESCRIBE = AclOperation.DESCRIBE
CLUSTER_ACTION = AclOperation.CLUSTER_ACTION
DESCRIBE_CONFIGS = AclOperation.DESCRIBE_CONFIGS
ALTER_CONFIGS = AclOperation.ALTER_CONFIGS
IDEMPOTENT_WRITE = AclOperation.IDEMPOTENT_WRITE

TOPIC = AclResourceType.TOPIC
GROUP = AclResourceType.GROUP
CLUSTER = AclResourceType.CLUSTER
TRANSACTIONAL_ID = AclResourceType.TRANSACTIONAL_ID

# API name -> the operation on the CLUSTER its whole request needs (Kafka's authorizeClusterOperation).
CLUSTER_GATES: dict[str, AclOperation] = {
    "CreateAcls": ALTER,
    "DeleteAcls": ALTER,
    "DescribeAcls": DESCRIBE,
    # the share coordinator's APIs: brokers talk to it (KIP-932)
    "InitializeShareGroupState": CLUSTER_ACTION,
    "ReadShareGroupState": CLUSTER_ACTION,
    "WriteShareGroupState": CLUSTER_ACTION,
    "DeleteShareGroupState": CLUSTER_ACTION,
    "ReadShareGroupStateSummary": CLUSTER_ACTION,
    # (DescribeUserScramCredentials needs DESCRIBE and AlterUserScramCredentials ALTER on the
    # CLUSTER too; handlers/sasl.py checks them itself, to name each user in the refusal)
}


def allowed(broker: Broker, ctx: RequestContext, op: AclOperation, rtype: AclResourceType, name: str) -> bool:
    """Whether the caller of ``ctx`` may do ``op`` on the resource (always, with no authorizer)."""
    az = broker.authorizer
    return az is None or az.authorize(ctx.principal, ctx.client_host, op, rtype, name)


def allowed_on_cluster(broker: Broker, ctx: RequestContext, op: AclOperation) -> bool:
    return allowed(broker, ctx, op, CLUSTER, CLUSTER_NAME)


def authorized_operations(broker: Broker, ctx: RequestContext, rtype: AclResourceType, name: str) -> int:
    """The authorized-operations bit field Kafka fills in (every supported operation with no authorizer)."""
    az = broker.authorizer
    if az is None:
        from shoal.broker.security.acl import SUPPORTED_OPERATIONS

        bits = 0
        for op in SUPPORTED_OPERATIONS.get(rtype, ()):
            bits |= 1 << op
        return bits
    return az.authorized_operations(ctx.principal, ctx.client_host, rtype, name)


class TopicChecks:
    """One request's decisions about topics: ``ok(name)`` asks the authorizer once per name."""

    __slots__ = ("_az", "_host", "_memo", "_op", "_principal")

    def __init__(self, broker: Broker, ctx: RequestContext, op: AclOperation) -> None:
        self._az: Any = broker.authorizer
        self._op = op
        self._memo: dict[str, bool] = {}
        if self._az is not None:
            self._principal, self._host = ctx.principal, ctx.client_host

    @property
    def active(self) -> bool:
        return self._az is not None

    def ok(self, name: str) -> bool:
        if self._az is None:
            return True
        hit = self._memo.get(name)
        if hit is None:
            hit = self._memo[name] = self._az.authorize(self._principal, self._host, self._op, TOPIC, name)
        return hit
