"""Frame layer: size prefixes, request/response headers, correlation ids.

Kafka frames are `int32 size` + payload. A request payload is a request header
(v1, or v2 with a tagged-field section when the API version is flexible) and
the body; a response payload is a response header (v0, or v1 when flexible —
except ApiVersions, always v0) and the body.

`Framer` is the one place a size prefix is read: a sans-IO state machine over
buffers its caller owns (the broker's `Connection` and the client's
`BrokerConnection` keep only buffer management and I/O). It rejects a frame
whose declared size is out of bounds before buffering it
(`socket.request.max.bytes` on the broker), so a lying length costs nothing,
and cuts frames out as memoryviews, so decoding a 1 MiB produce request
received into a buffer of its own copies its record batch zero times; it
lets the caller decide where a large frame's bytes go. `FrameReader` is its
simplest caller: feed it bytes as they arrive, take complete frames out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from shoal.protocol.api import Api, api, codec
from shoal.protocol.exceptions import ProtocolError

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hhi")


PREFIX = _SIZE.size  # bytes of a frame's size prefix


class FrameTooLarge(ProtocolError):
    """A frame declared a size above the reader's limit (or a negative one)."""


class Framer:
    """Where frames begin and end in bytes the caller holds: the one size-prefix parser.

    Sans-IO and copy-free by default: the caller owns every buffer, reads into
    it, and shows the framer how far the bytes go; the framer reads size
    prefixes, checks them, and cuts payloads out as memoryviews. The broker's
    and the client's connections both frame through it, so the rules about
    sizes live here once.

    Two states:

    * **Between frames** (``pos`` is the cursor in the caller's buffer, set by
      the caller to where its bytes start). ``next(buf, n)`` returns the
      payload of the whole frame at ``pos`` in ``buf[:n]`` and moves ``pos``
      past it, or returns None when that frame is incomplete; ``partial`` is
      then its declared payload size, or -1 while fewer than ``PREFIX`` bytes
      of it are there. A declared size outside ``min_size..max_size`` raises
      ``FrameTooLarge`` as soon as its prefix is seen, before any of the
      payload is buffered, so a lying length costs nothing. Frames before the
      bad one have been handed out already, one ``next`` at a time, so a
      caller can answer them before it gives up on the stream.
    * **Inside one frame whose bytes go where the caller chose** (a frame too
      big for its staging buffer). ``receive_into`` moves the bytes already
      seen into a buffer of the caller's and ``receive_in_place`` keeps them
      where they lie; the payload then spans ``start:end`` of that buffer,
      ``filled`` is how far it has arrived, ``window`` is where the next
      bytes go and ``received`` counts them in, saying when the frame is whole.
    """

    __slots__ = ("end", "filled", "limit", "max_size", "min_size", "partial", "pos", "start")

    def __init__(self, max_size: int, *, min_size: int = 0, limit: str = "the frame size limit") -> None:
        self.max_size = max_size
        self.min_size = min_size
        self.limit = limit  # named in the error: "socket.request.max.bytes" on the broker
        self.pos = 0
        self.partial = -1
        self.start = self.end = self.filled = 0

    def _bad(self, size: int) -> FrameTooLarge:
        if size < self.min_size:
            return FrameTooLarge(f"frame of {size} bytes is below the minimum of {self.min_size}", offset=self.pos)
        return FrameTooLarge(f"frame of {size} bytes exceeds {self.limit} {self.max_size}", offset=self.pos)

    # -- between frames ------------------------------------------------------------
    def next(self, buf: Any, n: int, copy: bool = False) -> memoryview | None:
        """The payload of the frame at ``pos`` if ``buf[:n]`` holds all of it (then ``pos``
        moves past it); None if not (see ``partial``). ``copy``: the payload gets bytes of
        its own, for a buffer the caller reuses at once."""
        pos = self.pos
        if n - pos < 4:
            self.partial = -1
            return None
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < self.min_size or size > self.max_size:
            raise self._bad(size)
        end = pos + 4 + size
        if end > n:
            self.partial = size
            return None
        self.pos = end
        frame = memoryview(buf)[pos + 4 : end]
        return memoryview(frame.tobytes()) if copy else frame

    def peek(self, buf: Any, n: int) -> int:
        """The declared payload size of the frame at ``pos`` (checked as ``next`` does), or -1
        while ``buf[:n]`` holds less than its prefix; nothing is cut."""
        if n - self.pos < 4:
            self.partial = -1
        else:
            (size,) = _SIZE.unpack_from(buf, self.pos)
            if size < self.min_size or size > self.max_size:
                raise self._bad(size)
            self.partial = size
        return self.partial

    # -- inside a frame received where the caller chose ------------------------------
    def receive_into(self, src: Any, n: int, dst: Any) -> None:
        """Receive the incomplete frame at ``pos`` into ``dst``: the part of its payload in
        ``src[:n]`` is copied to the start of ``dst``, the rest goes after it. Everything in
        ``src[:n]`` is then consumed (``pos == n``)."""
        have = n - self.pos - 4
        if have:
            dst[:have] = memoryview(src)[self.pos + 4 : n]
        self.start, self.end, self.filled = 0, self.partial, have
        self.pos = n

    def receive_in_place(self, n: int) -> bool:
        """Receive the frame at ``pos`` (its size seen by ``peek`` or ``next``) where it lies:
        its payload is ``start:end`` of the same buffer, ``n`` bytes of which have arrived.
        True if the whole frame is there already (then ``end`` is where what follows it
        starts); False if the next bytes go to ``window``."""
        self.start = self.pos + 4
        self.end = self.start + self.partial
        self.filled = min(n, self.end)
        return n >= self.end

    def window(self, buf: Any) -> memoryview:
        """Where the next bytes of the frame being received go."""
        return memoryview(buf)[self.filled : self.end]

    def received(self, nbytes: int) -> bool:
        """``nbytes`` arrived in ``window``; True once the frame is whole (``start:end``)."""
        self.filled += nbytes
        return self.filled >= self.end

    def payload(self, buf: Any) -> memoryview:
        """The whole frame just received in ``buf``."""
        return memoryview(buf)[self.start : self.end]


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
    """Accumulates bytes and yields complete frame payloads (without the size).

    The simplest caller of ``Framer``: one growing ``bytearray``, every frame
    copied out of it (a bytearray with exported views cannot be resized).
    """

    __slots__ = ("_buf", "_framer")

    def __init__(self, max_size: int = 104857600) -> None:
        self._buf = bytearray()
        self._framer = Framer(max_size)

    @property
    def max_size(self) -> int:
        return self._framer.max_size

    @max_size.setter
    def max_size(self, value: int) -> None:
        self._framer.max_size = value

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Add bytes; return every frame completed by them (possibly none)."""
        buf = self._buf
        framer = self._framer
        if framer.pos:
            del buf[: framer.pos]
            framer.pos = 0
        buf += data
        frames: list[memoryview] = []
        n = len(buf)
        while (frame := framer.next(buf, n, copy=True)) is not None:
            frames.append(frame)
        return frames

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet form a complete frame."""
        return len(self._buf) - self._framer.pos

    def pending_size(self) -> int | None:
        """Declared size of the frame being accumulated, if its prefix arrived."""
        size = self._framer.partial
        return size if size >= 0 else None


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


def encode_frame(payload: bytes) -> bytes:
    """A bare size-prefixed frame with no header: how SASL tokens travel after a SaslHandshake v0."""
    return _SIZE.pack(len(payload)) + payload


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
