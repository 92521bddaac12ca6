"""What the network layer and the rest of the broker promise each other.

Why a module of its own: handlers need to say "send nothing" and to know who
asked, and the connection needs something to hand requests to. If each
imported the other's module, the broker, its handlers and its connections
would form one import cycle. Both sides import this contract instead: the
connection and the server see the broker only as a ``Dispatcher`` and the
server only as a ``ConnectionOwner``; handlers see the connection only as the
``Requester`` in their ``RequestContext``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["NO_RESPONSE", "ConnectionOwner", "Dispatcher", "RequestContext", "Requester"]

NO_RESPONSE = object()  # a handler result meaning "send nothing" (acks=0 produce)


def _anonymous() -> Any:
    from shoal.broker.security.principal import ANONYMOUS

    return ANONYMOUS


class Requester(Protocol):
    """The connection a request came in on, as handlers see it."""

    peer: str

    @property
    def closed(self) -> bool: ...

    def abort(self, reason: str) -> None: ...


@dataclass(slots=True)
class RequestContext:
    """What a handler knows about the request besides its body."""

    connection: Any  # a Requester (typed loosely: handlers also use it as a hashable identity)
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header: Any

    @property
    def peer(self) -> str:
        return self.connection.peer

    @property
    def listener(self) -> str:
        """The name of the listener the request came in on."""
        return getattr(self.connection, "listener", "PLAINTEXT")

    @property
    def principal(self) -> Any:
        """Who asked: a security.principal.KafkaPrincipal (User:ANONYMOUS until proved otherwise)."""
        return getattr(self.connection, "principal", None) or _anonymous()

    @property
    def client_host(self) -> str:
        """The peer's address without its port (what ACLs' host field matches)."""
        peer = self.connection.peer
        host = peer.rpartition(":")[0] if ":" in peer else peer
        return host.strip("[]")


class Dispatcher(Protocol):
    """The broker, as the network layer sees it."""

    clock: Any
    config: Any

    def dispatch(self, ctx: RequestContext, body: Any, slot: Any, conn: Any) -> None: ...

    def connection_closed(self, conn: Any) -> None: ...

    def api_versions_error_body(self) -> Any: ...


class ConnectionOwner(Protocol):
    """The server, as one of its connections sees it."""

    broker: Dispatcher
    clock: Any
    connections: set[Any]
    frame_pool: Any
    request_memory: Any
    max_frame_bytes: int
    max_queued_requests: int

    def admit(self, ip: str, listener: str | None = None) -> Any: ...

    def release(self, ip: str, listener: str | None = None) -> None: ...

    def memory_freed(self, waiters: list[Any]) -> None: ...

    def tls_principal(self, listener: str, transport: Any) -> Any: ...
