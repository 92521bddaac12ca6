"""The listening socket(s) and the set of live connections.

Kept apart from `Broker` so that the broker's state (topics, coordinators,
purgatories) never depends on how bytes arrive: the server owns sockets,
idle-connection reaping and the graceful stop sequence (stop accepting, let
in-flight requests finish, close).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from broker.buffers import FramePool
from broker.connection import Connection

if TYPE_CHECKING:
    from broker.broker import Broker

log = logging.getLogger("shoal.server")
QUIET_MS = 1000  # a connection this quiet gives back the staging pages of its last burst


class Server:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.clock = broker.clock
        cfg = broker.config
        self.max_frame_bytes = cfg.get("socket.request.max.bytes")
        self.max_queued_requests = cfg.get("queued.max.requests")
        self.idle_ms = cfg.get("connections.max.idle.ms")
        self.connections: set[Connection] = set()
        self.frame_pool = FramePool()  # receive buffers of large frames, shared by connections
        self._servers: list[asyncio.base_events.Server] = []
        self._reaper: asyncio.Task | None = None
        self.bound: list[tuple[str, int]] = []

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(lambda: Connection(self), host or None, port, reuse_address=True, backlog=1024)
        self._servers.append(srv)
        for sock in srv.sockets:
            self.bound.append(sock.getsockname()[:2])
        log.info("listening on %s", ", ".join(f"{h}:{p}" for h, p in self.bound))
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_idle())

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
        if self._reaper is not None:
            self._reaper.cancel()
        for conn in list(self.connections):
            conn.close()
        for srv in self._servers:
            srv.close()
            await srv.wait_closed()
