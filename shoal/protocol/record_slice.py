"""A few records of a large batch, as a batch of their own, without decoding them.

A share group in record_limit mode hands a member at most MaxRecords records. When
producers wrote big batches of small records (a 1 MiB batch of 40,000 records, say),
sending the whole batch for the five records acquired costs the broker, the socket and
the client 1 MiB per fetch, and the client decodes 40,000 records to keep five: with a
few dozen members on one partition this, not the members, sets the rate.

``RecordIndex`` finds where each record of one batch starts in its (decompressed)
payload, once; ``slice`` then builds a valid magic-2 batch holding only the records of
an offset range: the records' bytes copied unchanged, a new 61-byte header (same base
offset, timestamps, producer fields and leader epoch; no compression; records count and
last offset delta of the slice) and its CRC. The base offset is kept, so the first
record may carry a non-zero offset delta -- exactly what log compaction leaves behind,
which every client reads.
"""

from __future__ import annotations

from array import array

from shoal.protocol.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, decompress
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.records import (
    _COMPRESSION_MASK,
    _HEADER,
    _UINT32,
    ATTRIBUTES_POS,
    BATCH_HEADER_SIZE,
    CRC_POS,
    LOG_OVERHEAD,
    BatchHeader,
    Compression,
    _crc32c,
    _read_varint,
)


class RecordIndex:
    """Byte positions of the records of one batch whose offsets have no gaps."""

    __slots__ = ("_header", "_payload", "_starts", "base_offset", "count", "crc")

    def __init__(self, header: BatchHeader, *, max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> None:
        if not self.sliceable(header):
            raise ValueError("only data batches whose offsets have no gaps can be sliced")
        payload = header.data[BATCH_HEADER_SIZE:]
        if header.compression != Compression.NONE:
            payload = decompress(header.compression, payload, max_size=max_decompressed_size)
        buf = bytes(payload)
        end = len(buf)
        starts = array("q")
        pos = 0
        for _ in range(header.records_count):
            starts.append(pos)
            length, body = _read_varint(buf, pos, end)
            pos = body + length
            if length <= 0 or pos > end:
                raise ProtocolError("record length out of bounds", path="batch.records", offset=body)
        if pos != end:
            raise ProtocolError(f"{end - pos} bytes after the last record", path="batch.records", offset=pos)
        starts.append(end)
        self.base_offset, self.crc, self.count = header.base_offset, header.crc, header.records_count
        self._header = _HEADER.unpack_from(header.data, 0)
        self._payload, self._starts = buf, starts

    @staticmethod
    def sliceable(header: BatchHeader) -> bool:
        """A data batch with records at every offset it spans (compacted batches have gaps)."""
        return not header.is_control and header.records_count == header.last_offset_delta + 1 > 0

    def matches(self, header: BatchHeader) -> bool:
        return header.base_offset == self.base_offset and header.crc == self.crc

    def slice(self, first_offset: int, last_offset: int) -> bytes:
        """A batch of the records from `first_offset` to `last_offset` (clamped to this batch)."""
        i = max(first_offset - self.base_offset, 0)
        j = min(last_offset - self.base_offset, self.count - 1)
        if i > j:
            raise ValueError(f"offsets {first_offset}..{last_offset} are not in this batch")
        body = self._payload[self._starts[i] : self._starts[j + 1]]
        (base, _, leader_epoch, magic, _, attrs, _, base_ts, max_ts, pid, pepoch, bseq, _) = self._header
        out = bytearray(BATCH_HEADER_SIZE + len(body))
        _HEADER.pack_into(
            out,
            0,
            base,
            BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body),
            leader_epoch,
            magic,
            0,
            attrs & ~_COMPRESSION_MASK,
            j,
            base_ts,
            max_ts,
            pid,
            pepoch,
            bseq,
            j - i + 1,
        )
        out[BATCH_HEADER_SIZE:] = body
        _UINT32.pack_into(out, CRC_POS, _crc32c(memoryview(out)[ATTRIBUTES_POS:]))
        return bytes(out)
