"""The one framer (`shoal.protocol.frames.Framer`) and the two connections framing through it.

The framer alone: a stream cut at every byte, fed whole, with trailing bytes, with
lying lengths, and a model caller (a small staging buffer, big frames received
elsewhere or in place) checked by hypothesis against the frames that were sent.
Then the shells: the broker's `Connection` and the client's `BrokerConnection`,
driven by hand as uvloop drives them (get_buffer, recv into it, buffer_updated),
keep their promises: bad sizes refused before anything is buffered, the requests
before a bad frame answered in order, request memory given back.
"""

from __future__ import annotations

import asyncio
import random
import re
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.broker.net.buffers import RequestMemory
from shoal.broker.net.connection import Connection
from shoal.broker.net.contract import NO_RESPONSE
from shoal.broker.timing.clock import ManualClock
from shoal.client.core.conn import BrokerConnection
from shoal.client.core.errors import KafkaConnectionError
from shoal.protocol.api import api_by_name
from shoal.protocol.buffers import FramePool
from shoal.protocol.frames import (
    PREFIX,
    Framer,
    FrameReader,
    FrameTooLarge,
    decode_response,
    encode_request,
    encode_response,
)
from shoal.protocol.records import build_batch, iter_batches


def _stream(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def _all(framer: Framer, buf: Any, n: int, copy: bool = False) -> list[bytes]:
    out = []
    while (frame := framer.next(buf, n, copy)) is not None:
        out.append(bytes(frame))
    return out


# -- the framer alone -----------------------------------------------------------------


def test_fed_whole_every_frame_then_nothing_pending() -> None:
    payloads = [b"", b"a", b"bc" * 100, bytes(range(256))]
    data = bytearray(_stream(payloads))
    framer = Framer(1000)
    assert _all(framer, data, len(data)) == payloads
    assert framer.pos == len(data) and framer.partial == -1


def test_frames_are_views_of_the_callers_buffer_unless_copied() -> None:
    data = bytearray(_stream([b"hello", b"world"]))
    framer = Framer(100)
    first = framer.next(data, len(data))
    assert first is not None and first.obj is data  # zero-copy: a window on the caller's bytes
    data[4] = ord("j")
    assert bytes(first) == b"jello"
    second = framer.next(data, len(data), copy=True)
    assert second is not None and second.obj is not data and second.readonly
    data[-1] = ord("x")
    assert bytes(second) == b"world"  # its own bytes: the buffer may be reused at once


def test_byte_by_byte_reports_partial_sizes() -> None:
    payloads = [b"xyz", b"", b"q" * 9]
    data = _stream(payloads)
    framer = Framer(100)
    got: list[bytes] = []
    partials: list[int] = []
    buf = bytearray()
    for b in data:  # grows one byte at a time; the cursor stays at the frame being received
        buf.append(b)
        got += _all(framer, buf, len(buf))
        partials.append(framer.partial)
    assert got == payloads
    # 3 bytes of prefix: unknown (-1); from the 4th byte until the frame is whole, its size
    assert partials[:8] == [-1, -1, -1, 3, 3, 3, -1, -1]
    assert partials[-1] == -1 and framer.pos == len(data)


def test_trailing_bytes_stay_for_the_next_read() -> None:
    data = bytearray(_stream([b"one", b"two"]) + struct.pack(">i", 50) + b"par")
    framer = Framer(100)
    assert _all(framer, data, len(data)) == [b"one", b"two"]
    assert framer.partial == 50 and framer.pos == 14  # the cursor at the incomplete frame's prefix
    assert framer.peek(data, len(data)) == 50


@pytest.mark.parametrize("size", [101, 1 << 30, 0x7FFFFFFF, -1, -(1 << 31)])
def test_a_lying_length_is_refused_from_its_prefix_alone(size: int) -> None:
    framer = Framer(100)
    data = bytearray(_stream([b"ok"]) + struct.pack(">i", size))  # nothing of the frame but its size
    assert framer.next(data, len(data)) is not None  # the frame before it is handed out first
    with pytest.raises(FrameTooLarge, match=str(size)) as e:
        framer.next(data, len(data))
    assert e.value.offset == 6
    with pytest.raises(FrameTooLarge):
        framer.peek(data, len(data))


def test_min_size_and_the_limit_name_the_client_and_broker_use() -> None:
    framer = Framer(100, min_size=4, limit="socket.request.max.bytes")
    with pytest.raises(FrameTooLarge, match="below the minimum of 4"):
        framer.next(struct.pack(">i", 3) + b"abc", 7)
    framer = Framer(100, limit="socket.request.max.bytes")
    with pytest.raises(FrameTooLarge, match=re.escape("exceeds socket.request.max.bytes 100")):
        framer.next(struct.pack(">i", 101), 4)
    assert framer.next(struct.pack(">i", 100) + b"z" * 100, 104) is not None  # the limit itself is allowed


def test_a_frame_received_into_a_buffer_of_the_callers() -> None:
    payload = bytes(range(200))
    data = _stream([b"s"]) + _stream([payload])
    staging = bytearray(64)
    staging[:40] = data[:40]
    framer = Framer(1000)
    assert _all(framer, staging, 40) == [b"s"]
    assert framer.partial == 200
    big = bytearray(200)
    framer.receive_into(staging, 40, big)
    assert framer.pos == 40  # everything in staging consumed
    assert (framer.start, framer.end, framer.filled) == (0, 200, 40 - 5 - PREFIX)
    pos = 40
    while True:
        window = framer.window(big)
        chunk = data[pos : pos + min(len(window), 17)]
        window[: len(chunk)] = chunk
        pos += len(chunk)
        if framer.received(len(chunk)):
            break
    assert pos == len(data)
    assert bytes(framer.payload(big)) == payload and framer.payload(big).obj is big


def test_a_frame_received_where_it_landed() -> None:
    payload = b"p" * 300
    data = _stream([payload]) + _stream([b"next"])
    buf = bytearray(400)
    buf[:100] = data[:100]
    framer = Framer(1000)
    assert framer.peek(buf, 100) == 300
    assert not framer.receive_in_place(100)
    assert (framer.start, framer.end) == (4, 304)
    window = framer.window(buf)
    assert len(window) == 204
    window[:] = data[100:304]
    assert framer.received(204)
    assert bytes(framer.payload(buf)) == payload
    # The whole frame (and more) in one read: complete at once, `end` is where the rest starts.
    buf[: len(data)] = data
    framer.pos = 0
    framer.peek(buf, len(data))
    assert framer.receive_in_place(len(data))
    assert bytes(buf[framer.end : len(data)]) == _stream([b"next"])


def _model_caller(data: bytes, cuts: list[int], staging_size: int, in_place: bool) -> list[bytes]:
    """A caller shaped like the connections: a fixed staging buffer, frames that do not fit it
    received elsewhere (or, with ``in_place``, where they land when a read starts with one)."""
    framer = Framer(1 << 20)
    staging = bytearray(staging_size)
    staged = 0
    big: bytearray | None = None
    got: list[bytes] = []
    pos = 0
    cuts = cuts or [7]
    i = 0
    while pos < len(data):
        want = cuts[i % len(cuts)]
        i += 1
        if big is not None:
            window = framer.window(big)
        elif in_place and staged == 0:
            spare = bytearray(len(data) + 8)  # a read into a buffer of its own: maybe a big frame lands whole
            window = memoryview(spare)
        else:
            window = memoryview(staging)[staged:]
        n = min(len(window), want, len(data) - pos)
        window[:n] = data[pos : pos + n]
        pos += n
        window.release()
        if big is not None:
            if framer.received(n):
                got.append(bytes(framer.payload(big)))
                big = None
            continue
        if in_place and staged == 0:
            framer.pos = 0
            size = framer.peek(spare, n)
            if size + PREFIX > staging_size:
                if not framer.receive_in_place(n):
                    big = spare
                    continue
                got.append(bytes(framer.payload(spare)))
                rest = spare[framer.end : n]
            else:
                rest = spare[:n]
            if len(rest) > len(staging):  # (the broker frames such a rest from a copy of its own)
                staging.extend(bytes(len(rest) - len(staging)))
            staging[: len(rest)] = rest
            staged = len(rest)
        else:
            staged += n
        framer.pos = 0
        got += _all(framer, staging, staged, copy=True)
        if framer.partial + PREFIX > staging_size:
            big = bytearray(framer.partial)
            framer.receive_into(staging, staged, big)
        rest = staged - framer.pos
        staging[:rest] = staging[framer.pos : staged]
        staged = rest
    assert big is None and staged == 0
    return got


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(1, 400), max_size=8),
    in_place=st.booleans(),
)
def test_a_model_caller_gets_every_frame_intact_however_the_reads_fall(
    payloads: list[bytes], cuts: list[int], in_place: bool
) -> None:
    assert _model_caller(_stream(payloads), cuts, 64, in_place) == payloads


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=30), max_size=30), limit=st.integers(0, 60))
def test_frame_reader_agrees_with_a_reference_parser(chunks: list[bytes], limit: int) -> None:
    """Arbitrary bytes, cut anywhere: the same frames as parsing the whole stream at once,
    and the same verdict on a size out of bounds."""
    whole = b"".join(chunks)
    expected: list[bytes] = []
    bad = False
    pos = 0
    while len(whole) - pos >= 4:
        size = int.from_bytes(whole[pos : pos + 4], "big", signed=True)
        if not 0 <= size <= limit:
            bad = True
            break
        if len(whole) - pos - 4 < size:
            break
        expected.append(whole[pos + 4 : pos + 4 + size])
        pos += 4 + size
    reader = FrameReader(max_size=limit)
    got: list[bytes] = []
    refused = False
    try:
        for c in chunks:
            got += [bytes(f) for f in reader.feed(c)]
    except FrameTooLarge:
        refused = True
    assert got == expected and refused == bad
    if not bad:
        assert reader.pending == len(whole) - pos


# -- the broker's connection ----------------------------------------------------------


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.paused = False
        self.eof = False

    def get_extra_info(self, _key: str) -> Any:
        return ("127.0.0.1", 1)

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def writelines(self, parts: Any) -> None:
        self.written.append(b"".join(bytes(p) for p in parts))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def answered(self) -> list[int]:
        """Correlation ids of the responses written, in order."""
        data = b"".join(self.written)
        out = []
        while data:
            (size,) = struct.unpack(">i", data[:4])
            out.append(struct.unpack(">i", data[4:8])[0])
            data = data[4 + size :]
        return out


class _Broker:
    """Answers ApiVersions (a real body), takes produce requests without an answer."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []

    def dispatch(self, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        self.bodies.append(body)
        if ctx.api_key == _AV.key:
            conn.complete(slot, _AV.response_class()())
        else:
            conn.complete(slot, NO_RESPONSE)

    def connection_closed(self, conn: Any) -> None:
        pass


class _Server:
    def __init__(self, broker: _Broker, max_frame: int = 4 << 20, memory: int = -1) -> None:
        self.broker = broker
        self.clock = ManualClock()
        self.max_frame_bytes = max_frame
        self.max_queued_requests = 1000
        self.connections: set = set()
        self.frame_pool = FramePool()
        self.request_memory = RequestMemory(memory)

    def memory_freed(self, waiters: list[Connection]) -> None:
        for conn in waiters:
            conn.retry_memory()

    def admit(self, ip: str, listener: str | None = None) -> None:
        return None

    def release(self, ip: str, listener: str | None = None) -> None:
        pass


_AV = api_by_name("ApiVersions")
_P = api_by_name("Produce").request_class()


def _api_versions(corr: int) -> bytes:
    body = _AV.request_class()(client_software_name="t", client_software_version="1")
    return b"".join(encode_request(_AV.key, 3, corr, "framer-test", body))


def _produce(value: bytes, corr: int) -> bytes:
    batch = build_batch([(None, value, [], 1_700_000_000_000)])
    body = _P(
        acks=0,
        timeout_ms=1000,
        topic_data=[_P.TopicProduceData(name="t", partition_data=[_P.PartitionProduceData(index=0, records=batch)])],
    )
    return b"".join(encode_request(0, 9, corr, "framer-test", body))


def _connection(max_frame: int = 4 << 20, memory: int = -1) -> tuple[Connection, _Transport, _Server]:
    server = _Server(_Broker(), max_frame, memory)
    conn = Connection(server)  # type: ignore[arg-type]
    transport = _Transport()
    conn.connection_made(transport)
    return conn, transport, server


def _feed(conn: Connection, data: bytes, step: int) -> None:
    pos = 0
    while pos < len(data) and not conn.closed:
        target = conn.get_buffer(-1)
        n = min(len(target), step, len(data) - pos)
        target[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        target.release()
        pos += n


@pytest.mark.parametrize("step", [1, 3, 1 << 20])
@pytest.mark.parametrize("bad", [101 * 1024, -1, -(1 << 31)], ids=["over the limit", "-1", "int32 min"])
def test_broker_answers_what_came_before_a_bad_size_then_closes(step: int, bad: int) -> None:
    conn, transport, server = _connection(max_frame=100 * 1024)
    _feed(conn, _api_versions(1) + _api_versions(2) + struct.pack(">i", bad) + b"x" * 100, step)
    assert transport.answered() == [1, 2]
    assert transport.eof and transport.closed and not transport.aborted  # FIN after the answers, not aborted
    assert server.request_memory.used == 0 and len(server.frame_pool) == 0  # nothing taken for it


def test_broker_refuses_a_bad_size_that_lands_in_the_buffer_bet_on_a_big_frame() -> None:
    """After a large frame the next read goes into a pooled buffer of its own (the bet that
    another large one follows); a bad size there closes the connection and gives that
    buffer's reservation back to queued.max.request.bytes."""
    conn, transport, server = _connection(memory=8 << 20)
    big = _produce(b"v" * 600_000, 1)
    _feed(conn, big, 1 << 20)
    assert len(server.broker.bodies) == 1
    _feed(conn, struct.pack(">i", -7), 1 << 20)  # lands at the start of the bet
    assert transport.closed
    conn.connection_lost(None)
    assert server.request_memory.used == 0


@pytest.mark.parametrize("seed", range(6))
def test_broker_frames_big_and_small_at_any_cut(seed: int) -> None:
    rng = random.Random(seed)
    conn, transport, server = _connection(memory=3 << 20)
    values = [bytes([i]) * rng.choice((5, 3000, 270_000, 900_000)) for i in range(12)]
    frames = [_produce(v, i) for i, v in enumerate(values)]
    data = b"".join(frames)
    pos = 0
    while pos < len(data):
        target = conn.get_buffer(-1)
        n = min(len(target), rng.choice((1, 4, 5, 300, 70_000, 262_144, 1 << 21)), len(data) - pos)
        target[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        target.release()
        pos += n
    assert not transport.closed and not transport.aborted
    got = []
    for body in server.broker.bodies:
        (header, _), *_ = list(iter_batches(body.topic_data[0].partition_data[0].records))
        got.append(header.records(verify_crc=True)[0].value)
    assert got == values
    assert server.request_memory.used == 0


# -- the client's connection ----------------------------------------------------------


class _ClientTransport:
    def __init__(self) -> None:
        self.aborted = False

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def writelines(self, parts: Any) -> None:
        pass

    def abort(self) -> None:
        self.aborted = True


def _client() -> tuple[BrokerConnection, _ClientTransport]:
    conn = BrokerConnection("127.0.0.1", 1, 0, "framer-test", 30000)
    transport = _ClientTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def _client_feed(conn: BrokerConnection, data: bytes, steps: list[int]) -> None:
    pos = 0
    i = 0
    while pos < len(data) and not conn.closed:
        target = conn.get_buffer(-1)
        n = min(len(target), steps[i % len(steps)], len(data) - pos)
        i += 1
        target[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        target.release()
        pos += n


def _fetch_response(records: bytes) -> Any:
    F = api_by_name("Fetch").response_class()
    return F(
        responses=[
            F.FetchableTopicResponse(
                topic="t",
                partitions=[F.PartitionData(partition_index=0, high_watermark=1, records=records)],
            )
        ]
    )


@pytest.mark.parametrize("steps", [[1], [3, 5000], [70_000, 1], [1 << 21]])
async def test_client_responses_small_and_big_at_any_cut(steps: list[int]) -> None:
    conn, _ = _client()
    fetch = api_by_name("Fetch")
    blobs = [b"a" * 10, b"b" * 200_000, b"c" * 3, b"d" * 70_000, b"e" * 65_000]
    futures = [conn.send("Fetch", fetch.request_class()(), version=12) for _ in blobs]
    data = b"".join(
        b"".join(bytes(p) for p in encode_response(fetch.key, 12, i + 1, _fetch_response(blob)))
        for i, blob in enumerate(blobs)
    )
    _client_feed(conn, data, steps)
    got = [bytes((await f).responses[0].partitions[0].records) for f in futures]
    assert got == blobs
    assert not conn.closed
    conn.close()


@pytest.mark.parametrize("size", [3, -1, (1 << 30) + 1], ids=["shorter than a correlation id", "-1", "over 1 GiB"])
async def test_client_closes_on_a_bad_response_size_before_buffering(size: int) -> None:
    conn, transport = _client()
    meta = api_by_name("Metadata")
    first = conn.send("Metadata", meta.request_class()(topics=[]), version=12)
    second = conn.send("Metadata", meta.request_class()(topics=[]), version=12)
    good = b"".join(bytes(p) for p in encode_response(meta.key, 12, 1, meta.response_class()(cluster_id="c")))
    _client_feed(conn, good + struct.pack(">i", size), [1 << 20])
    assert (await first).cluster_id == "c"  # the answer before the bad frame arrived intact
    with pytest.raises(KafkaConnectionError, match="bad response"):
        await second
    assert conn.closed and transport.aborted
    assert conn._big is None  # nothing allocated for the announced size


async def test_client_response_decodes_from_the_received_buffer() -> None:
    """A big response is received straight into a pooled buffer of at least its size; its
    record set is a view of that buffer, not a copy."""
    conn, _ = _client()
    fetch = api_by_name("Fetch")
    fut = conn.send("Fetch", fetch.request_class()(), version=12)
    frame = b"".join(bytes(p) for p in encode_response(fetch.key, 12, 1, _fetch_response(b"r" * 500_000)))
    _client_feed(conn, frame, [1000, 1 << 20])
    records = (await fut).responses[0].partitions[0].records
    assert isinstance(records, memoryview) and len(records.obj) >= len(frame) - PREFIX  # type: ignore[arg-type]
    corr, body = decode_response(memoryview(frame)[4:], fetch.key, 12)
    assert corr == 1 and bytes(body.responses[0].partitions[0].records) == bytes(records)
    conn.close()
    await asyncio.sleep(0)


async def test_client_reuses_a_big_response_buffer_only_once_nothing_reads_it() -> None:
    """The next big response lands in the previous one's buffer when no view of it is left
    (no fresh pages to fault in per answer), and in another buffer while one is: records
    a caller still holds are never overwritten."""
    conn, _ = _client()
    fetch = api_by_name("Fetch")

    async def receive(fill: bytes) -> memoryview:
        fut = conn.send("Fetch", fetch.request_class()(), version=12)
        frame = b"".join(
            bytes(p) for p in encode_response(fetch.key, 12, conn._correlation, _fetch_response(fill * 300_000))
        )
        _client_feed(conn, frame, [70_000, 1 << 20])
        return (await fut).responses[0].partitions[0].records

    first = await receive(b"a")
    held = first.obj
    second = await receive(b"b")  # `first` is still alive: its buffer must not be reused
    assert second.obj is not held and bytes(first) == b"a" * 300_000
    spare = second.obj
    del first, second
    third = await receive(b"c")
    assert third.obj in (held, spare) and bytes(third) == b"c" * 300_000
    conn.close()
    await asyncio.sleep(0)
