"""Build the message dataclasses from the specs at run time.

One slotted dataclass per struct of a message (the top level included), holding
the union of fields of every version, with snake_case names and the spec's
defaults — the same shape Kafka's generated `*Data` classes have. A codec for a
given version reads and writes the fields that version has and leaves the
others at their defaults. Nested struct classes hang off the top-level class
(`ProduceRequest.TopicProduceData`) so two messages may both define a struct
called `Topic` without clashing.

Nothing here is written by hand per message: adding a field to a JSON file is
all it takes. Why a module apart from `messages`: `messages` is the public face
(``messages.ProduceRequest``) whose types a checker reads from the generated
`messages.pyi`; a stub hides its module's body from the checker, so the
machinery lives here, where mypy still checks it.
"""

from __future__ import annotations

import dataclasses
import uuid
from functools import cache
from typing import Any

from shoal.protocol import spec as _spec

ZERO_UUID = uuid.UUID(int=0)

_PUBLIC_MODULE = "shoal.protocol.messages"

# A class generated at run time from a spec, looked up by name. Looked up by attribute
# (``messages.ProduceRequest``) it has the type declared in the generated messages.pyi;
# by a name only known at run time, a checker cannot tell which class it is.
MessageClass = Any

_PY_TYPES: dict[str, Any] = {
    "bool": bool,
    "int8": int,
    "int16": int,
    "uint16": int,
    "int32": int,
    "uint32": int,
    "int64": int,
    "float64": float,
    "string": str,
    "bytes": bytes,
    "uuid": uuid.UUID,
    "records": "memoryview | bytes | None",
}


def _default_spec(f: _spec.FieldSpec, classes: dict[str, MessageClass]) -> Any:
    if f.is_array:
        if f.default is None:
            return dataclasses.field(default=None)
        return dataclasses.field(default_factory=list)
    if f.struct is not None:
        if f.default is None:
            return dataclasses.field(default=None)
        cls = classes[f.struct.name]
        return dataclasses.field(default_factory=cls)
    return dataclasses.field(default=f.default)


def _make_struct(
    message: _spec.MessageSpec, struct: _spec.StructSpec, classes: dict[str, MessageClass]
) -> MessageClass:
    if struct.name in classes:
        return classes[struct.name]
    for f in struct.fields:
        if f.struct is not None:
            _make_struct(message, f.struct, classes)
    cls_fields = []
    for f in struct.fields:
        if f.is_array:
            inner = f.struct.name if f.struct is not None else _PY_TYPES[f.element_type]
            annotation: Any = f"list[{getattr(inner, '__name__', inner)}]"
        elif f.struct is not None:
            annotation = f.struct.name
        else:
            annotation = _PY_TYPES[f.type]
        cls_fields.append((f.attr, annotation, _default_spec(f, classes)))
    cls = dataclasses.make_dataclass(
        struct.name,
        cls_fields,
        slots=True,
        namespace={"__doc__": f"{message.name}: {struct.name} (generated from shoal/schemas/)."},
    )
    cls.__module__ = _PUBLIC_MODULE  # where pickle and reprs find it: messages.ProduceRequest
    if struct is not message.struct:
        cls.__qualname__ = f"{message.name}.{struct.name}"
    classes[struct.name] = cls
    return cls


@cache
def classes_for(name: str) -> dict[str, MessageClass]:
    """All dataclasses of one spec file, keyed by struct name (top level included)."""
    message = _spec.load(name)
    classes: dict[str, MessageClass] = {}
    top = _make_struct(message, message.struct, classes)
    for struct_name, cls in classes.items():
        if cls is not top and not hasattr(top, struct_name):
            setattr(top, struct_name, cls)
    top.SPEC = message
    top.API_KEY = message.api_key
    return classes


def message_class(name: str) -> MessageClass:
    """The top-level dataclass of a spec, e.g. message_class("ProduceRequest")."""
    return classes_for(name)[_spec.load(name).name]
