"""Records of the internal topics (__consumer_offsets, __share_group_state)
and other version-prefixed payloads (consumer-protocol metadata).

Kafka stores a coordinator record as an ordinary log record whose key is
`int16 record type` + the key struct, and whose value is `int16 version` +
the value struct at that version (null value = tombstone). The record type is
the `apiKey` of the key/value specs; types are numbered per coordinator, so
the group coordinator's type 1 (OffsetCommit) and the share coordinator's
type 1 (ShareUpdate) are different records. A `RecordSerde` is bound to one
coordinator.

Consumer-protocol subscriptions/assignments (the opaque bytes of JoinGroup /
SyncGroup for protocol type "consumer") are `int16 version` + struct as well.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from shoal.protocol import spec as S
from shoal.protocol.api import codec
from shoal.protocol.exceptions import ProtocolError

_I16 = struct.Struct(">h")

# Records written by the share coordinator; everything else of type
# coordinator-key/-value belongs to the group coordinator.
SHARE_COORDINATOR_RECORDS = frozenset({"ShareSnapshot", "ShareUpdate"})


@dataclass(frozen=True, slots=True)
class RecordType:
    type_id: int
    name: str  # e.g. "OffsetCommit"
    key: S.MessageSpec
    value: S.MessageSpec


@dataclass(slots=True)
class CoordinatorRecord:
    """A decoded coordinator record: key object, value object (None = tombstone)."""

    type: RecordType
    key: Any
    value: Any
    value_version: int = 0


class RecordSerde:
    """Encode/decode the records of one coordinator ("group" or "share")."""

    def __init__(self, coordinator: str) -> None:
        if coordinator not in ("group", "share"):
            raise ValueError(coordinator)
        self.coordinator = coordinator
        self.types: dict[int, RecordType] = {}
        self.by_name: dict[str, RecordType] = {}
        specs = S.all_specs()
        for name, key in specs.items():
            if key.type != "coordinator-key":
                continue
            base = name.removesuffix("Key")
            if (base in SHARE_COORDINATOR_RECORDS) != (coordinator == "share"):
                continue
            value = specs[base + "Value"]
            if key.api_key is None:
                raise ValueError(f"coordinator record {name} has no type id (apiKey)")
            rt = RecordType(key.api_key, base, key, value)
            if rt.type_id in self.types:
                raise ValueError(f"record type {rt.type_id} defined twice")
            self.types[rt.type_id] = rt
            self.by_name[base] = rt

    def record_type(self, name: str) -> RecordType:
        return self.by_name[name]

    def latest_value_version(self, name: str) -> int:
        return self.by_name[name].value.valid_versions.hi or 0

    def key_class(self, name: str) -> Any:
        return codec(self.by_name[name].key.name, 0).cls

    def value_class(self, name: str) -> Any:
        rt = self.by_name[name]
        return codec(rt.value.name, rt.value.valid_versions.lo).cls

    def encode_key(self, name: str, key: Any) -> bytes:
        rt = self.by_name[name]
        return _I16.pack(rt.type_id) + codec(rt.key.name, 0).encode(key)

    def encode_value(self, name: str, value: Any, version: int | None = None) -> bytes | None:
        if value is None:
            return None
        rt = self.by_name[name]
        if version is None:
            version = rt.value.valid_versions.hi or 0
        return _I16.pack(version) + codec(rt.value.name, version).encode(value)

    def decode(self, key: Any, value: Any) -> CoordinatorRecord:
        """Decode a stored record; raises ProtocolError for unknown types or bad bytes."""
        if key is None or len(key) < 2:
            raise ProtocolError("coordinator record key too short", path="key", offset=0)
        (type_id,) = _I16.unpack_from(key, 0)
        rt = self.types.get(type_id)
        if rt is None:
            raise ProtocolError(f"unknown {self.coordinator} coordinator record type {type_id}")
        key_obj, _ = codec(rt.key.name, 0).decode(key, 2)
        if value is None:
            return CoordinatorRecord(rt, key_obj, None)
        if len(value) < 2:
            raise ProtocolError("coordinator record value too short", path="value", offset=0)
        (version,) = _I16.unpack_from(value, 0)
        if version not in rt.value.valid_versions:
            raise ProtocolError(f"{rt.value.name} has no version {version}", path="value", offset=0)
        value_obj, _ = codec(rt.value.name, version).decode(value, 2)
        return CoordinatorRecord(rt, key_obj, value_obj, version)


@cache
def serde(coordinator: str) -> RecordSerde:
    return RecordSerde(coordinator)


def encode_versioned(name: str, version: int, obj: Any) -> bytes:
    """`int16 version` + struct, for version-prefixed data specs (consumer protocol)."""
    return _I16.pack(version) + codec(name, version).encode(obj)


def decode_versioned(name: str, data: Any) -> tuple[int, Any]:
    """Decode a version-prefixed payload. A newer version than we know is read
    with our newest layout, as Kafka's consumer protocol allows (fields are
    only ever appended)."""
    if data is None or len(data) < 2:
        raise ProtocolError(f"{name}: payload shorter than its version", offset=0)
    (version,) = _I16.unpack_from(data, 0)
    message = S.load(name)
    if version < message.valid_versions.lo:
        raise ProtocolError(f"{name}: unknown version {version}", offset=0)
    use = min(version, message.valid_versions.hi or version)
    obj, _ = codec(name, use).decode(data, 2)
    return version, obj
