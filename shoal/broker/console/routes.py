"""The web console's routes on the operations listener (aiohttp): GET only, thin.

Each handler reads the clock, asks ``views`` for a dict and answers it as a page
(``pages``) or as JSON; nothing here changes broker state, and only GET (and the
HEAD aiohttp adds) is routed, so any other method is answered 405. The listener's
middleware authenticates these paths as it does /metrics. Every answer carries a
Content-Security-Policy that allows scripts, styles and fetches from the console
itself only, so even markup that slipped through escaping could not run.

The handlers run on the broker's event loop between requests, like a scrape,
and cost nothing while nobody looks: the console has no timers of its own.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Final

from aiohttp import web

from shoal.broker.console import pages, views

__all__ = ["install"]

_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STATIC: Final = {"console.css": "text/css", "console.js": "text/javascript"}


class Console:
    """The console of one broker: its rate history and its handlers."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.history = views.RateHistory()
        self._static = {
            name: resources.files("shoal.broker.console").joinpath("static", name).read_bytes() for name in _STATIC
        }

    def _times(self) -> tuple[int, int]:
        clock = self.broker.clock
        return clock.now_ms(), clock.monotonic_ms()

    def _sample(self) -> None:
        self.history.sample(self._times()[0], self.broker.stats)

    @staticmethod
    def _html(body: str, status: int = 200) -> web.Response:
        return web.Response(text=body, status=status, content_type="text/html", charset="utf-8", headers=_HEADERS)

    @staticmethod
    def _json(data: Any, status: int = 200) -> web.Response:
        return web.Response(
            text=json.dumps(data, separators=(",", ":")),
            status=status,
            content_type="application/json",
            headers=_HEADERS,
        )

    def _not_ready(self) -> web.Response | None:
        if self.broker.topics is None:
            return self._html(pages.not_found_page("The broker is still starting."), 503)
        return None

    async def overview(self, request: web.Request) -> web.Response:
        if (busy := self._not_ready()) is not None:
            return busy
        self._sample()
        return self._html(pages.overview_page(views.overview_view(self.broker, self.history)))

    async def overview_json(self, request: web.Request) -> web.Response:
        if self.broker.topics is None:
            return self._json({"error": "starting"}, 503)
        self._sample()
        return self._json(views.overview_view(self.broker, self.history))

    async def topic(self, request: web.Request) -> web.Response:
        if (busy := self._not_ready()) is not None:
            return busy
        name = request.match_info["name"]
        t = views.topic_view(self.broker, name)
        if t is None:
            return self._html(pages.not_found_page(f"No topic named {name!r}."), 404)
        q = request.query
        r = views.records_view(
            self.broker, name, q.get("partition", 0), q.get("offset"), q.get("count", 50), q.get("format", "utf8")
        )
        return self._html(pages.topic_page(t, r))

    def _group(self, gid: str) -> dict[str, Any] | None:
        now, mono = self._times()
        return views.share_group_view(self.broker, gid, now_ms=now, mono_ms=mono)

    async def share_group(self, request: web.Request) -> web.Response:
        if (busy := self._not_ready()) is not None:
            return busy
        gid = request.match_info["gid"]
        g = self._group(gid)
        if g is None:
            return self._html(pages.not_found_page(f"No share group named {gid!r}."), 404)
        self._sample()
        return self._html(
            pages.share_group_page(g, poll=str(request.app.router["console-share-json"].url_for(gid=gid)))
        )

    async def share_group_json(self, request: web.Request) -> web.Response:
        if self.broker.topics is None:
            return self._json({"error": "starting"}, 503)
        gid = request.match_info["gid"]
        g = self._group(gid)
        if g is None:
            return self._json({"error": "unknown share group"}, 404)
        return self._json(g)

    async def dead_letters(self, request: web.Request) -> web.Response:
        if (busy := self._not_ready()) is not None:
            return busy
        gid = request.match_info["gid"]
        d = views.dead_letters_view(self.broker, gid)
        if d is None:
            return self._html(pages.not_found_page(f"No share group named {gid!r}."), 404)
        return self._html(pages.dead_letters_page(d))

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["file"]
        body = self._static.get(name)
        if body is None:
            return self._html(pages.not_found_page("No such file."), 404)
        return web.Response(body=body, content_type=_STATIC[name], headers=_HEADERS)

    async def unknown(self, request: web.Request) -> web.Response:
        return self._html(pages.not_found_page(f"No console page at {request.path!r}."), 404)


def install(app: web.Application, broker: Any) -> None:
    """Add the console's GET routes under /console to the operations listener's app."""
    c = Console(broker)
    r = app.router
    r.add_get("/console", c.overview)
    r.add_get("/console/", c.overview)
    r.add_get("/console/api/overview", c.overview_json)
    r.add_get("/console/api/share-groups/{gid:.+}", c.share_group_json, name="console-share-json")
    r.add_get("/console/static/{file}", c.static)
    r.add_get("/console/topics/{name}", c.topic)
    r.add_get("/console/share-groups/{gid:.+}", c.share_group)
    r.add_get("/console/dead-letters/{gid:.+}", c.dead_letters)
    r.add_get("/console/{rest:.*}", c.unknown)
