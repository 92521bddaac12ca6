"""The message classes, one per spec in `shoal/schemas/`: ``messages.ProduceRequest`` and friends.

The classes are built on first use by `message_factory`; nothing here is written
per message. Type checkers and IDEs read `messages.pyi` instead of this file: it
is generated from the same specs (``python -m shoal.protocol.stubgen``) and
declares every class with its fields and their Python types, and a test fails
when it falls behind the specs.
"""

from __future__ import annotations

from shoal.protocol import spec as _spec
from shoal.protocol.message_factory import ZERO_UUID, MessageClass, classes_for, message_class

__all__ = ["ZERO_UUID", "MessageClass", "classes_for", "message_class"]


def __getattr__(name: str) -> MessageClass:
    # messages.ProduceRequest and friends, built on first use.
    try:
        _spec.load(name)
    except FileNotFoundError:
        raise AttributeError(name) from None
    return message_class(name)
