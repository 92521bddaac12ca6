"""Helpers shared by several test files (clients)."""

from __future__ import annotations

import socket
import struct
import threading
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 3


def _exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _read_frame(s: socket.socket) -> bytes:
    head = _exact(s, 4)
    return head + _exact(s, struct.unpack(">i", head)[0])


QUIET = {"log_level": 0}


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(15)


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> dict[int, list]:
    """Every record of each partition: (offset, value), read up to the end offsets the broker
    gives now (a consumer sees nothing past them). Reading until two idle seconds passed cost
    two seconds a call; a log that cannot be read to its end within `timeout` returns short."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "d", "enable.auto.commit": False, **QUIET})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout)[1] for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout

    def behind() -> bool:  # positions pass control records too, which poll() never returns
        at = c.position([TopicPartition(topic, p) for p in range(partitions)])
        return any(max(tp.offset, 0) < ends[tp.partition] for tp in at)

    while behind() and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        got[m.partition()].append((m.offset(), m.value()))
    c.close()
    return got


def _produce_topic(topic: str, partition: int, batch: bytes):
    from shoal.protocol.api import api_by_name

    P = api_by_name("Produce").request_class()
    return P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
