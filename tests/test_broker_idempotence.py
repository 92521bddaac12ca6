"""An idempotent librdkafka producer whose produce responses get lost.

A small TCP proxy sits between the producer and the broker. For the first few
Produce requests it forwards the request to the broker (which appends it) and
then cuts the client connection instead of relaying the response, so the
producer must retry batches the broker already stored. The log must hold
every record exactly once, in order.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

from confluent_kafka import Producer

from tests.test_broker_clients import QUIET, create_topic
from tests.test_broker_durability import consume_all


class DroppingProxy:
    """Forwards 127.0.0.1:<port> to the broker; swallows the first N produce responses."""

    def __init__(self, broker_port: int, drops: int, listen_port: int) -> None:
        self.broker_port = broker_port
        self.drops = drops
        self.dropped = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", listen_port))
        self.port = self.listener.getsockname()[1]
        self.threads: list[threading.Thread] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.broker_port))
            t = threading.Thread(target=self._pump, args=(client, upstream), daemon=True)
            t.start()
            self.threads.append(t)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        pending_produce: set[int] = set()
        try:
            while True:
                frame = _read_frame(client)
                api_key, _, corr = struct.unpack(">hhi", frame[4:12])
                upstream.sendall(frame)
                if api_key == 0:
                    pending_produce.add(corr)
                resp = _read_frame(upstream)
                (rcorr,) = struct.unpack(">i", resp[4:8])
                if rcorr in pending_produce:
                    pending_produce.discard(rcorr)
                    with self.lock:
                        drop = self.dropped < self.drops
                        if drop:
                            self.dropped += 1
                    if drop:
                        return  # the broker appended; the producer never hears of it
                client.sendall(resp)
        except (OSError, ConnectionError):
            return
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self.closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() thread
        except OSError:
            pass
        self.listener.close()


def _read_frame(s: socket.socket) -> bytes:
    head = _exact(s, 4)
    return head + _exact(s, struct.unpack(">i", head)[0])


def _exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def test_retried_batches_are_not_duplicated(broker_factory, topic_name) -> None:
    # Clients must send every request through the proxy: advertise its port.
    proxy_port = _free_port()
    b = broker_factory(f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}")
    b.start()
    proxy = DroppingProxy(b.port, drops=3, listen_port=proxy_port)
    create_topic(f"127.0.0.1:{proxy_port}", topic_name, 1)
    try:
        p = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{proxy_port}",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "reconnect.backoff.ms": 10,
                **QUIET,
            }
        )
        errors = []
        for i in range(300):
            p.produce(topic_name, value=b"m%04d" % i, partition=0, on_delivery=lambda e, m: e and errors.append(e))
            if i % 20 == 0:
                p.poll(0.005)
                time.sleep(0.002)
        assert p.flush(60) == 0
        assert not errors
        assert proxy.dropped == 3
        # (all drops used up: the proxy now passes everything through)
        got = consume_all(f"127.0.0.1:{proxy_port}", topic_name, 1)[0]
    finally:
        proxy.close()
    assert [o for o, _ in got] == list(range(300))
    assert [v for _, v in got] == [b"m%04d" % i for i in range(300)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
