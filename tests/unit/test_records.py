"""Record batch codec tests, with aiokafka and kafka-python as outside oracles.

Batches built by the two client libraries must decode with our reader to the
same records, and batches we build must decode with theirs.  Hostile input
(truncation, byte flips, lying lengths, decompression bombs) must surface as
ProtocolError and nothing else.
"""

from __future__ import annotations

import random
import struct
import zlib

import aiokafka.codec
import cramjam
import kafka.codec
import pytest
from aiokafka.record.control_record import ControlRecord as AioControlRecord
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacyBuilder
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder as KpMemoryRecordsBuilder

from shoal.protocol.compression import Compression, compress, decompress, xxh32_short
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.record_sets import decode_message_set, decode_record_set
from shoal.protocol.records import (
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    BATCH_LENGTH_POS,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    MAGIC_POS,
    RECORDS_COUNT_POS,
    BatchHeader,
    ControlType,
    Record,
    TimestampType,
    build_batch,
    build_control_batch,
    decode_batch,
    encode_varint,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    update_crc,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
CODEC_IDS = [c.name.lower() for c in CODECS]

SAMPLE = [
    (b"key-0", b"value-0", [("h1", b"a"), ("h2", None)], 1_700_000_000_000),
    (None, b"no key", [], 1_700_000_000_005),
    (b"no value", None, [("\u00e9t\u00e9", b"unicode key")], 1_699_999_999_000),  # negative delta
    (b"", b"", [("", b"")], 1_700_000_000_001),
    (b"k" * 20_000, b"v" * 70_000, [("big", b"x" * 300)], 1_700_000_000_002),  # multi-byte varints
]


def view_records(records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def expected(base_offset: int = 0, records=SAMPLE) -> list[tuple]:
    return [(base_offset + i, ts, k, v, list(h)) for i, (k, v, h, ts) in enumerate(records)]


@pytest.fixture
def kafka_python_snappy():
    """kafka-python's snappy path needs python-snappy (a test dependency)."""
    assert kafka.codec.has_snappy(), "python-snappy missing: install the test extras"


def kafka_python_supports(codec: Compression) -> None:
    checks = {
        Compression.LZ4: kafka.codec.has_lz4,
        Compression.ZSTD: kafka.codec.has_zstd,
    }
    if codec in checks and not checks[codec]():
        pytest.skip(f"kafka-python has no {codec.name} library here (aiokafka covers it)")


def aio_build(records=SAMPLE, codec: int = 0, *, transactional=False, pid=-1, epoch=-1, seq=-1) -> bytes:
    builder = AioBuilder(
        magic=2, compression_type=codec, is_transactional=int(transactional),
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=1 << 22,
    )  # fmt: skip
    for i, (k, v, h, ts) in enumerate(records):
        assert builder.append(i, timestamp=ts, key=k, value=v, headers=h) is not None
    return bytes(builder.build())


def aio_read(data: bytes) -> list[tuple]:
    batch = AioBatch(data)
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def aio_read_all(data: bytes) -> list[tuple]:
    """aiokafka's reader over a whole record set (any magic)."""
    records = AioMemoryRecords(data)
    out = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return out


def kp_read(data: bytes) -> list[tuple]:
    records = KpMemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return out


# --------------------------------------------------------------------------
# interop: they build, we read


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_decode_aiokafka_built(codec):
    data = aio_build(codec=codec, transactional=True, pid=4242, epoch=7, seq=100)
    header, records = decode_batch(data)
    assert header.compression == codec
    assert header.records_count == len(SAMPLE)
    assert header.last_offset_delta == len(SAMPLE) - 1
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, 100)
    assert header.last_sequence == 104
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert header.base_timestamp == SAMPLE[0][3]
    assert header.max_timestamp == max(r[3] for r in SAMPLE)
    assert header.verify_crc()
    assert view_records(records) == expected()


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_decode_kafka_python_built(codec, kafka_python_snappy):
    kafka_python_supports(codec)
    builder = KpMemoryRecordsBuilder(
        magic=2, compression_type=codec, batch_size=1 << 22, offset=1000,
        transactional=False, producer_id=99, producer_epoch=1, base_sequence=5,
    )  # fmt: skip
    for k, v, h, ts in SAMPLE:
        assert builder.append(ts, k, v, h) is not None
    builder.close()
    data = bytes(builder.buffer())
    header, records = decode_batch(data)
    assert header.base_offset == 0  # kafka-python leaves it to the broker; deltas carry 1000..
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (99, 1, 5)
    assert not header.is_transactional
    assert view_records(records) == expected(1000)


def test_raw_snappy_payload_as_librdkafka_writes():
    ours = bytearray(build_batch(SAMPLE))
    raw = bytes(cramjam.snappy.compress_raw(bytes(ours[BATCH_HEADER_SIZE:])))
    batch = bytearray(ours[:BATCH_HEADER_SIZE]) + raw
    struct.pack_into(">i", batch, BATCH_LENGTH_POS, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">h", batch, ATTRIBUTES_POS, Compression.SNAPPY)
    update_crc(batch)
    assert aio_read(bytes(batch)) == expected()
    assert view_records(decode_batch(batch)[1]) == expected()


def test_uncompressed_build_is_byte_identical_to_aiokafka():
    ours = build_batch(SAMPLE, producer_id=3, producer_epoch=2, base_sequence=9)
    assert ours == aio_build(pid=3, epoch=2, seq=9)


# --------------------------------------------------------------------------
# interop: we build, they read


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_aiokafka_reads_ours(codec):
    data = build_batch(SAMPLE, base_offset=500, compression=codec)
    batch = AioBatch(data)
    assert batch.compression_type == codec
    assert batch.base_offset == 500
    assert aio_read(data) == expected(500)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_kafka_python_reads_ours(codec, kafka_python_snappy):
    kafka_python_supports(codec)
    data = build_batch(SAMPLE, base_offset=7, compression=codec, producer_id=11, producer_epoch=0,
                       base_sequence=0, transactional=True)  # fmt: skip
    batch = KpBatch(data)
    assert batch.validate_crc()
    assert batch.is_transactional and batch.producer_id == 11 and batch.leader_epoch == -1
    assert kp_read(data) == expected(7)


def test_xerial_framing_matches_java_layout():
    payload = bytes(range(256)) * 400  # > one 32 KiB block
    framed = compress(Compression.SNAPPY, payload)
    assert framed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (first,) = struct.unpack_from(">i", framed, 16)
    first_block = bytes(cramjam.snappy.decompress_raw(framed[20 : 20 + first]))
    assert first_block == payload[: 32 * 1024]
    assert aiokafka.codec.snappy_decode(framed) == payload
    assert decompress(Compression.SNAPPY, framed) == payload
    assert decompress(Compression.SNAPPY, aiokafka.codec.snappy_encode(payload)) == payload


def test_transactional_and_timestamp_type_attributes():
    data = build_batch(SAMPLE[:2], transactional=True, producer_id=1, producer_epoch=2, base_sequence=3,
                       timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=42)  # fmt: skip
    batch = AioBatch(data)
    assert batch.is_transactional and not batch.is_control_batch
    assert batch.timestamp_type == 1 and batch.max_timestamp == 42
    assert [r.timestamp for r in batch] == [42, 42]
    header, records = decode_batch(data)
    assert header.attributes == 0x18
    assert [(r.timestamp, r.timestamp_type) for r in records] == [(42, 1), (42, 1)]


# --------------------------------------------------------------------------
# control batches


@pytest.mark.parametrize("ctype", [ControlType.COMMIT, ControlType.ABORT])
def test_control_batch(ctype, kafka_python_snappy):
    data = build_control_batch(ctype, producer_id=77, producer_epoch=3, coordinator_epoch=12,
                               base_offset=90, timestamp=123)  # fmt: skip
    header, records = decode_batch(data)
    assert header.is_control and header.is_transactional
    assert header.records_count == 1 and header.last_offset == 90
    (rec,) = records
    assert rec.offset == 90 and rec.timestamp == 123
    assert rec.control is not None
    assert (rec.control.version, rec.control.type, rec.control.coordinator_epoch) == (0, ctype, 12)
    assert rec.control.is_commit == (ctype == ControlType.COMMIT)

    aio = AioBatch(data)
    assert aio.validate_crc() and aio.is_control_batch and aio.is_transactional
    assert aio.producer_id == 77 and aio.producer_epoch == 3
    (aio_rec,) = list(aio)
    assert AioControlRecord.parse(aio_rec.key) == AioControlRecord(0, int(ctype))
    assert struct.unpack(">hi", aio_rec.value) == (0, 12)

    (kp_rec,) = list(KpBatch(data))
    assert kp_rec.type == ctype and kp_rec.commit == (ctype == ControlType.COMMIT)


def test_control_record_with_short_key_is_rejected():
    data = build_batch([(b"\x00", b"\x00\x00\x00\x00\x00\x00", (), 1)], control=True, transactional=True)
    with pytest.raises(ProtocolError, match="control"):
        decode_batch(data)


def test_unknown_control_type_keeps_value():
    key = struct.pack(">hh", 0, 5)
    data = build_batch([(key, b"opaque", (), 1)], control=True)
    (rec,) = decode_batch(data)[1]
    assert rec.control is not None and rec.control.type == 5 and rec.control.coordinator_epoch is None
    assert rec.value == b"opaque"


# --------------------------------------------------------------------------
# header inspection, iteration, CRC


def test_header_read_without_decoding_and_iteration_is_zero_copy():
    first = build_batch(SAMPLE[:2], base_offset=0, compression=Compression.ZSTD)
    second = build_batch(SAMPLE[2:], base_offset=2, compression=Compression.GZIP)
    buf = bytearray(first + second)
    it = iter_batches(memoryview(buf))
    got = list(it)
    assert [h.base_offset for h, _ in got] == [0, 2]
    assert [h.last_offset for h, _ in got] == [1, 4]
    assert [h.next_offset for h, _ in got] == [2, 5]
    assert [h.records_count for h, _ in got] == [2, 3]
    assert got[0][1].obj is buf and got[1][1].nbytes == len(second)
    assert got[1][0].size == len(second)
    assert it.position == len(buf) and not it.truncated
    assert all(h.verify_crc() for h, _ in got)
    header = BatchHeader.read(buf, len(first))
    assert header.base_offset == 2 and header.compression == Compression.GZIP
    # in-place edit through the view shows through: no copy was made
    buf[len(first) + 7] = 9
    assert BatchHeader.read(buf, len(first)).base_offset == 9


@pytest.mark.parametrize("cut", [1, 11, 12, 30, 61, 100])
def test_partial_trailing_batch(cut):
    whole = build_batch(SAMPLE[:2])
    buf = whole + whole[:cut]
    it = iter_batches(buf, allow_partial=True)
    assert len(list(it)) == 1
    assert it.truncated and it.position == len(whole)
    with pytest.raises(ProtocolError, match="partial"):
        list(iter_batches(buf))
    assert len(decode_record_set(buf)) == 2
    with pytest.raises(ProtocolError):
        decode_record_set(buf, allow_partial=False)


def test_crc_mismatch_detected():
    data = bytearray(build_batch(SAMPLE, compression=Compression.LZ4))
    data[-3] ^= 0x01
    header = BatchHeader.read(data)
    assert not header.verify_crc()
    assert not AioBatch(bytes(data)).validate_crc()
    with pytest.raises(ProtocolError, match="CRC"):
        header.records()
    data = bytearray(build_batch(SAMPLE))
    data[BATCH_HEADER_SIZE + 8] ^= 0x40  # inside a record, still decodable
    with pytest.raises(ProtocolError, match="CRC"):
        decode_batch(data)
    assert len(decode_batch(data, verify_crc=False)[1]) == len(SAMPLE)


def test_wrong_magic_and_lying_header_rejected():
    data = bytearray(build_batch(SAMPLE[:1]))
    bad = bytearray(data)
    bad[MAGIC_POS] = 3
    with pytest.raises(ProtocolError, match="magic"):
        BatchHeader.read(bad)
    bad = bytearray(data)
    struct.pack_into(">i", bad, BATCH_LENGTH_POS, 10_000_000)
    with pytest.raises(ProtocolError, match="exceeds"):
        BatchHeader.read(bad)
    bad = bytearray(data)
    struct.pack_into(">i", bad, RECORDS_COUNT_POS, 2_000_000_000)  # count claims too many records
    update_crc(bad)
    with pytest.raises(ProtocolError, match="cannot fit"):
        decode_batch(bad)
    bad = bytearray(data)
    struct.pack_into(">i", bad, RECORDS_COUNT_POS, -1)
    with pytest.raises(ProtocolError, match="negative"):
        BatchHeader.read(bad)
    bad = bytearray(data)
    struct.pack_into(">h", bad, ATTRIBUTES_POS, 6)  # codec 6 does not exist
    update_crc(bad)
    with pytest.raises(ProtocolError, match="codec"):
        decode_batch(bad)


def test_trailing_bytes_after_records_rejected():
    data = bytearray(build_batch(SAMPLE[:1])) + b"\x00"
    struct.pack_into(">i", data, BATCH_LENGTH_POS, len(data) - LOG_OVERHEAD)
    update_crc(data)
    with pytest.raises(ProtocolError, match="after the last"):
        decode_batch(data)


# --------------------------------------------------------------------------
# in-place broker rewrites


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD], ids=["none", "zstd"])
def test_in_place_rewrites_keep_crc_valid(codec):
    buf = bytearray(aio_build(codec=codec))
    set_base_offset(buf, 12345)
    set_partition_leader_epoch(buf, 17)
    assert AioBatch(bytes(buf)).validate_crc()
    assert aio_read(bytes(buf)) == expected(12345)
    assert KpBatch(bytes(buf)).leader_epoch == 17

    set_log_append_time(buf, 1_800_000_000_000)
    aio = AioBatch(bytes(buf))
    assert aio.validate_crc() and aio.timestamp_type == 1
    assert aio.max_timestamp == 1_800_000_000_000
    assert {r.timestamp for r in aio} == {1_800_000_000_000}
    header, records = decode_batch(buf)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME and header.partition_leader_epoch == 17
    assert [r.offset for r in records] == list(range(12345, 12345 + len(SAMPLE)))
    assert {r.timestamp for r in records} == {1_800_000_000_000}


def test_in_place_rewrite_at_offset_in_larger_buffer():
    a = build_batch(SAMPLE[:1])
    b = build_batch(SAMPLE[1:3])
    buf = bytearray(a + b)
    set_base_offset(buf, 1, offset=len(a))
    set_log_append_time(buf, 5, offset=len(a))
    headers = [h for h, _ in iter_batches(buf)]
    assert [h.base_offset for h in headers] == [0, 1]
    assert all(h.verify_crc() for h in headers)
    assert headers[1].max_timestamp == 5 and headers[0].timestamp_type == TimestampType.CREATE_TIME
    with pytest.raises(ProtocolError):
        set_base_offset(bytearray(10), 1)


# --------------------------------------------------------------------------
# compression edge cases and bombs


@pytest.mark.parametrize("codec", CODECS[1:], ids=CODEC_IDS[1:])
def test_decompression_capped(codec):
    big = [(None, b"\x00" * 1_000_000, [], 1)]
    data = build_batch(big, compression=codec)
    assert len(decode_batch(data)[1][0].value) == 1_000_000
    with pytest.raises(ProtocolError, match=r"more than|declares"):
        decode_batch(data, max_decompressed_size=100_000)


def test_lying_snappy_preamble_rejected_before_allocation():
    claims_1gib = b"\x80\x80\x80\x80\x04"  # snappy preamble: unsigned varint 1 << 30
    with pytest.raises(ProtocolError, match="declares"):
        decompress(Compression.SNAPPY, claims_1gib + b"\x00" * 8)
    with pytest.raises(ProtocolError):
        decompress(Compression.SNAPPY, b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 1 << 30))


def test_unknown_codec_and_garbage_payloads():
    for codec in CODECS[1:]:
        with pytest.raises(ProtocolError):
            decompress(codec, b"definitely not compressed data")
    with pytest.raises(ProtocolError):
        decompress(7, b"")
    with pytest.raises(ProtocolError):
        compress(7, b"")


def test_xxh32_known_vectors_and_lz4_header_checksum():
    assert xxh32_short(b"") == 0x02CC5D05
    assert xxh32_short(b"a") == 0x550D7456
    assert xxh32_short(b"abc") == 0x32D153FF
    frame = bytes(cramjam.lz4.compress(b"hello world" * 10))
    assert frame[6] == (xxh32_short(frame[4:6]) >> 8) & 0xFF  # descriptor FLG+BD, no content size


# --------------------------------------------------------------------------
# legacy magic 0 / 1


def legacy_expected(magic: int, base: int, records) -> list[tuple]:
    return [(base + i, ts if magic else -1, k, v, []) for i, (k, v, ts) in enumerate(records)]


LEGACY_SAMPLE = [(b"k0", b"v0", 1000), (None, b"v1", 1001), (b"k2", None, 999), (b"", b"x" * 5000, 1002)]


def assign_wrapper_offset(data: bytes, last_offset: int) -> bytes:
    """What a broker does to a compressed legacy set: the wrapper gets the last offset."""
    buf = bytearray(data)
    struct.pack_into(">q", buf, 0, last_offset)
    return bytes(buf)


def check_legacy_build(builder, magic, codec, wrapper_first, read_theirs):
    """Fill an outside legacy builder with LEGACY_SAMPLE; our decode must match theirs.

    Uncompressed and magic 0 inner offsets are absolute, magic 1 inner ones relative.
    """
    first = 0 if codec == Compression.NONE else wrapper_first
    for i, (k, v, ts) in enumerate(LEGACY_SAMPLE):
        builder.append(i if magic == 1 else first + i, ts, k, v)
    data = bytes(builder.build())
    if codec != Compression.NONE:
        data = assign_wrapper_offset(data, first + len(LEGACY_SAMPLE) - 1)
    ours = view_records(decode_message_set(data))
    assert ours == legacy_expected(magic, first, LEGACY_SAMPLE)
    theirs = [(o, -1 if ts is None else ts, k, v, h) for o, ts, k, v, h in read_theirs(data)]
    assert ours == theirs
    return data, ours


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS[:4], ids=CODEC_IDS[:4])
def test_legacy_aiokafka_built(magic, codec):
    if magic == 0 and codec == Compression.LZ4:
        pytest.skip("aiokafka refuses magic 0 lz4; covered by test_legacy_magic0_lz4_broken_checksum")
    builder = AioLegacyBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    data, ours = check_legacy_build(builder, magic, codec, 50, aio_read_all)
    assert view_records(decode_record_set(data)) == ours


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY])
def test_legacy_kafka_python_built(magic, codec, kafka_python_snappy):
    builder = KpLegacyBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    check_legacy_build(builder, magic, codec, 20, kp_read)


def legacy_message(offset: int, magic: int, attrs: int, key: bytes | None, value: bytes | None,
                   timestamp: int = 0) -> bytes:  # fmt: skip
    body = struct.pack(">bb", magic, attrs)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(body)) + body


def test_legacy_magic0_lz4_broken_checksum():
    inner = b"".join(legacy_message(10 + i, 0, 0, k, v) for i, (k, v, _) in enumerate(LEGACY_SAMPLE))
    frame = bytearray(cramjam.lz4.compress(inner))
    assert not frame[4] & 0x08
    frame[6] = (xxh32_short(bytes(frame[0:6])) >> 8) & 0xFF  # KAFKA-3160: magic included
    wrapper = legacy_message(13, 0, Compression.LZ4, None, bytes(frame))
    assert view_records(decode_message_set(wrapper)) == legacy_expected(0, 10, LEGACY_SAMPLE)


def test_legacy_log_append_time_wrapper_and_mixed_magics():
    inner = b"".join(legacy_message(i, 1, 0, k, v, ts) for i, (k, v, ts) in enumerate(LEGACY_SAMPLE))
    wrapper = legacy_message(103, 1, Compression.GZIP | 0x08, None, bytes(cramjam.gzip.compress(inner)), 77)
    records = decode_message_set(wrapper)
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in records] == [
        (100 + i, 77, TimestampType.LOG_APPEND_TIME) for i in range(4)
    ]
    mixed = wrapper + build_batch(SAMPLE[:2], base_offset=104)
    assert [r.offset for r in decode_record_set(mixed)] == [100, 101, 102, 103, 104, 105]
    with pytest.raises(ProtocolError, match="magic"):
        decode_message_set(mixed)


def test_legacy_rejects_nested_compression_and_bad_crc():
    inner = legacy_message(0, 1, Compression.GZIP, None, bytes(cramjam.gzip.compress(b"")), 1)
    wrapper = legacy_message(0, 1, Compression.GZIP, None, bytes(cramjam.gzip.compress(inner)), 1)
    with pytest.raises(ProtocolError, match="nested"):
        decode_message_set(wrapper)
    msg = bytearray(legacy_message(0, 1, 0, b"k", b"v", 1))
    msg[-1] ^= 1
    with pytest.raises(ProtocolError, match="CRC"):
        decode_message_set(msg)
    assert decode_message_set(msg, verify_crc=False)[0].value == b"w"


# --------------------------------------------------------------------------
# hypothesis round trip

header_st = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=64)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(header_st, max_size=4),
    st.integers(min_value=0, max_value=(1 << 50)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record_st, min_size=1, max_size=12),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(min_value=0, max_value=(1 << 62)),
    producer=st.tuples(st.integers(-1, (1 << 62)), st.integers(-1, 32767), st.integers(-1, (1 << 31) - 1)),
    transactional=st.booleans(),
)
@pytest.mark.slow
def test_roundtrip_property(records, codec, base_offset, producer, transactional):
    pid, epoch, seq = producer
    data = build_batch(records, base_offset=base_offset, compression=codec, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=transactional)  # fmt: skip
    header, decoded = decode_batch(data)
    assert view_records(decoded) == expected(base_offset, records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (pid, epoch, seq)
    assert header.is_transactional == transactional
    assert header.max_timestamp == max(r[3] for r in records)
    assert aio_read(data) == expected(base_offset, records)
    # rebuilding from decoded Record objects is stable
    assert build_batch(decoded, base_offset=base_offset, compression=Compression.NONE, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=transactional) == build_batch(
        records, base_offset=base_offset, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        transactional=transactional)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_varint_roundtrip(value):
    from shoal.protocol.records import _read_varint

    raw = encode_varint(value)
    assert _read_varint(memoryview(raw), 0, len(raw), 10) == (value, len(raw))


# --------------------------------------------------------------------------
# hostile input: only ProtocolError


def decode_everything(buf) -> None:
    """Run every decoder over ``buf``; anything but ProtocolError fails the test."""
    for call in (
        lambda: decode_batch(buf),
        lambda: decode_batch(buf, verify_crc=False, max_decompressed_size=1 << 20),
        lambda: [h.records(verify_crc=False) for h, _ in iter_batches(buf, allow_partial=True)],
        lambda: decode_record_set(buf, verify_crc=False),
        lambda: decode_record_set(buf, allow_partial=False),
        lambda: decode_message_set(buf, verify_crc=False),
    ):
        try:
            call()
        except ProtocolError:
            pass


def with_fixed_crc(buf: bytearray) -> bytearray:
    """Make a corrupted batch pass its CRC so corruption reaches the record parser."""
    if len(buf) >= BATCH_HEADER_SIZE and buf[MAGIC_POS] == CURRENT_MAGIC:
        struct.pack_into(">i", buf, BATCH_LENGTH_POS, len(buf) - LOG_OVERHEAD)
        try:
            update_crc(buf)
        except ProtocolError:
            pass  # header itself is broken (e.g. negative count): decoders must say so
    return buf


CORPUS = {
    **{f"v2-{c.name}": build_batch(SAMPLE[:4], compression=c) for c in CODECS},
    "control": build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=1),
    "legacy-v1-gzip": legacy_message(3, 1, Compression.GZIP, None, bytes(cramjam.gzip.compress(
        b"".join(legacy_message(i, 1, 0, k, v, ts) for i, (k, v, ts) in enumerate(LEGACY_SAMPLE))))),
    "legacy-v0": b"".join(legacy_message(i, 0, 0, k, v) for i, (k, v, _) in enumerate(LEGACY_SAMPLE)),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_truncation_byte_by_byte(name):
    data = CORPUS[name]
    step = 1 if len(data) < 3000 else 7
    for cut in range(0, len(data), step):
        prefix = data[:cut]
        decode_everything(prefix)
        decode_everything(with_fixed_crc(bytearray(prefix)))
        if name.startswith("v2"):
            with pytest.raises(ProtocolError):
                decode_batch(with_fixed_crc(bytearray(prefix)))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_random_byte_flips(name):
    rng = random.Random(name)
    data = CORPUS[name]
    for _ in range(400):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        decode_everything(bytes(buf))
        decode_everything(with_fixed_crc(buf))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(sorted(CORPUS)))
def test_garbage_after_valid_header(tail, name):
    data = bytearray(CORPUS[name][:BATCH_HEADER_SIZE]) + tail
    decode_everything(bytes(data))
    decode_everything(with_fixed_crc(data))


def test_records_input_types_and_record_objects():
    rec = Record(offset=0, timestamp=5, key=bytearray(b"k"), value=memoryview(b"v"), headers=[("a", b"b")])
    data = build_batch([rec, (b"x", None, (), None)])
    records = decode_batch(data)[1]
    assert (records[0].key, records[0].value, records[0].headers) == (b"k", b"v", [("a", b"b")])
    assert records[1].timestamp > 1_600_000_000_000  # None means now
    sparse = build_batch([(b"a", b"1", (), 1), (b"b", b"2", (), 2)], offset_deltas=[0, 20_000])
    header, records = decode_batch(sparse)
    assert [r.offset for r in records] == [0, 20_000] and header.last_offset_delta == 20_000
    assert aio_read(sparse)[1][0] == 20_000


def test_record_length_mismatch_rejected():
    data = bytearray(build_batch([(b"k", b"v", (), 1)]))
    assert data[BATCH_HEADER_SIZE] < 0x80  # one-byte zig-zag length
    data[BATCH_HEADER_SIZE] += 2  # claims one byte more ...
    data += b"\x00"  # ... which is there, but the fields do not use it
    struct.pack_into(">i", data, BATCH_LENGTH_POS, len(data) - LOG_OVERHEAD)
    update_crc(data)
    with pytest.raises(ProtocolError, match="declares"):
        decode_batch(data)
    with pytest.raises(Exception):  # noqa: B017 - the oracle agrees it is corrupt
        aio_read(bytes(data))


def test_header_key_overrunning_record_rejected():
    data = bytearray(build_batch([(None, None, [("abc", None)], 1)]))
    # record: len attrs ts off key(-1) value(-1) count key_len "abc" value(-1)
    key_len_pos = BATCH_HEADER_SIZE + 7
    assert data[key_len_pos] == 6  # zig-zag 3
    data[key_len_pos] = 20
    update_crc(data)
    with pytest.raises(ProtocolError, match="header key length"):
        decode_batch(data)
