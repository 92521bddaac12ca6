"""Two asyncio idioms every background loop of the clients uses (heartbeats, metadata refresh).

Why here: each loop sleeps until either its event is set or its deadline
passes, and each is stopped by cancelling its task and waiting for it to
end without letting what it raised escape into a close. Written once, the
loops read as what they decide rather than how they wait.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["cancel_quietly", "wait_for_event"]


async def wait_for_event(event: asyncio.Event, timeout_ms: float | None) -> None:
    """Clear ``event`` and wait until it is set again or ``timeout_ms`` passes (None: no limit)."""
    event.clear()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
            await event.wait()


async def cancel_quietly(task: asyncio.Task | None) -> None:
    """Cancel ``task`` and wait for it to end; what it raised (its cancellation included) is dropped."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
