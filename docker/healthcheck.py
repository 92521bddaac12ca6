#!/usr/bin/env python3
"""Container healthcheck: the broker is healthy when it is ready and answers ApiVersions.

Two questions, each skipped when its address is empty:

- readiness: ``GET /health/ready`` on the operations HTTP listener answers 200,
  which the broker says only after log recovery and coordinator loading and
  while its log directory is online (a Kafka port answers before all that);
- ApiVersions on the Kafka listener: the first request every Kafka client
  sends, needing no topic, group or authentication, answered by the same
  request path as everything else, so the broker is accepting clients.

    shoal-healthcheck [HOST:PORT] [--http HOST:PORT] [--timeout SECONDS]
                      [--tls-ca FILE [--tls-cert FILE] [--tls-name NAME]]

A TLS listener (SSL or SASL_SSL) is asked over TLS when a CA file is given (``--tls-ca``
or ``$SHOAL_HEALTHCHECK_TLS_CA``): the broker's certificate must chain to it and name
``--tls-name`` (``$SHOAL_HEALTHCHECK_TLS_NAME``, default the address's host). ApiVersions
is the one request a SASL listener answers before authentication (clients ask it first to
learn the SaslHandshake version), so the healthcheck needs no password. A listener with
ssl.client.auth=required also needs a client certificate: ``--tls-cert`` names a PEM file
holding its key and chain (``$SHOAL_HEALTHCHECK_TLS_CERT``).

The Kafka address defaults to ``$SHOAL_HEALTHCHECK_ADDRESS`` or 127.0.0.1:9092;
the HTTP address to ``$SHOAL_HEALTHCHECK_HTTP_ADDRESS`` or none (the image
sets 127.0.0.1:9644, the listener's default). Exit codes: 0 healthy, 1
unhealthy (refused, timed out, hung up, not ready, or an error code in the
answer), 2 bad arguments. Uses the broker's own codec, so nothing is encoded
by hand.
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import ssl
import struct
import sys
import urllib.error
import urllib.request

from shoal.protocol.api import api_by_name
from shoal.protocol.frames import decode_response, encode_request

_VERSION = 3  # flexible ApiVersions, understood by Kafka 2.4+ and Shoal


def tls_context(ca: str, cert: str = "") -> ssl.SSLContext:
    """Verifies the broker's chain and name against ``ca``; presents ``cert`` (key and chain) if given."""
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert)
    return ctx


def check(host: str, port: int, timeout: float, tls: ssl.SSLContext | None = None, name: str = "") -> str | None:
    """None when the broker answered ApiVersions without error, else why not."""
    a = api_by_name("ApiVersions")
    body = a.request_class()(client_software_name="shoal-healthcheck", client_software_version="1")
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            sock = raw if tls is None else tls.wrap_socket(raw, server_hostname=name or host)
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


def check_ready(host: str, port: int, timeout: float) -> str | None:
    """None when /health/ready answered 200, else why not (its body says what the broker waits for)."""
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/health/ready"
    try:
        # No proxy: the listener is the container's own (an http_proxy variable must not reroute it).
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=timeout) as r:
            if r.status == 200:
                return None
            return f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        return f"not ready (HTTP {e.code}): {e.read().decode(errors='replace').strip()}"
    except (OSError, ValueError) as e:
        return f"{type(e).__name__}: {e}"


def _address(text: str) -> tuple[str, int] | None:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


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
    p.add_argument(
        "--http",
        default=os.environ.get("SHOAL_HEALTHCHECK_HTTP_ADDRESS", ""),
        help="host:port of the operations listener whose /health/ready must answer 200 (empty: not asked)",
    )
    p.add_argument("--timeout", type=float, default=5.0, help="seconds for connect and answer (default 5)")
    p.add_argument(
        "--tls-ca",
        default=os.environ.get("SHOAL_HEALTHCHECK_TLS_CA", ""),
        metavar="FILE",
        help="ask the Kafka listener over TLS, trusting the CA certificates in FILE (PEM)",
    )
    p.add_argument(
        "--tls-cert",
        default=os.environ.get("SHOAL_HEALTHCHECK_TLS_CERT", ""),
        metavar="FILE",
        help="a client key and certificate chain (PEM), for ssl.client.auth=required",
    )
    p.add_argument(
        "--tls-name",
        default=os.environ.get("SHOAL_HEALTHCHECK_TLS_NAME", ""),
        metavar="NAME",
        help="the name the broker's certificate must hold (default: the address's host)",
    )
    args = p.parse_args(argv)
    tls = None
    if args.tls_ca:
        try:
            tls = tls_context(args.tls_ca, args.tls_cert)
        except (OSError, ssl.SSLError) as e:
            print(f"shoal-healthcheck: cannot use the TLS files: {e}", file=sys.stderr)
            return 2
    checks = []
    if args.http:
        checks.append((args.http, check_ready))
    if args.address:
        checks.append((args.address, functools.partial(check, tls=tls, name=args.tls_name)))
    if not checks:
        print("shoal-healthcheck: no address to ask", file=sys.stderr)
        return 2
    for text, _ask in checks:
        if _address(text) is None:
            print(f"shoal-healthcheck: {text!r} is not host:port", file=sys.stderr)
            return 2
    for text, ask in checks:
        host, port = _address(text)  # type: ignore[misc]
        problem = ask(host, port, args.timeout)
        if problem is not None:
            print(f"shoal-healthcheck: {text} unhealthy: {problem}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
