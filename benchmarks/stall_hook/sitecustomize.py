"""Starts benchmarks/stall_watch.py in a broker process when SHOAL_STALL_WATCH names a report file.

Python imports ``sitecustomize`` at start-up from the path, so putting this directory on
PYTHONPATH of a broker child (``share_scaling.py --stalls``) is enough: ``uvloop.run`` and
``asyncio.run`` are wrapped so the watcher starts on the loop's thread once it runs.
"""

from __future__ import annotations

import asyncio
import os
import sys

_PATH = os.environ.get("SHOAL_STALL_WATCH")


def _wrap(run):
    def wrapped(main, *args, **kwargs):
        async def watched():
            sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            import stall_watch

            stall_watch.install(asyncio.get_running_loop(), _PATH)
            return await main

        return run(watched(), *args, **kwargs)

    return wrapped


if _PATH:
    asyncio.run = _wrap(asyncio.run)
    try:
        import uvloop

        uvloop.run = _wrap(uvloop.run)
    except ImportError:
        pass
