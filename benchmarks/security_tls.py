"""What TLS costs: produce and fetch MB/s and new connections per second, SSL next to PLAINTEXT.

One broker process with a PLAINTEXT and an SSL listener, so both sides of each ratio run
against the same broker in the same run. Throughput uses produce_fetch.py's librdkafka
producer and consumer (16 KiB records, acks=1, one partition) with the TLS settings added;
connections per second are a loop of connect + handshake + ApiVersions + close from one
Python client, which pays its own handshake half too (so it is the rate one client sees,
not the broker's ceiling). Certificates come from trustme. Run through
``python benchmarks/produce_fetch.py --security [--quick]``.
"""

from __future__ import annotations

import re
import socket
import ssl
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from produce_fetch import MIB, QUIET, create_topic, fetch_confluent, produce_confluent  # noqa: E402

from tests.support.brokers import BrokerProcess  # noqa: E402
from tests.support.tls import make_tls_files  # noqa: E402

_LISTENING = re.compile(r"shoal broker listening on (\S+):(\d+)")


def start_broker(tmp: Path) -> tuple[BrokerProcess, int, int, object]:
    """A broker with PLAINTEXT and SSL listeners: (process, plaintext port, ssl port, tls files)."""
    files = make_tls_files(tmp / "certs")
    b = BrokerProcess(
        tmp / "data",
        [
            "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            f"ssl.keystore.location={files.broker}",
            "log.segment.bytes=536870912",
            "shoal.http.listeners=",
        ],
    )
    b.start()
    ports = [int(m.group(2)) for m in _LISTENING.finditer(b.log_text())]
    return b, ports[0], ports[1], files


def tls_client_settings(files) -> dict:
    return {"security.protocol": "SSL", "ssl.ca.location": str(files.ca)}


def produce_fetch_mbps(bootstrap: str, topic: str, total: int, extra: dict | None) -> tuple[float, float]:
    """(produce MB/s, fetch MB/s) of 16 KiB records through librdkafka."""
    create_topic(bootstrap, topic) if extra is None else _create_tls(bootstrap, topic, extra)
    size = 16 * 1024
    elapsed, n = produce_confluent(bootstrap, topic, size, total, "1", extra)
    produced = n * size / elapsed / MIB
    fetched = fetch_confluent(bootstrap, topic, n * size, extra) / MIB
    return produced, fetched


def _create_tls(bootstrap: str, topic: str, extra: dict) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **extra, **QUIET})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)


def _api_versions(sock: socket.socket) -> None:
    body = struct.pack(">hhih", 18, 0, 1, -1)
    sock.sendall(struct.pack(">i", len(body)) + body)
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    left = struct.unpack(">i", head)[0]
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ConnectionError("closed")
        left -= len(chunk)


def connections_per_second(port: int, ctx: ssl.SSLContext | None, seconds: float) -> float:
    """New connections per second: connect (+ TLS handshake) + ApiVersions + close, one at a time."""
    n = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        raw = socket.create_connection(("127.0.0.1", port))
        sock = ctx.wrap_socket(raw, server_hostname="localhost") if ctx is not None else raw
        try:
            _api_versions(sock)
        finally:
            sock.close()
        n += 1
    return n / (time.perf_counter() - start)


def report(quick: bool) -> None:
    total = 64 * MIB if quick else 256 * MIB
    seconds = 2.0 if quick else 5.0
    with tempfile.TemporaryDirectory(prefix="shoal-tls-bench-") as tmp:
        b, plain_port, tls_port, files = start_broker(Path(tmp))
        try:
            tls = tls_client_settings(files)
            plain_p, plain_f = produce_fetch_mbps(f"127.0.0.1:{plain_port}", "bench-plain", total, None)
            tls_p, tls_f = produce_fetch_mbps(f"127.0.0.1:{tls_port}", "bench-tls", total, tls)
            ctx = ssl.create_default_context(cafile=str(files.ca))
            plain_c = connections_per_second(plain_port, None, seconds)
            tls_c = connections_per_second(tls_port, ctx, seconds)
        finally:
            b.stop()
    print(f"{'':34} {'PLAINTEXT':>10} {'SSL':>10} {'SSL/PLAIN':>10}")
    print(f"{'produce MB/s (16 KiB, acks=1)':34} {plain_p:10.1f} {tls_p:10.1f} {tls_p / plain_p:10.0%}")
    print(f"{'fetch MB/s (librdkafka consumer)':34} {plain_f:10.1f} {tls_f:10.1f} {tls_f / plain_f:10.0%}")
    print(f"{'new connections/s (+ApiVersions)':34} {plain_c:10.0f} {tls_c:10.0f} {tls_c / plain_c:10.0%}")


if __name__ == "__main__":
    report("--quick" in sys.argv)
