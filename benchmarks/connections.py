"""Broker memory per idle connection, next to a bare asyncio server holding the same sockets.

Run: python benchmarks/connections.py [--connections 1000]

Each connection sends one ApiVersions request, reads its answer and then idles
(what a client pool looks like between bursts). Printed: the broker process's
RSS growth per connection, once the connections have been quiet for a second
(the broker hands back the staging pages of a quiet connection), next to a
reference measured in the same run: a minimal uvloop server process that
accepts the same number of sockets, answers each first frame with a fixed
reply and holds the connection (its per-connection cost is the floor set by
the kernel, uvloop's transport and one Python protocol object). The goal is at
most 16 KiB per idle connection; before receive buffers were taken lazily it
was ~258 KiB (each connection allocated a 256 KiB buffer up front).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoal.protocol.api import api_by_name  # noqa: E402
from shoal.protocol.frames import encode_request  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402

_REFERENCE = textwrap.dedent(
    """
    import asyncio, struct, sys, uvloop

    REPLY = struct.pack(">i", 4) + b"\\0\\0\\0\\1"

    class Holder(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.answered = False

        def data_received(self, data):
            if not self.answered:
                self.answered = True
                self.transport.write(REPLY)

    async def main():
        server = await asyncio.get_running_loop().create_server(Holder, "127.0.0.1", 0, backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    uvloop.run(main())
    """
)


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def frame() -> bytes:
    a = api_by_name("ApiVersions")
    body = a.request_class()(client_software_name="idle", client_software_version="1")
    return b"".join(encode_request(a.key, 3, 1, "idle", body))


def per_connection(pid: int, port: int, n: int) -> float:
    """RSS growth of ``pid`` per connection, with ``n`` connections answered once and then idle."""
    request = frame()
    time.sleep(0.5)
    before = rss(pid)
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(n)]
    try:
        for s in socks:
            s.sendall(request)
        for s in socks:
            (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
            s.recv(size, socket.MSG_WAITALL)
        time.sleep(1.5)  # quiet for a second: staging pages go back
        return (rss(pid) - before) / n
    finally:
        for s in socks:
            s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=1000)
    args = ap.parse_args()
    n = args.connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 2 * n + 256)), hard))

    ref = subprocess.Popen([sys.executable, "-c", _REFERENCE], stdout=subprocess.PIPE, text=True)
    try:
        assert ref.stdout is not None
        ref_port = int(ref.stdout.readline())
        reference = per_connection(ref.pid, ref_port, n)
    finally:
        ref.terminate()
        ref.wait(10)

    with tempfile.TemporaryDirectory(prefix="shoal-bench-") as d:
        b = BrokerProcess(Path(d) / "data").start()
        try:
            ours = per_connection(b.proc.pid, b.port, n)
        finally:
            b.stop()

    print(f"RSS per idle connection, {n} connections (each answered once, then quiet 1.5 s)")
    print(f"  bare uvloop server (reference)  {reference / 1024:7.1f} KiB")
    print(f"  shoal broker                    {ours / 1024:7.1f} KiB   {ours / max(reference, 1):5.1f}x the reference")
    print("  goal: <= 16 KiB (was ~258 KiB with a 256 KiB buffer per connection)")
    print(f"(cpu count {os.cpu_count()})")


if __name__ == "__main__":
    main()
