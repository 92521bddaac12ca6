"""Bounds a decoder enforces on counts read from the wire, before it allocates anything.

Why absolute caps on top of the "count against the bytes left" rule both decoders already apply
(Kafka's own generated readers refuse an array whose count exceeds the bytes remaining): a
frame may be as large as ``socket.request.max.bytes`` (100 MiB), so "fits in the bytes left"
still admits a list of a hundred million one-byte elements, or a tagged-field section whose
loop runs millions of times over empty fields. No Kafka request or response carries more than a
million elements in one array or ten thousand tagged fields in one section, so a count above
these is hostile or corrupt and the frame is refused (a ``ProtocolError``; the broker's
connection answers what it took before and closes, as Kafka closes a connection whose request
does not parse).

Both the compiled decoder (``codegen``) and the construct description (``construct_codec``)
read these two numbers from here, so the fast path and the reference path agree.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_ARRAY_ELEMENTS", "MAX_TAGGED_FIELDS"]

MAX_ARRAY_ELEMENTS: Final = 1_000_000
"""Most elements one array field may hold."""

MAX_TAGGED_FIELDS: Final = 10_000
"""Most fields one tagged-field section may hold."""
