"""What a client is told when a coordinator's write fails.

Kafka's group and share coordinators turn the error of a failed append into
one a client knows how to handle (GroupCoordinatorService's normalization):
storage and leadership errors become NOT_COORDINATOR (find the coordinator
again), replication timeouts COORDINATOR_NOT_AVAILABLE (retry), and a batch
the log refuses as too large UNKNOWN_SERVER_ERROR (retrying cannot help).
Sans-IO: the classic group core maps its own SyncGroup failures with it.
"""

from __future__ import annotations

from shoal.broker.errors import ErrorAnswer
from shoal.protocol.errors import ErrorCode
from shoal.protocol.exceptions import ProtocolError


def append_error_to_response(code: int) -> int:
    """Kafka's normalization of an append error for the client of a coordinator write."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


def append_error_code(exc: BaseException | None) -> int:
    """The Kafka error of a failed append, before normalization (NONE for no error)."""
    if exc is None:
        return ErrorCode.NONE
    if isinstance(exc, ErrorAnswer):
        return exc.code
    code = getattr(exc, "error_code", None)  # the log's own errors carry theirs
    if isinstance(code, int):
        return code
    if isinstance(exc, OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    if isinstance(exc, ProtocolError | ValueError | OverflowError):
        return ErrorCode.UNKNOWN_SERVER_ERROR  # records that cannot be encoded: retrying cannot help
    return ErrorCode.NOT_COORDINATOR  # the coordinator is shutting down (flusher closed, task cancelled)


def write_failure(exc: BaseException) -> ErrorAnswer:
    """The error a coordinator write's client gets for `exc`."""
    if isinstance(exc, ErrorAnswer):
        return ErrorAnswer(append_error_to_response(exc.code), exc.message)
    return ErrorAnswer(append_error_to_response(append_error_code(exc)), f"the coordinator's write failed: {exc}")
