"""Fetched batches decoded as columns (``protocol.record_columns`` and the Spark source's
``RowColumns.add_fetched``) against the record decoder as oracle.

Whatever the batches hold (keys, tombstones, headers, any codec, LogAppendTime,
transaction markers, aborted transactions, magic 0/1 message sets, a batch cut
off at the end) and wherever the pieces start and end (inside batches, with gaps),
the rows must be exactly the records ``decode_record_set_for`` returns at
those offsets, with their piece's delivery count, and the offset after the last
whole batch must be the same. A corrupted batch must be refused exactly when
the record decoder refuses it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from shoal.client.core.records import decode_record_set_for
from shoal.client.spark.rows import RowColumns, arrow_schema, source_schema
from shoal.protocol.compression import Compression
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.legacy_records import LegacyMessage, build_message_set
from shoal.protocol.record_columns import RecordColumns
from shoal.protocol.records import (
    BatchHeader,
    ControlType,
    TimestampType,
    build_batch,
    build_control_batch,
)

_record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=12)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=3),
    st.integers(1_600_000_000_000, 1_700_000_000_000),
)


def _rows(columns: RowColumns) -> list[tuple]:
    if not len(columns):
        return []
    batch = columns.batch()
    names = batch.schema.names
    out = []
    for row in batch.to_pylist():
        ts = row["timestamp"]
        out.append(
            (
                row["offset"],
                row["key"],
                row["value"],
                int(ts.timestamp() * 1000) if ts is not None else None,
                row["timestampType"],
                [tuple(h.values()) for h in row["headers"]] if "headers" in names else None,
                row["deliveryCount"],
                row["topic"],
                row["partition"],
            )
        )
    return out


def _expected(data: bytes, pieces, with_headers: bool, aborted=None) -> tuple[list[tuple], int]:
    start = pieces[0][0] if pieces else 0
    records, next_offset = decode_record_set_for("t", 3, data, start_offset=start, aborted_transactions=aborted)
    rows = []
    for first, last, count in pieces:
        for r in records:
            if first <= r.offset <= last:
                headers = [(k, v) for k, v in r.headers] if with_headers else None
                value = None if r.value is None else bytes(r.value)
                key = None if r.key is None else bytes(r.key)
                rows.append((r.offset, key, value, r.timestamp, int(r.timestamp_type), headers, count, "t", 3))
    return rows, next_offset


def _columns(with_headers: bool) -> RowColumns:
    return RowColumns(arrow_schema(source_schema(with_headers)))


def _check(data: bytes, pieces, *, with_headers: bool = True, aborted=None) -> list[tuple]:
    columns = _columns(with_headers)
    added, next_offset = columns.add_fetched("t", 3, data, pieces, aborted_transactions=aborted)
    rows = _rows(columns)
    expected, expected_next = _expected(data, pieces, with_headers, aborted)
    assert rows == expected
    assert added == len(rows)
    assert next_offset == expected_next
    return rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(
        st.tuples(st.lists(_record, min_size=1, max_size=12), st.sampled_from(list(Compression)), st.booleans()),
        min_size=1,
        max_size=5,
    ),
    cuts=st.lists(st.integers(0, 70), max_size=6),
    counts=st.lists(st.integers(1, 9), min_size=3, max_size=3),
    with_headers=st.booleans(),
    truncate=st.integers(0, 40),
)
def test_columns_are_the_record_decoders_records_in_the_pieces(batches, cuts, counts, with_headers, truncate) -> None:
    data = b""
    base = 0
    for records, codec, log_append in batches:
        data += build_batch(
            records,
            base_offset=base,
            compression=codec,
            timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
            log_append_time=1_650_000_000_123 if log_append else None,
        )
        base += len(records)
    if truncate:
        data = data[:-truncate]  # the broker cut the last batch at its byte limit
    # Pieces: ascending, disjoint, ending and starting anywhere (inside batches, with gaps).
    edges = sorted(set(cuts))
    pieces = [(a, b - 1, counts[i % 3]) for i, (a, b) in enumerate(zip(edges[::2], edges[1::2], strict=False)) if b > a]
    if not pieces:
        pieces = [(0, base + 5, None)]
    _check(data, pieces, with_headers=with_headers)


def test_control_batches_and_aborted_transactions_are_never_rows() -> None:
    pid = 7
    data = (
        build_batch([(b"k", b"a", [], 1), (None, b"b", [], 2)], base_offset=0)
        + build_batch([(None, b"t1", [], 3), (None, b"t2", [], 3)], base_offset=2, producer_id=pid, transactional=True)
        + build_control_batch(ControlType.ABORT, producer_id=pid, producer_epoch=0, base_offset=4)
        + build_batch([(None, b"t3", [], 4)], base_offset=5, producer_id=pid, transactional=True)
        + build_control_batch(ControlType.COMMIT, producer_id=pid, producer_epoch=0, base_offset=6)
        + build_batch([(None, None, [("h", b"x")], 5)], base_offset=7)  # a tombstone
    )
    rows = _check(data, [(0, 100, 1)], aborted=[(pid, 2)])
    assert [r[0] for r in rows] == [0, 1, 5, 7]
    assert rows[-1][2] is None
    # read_uncommitted: the aborted records are rows too, markers still are not
    assert [r[0] for r in _check(data, [(0, 100, 1)])] == [0, 1, 2, 3, 5, 7]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_old_message_sets_become_the_same_rows(magic: int, codec: int) -> None:
    messages = [LegacyMessage(o, 1_600_000_000_000 + o, None if o % 3 else b"k", b"v%d" % o) for o in range(10, 20)]
    data = build_message_set(messages, magic=magic, compression=codec)
    rows = _check(data, [(12, 14, 2), (17, 30, 3)], with_headers=False)
    assert [(r[0], r[6]) for r in rows] == [(12, 2), (13, 2), (14, 2), (17, 3), (18, 3), (19, 3)]


def test_values_are_views_until_the_batch_copies_them_once() -> None:
    columns = _columns(False)
    data = bytearray(build_batch([(None, b"x" * 100, [], 1)] * 3))
    columns.add_fetched("t", 3, data, [(0, 10, 1)])
    assert all(isinstance(v, memoryview) for v in columns.values)
    with pytest.raises(BufferError):  # the fetched buffer is still read
        data.append(0)
    batch = columns.batch()
    data.append(0)  # the views are gone once the RecordBatch is built
    assert batch.column("value").to_pylist() == [b"x" * 100] * 3


def test_a_corrupted_batch_is_refused_exactly_when_the_record_decoder_refuses_it() -> None:
    good = build_batch([(b"key", b"value-%d" % i, [("h", b"v")], 5) for i in range(4)])
    header_len = 61
    for at in range(header_len, len(good)):
        for byte in (0x00, 0x7F, 0x80, 0xFF):
            bad = bytearray(good)
            bad[at] = byte
            header = BatchHeader.read(bytes(bad), 0)
            try:
                want = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in header.records(verify_crc=False)]
            except ProtocolError:
                want = None
            cols = RecordColumns(with_headers=True)
            try:
                cols.add_batch(header, verify_crc=False)
                got = [
                    (o, t, k, None if v is None else bytes(v), h)
                    for o, t, k, v, h in zip(cols.offsets, cols.timestamps, cols.keys, cols.values, cols.headers)
                ]
            except ProtocolError:
                got = None
                assert len(cols) == 0  # a refused batch adds nothing
            assert got == want, (at, byte)


def test_a_bad_crc_is_refused() -> None:
    bad = bytearray(build_batch([(None, b"v", [], 1)]))
    bad[-1] ^= 1
    with pytest.raises(ProtocolError, match="CRC"):
        RecordColumns().add_batch(BatchHeader.read(bytes(bad), 0))


def test_a_record_longer_than_its_fields_is_refused() -> None:
    """A record whose length says one byte more than its fields hold (the byte is there)."""
    good = build_batch([(None, b"v", [], 1)])
    body = good[61:]
    length = body[0] >> 1  # a one-byte zig-zag varint
    bad = bytearray(good[:61] + bytes([(length + 1) << 1]) + body[1:] + b"\0")
    bad[8:12] = (len(bad) - 12).to_bytes(4, "big")  # the batch length, so the batch itself is whole
    header = BatchHeader.read(bytes(bad), 0)
    with pytest.raises(ProtocolError, match="declares"):
        header.records(verify_crc=False)
    with pytest.raises(ProtocolError, match="declares"):
        RecordColumns().add_batch(header, verify_crc=False)
