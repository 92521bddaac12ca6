"""Pooled receive buffers: reuse only what nothing reads any more, and the
connection's framing on top of them (frames split at any byte, large frames
in pooled buffers, a request kept by its handler never overwritten)."""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import pytest

from shoal.broker.net.buffers import RequestMemory
from shoal.broker.net.connection import Connection
from shoal.broker.net.contract import NO_RESPONSE
from shoal.broker.timing.clock import ManualClock
from shoal.protocol.api import api_by_name
from shoal.protocol.buffers import GRANULE, FramePool, in_use
from shoal.protocol.frames import encode_request
from shoal.protocol.records import build_batch

P = api_by_name("Produce").request_class()


def test_in_use_sees_views_and_keeps_the_buffer() -> None:
    buf = bytearray(b"x" * 1000)
    alloc = buf.__alloc__()
    assert not in_use(buf)
    view = memoryview(buf)[10:20]
    inner = view[2:4]
    del view
    assert in_use(buf)  # a slice of a slice still pins it
    del inner
    assert not in_use(buf)
    assert len(buf) == 1000 and buf.__alloc__() == alloc  # checking neither resized nor reallocated


def test_take_reuses_a_given_buffer_and_rounds_capacity() -> None:
    pool = FramePool()
    a = pool.take(1_000_000)
    assert len(a) % GRANULE == 0 and len(a) >= 1_000_000
    pool.give(a)
    assert pool.take(999_000) is a
    assert pool.take(10) is not a  # taken: not handed out twice


def test_a_buffer_with_a_live_view_is_not_reused_until_released() -> None:
    pool = FramePool()
    a = pool.take(GRANULE)
    kept = memoryview(a)[: GRANULE // 2]
    pool.give(a)
    b = pool.take(GRANULE)
    assert b is not a
    pool.give(b)
    kept.release()
    assert {id(pool.take(GRANULE)), id(pool.take(GRANULE))} == {id(a), id(b)}


def test_a_buffer_read_by_a_blocked_write_in_another_thread_is_not_reused() -> None:
    """os.write holds the buffer with the GIL released: exactly the writer-thread case."""
    pool = FramePool()
    buf = pool.take(GRANULE)
    buf[:] = b"\x07" * len(buf)
    r, w = os.pipe()
    try:
        writer = threading.Thread(target=lambda: os.write(w, memoryview(buf)))
        writer.start()
        time.sleep(0.1)  # the pipe (64 KiB) is full: the write is blocked inside the kernel
        assert writer.is_alive()
        pool.give(buf)
        other = pool.take(GRANULE)
        assert other is not buf
        got = bytearray()
        while len(got) < GRANULE:
            got += os.read(r, 1 << 16)
        writer.join()
    finally:
        os.close(r)
        os.close(w)
    assert got == b"\x07" * GRANULE
    assert pool.take(GRANULE) is buf


def test_pool_is_bounded_and_keeps_the_newest() -> None:
    pool = FramePool(max_bytes=3 * GRANULE, max_frame=2 * GRANULE)
    bufs = [bytearray(GRANULE) for _ in range(5)]
    for b in bufs:
        pool.give(b)
    assert len(pool) == 3 and pool.pooled_bytes == 3 * GRANULE
    assert pool.take(GRANULE) is bufs[-1]
    huge = pool.take(4 * GRANULE)
    assert len(huge) == 4 * GRANULE
    pool.give(huge)  # over max_frame: not kept
    assert len(pool) == 2


# -- the connection on top of the pool ----------------------------------------


class _Transport:
    def __init__(self) -> None:
        self.aborted: str | None = None
        self.paused = False

    def get_extra_info(self, _key: str) -> Any:
        return ("127.0.0.1", 1)

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def writelines(self, parts: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def abort(self) -> None:
        self.aborted = "abort"

    def close(self) -> None:
        pass


class _Broker:
    """Keeps every request body (and with it the views into its frame)."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []

    def dispatch(self, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
        self.bodies.append(body)
        conn.complete(slot, NO_RESPONSE)

    def connection_closed(self, conn: Any) -> None:
        pass


class _Server:
    def __init__(self, broker: _Broker) -> None:
        self.broker = broker
        self.clock = ManualClock()
        self.max_frame_bytes = 4 << 20
        self.max_queued_requests = 1000
        self.connections: set = set()
        self.frame_pool = FramePool()
        self.request_memory = RequestMemory()  # -1: unbounded, as Kafka's default

    def memory_freed(self, waiters: list[Connection]) -> None:
        for conn in waiters:
            conn.retry_memory()

    def admit(
        self, ip: str, listener: str | None = None
    ) -> None:  # no connection limits here (tests/wire/test_connection_limits.py)
        return None

    def release(self, ip: str, listener: str | None = None) -> None:
        pass


def _produce_frame(value: bytes, correlation_id: int) -> bytes:
    batch = build_batch([(None, value, [], 1_700_000_000_000)])
    body = P(
        acks=1,
        timeout_ms=1000,
        topic_data=[P.TopicProduceData(name="t", partition_data=[P.PartitionProduceData(index=0, records=batch)])],
    )
    return b"".join(encode_request(0, 9, correlation_id, "pool-test", body))


def _feed(conn: Connection, stream: bytes, rng: random.Random) -> None:
    """What uvloop does: get_buffer, recv into it, buffer_updated, then release the buffer."""
    pos = 0
    while pos < len(stream):
        target = conn.get_buffer(-1)
        n = min(len(target), len(stream) - pos, rng.choice((1, 7, 4096, 100_000, 1 << 20)))
        target[:n] = stream[pos : pos + n]
        conn.buffer_updated(n)
        target.release()
        pos += n


def _records_value(body: Any) -> bytes:
    from shoal.protocol.records import iter_batches

    (header, _), *_ = list(iter_batches(body.topic_data[0].partition_data[0].records))
    return header.records(verify_crc=True)[0].value


def test_frames_split_anywhere_arrive_intact_and_kept_requests_are_never_overwritten() -> None:
    rng = random.Random(7)
    broker = _Broker()
    server = _Server(broker)
    conn = Connection(server)  # type: ignore[arg-type]
    transport = _Transport()
    conn.connection_made(transport)
    values = [bytes([i]) * size for i, size in enumerate([300_000, 10, 1_000_000, 50, 700_000, 1_000_000] * 3)]
    stream = b"".join(_produce_frame(v, i) for i, v in enumerate(values))
    _feed(conn, stream, rng)
    assert transport.aborted is None
    assert [_records_value(b) for b in broker.bodies] == values  # every kept body still reads its own bytes
    assert len(server.frame_pool) > 0


def test_large_frames_reuse_buffers_once_requests_are_dropped() -> None:
    class Forgetful(_Broker):
        def dispatch(self, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
            self.bodies.append(_records_value(body))  # a copy; the request goes away
            conn.complete(slot, NO_RESPONSE)

    class CountingPool(FramePool):
        def __init__(self) -> None:
            super().__init__()
            self.taken: list[int] = []

        def take(self, size: int) -> bytearray:
            buf = super().take(size)
            self.taken.append(id(buf))
            return buf

    broker = Forgetful()
    server = _Server(broker)
    server.frame_pool = pool = CountingPool()
    conn = Connection(server)  # type: ignore[arg-type]
    conn.connection_made(_Transport())
    values = [bytes([i]) * 900_000 for i in range(6)]
    _feed(conn, b"".join(_produce_frame(v, i) for i, v in enumerate(values)), random.Random(1))
    assert broker.bodies == values
    assert len(pool.taken) >= 6 and len(set(pool.taken)) == 1  # one buffer served every frame


@pytest.mark.parametrize("seed", range(25))
def test_random_frame_and_read_sizes_deliver_every_frame_intact(seed: int) -> None:
    rng = random.Random(seed)

    class SometimesKeeps(_Broker):
        def dispatch(self, ctx: Any, body: Any, slot: Any, conn: Any) -> None:
            self.bodies.append(body if rng.random() < 0.5 else _records_value(body))
            conn.complete(slot, NO_RESPONSE)

    broker = SometimesKeeps()
    server = _Server(broker)
    conn = Connection(server)  # type: ignore[arg-type]
    transport = _Transport()
    conn.connection_made(transport)
    sizes = [
        rng.choice((rng.randint(0, 2000), rng.randint(200_000, 300_000), rng.randint(300_000, 1_300_000)))
        for _ in range(30)
    ]
    values = [bytes([i % 256]) * size for i, size in enumerate(sizes)]
    stream = b"".join(_produce_frame(v, i) for i, v in enumerate(values))
    pos = 0
    while pos < len(stream) and transport.aborted is None:
        target = conn.get_buffer(-1)
        assert len(target), "an empty buffer: uvloop would close the connection"
        n = min(len(target), len(stream) - pos, rng.choice((1, 3, 4, 5, 1000, 65536, 300_000, 2_000_000)))
        target[:n] = stream[pos : pos + n]
        conn.buffer_updated(n)
        target.release()
        pos += n
    assert transport.aborted is None
    got = [b if isinstance(b, bytes) else _records_value(b) for b in broker.bodies]
    assert got == values


def test_back_to_back_large_frames_are_received_in_place() -> None:
    starts: list[int] = []

    class Spy(Connection):
        def _big_frame(self, buf: bytearray, start: int, end: int) -> None:
            starts.append(start)
            super()._big_frame(buf, start, end)

    broker = _Broker()
    conn = Spy(_Server(broker))  # type: ignore[arg-type]
    conn.connection_made(_Transport())
    frames = [_produce_frame(bytes([i]) * 900_000, i) for i in range(5)]
    for frame in frames:  # each read brings exactly one frame, as a producer's large writes tend to
        pos = 0
        while pos < len(frame):
            target = conn.get_buffer(-1)
            n = min(len(target), len(frame) - pos)
            target[:n] = frame[pos : pos + n]
            conn.buffer_updated(n)
            target.release()
            pos += n
    assert [_records_value(b) for b in broker.bodies] == [bytes([i]) * 900_000 for i in range(5)]
    assert starts == [0, 4, 4, 4, 4]  # the first through staging (prefix copied), the rest where they landed


def test_queued_max_request_bytes_holds_a_second_large_frame_until_the_first_is_handed_on() -> None:
    """Two connections each start a ~900 KB frame under a 1 MiB bound: the second stops reading
    (its first bytes wait in staging) until the first frame is handed on, then completes intact."""
    broker = _Broker()
    server = _Server(broker)
    server.request_memory = RequestMemory(1 << 20)
    a, b = Connection(server), Connection(server)  # type: ignore[arg-type]
    ta, tb = _Transport(), _Transport()
    a.connection_made(ta)
    b.connection_made(tb)
    fa, fb = _produce_frame(b"a" * 900_000, 1), _produce_frame(b"b" * 900_000, 2)

    def feed(conn: Connection, data: bytes) -> None:
        target = conn.get_buffer(-1)
        assert len(target) >= len(data)
        target[: len(data)] = data
        conn.buffer_updated(len(data))
        target.release()

    feed(a, fa[:100_000])
    assert server.request_memory.used >= 900_000 and not ta.paused
    feed(b, fb[:100_000])
    assert tb.paused and server.request_memory.waiting == 1  # no room: b waits, its bytes kept
    for i in range(100_000, len(fa), 200_000):
        feed(a, fa[i : i + 200_000])
    assert [_records_value(x) for x in broker.bodies] == [b"a" * 900_000]
    assert not tb.paused and server.request_memory.waiting == 0  # a's frame was handed on: b reads again
    for i in range(100_000, len(fb), 200_000):
        feed(b, fb[i : i + 200_000])
    assert [_records_value(x) for x in broker.bodies] == [b"a" * 900_000, b"b" * 900_000]
    assert server.request_memory.used == 0


def test_a_connection_that_closes_while_waiting_for_request_memory_gives_everything_back() -> None:
    broker = _Broker()
    server = _Server(broker)
    server.request_memory = RequestMemory(1 << 20)
    a, b = Connection(server), Connection(server)  # type: ignore[arg-type]
    a.connection_made(_Transport())
    b.connection_made(_Transport())
    for conn, tag in ((a, 1), (b, 2)):
        target = conn.get_buffer(-1)
        data = _produce_frame(bytes([tag]) * 900_000, tag)[:50_000]
        target[: len(data)] = data
        conn.buffer_updated(len(data))
        target.release()
    assert server.request_memory.waiting == 1
    b.connection_lost(None)  # the waiter goes: nothing of it stays in the bound
    a.connection_lost(None)  # the holder goes: its reservation is given back
    assert server.request_memory.used == 0 and server.request_memory.waiting == 0
