"""The ACL authorizer: may this principal, from this host, do this operation on this resource?

Kafka's StandardAuthorizer rules, which clients and operators rely on:

* a principal named in ``super.users`` may do anything;
* the bindings that apply are those whose pattern covers the resource (the
  literal name, the ``*`` wildcard, or a prefix), whose principal is the
  caller's or ``User:*``, and whose host is the caller's address or ``*``;
* an applying DENY for the operation (or ALL) refuses, whatever allows it;
* otherwise an applying ALLOW for the operation (or ALL) permits; an ALLOW of
  READ, WRITE, DELETE or ALTER also permits DESCRIBE, and an ALLOW of
  ALTER_CONFIGS permits DESCRIBE_CONFIGS (implication never extends a DENY);
* a resource no binding covers at all is permitted only with
  ``allow.everyone.if.no.acl.found``; one that some binding covers but none
  permits is refused.

Decisions are cached per (principal, host, operation, resource) and the cache
is dropped whenever the bindings change, so the request path pays one dict
lookup per distinct question. The bindings' durable copy is kept by the
caller (``acl_store.py``): this object only holds them.
"""

from __future__ import annotations

from collections.abc import Iterable

from shoal.broker.security.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
)
from shoal.broker.security.principal import KafkaPrincipal
from shoal.protocol.constants import AclOperation, AclPatternType, AclPermissionType, AclResourceType

__all__ = ["Authorizer", "parse_super_users"]

_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
_CACHE_LIMIT = 100_000  # decisions kept before the cache starts over (bounded memory)


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:ops``)."""
    out = set()
    for part in (text or "").split(";"):
        part = part.strip()
        if part:
            KafkaPrincipal.parse(part)  # ValueError for a malformed entry
            out.add(part)
    return frozenset(out)


def _permits(b: AclBinding, op: AclOperation) -> bool | None:
    """What binding ``b`` (already known to cover the resource, principal and host) says about
    ``op``: True allow, False deny, None nothing."""
    if b.operation != AclOperation.ALL and b.operation != op:
        if b.permission != AclPermissionType.ALLOW:
            return None
        if op == AclOperation.DESCRIBE:
            if b.operation not in _IMPLIES_DESCRIBE:
                return None
        elif op == AclOperation.DESCRIBE_CONFIGS:
            if b.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    return b.permission == AclPermissionType.ALLOW


class Authorizer:
    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        bindings: Iterable[AclBinding] = (),
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._bindings: dict[AclBinding, None] = dict.fromkeys(bindings)  # insertion-ordered set
        self._by_type: dict[AclResourceType, list[AclBinding]] = {}  # for authorize_any
        self._literal: dict[tuple[AclResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[AclResourceType, str], list[AclBinding]] = {}
        self._cache: dict[tuple, bool] = {}
        self.version = 0  # bumped on every change (what a caller persists, a test waits for)
        self._reindex()

    # -- decisions ----------------------------------------------------------------------

    def authorize(
        self, principal: KafkaPrincipal, host: str, op: AclOperation, rtype: AclResourceType, name: str
    ) -> bool:
        key = (principal, host, op, rtype, name)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        result = self._decide(str(principal), host, op, rtype, name)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = result
        return result

    def _decide(self, principal: str, host: str, op: AclOperation, rtype: AclResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        covered = allowed = False
        for b in self._applying(rtype, name):
            covered = True
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.host != WILDCARD and b.host != host:
                continue
            verdict = _permits(b, op)
            if verdict is False:
                return False  # DENY wins
            if verdict:
                allowed = True
        if allowed:
            return True
        return self.allow_if_no_acl and not covered

    def _applying(self, rtype: AclResourceType, name: str) -> Iterable[AclBinding]:
        """The bindings whose pattern covers ``name``: its literal ones, the wildcard's, and the
        prefixed ones under each prefix of the name (dict lookups, not a scan of every ACL)."""
        literal, prefixed = self._literal, self._prefixed
        yield from literal.get((rtype, name), ())
        if name != WILDCARD:
            yield from literal.get((rtype, WILDCARD), ())
        if prefixed:
            for i in range(1, len(name) + 1):
                found = prefixed.get((rtype, name[:i]))
                if found:
                    yield from found

    def authorize_any(self, principal: KafkaPrincipal, host: str, op: AclOperation, rtype: AclResourceType) -> bool:
        """Whether ``op`` is allowed on at least one resource of type ``rtype`` that no DENY covers
        (Kafka's authorizeByResourceType: InitProducerId's "WRITE on some topic")."""
        if self.authorize(principal, host, op, rtype, "hardcode"):
            return True  # super users; allow.everyone.if.no.acl.found with nothing on the name
        who = str(principal)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allow = False
        for b in self._by_type.get(rtype, ()):
            if b.host != host and b.host != WILDCARD:
                continue
            if b.principal != who and b.principal != WILDCARD_PRINCIPAL:
                continue
            if b.operation != op and b.operation != AclOperation.ALL:
                continue
            literal = b.pattern_type == AclPatternType.LITERAL
            if b.permission == AclPermissionType.DENY:
                if literal and b.name == WILDCARD:
                    return False
                (deny_literal if literal else deny_prefixed).add(b.name)
            elif literal and b.name == WILDCARD:
                wildcard_allow = True
            else:
                (allow_literal if literal else allow_prefixed).add(b.name)
        if wildcard_allow:
            return True
        for names, literal in ((allow_literal, True), (allow_prefixed, False)):
            for name in names:
                if literal and name in deny_literal:
                    continue
                if any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                    continue
                return True
        return False

    def authorized_operations(self, principal: KafkaPrincipal, host: str, rtype: AclResourceType, name: str) -> int:
        """The bit field of the operations of ``rtype`` allowed on ``name`` (bit ``op`` per operation)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << op
        return bits

    # -- the bindings -------------------------------------------------------------------

    @property
    def bindings(self) -> list[AclBinding]:
        return list(self._bindings)

    def add(self, bindings: Iterable[AclBinding]) -> int:
        """Add bindings (validated by the caller); one already present is no change. Returns how
        many were new."""
        new = [b for b in bindings if b not in self._bindings]
        for b in new:
            self._bindings[b] = None
        if new:
            self._changed()
        return len(new)

    def remove(self, flt: AclBindingFilter) -> list[AclBinding]:
        """Remove and return every binding ``flt`` matches."""
        gone = [b for b in self._bindings if flt.matches(b)]
        for b in gone:
            del self._bindings[b]
        if gone:
            self._changed()
        return gone

    def matching(self, flt: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self._bindings if flt.matches(b)]

    def replace_all(self, bindings: Iterable[AclBinding]) -> None:
        self._bindings = dict.fromkeys(bindings)
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        self._reindex()

    def _reindex(self) -> None:
        by_type: dict[AclResourceType, list[AclBinding]] = {}
        literal: dict[tuple[AclResourceType, str], list[AclBinding]] = {}
        prefixed: dict[tuple[AclResourceType, str], list[AclBinding]] = {}
        for b in self._bindings:
            by_type.setdefault(b.resource_type, []).append(b)
            index = literal if b.pattern_type == AclPatternType.LITERAL else prefixed
            index.setdefault((b.resource_type, b.name), []).append(b)
        self._by_type, self._literal, self._prefixed = by_type, literal, prefixed
        self._cache = {}
