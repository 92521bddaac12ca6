"""The operations HTTP listener (``shoal.http.listeners``): /metrics, /health/live, /health/ready,
and the pages the broker adds (the read-only web console under /console, ``shoal.broker.console``).

It runs on the broker's own event loop (aiohttp), so a scrape reads the
broker's state between requests without locks, and it lives and dies with the
Broker that owns it. Each Broker has its own prometheus-client
``CollectorRegistry`` holding only its ``BrokerCollector``: no process-wide
registry, so several brokers in one process (tests) each expose their own.

The listener starts first at broker start, before logs are recovered, so
/health/live answers while the broker is still loading and /health/ready
says 503 until it is ready (``collector.ready``). It also owns the idle
sampler (``idle.py``): a timer on the loop that takes one reading per
``metrics.sample.window.ms`` while the listener runs (none when it is off).

Authentication follows the broker's: with SASL users configured (PLAIN users in a
JAAS setting, or SCRAM credentials), /metrics asks for HTTP basic auth against the
same users and passwords (so do the console's pages), and with an authorizer the user also needs DESCRIBE on the
CLUSTER (metrics name every topic and group). The health endpoints stay open: they
say only "up" or "ready", and orchestrators' probes (Docker, Kubernetes) call them
without credentials.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from shoal.broker.metrics.collector import BrokerCollector, ready
from shoal.broker.metrics.counters import BrokerStats
from shoal.broker.metrics.idle import BusyClock, IdleWindow

__all__ = ["OpsServer", "parse_http_listener"]

_OPEN_PATHS: Final = frozenset({"/health/live", "/health/ready"})
_CHALLENGE: Final = {"WWW-Authenticate": 'Basic realm="shoal", charset="UTF-8"'}

log = logging.getLogger("shoal.broker.http")


def parse_http_listener(url: str) -> tuple[str, int]:
    """``http://host:port`` (validated by the config table) as (host, port); brackets dropped."""
    rest = url.split("://", 1)[1]
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


class OpsServer:
    """The HTTP listener of one broker."""

    def __init__(
        self,
        broker: Any,
        stats: BrokerStats,
        listeners: tuple[str, ...],
        pages: Callable[[web.Application, Any], None] | None = None,
    ) -> None:
        self.broker = broker
        self.pages = pages  # adds more GET routes (the web console) behind the same authentication
        self.listeners = listeners
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker, stats, idle=self.idle))
        self._runner: web.AppRunner | None = None
        self._window_s = broker.config.get("metrics.sample.window.ms") / 1000
        self._idle = IdleWindow(broker.config.get("metrics.num.samples"))
        self._busy: BusyClock | None = None
        self._tick: asyncio.TimerHandle | None = None
        self.bound: list[tuple[str, int]] = []

    async def start(self) -> None:
        if not self.listeners:
            return
        app = web.Application(middlewares=[self._authenticate])
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health/live", self._live)
        app.router.add_get("/health/ready", self._ready)
        if self.pages is not None:
            self.pages(app, self.broker)
        self._busy = BusyClock()  # here, on the loop thread: it reads the thread that opens it
        self._sample()
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self._runner = runner
        try:
            for url in self.listeners:
                host, port = parse_http_listener(url)
                site = web.TCPSite(runner, host or None, port, reuse_address=True)
                await site.start()
                server = site._server  # aiohttp keeps the asyncio Server here; its sockets give the bound port
                for sock in getattr(server, "sockets", None) or ():
                    self.bound.append(sock.getsockname()[:2])
        except BaseException:
            await self.close()
            raise
        log.info("operations listener on %s", ", ".join(f"http://{h}:{p}" for h, p in self.bound))

    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        sasl = getattr(self.broker, "sasl", None)
        if request.path in _OPEN_PATHS or sasl is None or not sasl.has_users():
            return await handler(request)
        credentials = _basic_credentials(request.headers.get("Authorization", ""))
        if credentials is None:
            return web.Response(status=401, text="authentication required\n", headers=_CHALLENGE)
        user, password = credentials
        # PBKDF2 of a SCRAM credential takes milliseconds: off the event loop.
        ok = await asyncio.get_running_loop().run_in_executor(None, sasl.check_password, user, password)
        if not ok:
            log.info("operations listener: authentication failed for a request to %s", request.path)
            return web.Response(status=401, text="authentication failed\n", headers=_CHALLENGE)
        if not self.broker.may_describe_cluster(user, request.remote or ""):
            return web.Response(status=403, text="DESCRIBE on the cluster is needed\n")
        return await handler(request)

    @property
    def port(self) -> int:
        """The first bound port (0 when the listener is off)."""
        return self.bound[0][1] if self.bound else 0

    async def close(self) -> None:
        tick, self._tick = self._tick, None
        if tick is not None:
            tick.cancel()
        busy, self._busy = self._busy, None
        if busy is not None:
            busy.close()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def _sample(self) -> None:
        busy = self._busy
        if busy is None:
            return
        self._idle.record(time.monotonic_ns(), busy.read())
        self._tick = asyncio.get_running_loop().call_later(self._window_s, self._sample)

    def idle(self) -> float | None:
        """The event loop's idle fraction over the recent windows (None when not sampling)."""
        busy = self._busy
        return None if busy is None else self._idle.idle(time.monotonic_ns(), busy.read())

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _live(self, request: web.Request) -> web.Response:
        return web.Response(text="live\n")

    async def _ready(self, request: web.Request) -> web.Response:
        ok, why = ready(self.broker)
        return web.Response(status=200 if ok else 503, text=why + "\n")


def _basic_credentials(header: str) -> tuple[str, str] | None:
    """(user, password) of an ``Authorization: Basic ...`` header, or None if it is not one."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = text.partition(":")
    return (user, password) if sep and user else None
