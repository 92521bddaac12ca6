"""Compression codecs for Kafka record batches (gzip, snappy, lz4, zstd).

Why this module exists separately from ``records``: codec quirks are numerous
and orthogonal to the batch layout, and every one of them is a place where
hostile input can hurt the broker.  Keeping them here gives one choke point
that (a) turns every codec failure into ``ProtocolError`` and (b) enforces a
hard cap on decompressed size.

Design notes:

* All codecs go through ``cramjam`` (one wheel, no C build, releases the GIL).
* Decompression bombs: a few KiB of zstd can expand to gigabytes.  We never
  call a codec's "decompress to a fresh buffer" API on untrusted input.
  Instead we decompress *into* a caller-sized ``bytearray`` with cramjam's
  ``decompress_into``, which stops with an error once the buffer is full.  The
  buffer starts at a guess (the exact size when the format declares it) and
  doubles up to ``max_size``; anything bigger is rejected.  Memory is bounded
  by ``max_size`` no matter what the input claims.
* Snappy: the Java client writes the *xerial* framing (``\\x82SNAPPY\\x00`` +
  version + compatible version + ``[int32 length][raw snappy block]`` chunks),
  librdkafka writes raw snappy.  We read both and write xerial, like Java, so
  every client can read what we produce.
* LZ4: magic 1/2 use standard LZ4 frames.  Magic 0 producers (Kafka 0.8/0.9,
  KAFKA-3160) computed the frame header checksum over the magic number too;
  we recompute the correct checksum before decoding such payloads.  That needs
  xxHash32 of at most 14 bytes, implemented below rather than adding a
  dependency.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum

import cramjam

from shoal.protocol.exceptions import ProtocolError

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "Compression",
    "compress",
    "decompress",
    "xxh32_short",
]

#: Default cap on the decompressed size of one batch (or legacy wrapper).
DEFAULT_MAX_DECOMPRESSED_SIZE = 128 * 1024 * 1024

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # the Java client's (xerial's) default block size
_INT32 = struct.Struct(">i")
_UINT32_LE = struct.Struct("<I")
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_MIN_GUESS = 64 * 1024
# What cramjam raises on bad input (DecompressionError for most codecs,
# OSError from its streaming readers, ValueError/OverflowError on odd sizes).
_CODEC_ERRORS = (cramjam.DecompressionError, OSError, ValueError, OverflowError)
_SNAPPY_MAX_RATIO = 24


class Compression(IntEnum):
    """Codec ids as stored in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` the way the Java client does."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=6 if level is None else level))
    if codec == Compression.SNAPPY:
        return _xerial_encode(data)
    if codec == Compression.LZ4:
        # Standard frame, independent blocks, 64 KiB block size.
        return bytes(cramjam.lz4.compress(data, level=level))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=3 if level is None else level))
    raise ProtocolError(f"unknown compression codec {codec}", path="attributes")


def decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    *,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    legacy_lz4_checksum: bool = False,
) -> memoryview:
    """Decompress ``data``; return a view of at most ``max_size`` bytes.

    Raises ProtocolError on unknown codec, corrupt input, or output larger
    than ``max_size``.  ``legacy_lz4_checksum`` accepts the broken frame
    header checksum written for magic 0 messages.
    """
    view = memoryview(data)
    if codec == Compression.GZIP:
        return _bounded(cramjam.gzip.decompress_into, view, _guess(view), max_size, "gzip")
    if codec == Compression.SNAPPY:
        if view[: len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
            return _xerial_decode(view, max_size)
        return _snappy_raw(view, max_size)
    if codec == Compression.LZ4:
        if legacy_lz4_checksum:
            view = _fix_legacy_lz4_header(view)
        return _bounded(cramjam.lz4.decompress_into, view, _lz4_guess(view), max_size, "lz4")
    if codec == Compression.ZSTD:
        return _bounded(cramjam.zstd.decompress_into, view, _zstd_guess(view), max_size, "zstd")
    if codec == Compression.NONE:
        return view
    raise ProtocolError(f"unknown compression codec {codec}", path="attributes")


# --------------------------------------------------------------------------
# bounded decompression


def _guess(view: memoryview) -> int:
    return max(_MIN_GUESS, 4 * len(view))


def _bounded(
    fn: Callable[[memoryview, bytearray], int], view: memoryview, guess: int, max_size: int, name: str
) -> memoryview:
    """Decompress with ``fn(src, dst) -> n`` into buffers growing to max_size.

    A buffer exactly filled is ambiguous (maybe more output is pending), so a
    buffer of size ``n`` is only trusted when it returns fewer than ``n``
    bytes, or when ``n`` is one more than the cap allows.
    """
    limit = max_size + 1
    size = min(max(guess, 1), limit)
    while True:
        out = bytearray(size)
        try:
            n = fn(view, out)
        except _CODEC_ERRORS as exc:
            full = "whole buffer" in str(exc) or "fill whole" in str(exc)
            if full and size < limit:
                size = min(size * 2, limit)
                continue
            if full:
                raise ProtocolError(
                    f"{name} payload decompresses to more than {max_size} bytes",
                    path="records",
                ) from None
            raise ProtocolError(f"corrupt {name} payload: {exc}", path="records") from None
        if n < size:
            return memoryview(out)[:n]
        if size >= limit:
            raise ProtocolError(f"{name} payload decompresses to more than {max_size} bytes", path="records")
        size = min(size * 2, limit)


def _zstd_guess(view: memoryview) -> int:
    """Use the frame content size from the zstd frame header when present."""
    if len(view) < 6 or view[:4] != b"\x28\xb5\x2f\xfd":
        return _guess(view)
    fhd = view[4]
    fcs_flag = fhd >> 6
    single = (fhd >> 5) & 1
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    fcs_len = (0 if not single else 1, 2, 4, 8)[fcs_flag]
    if fcs_len == 0 or pos + fcs_len > len(view):
        return _guess(view)
    size = int.from_bytes(view[pos : pos + fcs_len], "little")
    if fcs_len == 2:
        size += 256
    # The declared size is only trusted up to a plausible ratio (a lying
    # header must not make us allocate max_size up front); growth covers
    # genuinely extreme ratios.
    return min(size + 1, max(_MIN_GUESS, 64 * len(view)))


def _lz4_guess(view: memoryview) -> int:
    """Use the content size from the LZ4 frame descriptor when present."""
    if len(view) >= 15 and view[:4] == _LZ4_MAGIC and view[4] & 0x08:
        # LZ4 cannot expand more than ~255x, so a bigger claim is a lie.
        return min(int.from_bytes(view[6:14], "little") + 1, 256 * len(view) + 1024)
    return _guess(view)


def _snappy_raw(view: memoryview, max_size: int) -> memoryview:
    try:
        size = cramjam.snappy.decompress_raw_len(view)
    except _CODEC_ERRORS as exc:
        raise ProtocolError(f"corrupt snappy payload: {exc}", path="records") from None
    if size > max_size:
        raise ProtocolError(f"snappy payload declares {size} bytes, more than {max_size}", path="records")
    if size > _SNAPPY_MAX_RATIO * len(view) + 64:
        # A snappy element never expands more than ~22x (3-byte copy of 64
        # bytes), so the preamble is lying: reject before allocating.
        raise ProtocolError(
            f"snappy payload declares {size} bytes from {len(view)} input bytes",
            path="records",
        )
    out = bytearray(size)
    try:
        n = cramjam.snappy.decompress_raw_into(view, out)
    except _CODEC_ERRORS as exc:
        raise ProtocolError(f"corrupt snappy payload: {exc}", path="records") from None
    return memoryview(out)[:n]


def _xerial_encode(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    pack = _INT32.pack
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decode(view: memoryview, max_size: int) -> memoryview:
    if len(view) < len(_XERIAL_HEADER):
        raise ProtocolError("truncated xerial snappy header", path="records")
    pos = len(_XERIAL_HEADER)
    end = len(view)
    out = bytearray()
    while pos < end:
        if pos + 4 > end:
            raise ProtocolError("truncated xerial snappy block length", path="records")
        (length,) = _INT32.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise ProtocolError(f"xerial snappy block length {length} exceeds payload", path="records")
        block = _snappy_raw(view[pos : pos + length], max_size - len(out))
        out += block
        block.release()
        pos += length
    return memoryview(out)


# --------------------------------------------------------------------------
# magic 0 LZ4 (KAFKA-3160)

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes (enough for an LZ4 frame descriptor)."""
    if len(data) >= 16:
        raise ValueError("xxh32_short handles inputs shorter than 16 bytes only")
    h = (seed + _P5 + len(data)) & _M32
    pos = 0
    while pos + 4 <= len(data):
        (word,) = _UINT32_LE.unpack_from(data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    for byte in data[pos:]:
        h = (_rotl((h + byte * _P5) & _M32, 11) * _P1) & _M32
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _fix_legacy_lz4_header(view: memoryview) -> memoryview:
    """Rewrite the header checksum byte so a standard LZ4 reader accepts it."""
    if len(view) < 7 or view[:4] != _LZ4_MAGIC:
        return view  # let the codec report the corruption
    header_len = 7 + (8 if view[4] & 0x08 else 0) + (4 if view[4] & 0x01 else 0)
    if len(view) < header_len:
        return view
    fixed = bytearray(view)
    fixed[header_len - 1] = (xxh32_short(bytes(view[4 : header_len - 1])) >> 8) & 0xFF
    return memoryview(fixed)
