"""When the broker writes a response: in the call that made it ready, not a loop turn later.

A request whose handler waited (a long poll, an acknowledgement's durable write) is
answered by the task step that finished it; a done-callback, then a scheduled write,
each cost one more loop turn, and a loaded loop's turn costs milliseconds (the
acknowledgement round trips of benchmarks/share_scaling.py). Order still holds: a
response never overtakes an earlier request's. The handler is held with the broker's
own fault injection (an intercept callback that awaits a future the test releases).
A ShareFetch that acknowledges goes further: it runs on in the very call that settles
its state write (timing/prompt.py), so it is answered before that turn ends.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from shoal.broker.share.partition_manager import AckWrite
from shoal.protocol.api import api_by_name
from shoal.protocol.constants import ACCEPT
from shoal.testing import EmbeddedBroker
from tests.support.brokers import InProcessBroker, RawClient
from tests.support.share_wire import FAST, acquired, batch, fetch, part, ready_topic

AV = api_by_name("ApiVersions").request_class()(client_software_name="timing-test", client_software_version="1")


def _held(eb: EmbeddedBroker, api: str) -> list[asyncio.Future]:
    """Hold the next ``api`` request's handler until the future it appends is set."""
    held: list[asyncio.Future] = []

    async def hold(request) -> None:
        future = asyncio.get_running_loop().create_future()
        held.append(future)
        await future
        # None: the broker answers the request itself

    eb.broker.faults.intercept(api, hold, times=1)
    return held


def _until(cond: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _first(held: list) -> Any:
    _until(lambda: held, "the request to reach its handler")
    return held[0]


def test_a_handler_that_waited_is_answered_in_the_step_that_finished_it() -> None:
    with EmbeddedBroker() as eb:
        held = _held(eb, "ApiVersions")
        with RawClient(eb.port) as c:
            c.send("ApiVersions", 3, AV)
            future = _first(held)
            (conn,) = eb.broker.server.connections
            loop = future.get_loop()
            unanswered: list[int] = []

            def release() -> None:
                future.set_result(None)  # the handler's task runs its last step next ...
                loop.call_soon(lambda: unanswered.append(conn.in_flight))  # ... and this right after

            loop.call_soon_threadsafe(release)
            assert c.receive("ApiVersions", 3).error_code == 0
            _until(lambda: unanswered, "the callback behind the handler's last step")
            # The slot was written and gone by the end of that step (a done-callback answered a turn later: 1).
            assert unanswered == [0]


def test_a_waiting_request_still_holds_back_the_answers_behind_it() -> None:
    with EmbeddedBroker() as eb:
        held = _held(eb, "ApiVersions")
        with RawClient(eb.port) as c:
            first = c.send("ApiVersions", 3, AV)
            future = _first(held)
            second = c.send("ApiVersions", 3, AV)  # not intercepted: answered at once, but queued
            (conn,) = eb.broker.server.connections
            _until(lambda: conn.in_flight >= 2, "both requests to be read")
            c.sock.settimeout(0.3)
            with pytest.raises(TimeoutError):  # nothing may have been written yet
                c.sock.recv(1, socket.MSG_PEEK)
            c.sock.settimeout(10)
            future.get_loop().call_soon_threadsafe(future.set_result, None)
            got = [c.recv_frame() for _ in range(2)]
            assert [int.from_bytes(f[:4], "big") for f in got] == [first, second]


def test_a_share_fetch_is_answered_in_the_turn_its_acknowledgement_became_durable(tmp_path) -> None:
    broker = InProcessBroker(tmp_path / "data", FAST).start()
    try:
        tid = ready_topic(broker, "rt", "g-rt", 3)
        shoal = broker.embedded.broker
        mgr = shoal.share_partitions
        begin = mgr.begin_acknowledge
        unanswered: list[int] = []

        def watched(entry, member, batches):
            # Called by the handler; the callback added here is the first on the write's future,
            # so it runs in the turn after the write settled -- before a Task awaiting it would.
            out = begin(entry, member, batches)
            if isinstance(out, AckWrite):
                out.future.add_done_callback(
                    lambda _f: unanswered.append(sum(c.in_flight for c in shoal.server.connections))
                )
            return out

        with RawClient(broker.port) as c:
            assert acquired(fetch(c, "g-rt", "m", 0, [(tid, 0)])) == [(0, 2, 1)]
            mgr.begin_acknowledge = watched
            try:
                r = fetch(c, "g-rt", "m", 1, acks={(tid, 0): [batch(0, 2, ACCEPT)]})
            finally:
                del mgr.begin_acknowledge
            assert part(r).acknowledge_error_code == 0
            _until(lambda: unanswered, "the write's done-callback")
            # Answered inside the settle (a handler Task would still be waiting for its wake-up: 1).
            assert unanswered == [0]
    finally:
        broker.stop()
