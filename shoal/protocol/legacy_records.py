"""Legacy message sets (magic 0 and 1) written, and converted to and from magic 2 batches.

Why this exists: Kafka 3.x served clients that only speak the old formats
(Produce v0-v2, Fetch v0-v3) by converting on the broker, and so does Shoal.
The log only ever stores magic 2 batches (``records``); this module is the
bridge at the edge:

* ``to_batch`` turns a produced message set (plain messages and compressed
  wrapper messages, any of gzip/snappy/lz4) into one magic 2 batch, as Kafka's
  LogValidator did: keys, values and timestamps kept (magic 0 has none: -1),
  offsets left for the log to assign, the codec the topic asks for (or the
  producer's when ``compression.type=producer``).
* ``down_convert`` turns stored batches into a message set of an older magic
  for an old fetcher, as Kafka's RecordsUtil.downConvert did: control batches
  skipped, headers dropped, offsets kept, each batch's codec kept (its records
  wrapped in one compressed message), zstd refused, records before the fetch
  offset left out of uncompressed batches.
* ``build_message_set`` writes the format itself (also the oracle side of the
  tests). Magic 0 lz4 carries the broken frame-header checksum that Kafka's
  clients of that era wrote and expect (KAFKA-3160); magic 1 the correct one.

Decoding stays in ``record_sets`` (``decode_message_set``). Sans-IO, no
asyncio; input is hostile and failures are ``ProtocolError``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from shoal.protocol.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, Compression, compress, xxh32_short
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.record_sets import decode_message_set
from shoal.protocol.records import (  # the batch format's shared layout constants
    _COMPRESSION_MASK,
    _TIMESTAMP_TYPE_BIT,
    LOG_OVERHEAD,
    MAGIC_POS,
    Buffer,
    TimestampType,
    _view,
    build_batch,
    iter_batches,
)

__all__ = [
    "LegacyMessage",
    "UnsupportedDownConversion",
    "build_message_set",
    "down_convert",
    "is_legacy",
    "to_batch",
]

_ENTRY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_CRC_FROM = 12 + 4  # the CRC covers magic..end: after offset, size and the CRC itself
_LZ4_MAGIC = b"\x04\x22\x4d\x18"


class UnsupportedDownConversion(ProtocolError):
    """Stored data an old format cannot carry (zstd, which magic 0/1 never had)."""


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One message to write: absolute offset, timestamp (ignored by magic 0), key, value."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def is_legacy(buf: Buffer) -> bool:
    """True when the first entry of ``buf`` is a magic 0/1 message (not a magic 2 batch)."""
    view = _view(buf)
    return len(view) > MAGIC_POS and view[MAGIC_POS] in (0, 1)


def _message(
    out: bytearray, offset: int, magic: int, attrs: int, timestamp: int, key: Buffer | None, value: Buffer | None
) -> None:
    start = len(out)
    out += _ENTRY_HEAD.pack(offset, 0, 0, magic, attrs)
    if magic == 1:
        out += _TIMESTAMP.pack(timestamp)
    for part in (key, value):
        if part is None:
            out += _LENGTH.pack(-1)
        else:
            out += _LENGTH.pack(len(part))
            out += part
    struct.pack_into(
        ">iI", out, start + 8, len(out) - start - LOG_OVERHEAD, zlib.crc32(memoryview(out)[start + _CRC_FROM :])
    )


def _legacy_lz4(frame: bytes, magic: int) -> bytes:
    """Kafka's clients wrote the lz4 frame-header checksum over the magic bytes too in magic 0."""
    if magic != 0 or len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        return frame
    header_len = 7 + (8 if frame[4] & 0x08 else 0) + (4 if frame[4] & 0x01 else 0)
    broken = bytearray(frame)
    broken[header_len - 1] = (xxh32_short(frame[: header_len - 1]) >> 8) & 0xFF
    return bytes(broken)


def build_message_set(
    messages: Sequence[LegacyMessage],
    *,
    magic: int,
    compression: int = Compression.NONE,
    timestamp_type: int = TimestampType.CREATE_TIME,
    log_append_time: int = -1,
) -> bytes:
    """Write ``messages`` as a magic 0/1 message set.

    Uncompressed: one message per record at its own offset. Compressed: one
    wrapper message at the last offset whose value holds the compressed inner
    messages (magic 1: inner offsets relative to the first, KIP-31; magic 0:
    absolute). With LogAppendTime (magic 1) every timestamp is ``log_append_time``.
    """
    if magic not in (0, 1):
        raise ProtocolError(f"legacy magic must be 0 or 1, not {magic}", path="magic")
    if compression not in (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4):
        raise UnsupportedDownConversion(f"codec {compression} cannot be written with magic {magic}")
    log_append = magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME
    ts_bit = _TIMESTAMP_TYPE_BIT if log_append else 0
    out = bytearray()
    if compression == Compression.NONE:
        for m in messages:
            _message(out, m.offset, magic, ts_bit, log_append_time if log_append else m.timestamp, m.key, m.value)
        return bytes(out)
    if not messages:
        return b""
    first = messages[0].offset
    inner = bytearray()
    max_ts = -1
    for m in messages:
        ts = log_append_time if log_append else m.timestamp
        max_ts = max(max_ts, ts)
        _message(inner, m.offset - first if magic == 1 else m.offset, magic, ts_bit, ts, m.key, m.value)
    value = (
        _legacy_lz4(compress(compression, inner), magic)
        if compression == Compression.LZ4
        else compress(compression, inner)
    )
    _message(out, messages[-1].offset, magic, compression | ts_bit, max_ts, None, value)
    return bytes(out)


def down_convert(buf: Buffer, to_magic: int, fetch_offset: int) -> bytes:
    """Rewrite the magic 2 batches of a fetched range as a ``to_magic`` message set.

    A zstd batch ends the conversion; when it is the first, ``UnsupportedDownConversion``
    is raised (Kafka answered such a partition UNSUPPORTED_COMPRESSION_TYPE). A partial batch at the end (a read
    cut at max bytes) is left out; legacy entries already stored are kept as they are.
    """
    view = _view(buf)
    out = bytearray()
    for header, _ in iter_batches(view, allow_partial=True):
        if header.is_control:
            continue
        codec = header.compression
        if codec == Compression.ZSTD:
            if out:  # what came before is answered; the next fetch starts at this batch and fails
                break
            raise UnsupportedDownConversion("down-conversion of zstd-compressed batches is not supported")
        compressed = codec != Compression.NONE
        messages = [
            LegacyMessage(r.offset, r.timestamp, r.key, r.value)
            for r in header.records()
            if compressed or r.offset >= fetch_offset
        ]
        if not messages:
            continue
        log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
        out += build_message_set(
            messages,
            magic=to_magic,
            compression=codec,
            timestamp_type=header.timestamp_type,
            log_append_time=header.max_timestamp if log_append else -1,
        )
    return bytes(out)


def _source_codec(view: memoryview) -> int:
    """The codec of the last compressed entry (Kafka's sourceCompression), NONE without one."""
    codec = Compression.NONE
    pos, end = 0, len(view)
    while end - pos > MAGIC_POS + 1:
        (size,) = _LENGTH.unpack_from(view, pos + 8)
        entry_codec = view[pos + MAGIC_POS + 1] & _COMPRESSION_MASK
        if entry_codec != Compression.NONE:
            codec = Compression(entry_codec)
        pos += LOG_OVERHEAD + max(size, 0)
    return codec


def to_batch(
    buf: Buffer,
    *,
    target_compression: int | None,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """Convert a produced legacy message set into one magic 2 batch (offsets from 0).

    ``target_compression`` None keeps the producer's codec (``compression.type=producer``).
    Timestamps are kept as sent (magic 0: -1); a LogAppendTime topic has the log stamp
    the batch. Raises ``ProtocolError`` on anything malformed (CRC, sizes, magic 2 mixed in).
    """
    view = _view(buf)
    records = decode_message_set(
        view, allow_partial=False, verify_crc=True, max_decompressed_size=max_decompressed_size
    )
    if not records:
        raise ProtocolError("legacy message set without messages")
    codec = _source_codec(view) if target_compression is None else target_compression
    return build_batch(
        ((r.key, r.value, (), r.timestamp) for r in records),
        compression=codec,
        timestamp_type=TimestampType.CREATE_TIME,
    )
