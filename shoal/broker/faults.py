"""Request fault injection: what the broker does instead of (or before) handling a request.

Why: a client's retry paths (a leader that moved, a coordinator that is
loading, a connection that died mid-request) are the code least often run
and most often wrong, and a real broker produces those conditions only by
accident. franz-go's ``kfake`` showed the remedy: a control hook per request
key. ``shoal.testing.EmbeddedBroker.faults`` is this object.

Rules are kept per API key, first armed first used:

- ``fail(api, code, times)``: answer with Kafka's error response for that
  request (every topic and partition it named carries ``code``);
- ``delay(api, ms, times)``: handle the request normally, ``ms`` later;
- ``drop(api, times)``: close the connection instead of answering;
- ``intercept(api, fn, times)``: call ``fn(request)``; a returned body is the
  answer, ``None`` lets the broker handle the request.

``times=None`` keeps a rule until ``clear()``. Apart from requests,
``hold_loading(topic)`` keeps a coordinator from loading its internal topic
until ``release_loading`` (the window in which /health/ready says 503 and
coordinator requests get COORDINATOR_LOAD_IN_PROGRESS), and ``hold(point)`` stops the broker
at a named step until ``release(point)``: ``share.dead_letter`` leaves records ARCHIVING without
their dead-letter copy (a kill -9 in that window must re-drive them). A broker in a child
process takes hold points from the environment variable ``SHOAL_FAULT_HOLD`` (comma
separated) at start. Sans-IO: the broker's dispatch
asks ``take(api_key)`` and carries out the returned ``Fault``; rules may be
armed from another thread (a synchronous test beside the broker's loop).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shoal.protocol.api import api as api_for_key
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode

__all__ = ["HOLD_ENV", "Fault", "FaultInjector", "InterceptedRequest"]

HOLD_ENV = "SHOAL_FAULT_HOLD"


@dataclass(slots=True)
class InterceptedRequest:
    """What an ``intercept`` callback sees: the request as the broker decoded it."""

    api_key: int
    api_name: str
    api_version: int
    client_id: str | None
    correlation_id: int
    body: Any


@dataclass(slots=True)
class Fault:
    kind: str  # "fail" | "delay" | "drop" | "intercept"
    api_key: int
    times: int | None  # uses left; None = until cleared
    error_code: int = 0
    message: str | None = None
    delay_ms: float = 0.0
    callback: Callable[[InterceptedRequest], Any] | None = None


class FaultInjector:
    """Armed faults, by API key. ``armed`` is the one attribute an unarmed dispatch reads."""

    __slots__ = ("_held_loads", "_held_points", "_lock", "_rules", "armed", "injected")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: dict[int, list[Fault]] = {}
        self.armed = False
        self.injected: dict[str, int] = {}  # "Produce:fail" -> how many times a rule was used
        self._held_loads: set[str] = set()  # internal topics whose coordinator must not load yet
        self._held_points: set[str] = set()  # named steps the broker must not take (hold())

    # -- arming --------------------------------------------------------------------
    def fail(self, api: int | str, error: int | str, times: int | None = 1, message: str | None = None) -> None:
        """Answer the next ``times`` requests of ``api`` with ``error`` (a code, or a name such as
        ``"NOT_LEADER_OR_FOLLOWER"``)."""
        code = ErrorCode[error] if isinstance(error, str) else ErrorCode(error)
        self._add(Fault("fail", _key(api), _times(times), error_code=int(code), message=message))

    def delay(self, api: int | str, ms: float, times: int | None = 1) -> None:
        """Handle the next ``times`` requests of ``api`` after ``ms`` milliseconds."""
        if ms < 0:
            raise ValueError("ms must not be negative")
        self._add(Fault("delay", _key(api), _times(times), delay_ms=float(ms)))

    def drop(self, api: int | str, times: int | None = 1) -> None:
        """Close the connection when the next ``times`` requests of ``api`` arrive, unanswered."""
        self._add(Fault("drop", _key(api), _times(times)))

    def intercept(self, api: int | str, fn: Callable[[InterceptedRequest], Any], times: int | None = None) -> None:
        """Show each request of ``api`` to ``fn`` (on the broker's event loop); a body it returns
        is the answer, ``None`` lets the broker answer."""
        self._add(Fault("intercept", _key(api), _times(times), callback=fn))

    def hold_loading(self, topic: str) -> None:
        """Keep the coordinator of ``topic`` (``__consumer_offsets``, ``__share_group_state``) from
        loading, at the next broker start, until ``release_loading``. Arm it before the start."""
        with self._lock:
            self._held_loads.add(topic)

    def release_loading(self, topic: str | None = None) -> None:
        """Let the held coordinator (or every one) load."""
        with self._lock:
            if topic is None:
                self._held_loads.clear()
            else:
                self._held_loads.discard(topic)

    def loading_held(self, topic: str) -> bool:
        """Whether the coordinator of ``topic`` is to wait before loading (asked at start only)."""
        with self._lock:
            return topic in self._held_loads

    def hold(self, point: str) -> None:
        """Keep the broker from taking step ``point`` until ``release(point)``."""
        with self._lock:
            self._held_points.add(point)

    def release(self, point: str) -> None:
        with self._lock:
            self._held_points.discard(point)

    def held(self, point: str) -> bool:
        """Whether step ``point`` is held (read without the lock: a set lookup)."""
        return point in self._held_points

    def hold_from(self, spec: str) -> None:
        """Hold every point of a comma-separated list (the ``SHOAL_FAULT_HOLD`` variable)."""
        for point in filter(None, (p.strip() for p in spec.split(","))):
            self.hold(point)

    def clear(self, api: int | str | None = None) -> None:
        """Disarm every rule (or those of one API)."""
        with self._lock:
            if api is None:
                self._rules.clear()
            else:
                self._rules.pop(_key(api), None)
            self.armed = bool(self._rules)

    def _add(self, fault: Fault) -> None:
        with self._lock:
            self._rules.setdefault(fault.api_key, []).append(fault)
            self.armed = True

    # -- use -----------------------------------------------------------------------
    def take(self, api_key: int) -> Fault | None:
        """The rule that applies to this request, used up by one if it counts."""
        with self._lock:
            rules = self._rules.get(api_key)
            if not rules:
                return None
            fault = rules[0]
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    rules.pop(0)
                    if not rules:
                        del self._rules[api_key]
                        self.armed = bool(self._rules)
            name = _label(api_key, fault.kind)
            self.injected[name] = self.injected.get(name, 0) + 1
            return fault

    def pending(self) -> dict[str, int | None]:
        """Armed rules as ``{"Produce:fail": uses left (None: until cleared)}`` (summed per kind)."""
        out: dict[str, int | None] = {}
        with self._lock:
            for key, rules in self._rules.items():
                for f in rules:
                    name = _label(key, f.kind)
                    left = out.get(name, 0)
                    out[name] = None if f.times is None or left is None else left + f.times
        return out


def _key(api: int | str) -> int:
    if isinstance(api, str):
        return api_by_name(api).key
    if api_for_key(api) is None:
        raise ValueError(f"unknown API key {api}")
    return int(api)


def _label(key: int, kind: str) -> str:
    """``"Produce:fail"``: how ``injected`` and ``pending()`` name a rule."""
    a = api_for_key(key)
    return f"{a.name if a is not None else key}:{kind}"


def _times(times: int | None) -> int | None:
    if times is not None and times <= 0:
        raise ValueError("times must be positive or None")
    return times
