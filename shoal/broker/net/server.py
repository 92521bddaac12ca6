"""The listening socket(s) and the set of live connections.

Kept apart from `Broker` so that the broker's state (topics, coordinators,
purgatories) never depends on how bytes arrive: the server owns sockets,
idle-connection reaping and the graceful stop sequence (stop accepting, let
in-flight requests finish, close).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections import Counter

from shoal.broker.config.keys import parse_ip_overrides
from shoal.broker.config.settings import Listener
from shoal.broker.net.buffers import RequestMemory
from shoal.broker.net.connection import Connection
from shoal.broker.net.contract import Dispatcher
from shoal.broker.net.tls import ListenerTls, listener_tls
from shoal.broker.security.principal import KafkaPrincipal
from shoal.protocol.buffers import FramePool

log = logging.getLogger("shoal.server")
QUIET_MS = 1000  # a connection this quiet gives back the staging pages of its last burst


class Server:
    def __init__(self, broker: Dispatcher) -> None:
        self.broker = broker
        self.clock = broker.clock
        cfg = broker.config
        self.max_frame_bytes = cfg.get("socket.request.max.bytes")
        self.max_queued_requests = cfg.get("queued.max.requests")
        self.idle_ms = cfg.get("connections.max.idle.ms")
        self.connections: set[Connection] = set()
        # Kafka's connection quotas: past a limit, a new connection is closed as it is accepted.
        self.max_connections = cfg.get("max.connections")
        self.max_per_ip = cfg.get("max.connections.per.ip")
        self.per_ip_overrides = parse_ip_overrides(cfg.get("max.connections.per.ip.overrides"))
        self.per_ip: Counter[str] = Counter()
        self.per_listener: Counter[str] = Counter()
        self._listener_limits = {
            e.name: limit
            for e in getattr(cfg, "endpoints", ())
            if "max.connections" in cfg.per_listener.get(e.name, {})
            and (limit := cfg.for_listener(e.name, "max.connections")) is not None
        }
        self.refused = 0  # connections closed at accept by a limit, ever
        self.frame_pool = FramePool()  # receive buffers of large frames, shared by connections
        self.request_memory = RequestMemory(cfg.get("queued.max.request.bytes"))
        self._servers: list[asyncio.base_events.Server] = []
        # Bound and listening, not yet accepting (bind -> serve), with the listener each serves.
        self._held: list[tuple[Listener, socket.socket]] = []
        self._reaper: asyncio.Task | None = None
        self.bound: list[tuple[str, int]] = []  # every bound address, in the order of `listeners`
        self.bound_by_listener: dict[str, list[tuple[str, int]]] = {}
        # One TLS context per SSL/SASL_SSL listener, built now: a bad key or file stops the start.
        self.tls: dict[str, ListenerTls] = listener_tls(cfg) if getattr(cfg, "endpoints", None) else {}
        listener = getattr(cfg, "listener", None)
        self.listener_name = listener.name if listener is not None else "PLAINTEXT"  # the first one

    async def bind(self, listener: Listener) -> None:
        """Take the listener's address now: bound and listening, accepting only from `serve`.

        The broker does this first thing at start, before its operations listener asks
        for a free port and before its logs recover. An in-process restart binds the port
        its previous run had been given as a free one, and a port-0 bind in between (its
        own operations listener's, once) could take it. A listening socket cannot be
        taken, even by a SO_REUSEADDR bind; a socket only bound can. Connections that
        arrive before `serve` wait in the backlog, as with Kafka's acceptor.
        """
        loop = asyncio.get_running_loop()
        host, port = listener.host, listener.port
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        taken = 0
        for family, kind, proto, _, address in dict.fromkeys(infos):  # (getaddrinfo may repeat an entry)
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this host lacks (IPv6 in some containers): skipped, as asyncio does
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(1024)
                sock.setblocking(False)
            except OSError:
                sock.close()
                self._close_held()
                raise
            self._held.append((listener, sock))
            self.bound.append(sock.getsockname()[:2])
            self.bound_by_listener.setdefault(listener.name, []).append(sock.getsockname()[:2])
            taken += 1
        if not taken:
            self._close_held()
            raise OSError(f"no address to listen on for {listener.name} {host or '*'}:{port}")

    def _close_held(self) -> None:
        for _, sock in self._held:
            sock.close()
        self._held.clear()

    async def serve(self) -> None:
        """Start accepting on what `bind` took (logs recovered, the broker ready for requests)."""
        loop = asyncio.get_running_loop()
        held, self._held = self._held, []
        for listener, sock in held:
            factory = functools.partial(Connection, self, listener)
            tls = self.tls.get(listener.name)
            if tls is None:
                self._servers.append(await loop.create_server(factory, sock=sock, backlog=1024))
                continue
            # A handshake counts as idle time: a client that stops halfway is dropped after
            # connections.max.idle.ms, as an idle connection is (the reaper sees connections
            # only once their handshake is done).
            self._servers.append(
                await loop.create_server(
                    factory, sock=sock, backlog=1024, ssl=tls.context, ssl_handshake_timeout=self.idle_ms / 1000
                )
            )
        log.info(
            "listening on %s",
            ", ".join(f"{name} {h}:{p}" for name, addrs in self.bound_by_listener.items() for h, p in addrs),
        )
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_idle())

    def tls_principal(self, listener: str, transport: asyncio.BaseTransport) -> KafkaPrincipal | None:
        """Who the client certificate says the peer is (ANONYMOUS without one); None: refused."""
        tls = self.tls.get(listener)
        return tls.principal(transport) if tls is not None else None

    def memory_freed(self, waiters: list[Connection]) -> None:
        """Connections that waited for request memory try again, oldest first, on the next turn."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # driven by hand (tests)
            loop = None
        for conn in waiters:
            if conn.closed:
                continue
            if loop is None:
                conn.retry_memory()
            else:
                loop.call_soon(conn.retry_memory)

    def admit(self, ip: str, listener: str | None = None) -> str | None:
        """Count a new connection from `ip` on `listener`; the limit it breaks (it is then not
        counted), or None. max.connections holds for the broker and, through its
        listener.name.<l>.max.connections override, for one listener."""
        own = self._listener_limits.get(listener) if listener is not None else None
        if len(self.connections) >= self.max_connections:
            reason = f"max.connections ({self.max_connections})"
        elif own is not None and self.per_listener[listener] >= own:
            reason = f"listener.name.{listener.lower()}.max.connections ({own})"  # type: ignore[union-attr]
        elif self.per_ip[ip] >= self.per_ip_overrides.get(ip, self.max_per_ip):
            reason = f"max.connections.per.ip for {ip} ({self.per_ip_overrides.get(ip, self.max_per_ip)})"
        else:
            self.per_ip[ip] += 1
            if listener is not None:
                self.per_listener[listener] += 1
            return None
        self.refused += 1
        return reason

    def release(self, ip: str, listener: str | None = None) -> None:
        if listener is not None:
            self.per_listener[listener] -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]

    async def _reap_idle(self) -> None:
        """Close connections idle past connections.max.idle.ms; and once a connection has been
        quiet for QUIET_MS, give back the receive-buffer pages its last burst touched."""
        interval = max(0.05, min(self.idle_ms / 1000 / 4, 30.0, QUIET_MS / 1000))
        while True:
            await asyncio.sleep(interval)
            now = self.clock.monotonic_ms()
            for conn in list(self.connections):
                quiet = now - conn.last_active
                if conn.in_flight == 0 and quiet > self.idle_ms:
                    log.info("closing idle connection from %s", conn.peer)
                    conn.close()
                elif quiet > QUIET_MS:
                    conn.release_buffers()

    def stop_accepting(self) -> None:
        for srv in self._servers:
            srv.close()

    async def drain(self, timeout: float) -> None:
        """Stop reading requests, then wait (bounded) until no connection has one in flight."""
        for conn in list(self.connections):
            conn.stop_reading()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(c.in_flight for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        self._close_held()
        if self._reaper is not None:
            self._reaper.cancel()
        for conn in list(self.connections):
            conn.close()
        for srv in self._servers:
            srv.close()
            await srv.wait_closed()
