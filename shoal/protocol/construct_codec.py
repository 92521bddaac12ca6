"""Declarative construct structures for every message version, built from the specs.

This is the readable statement of Kafka's wire rules — compact vs. classic
lengths, null markers, tagged-field sections — as `construct` objects, one
`Struct` per (message, version). Two jobs:

* **Diagnostics.** When the compiled fast path (`codegen`) rejects bytes, the
  same bytes are parsed here and construct's error path
  (`topics -> partitions -> records`) plus the stream position name the field
  and offset in the `ProtocolError`.
* **A second opinion.** Tests build messages with these structures and check
  the compiled encoder produces identical bytes, and parse compiled output
  back, so the two implementations keep each other honest.

It is deliberately not the hot path: construct parses into `Container`s
through a stream, which copies record payloads and runs ~10x slower than the
straight-line code `codegen` emits (see benchmarks/codec.py).
"""

from __future__ import annotations

import io
import uuid
from functools import cache
from typing import Any

import construct as C

from shoal.protocol import spec as S
from shoal.protocol.limits import MAX_ARRAY_ELEMENTS, MAX_TAGGED_FIELDS


def _remaining(stream: Any) -> int:
    pos = stream.tell()
    end = stream.seek(0, 2)
    stream.seek(pos)
    return end - pos


class _Length(C.Construct):
    """A length/count prefix: int16/int32 classic, or unsigned varint N+1 compact."""

    def __init__(self, flexible: bool, wide: bool) -> None:
        super().__init__()
        self.flexible = flexible
        self.sub = C.Int32sb if wide else C.Int16sb

    def _parse(self, stream: Any, context: Any, path: str) -> int:
        if self.flexible:
            return C.VarInt._parsereport(stream, context, path) - 1
        return self.sub._parsereport(stream, context, path)

    def _build(self, obj: int, stream: Any, context: Any, path: str) -> int:
        if self.flexible:
            C.VarInt._build(obj + 1, stream, context, path)
        else:
            self.sub._build(obj, stream, context, path)
        return obj


class KBlob(C.Construct):
    """string / bytes / records: length-prefixed, -1 (or compact 0) for null."""

    def __init__(self, text: bool, flexible: bool, nullable: bool) -> None:
        super().__init__()
        self.text = text
        self.nullable = nullable
        self.length = _Length(flexible, wide=not text)

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        n = self.length._parsereport(stream, context, path)
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise C.ConstructError(f"invalid length {n}", path=path)
        if n > _remaining(stream):
            raise C.ConstructError(f"length {n} exceeds the bytes left", path=path)
        data = C.stream_read(stream, n, path)
        return data.decode("utf-8") if self.text else data

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            if not self.nullable:
                raise C.ConstructError("null in a non-nullable field", path=path)
            self.length._build(-1, stream, context, path)
            return obj
        data = obj.encode("utf-8") if self.text else bytes(obj)
        self.length._build(len(data), stream, context, path)
        C.stream_write(stream, data, len(data), path)
        return obj


class KArray(C.Construct):
    """Arrays: count prefix, -1 (or compact 0) for null; count checked before allocation."""

    def __init__(self, subcon: C.Construct, flexible: bool, nullable: bool) -> None:
        super().__init__()
        self.subcon = subcon
        self.nullable = nullable
        self.length = _Length(flexible, wide=True)

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        n = self.length._parsereport(stream, context, path)
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise C.ConstructError(f"invalid array count {n}", path=path)
        if n > MAX_ARRAY_ELEMENTS:
            raise C.ConstructError(f"array count {n} is above {MAX_ARRAY_ELEMENTS}", path=path)
        if n > _remaining(stream):
            raise C.ConstructError(f"array count {n} exceeds the bytes left", path=path)
        return C.ListContainer(self.subcon._parsereport(stream, context, f"{path} -> [{i}]") for i in range(n))

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            if not self.nullable:
                raise C.ConstructError("null array in a non-nullable field", path=path)
            self.length._build(-1, stream, context, path)
            return obj
        self.length._build(len(obj), stream, context, path)
        for i, item in enumerate(obj):
            self.subcon._build(item, stream, context, f"{path} -> [{i}]")
        return obj


class KUuid(C.Adapter):
    def _decode(self, obj: bytes, context: Any, path: str) -> uuid.UUID:
        return uuid.UUID(bytes=obj)

    def _encode(self, obj: uuid.UUID, context: Any, path: str) -> bytes:
        return obj.bytes


class KNullableStruct(C.Construct):
    """A struct-typed field that may be null: int8 marker, -1 null, 1 present."""

    def __init__(self, subcon: C.Construct) -> None:
        super().__init__()
        self.subcon = subcon

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        if C.Int8sb._parsereport(stream, context, path) < 0:
            return None
        return self.subcon._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            C.Int8sb._build(-1, stream, context, path)
        else:
            C.Int8sb._build(1, stream, context, path)
            self.subcon._build(obj, stream, context, path)
        return obj


class KTagged(C.Construct):
    """A tagged-field section: count, then (tag, size, data) for each; unknown tags skipped.

    Parses into a dict attr -> value for the tags this version knows; builds
    from such a dict, writing every entry (callers leave out default values).
    """

    def __init__(self, fields: list[tuple[int, str, C.Construct, Any]]) -> None:
        super().__init__()
        self.by_tag = {tag: (name, sub, default) for tag, name, sub, default in fields}

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        out = C.Container()
        count = C.VarInt._parsereport(stream, context, path)
        if count > MAX_TAGGED_FIELDS or 2 * count > _remaining(stream):
            raise C.ConstructError(f"tagged-field section of {count} fields", path=path)
        for _ in range(count):
            tag = C.VarInt._parsereport(stream, context, path)
            size = C.VarInt._parsereport(stream, context, path)
            if size > _remaining(stream):
                raise C.ConstructError(f"tag {tag} size {size} exceeds the bytes left", path=path)
            data = C.stream_read(stream, size, path)
            known = self.by_tag.get(tag)
            if known is not None:
                name, sub, _ = known
                out[name] = sub._parsereport(io.BytesIO(data), context, f"{path} -> {name}")
        return out

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        items = []
        for tag in sorted(self.by_tag):
            name, sub, _ = self.by_tag[tag]
            if name in (obj or {}):
                items.append((tag, sub.build(obj[name])))
        C.VarInt._build(len(items), stream, context, path)
        for tag, data in items:
            C.VarInt._build(tag, stream, context, path)
            C.VarInt._build(len(data), stream, context, path)
            C.stream_write(stream, data, len(data), path)
        return obj


_FIXED = {
    "bool": C.Flag,
    "int8": C.Int8sb,
    "int16": C.Int16sb,
    "uint16": C.Int16ub,
    "int32": C.Int32sb,
    "uint32": C.Int32ub,
    "int64": C.Int64sb,
    "float64": C.Float64b,
}


def _scalar(t: str, flexible: bool, nullable: bool) -> C.Construct:
    if t in _FIXED:
        return _FIXED[t]
    if t == "uuid":
        return KUuid(C.Bytes(16))
    if t == "string":
        return KBlob(True, flexible, nullable)
    if t in ("bytes", "records"):
        return KBlob(False, flexible, nullable)
    raise ValueError(t)


def _field(f: S.FieldSpec, version: int, flexible: bool) -> C.Construct:
    flex = version in f.flexible_versions if f.flexible_versions is not None else flexible
    if f.is_array:
        if f.struct is not None:
            elem = _struct(f.struct, version, flexible)
        else:
            elem = _scalar(f.element_type, flex, False)
        return KArray(elem, flex, f.nullable(version))
    if f.struct is not None:
        sub = _struct(f.struct, version, flexible)
        return KNullableStruct(sub) if f.nullable(version) else sub
    return _scalar(f.type, flex, f.nullable(version))


def _struct(st: S.StructSpec, version: int, flexible: bool) -> C.Construct:
    regular, tagged = st.fields_in(version)
    subcons = [f.attr / _field(f, version, flexible) for f in regular]
    if flexible:
        tags: list[tuple[int, str, C.Construct, Any]] = [
            (f.tag_id, f.attr, _field(f, version, flexible), None) for f in tagged
        ]
        subcons.append("_tagged" / KTagged(tags))
    return C.Struct(*subcons)


@cache
def structure(message: S.MessageSpec, version: int) -> C.Construct:
    """The construct Struct for one message version."""
    return _struct(message.struct, version, message.flexible(version))


def locate_failure(message: S.MessageSpec, version: int, data: bytes) -> tuple[str, int | None]:
    """Parse `data` with construct; on failure return (field path, byte offset)."""
    stream = io.BytesIO(data)
    try:
        structure(message, version).parse_stream(stream)
    except C.ConstructError as e:
        path = (e.path or "").replace("(parsing)", "").strip(" ->")
        return path, stream.tell()
    return "", None


def to_plain(message: S.MessageSpec, version: int, obj: Any, st: S.StructSpec | None = None) -> Any:
    """A message object as construct's input: nested dicts, tagged values under `_tagged`."""
    st = st or message.struct
    regular, tagged = st.fields_in(version)
    out: dict[str, Any] = {}

    def conv(f: S.FieldSpec, value: Any) -> Any:
        if value is None or f.struct is None:
            return value
        if f.is_array:
            return [to_plain(message, version, v, f.struct) for v in value]
        return to_plain(message, version, value, f.struct)

    for f in regular:
        out[f.attr] = conv(f, getattr(obj, f.attr))
    if message.flexible(version):
        cls = type(obj)
        out["_tagged"] = {
            f.attr: conv(f, getattr(obj, f.attr))
            for f in tagged
            if not _is_default(getattr(obj, f.attr), getattr(cls(), f.attr))
        }
    return out


def _is_default(value: Any, default: Any) -> bool:
    if isinstance(default, list):
        return value is not None and len(value) == 0
    return value == default


def build(message: S.MessageSpec, version: int, obj: Any) -> bytes:
    return structure(message, version).build(to_plain(message, version, obj))


def parse(message: S.MessageSpec, version: int, data: bytes) -> Any:
    return structure(message, version).parse(data)
