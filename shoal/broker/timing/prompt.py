"""Handler coroutines that resume in the loop turn their wait ends, not one turn later.

Why: an asyncio Task awaiting a future is woken by a callback the future schedules
with ``call_soon``, so the rest of the handler runs a loop turn after the future
was set. Under load a turn is several milliseconds (every member's request of that
turn runs in it). A ShareFetch that acknowledges pays that turn between its state
write becoming durable and its records being acquired and answered, on every poll:
at 32 members it measured 3-4 ms of the acknowledgement's wait. Under a Prompt the
bundled client's ShareFetch round trip at p50 fell from 18 to 11 ms (median of 7
runs; 14 to 10 ms with tiny records) in benchmarks/share_scaling.py's 32 x 5 rows.

``Prompt`` drives a coroutine the way a Task does, with one difference: when the
coroutine awaits a ``PromptFuture``, setting that future runs the coroutine's next
step at once, inside ``set_result``. Every other await (any asyncio future, a bare
``yield`` of ``asyncio.sleep(0)``) resumes a turn later, exactly as under a Task.
The first step also runs a turn later, as a Task's does (running it in the read
callback was measured slower: it delays the reads behind it).

A PromptFuture is an ordinary asyncio future to everyone else, so a Task awaiting
it works as before (a turn later). Whoever sets one must be ready for the waiting
handler to run to its next await inside that call.

Differences from a Task, none of which a handler here relies on: no
``asyncio.current_task()`` inside, no context copy per step, and ``cancel()`` ends
the coroutine (``close()``: its ``finally`` blocks run) instead of raising
CancelledError at its await.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["Prompt", "PromptFuture"]

log = logging.getLogger("shoal.prompt")


def _dropped(_value: Any) -> None:
    """A finished Prompt's callbacks (it calls each at most once)."""


class PromptFuture(asyncio.Future):
    """A future whose ``Prompt`` waiter runs inside ``set_result`` (or ``set_exception``, ``cancel``)."""

    _prompt: Prompt | None = None

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        self._resume()

    def set_exception(self, exception: Any) -> None:
        super().set_exception(exception)
        self._resume()

    def cancel(self, msg: Any = None) -> bool:
        if not super().cancel(msg):
            return False
        self._resume()
        return True

    def _resume(self) -> None:
        prompt = self._prompt
        if prompt is not None:
            self._prompt = None
            prompt._step()


class Prompt:
    """Run `coro` to its end; `on_result(value)` or `on_error(exc)` is called once, unless
    cancelled first."""

    __slots__ = ("__weakref__", "_coro", "_done", "_loop", "_on_error", "_on_result", "_waiting")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        on_result: Callable[[Any], None],
        on_error: Callable[[BaseException], None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._coro = coro
        self._loop = loop or asyncio.get_running_loop()
        self._on_result = on_result
        self._on_error = on_error
        self._waiting: asyncio.Future | None = None
        self._done = False
        self._loop.call_soon(self._step)

    def done(self) -> bool:
        return self._done

    def cancel(self) -> None:
        """Stop: the future waited on is cancelled (so whoever would set it sees it done), the
        coroutine is closed, and neither callback is called."""
        if self._done:
            return
        self._done = True
        self._on_result = self._on_error = _dropped
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            if isinstance(waiting, PromptFuture):
                waiting._prompt = None
            else:
                waiting.remove_done_callback(self._wakeup)
            waiting.cancel()
        self._coro.close()

    def _finish(self, callback: Callable[[Any], None], value: Any) -> None:
        """The one call of `on_result` or `on_error`. It may run inside whoever set a PromptFuture
        (a state write settling for several members): its failure is logged, not passed to them.

        The callbacks are dropped first: the broker's close over this Prompt (to discard it from
        the connection's set), and a cycle per request left to the cyclic collector made its
        collections stall the loop for 50-70 ms about once a second under 32 members."""
        self._done = True
        self._on_result = self._on_error = _dropped
        try:
            callback(value)
        except Exception:
            log.exception("answering a handler failed")

    def _wakeup(self, _future: asyncio.Future) -> None:
        self._step()

    def _step(self) -> None:
        if self._done:
            return
        self._waiting = None
        try:
            # After a wait the coroutine reads the future's result itself (Future.__await__).
            yielded = self._coro.send(None)
        except StopIteration as stop:
            self._finish(self._on_result, stop.value)
            return
        except (KeyboardInterrupt, SystemExit):
            self._done = True
            raise
        except BaseException as exc:  # noqa: BLE001 - the handler's failure (a cancelled wait too) is answered
            self._finish(self._on_error, exc)
            return
        if yielded is None:  # asyncio.sleep(0): give the loop one turn
            self._loop.call_soon(self._step)
            return
        if not getattr(yielded, "_asyncio_future_blocking", False):
            self._coro.close()
            self._finish(self._on_error, RuntimeError(f"a handler awaited {yielded!r}, which is not an asyncio future"))
            return
        yielded._asyncio_future_blocking = False
        self._waiting = yielded
        if isinstance(yielded, PromptFuture) and not yielded.done():
            yielded._prompt = self
        else:
            yielded.add_done_callback(self._wakeup)
