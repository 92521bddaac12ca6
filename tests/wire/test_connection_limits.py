"""Kafka's connection quotas on a real broker: max.connections, max.connections.per.ip and
max.connections.per.ip.overrides. Past a limit a new connection is closed as it is accepted
(the client sees EOF), the ones already open keep working, and a closed one frees its place."""

from __future__ import annotations

import socket
import struct
import time

from shoal.protocol.api import api_by_name
from shoal.protocol.frames import encode_request

_AV = api_by_name("ApiVersions")
_FRAME = b"".join(
    encode_request(_AV.key, 3, 1, "limits", _AV.request_class()(client_software_name="t", client_software_version="1"))
)


def answered(source: str, port: int) -> socket.socket | None:
    """A connection from address `source` (any 127.x is loopback) that got its ApiVersions
    answer, or None when the broker closed it."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    try:
        s.sendall(_FRAME)
        head = s.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            s.close()
            return None
        (size,) = struct.unpack(">i", head)
        s.recv(size, socket.MSG_WAITALL)
        return s
    except (ConnectionResetError, BrokenPipeError):
        s.close()
        return None


def test_per_ip_limit_and_its_override(broker_factory) -> None:
    # Connections from 127.0.0.2 (also loopback) count as another address.
    b = broker_factory("max.connections.per.ip=3", "max.connections.per.ip.overrides=127.0.0.2:5")
    b.start()
    held = [answered("127.0.0.1", b.port) for _ in range(3)]
    assert all(held)
    assert answered("127.0.0.1", b.port) is None  # the 4th from 127.0.0.1
    other = [answered("127.0.0.2", b.port) for _ in range(5)]
    assert all(other) and answered("127.0.0.2", b.port) is None  # the override: 5, then no
    held.pop().close()
    deadline = time.monotonic() + 5
    again = None
    while again is None and time.monotonic() < deadline:
        again = answered("127.0.0.1", b.port)  # a closed one freed its place
        time.sleep(0.05)
    assert again is not None
    for s in [*held, *other, again]:
        s.close()


def test_broker_wide_limit(broker_factory) -> None:
    b = broker_factory("max.connections=4")
    b.start()
    held = [answered("127.0.0.1", b.port) for _ in range(4)]
    assert all(held)
    assert answered("127.0.0.1", b.port) is None
    for s in held:
        s.close()
