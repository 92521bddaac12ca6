"""One client connection: frames in, responses out, in request order.

Why a BufferedProtocol: uvloop hands us `get_buffer()` before every read, so a
large frame (a 1 MiB produce) is received straight into a buffer of its own
(taken from the server's `FramePool`, so not allocated and zero-filled per
frame) with no intermediate copy, while small frames share a staging buffer
and several of them may arrive in one read. After a large frame the next read
goes into a pooled buffer too, on the bet that another large frame follows
(producers send runs of them): when it does, it stays where it landed (its
size prefix at offset 0) instead of being copied out of staging; when it does
not, that buffer is parsed like staging. Size prefixes are read, checked against
socket.request.max.bytes and cut into frames by `protocol.frames.Framer`
(the one framer, shared with the client); this module only decides which
buffer the bytes land in.

Ordering and pipelining: Kafka clients keep many requests in flight on one
connection and match responses by correlation id, but expect them in request
order. Each request gets a slot in a FIFO; handlers may finish out of order
(a produce waiting for fsync, a fetch long-polling), and a response is written
only when every earlier slot has been written. acks=0 produces leave their slot
empty: Kafka sends nothing for them. Responses that become ready in the same
turn of the event loop go out in one write (one syscall, one wakeup of the
client) from a callback scheduled by the first of them.

Backpressure: we stop reading when too many requests are queued
(queued.max.requests) or when the transport's write buffer is over its high
water mark (a client that does not read its responses), and resume when
drained. Bad bytes close the connection; they never reach other clients.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
from collections import deque
from time import perf_counter_ns
from typing import Any

from shoal.broker.config.settings import Listener
from shoal.broker.metrics.counters import BrokerStats
from shoal.broker.net.contract import NO_RESPONSE, ConnectionOwner, RequestContext
from shoal.broker.security.authenticator import SASL_PROTOCOLS, AuthFailed, RawToken
from shoal.broker.security.principal import ANONYMOUS, KafkaPrincipal
from shoal.protocol.api import api_by_name
from shoal.protocol.buffers import FramePool
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.frames import PREFIX, Framer, UnsupportedRequest, decode_request, encode_frame, encode_response

log = logging.getLogger("shoal.connection")
# Every request in and answer out, at DEBUG (log.level=DEBUG), as Kafka's kafka.request.logger:
# how to tell, from the broker's side, which request a client still waits for.
trace = logging.getLogger("shoal.request")
_API_VERSIONS = api_by_name("ApiVersions").key
_SASL_AUTHENTICATE = api_by_name("SaslAuthenticate").key

_STAGING = 256 * 1024
# A connection closed after a bad frame or a failed SASL exchange sends its answers and a FIN, then
# reads and drops what the client still sends until the client closes, for at most this long.
# Closing with unread bytes in the socket would make the kernel reset the connection, and a reset
# can destroy answers the client has not read yet (a failed login's error: the client then sees
# a bare disconnect and retries instead of reporting the authentication failure).
_LINGER_S = 1.0
_DISCARD = bytearray(64 * 1024)  # where a lingering connection's input goes
# Staging pages touched past this are handed back to the kernel once staging is empty again.
_STAGING_KEEP = 16 * 1024


def _staging_buffer() -> mmap.mmap:
    """A connection's 256 KiB staging area as an anonymous mapping: the kernel backs a page only
    once data lands in it, so an idle connection costs the pages its small requests touched
    (bytearray(256 KiB) zero-filled all of them: 1,000 idle sockets held 250 MiB)."""
    return mmap.mmap(-1, _STAGING, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class _Slot:
    __slots__ = ("api_key", "correlation_id", "done", "payload", "received_ns", "version")

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        self.received_ns = perf_counter_ns()  # RequestMetrics TotalTimeMs runs from here to the write
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.done = False
        self.payload: Any = None


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: ConnectionOwner, listener: Listener | None = None) -> None:
        self.server = server
        self.broker = server.broker
        # The listener this connection came in on (its name picks the advertised addresses and
        # the listener.name.<l>.* settings), and who the peer has proved to be so far.
        self.listener = listener.name if listener is not None else getattr(server, "listener_name", "PLAINTEXT")
        self.security_protocol = listener.security_protocol if listener is not None else "PLAINTEXT"
        self.principal: KafkaPrincipal = ANONYMOUS
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.max_frame = server.max_frame_bytes
        self.max_queued = server.max_queued_requests
        self._staging: Any = _staging_buffer()
        self._staged = 0  # bytes in staging
        self._staging_high = 0  # how far into staging data has landed since it was last released
        self._pool: FramePool = server.frame_pool
        # Sizes and frame bounds: the framer's; which buffer the bytes land in: ours.
        self._framer = Framer(self.max_frame, limit="socket.request.max.bytes")
        # A SASL listener takes nothing but the SASL exchange, in frames of at most
        # sasl.server.max.receive.size, until the peer has authenticated (security/authenticator.py).
        sasl = getattr(self.broker, "sasl", None) if self.security_protocol in SASL_PROTOCOLS else None
        self.sasl = sasl.session(self.listener, self._authenticated) if sasl is not None else None
        if self.sasl is not None:
            self._framer.max_size = min(self.max_frame, self.sasl.max_receive)
            self._framer.limit = "sasl.server.max.receive.size before authentication"
        self._big: bytearray | None = None  # pooled buffer of the frame being received directly
        self._expect = 0  # size of the last large frame: the next read goes into a pooled buffer
        self._spec: bytearray | None = None  # that buffer, handed to the transport
        self._memory = server.request_memory  # queued.max.request.bytes, over all connections
        self._reservations: dict[int, int] = {}  # id(frame buffer) -> bytes it holds of that bound
        self._wait_memory = False  # a frame's buffer did not fit the bound: reading stops until it does
        self._slots: deque[_Slot] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fin_last = False  # a doomed connection sends its FIN only when it closes (see close_after_answers)
        # Inside a read callback, ready responses are written once at its end (the frames of one
        # read share a write); anywhere else, in the call that made them ready.
        self._in_read = False
        self._write_wanted = False
        self._reading_paused = False
        self._draining = False
        self._write_paused = False
        self._closed = False
        # A frame we cannot take arrived: the requests before it are answered, then we close.
        self._doomed: str | None = None
        self._admitted = False  # counted against the connection limits (see Server.admit)
        self._ip = "?"
        self.last_active = server.clock.monotonic_ms()
        self.tasks: set[Any] = set()  # handlers in progress (Tasks, timing.prompt.Prompts): cancelled on close
        self._trace = trace.isEnabledFor(logging.DEBUG)
        # The broker's counters (/metrics); a stand-in broker (unit tests) gets counters of its own.
        self._stats: BrokerStats = getattr(self.broker, "stats", None) or BrokerStats()

    # -- asyncio protocol callbacks ------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._ip = peer[0] if peer else "?"
        refused = self.server.admit(self._ip, self.listener)
        if refused is not None:
            log.info("refusing connection from %s: %s", self.peer, refused)
            self._closed = True
            transport.abort()
            return
        # Mutual TLS: the certificate names the principal. On SASL_SSL the SASL login does (as in
        # Kafka), so a certificate no ssl.principal.mapping.rules entry maps is no reason to refuse.
        if self.security_protocol == "SSL":  # the TLS handshake is done
            principal = self.server.tls_principal(self.listener, transport)
            if principal is None:  # a certificate no ssl.principal.mapping.rules entry maps
                self._closed = True
                self.server.release(self._ip, self.listener)
                transport.abort()
                return
            self.principal = principal
        self._admitted = True
        self.server.connections.add(self)
        created = self._stats.connections_created
        created[self.listener] = created.get(self.listener, 0) + 1
        transport.set_write_buffer_limits(high=4 * 1024 * 1024)
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # driven by hand (tests): responses are written at once
            self._loop = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._trace and self._admitted:
            unanswered = [s.correlation_id for s in self._slots]
            trace.debug("%s closed (%s), unanswered corr %s", self.peer, exc or "by peer or broker", unanswered)
        self._closed = True
        if not self._admitted:
            return  # refused at accept: nothing was set up
        self._admitted = False
        self.server.release(self._ip, self.listener)
        for buf in (self._big, self._spec):
            if buf is not None:
                self._give(buf)
        self._big = self._spec = None
        self._memory.forget(self)
        self.server.connections.discard(self)
        for t in list(self.tasks):
            t.cancel()
        self.broker.connection_closed(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._doomed is not None:
            return memoryview(_DISCARD)  # nothing after a bad frame is read (see _close_doomed)
        if self._big is not None:
            return self._framer.window(self._big)
        if self._expect and not self._staged:
            if self._spec is None:
                self._spec = self._take(self._expect + PREFIX)
                if self._spec is None:  # no request memory to bet with: read into staging
                    self._expect = 0
                    return memoryview(self._staging)[self._staged :]
            return memoryview(self._spec)
        return memoryview(self._staging)[self._staged :]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self.server.clock.monotonic_ms()
        if self._doomed is not None:
            return  # nothing after a bad frame is read
        self._in_read = True
        try:
            if self._big is not None:
                framer = self._framer
                if framer.received(nbytes):
                    buf, self._big = self._big, None
                    self._big_frame(buf, framer.start, framer.end)
                return
            if self._spec is not None and not self._staged:
                buf, self._spec = self._spec, None
                self._received_speculatively(buf, nbytes)
                return
            self._staged += nbytes
            self._drain_staging()
        except ProtocolError as e:
            self._reject(f"bad frame: {e}")
        finally:
            self._in_read = False
            if self._write_wanted:
                self._write_wanted = False
                self._write_ready()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # -- framing (where the bytes go; sizes and bounds are the framer's) ---------------
    def _big_frame(self, buf: bytearray, start: int, end: int) -> None:
        """A large frame is complete in ``buf[start:end]``."""
        self._expect = end - start
        try:
            self._on_frame(memoryview(buf)[start:end])
        finally:
            # Views the request still holds keep it from reuse (FramePool).
            self._give(buf)

    def _received_speculatively(self, buf: bytearray, n: int) -> None:
        """``n`` bytes landed at the start of a pooled buffer (see ``get_buffer``)."""
        framer = self._framer
        framer.pos = 0
        try:
            size = framer.peek(buf, n)
        except ProtocolError:
            self._give(buf)  # its bytes back to queued.max.request.bytes before we close
            raise
        if size + PREFIX > _STAGING and size + PREFIX <= len(buf):  # the bet won: keep it in place
            if not framer.receive_in_place(n):
                self._big = buf
                return
            start, end = framer.start, framer.end
            extra = n - end  # the read went past the frame: the rest goes to staging
            if extra > _STAGING:
                # More than staging holds (a bytearray used to grow here, unbounded): the
                # rest is framed from a copy of its own.
                rest = bytearray(memoryview(buf)[end:n])
                self._staged = 0
                self._big_frame(buf, start, end)
                if not self._closed:
                    self._drain(rest, extra)
                return
            self._staging[:extra] = memoryview(buf)[end:n]
            self._staged = extra
            self._big_frame(buf, start, end)
            if extra and not self._closed:
                self._drain_staging()
            return
        self._expect = 0
        try:
            self._drain(buf, n)
        finally:
            self._give(buf)

    def _take(self, size: int, *, force: bool = False) -> Any:
        """A buffer for a frame of ``size`` bytes, counted against queued.max.request.bytes;
        None when that bound has no room for it."""
        if not self._memory.try_reserve(size, force=force):
            return None
        buf = self._pool.take(size)
        self._reservations[id(buf)] = size
        return buf

    def _give(self, buf: Any) -> None:
        """A frame buffer is done with: back to the pool, its bytes back to the bound."""
        self._pool.give(buf)
        n = self._reservations.pop(id(buf), 0)
        if n:
            waiters = self._memory.release(n)
            if waiters:
                self.server.memory_freed(waiters)

    def retry_memory(self) -> None:
        """Request memory was freed: try again to take the frame waiting in staging."""
        if self._closed or not self._wait_memory:
            return
        self._wait_memory = False
        try:
            self._drain_staging()
        except ProtocolError as e:
            self._reject(f"bad frame: {e}")
        self._update_reading()

    def _drain_staging(self) -> None:
        self._drain(self._staging, self._staged)

    def _drain(self, buf: bytearray, n: int) -> None:
        """Handle the whole frames in ``buf[:n]``; keep what follows for the next reads."""
        framer = self._framer
        framer.pos = 0
        staging = self._staging
        copy = buf is staging  # reused at once: each frame gets a copy of its own
        while not self._closed and self._doomed is None:
            frame = framer.next(buf, n, copy)
            if frame is None:
                size = framer.partial
                if size + PREFIX > _STAGING:
                    # Too big for staging: receive the rest straight into a buffer of its own, once
                    # queued.max.request.bytes has room (bytes that cannot go back to staging always do).
                    big = self._take(size, force=n - framer.pos > _STAGING)
                    if big is None:
                        self._wait_memory = True
                        self._memory.wait(self)
                        self._update_reading()
                        break  # the frame's first bytes wait in staging
                    framer.receive_into(buf, n, big)
                    self._big = big
                break
            self._on_frame(frame)
            del frame
        pos = framer.pos
        rest = n - pos
        if rest and (pos or buf is not staging):
            staging[:rest] = buf[pos:n]
        self._staged = rest
        if buf is staging and n > self._staging_high:
            self._staging_high = n

    def _on_frame(self, frame: memoryview) -> None:
        sasl = self.sasl
        if sasl is not None and sasl.raw and not sasl.complete:
            self._sasl_token(frame)
            return
        try:
            request = decode_request(frame)
        except UnsupportedRequest as e:
            self._unsupported(e)
            return
        except ProtocolError as e:
            self._reject(f"malformed request: {e}")
            return
        if sasl is not None and not sasl.complete:
            refusal = sasl.refusal(request.api.key)
            if refusal is not None:
                self._reject(refusal)
                return
        slot = _Slot(request.api.key, request.version, request.correlation_id)
        self._slots.append(slot)
        if self._trace:
            trace.debug(
                "%s <- %s v%d corr %d client %s",
                self.peer,
                request.api.name,
                request.version,
                request.correlation_id,
                request.client_id,
            )
        self._update_reading()
        ctx = RequestContext(
            self, request.api.key, request.version, request.correlation_id, request.client_id, request.header
        )
        self.broker.dispatch(ctx, request.body, slot, self)

    # -- SASL ------------------------------------------------------------------------
    def _authenticated(self, principal: KafkaPrincipal) -> None:
        """The SASL exchange succeeded: requests are now the principal's, at full size."""
        self.principal = principal
        self._framer.max_size = self.max_frame
        self._framer.limit = "socket.request.max.bytes"

    def _sasl_token(self, frame: memoryview) -> None:
        """After a SaslHandshake v0 a frame is a bare token (no request header), answered with a
        bare token; a failed exchange closes the connection after the failure delay."""
        sasl = self.sasl
        assert sasl is not None
        slot = _Slot(_SASL_AUTHENTICATE, 0, 0)
        self._slots.append(slot)
        try:
            answer = sasl.authenticate(bytes(frame))
        except AuthFailed:
            self.close_after_answers("SASL authentication failed")
            if self._loop is not None:
                self._loop.call_later(sasl.failure_delay_ms / 1000, self.complete, slot, NO_RESPONSE)
            else:
                self.complete(slot, NO_RESPONSE)
            return
        self.complete(slot, RawToken(answer))

    def _unsupported(self, e: UnsupportedRequest) -> None:
        if e.api_key == _API_VERSIONS:
            # Kafka answers an unknown ApiVersions version with a v0 body
            # carrying UNSUPPORTED_VERSION and its table; the client retries.
            slot = _Slot(_API_VERSIONS, 0, e.correlation_id)
            self._slots.append(slot)
            self.complete(slot, self.broker.api_versions_error_body())
            return
        self._reject(f"unsupported API key {e.api_key} version {e.version}")

    # -- responses ---------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def complete(self, slot: _Slot, body: Any) -> None:
        """A handler's result for `slot`; writes every ready response in order."""
        if self._closed:
            return
        slot.done = True
        slot.payload = body
        if self._slots and self._slots[0].done:
            if self._in_read:
                self._write_wanted = True
            else:
                # Now, not a loop turn later: a loaded loop's turn costs milliseconds, and a
                # response that waited on a durable write already paid for several.
                self._write_ready()

    def _write_ready(self) -> None:
        if self._closed:
            return
        slots = self._slots
        transport = self.transport
        out: list = []
        now_ns = perf_counter_ns()
        request_done = self._stats.request_done
        while slots and slots[0].done:
            s = slots.popleft()
            request_done(s.api_key, now_ns - s.received_ns)
            if self._trace:
                trace.debug("%s -> api %d corr %d%s", self.peer, s.api_key, s.correlation_id, _summary(s.payload))
            if s.payload is NO_RESPONSE:
                continue
            if type(s.payload) is RawToken:
                out.append(encode_frame(s.payload.data))
                continue
            try:
                out.extend(encode_response(s.api_key, s.version, s.correlation_id, s.payload))
            except ProtocolError as e:
                log.error("cannot encode response to %s (api %s v%s): %s", self.peer, s.api_key, s.version, e)
                self.abort("response encoding failed")
                return
        if out and transport is not None and not transport.is_closing():
            transport.writelines(out)
        if self._doomed is not None and not slots:
            self._close_doomed()
            return
        self._update_reading()

    def fail(self, slot: _Slot, reason: str) -> None:
        """No response can be given (an acks=0 Produce whose handling failed, or no error
        response could be built): close the connection, as Kafka does."""
        self.abort(reason)

    # -- flow control ------------------------------------------------------------
    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self._closed:
            return
        should_pause = (
            self._write_paused
            or self._draining
            or self._wait_memory
            or self._doomed is not None
            or len(self._slots) >= self.max_queued
        )
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def stop_reading(self) -> None:
        """Shutdown: take no new requests; those in flight still get their answers."""
        self._draining = True
        self._update_reading()

    def release_buffers(self) -> bool:
        """Hand staging pages a burst touched back to the kernel, if staging is empty (the server
        calls this for connections quiet for a while: never on the hot path). True if it did."""
        if self._staged or self._staging_high <= _STAGING_KEEP or self._closed:
            return False
        self._staging.madvise(mmap.MADV_DONTNEED, 0, _STAGING)
        self._staging_high = 0
        return True

    @property
    def in_flight(self) -> int:
        return len(self._slots)

    def _reject(self, reason: str) -> None:
        """A frame we cannot take. Kafka reads one request at a time, so it answers every request
        before a bad one and then closes; so do we: nothing more is read, the requests already
        taken are answered in order, and the connection closes once they are written (closed,
        not aborted: the answers in the write buffer still go out)."""
        if self._closed or self._doomed is not None:
            return
        log.warning("closing connection from %s after its earlier requests: %s", self.peer, reason)
        self._doomed = reason
        self._update_reading()
        if not self._slots:
            self._close_doomed()

    def close_after_answers(self, reason: str) -> None:
        """Read nothing more; close once the requests taken so far are answered (a failed SASL
        exchange: its answer may still be on its way). The FIN waits until the client closes or
        _LINGER_S passes: a client that reads the answer and the FIN in one go may report the
        disconnect instead of the error (kafka-python drops data read together with EOF), so
        the error is given time to be read on its own."""
        self._fin_last = True
        self._reject(reason)

    def _close_doomed(self) -> None:
        self._closed = True
        transport = self.transport
        if transport is None:
            return
        if not transport.can_write_eof():  # TLS: no half-close
            transport.close()
            return
        # A lingering close: the answers, then FIN (at once, or when the client closes or _LINGER_S
        # passes: close_after_answers); input is read and dropped (buffer_updated) meanwhile.
        if not self._fin_last:
            transport.write_eof()
        if self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        if self._loop is not None:
            self._loop.call_later(_LINGER_S, transport.close)
        else:
            transport.close()

    def abort(self, reason: str) -> None:
        if self._closed:
            return
        log.warning("closing connection from %s: %s", self.peer, reason)
        self._closed = True
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():  # a lingering one too (_close_doomed)
            self._closed = True
            transport.close()


def _summary(body: Any) -> str:
    """A request log's view of an answer: its top-level error code, if any."""
    if body is NO_RESPONSE:
        return " (no response: acks=0)"
    code = getattr(body, "error_code", 0)
    return f" error {code}" if code else ""
