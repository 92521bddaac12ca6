"""Records of a magic 2 batch decoded column by column, without an object per record.

``records.BatchHeader.records`` builds one ``Record`` (or the caller's type)
per record: right for a consumer that hands records out one at a time. A
reader that turns fetched batches into Arrow columns (the Spark source's
executors) wants the opposite shape: one list per field. Building a record
object and then taking it apart again was half of such a reader's CPU.

``RecordColumns`` collects the fields of many batches as plain lists, and a
value as a memoryview of the batch's bytes (no copy: the Arrow value buffer
is then built with one join). The wire checks are the record decoder's: every
record must end where its length says, and a varint, key, value or header
must not run past it; a batch that breaks them raises ``ProtocolError`` and
adds nothing. Control batches are the caller's to skip (they hold markers,
not records).

The record loop repeats ``records._parse_records``' (same inline varints, same
checks) on purpose: sharing one loop would need a call per record on the
consumer's hot path or per field here, and either costs more than the loop.
``tests/unit/test_record_columns.py`` holds the two to the same answers,
corrupted batches included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shoal.protocol.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.records import (
    _MIN_RECORD_SIZE,
    _ZIGZAG_1,
    _ZIGZAG_2,
    BatchHeader,
    TimestampType,
    _parse_headers,
    _read_varint,
)

__all__ = ["RecordColumns"]


@dataclass(slots=True)
class RecordColumns:
    """Fields of decoded records, one list each; ``headers`` is kept only when asked for."""

    with_headers: bool = False
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[memoryview | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def add_batch(
        self,
        header: BatchHeader,
        *,
        verify_crc: bool = True,
        max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> int:
        """Append the records of ``header``'s batch (a data batch); returns how many."""
        payload = memoryview(header.record_bytes(verify_crc=verify_crc, max_decompressed_size=max_decompressed_size))
        count = header.records_count
        if count * _MIN_RECORD_SIZE > len(payload):
            raise ProtocolError(f"{count} records cannot fit in {len(payload)} bytes", path="batch.recordsCount")
        offsets: list[int] = []
        stamps: list[int] = []
        keys: list[bytes | None] = []
        values: list[memoryview | None] = []
        headers: list[list[tuple[str, bytes | None]]] | None = [] if self.with_headers else None
        _parse(payload, count, offsets, stamps, keys, values, headers)
        base = header.base_offset
        self.offsets += [base + d for d in offsets]
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            self.timestamps += [header.max_timestamp] * count
        else:
            ts = header.base_timestamp
            self.timestamps += [ts + d for d in stamps]
        self.timestamp_types += [header.timestamp_type] * count
        self.keys += keys
        self.values += values
        if headers is not None:
            self.headers += headers
        return count


def _parse(
    payload: memoryview,
    count: int,
    offsets: list[int],
    stamps: list[int],
    keys: list[bytes | None],
    values: list[memoryview | None],
    headers: list[list[tuple[str, bytes | None]]] | None,
) -> None:
    """Offset deltas, timestamp deltas, keys, value views (and headers) of ``count`` records."""
    # Varints are read from bytes (indexing a memoryview is slower); values are cut from the view.
    buf = payload.tobytes()
    end = len(buf)
    read = _read_varint
    zz = _ZIGZAG_1
    zz2 = _ZIGZAG_2
    pos = 0
    index = 0
    try:
        for index in range(count):  # noqa: B007 - named by the error of a bad record
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
            b = buf[pos + 1]  # after the attributes byte
            if b < 128:
                stamps.append(zz[b])
                pos += 2
            elif (c := buf[pos + 2]) < 128:
                stamps.append(zz2[(b & 127) | (c << 7)])
                pos += 3
            else:
                delta, pos = read(buf, pos + 1, rec_end, 10)
                stamps.append(delta)
            b = buf[pos]
            if b < 128:
                offsets.append(zz[b])
                pos += 1
            elif (c := buf[pos + 1]) < 128:
                offsets.append(zz2[(b & 127) | (c << 7)])
                pos += 2
            else:
                delta, pos = read(buf, pos, rec_end)
                offsets.append(delta)
            b = buf[pos]
            if b < 128:
                size = zz[b]
                pos += 1
            else:
                size, pos = read(buf, pos, rec_end)
            if size < 0:
                keys.append(None)
            elif pos + size > rec_end:
                raise ProtocolError(f"key length {size} does not fit", offset=pos)
            else:
                keys.append(buf[pos : pos + size])
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
                values.append(None)
            elif pos + size > rec_end:
                raise ProtocolError(f"value length {size} does not fit", offset=pos)
            else:
                values.append(payload[pos : pos + size])
                pos += size
            b = buf[pos]
            if b < 128:
                n_headers = zz[b]
                pos += 1
            else:
                n_headers, pos = read(buf, pos, rec_end)
            if n_headers:
                if n_headers < 0 or 2 * n_headers > rec_end - pos:
                    raise ProtocolError(f"header count {n_headers} does not fit", offset=pos)
                record_headers: list[tuple[str, bytes | None]] = []  # checked as the record decoder does
                pos = _parse_headers(buf, pos, rec_end, n_headers, record_headers)
                if headers is not None:
                    headers.append(record_headers)
            elif headers is not None:
                headers.append([])
            if pos != rec_end:
                raise ProtocolError(f"record declares {length} bytes, parsed {pos - rec_end + length}")
    except IndexError:
        raise ProtocolError("record runs past the batch", path=f"records[{index}]") from None
    except ProtocolError as exc:
        raise exc.with_context(path=f"records[{index}]") from None
    if pos != end:
        raise ProtocolError(f"{end - pos} bytes after the last record", path="records", offset=pos)
