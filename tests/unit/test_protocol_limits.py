"""Decoding limits (shoal/protocol/limits.py) on both decoders: the compiled one that serves
every request and the construct description that names failing fields.

Each hostile input here is one a decoder checking only "count against the bytes left" accepts:
the bytes are really there. With the caps, an array of more than 1,000,000 elements or a
tagged-field section of more than 10,000 fields is refused before anything is allocated; one
element or one field fewer still decodes, so the caps are exactly where they claim to be.
"""

from __future__ import annotations

import construct as C
import pytest

from shoal.protocol import construct_codec
from shoal.protocol.api import api_by_name, codec
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.limits import MAX_ARRAY_ELEMENTS, MAX_TAGGED_FIELDS

SA = api_by_name("ShareAcknowledge").request_class()


def _uv(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _acknowledge_with_types(n: int) -> bytes:
    batch = SA.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[1] * n)
    body = SA(
        group_id="g",
        member_id="m",
        share_session_epoch=1,
        topics=[SA.AcknowledgeTopic(partitions=[SA.AcknowledgePartition(acknowledgement_batches=[batch])])],
    )
    out: list = []
    codec("ShareAcknowledgeRequest", 1).encode_into(body, out)
    return b"".join(bytes(p) for p in out)


def _spec(name: str):
    return codec(name, 0 if name != "FetchRequest" else 12).spec


def test_an_array_over_the_cap_is_refused_by_both_decoders() -> None:
    c = codec("ShareAcknowledgeRequest", 1)
    at_cap = c.decode_all(_acknowledge_with_types(MAX_ARRAY_ELEMENTS))
    assert len(at_cap.topics[0].partitions[0].acknowledgement_batches[0].acknowledge_types) == MAX_ARRAY_ELEMENTS
    over = _acknowledge_with_types(MAX_ARRAY_ELEMENTS + 1)
    with pytest.raises(ProtocolError, match="1000000 elements"):
        c.decode_all(over)
    with pytest.raises(C.ConstructError, match="above 1000000"):
        construct_codec.parse(c.spec, 1, over)


def _with_tags(name: str, version: int, n: int) -> bytes:
    """A valid message whose top-level tagged-field section is replaced by `n` empty fields of
    a tag no version knows (tag 1000)."""
    out: list = []
    codec(name, version).encode_into(codec(name, version).cls(), out)
    valid = b"".join(bytes(p) for p in out)
    assert valid[-1] == 0  # the empty top-level tagged section comes last
    return valid[:-1] + _uv(n) + (_uv(1000) + b"\x00") * n


@pytest.mark.parametrize(
    ("name", "version"),
    [("ShareAcknowledgeRequest", 1), ("FetchRequest", 12)],
    ids=["no known tags", "known tags"],  # _skip_tags, and the inline loop of a struct with tagged fields
)
def test_a_tagged_section_over_the_cap_is_refused_by_both_decoders(name: str, version: int) -> None:
    c = codec(name, version)
    c.decode_all(_with_tags(name, version, MAX_TAGGED_FIELDS))
    over = _with_tags(name, version, MAX_TAGGED_FIELDS + 1)
    with pytest.raises(ProtocolError, match="tagged"):
        c.decode_all(over)
    with pytest.raises(C.ConstructError, match="tagged-field section"):
        construct_codec.parse(c.spec, version, over)


@pytest.mark.parametrize("claimed", [MAX_TAGGED_FIELDS, 2**31 - 1])
def test_a_tag_count_the_bytes_cannot_hold_is_refused_at_once(claimed: int) -> None:
    """Two bytes per field at least (a tag and a size): a count above half the bytes left is a lie."""
    c = codec("ShareAcknowledgeRequest", 1)
    valid = _with_tags("ShareAcknowledgeRequest", 1, 0)
    with pytest.raises(ProtocolError, match="tagged"):
        c.decode_all(valid[:-1] + _uv(claimed) + b"\x00" * 8)


def test_an_array_count_of_two_to_the_31_is_refused_without_allocating() -> None:
    c = codec("ShareAcknowledgeRequest", 1)
    head = _acknowledge_with_types(1)
    # GroupId "g", MemberId "m", epoch, then the Topics count: claim 2^31 - 1 topics in a 20-byte frame
    hostile = head[: 2 + 2 + 4] + _uv(2**31) + b"\x00" * 8
    with pytest.raises(ProtocolError):
        c.decode_all(hostile)
    with pytest.raises(C.ConstructError):
        construct_codec.parse(c.spec, 1, hostile)
