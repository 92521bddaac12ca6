"""Shoal: a Kafka-compatible broker whose headline is share groups, its asyncio client, and a test kit.

Everything lives under this one name: ``shoal.broker``, ``shoal.client``,
``shoal.protocol`` and ``shoal.schemas`` (in the repository those are the
top-level folders ``broker/``, ``client/``, ``protocol/`` and ``schemas/``;
setup.py installs them here), and ``shoal.testing`` with its pytest plugin.
The names people reach for first are importable from here directly::

    from shoal import AsyncProducer, AsyncShareConsumer, EmbeddedBroker

They load on first use, so ``import shoal`` costs nothing until then.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# In a source checkout the sub-packages are the folders beside this one (an
# installed wheel has them inside it): looking there too lets a checkout on
# PYTHONPATH import ``shoal.broker`` without an install, as an editable install does.
_here = os.path.dirname(os.path.abspath(__file__))
_checkout = os.path.dirname(_here)
if not os.path.isdir(os.path.join(_here, "broker")) and os.path.isfile(os.path.join(_checkout, "setup.py")):
    __path__.append(_checkout)  # type: ignore[name-defined]

from shoal.client import __all__ as _CLIENT_NAMES  # noqa: E402  (shoal.client loads its names lazily too)

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
