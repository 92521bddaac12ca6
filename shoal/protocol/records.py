"""Kafka record batches (magic 2) and legacy message sets (magic 0/1).

Why it is shaped this way:

* The broker's hot path never needs records, only batch headers: it checks
  the CRC, reads producer id/epoch/sequence and offsets, rewrites the base
  offset / leader epoch / LogAppendTime in place, and stores the bytes as
  they came.  So ``BatchHeader.read`` and ``iter_batches`` look at the fixed
  61-byte header only and hand out zero-copy ``memoryview`` slices; records
  are decoded (and decompressed) only when a consumer or a test asks for them.
* Every header field lives at a fixed position, so the in-place helpers are a
  single ``struct.pack_into`` each (plus one CRC-32C when the covered part
  changes).  The base offset and leader epoch sit *before* the CRC'd range on
  purpose, so assigning offsets is O(1).
* Building is one pass over the records into one ``bytearray`` with
  precompiled structs and a table of small zig-zag varints; the producer and
  the broker (control markers) both use it.
* Decoders treat input as hostile: every length is checked against the bytes
  that remain before anything is sliced or allocated, the record count is
  bounded by the payload size, decompression is capped
  (``protocol.compression``), and any failure surfaces as ``ProtocolError``
  and nothing else.
* Legacy magic 0/1 message sets are decode-only and live in ``record_sets``,
  with the decoder of fetched record sets of any magic.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import crc32c as _crc32c_module

from shoal.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    compress,
    decompress,
)
from shoal.protocol.exceptions import ProtocolError

__all__ = [
    "ATTRIBUTES_POS",
    "BATCH_HEADER_SIZE",
    "BATCH_LENGTH_POS",
    "CRC_POS",
    "CURRENT_MAGIC",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "HEADER_FIELDS",
    "HEADER_POSITIONS",
    "LOG_OVERHEAD",
    "MAGIC_POS",
    "MAX_TIMESTAMP_POS",
    "PARTITION_LEADER_EPOCH_POS",
    "RECORDS_COUNT_POS",
    "BatchHeader",
    "BatchIterator",
    "Compression",
    "ControlRecord",
    "ControlType",
    "Record",
    "TimestampType",
    "build_batch",
    "build_control_batch",
    "decode_batch",
    "encode_varint",
    "header_struct",
    "iter_batches",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "update_crc",
]

Buffer = bytes | bytearray | memoryview
HeaderValue = bytes | bytearray | memoryview | None

_crc32c = _crc32c_module.crc32c

# The magic 2 batch header (Kafka's DefaultRecordBatch), field by field in wire
# order with its struct code: the one statement of the layout. Every size,
# position and partial reader of a header (``header_struct``) derives from it.
HEADER_FIELDS: tuple[tuple[str, str], ...] = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("partition_leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("records_count", "i"),
)
_HEADER = struct.Struct(">" + "".join(code for _, code in HEADER_FIELDS))
BATCH_HEADER_SIZE = _HEADER.size  # 61
# where each field starts, counted from the batch's first byte
HEADER_POSITIONS: dict[str, int] = {
    name: struct.calcsize(">" + "".join(code for _, code in HEADER_FIELDS[:i]))
    for i, (name, _) in enumerate(HEADER_FIELDS)
}
BATCH_LENGTH_POS = HEADER_POSITIONS["batch_length"]
PARTITION_LEADER_EPOCH_POS = HEADER_POSITIONS["partition_leader_epoch"]
LOG_OVERHEAD = PARTITION_LEADER_EPOCH_POS  # baseOffset + batchLength precede what batchLength counts
MAGIC_POS = HEADER_POSITIONS["magic"]
CRC_POS = HEADER_POSITIONS["crc"]
ATTRIBUTES_POS = HEADER_POSITIONS["attributes"]  # the CRC covers everything from here to the end
MAX_TIMESTAMP_POS = HEADER_POSITIONS["max_timestamp"]
RECORDS_COUNT_POS = HEADER_POSITIONS["records_count"]
CURRENT_MAGIC = 2  # the batch format above; 0 and 1 are legacy message sets (``record_sets``)
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
_MIN_RECORD_SIZE = 7  # length, attrs, ts delta, offset delta, key, value, headers

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")
_OFFSET_SIZE = struct.Struct(">qi")
_CTRL_KEY = struct.Struct(">hh")
_CTRL_VALUE = struct.Struct(">hi")

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
_DELETE_HORIZON_BIT = 0x40


def header_struct(*names: str) -> struct.Struct:
    """A struct that reads only the header fields ``names`` (given in wire order),
    skipping the others: for code that must look at a few fields of batches it
    does not hold whole (``BatchHeader.read`` wants the entire batch)."""
    wanted = set(names)
    unknown = wanted - set(HEADER_POSITIONS)
    if unknown or list(names) != [n for n, _ in HEADER_FIELDS if n in wanted]:
        raise ValueError(f"header fields must be named once each, in wire order: {names}")
    fmt, skip = [">"], 0
    last = max(HEADER_POSITIONS[n] for n in names) if names else -1
    for name, code in HEADER_FIELDS:
        if HEADER_POSITIONS[name] > last:
            break
        if name in wanted:
            fmt.append(f"{skip}x" if skip else "")
            fmt.append(code)
            skip = 0
        else:
            skip += struct.calcsize(">" + code)
    return struct.Struct("".join(fmt))


class TimestampType(IntEnum):
    NO_TIMESTAMP = -1  # magic 0
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """Control record types (key of a control record).  0/1 are KIP-98 markers."""

    ABORT = 0
    COMMIT = 1


@dataclass(slots=True)
class ControlRecord:
    """A decoded control record key, plus the end-transaction marker value."""

    version: int
    type: int
    coordinator_epoch: int | None = None  # set for ABORT/COMMIT markers

    @property
    def is_commit(self) -> bool:
        return self.type == ControlType.COMMIT

    @property
    def is_abort(self) -> bool:
        return self.type == ControlType.ABORT


@dataclass(slots=True)
class Record:
    """One decoded record.  ``timestamp`` is absolute (ms), ``offset`` absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0
    timestamp_type: int = TimestampType.CREATE_TIME
    control: ControlRecord | None = None


def _view(buf: Buffer) -> memoryview:
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


# --------------------------------------------------------------------------
# batch header


@dataclass(slots=True)
class BatchHeader:
    """The fixed 61-byte header of a magic 2 batch.

    ``data`` is a zero-copy view of the whole batch (header included).  Note
    that a live view pins a ``bytearray``'s size: drop headers (or call
    ``data.release()``) before resizing the buffer they came from.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    data: memoryview = field(repr=False, compare=False, default=memoryview(b""))

    @classmethod
    def read(cls, buf: Buffer, offset: int = 0) -> BatchHeader:
        """Parse the header of the complete batch at ``offset`` of ``buf``."""
        view = _view(buf)
        end = len(view)
        left = end - offset
        if offset < 0 or left < BATCH_HEADER_SIZE:
            raise ProtocolError(f"truncated batch header ({left} bytes)", path="batch", offset=offset)
        fields = _HEADER.unpack_from(view, offset)
        length = fields[1]
        if fields[3] != CURRENT_MAGIC:
            raise ProtocolError(f"unsupported magic {fields[3]}", path="batch.magic", offset=offset)
        if not _MIN_BATCH_LENGTH <= length <= left - LOG_OVERHEAD:
            bound = "is below minimum" if length < _MIN_BATCH_LENGTH else "exceeds the bytes left"
            raise ProtocolError(f"batch length {length} {bound}", path="batch.batchLength", offset=offset)
        if fields[12] < 0:
            raise ProtocolError(f"negative count {fields[12]}", path="batch.recordsCount", offset=offset)
        return cls(*fields, view[offset : offset + LOG_OVERHEAD + length])  # type: ignore[call-arg]  # 13 ints

    @property
    def size(self) -> int:
        """Bytes the batch occupies in a log or fetch response."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> Compression:
        codec = self.attributes & _COMPRESSION_MASK
        try:
            return Compression(codec)
        except ValueError:
            raise ProtocolError(f"unknown compression codec {codec}", path="batch.attributes") from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (int32 wrap-around, -1 if none)."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    def computed_crc(self) -> int:
        return _crc32c(self.data[ATTRIBUTES_POS:])

    def verify_crc(self) -> bool:
        """True when the stored CRC-32C matches attributes..end of the batch."""
        return _crc32c(self.data[ATTRIBUTES_POS:]) == self.crc

    def records(
        self,
        *,
        verify_crc: bool = True,
        max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
        make: Callable[[int, int, bytes | None, bytes | None, list, int, int], Any] | None = None,
    ) -> list[Any]:
        """Decompress (if needed) and decode this batch's records.

        ``make(offset, timestamp, key, value, headers, attributes, timestamp_type)``
        builds each record instead of ``Record`` (a client builds its own record
        type in one step); control batches always decode to ``Record``.
        """
        payload = self.record_bytes(verify_crc=verify_crc, max_decompressed_size=max_decompressed_size)
        return _parse_records(payload, self, None if self.is_control else make)

    def record_bytes(
        self, *, verify_crc: bool = True, max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
    ) -> Any:
        """The batch's records section (CRC checked first if asked), decompressed if needed."""
        if verify_crc and not self.verify_crc():
            raise ProtocolError(f"CRC mismatch: {self.crc:#x} != {self.computed_crc():#x}", path="batch.crc")
        payload = self.data[BATCH_HEADER_SIZE:]
        codec = self.compression
        if codec != Compression.NONE:
            payload = decompress(codec, payload, max_size=max_decompressed_size)
        return payload


class BatchIterator:
    """Iterates ``(header, view_of_whole_batch)`` over consecutive batches.

    A fetch response may end in a partial batch (the broker cuts at
    max_bytes).  With ``allow_partial`` the iterator stops there and sets
    ``truncated``; otherwise it raises ProtocolError.  ``position`` is the
    offset just after the last whole batch returned.
    """

    __slots__ = ("_end", "_view", "allow_partial", "position", "truncated")

    def __init__(self, buf: Buffer, offset: int = 0, *, allow_partial: bool = False) -> None:
        self._view = _view(buf)
        self._end = len(self._view)
        self.position = offset
        self.allow_partial = allow_partial
        self.truncated = False

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> tuple[BatchHeader, memoryview]:
        pos = self.position
        left = self._end - pos
        if left <= 0:
            raise StopIteration
        if left >= LOG_OVERHEAD:
            (length,) = _INT32.unpack_from(self._view, pos + 8)
            if length < _MIN_BATCH_LENGTH:
                raise ProtocolError(f"batch length {length} too small", path="batch.batchLength", offset=pos)
            if length <= left - LOG_OVERHEAD:
                header = BatchHeader.read(self._view, pos)
                self.position = pos + LOG_OVERHEAD + length
                return header, header.data
        if self.allow_partial:
            self.truncated = True
            raise StopIteration
        raise ProtocolError(f"partial batch: {left} trailing bytes", path="batch", offset=pos)


def iter_batches(buf: Buffer, offset: int = 0, *, allow_partial: bool = False) -> BatchIterator:
    """Iterate the magic 2 batches of ``buf`` without decoding records."""
    return BatchIterator(buf, offset, allow_partial=allow_partial)


def decode_batch(
    buf: Buffer,
    offset: int = 0,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[BatchHeader, list[Record]]:
    """Read the batch at ``offset`` and decode its records."""
    header = BatchHeader.read(buf, offset)
    return header, header.records(verify_crc=verify_crc, max_decompressed_size=max_decompressed_size)


# --------------------------------------------------------------------------
# varints


def _read_varint(buf: bytes | memoryview, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """Zig-zag varint at ``pos`` (< ``end``); returns (value, new position)."""
    if pos >= end:
        raise ProtocolError("truncated varint", offset=pos)
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    limit = pos + max_bytes
    pos += 1
    while True:
        if pos >= end:
            raise ProtocolError("truncated varint", offset=pos)
        if pos >= limit:
            raise ProtocolError(f"varint longer than {max_bytes} bytes", offset=pos)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _encode_varint_slow(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_VARINT_MIN = -1
_VARINT_TABLE = tuple(_encode_varint_slow(v) for v in range(_VARINT_MIN, 1 << 14))
_VARINT_TABLE_LEN = len(_VARINT_TABLE)
_ZIGZAG_1 = tuple((b >> 1) ^ -(b & 1) for b in range(128))  # one-byte varints, decoded
_ZIGZAG_2 = tuple((z >> 1) ^ -(z & 1) for z in range(1 << 14))  # two-byte varints by their 14 payload bits


def encode_varint(value: int) -> bytes:
    """Zig-zag varint/varlong encoding of a signed 64-bit value."""
    idx = value - _VARINT_MIN
    if 0 <= idx < _VARINT_TABLE_LEN:
        return _VARINT_TABLE[idx]
    if not -(1 << 63) <= value < (1 << 63):
        raise ProtocolError(f"value {value} does not fit a varlong")
    return _encode_varint_slow(value)


# --------------------------------------------------------------------------
# record decoding


def _parse_records(payload: memoryview, header: BatchHeader, make: Callable[..., Any] | None = None) -> list[Any]:
    end = len(payload)
    count = header.records_count
    if count * _MIN_RECORD_SIZE > end:
        raise ProtocolError(f"{count} records cannot fit in {end} bytes", path="batch.recordsCount")
    # One copy to bytes: indexing and slicing bytes is much faster than a view.
    buf = payload.tobytes()
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    ts_type = header.timestamp_type
    log_append = ts_type == TimestampType.LOG_APPEND_TIME
    max_ts = header.max_timestamp
    control = header.is_control
    read = _read_varint
    zz = _ZIGZAG_1
    zz2 = _ZIGZAG_2
    out: list[Record] = []
    append = out.append
    pos = 0
    for index in range(count):
        # One- and two-byte varints are decoded inline (the common cases; a
        # 1 KiB value's length takes two).  A read past the record is caught
        # by the length checks or the final ``pos != rec_end`` check; past the
        # buffer by IndexError.
        try:
            b = buf[pos]
            if b < 128:
                length = zz[b]
                pos += 1
            elif (c := buf[pos + 1]) < 128:
                length = zz2[(b & 127) | (c << 7)]
                pos += 2
            else:
                length, pos = read(buf, pos, end)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise ProtocolError(f"record length {length} does not fit", offset=pos)
            attrs = buf[pos]
            b = buf[pos + 1]
            if b < 128:
                ts_delta = zz[b]
                pos += 2
            elif (c := buf[pos + 2]) < 128:
                ts_delta = zz2[(b & 127) | (c << 7)]
                pos += 3
            else:
                ts_delta, pos = read(buf, pos + 1, rec_end, 10)
            b = buf[pos]
            if b < 128:
                off_delta = zz[b]
                pos += 1
            elif (c := buf[pos + 1]) < 128:
                off_delta = zz2[(b & 127) | (c << 7)]
                pos += 2
            else:
                off_delta, pos = read(buf, pos, rec_end)
            b = buf[pos]
            if b < 128:
                size = zz[b]
                pos += 1
            else:
                size, pos = read(buf, pos, rec_end)
            if size < 0:
                key = None
            elif pos + size > rec_end:
                raise ProtocolError(f"key length {size} does not fit", offset=pos)
            else:
                key = buf[pos : pos + size]
                pos += size
            b = buf[pos]
            if b < 128:
                size = zz[b]
                pos += 1
            elif (c := buf[pos + 1]) < 128:
                size = zz2[(b & 127) | (c << 7)]
                pos += 2
            else:
                size, pos = read(buf, pos, rec_end)
            if size < 0:
                value = None
            elif pos + size > rec_end:
                raise ProtocolError(f"value length {size} does not fit", offset=pos)
            else:
                value = buf[pos : pos + size]
                pos += size
            b = buf[pos]
            if b < 128:
                n_headers = zz[b]
                pos += 1
            else:
                n_headers, pos = read(buf, pos, rec_end)
            headers: list[tuple[str, bytes | None]] = []
            if n_headers:
                if n_headers < 0 or 2 * n_headers > rec_end - pos:
                    raise ProtocolError(f"header count {n_headers} does not fit", offset=pos)
                pos = _parse_headers(buf, pos, rec_end, n_headers, headers)
            if pos != rec_end:
                raise ProtocolError(f"record declares {length} bytes, parsed {pos - rec_end + length}")
        except IndexError:
            raise ProtocolError("record runs past the batch", path=f"records[{index}]") from None
        except ProtocolError as exc:
            raise exc.with_context(path=f"records[{index}]") from None
        ts = max_ts if log_append else base_ts + ts_delta
        if make is not None:
            append(make(base_offset + off_delta, ts, key, value, headers, attrs, ts_type))
            continue
        record = Record(base_offset + off_delta, ts, key, value, headers, attrs, ts_type)
        if control:
            record.control = _parse_control(key, value, index)
        append(record)
    if pos != end:
        raise ProtocolError(f"{end - pos} bytes after the last record", path="records", offset=pos)
    return out


def _parse_headers(buf: bytes, pos: int, end: int, count: int, headers: list[tuple[str, bytes | None]]) -> int:
    read = _read_varint
    for _ in range(count):
        size, pos = read(buf, pos, end)
        if size < 0 or pos + size > end:
            raise ProtocolError(f"header key length {size} does not fit", offset=pos)
        try:
            name = buf[pos : pos + size].decode()
        except UnicodeDecodeError:
            raise ProtocolError("header key is not UTF-8", offset=pos) from None
        pos += size
        size, pos = read(buf, pos, end)
        if size < 0:
            headers.append((name, None))
        elif pos + size > end:
            raise ProtocolError(f"header value length {size} does not fit", offset=pos)
        else:
            headers.append((name, buf[pos : pos + size]))
            pos += size
    return pos


def _parse_control(key: bytes | None, value: bytes | None, index: int) -> ControlRecord:
    path = f"records[{index}].control"
    if key is None or len(key) < _CTRL_KEY.size:
        raise ProtocolError("control record key shorter than 4 bytes", path=path)
    version, ctype = _CTRL_KEY.unpack_from(key)
    if version < 0:
        raise ProtocolError(f"negative control record version {version}", path=path)
    marker = ControlRecord(version, ctype)
    if ctype in (ControlType.ABORT, ControlType.COMMIT):
        if value is None or len(value) < _CTRL_VALUE.size:
            raise ProtocolError("end transaction marker value shorter than 6 bytes", path=path)
        marker.coordinator_epoch = _CTRL_VALUE.unpack_from(value)[1]
    return marker


# --------------------------------------------------------------------------
# building

RecordInput = Record | tuple[HeaderValue, HeaderValue, Sequence[tuple[str, HeaderValue]], int | None]


def build_batch(
    records: Iterable[RecordInput],
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    partition_leader_epoch: int = -1,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """Build one magic 2 batch.

    ``records`` yields ``(key, value, headers, timestamp)`` tuples (headers a
    sequence of ``(str, bytes | None)``, timestamp in ms or None for now) or
    ``Record`` objects.  Offset deltas are 0..n-1 unless ``offset_deltas`` is
    given (compaction).  With ``timestamp_type=LOG_APPEND_TIME`` the max
    timestamp is ``log_append_time`` (default: the largest record timestamp).
    """
    out = bytearray(BATCH_HEADER_SIZE)
    body = out if compression == Compression.NONE else bytearray()
    enc = encode_varint
    now: int | None = None
    first_ts = -1
    max_ts = -1
    last_delta = -1
    count = 0
    key: Any
    value: Any
    headers: Any
    ts: int | None
    for count, rec in enumerate(records, 1):
        if isinstance(rec, Record):
            key, value, headers, ts = rec.key, rec.value, rec.headers, rec.timestamp
        else:
            key, value, headers, ts = rec
        if ts is None:
            if now is None:
                now = int(time.time() * 1000)
            ts = now
        if count == 1:
            first_ts = ts
        if ts > max_ts:
            max_ts = ts
        delta = count - 1 if offset_deltas is None else offset_deltas[count - 1]
        if delta > last_delta:
            last_delta = delta
        ts_bytes = enc(ts - first_ts)
        off_bytes = enc(delta)
        size = 1 + len(ts_bytes) + len(off_bytes)
        if key is None:
            klen = b"\x01"
            key = b""
        else:
            klen = enc(len(key))
            size += len(key)
        if value is None:
            vlen = b"\x01"
            value = b""
        else:
            vlen = enc(len(value))
            size += len(value)
        size += len(klen) + len(vlen)
        if headers:
            hparts = _encode_headers(headers)
            size += len(hparts)
        else:
            hparts = b"\x00"
            size += 1
        body += enc(size)
        body += b"\x00"
        body += ts_bytes
        body += off_bytes
        body += klen
        body += key
        body += vlen
        body += value
        body += hparts
    if compression != Compression.NONE:
        out += compress(compression, body, compression_level)
    attrs = compression & _COMPRESSION_MASK
    if compression != attrs:
        raise ProtocolError(f"unknown compression codec {compression}")
    if transactional:
        attrs |= _TRANSACTIONAL_BIT
    if control:
        attrs |= _CONTROL_BIT
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attrs |= _TIMESTAMP_TYPE_BIT
        if log_append_time is not None:
            max_ts = log_append_time
    try:
        _HEADER.pack_into(
            out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, CURRENT_MAGIC, 0,
            attrs, last_delta, first_ts, max_ts, producer_id, producer_epoch,
            base_sequence, count,
        )  # fmt: skip
    except struct.error as exc:
        raise ProtocolError(f"cannot encode batch header: {exc}", path="batch") from None
    _UINT32.pack_into(out, CRC_POS, _crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return bytes(out)


def _encode_headers(headers: Sequence[tuple[str, HeaderValue]]) -> bytes:
    enc = encode_varint
    parts = [enc(len(headers))]
    for name, value in headers:
        raw = name.encode("utf-8") if isinstance(name, str) else bytes(name)
        parts.append(enc(len(raw)))
        parts.append(raw)
        if value is None:
            parts.append(b"\x01")
        else:
            parts.append(enc(len(value)))
            parts.append(bytes(value))
    return b"".join(parts)


def build_control_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Build a transaction marker batch (one COMMIT or ABORT control record)."""
    record = (_CTRL_KEY.pack(0, control_type), _CTRL_VALUE.pack(0, coordinator_epoch), (), timestamp)
    return build_batch(
        [record], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
        transactional=True, control=True, partition_leader_epoch=partition_leader_epoch,
    )  # fmt: skip


# --------------------------------------------------------------------------
# in-place rewrites (broker)


def _check_room(buf: Buffer, offset: int, need: int) -> None:
    if offset < 0 or len(buf) - offset < need:
        raise ProtocolError("buffer too short for a batch header", path="batch", offset=offset)


def set_base_offset(buf: bytearray | memoryview, base_offset: int, offset: int = 0) -> None:
    """Assign the batch's base offset (outside the CRC'd range: no CRC update)."""
    _check_room(buf, offset, BATCH_HEADER_SIZE)
    _INT64.pack_into(buf, offset, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, offset: int = 0) -> None:
    """Stamp the leader epoch (outside the CRC'd range: no CRC update)."""
    _check_room(buf, offset, BATCH_HEADER_SIZE)
    _INT32.pack_into(buf, offset + PARTITION_LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf: bytearray | memoryview, timestamp: int, offset: int = 0) -> None:
    """Switch the batch to LogAppendTime at ``timestamp`` and recompute the CRC."""
    header = BatchHeader.read(buf, offset)
    header.data.release()
    _INT16.pack_into(buf, offset + ATTRIBUTES_POS, header.attributes | _TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, offset + MAX_TIMESTAMP_POS, timestamp)
    update_crc(buf, offset)


def update_crc(buf: bytearray | memoryview, offset: int = 0) -> None:
    """Recompute the CRC of the batch at ``offset`` after editing it."""
    header = BatchHeader.read(buf, offset)
    data = header.data
    try:
        _UINT32.pack_into(data, CRC_POS, _crc32c(data[ATTRIBUTES_POS:]))
    finally:
        data.release()
