"""Kafka's protocol error codes: the table, its lookups, and ``ErrorCode`` built from it.

The rows and everything derived from them live in `error_table`; this module
re-exports them and adds ``ErrorCode``, an ``IntEnum`` whose members are made
from the rows at import (``ErrorCode.NOT_COORDINATOR == 16``). Type checkers and
IDEs read `errors.pyi` instead, which ``python -m shoal.protocol.stubgen`` generates
from the same rows, so every member is visible to them and a misspelt one is an
error; a test fails when the stub falls behind the table.
"""

from __future__ import annotations

from shoal.protocol.error_table import (
    ERRORS,
    UNKNOWN_NAME,
    KafkaError,
    _ErrorCodeBase,
    by_name,
    error_for,
)

__all__ = [
    "ERRORS",
    "UNKNOWN_NAME",
    "ErrorCode",
    "KafkaError",
    "by_name",
    "error_for",
]

ErrorCode = _ErrorCodeBase(
    "ErrorCode",
    [(e.name, e.code) for e in ERRORS],
    module=__name__,
    qualname="ErrorCode",
)
ErrorCode.__doc__ = (
    "Kafka error codes by name; each member equals its int16 wire value, e.g. ErrorCode.NOT_COORDINATOR == 16."
)
