"""An error answer to any request, built from the request and the response spec.

Why: Kafka's request classes each know how to refuse themselves
(``AbstractRequest.getErrorResponse``): the answer names every topic and
partition the request named, each with the same error code. Fault injection
(``shoal.testing``) needs that for every API without one hand-written builder
per API, so this walks the response spec instead:

- every ``ErrorCode`` field gets the code, every ``ErrorMessage`` the message;
- every array of structs in the response mirrors an array of the request at
  the same depth (the one with the same name, else the first array of structs
  there), element by element, so a client finds each of its partitions;
- identity fields are copied across: same name and type (``Name``,
  ``TopicId``, ``GroupId``, ``MemberId``, ...), or one of the few renames Kafka
  made between a request and its response (``Partition``/``Index`` to
  ``PartitionIndex``, ``Topic`` to ``Name``, a key string to ``Key``);
- offsets, node ids, ports and epochs are ``-1`` ("unknown"); everything
  else keeps the spec's default (empty records, empty lists).

Pure: no I/O, no broker state.
"""

from __future__ import annotations

from typing import Any

from shoal.protocol import spec as S
from shoal.protocol.api import api as api_for_key
from shoal.protocol.messages import classes_for

__all__ = ["error_response"]

# response attribute -> request attributes it may be copied from, in order of preference
_RENAMES: dict[str, tuple[str, ...]] = {
    "partition_index": ("partition_index", "partition", "index", "partition_id"),
    "index": ("index", "partition_index", "partition"),
    "name": ("name", "topic", "topic_name"),
    "topic": ("topic", "name"),
    "topic_name": ("topic_name", "name", "topic"),
    "group_id": ("group_id", "key"),
}


# numbers an error answer leaves unknown: -1, as Kafka's error responses have them
_UNKNOWN = frozenset(
    {"base_offset", "offset", "committed_offset", "high_watermark", "last_stable_offset", "log_start_offset"}
    | {"timestamp", "node_id", "port", "leader_id", "leader_epoch", "generation_id", "member_epoch"}
)


# a null default where this version allows no null: the empty value instead
_EMPTY = {"records": b"", "bytes": b"", "string": ""}

# an identity listed as a scalar in the request -> the response field that names it
_SCALAR_TARGETS = {
    "string": ("key", "group_id", "name", "topic", "transactional_id"),
    "int32": ("partition_index", "partition", "index"),
}


def error_response(api_key: int, version: int, request: Any, code: int, message: str | None = None) -> Any:
    """The response body refusing ``request`` (API ``api_key`` at ``version``) with ``code`` everywhere."""
    a = api_for_key(api_key)
    if a is None:
        raise ValueError(f"unknown API key {api_key}")
    spec = a.response_class().SPEC
    req_spec = type(request).SPEC.struct if request is not None else None
    return _Mirror(classes_for(spec.name), version, int(code), message).struct(request, req_spec, spec.struct)


class _Mirror:
    __slots__ = ("classes", "code", "message", "version")

    def __init__(self, classes: dict[str, type], version: int, code: int, message: str | None) -> None:
        self.classes, self.version, self.code, self.message = classes, version, code, message

    def struct(self, request: Any, req_spec: S.StructSpec | None, spec: S.StructSpec) -> Any:
        out = self.classes[spec.name]()
        req_fields = {f.attr: f for f in req_spec.fields} if req_spec is not None and request is not None else {}
        for f in spec.fields:
            if not f.present(self.version) and not f.tagged(self.version):
                continue
            if f.attr == "error_code" and f.type == "int16":
                out.error_code = self.code
            elif f.attr in _UNKNOWN and f.type in ("int32", "int64"):
                setattr(out, f.attr, -1)
            elif f.attr == "error_message" and self.message is not None:
                out.error_message = self.message
            elif f.type in _EMPTY and getattr(out, f.attr) is None and not f.nullable(self.version):
                setattr(out, f.attr, _EMPTY[f.type])
            elif f.is_array and f.struct is not None:
                setattr(out, f.attr, self.array(request, req_spec, f))
            elif f.struct is not None:
                src = req_fields.get(f.attr)
                src_struct = src.struct if src is not None else None
                value = getattr(request, f.attr, None) if src_struct is not None else None
                if getattr(out, f.attr) is None and value is None:
                    continue  # a nullable struct the request did not carry stays null
                setattr(out, f.attr, self.struct(value, src_struct if value is not None else None, f.struct))
            else:
                for name in _RENAMES.get(f.attr, (f.attr,)):
                    src = req_fields.get(name)
                    if src is not None and not src.is_array and src.struct is None and src.type == f.type:
                        setattr(out, f.attr, getattr(request, name))
                        break
        return out

    def array(self, request: Any, req_spec: S.StructSpec | None, f: S.FieldSpec) -> list:
        spec = f.struct
        if spec is None:
            raise ValueError(f"{f.name} is not an array of structs")
        if request is None or req_spec is None:
            return []
        v = self.version
        arrays = [g for g in req_spec.fields if g.is_array and (g.present(v) or g.tagged(v))]
        same = [g for g in arrays if g.attr == f.attr and g.struct is not None]
        structs = [g for g in arrays if g.struct is not None]
        src = same[0] if same else (structs[0] if structs else None)
        if src is not None:
            return [self.struct(item, src.struct, spec) for item in getattr(request, src.attr) or ()]
        # identities listed as scalars (DescribeGroups' group ids, DeleteTopics' names, OffsetFetch v1's
        # partition indexes, FindCoordinator v4's keys): one element per identity
        for g in arrays:
            names = _SCALAR_TARGETS.get(g.element_type, ())
            target = next((h.attr for n in names for h in spec.fields if h.attr == n), None)
            if target is None:
                continue
            out = []
            for value in getattr(request, g.attr) or ():
                element = self.struct(None, None, spec)
                setattr(element, target, value)
                out.append(element)
            return out
        return []
