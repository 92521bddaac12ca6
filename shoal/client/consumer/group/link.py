"""A connection of its own to a group's coordinator.

Why not the shared per-broker connection: a broker answers the requests of
one connection in order, and group requests can be parked for a long time —
a JoinGroup waits until every member rejoined, a SyncGroup until the leader
assigned. Sharing a socket with the consumer's long-polling Fetch requests
would delay heartbeats behind fetches and fetches behind joins. Kafka's Java
client opens a separate coordinator connection for the same reason.

The link finds the coordinator with ``ClientCore.find_coordinator`` (cached,
retried), connects lazily, and forgets both the connection and the cached
coordinator when a request fails at the transport level or an answer says the
coordinator moved (``dead()``), so the next request starts over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from shoal.client.core.client_core import ClientCore
from shoal.client.core.config import Config
from shoal.client.core.conn import BrokerConnection
from shoal.client.core.errors import KafkaClientError, KafkaConnectionError, KafkaTimeoutError
from shoal.client.core.sasl import login_from_config
from shoal.protocol.constants import CoordinatorType

__all__ = ["CoordinatorLink"]


class CoordinatorLink:
    """Requests to the coordinator of ``key`` over a dedicated connection."""

    def __init__(self, core: ClientCore, config: Config, key: str, key_type: int = CoordinatorType.GROUP) -> None:
        self._core = core
        self._cfg = config
        self.key = key
        self.key_type = key_type
        self._conn: BrokerConnection | None = None
        self._lock = asyncio.Lock()

    async def connection(self) -> BrokerConnection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed:
                return conn
            node = await self._core.find_coordinator(self.key, self.key_type)
            info = self._core.metadata.broker(node)
            if info is None:
                self._core.coordinator_dead(self.key, self.key_type)
                raise KafkaConnectionError(f"coordinator {node} of {self.key!r} is not a known broker")
            cfg = self._cfg
            try:
                conn = await BrokerConnection.connect(
                    info.host,
                    info.port,
                    node_id=node,
                    client_id=cfg["client.id"],
                    request_timeout_ms=cfg["request.timeout.ms"],
                    connect_timeout_ms=cfg["socket.connection.setup.timeout.ms"],
                    ssl=self._core.ssl_context,
                    sasl=login_from_config(cfg),
                )
            except KafkaClientError:
                self._core.coordinator_dead(self.key, self.key_type)
                raise
            self._conn = conn
            return conn

    async def request(
        self, api: str, build: Callable[[int], Any], *, hi: int | None = None, timeout_ms: float | None = None
    ) -> Any:
        """One request (body built for the negotiated version); transport failures forget the coordinator."""
        conn = await self.connection()
        version = conn.version(api, hi=hi)
        try:
            return await conn.request(api, build(version), version=version, timeout_ms=timeout_ms)
        except (KafkaConnectionError, KafkaTimeoutError):
            self.dead()
            raise

    def dead(self) -> None:
        """Forget the coordinator (it moved or its connection broke); the next request finds it again."""
        self._core.coordinator_dead(self.key, self.key_type)
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
