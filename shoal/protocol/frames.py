"""Frame layer: size prefixes, request/response headers, correlation ids.

Kafka frames are `int32 size` + payload. A request payload is a request header
(v1, or v2 with a tagged-field section when the API version is flexible) and
the body; a response payload is a response header (v0, or v1 when flexible —
except ApiVersions, always v0) and the body.

`FrameReader` is sans-IO: feed it bytes as they arrive, take complete frames
out. It rejects a frame whose declared size exceeds the limit before
buffering it (`socket.request.max.bytes` on the broker), so a lying length
costs nothing. Frames come out as memoryviews over one buffer, so decoding a
1 MiB produce request copies its record batch zero times.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from shoal.protocol.api import Api, api, codec
from shoal.protocol.exceptions import ProtocolError

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hhi")


class FrameTooLarge(ProtocolError):
    """A frame declared a size above the reader's limit (or a negative one)."""


class UnsupportedRequest(ProtocolError):
    """The header names an API key or version this side does not implement.

    The broker answers an unknown ApiVersions version with a v0 body carrying
    UNSUPPORTED_VERSION, and closes the connection for anything else, as
    Kafka does; `correlation_id` lets it do the former.
    """

    def __init__(self, message: str, *, api_key: int, version: int, correlation_id: int) -> None:
        super().__init__(message, api_key=api_key, version=version)
        self.correlation_id = correlation_id


class FrameReader:
    """Accumulates bytes and yields complete frame payloads (without the size)."""

    __slots__ = ("_buf", "_start", "max_size")

    def __init__(self, max_size: int = 104857600) -> None:
        self._buf = bytearray()
        self._start = 0
        self.max_size = max_size

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add bytes; return every frame completed by them (possibly none)."""
        buf = self._buf
        if self._start:
            del buf[: self._start]
            self._start = 0
        buf += data
        frames: list[memoryview] = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_size:
                raise FrameTooLarge(f"frame size {size} outside 0..{self.max_size}", offset=pos)
            if n - pos - 4 < size:
                break
            # One copy out of the shared buffer (a bytearray with exported
            # views cannot be resized, so frames must own their bytes).
            frames.append(memoryview(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        self._start = pos
        return frames

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet form a complete frame."""
        return len(self._buf) - self._start

    def pending_size(self) -> int | None:
        """Declared size of the frame being accumulated, if its prefix arrived."""
        if len(self._buf) - self._start >= 4:
            return _SIZE.unpack_from(self._buf, self._start)[0]
        return None


@dataclass(slots=True)
class Request:
    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    body: Any
    header: Any


def peek_request(frame: Any) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request."""
    if len(frame) < 8:
        raise ProtocolError("request shorter than its header", offset=len(frame))
    return _KEY_VERSION.unpack_from(frame, 0)


def decode_request(frame: Any) -> Request:
    """Decode one request payload (a frame without its size prefix)."""
    api_key, version, correlation_id = peek_request(frame)
    a = api(api_key)
    if a is None or version not in a.request.valid_versions:
        raise UnsupportedRequest(
            f"unsupported API {api_key} version {version}",
            api_key=api_key,
            version=version,
            correlation_id=correlation_id,
        )
    header, pos = codec("RequestHeader", a.request_header_version(version)).decode(frame)
    body, _ = a.request_codec(version).decode(frame, pos)
    return Request(a, version, correlation_id, header.client_id, body, header)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any) -> list:
    """A complete request frame (size prefix included) as a list of buffers."""
    a = api(api_key)
    if a is None:
        raise ProtocolError(f"unknown API {api_key}", api_key=api_key, version=version)
    hcodec = codec("RequestHeader", a.request_header_version(version))
    header = hcodec.cls(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out: list = [b""]
    hcodec.encode_into(header, out)
    a.request_codec(version).encode_into(body, out)
    out[0] = _SIZE.pack(sum(map(len, out)))
    return out


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> list:
    """A complete response frame (size prefix included) as a list of buffers."""
    a = api(api_key)
    if a is None:
        raise ProtocolError(f"unknown API {api_key}", api_key=api_key, version=version)
    hcodec = codec("ResponseHeader", a.response_header_version(version))
    out: list = [b""]
    hcodec.encode_into(hcodec.cls(correlation_id=correlation_id), out)
    # Responses are built once for any version: fields a version lacks are dropped.
    a.response_codec(version).encode_into_lenient(body, out)
    out[0] = _SIZE.pack(sum(map(len, out)))
    return out


def peek_correlation_id(frame: Any) -> int:
    if len(frame) < 4:
        raise ProtocolError("response shorter than its correlation id", offset=len(frame))
    return _SIZE.unpack_from(frame, 0)[0]


def decode_response(frame: Any, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation_id, body) of one response payload for a known request."""
    a = api(api_key)
    if a is None:
        raise ProtocolError(f"unknown API {api_key}", api_key=api_key, version=version)
    hcodec = codec("ResponseHeader", a.response_header_version(version))
    header, pos = hcodec.decode(frame)
    body, _ = a.response_codec(version).decode(frame, pos)
    return header.correlation_id, body
