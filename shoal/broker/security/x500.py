"""A certificate's subject as the distinguished-name string Kafka's principal rules see.

Why our own DER reading: ``ssl.principal.mapping.rules`` are regular expressions written
against the string Java's ``X500Principal.getName()`` gives (RFC 2253: the most specific
RDN first, keywords CN, C, L, ST, O, OU, STREET, DC and UID, any other attribute as its
dotted OID with the hex of its DER value, backslash escapes). Python's ``getpeercert()``
dict loses what that string needs (value types, unknown attributes' bytes, multi-valued
RDN grouping is kept but not the DER), so the subject is read from the certificate's DER
bytes here: a few dozen lines of tag-length-value walking, no asyncio, no ssl module.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DerError", "rfc2253_subject", "subject_rdns"]


class DerError(ValueError):
    """The bytes are not the certificate structure we expect."""


# Attribute keywords Java prints in RFC 2253 form; any other attribute is printed as its OID.
_KEYWORDS: Final = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# DER string types whose value is printed as text (others as #hex of the whole DER value).
_STRING_TAGS: Final = frozenset({0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E})  # UTF8, Printable, T61, IA5, General, BMP
_ESCAPED: Final = frozenset(',=+<>#;"\\')
_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06


def _tlv(data: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of the content, end of the content) of the element at ``pos``."""
    if pos + 2 > len(data):
        raise DerError("truncated element")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise DerError("high tag numbers are not expected here")
    first = data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or pos + count > len(data):
            raise DerError("bad length")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise DerError("element runs past its container")
    return tag, pos, pos + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, content start, content end) of each element in ``data[start:end]``."""
    out = []
    pos = start
    while pos < end:
        tag, s, e = _tlv(data, pos)
        if e > end:
            raise DerError("element runs past its container")
        out.append((tag, pos, s, e))
        pos = e
    return out


def _oid(content: bytes) -> str:
    if not content:
        raise DerError("empty OID")
    arcs: list[int] = []
    value = 0
    for b in content:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            arcs.append(value)
            value = 0
    first = arcs[0]
    head = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    return ".".join(str(a) for a in head + arcs[1:])


def subject_rdns(cert_der: bytes) -> list[list[tuple[str, int, bytes, bytes]]]:
    """The subject's RDNs in certificate order; each a list of (OID, value tag, value content,
    whole DER value)."""
    tag, s, e = _tlv(cert_der, 0)
    if tag != _SEQUENCE:
        raise DerError("a certificate is a SEQUENCE")
    tag, s, e = _tlv(cert_der, s)  # tbsCertificate
    if tag != _SEQUENCE:
        raise DerError("tbsCertificate is a SEQUENCE")
    fields = _children(cert_der, s, e)
    if fields and fields[0][0] == 0xA0:  # [0] version
        fields = fields[1:]
    if len(fields) < 5:
        raise DerError("tbsCertificate is too short")
    # serialNumber, signature, issuer, validity, subject
    tag, _, s, e = fields[4]
    if tag != _SEQUENCE:
        raise DerError("subject is a SEQUENCE")
    rdns = []
    for rtag, _, rs, re_ in _children(cert_der, s, e):
        if rtag != _SET:
            raise DerError("an RDN is a SET")
        avas = []
        for atag, _, as_, ae in _children(cert_der, rs, re_):
            if atag != _SEQUENCE:
                raise DerError("an attribute is a SEQUENCE")
            parts = _children(cert_der, as_, ae)
            if len(parts) != 2 or parts[0][0] != _OID:
                raise DerError("an attribute is (OID, value)")
            oid = _oid(cert_der[parts[0][2] : parts[0][3]])
            vtag, vstart, vs, ve = parts[1]
            avas.append((oid, vtag, bytes(cert_der[vs:ve]), bytes(cert_der[vstart:ve])))
        rdns.append(avas)
    return rdns


def _value_text(text: str) -> str:
    out = []
    for c in text:
        if c in _ESCAPED:
            out.append("\\" + c)
        elif c == "\0":
            out.append("\\00")
        else:
            out.append(c)
    chars = "".join(out)
    # Leading and trailing blanks (space, CR) are escaped one by one.
    first = next((i for i, c in enumerate(chars) if c not in " \r"), len(chars))
    last = next((i for i in range(len(chars) - 1, -1, -1) if chars[i] not in " \r"), -1)
    return "".join("\\" + c if i < first or i > last else c for i, c in enumerate(chars))


def _ava(oid: str, tag: int, content: bytes, whole: bytes) -> str:
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{whole.hex()}"
    # Java reads the content bytes of every string type as UTF-8 here (BMPString included).
    return f"{keyword}={_value_text(content.decode('utf-8', errors='replace'))}"


def rfc2253_subject(cert_der: bytes) -> str:
    """The subject as ``X500Principal.getName()`` prints it: most specific RDN first."""
    rdns = subject_rdns(cert_der)
    return ",".join("+".join(_ava(*ava) for ava in rdn) for rdn in reversed(rdns))
