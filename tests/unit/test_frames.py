"""Frame layer: feeding whole, byte by byte and with trailing bytes; headers;
unsupported APIs; lying lengths."""

from __future__ import annotations

import struct
import time

import pytest

from shoal.protocol.api import api_by_name, codec
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.frames import (
    FrameReader,
    FrameTooLarge,
    UnsupportedRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    peek_correlation_id,
)


def _frames() -> list[bytes]:
    hb = api_by_name("ShareGroupHeartbeat")
    md = api_by_name("Metadata")
    out = []
    for corr in range(3):
        body = hb.request_class()(group_id="g", member_id=f"m{corr}", member_epoch=corr)
        out.append(b"".join(encode_request(hb.key, 1, corr, "c", body)))
    out.append(b"".join(encode_request(md.key, 12, 9, None, md.request_class()(topics=None))))
    return out


def _payloads(frames: list[bytes]) -> list[bytes]:
    return [f[4:] for f in frames]


def test_reader_whole_stream() -> None:
    frames = _frames()
    got = FrameReader().feed(b"".join(frames))
    assert [bytes(g) for g in got] == _payloads(frames)


def test_reader_byte_by_byte() -> None:
    frames = _frames()
    reader = FrameReader()
    got = []
    for b in b"".join(frames):
        got.extend(reader.feed(bytes([b])))
    assert [bytes(g) for g in got] == _payloads(frames)
    assert reader.pending == 0


def test_reader_trailing_partial_frame() -> None:
    frames = _frames()
    stream = b"".join(frames)
    reader = FrameReader()
    got = reader.feed(stream + frames[0][:7])
    assert [bytes(g) for g in got] == _payloads(frames)
    assert reader.pending == 7
    assert reader.pending_size() == len(frames[0]) - 4
    got = reader.feed(frames[0][7:])
    assert [bytes(g) for g in got] == _payloads(frames[:1])


def test_reader_rejects_oversized_before_buffering() -> None:
    reader = FrameReader(max_size=1000)
    with pytest.raises(FrameTooLarge):
        reader.feed(struct.pack(">i", 1001))
    with pytest.raises(FrameTooLarge):
        FrameReader().feed(struct.pack(">i", -5))


def test_decoded_frames_survive_more_input() -> None:
    """A frame handed out stays valid after the reader takes more bytes."""
    frames = _frames()
    reader = FrameReader()
    first = reader.feed(frames[0])[0]
    reader.feed(b"".join(frames[1:]) * 50)
    assert bytes(first) == frames[0][4:]


def test_request_with_trailing_bytes_decodes() -> None:
    """Kafka reads what the version defines and ignores extra bytes in a frame."""
    payload = _frames()[0][4:] + b"\x00\x01\x02"
    req = decode_request(memoryview(payload))
    assert req.body.member_id == "m0"


def test_every_request_and_response_frame_round_trips() -> None:
    hb = api_by_name("ShareGroupHeartbeat")
    for frame in _frames()[:3]:
        req = decode_request(memoryview(frame[4:]))
        assert req.api is hb and req.version == 1
        resp = hb.response_class()(member_id=req.body.member_id, member_epoch=1, heartbeat_interval_ms=5000)
        out = b"".join(encode_response(hb.key, 1, req.correlation_id, resp))
        assert struct.unpack(">i", out[:4])[0] == len(out) - 4
        assert peek_correlation_id(out[4:]) == req.correlation_id
        corr, body = decode_response(memoryview(out[4:]), hb.key, 1)
        assert corr == req.correlation_id and body == resp


def test_unknown_api_and_version() -> None:
    frame = struct.pack(">hhi", 18, 99, 42) + b"\x00\x00"
    with pytest.raises(UnsupportedRequest) as e:
        decode_request(frame)
    assert (e.value.api_key, e.value.version, e.value.correlation_id) == (18, 99, 42)
    with pytest.raises(UnsupportedRequest):
        decode_request(struct.pack(">hhi", 9999, 0, 1))
    with pytest.raises(ProtocolError):
        decode_request(b"\x00\x12")


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    a = api_by_name("ApiVersions")
    out = b"".join(encode_response(a.key, 3, 7, a.response_class()()))
    # correlation id, then directly the body's error code (no tagged-field byte)
    assert out[4:8] == struct.pack(">i", 7)
    assert out[8:10] == b"\x00\x00"


def test_lying_array_count_rejected_without_allocation() -> None:
    """An array claiming 2^31-1 entries in a 20-byte message fails at once."""
    c = codec("MetadataRequest", 4)
    data = struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 16
    t = time.perf_counter()
    with pytest.raises(ProtocolError) as e:
        c.decode(data)
    assert time.perf_counter() - t < 1.0
    assert "topics" in e.value.path


def test_lying_string_length_names_field_and_offset() -> None:
    c = codec("ShareGroupHeartbeatRequest", 1)
    data = b"\x7f" + b"g" * 5  # group id claims 126 bytes
    with pytest.raises(ProtocolError) as e:
        c.decode(data)
    assert "group_id" in e.value.path
    assert e.value.api_key == 76 and e.value.version == 1
    assert e.value.offset is not None


def test_truncated_fixed_fields_name_field() -> None:
    c = codec("ShareGroupHeartbeatRequest", 1)
    full = c.encode(c.cls(group_id="g", member_id="m", member_epoch=3))
    with pytest.raises(ProtocolError) as e:
        c.decode(full[:6])
    assert e.value.path == "member_epoch"


def test_encode_rejects_non_ignorable_field_missing_from_version() -> None:
    """Kafka refuses to silently drop a set field that a version lacks."""
    a = api_by_name("FindCoordinator")
    req = a.request_class()(key="g", key_type=2)  # KeyType is v1+, not ignorable
    a.request_codec(1).encode(req)
    with pytest.raises(ProtocolError):
        a.request_codec(0).encode(req)
    # An ignorable field (Fetch RackId, v11+) is dropped silently instead.
    f = api_by_name("Fetch")
    assert f.request_codec(10).encode(f.request_class()(rack_id="r1"))


def test_responses_drop_fields_their_version_lacks() -> None:
    """A broker answers v3 ListOffsets from the same object it would send at v4+."""
    a = api_by_name("ListOffsets")
    R = a.response_class()
    body = R(
        topics=[
            R.ListOffsetsTopicResponse(
                name="t", partitions=[R.ListOffsetsPartitionResponse(partition_index=0, offset=5, leader_epoch=0)]
            )
        ]
    )
    with pytest.raises(ProtocolError):
        a.response_codec(3).encode(body)  # strict: LeaderEpoch is v4+ and not ignorable
    out = b"".join(encode_response(a.key, 3, 1, body))
    _, back = decode_response(memoryview(out[4:]), a.key, 3)
    assert back.topics[0].partitions[0].offset == 5 and back.topics[0].partitions[0].leader_epoch == -1
