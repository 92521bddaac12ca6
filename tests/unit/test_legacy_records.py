"""Up- and down-conversion between legacy message sets (magic 0/1) and magic 2 batches.

Oracles: kafka-python's own legacy record reader (an independent implementation
of the old formats) for what we write, and the layout of Kafka's LegacyRecord
(offset, size, crc, magic, attributes, [timestamp], key, value) for one message
built by hand.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from kafka.record.memory_records import MemoryRecords

from shoal.protocol.compression import Compression, xxh32_short
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.legacy_records import (
    LegacyMessage,
    UnsupportedDownConversion,
    build_message_set,
    down_convert,
    to_batch,
)
from shoal.protocol.record_sets import decode_message_set
from shoal.protocol.records import TimestampType, build_batch, build_control_batch, iter_batches

LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
MESSAGES = [
    LegacyMessage(100 + i, 1_700_000_000_000 + i, None if i == 1 else b"k%d" % i, None if i == 2 else b"v" * (i * 40))
    for i in range(5)
]


def kafka_python_read(data: bytes) -> list[tuple[int, int | None, bytes | None, bytes | None]]:
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        out.extend((r.offset, r.timestamp, r.key, r.value) for r in records.next_batch())
    return out


def test_one_magic1_message_by_hand() -> None:
    body = struct.pack(">bbq", 1, 0, 1234) + struct.pack(">i", 1) + b"k" + struct.pack(">i", 2) + b"vv"
    crc = zlib.crc32(body)
    expected = struct.pack(">qiI", 7, 4 + len(body), crc) + body
    assert build_message_set([LegacyMessage(7, 1234, b"k", b"vv")], magic=1) == expected


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_written_message_sets_read_back_by_us_and_kafka_python(magic: int, codec: int) -> None:
    data = build_message_set(MESSAGES, magic=magic, compression=codec)
    ours = decode_message_set(data)
    assert [(r.offset, r.key, r.value) for r in ours] == [(m.offset, m.key, m.value) for m in MESSAGES]
    assert [r.timestamp for r in ours] == ([m.timestamp for m in MESSAGES] if magic else [-1] * len(MESSAGES))
    if magic == 0 and codec == Compression.LZ4:
        return  # kafka-python needs the optional xxhash package for this one (checked below instead)
    theirs = kafka_python_read(data)
    assert [(o, k, v) for o, _, k, v in theirs] == [(m.offset, m.key, m.value) for m in MESSAGES]
    if magic == 1:
        assert [t for _, t, _, _ in theirs] == [m.timestamp for m in MESSAGES]


@pytest.mark.parametrize("magic", [0, 1])
def test_lz4_frame_header_checksum_is_kafkas_per_magic(magic: int) -> None:
    data = build_message_set(MESSAGES, magic=magic, compression=Compression.LZ4)
    value = data[12 + 4 + 2 + (8 if magic else 0) + 4 + 4 :]  # wrapper: null key, then the value
    header_len = 7 + (8 if value[4] & 0x08 else 0)
    broken = (xxh32_short(bytes(value[: header_len - 1])) >> 8) & 0xFF  # over the magic bytes too
    correct = (xxh32_short(bytes(value[4 : header_len - 1])) >> 8) & 0xFF
    assert value[header_len - 1] == (broken if magic == 0 else correct)


@pytest.mark.parametrize("magic", [0, 1])
def test_compressed_wrapper_offsets(magic: int) -> None:
    data = build_message_set(MESSAGES, magic=magic, compression=Compression.GZIP)
    (wrapper_offset,) = struct.unpack_from(">q", data, 0)
    assert wrapper_offset == MESSAGES[-1].offset  # the wrapper holds the last offset
    if magic == 1:
        (wrapper_ts,) = struct.unpack_from(">q", data, 18)
        assert wrapper_ts == max(m.timestamp for m in MESSAGES)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("target", [None, Compression.NONE, Compression.ZSTD])
def test_upconversion_keeps_keys_values_timestamps(magic: int, codec: int, target: int | None) -> None:
    batch = to_batch(build_message_set(MESSAGES, magic=magic, compression=codec), target_compression=target)
    [(header, _)] = list(iter_batches(batch))
    assert header.magic == 2 and header.base_offset == 0 and header.records_count == len(MESSAGES)
    assert header.compression == (codec if target is None else target)
    assert header.producer_id == -1 and not header.is_transactional
    records = header.records()
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
        (i, m.key, m.value, []) for i, m in enumerate(MESSAGES)
    ]
    assert [r.timestamp for r in records] == ([m.timestamp for m in MESSAGES] if magic else [-1] * len(MESSAGES))


def test_upconversion_refuses_bad_crc_and_mixed_magic() -> None:
    data = bytearray(build_message_set(MESSAGES[:1], magic=1))
    data[-1] ^= 1
    with pytest.raises(ProtocolError):
        to_batch(bytes(data), target_compression=None)
    mixed = build_message_set(MESSAGES[:1], magic=1) + build_batch([(b"k", b"v", [], 1)])
    with pytest.raises(ProtocolError):
        to_batch(mixed, target_compression=None)


@pytest.mark.parametrize("to_magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_downconversion_drops_only_headers(to_magic: int, codec: int) -> None:
    stored = build_batch(
        [(b"a", b"1", [("h", b"x"), ("n", None)], 1_700_000_000_005), (None, b"2", [], 1_700_000_000_009)],
        base_offset=40,
        compression=codec,
    )
    converted = down_convert(stored, to_magic, 40)
    got = decode_message_set(converted)
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [(40, b"a", b"1", []), (41, None, b"2", [])]
    assert [r.timestamp for r in got] == ([1_700_000_000_005, 1_700_000_000_009] if to_magic else [-1, -1])
    assert {e[1] for e in iter_entries(converted)} == {to_magic}
    if not (to_magic == 0 and codec == Compression.LZ4):
        assert [(o, k, v) for o, _, k, v in kafka_python_read(converted)] == [(40, b"a", b"1"), (41, None, b"2")]


def iter_entries(data: bytes) -> list[tuple[int, int]]:
    out, pos = [], 0
    while pos < len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        out.append((offset, data[pos + 16]))
        pos += 12 + size
    return out


def test_downconversion_log_append_time_and_fetch_offset() -> None:
    stored = build_batch(
        [(b"a", b"1", [], 5), (b"b", b"2", [], 6), (b"c", b"3", [], 7)],
        base_offset=10,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=999,
    )
    got = decode_message_set(down_convert(stored, 1, 11))
    # uncompressed: records before the fetch offset are left out; every timestamp is the append time
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in got] == [
        (11, 999, TimestampType.LOG_APPEND_TIME),
        (12, 999, TimestampType.LOG_APPEND_TIME),
    ]
    compressed = build_batch([(b"a", b"1", [], 5), (b"b", b"2", [], 6)], base_offset=10, compression=Compression.GZIP)
    assert [r.offset for r in decode_message_set(down_convert(compressed, 1, 11))] == [10, 11]  # kept whole


def test_downconversion_skips_control_batches_and_stops_at_zstd() -> None:
    control = build_control_batch(0, base_offset=0, producer_id=5, producer_epoch=0, timestamp=1)
    data = build_batch([(b"k", b"v", [], 1)], base_offset=1)
    zstd = build_batch([(b"z", b"z", [], 1)], base_offset=2, compression=Compression.ZSTD)
    assert [r.offset for r in decode_message_set(down_convert(control + data + zstd, 1, 0))] == [1]
    with pytest.raises(UnsupportedDownConversion):
        down_convert(zstd + data, 1, 2)
