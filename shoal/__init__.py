"""Shoal: a Kafka-compatible broker whose headline is share groups, its asyncio client, and a test kit.

Everything lives under this one name: ``shoal.broker``, ``shoal.client``,
``shoal.protocol``, ``shoal.schemas``, and ``shoal.testing`` with its pytest
plugin (ARCHITECTURE.md at the repository's root maps them).
The names people reach for first are importable from here directly::

    from shoal import AsyncProducer, AsyncShareConsumer, EmbeddedBroker

They load on first use, so ``import shoal`` costs nothing until then.
"""

from __future__ import annotations

import importlib
from typing import Any

from shoal.client import __all__ as _CLIENT_NAMES  # shoal.client loads its names lazily too

# name -> module that holds it: the client's public names (through shoal.client) and the test kit's
_EXPORTS = {
    **dict.fromkeys(_CLIENT_NAMES, "shoal.client"),
    "ErrorCode": "shoal.protocol.errors",
    "EmbeddedBroker": "shoal.testing",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shoal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
