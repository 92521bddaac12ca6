#!/usr/bin/env python3
"""Container healthcheck: the broker is healthy when it answers ApiVersions.

Why ApiVersions: it is the first request every Kafka client sends, needs no
topic, group or authentication, and is answered by the same request path as
everything else, so a broker that answers it is accepting clients (an open
port alone is not enough: the socket is bound before the logs finish loading).

    shoal-healthcheck [HOST:PORT] [--timeout SECONDS]

The address defaults to ``$SHOAL_HEALTHCHECK_ADDRESS`` or 127.0.0.1:9092.
Exit codes: 0 healthy, 1 unhealthy (refused, timed out, hung up, or an
error code in the answer), 2 bad arguments. Uses the broker's own codec,
so nothing is encoded by hand.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys

from shoal.protocol.api import api_by_name
from shoal.protocol.frames import decode_response, encode_request

_VERSION = 3  # flexible ApiVersions, understood by Kafka 2.4+ and Shoal


def check(host: str, port: int, timeout: float) -> str | None:
    """None when the broker answered ApiVersions without error, else why not."""
    a = api_by_name("ApiVersions")
    body = a.request_class()(client_software_name="shoal-healthcheck", client_software_version="1")
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"".join(encode_request(a.key, _VERSION, 1, "shoal-healthcheck", body)))
            size = struct.unpack(">i", _exact(sock, 4))[0]
            if not 0 < size < 1 << 24:
                return f"answer of {size} bytes"
            correlation, resp = decode_response(memoryview(_exact(sock, size)), a.key, _VERSION)
    except (OSError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a frame that does not decode is unhealthy, whatever the codec raised
        return f"undecodable answer: {e}"
    if correlation != 1:
        return f"correlation id {correlation}"
    if resp.error_code:
        return f"error code {resp.error_code}"
    return None


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return bytes(buf)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="shoal-healthcheck", description=__doc__.splitlines()[0])
    p.add_argument("address", nargs="?", default=os.environ.get("SHOAL_HEALTHCHECK_ADDRESS", "127.0.0.1:9092"))
    p.add_argument("--timeout", type=float, default=5.0, help="seconds for connect and answer (default 5)")
    args = p.parse_args(argv)
    host, sep, port = args.address.rpartition(":")
    if not sep or not port.isdigit():
        print(f"shoal-healthcheck: {args.address!r} is not host:port", file=sys.stderr)
        return 2
    problem = check(host.strip("[]") or "127.0.0.1", int(port), args.timeout)
    if problem is not None:
        print(f"shoal-healthcheck: {args.address} unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
