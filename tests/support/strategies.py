"""Hypothesis strategies derived from the message specs.

`message(spec, version)` draws an instance of the spec's dataclass in which
every field the version has gets a random value of its wire type (nulls where
the version allows them) and every other field keeps its default — exactly
the objects a codec for that version must round-trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from shoal.protocol import spec as S
from shoal.protocol.errors import ERRORS
from shoal.protocol.messages import classes_for

_INT = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

_ERROR_CODES = [e.code for e in ERRORS]

# A hook to narrow a field's values: (struct name, field) -> strategy or None.
Override = Callable[[S.StructSpec, S.FieldSpec, int], st.SearchStrategy | None]


def scalar(t: str, f: S.FieldSpec) -> st.SearchStrategy:
    if t in _INT:
        if f.name == "ErrorCode" and t == "int16":
            return st.sampled_from(_ERROR_CODES)
        lo, hi = _INT[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(max_size=12)
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    if t == "uuid":
        return st.uuids().filter(lambda u: u.int != 0)
    raise ValueError(t)


def message(
    message_spec: S.MessageSpec,
    version: int,
    override: Override | None = None,
    max_items: int = 3,
) -> st.SearchStrategy:
    classes = classes_for(message_spec.name)

    def struct(sp: S.StructSpec) -> st.SearchStrategy:
        kwargs: dict[str, st.SearchStrategy] = {}
        regular, tagged = sp.fields_in(version)
        for f in regular + tagged:
            s = override(sp, f, version) if override else None
            if s is None:
                s = field(f)
            kwargs[f.attr] = s
        return st.builds(classes[sp.name], **kwargs)

    def field(f: S.FieldSpec) -> st.SearchStrategy:
        if f.is_array:
            if f.struct is not None:
                inner = struct(f.struct)
            else:
                inner = scalar(f.element_type, f)
            s: st.SearchStrategy[Any] = st.lists(inner, max_size=max_items)
        elif f.struct is not None:
            s = struct(f.struct)
        else:
            s = scalar(f.type, f)
        if f.nullable(version):
            s = st.none() | s
        return s

    return struct(message_spec.struct)
