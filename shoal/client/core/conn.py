"""One TCP connection to one broker: pipelined requests, responses by correlation id.

Why it looks like this:

* **Pipelining.** Kafka answers requests on a connection in the order they
  were sent, so a connection keeps a FIFO of outstanding requests and many
  may be in flight (a producer's five produce requests, a consumer's fetch
  next to its heartbeat's coordinator traffic on another connection). Each
  request gets an ``asyncio.Future``; the response is decoded in the read
  callback and resolves it.
* **Frames touch memory once.** A ``BufferedProtocol``: small responses share
  a staging buffer; a large one (a fetch of megabytes) is received straight
  into a buffer of its exact size, and its record sets come back as
  memoryviews into it. Sizes and frame bounds are `protocol.frames.Framer`'s,
  the framer the broker uses too; this module only chooses the buffers.
* **Versions.** The first request on every connection is ApiVersions; the
  connection then answers ``version(api)`` with the highest version both
  sides speak. An ApiVersions version the broker does not know is answered
  with a v0 body and UNSUPPORTED_VERSION; we retry with the broker's highest.
* **Failure.** A request that outlives its timeout fails with
  ``KafkaTimeoutError`` and, as in Kafka's NetworkClient, the connection is
  closed (its other requests fail with ``KafkaConnectionError``, which is
  retriable): a response that arrives late must never be matched to a later
  request. A lost connection fails everything outstanding at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from ssl import SSLContext
from typing import Any

from shoal.client.core.errors import KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError
from shoal.client.core.sasl import SaslLogin, authenticate
from shoal.protocol.api import Api, api, api_by_name
from shoal.protocol.buffers import FramePool
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.frames import PREFIX, Framer, decode_response, encode_request, peek_correlation_id

__all__ = ["SOFTWARE_NAME", "SOFTWARE_VERSION", "BrokerConnection", "resolve_api"]

log = logging.getLogger("shoal.client.core.conn")

SOFTWARE_NAME = "shoal-python"
SOFTWARE_VERSION = "0.1.0"

_STAGING = 64 * 1024
# Large answers are received into pooled buffers (``protocol.buffers``): up to this many bytes of
# them stay with the connection for the next answer, so a consumer's fetches reuse their memory
# instead of faulting in fresh pages for every answer. An answer is at most about fetch.max.bytes
# (50 MiB by default); a consumer that raises it (the Spark source's driver acquires whole
# micro-batches in one answer) gets its larger answers pooled too, up to this bound.
_POOL_BYTES = 256 * 1024 * 1024
_MAX_RESPONSE = 1 << 30  # a response larger than 1 GiB is a broken stream
_API_VERSIONS = api_by_name("ApiVersions").key

Body = Any
BodyBuilder = Callable[[int], Any]


def resolve_api(which: str | int) -> Api:
    a = api_by_name(which) if isinstance(which, str) else api(which)
    if a is None:
        raise UnsupportedVersionError(f"unknown API {which}")
    return a


class _Pending:
    __slots__ = ("api_key", "future", "timer", "version")

    def __init__(self, api_key: int, version: int, future: asyncio.Future, timer: asyncio.TimerHandle | None) -> None:
        self.api_key = api_key
        self.version = version
        self.future = future
        self.timer = timer


class BrokerConnection(asyncio.BufferedProtocol):
    """A connected, version-negotiated link to one broker (``connect()`` makes one)."""

    def __init__(self, host: str, port: int, node_id: int, client_id: str | None, request_timeout_ms: int) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._correlation = 0
        self._pending: deque[tuple[int, _Pending]] = deque()
        self._staging = bytearray(_STAGING)
        self._staged = 0
        # A response is at least its correlation id; sizes and frame bounds are the framer's.
        self._framer = Framer(_MAX_RESPONSE, min_size=4, limit="the client's response limit")
        self._big: Any = None  # a response too big for staging, received straight into a buffer of the pool
        self._pool = FramePool(max_bytes=_POOL_BYTES, max_frame=_POOL_BYTES)
        self._closed = False
        self._close_reason: BaseException | None = None
        self._write_ready: asyncio.Future | None = None
        self._closed_future: asyncio.Future = self._loop.create_future()
        self.on_close: list[Callable[[BrokerConnection], None]] = []

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}{' closed' if self._closed else ''}>"

    # -- opening -----------------------------------------------------------------
    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str | None = SOFTWARE_NAME,
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        ssl: SSLContext | None = None,
        sasl: SaslLogin | None = None,
    ) -> BrokerConnection:
        """Open a connection, negotiate API versions and, given a ``sasl`` login, log in (core/sasl.py);
        raises KafkaConnectionError (SaslAuthenticationError for a refused login).

        With ``ssl`` (``core.tls.client_ssl_context``) the TLS handshake is part of the
        connect and of its timeout; the host name checked against the certificate is ``host``."""
        loop = asyncio.get_running_loop()
        conn = cls(host, port, node_id, client_id, request_timeout_ms)
        tls: dict[str, Any] = {} if ssl is None else {"ssl": ssl, "server_hostname": host}
        try:
            async with asyncio.timeout(connect_timeout_ms / 1000):
                await loop.create_connection(lambda: conn, host, port, **tls)
        except (OSError, TimeoutError) as e:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {e or type(e).__name__}") from None
        try:
            await conn._negotiate()
            if sasl is not None:
                await authenticate(conn, sasl)
        except BaseException:
            conn.close()
            raise
        return conn

    async def _negotiate(self) -> None:
        a = resolve_api(_API_VERSIONS)
        version = a.max_version
        for _ in range(2):
            body = a.request_class()(client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION)
            if version < 3:
                body = a.request_class()()
            resp = await self.request(_API_VERSIONS, body, version=version)
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
                theirs = next((k.max_version for k in resp.api_keys if k.api_key == _API_VERSIONS), 0)
                version = min(theirs, a.max_version)
                continue
            if resp.error_code:
                raise KafkaConnectionError(f"ApiVersions to {self.host}:{self.port} failed with {resp.error_code}")
            self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            return
        raise UnsupportedVersionError(f"{self.host}:{self.port} refused every ApiVersions version")

    # -- versions ----------------------------------------------------------------
    def version(self, which: str | int, lo: int | None = None, hi: int | None = None) -> int:
        """Highest version of an API both sides speak, within [lo, hi] if given."""
        a = resolve_api(which)
        theirs = self.api_versions.get(a.key)
        if theirs is None:
            raise UnsupportedVersionError(f"broker {self.node_id} does not serve {a.name}")
        # Released versions only, as Java's latestVersion(false): never a version the spec marks unstable.
        top = min(theirs[1], a.stable_max_version, hi if hi is not None else a.stable_max_version)
        bottom = max(theirs[0], a.min_version, lo if lo is not None else a.min_version)
        if top < bottom:
            raise UnsupportedVersionError(
                f"{a.name}: broker {self.node_id} speaks {theirs[0]}-{theirs[1]}, we need {bottom}-{top}"
            )
        return top

    def supports(self, which: str | int, lo: int = 0) -> bool:
        a = resolve_api(which)
        theirs = self.api_versions.get(a.key)
        return theirs is not None and theirs[1] >= lo

    # -- requests ----------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def write_paused(self) -> bool:
        """True while the transport's write buffer is above its high-water mark (see ``drain``)."""
        return self._write_ready is not None

    def send(
        self,
        which: str | int,
        body: Body | BodyBuilder,
        *,
        version: int | None = None,
        timeout_ms: int | None = None,
        expect_response: bool = True,
    ) -> asyncio.Future:
        """Write one request now; the future resolves to the decoded response body.

        ``body`` may be a callable taking the negotiated version. With
        ``expect_response=False`` (acks=0 produce) the future resolves to None
        once the bytes are handed to the transport.
        """
        fut = self._loop.create_future()
        if self._closed:
            fut.set_exception(self._closed_error())
            return fut
        a = resolve_api(which)
        if version is None:
            version = self.version(a.key)
        if callable(body):
            body = body(version)
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        corr = self._correlation
        try:
            frame = encode_request(a.key, version, corr, self.client_id, body)
        except ProtocolError as e:
            fut.set_exception(e)
            return fut
        if not expect_response:
            self._transport.writelines(frame)  # type: ignore[union-attr]
            fut.set_result(None)
            return fut
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        timer = self._loop.call_later(timeout / 1000, self._timed_out, corr, a.name, timeout)
        self._pending.append((corr, _Pending(a.key, version, fut, timer)))
        self._transport.writelines(frame)  # type: ignore[union-attr]
        return fut

    async def request(
        self,
        which: str | int,
        body: Body | BodyBuilder,
        *,
        version: int | None = None,
        timeout_ms: int | None = None,
        expect_response: bool = True,
    ) -> Any:
        """Send one request and wait for its response (see ``send``)."""
        if self._write_ready is not None:
            await asyncio.shield(self._write_ready)
        return await self.send(which, body, version=version, timeout_ms=timeout_ms, expect_response=expect_response)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if self._write_ready is not None:
            await asyncio.shield(self._write_ready)

    def _timed_out(self, corr: int, name: str, timeout: int) -> None:
        for c, p in self._pending:
            if c == corr:
                if not p.future.done():
                    p.future.set_exception(
                        KafkaTimeoutError(f"{name} to broker {self.node_id} timed out after {timeout} ms")
                    )
                break
        self._shutdown(KafkaConnectionError(f"connection to broker {self.node_id} closed after a request timed out"))

    # -- asyncio protocol --------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=8 * 1024 * 1024)  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        self._shutdown(
            KafkaConnectionError(f"connection to broker {self.node_id} ({self.host}:{self.port}) lost{reason}")
        )

    def pause_writing(self) -> None:
        if self._write_ready is None:
            self._write_ready = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._write_ready is not None:
            if not self._write_ready.done():
                self._write_ready.set_result(None)
            self._write_ready = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return self._framer.window(self._big)
        return memoryview(self._staging)[self._staged :]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._big is not None:
                if self._framer.received(nbytes):
                    buf, self._big = self._big, None
                    self._on_frame(self._framer.payload(buf))
                    self._pool.give(buf)  # taken again only once nothing reads it (see FramePool)
                return
            self._staged += nbytes
            self._drain_staging()
        except ProtocolError as e:
            self._shutdown(KafkaConnectionError(f"bad response from broker {self.node_id}: {e}"))

    def eof_received(self) -> bool | None:
        return None

    def _drain_staging(self) -> None:
        buf = self._staging
        n = self._staged
        framer = self._framer
        framer.pos = 0
        while not self._closed:
            frame = framer.next(buf, n, copy=True)  # staging is reused: each frame gets its own bytes
            if frame is None:
                size = framer.partial
                if size + PREFIX > len(buf):
                    big = self._pool.take(size)
                    framer.receive_into(buf, n, big)
                    self._big = big
                break
            self._on_frame(frame)
        pos = framer.pos
        if pos:
            rest = n - pos
            if rest:
                buf[:rest] = buf[pos:n]
            self._staged = rest

    def _on_frame(self, frame: memoryview) -> None:
        if not self._pending:
            raise ProtocolError("response with no request outstanding")
        corr, p = self._pending.popleft()
        got = peek_correlation_id(frame)
        if got != corr:
            raise ProtocolError(f"correlation id {got} where {corr} was expected")
        if p.timer is not None:
            p.timer.cancel()
        if p.future.done():
            return
        try:
            _, body = decode_response(frame, p.api_key, p.version)
        except ProtocolError as e:
            if p.api_key == _API_VERSIONS and p.version > 0:
                # An unknown ApiVersions version is answered with a v0 body.
                _, body = decode_response(frame, _API_VERSIONS, 0)
            else:
                p.future.set_exception(e)
                raise
        p.future.set_result(body)

    # -- closing -----------------------------------------------------------------
    def _closed_error(self) -> BaseException:
        return self._close_reason or KafkaConnectionError(f"connection to broker {self.node_id} is closed")

    def _shutdown(self, reason: BaseException) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        if self._transport is not None:
            self._transport.abort()
        pending, self._pending = self._pending, deque()
        for _, p in pending:
            if p.timer is not None:
                p.timer.cancel()
            if not p.future.done():
                p.future.set_exception(type(reason)(str(reason)))
        if self._write_ready is not None and not self._write_ready.done():
            self._write_ready.set_result(None)
        if not self._closed_future.done():
            self._closed_future.set_result(None)
        for cb in self.on_close:
            try:
                cb(self)
            except Exception:
                log.exception("on_close callback failed")

    def close(self) -> None:
        """Close now; outstanding requests fail with KafkaConnectionError."""
        self._shutdown(KafkaConnectionError(f"connection to broker {self.node_id} closed by the client"))

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_future)
