"""Exceptions raised by the bundled client.

Why one small hierarchy: callers need exactly two decisions from an error —
"was it my fault" (configuration, misuse: fix the code) and "may I retry"
(the broker or the network was briefly unable). Every exception here carries
``retriable``; broker error codes keep their Kafka name and number through
``BrokerResponseError`` ("the broker answered with this code"). Its older name,
``KafkaErrorResponse``, stays as an alias; the broker's own exception, which
means "answer with this code", is ``broker.errors.ErrorAnswer``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shoal.protocol.errors import KafkaError, error_for

__all__ = [
    "BrokerResponseError",
    "ClientClosedError",
    "CommitFailedError",
    "ConfigError",
    "IllegalStateError",
    "InvalidOffsetError",
    "KafkaClientError",
    "KafkaConnectionError",
    "KafkaErrorResponse",
    "KafkaTimeoutError",
    "NoOffsetForPartitionError",
    "OffsetOutOfRangeError",
    "RebalanceInProgressError",
    "RecordDeserializationError",
    "SaslAuthenticationError",
    "UnsupportedVersionError",
    "raise_for_code",
]


class KafkaClientError(Exception):
    """Base of every error the client raises."""

    retriable: bool = False


class ConfigError(KafkaClientError, ValueError):
    """A configuration key is unknown or its value is invalid.

    ``key`` names the offending setting (Kafka's dotted spelling).
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"invalid configuration {key!r}: {reason}")


class KafkaConnectionError(KafkaClientError):
    """A connection to a broker could not be opened or was lost mid-request."""

    retriable = True


class SaslAuthenticationError(KafkaConnectionError):
    """The broker refused our SASL login (a wrong password, an unknown user, a mechanism it does
    not enable), or did not prove it knows our SCRAM credential. Not retried: it would fail again."""

    retriable = False


class KafkaTimeoutError(KafkaClientError, TimeoutError):
    """A request or an operation did not finish within its time limit."""

    retriable = True


class UnsupportedVersionError(KafkaClientError):
    """The broker speaks no version of an API this client can use."""


class IllegalStateError(KafkaClientError):
    """The application used the client in a way its state does not allow
    (acknowledging a record twice, polling a closed consumer, ...)."""


class ClientClosedError(IllegalStateError):
    """The client was closed."""


class CommitFailedError(KafkaClientError):
    """An offset commit cannot succeed: the group rebalanced and the
    partitions may now belong to another member."""


class RebalanceInProgressError(CommitFailedError):
    """An offset commit was refused because the group is rebalancing; after the
    next poll completes the rebalance, committing again may succeed."""

    retriable = True


class InvalidOffsetError(KafkaClientError):
    """A consumer has no valid position for ``partitions`` and ``auto.offset.reset``
    is "none": the application must ``seek`` them."""

    def __init__(self, message: str, partitions: Iterable[Any] = ()) -> None:
        super().__init__(message)
        self.partitions = frozenset(partitions)


class NoOffsetForPartitionError(InvalidOffsetError):
    """No committed offset to start from."""


class OffsetOutOfRangeError(InvalidOffsetError):
    """The fetch position is outside the partition's log."""


class RecordDeserializationError(KafkaClientError):
    """A key or value deserializer failed on the record at ``offset`` of ``partition``.

    As in Kafka, the consumer's position stays at that record: every poll
    raises again until the application seeks past it. ``__cause__`` holds the
    deserializer's own exception.
    """

    def __init__(self, partition: Any, offset: int, cause: BaseException) -> None:
        super().__init__(f"cannot deserialize the record at offset {offset} of {partition}: {cause!r}")
        self.partition = partition
        self.offset = offset
        self.__cause__ = cause


class BrokerResponseError(KafkaClientError):
    """A broker answered with a non-zero error code.

    Carries the error table's entry as ``error`` (``code``, ``name`` and
    ``retriable`` read from it). ``detail`` is the free-text error_message some
    responses include, or what the client adds about where the code came from;
    when present it is shown instead of the table's default message.
    """

    def __init__(self, error: KafkaError | int, detail: str | None = None) -> None:
        if not isinstance(error, KafkaError):
            error = error_for(error)
        self.error = error
        self.detail = detail
        super().__init__(f"{error.name} ({error.code}): {detail or error.message}")

    @property
    def code(self) -> int:
        return self.error.code

    @property
    def name(self) -> str:
        return self.error.name

    @property
    def retriable(self) -> bool:  # type: ignore[override]  # read-only here: the error's own flag
        return self.error.retriable

    def __reduce__(self) -> tuple[object, ...]:
        # The default would re-create us from the rendered string alone.
        return (type(self), (self.error, self.detail))


KafkaErrorResponse = BrokerResponseError
"""The former name of ``BrokerResponseError`` (it lived in ``protocol.errors``), kept for callers."""


def raise_for_code(code: int, detail: str | None = None) -> None:
    """Raise ``BrokerResponseError`` unless ``code`` is 0."""
    if code:
        raise BrokerResponseError(error_for(code), detail)
