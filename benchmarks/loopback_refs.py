"""References for the data-path benchmarks: what this machine moves without a broker.

Split out of benchmarks/produce_fetch.py (the project's 800-line rule); any benchmark
can import these. Each runs its server and client in processes of their own:

  * ``raw_loopback(seconds)``: a uvloop client pumping 1 MiB writes into a uvloop server
    that drops them (bytes/s);
  * ``loopback_into_file(directory, total)``: the same, with the server os.writing all it
    gets into a new file: the rate of storing new bytes in the page cache, issue #21's
    reference for produce;
  * ``loopback_into_file(..., durable=True)``: and a second thread fdatasyncing the file in
    back-to-back rounds (group commit), the rate counted until the last byte is on disk:
    what a produce with acks=-1 can reach at most.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import threading
import time

MIB = 1 << 20

# -- raw loopback -------------------------------------------------------------------


def _sink_server(port_q: mp.Queue, seconds: float) -> None:
    import uvloop

    class Sink(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            pass

    async def main() -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(Sink, "127.0.0.1", 0)
        port_q.put(srv.sockets[0].getsockname()[1])
        await asyncio.sleep(seconds + 5)
        srv.close()

    uvloop.run(main())


def _pump_client(port: int, seconds: float, out_q: mp.Queue) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        class Pump(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.t = transport

            def pause_writing(self) -> None:
                self.paused = loop.create_future()

            def resume_writing(self) -> None:
                self.paused.set_result(None)

        transport, proto = await loop.create_connection(Pump, "127.0.0.1", port)
        proto.paused = None
        chunk = os.urandom(MIB)
        sent = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            transport.write(chunk)
            sent += MIB
            if proto.paused is not None and not proto.paused.done():
                await proto.paused
        elapsed = time.perf_counter() - start
        transport.close()
        out_q.put(sent / elapsed)
        done.set_result(None)

    uvloop.run(main())


def raw_loopback(seconds: float) -> float:
    ctx = mp.get_context("spawn")
    port_q: mp.Queue = ctx.Queue()
    out_q: mp.Queue = ctx.Queue()
    srv = ctx.Process(target=_sink_server, args=(port_q, seconds))
    srv.start()
    port = port_q.get(timeout=20)
    cli = ctx.Process(target=_pump_client, args=(port, seconds, out_q))
    cli.start()
    rate = out_q.get(timeout=seconds + 30)
    cli.join()
    srv.terminate()
    srv.join()
    return rate


def _file_sink_server(port_q: mp.Queue, out_q: mp.Queue, path: str, total: int, durable: bool = False) -> None:
    """Receive `total` bytes into one reused buffer and os.write them to `path`; `durable`: a
    second thread fdatasyncs back to back while bytes arrive (group commit), and the rate
    counts until the last byte is on disk."""
    import uvloop

    written = [0]  # bytes written so far (read by the sync thread)
    stop = threading.Event()

    def sync_rounds(fd: int) -> None:
        synced = 0
        while not stop.is_set():
            target = written[0]
            if target > synced:
                os.fdatasync(fd)
                synced = target
            else:
                time.sleep(0.0002)

    class FileSink(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.buf = bytearray(MIB)
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self.got = 0
            self.start = 0.0

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.start = time.perf_counter()
            if durable:
                threading.Thread(target=sync_rounds, args=(self.fd,), daemon=True).start()

        def get_buffer(self, sizehint: int) -> memoryview:
            return memoryview(self.buf)

        def buffer_updated(self, nbytes: int) -> None:
            view = memoryview(self.buf)[:nbytes]
            while view:
                view = view[os.write(self.fd, view) :]
            self.got += nbytes
            written[0] = self.got
            if self.got >= total:
                if durable:
                    stop.set()
                    os.fdatasync(self.fd)
                out_q.put(self.got / (time.perf_counter() - self.start))
                self.transport.close()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(FileSink, "127.0.0.1", 0)
        port_q.put(srv.sockets[0].getsockname()[1])
        await asyncio.sleep(300)

    uvloop.run(main())


def _bytes_pump_client(port: int, total: int) -> None:
    import uvloop

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        class Pump(asyncio.Protocol):
            paused: asyncio.Future | None = None

            def pause_writing(self) -> None:
                self.paused = loop.create_future()

            def resume_writing(self) -> None:
                if self.paused is not None:
                    self.paused.set_result(None)

            def connection_lost(self, exc: Exception | None) -> None:
                if not done.done():
                    done.set_result(None)

        transport, proto = await loop.create_connection(Pump, "127.0.0.1", port)
        chunk = os.urandom(MIB)
        for _ in range(-(-total // MIB)):
            transport.write(chunk)
            if proto.paused is not None and not proto.paused.done():
                await proto.paused
        await done

    uvloop.run(main())


def loopback_into_file(directory: str, total: int, durable: bool = False) -> float:
    """Raw loopback whose server also writes what it receives into a file (`durable`: and
    fdatasyncs it, rounds back to back in a second thread): bytes/s."""
    ctx = mp.get_context("spawn")
    port_q: mp.Queue = ctx.Queue()
    out_q: mp.Queue = ctx.Queue()
    path = os.path.join(directory, f"loopback-into-file-{time.monotonic_ns()}")  # a new file each time
    srv = ctx.Process(target=_file_sink_server, args=(port_q, out_q, path, total, durable))
    srv.start()
    try:
        port = port_q.get(timeout=20)
        cli = ctx.Process(target=_bytes_pump_client, args=(port, total))
        cli.start()
        rate = out_q.get(timeout=300)
        cli.join(30)
    finally:
        srv.terminate()
        srv.join()
        if os.path.exists(path):
            os.unlink(path)
    return rate
