"""Load the JSON message specs in `shoal/schemas/` into a small typed model.

Why a model of its own: both code generators (the construct structures in
`construct_codec` and the compiled fast path in `codegen`) and the test
strategies walk the same facts — which fields exist in which version, which
are nullable or tagged, what the defaults are. Parsing the JSON once into
frozen objects keeps those rules (version ranges, "null" defaults, struct
references through commonStructs, field-level flexibleVersions) in one place.

The file format is Apache Kafka's message spec format, `//` comments included.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import shoal.schemas as _schemas_pkg

PRIMITIVES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "float64",
        "string",
        "bytes",
        "uuid",
        "records",
    }
)

_MISSING = object()
_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; `hi` None means open ended ("3+")."""

    lo: int
    hi: int | None

    NONE_LO = 1 << 30

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none" or text == "":
            return cls(cls.NONE_LO, -1)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.lo <= version and (self.hi is None or version <= self.hi)

    @property
    def empty(self) -> bool:
        return self.hi is not None and self.hi < self.lo


def snake_case(name: str) -> str:
    """Kafka CamelCase field names to Python attribute names (IsrNodes -> isr_nodes)."""
    out = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    out = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", out)
    return out.lower()


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    attr: str
    type: str  # as written: "int32", "[]int32", "[]Topic", "Topic", "records"
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    flexible_versions: Versions | None  # field-level override (headers' ClientId)
    tag: int | None
    default: object
    ignorable: bool
    map_key: bool
    entity_type: str | None
    zero_copy: bool
    about: str
    struct: StructSpec | None  # element struct for []Struct or Struct fields

    @property
    def tag_id(self) -> int:
        """The tag of a tagged field (a field without one raises)."""
        if self.tag is None:
            raise ValueError(f"field {self.name} has no tag")
        return self.tag

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    def present(self, version: int) -> bool:
        return version in self.versions

    def nullable(self, version: int) -> bool:
        return version in self.nullable_versions

    def tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged_versions


@dataclass(frozen=True, slots=True)
class StructSpec:
    name: str
    fields: tuple[FieldSpec, ...]
    versions: Versions  # the versions in which the struct itself can appear

    def fields_in(self, version: int) -> tuple[list[FieldSpec], list[FieldSpec]]:
        """(regular fields in wire order, tagged fields sorted by tag) for a version."""
        regular = []
        tagged = []
        for f in self.fields:
            if not f.present(version) and not f.tagged(version):
                continue
            if f.tagged(version):
                tagged.append(f)
            else:
                regular.append(f)
        tagged.sort(key=lambda f: f.tag_id)
        return regular, tagged


@dataclass(frozen=True, slots=True)
class MessageSpec:
    name: str
    api_key: int | None
    type: str  # request | response | header | coordinator-key | coordinator-value | data
    valid_versions: Versions
    flexible_versions: Versions
    struct: StructSpec
    structs: dict[str, StructSpec] = field(hash=False, compare=False)
    # Kafka's "latestVersionUnstable": the highest valid version is not released yet; a broker
    # (unstable.api.versions.enable=false, the default) neither advertises nor serves it.
    latest_version_unstable: bool = False

    @property
    def versions(self) -> range:
        hi = self.valid_versions.hi
        assert hi is not None, f"{self.name}: open validVersions"
        return range(self.valid_versions.lo, hi + 1)

    def flexible(self, version: int) -> bool:
        return version in self.flexible_versions


def _parse_default(raw: object, ftype: str) -> object:
    """Turn a spec default (always a string in Kafka's files) into a Python value."""
    if ftype.startswith("[]"):
        return ()  # arrays default to empty (or null when nullable and default "null")
    if raw is _MISSING:
        return _ZERO.get(ftype, None)
    if raw is None or raw == "null":
        return None
    if ftype in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        return int(str(raw), 0)
    if ftype == "float64":
        return float(str(raw))
    if ftype == "bool":
        return str(raw).lower() == "true"
    if ftype == "string":
        return str(raw)
    if ftype == "uuid":
        return _ZERO["uuid"]
    return raw


# The value a field takes when the spec gives no default (Kafka's generator rules).
_ZERO: dict[str, object] = {
    "bool": False,
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "uint32": 0,
    "int64": 0,
    "float64": 0.0,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": uuid.UUID(int=0),
}


class _Builder:
    def __init__(self, raw: dict, msg_versions: Versions) -> None:
        self.raw_common = {s["name"]: s for s in raw.get("commonStructs", [])}
        self.structs: dict[str, StructSpec] = {}
        self.msg_versions = msg_versions

    def struct(self, name: str, raw_fields: list[dict] | None, versions: Versions) -> StructSpec:
        if raw_fields is None:
            if name in self.structs:
                return self.structs[name]
            common = self.raw_common.get(name)
            if common is None:
                raise ValueError(f"unknown struct type {name}")
            raw_fields = common["fields"]
            versions = Versions.parse(common.get("versions", "0+"))
        fields = tuple(self.field(f) for f in raw_fields)
        spec = StructSpec(name, fields, versions)
        self.structs.setdefault(name, spec)
        return spec

    def field(self, raw: dict) -> FieldSpec:
        ftype = raw["type"]
        elem = ftype[2:] if ftype.startswith("[]") else ftype
        versions = Versions.parse(raw.get("versions"))
        struct = None
        if elem not in PRIMITIVES:
            struct = self.struct(elem, raw.get("fields"), versions)
        nullable = Versions.parse(raw.get("nullableVersions"))
        default_raw = raw.get("default", _MISSING)
        is_null = default_raw is None or default_raw == "null"
        if struct is not None and not ftype.startswith("[]"):
            default: object = None if is_null else "__struct__"
        else:
            default = _parse_default(default_raw, ftype)
            if ftype.startswith("[]") and is_null:
                default = None
        flex = raw.get("flexibleVersions")
        return FieldSpec(
            name=raw["name"],
            attr=snake_case(raw["name"]),
            type=ftype,
            versions=versions,
            nullable_versions=nullable,
            tagged_versions=Versions.parse(raw.get("taggedVersions")),
            flexible_versions=Versions.parse(flex) if flex is not None else None,
            tag=raw.get("tag"),
            default=default,
            ignorable=bool(raw.get("ignorable", False)),
            map_key=bool(raw.get("mapKey", False)),
            entity_type=raw.get("entityType"),
            zero_copy=bool(raw.get("zeroCopy", False)),
            about=raw.get("about", ""),
            struct=struct,
        )


def _load_text(text: str, origin: str) -> MessageSpec:
    raw = json.loads(_COMMENT.sub("", text))
    valid = Versions.parse(raw["validVersions"])
    builder = _Builder(raw, valid)
    top = StructSpec(raw["name"], tuple(builder.field(f) for f in raw["fields"]), valid)
    builder.structs[raw["name"]] = top
    return MessageSpec(
        name=raw["name"],
        api_key=raw.get("apiKey"),
        type=raw["type"],
        valid_versions=valid,
        flexible_versions=Versions.parse(raw.get("flexibleVersions")),
        struct=top,
        structs=builder.structs,
        latest_version_unstable=bool(raw.get("latestVersionUnstable", False)),
    )


def schema_dir() -> Path:
    return Path(_schemas_pkg.__file__).resolve().parent


@cache
def load(name: str) -> MessageSpec:
    """Load one spec by its file stem, e.g. "ProduceRequest"."""
    path = schema_dir() / f"{name}.json"
    return _load_text(path.read_text(encoding="utf-8"), str(path))


@cache
def all_specs() -> dict[str, MessageSpec]:
    return {p.stem: load(p.stem) for p in sorted(schema_dir().glob("*.json"))}
