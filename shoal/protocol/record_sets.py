"""Fetched record sets of any magic: legacy message sets (magic 0/1) and mixes with batches.

Decode only, apart from ``records`` (the magic 2 batch format the broker
stores and the producer builds): old clients may still be in the wild behind
fetches of converted data, but nothing here ever writes these formats. The
same rule holds as in ``records``: input is hostile, every length is checked
before use, and any failure is a ``ProtocolError``.
"""

from __future__ import annotations

import struct
import zlib

from shoal.protocol.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, decompress
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.records import (  # the batch format's shared layout constants
    _COMPRESSION_MASK,
    _INT32,
    _INT64,
    _OFFSET_SIZE,
    _TIMESTAMP_TYPE_BIT,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_POS,
    BatchHeader,
    Buffer,
    Record,
    TimestampType,
    _view,
)

__all__ = ["decode_message_set", "decode_record_set"]

_LEGACY_HEAD = struct.Struct(">Ibb")  # crc, magic, attributes


def decode_record_set(
    buf: Buffer,
    *,
    allow_partial: bool = True,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """Decode every record of a fetched record set, whatever its magic.

    Magic 2 batches and legacy messages may be mixed (a log converted
    between formats).  A trailing partial entry is skipped when
    ``allow_partial`` (fetch responses are cut at max_bytes).
    """
    return _walk(_view(buf), allow_partial, verify_crc, max_decompressed_size, legacy_only=False)


def decode_message_set(
    buf: Buffer,
    *,
    allow_partial: bool = True,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """Decode a legacy (magic 0/1) message set, unwrapping compressed messages."""
    return _walk(_view(buf), allow_partial, verify_crc, max_decompressed_size, legacy_only=True)


def _walk(view: memoryview, allow_partial: bool, verify_crc: bool, max_size: int, legacy_only: bool) -> list[Record]:
    out: list[Record] = []
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < MAGIC_POS + 1:
            if allow_partial:
                break
            raise ProtocolError(f"partial entry: {end - pos} trailing bytes", offset=pos)
        base_offset, size = _OFFSET_SIZE.unpack_from(view, pos)
        if size < _LEGACY_HEAD.size + 8:
            raise ProtocolError(f"entry size {size} too small", path="size", offset=pos)
        if size > end - pos - LOG_OVERHEAD:
            if allow_partial:
                break
            raise ProtocolError(f"partial entry: size {size} exceeds buffer", offset=pos)
        magic = view[pos + MAGIC_POS]
        if magic == CURRENT_MAGIC and not legacy_only:
            header = BatchHeader.read(view, pos)
            out.extend(header.records(verify_crc=verify_crc, max_decompressed_size=max_size))
        elif magic in (0, 1):
            message = view[pos + LOG_OVERHEAD : pos + LOG_OVERHEAD + size]
            try:
                _legacy_message(base_offset, message, out, verify_crc, max_size, None)
            except ProtocolError as exc:
                raise exc.with_context(offset=pos) from None
        else:
            raise ProtocolError(f"unsupported magic {magic}", path="magic", offset=pos)
        pos += LOG_OVERHEAD + size
    return out


def _legacy_bytes(msg: memoryview, pos: int, name: str) -> tuple[memoryview | None, int]:
    if len(msg) - pos < 4:
        raise ProtocolError(f"truncated {name} length", path=name, offset=pos)
    (size,) = _INT32.unpack_from(msg, pos)
    pos += 4
    if size < 0:
        return None, pos
    if size > len(msg) - pos:
        raise ProtocolError(f"{name} length {size} exceeds message", path=name, offset=pos)
    return msg[pos : pos + size], pos + size


def _legacy_message(
    offset: int,
    msg: memoryview,
    out: list[Record],
    verify_crc: bool,
    max_size: int,
    wrapper_magic: int | None,
) -> None:
    crc, magic, attrs = _LEGACY_HEAD.unpack_from(msg, 0)
    if wrapper_magic is not None and magic != wrapper_magic:
        raise ProtocolError(f"inner magic {magic} differs from wrapper magic {wrapper_magic}")
    if magic not in (0, 1):
        raise ProtocolError(f"unsupported magic {magic}", path="magic")
    if verify_crc and zlib.crc32(msg[4:]) != crc:
        raise ProtocolError("CRC mismatch in legacy message", path="crc")
    pos = _LEGACY_HEAD.size
    if magic == 1:
        if len(msg) < pos + 8:
            raise ProtocolError("truncated timestamp", path="timestamp")
        (timestamp,) = _INT64.unpack_from(msg, pos)
        pos += 8
        ts_type = TimestampType(1 if attrs & _TIMESTAMP_TYPE_BIT else 0)
    else:
        timestamp = -1
        ts_type = TimestampType.NO_TIMESTAMP
    key, pos = _legacy_bytes(msg, pos, "key")
    value, pos = _legacy_bytes(msg, pos, "value")
    if pos != len(msg):
        raise ProtocolError(f"{len(msg) - pos} bytes after the message value", offset=pos)
    codec = attrs & _COMPRESSION_MASK
    if codec == Compression.NONE:
        key_bytes = None if key is None else key.tobytes()
        value_bytes = None if value is None else value.tobytes()
        out.append(Record(offset, timestamp, key_bytes, value_bytes, [], attrs & 0xFF, ts_type))
        return
    if wrapper_magic is not None:
        raise ProtocolError("nested compressed message")
    if codec > Compression.LZ4:
        raise ProtocolError(f"codec {codec} not allowed in magic {magic}", path="attributes")
    if value is None:
        raise ProtocolError("compressed wrapper message has a null value", path="value")
    inner = decompress(codec, value, max_size=max_size, legacy_lz4_checksum=magic == 0)
    records: list[Record] = []
    pos, end = 0, len(inner)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise ProtocolError("truncated inner message", path="value", offset=pos)
        inner_offset, size = _OFFSET_SIZE.unpack_from(inner, pos)
        if size < _LEGACY_HEAD.size + 8 or size > end - pos - LOG_OVERHEAD:
            raise ProtocolError(f"inner message size {size} invalid", path="value", offset=pos)
        message = inner[pos + LOG_OVERHEAD : pos + LOG_OVERHEAD + size]
        _legacy_message(inner_offset, message, records, verify_crc, max_size, magic)
        pos += LOG_OVERHEAD + size
    if magic >= 1 and records:
        # KIP-31: inner offsets are relative; the wrapper holds the last one.
        shift = offset - records[-1].offset
        for record in records:
            record.offset += shift
    if ts_type == TimestampType.LOG_APPEND_TIME:
        for record in records:
            record.timestamp = timestamp
            record.timestamp_type = ts_type
    out.extend(records)
