"""The broker's one exception for refusing an operation: ``ErrorAnswer``.

Why an exception of its own: the checks that refuse a request (or one topic,
partition, group or resource of it) often sit several calls below the handler
that writes the response: a topic name checked by the topic table, a batch the
partition will not append, a coordinator write the log refused, a storage
error. Raising carries the Kafka error code and message back to the one place
per item that fills in the response's ``error_code`` and ``error_message``.

Why not the protocol's or the client's exception: the client's
``BrokerResponseError`` means "a broker answered with this code"; this one means
"answer with this code". Two names, one meaning each.

What it is not for (see ARCHITECTURE.md, "Errors"): the sans-IO state machines
(groups, share partitions, sessions, shards) return their refusals (an
``ErrorCode``, or a result that carries one) instead of raising;
undecodable bytes are ``protocol.exceptions.ProtocolError`` (the connection is
closed); anything else that escapes a handler is a bug, logged with its
traceback, and the connection is closed. Pure: no I/O, no asyncio.
"""

from __future__ import annotations

from shoal.protocol.errors import error_for

__all__ = ["ErrorAnswer"]


class ErrorAnswer(Exception):
    """Stop this operation: the request, or the item of it being handled, is answered with ``code``.

    ``message`` goes into the response's error_message field where the API has
    one; None leaves it null (clients then show the code's standard text).
    ``str()`` reads ``NAME (code): message``, for logs.
    """

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = int(code)
        self.message = message
        error = error_for(self.code)
        super().__init__(f"{error.name} ({error.code}): {message or error.message}")

    @property
    def name(self) -> str:
        """The code's Kafka name (``NOT_COORDINATOR``)."""
        return error_for(self.code).name

    def __reduce__(self) -> tuple[object, ...]:
        # The default would re-create us from the rendered string alone.
        return (type(self), (self.code, self.message))
