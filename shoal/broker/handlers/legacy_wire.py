"""The request versions Kafka 4 removed, served as Kafka 3.9 did (KIP-896's other side).

Why a module of its own: Produce v0-v2, Fetch v0-v3 and ListOffsets v0 differ
from their newer versions only in the record format (and v0's offset list),
so their handlers call in here at one point each instead of growing branches:

* ``upconvert``: a produced magic 0/1 message set becomes one magic 2 batch
  before the partition validates it (``protocol.legacy_records.to_batch``),
  compressed with the topic's ``compression.type`` (the producer's codec when
  it is ``producer``), as Kafka's LogValidator did. Offsets are assigned by
  the log, timestamps kept (magic 0 has none: -1), LogAppendTime stamped by
  the log as for any batch.
* ``down_convert``: a Fetch v0-v1 gets magic 0, v2-v3 magic 1
  (``protocol.legacy_records.down_convert``), unless the topic's
  ``message.downconversion.enable`` is false (UNSUPPORTED_VERSION, as Kafka
  3.x) or the data is zstd (UNSUPPORTED_COMPRESSION_TYPE).
* ``old_style_offsets``: ListOffsets v0's list of segment start offsets.
"""

from __future__ import annotations

from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.protocol.compression import Compression
from shoal.protocol.constants import ListOffsetsTimestamp
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.legacy_records import UnsupportedDownConversion, down_convert, is_legacy, to_batch

_TARGET_CODECS = {
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
    "producer": None,
}
FIRST_V2_FETCH = 4  # Fetch v4 is the first that reads magic 2 batches
FIRST_MAGIC1_FETCH = 2  # Fetch v2-v3 read magic 1, v0-v1 magic 0
FIRST_V2_PRODUCE = 3  # Produce v3 is the first that sends magic 2 batches
FIRST_ZSTD_FETCH = 10  # KIP-110


def upconvert(partition: Any, records: Any) -> Any:
    """``records`` as one magic 2 batch when they are a legacy message set (else unchanged)."""
    if records is None or len(records) == 0 or not is_legacy(records):
        return records
    target = _TARGET_CODECS[partition.settings["compression.type"]]
    try:
        return to_batch(records, target_compression=target)
    except ProtocolError as e:
        raise ErrorAnswer(ErrorCode.CORRUPT_MESSAGE, f"malformed message set: {e}") from None


def refuse_old_fetch(partition: Any, version: int) -> int:
    """The error a Fetch below v4 gets for this partition before reading, else 0 (as Kafka 3.x)."""
    if partition.settings["compression.type"] == "zstd" and version < FIRST_ZSTD_FETCH:
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    if not partition.settings["message.downconversion.enable"]:
        return ErrorCode.UNSUPPORTED_VERSION
    return ErrorCode.NONE


def down_converted(records: Any, version: int, fetch_offset: int) -> bytes:
    """Stored batches as the message set a Fetch of ``version`` (< 4) reads."""
    if not len(records):
        return b""
    to_magic = 1 if version >= FIRST_MAGIC1_FETCH else 0
    try:
        return down_convert(records, to_magic, fetch_offset)
    except UnsupportedDownConversion as e:
        raise ErrorAnswer(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, str(e)) from None


def old_style_offsets(partition: Any, timestamp: int, max_num: int, now_ms: int) -> list[int]:
    """ListOffsets v0: segment start offsets (and the log end) at or before ``timestamp``,
    by segment modification time, newest first, at most ``max_num``; capped at the high
    watermark for consumers (Kafka's legacyFetchOffsetsBefore)."""
    plog = partition.log
    segments = plog.segments
    start = partition.log_start_offset
    points = [(max(s.base_offset, start), s.last_modified_ms) for s in segments]
    if segments and segments[-1].size > 0:
        points.append((plog.log_end_offset, now_ms))
    if timestamp == ListOffsetsTimestamp.LATEST:
        index = len(points) - 1
    elif timestamp == ListOffsetsTimestamp.EARLIEST:
        index = 0
    else:
        index = len(points) - 1
        while index >= 0 and points[index][1] > timestamp:
            index -= 1
    found = sorted((points[i][0] for i in range(index, index - max(0, min(max_num, index + 1)), -1)), reverse=True)
    hw = partition.high_watermark
    if any(o > hw for o in found):
        found = [hw] + [o for o in found if o <= hw]
    return found
