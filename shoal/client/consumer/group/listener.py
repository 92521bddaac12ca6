"""Running one callback of the application's rebalance listener, for both group protocols.

Why its own module: the classic coordinator and the KIP-848 member call the
listener the same way (the method may be missing, may be sync or async, and
``on_partitions_lost`` falls back to ``on_partitions_revoked`` as Kafka's
default does), and an exception it raises must not break the rebalance
itself: it is logged and handed back, so the next poll can raise it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Set

from shoal.client.core.cluster import TopicPartition

__all__ = ["invoke_listener"]

log = logging.getLogger("shoal.client.group")


async def invoke_listener(listener: object | None, method: str, partitions: Set[TopicPartition]) -> Exception | None:
    """Call ``listener.<method>`` with a copy of ``partitions``; the exception it raised, if any."""
    fn = getattr(listener, method, None) if listener is not None else None
    if fn is None and method == "on_partitions_lost" and listener is not None:
        fn = getattr(listener, "on_partitions_revoked", None)
    if fn is None:
        return None
    try:
        result = fn(set(partitions))
        if inspect.isawaitable(result):
            await result
    except Exception as e:
        log.exception("rebalance listener %s failed", method)
        return e
    return None
