"""The one exception every decoder in `protocol` raises on bad input.

Why a single type: the broker's network layer must turn *any* malformed input
into either a Kafka error code or a closed connection, and must never be taken
down by an IndexError or struct.error that slipped out of some corner of the
codec. Every decoder therefore converts low-level failures into ProtocolError,
which carries enough context (API key, version, field path, byte offset) to
write one useful log line.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Bytes that do not decode (or a value that cannot be encoded).

    Attributes are best effort: a frame-level failure has no field path, a
    record-batch failure has no API key.
    """

    def __init__(
        self,
        message: str,
        *,
        api_key: int | None = None,
        version: int | None = None,
        path: str = "",
        offset: int | None = None,
    ) -> None:
        self.message = message
        self.api_key = api_key
        self.version = version
        self.path = path
        self.offset = offset
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.api_key is not None:
            where.append(f"api_key={self.api_key}")
        if self.version is not None:
            where.append(f"version={self.version}")
        if self.path:
            where.append(f"field={self.path}")
        if self.offset is not None:
            where.append(f"offset={self.offset}")
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def with_context(
        self,
        *,
        api_key: int | None = None,
        version: int | None = None,
        path: str | None = None,
        offset: int | None = None,
    ) -> ProtocolError:
        """Fill in context that an outer layer knows and the inner one did not."""
        if self.api_key is None:
            self.api_key = api_key
        if self.version is None:
            self.version = version
        if path and not self.path:
            self.path = path
        if self.offset is None:
            self.offset = offset
        self.args = (self._render(),)
        return self
