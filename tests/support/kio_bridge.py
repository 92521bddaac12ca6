"""Translate our message objects to kio's, so kio (Kafka's own specs as Python
types, with a native decoder) can judge our bytes.

kio has one frozen dataclass per (message, version) with Kafka's field names in
snake_case, except that `...Ms` durations and timestamps become timedelta /
datetime fields without the `_ms` suffix, error codes become its ErrorCode
enum, and the zero UUID becomes None. Everything else maps one to one.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import types
import typing
import uuid
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from shoal.protocol import spec as S

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@cache
def kio_class(name: str, version: int) -> type:
    message = S.load(name)
    if message.type == "header":
        mod_name = "request_header" if name == "RequestHeader" else "response_header"
        module = __import__(f"kio.schema.{mod_name}.v{version}.header", fromlist=["x"])
        return getattr(module, name)
    kind = EntityType.request if message.type == "request" else EntityType.response
    module = load_payload_module(message.api_key, version, kind)
    return getattr(module, message.name)


def kio_versions(name: str) -> list[int]:
    """The versions kio defines for a spec (its modules that import)."""
    out = []
    for v in range(0, 40):
        try:
            kio_class(name, v)
        except Exception:  # noqa: BLE001 - kio raises several types for unknown versions
            continue
        out.append(v)
    return out


def _entity_of(annotation: Any) -> tuple[type | None, bool]:
    """(entity class or None, is_tuple) from a kio field annotation."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        inner = typing.get_args(annotation)[0]
        cls, _ = _entity_of(inner)
        return cls, True
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _entity_of(arg)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation, False
    return None, False


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _our_attr(obj: Any, name: str) -> str:
    if hasattr(obj, name):
        return name
    if hasattr(obj, name + "_ms"):
        return name + "_ms"
    raise AttributeError(f"{type(obj).__qualname__} has no field for kio's {name}")


def _scalar_to_kio(kafka_type: str | None, value: Any, optional: bool) -> Any:
    if value is None:
        return None
    if kafka_type == "error_code":
        return ErrorCode(value)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64":
        if value == -1 and optional:
            return None
        return _EPOCH + datetime.timedelta(milliseconds=value)
    if kafka_type == "uuid":
        return None if value.int == 0 else value
    if kafka_type in ("bytes", "records") and isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def to_kio(obj: Any, kcls: type) -> Any:
    hints = _hints(kcls)
    kwargs = {}
    for f in dataclasses.fields(kcls):
        value = getattr(obj, _our_attr(obj, f.name))
        entity, is_tuple = _entity_of(hints[f.name])
        kafka_type = f.metadata.get("kafka_type")
        annotation = hints[f.name]
        optional = typing.get_origin(annotation) in (typing.Union, types.UnionType)
        if entity is not None:
            if value is None:
                kwargs[f.name] = None
            elif is_tuple:
                kwargs[f.name] = tuple(to_kio(v, entity) for v in value)
            else:
                kwargs[f.name] = to_kio(value, entity)
        elif is_tuple:
            kwargs[f.name] = None if value is None else tuple(_scalar_to_kio(kafka_type, v, False) for v in value)
        else:
            kwargs[f.name] = _scalar_to_kio(kafka_type, value, optional)
    return kcls(**kwargs)


def kio_encode(kobj: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(kobj))(buf, kobj)
    return buf.getvalue()


def kio_decode(kcls: type, data: bytes) -> tuple[Any, int]:
    value, size = entity_reader(kcls)(data, 0)
    return value, size


def time_fields(kcls: type) -> set[tuple[str, str]]:
    """(struct class name, our attr) of kio's 64-bit datetime/timedelta fields.

    kio converts those to datetime/timedelta, which cannot hold every int64;
    tests keep such values in a range both sides represent exactly.
    """
    out: set[tuple[str, str]] = set()
    seen: set[type] = set()

    def walk(cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        hints = _hints(cls)
        for f in dataclasses.fields(cls):
            if f.metadata.get("kafka_type") in ("datetime_i64", "timedelta_i64"):
                out.add((cls.__name__, f.name + "_ms"))
                out.add((cls.__name__, f.name))
            entity, _ = _entity_of(hints[f.name])
            if entity is not None:
                walk(entity)

    walk(kcls)
    return out


def fresh_uuid() -> uuid.UUID:
    return uuid.uuid4()
