"""Coordinator records (__consumer_offsets, __share_group_state) and
version-prefixed consumer-protocol payloads."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.protocol import construct_codec
from shoal.protocol import spec as S
from shoal.protocol.api import codec
from shoal.protocol.coordinator_records import decode_versioned, encode_versioned, serde
from shoal.protocol.exceptions import ProtocolError
from tests.support.strategies import message

GROUP = serde("group")
SHARE = serde("share")
RECORDS = [(c, name) for c, s in (("group", GROUP), ("share", SHARE)) for name in sorted(s.by_name)]


def test_types_are_separate_per_coordinator() -> None:
    assert GROUP.record_type("OffsetCommit").type_id == 1
    assert GROUP.record_type("GroupMetadata").type_id == 2
    assert SHARE.record_type("ShareSnapshot").type_id == 0
    assert SHARE.record_type("ShareUpdate").type_id == 1
    assert "ShareSnapshot" not in GROUP.by_name
    assert "OffsetCommit" not in SHARE.by_name
    assert {"ShareGroupMetadata", "ShareGroupStatePartitionMetadata"} <= set(GROUP.by_name)


@pytest.mark.parametrize(("coordinator", "name"), RECORDS)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_record_round_trip(coordinator: str, name: str, data: st.DataObject) -> None:
    s = serde(coordinator)
    rt = s.record_type(name)
    key = data.draw(message(rt.key, 0))
    version = data.draw(st.sampled_from(list(rt.value.versions)))
    value = data.draw(message(rt.value, version))
    kb = s.encode_key(name, key)
    vb = s.encode_value(name, value, version)
    assert struct.unpack(">h", kb[:2])[0] == rt.type_id
    assert struct.unpack(">h", vb[:2])[0] == version
    rec = s.decode(kb, vb)
    assert rec.type is rt and rec.key == key and rec.value == value and rec.value_version == version
    # the construct structure writes the same bytes
    assert construct_codec.build(rt.value, version, value) == vb[2:]
    tomb = s.decode(kb, None)
    assert tomb.value is None and tomb.key == key


def test_offset_commit_record_layout() -> None:
    """OffsetCommitKey: type 1, group (int16 string), topic, partition."""
    s = GROUP
    key = s.key_class("OffsetCommit")(group="g", topic="t", partition=3)
    assert s.encode_key("OffsetCommit", key) == bytes.fromhex("0001 0001 67 0001 74 00000003".replace(" ", ""))


def test_bad_records_raise_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        GROUP.decode(b"\x00", None)
    with pytest.raises(ProtocolError):
        GROUP.decode(b"\x7f\x00", None)  # unknown type
    key = GROUP.encode_key("GroupMetadata", GROUP.key_class("GroupMetadata")(group="g"))
    with pytest.raises(ProtocolError):
        GROUP.decode(key, b"\x00\x63")  # value version 99
    with pytest.raises(ProtocolError):
        GROUP.decode(key, b"\x00\x03\x00\x08con")  # truncated value


def test_consumer_protocol_round_trip_and_newer_versions() -> None:
    spec = S.load("ConsumerProtocolSubscription")
    sub = codec("ConsumerProtocolSubscription", 1).cls(topics=["a", "b"], user_data=b"u")
    data = encode_versioned("ConsumerProtocolSubscription", 1, sub)
    assert decode_versioned("ConsumerProtocolSubscription", data) == (1, sub)
    # A newer version than ours is read with our newest layout (fields are appended).
    newest = spec.valid_versions.hi
    data = struct.pack(">h", newest + 1) + encode_versioned("ConsumerProtocolSubscription", newest, sub)[2:] + b"xx"
    version, obj = decode_versioned("ConsumerProtocolSubscription", data)
    assert version == newest + 1 and obj.topics == ["a", "b"]
    with pytest.raises(ProtocolError):
        decode_versioned("ConsumerProtocolSubscription", b"\x00")
