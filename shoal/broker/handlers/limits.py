"""Identifiers checked at the request boundary, before any state changes.

A group id, member id or group instance id ends up in the key of a coordinator record, whose
strings carry an int16 length: 32,767 bytes at most. A longer one used to be accepted into
memory and then fail to encode (the runtime now reverts such a write, but the member had been
told nothing useful). Refused up front: a group id with INVALID_GROUP_ID (what Kafka answers
for a group id it will not take), a member or instance id with INVALID_REQUEST.
"""

from __future__ import annotations

from shoal.protocol.errors import ErrorCode

MAX_ID_BYTES = 32767  # an int16-length string in a coordinator record


def _too_long(s: str | None) -> bool:
    return s is not None and len(s) > MAX_ID_BYTES // 4 and len(s.encode()) > MAX_ID_BYTES


def id_error(group_id: str | None, *member_ids: str | None) -> tuple[int, str] | None:
    """(error code, message) when an identifier cannot be stored, else None."""
    if _too_long(group_id):
        return int(ErrorCode.INVALID_GROUP_ID), f"The group id is longer than {MAX_ID_BYTES} bytes."
    if any(_too_long(m) for m in member_ids):
        return int(ErrorCode.INVALID_REQUEST), f"A member or instance id is longer than {MAX_ID_BYTES} bytes."
    return None
