"""ssl.principal.mapping.rules (Kafka's syntax and results) and the certificate subject as
Java's X500Principal.getName() prints it; sans-IO, no sockets."""

from __future__ import annotations

import pytest

from shoal.broker.security.ssl_principal import NoMatchingRule, PrincipalMapper, parse_rules
from shoal.broker.security.x500 import DerError, rfc2253_subject

KAFKA_RULES = (
    r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    r"RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    r"RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    "dn,name",
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=JavaSoft,o=Sun Microsystems", "duke"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_kafka_documented_rules(dn: str, name: str) -> None:
    assert PrincipalMapper.of(KAFKA_RULES).name(dn) == name


def test_default_is_the_whole_name() -> None:
    assert PrincipalMapper.of("DEFAULT").name("CN=a,O=b") == "CN=a,O=b"
    assert PrincipalMapper.of(None).name("CN=a") == "CN=a"


def test_upper_case_flag_and_first_match_wins() -> None:
    m = PrincipalMapper.of(r"RULE:^CN=([^,]*),.*$/$1/U, RULE:^CN=(.*)$/never/")
    assert m.name("CN=alice,O=x") == "ALICE"
    assert m.name("CN=bob") == "never"


def test_no_rule_matching_is_a_failure_not_a_fallback() -> None:
    m = PrincipalMapper.of(r"RULE:^CN=([^,]*),OU=Users$/$1/")
    with pytest.raises(NoMatchingRule):
        m.name("CN=alice,OU=Admins")


def test_the_pattern_must_match_the_whole_name() -> None:
    m = PrincipalMapper.of(r"RULE:CN=([a-z]+)/$1/,DEFAULT")
    assert m.name("CN=alice,O=x") == "CN=alice,O=x"  # a partial match is no match
    assert m.name("CN=alice") == "alice"


def test_escaped_slash_and_literal_text_in_replacement() -> None:
    m = PrincipalMapper.of(r"RULE:^CN=([^,]*)\/x,.*$/user\/$1-\$1/")
    assert m.name("CN=al/x,O=y") == "user/al-$1"


def test_named_groups_and_group_past_the_last_is_literal() -> None:
    assert PrincipalMapper.of(r"RULE:^CN=(?P<who>[^,]*).*$/${who}!/").name("CN=z,O=q") == "z!"
    # two groups: $3 does not exist and stays as text (Kafka escapes it), $12 reads as $1 then "2"
    m = PrincipalMapper.of(r"RULE:^CN=([^,]*),O=([^,]*)$/$1.$3.$12/")
    assert m.name("CN=a,O=b") == "a.$3.a2"


def test_dollar_zero_is_the_whole_match() -> None:
    assert PrincipalMapper.of(r"RULE:^CN=(x)$/[$0]/").name("CN=x") == "[CN=x]"


def test_parsing_splits_on_commas_outside_patterns_and_skips_blanks() -> None:
    rules = parse_rules(r" RULE:^CN=(.*?),OU=(.*?)$/$1/L ,  DEFAULT ")
    assert [r.text for r in rules] == [r"RULE:^CN=(.*?),OU=(.*?)$/$1/L", "DEFAULT"]
    assert len(parse_rules("DEFAULT,DEFAULT")) == 2


@pytest.mark.parametrize(
    "bad",
    [
        "RULE:^CN=(.*)$/$1/X",  # unknown flag
        "RULE:^CN=(.*)$",  # no replacement
        "NOTARULE",
        "RULE:^CN=(.*$/$1/",  # bad regex
        "RULE:^CN=x$/$1/",  # a group reference with no group
    ],
)
def test_bad_rules_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_rules(bad)


# --- the subject DN from DER -------------------------------------------------------------


def _der_len(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _tlv(tag: int, content: bytes) -> bytes:
    return bytes([tag]) + _der_len(len(content)) + content


def _oid(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    out = bytearray([arcs[0] * 40 + arcs[1]])
    for a in arcs[2:]:
        chunk = [a & 0x7F]
        a >>= 7
        while a:
            chunk.append(0x80 | (a & 0x7F))
            a >>= 7
        out += bytes(reversed(chunk))
    return _tlv(0x06, bytes(out))


def _cert(*rdns: list[tuple[str, int, bytes]]) -> bytes:
    """A certificate skeleton whose subject has ``rdns`` (issuer, validity and the rest are stubs)."""
    name = _tlv(
        0x30,
        b"".join(
            _tlv(0x31, b"".join(_tlv(0x30, _oid(oid) + _tlv(tag, value)) for oid, tag, value in rdn)) for rdn in rdns
        ),
    )
    tbs = _tlv(0xA0, _tlv(0x02, b"\x02")) + _tlv(0x02, b"\x01") + _tlv(0x30, b"") + _tlv(0x30, b"") + _tlv(0x30, b"")
    tbs += name + _tlv(0x30, b"")
    return _tlv(0x30, _tlv(0x30, tbs) + _tlv(0x30, b"") + _tlv(0x03, b"\x00"))


CN, ORG, OU, C, EMAIL, DC = (
    "2.5.4.3",
    "2.5.4.10",
    "2.5.4.11",
    "2.5.4.6",
    "1.2.840.113549.1.9.1",
    "0.9.2342.19200300.100.1.25",
)
UTF8, PRINTABLE, IA5 = 0x0C, 0x13, 0x16


def test_subject_is_printed_most_specific_first() -> None:
    der = _cert([(C, PRINTABLE, b"US")], [(ORG, UTF8, b"Acme")], [(OU, UTF8, b"Ops")], [(CN, UTF8, b"alice")])
    assert rfc2253_subject(der) == "CN=alice,OU=Ops,O=Acme,C=US"


def test_special_characters_are_escaped_as_java_does() -> None:
    der = _cert([(ORG, UTF8, b'A, B+C="q"<>;#x=y\\')], [(CN, UTF8, b" #lead trail ")])
    assert rfc2253_subject(der) == r"CN=\ \#lead trail\ ,O=A\, B\+C\=\"q\"\<\>\;\#x\=y\\"


def test_unknown_attributes_are_oid_and_hex_and_multi_valued_rdns_join_with_plus() -> None:
    der = _cert([(DC, IA5, b"example")], [(CN, UTF8, b"bob"), (EMAIL, IA5, b"b@x.io")])
    assert rfc2253_subject(der) == "CN=bob+1.2.840.113549.1.9.1=#16066240782e696f,DC=example"


def test_non_utf8_text_and_non_string_values() -> None:
    der = _cert([(CN, UTF8, "zoë".encode())], [(ORG, 0x04, b"\x01\x02")])  # an OCTET STRING is printed as hex
    assert rfc2253_subject(der) == "O=#04020102,CN=zoë"


def test_truncated_certificates_are_refused() -> None:
    der = _cert([(CN, UTF8, b"alice")])
    with pytest.raises(DerError):
        rfc2253_subject(der[: len(der) // 2])
    with pytest.raises(DerError):
        rfc2253_subject(b"\x02\x01\x00")


def test_real_certificate_against_cryptography() -> None:
    trustme = pytest.importorskip("trustme")
    from cryptography import x509

    cert = trustme.CA().issue_cert("h.example", common_name="svc, one", organization_unit_name="Team+A")
    pem = cert.cert_chain_pems[0].bytes()
    parsed = x509.load_pem_x509_certificate(pem)
    from cryptography.hazmat.primitives.serialization import Encoding

    dn = rfc2253_subject(parsed.public_bytes(Encoding.DER))
    assert dn.startswith(r"CN=svc\, one,OU=Team\+A,O=trustme")
    assert PrincipalMapper.of(r"RULE:^CN=(.*?),OU=.*$/$1/").name(dn) == r"svc\, one"
