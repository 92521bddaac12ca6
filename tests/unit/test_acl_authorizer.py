"""The ACL authorizer core (sans-IO): Kafka's StandardAuthorizer rules, filters, validation, storage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.broker.security.acl import AclBinding, AclBindingFilter, InvalidAcl
from shoal.broker.security.acl_store import AclStore
from shoal.broker.security.authorizer import Authorizer, parse_super_users
from shoal.broker.security.principal import KafkaPrincipal
from shoal.protocol.constants import AclOperation as Op
from shoal.protocol.constants import AclPatternType as Pt
from shoal.protocol.constants import AclPermissionType as Perm
from shoal.protocol.constants import AclResourceType as Rt

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
HOST = "10.0.0.1"


def b(name="t", op=Op.READ, perm=Perm.ALLOW, principal="User:alice", host="*", pt=Pt.LITERAL, rt=Rt.TOPIC):
    return AclBinding(rt, name, pt, principal, host, op, perm)


def ok(az, op=Op.READ, name="t", who=ALICE, host=HOST, rt=Rt.TOPIC):
    return az.authorize(who, host, op, rt, name)


def test_nothing_is_allowed_without_acls_by_default():
    assert not ok(Authorizer())
    assert ok(Authorizer(allow_everyone_if_no_acl_found=True))


def test_allow_applies_to_its_principal_operation_and_resource_only():
    az = Authorizer(bindings=[b()])
    assert ok(az)
    assert not ok(az, who=BOB)
    assert not ok(az, op=Op.WRITE)
    assert not ok(az, name="other")
    assert not ok(az, rt=Rt.GROUP)


def test_deny_beats_allow_and_all():
    az = Authorizer(bindings=[b(op=Op.ALL), b(perm=Perm.DENY, op=Op.READ)])
    assert not ok(az, op=Op.READ)
    assert ok(az, op=Op.WRITE)
    az.add([b(name="*", perm=Perm.DENY, op=Op.ALL, principal="User:*")])
    assert not ok(az, op=Op.WRITE)


def test_implied_describe_for_allow_only():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert ok(Authorizer(bindings=[b(op=op)]), op=Op.DESCRIBE), op
    assert not ok(Authorizer(bindings=[b(op=Op.CREATE)]), op=Op.DESCRIBE)
    assert ok(Authorizer(bindings=[b(op=Op.ALTER_CONFIGS)]), op=Op.DESCRIBE_CONFIGS)
    assert not ok(Authorizer(bindings=[b(op=Op.DESCRIBE_CONFIGS)]), op=Op.ALTER_CONFIGS)
    # a DENY of READ does not deny DESCRIBE (implication never extends a deny)
    az = Authorizer(bindings=[b(op=Op.DESCRIBE), b(op=Op.READ, perm=Perm.DENY)])
    assert ok(az, op=Op.DESCRIBE) and not ok(az, op=Op.READ)


def test_wildcards_prefixes_and_hosts():
    az = Authorizer(bindings=[b(name="*", principal="User:*")])
    assert ok(az, who=BOB, name="anything")
    az = Authorizer(bindings=[b(name="orders-", pt=Pt.PREFIXED)])
    assert ok(az, name="orders-eu") and ok(az, name="orders-") and not ok(az, name="order")
    az = Authorizer(bindings=[b(name="orders", pt=Pt.LITERAL)])
    assert not ok(az, name="orders-eu")
    az = Authorizer(bindings=[b(host="10.0.0.1")])
    assert ok(az, host="10.0.0.1") and not ok(az, host="10.0.0.2")


def test_super_users_and_allow_everyone_only_where_no_acl_names_the_resource():
    az = Authorizer(
        super_users=parse_super_users("User:admin; User:ops"),
        allow_everyone_if_no_acl_found=True,
        bindings=[b(name="guarded", principal="User:bob")],
    )
    admin = KafkaPrincipal("User", "admin")
    assert ok(az, who=admin, name="guarded", op=Op.DELETE)
    assert ok(az, name="free")  # no ACL names it
    assert not ok(az, name="guarded")  # some ACL names it, none allows alice
    with pytest.raises(ValueError):
        parse_super_users("admin")


def test_authorize_any_as_kafka_authorize_by_resource_type():
    az = Authorizer(bindings=[b(name="a", op=Op.WRITE)])
    assert az.authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    assert not az.authorize_any(BOB, HOST, Op.WRITE, Rt.TOPIC)
    az.add([b(name="a", op=Op.WRITE, perm=Perm.DENY)])
    assert not az.authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    az = Authorizer(bindings=[b(name="ab", op=Op.WRITE), b(name="a", op=Op.WRITE, perm=Perm.DENY, pt=Pt.PREFIXED)])
    assert not az.authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)
    az = Authorizer(bindings=[b(name="*", op=Op.ALL)])
    assert az.authorize_any(ALICE, HOST, Op.WRITE, Rt.TOPIC)


def test_authorized_operations_bit_field():
    az = Authorizer(bindings=[b(op=Op.READ), b(op=Op.ALTER_CONFIGS)])
    bits = az.authorized_operations(ALICE, HOST, Rt.TOPIC, "t")
    want = {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert bits == sum(1 << o for o in want)


def test_cache_is_dropped_when_bindings_change():
    az = Authorizer()
    assert not ok(az)
    az.add([b()])
    assert ok(az)
    az.remove(AclBindingFilter.of(Rt.ANY, None, Pt.ANY, None, None, Op.ANY, Perm.ANY))
    assert not ok(az)


def test_validation_refuses_what_create_acls_refuses():
    good = b()
    good.validate()
    bad = [
        b(rt=Rt.ANY),
        b(pt=Pt.MATCH),
        b(op=Op.ANY),
        b(perm=Perm.ANY),
        b(name=""),
        b(principal="alice"),
        b(rt=Rt.CLUSTER, name="other"),
        AclBinding.of(2, "t", 3, "User:a", "*", 99, 3),  # an unknown code reads as UNKNOWN
    ]
    for x in bad:
        with pytest.raises(InvalidAcl):
            x.validate()
    with pytest.raises(InvalidAcl):
        AclBindingFilter.of(0, None, 1, None, None, 1, 1).validate()
    with pytest.raises(InvalidAcl):
        AclBindingFilter.of(1, None, 1, None, None, 1, 0).validate()


def test_filters_any_match_and_exact():
    lit, pre, wild = b(name="orders"), b(name="ord", pt=Pt.PREFIXED), b(name="*")
    f = AclBindingFilter.of(Rt.TOPIC, "orders", Pt.MATCH, None, None, Op.ANY, Perm.ANY)
    assert [x for x in (lit, pre, wild) if f.matches(x)] == [lit, pre, wild]
    f = AclBindingFilter.of(Rt.TOPIC, "orders", Pt.ANY, None, None, Op.ANY, Perm.ANY)
    assert [x for x in (lit, pre, wild) if f.matches(x)] == [lit]
    f = AclBindingFilter.of(Rt.TOPIC, None, Pt.PREFIXED, None, None, Op.ANY, Perm.ANY)
    assert [x for x in (lit, pre, wild) if f.matches(x)] == [pre]
    f = AclBindingFilter.of(Rt.ANY, None, Pt.ANY, "User:bob", None, Op.ANY, Perm.ANY)
    assert not f.matches(lit)


def test_store_round_trip(tmp_path):
    store = AclStore(tmp_path)
    assert store.load() == []
    items = [b(), b(name="x", pt=Pt.PREFIXED, perm=Perm.DENY, op=Op.ALL, rt=Rt.GROUP, host="1.2.3.4")]
    store.save(items)
    assert AclStore(tmp_path).load() == items
    (tmp_path / "acls.json").write_text("{}")
    with pytest.raises(RuntimeError):
        store.load()


# -- properties ------------------------------------------------------------------------------

names = st.sampled_from(["a", "ab", "abc", "b", "*"])
bindings = st.builds(
    AclBinding,
    st.sampled_from([Rt.TOPIC, Rt.GROUP]),
    names,
    st.sampled_from([Pt.LITERAL, Pt.PREFIXED]),
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.sampled_from(["*", HOST, "10.9.9.9"]),
    st.sampled_from([Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE]),
    st.sampled_from([Perm.ALLOW, Perm.DENY]),
)
ops = st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE, Op.CREATE])
resources = st.sampled_from(["a", "ab", "abc", "b", "c"])


@settings(max_examples=200, deadline=None)
@given(st.lists(bindings, max_size=8), ops, resources, st.booleans())
def test_a_matching_deny_always_wins(acls, op, name, everyone):
    az = Authorizer(allow_everyone_if_no_acl_found=everyone, bindings=acls)
    az.add([AclBinding(Rt.TOPIC, name, Pt.LITERAL, "User:*", "*", op, Perm.DENY)])
    assert not az.authorize(ALICE, HOST, op, Rt.TOPIC, name)
    assert Authorizer(super_users=["User:alice"], bindings=az.bindings).authorize(ALICE, HOST, op, Rt.TOPIC, name)


@settings(max_examples=200, deadline=None)
@given(st.lists(bindings, max_size=8), st.lists(bindings, max_size=4), ops, resources)
def test_cached_decisions_equal_a_fresh_authorizer(first, then, op, name):
    az = Authorizer(bindings=first)
    az.authorize(ALICE, HOST, op, Rt.TOPIC, name)  # fill the cache
    az.add(then)
    az.remove(AclBindingFilter.of(Rt.GROUP, None, Pt.ANY, None, None, Op.ANY, Perm.ANY))
    fresh = Authorizer(bindings=az.bindings)
    assert az.authorize(ALICE, HOST, op, Rt.TOPIC, name) == fresh.authorize(ALICE, HOST, op, Rt.TOPIC, name)


@settings(max_examples=200, deadline=None)
@given(bindings, resources)
def test_match_filter_selects_exactly_the_patterns_that_apply(x, name):
    f = AclBindingFilter.of(x.resource_type, name, Pt.MATCH, None, None, Op.ANY, Perm.ANY)
    assert f.matches(x) == x.applies_to(x.resource_type, name)
    exact = AclBindingFilter(x.resource_type, x.name, x.pattern_type, x.principal, x.host, x.operation, x.permission)
    assert exact.matches(x)
    assert AclBinding.from_json(x.to_json()) == x


@settings(max_examples=200, deadline=None)
@given(st.lists(bindings, max_size=8), ops, resources)
def test_allow_needs_an_applying_allow(acls, op, name):
    """Without allow.everyone, a permitted request always has an ALLOW binding that applies."""
    az = Authorizer(bindings=acls)
    if az.authorize(ALICE, HOST, op, Rt.TOPIC, name):
        assert any(
            a.permission == Perm.ALLOW
            and a.applies_to(Rt.TOPIC, name)
            and a.principal in ("User:alice", "User:*")
            and a.host in ("*", HOST)
            for a in acls
        )


def _reference(acls, everyone, op, name) -> bool:
    """Kafka's rules spelled out over a plain scan (the oracle for the indexed lookups)."""
    applying = [a for a in acls if a.applies_to(Rt.TOPIC, name)]
    mine = [a for a in applying if a.principal in ("User:alice", "User:*") and a.host in ("*", HOST)]
    implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}}.get(op, set())
    if any(a.permission == Perm.DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    if any(a.permission == Perm.ALLOW and a.operation in ({op, Op.ALL} | implied) for a in mine):
        return True
    return everyone and not applying


@settings(max_examples=300, deadline=None)
@given(st.lists(bindings, max_size=10), ops, resources, st.booleans())
def test_decisions_equal_a_plain_scan_of_kafkas_rules(acls, op, name, everyone):
    az = Authorizer(allow_everyone_if_no_acl_found=everyone, bindings=acls)
    assert az.authorize(ALICE, HOST, op, Rt.TOPIC, name) == _reference(acls, everyone, op, name)
