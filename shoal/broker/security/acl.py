"""ACL bindings and filters: what an access control entry says, and which entries a filter selects.

A binding ties an entry (principal, host, operation, allow/deny) to a resource
pattern (type, name, LITERAL or PREFIXED). Filters are what DescribeAcls and
DeleteAcls send: any field may be "any" (null, or the ANY code), and the MATCH
pattern type selects every pattern that would apply to a given name (the
literal one, the ``*`` wildcard, and every prefix). Validation answers the
messages CreateAcls and the filter APIs give for bad input; decisions live in
``authorizer.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shoal.broker.security.principal import KafkaPrincipal
from shoal.protocol.constants import AclOperation, AclPatternType, AclPermissionType, AclResourceType

__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED_OPERATIONS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "InvalidAcl",
]

WILDCARD = "*"  # a LITERAL resource name matching every resource of its type; a host matching any host
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name

# The operations each resource type has (what an authorized-operations bit field can hold).
SUPPORTED_OPERATIONS: dict[AclResourceType, tuple[AclOperation, ...]] = {
    AclResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    AclResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    AclResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    AclResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
}


class InvalidAcl(ValueError):
    """A binding or filter the ACL APIs refuse with INVALID_REQUEST (the message says why)."""


def _enum(kind: type, code: int) -> int:
    try:
        return kind(code)
    except ValueError:
        return kind(0)  # an unknown code reads as UNKNOWN, as Kafka's fromCode does


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: AclResourceType
    name: str
    pattern_type: AclPatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(
        cls,
        resource_type: int,
        name: str,
        pattern_type: int,
        principal: str,
        host: str,
        operation: int,
        permission: int,
    ) -> AclBinding:
        """A binding from wire codes (unknown codes become UNKNOWN; `validate` refuses them)."""
        return cls(
            _enum(AclResourceType, resource_type),  # type: ignore[arg-type]
            name,
            _enum(AclPatternType, pattern_type),  # type: ignore[arg-type]
            principal,
            host,
            _enum(AclOperation, operation),  # type: ignore[arg-type]
            _enum(AclPermissionType, permission),  # type: ignore[arg-type]
        )

    def validate(self) -> None:
        """Raise InvalidAcl for what CreateAcls refuses (Kafka's checks, in Kafka's order)."""
        if self.resource_type == AclResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if not self.name:
            raise InvalidAcl("Invalid empty resource name")
        if self.resource_type in (AclResourceType.UNKNOWN, AclResourceType.ANY):
            raise InvalidAcl(f"Invalid resourceType {self.resource_type.name}")
        if self.pattern_type not in (AclPatternType.LITERAL, AclPatternType.PREFIXED):
            raise InvalidAcl(f"Invalid patternType {self.pattern_type.name}")
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise InvalidAcl(f"Invalid operation {self.operation.name}")
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAcl(f"Invalid permissionType {self.permission.name}")
        try:
            KafkaPrincipal.parse(self.principal)
        except ValueError as e:
            raise InvalidAcl(str(e)) from None

    def applies_to(self, resource_type: AclResourceType, name: str) -> bool:
        """Whether this binding's pattern covers the (literal) resource ``name``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == AclPatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return name.startswith(self.name)

    def to_json(self) -> list:
        return [
            self.resource_type.name,
            self.name,
            self.pattern_type.name,
            self.principal,
            self.host,
            self.operation.name,
            self.permission.name,
        ]

    @classmethod
    def from_json(cls, row: list) -> AclBinding:
        rt, name, pt, principal, host, op, perm = row
        return cls(
            AclResourceType[rt],
            name,
            AclPatternType[pt],
            principal,
            host,
            AclOperation[op],
            AclPermissionType[perm],
        )

    def __str__(self) -> str:
        return (
            f"{self.permission.name} {self.principal} {self.operation.name} from {self.host} on "
            f"{self.resource_type.name}:{self.pattern_type.name}:{self.name}"
        )


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    resource_type: AclResourceType
    name: str | None
    pattern_type: AclPatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(
        cls,
        resource_type: int,
        name: str | None,
        pattern_type: int,
        principal: str | None,
        host: str | None,
        operation: int,
        permission: int,
    ) -> AclBindingFilter:
        return cls(
            _enum(AclResourceType, resource_type),  # type: ignore[arg-type]
            name,
            _enum(AclPatternType, pattern_type),  # type: ignore[arg-type]
            principal,
            host,
            _enum(AclOperation, operation),  # type: ignore[arg-type]
            _enum(AclPermissionType, permission),  # type: ignore[arg-type]
        )

    def validate(self) -> None:
        """Raise InvalidAcl for a filter with an unknown field (the filter APIs' INVALID_REQUEST)."""
        if self.resource_type == AclResourceType.UNKNOWN or self.pattern_type == AclPatternType.UNKNOWN:
            raise InvalidAcl("Unknown patternFilter.")
        if self.operation == AclOperation.UNKNOWN or self.permission == AclPermissionType.UNKNOWN:
            raise InvalidAcl("Unknown entryFilter.")

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != AclResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        if self.permission != AclPermissionType.ANY and self.permission != b.permission:
            return False
        return self._pattern_matches(b)

    def _pattern_matches(self, b: AclBinding) -> bool:
        pt = self.pattern_type
        if pt not in (AclPatternType.ANY, AclPatternType.MATCH) and pt != b.pattern_type:
            return False
        if self.name is None:
            return True
        if pt == AclPatternType.ANY or pt == b.pattern_type:
            return self.name == b.name
        # MATCH: every pattern that would apply to a resource of this name
        if b.pattern_type == AclPatternType.LITERAL:
            return self.name == b.name or b.name == WILDCARD
        return self.name.startswith(b.name)
