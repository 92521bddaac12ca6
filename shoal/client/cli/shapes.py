"""The JSON that ``shoal ... --output json`` prints: one documented shape per command.

Why written down as data: scripts (``| jq``) depend on these keys, so they are a contract.
Each shape is a small JSON Schema (the subset ``validate`` understands: ``type``, ``properties``,
``required``, ``additionalProperties: false``, ``items``, ``enum``), so it documents the output
and checks it (``tests/e2e/test_client_cli_json.py`` validates every command's output against its
shape here). Keys are Kafka's column names in snake_case (``CURRENT-OFFSET`` ->
``current_offset``); a value Kafka's tables print as ``-`` is ``null``. Every document is one
JSON object on stdout; per-entity failures still go to stderr (``Error: ...``) and exit 1, and
the entities that failed are left out of the document.

Stability: keys are added, never renamed or removed, and every object carries every key in its
shape (``required`` lists them all), so ``.key`` never needs a default in jq.

Describe commands print the whole description in JSON whatever ``--members``/``--state``
choose for text: a group's state, members and offsets in one object.

``shoal topics list``::

    {"topics": [{"name": "demo", "internal": false}]}

``shoal topics describe``::

    {"topics": [{"name", "topic_id", "internal", "partition_count", "replication_factor",
                 "configs": {"retention.ms": "60000"},          # overrides, as the text shows
                 "partitions": [{"partition", "leader", "leader_epoch", "replicas", "isr"}]}]}

``shoal groups list``::

    {"groups": [{"group", "type", "protocol_type", "state"}]}

``shoal groups describe`` (lag = log_end_offset - current_offset, as kafka-consumer-groups.sh)::

    {"groups": [{"group", "protocol", "state", "coordinator", "assignment_strategy",
                 "group_epoch", "assignment_epoch",                # null for classic groups
                 "members": [{"consumer_id", "group_instance_id", "host", "client_id",
                              "assignment": [{"topic", "partition"}],
                              "member_epoch", "target_assignment",   # null for classic groups
                              "subscribed_topics", "subscribed_topic_regex"}],
                 "offsets": [{"topic", "partition", "current_offset", "log_end_offset", "lag",
                              "consumer_id", "host", "client_id"}]}]}

``shoal share-groups list``::

    {"groups": [{"group", "state"}]}

``shoal share-groups describe``::

    {"groups": [{"group", "state", "coordinator", "group_epoch", "assignment_epoch",
                 "members": [{"consumer_id", "member_epoch", "host", "client_id", "rack_id",
                              "subscribed_topics", "assignment": [{"topic", "partition"}]}],
                 "offsets": [{"topic", "partition", "start_offset", "leader_epoch", "lag"}]}]}

``shoal share-groups reset-offsets`` and ``shoal groups reset-offsets`` (the plan; ``executed``
says whether it was applied)::

    {"group", "executed", "offsets": [{"topic", "partition", "new_offset"}], "warnings": [str]}

``shoal users list`` (one entry per credential: a user with both SCRAM mechanisms has two)::

    {"users": [{"user", "mechanism", "iterations"}]}

``shoal configs describe``::

    {"resource": {"type": "topic", "name": "demo"},
     "configs": [{"name", "value", "source", "read_only", "sensitive"}]}

``shoal acls list`` (enum names as Kafka spells them: TOPIC, PREFIXED, READ, ALLOW)::

    {"acls": [{"resource_type", "name", "pattern_type", "principal", "host", "operation", "permission"}]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SHAPES", "validate"]

Shape = Mapping[str, Any]

_INT: dict[str, Any] = {"type": "integer"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_OPT_INT = {"type": ["integer", "null"]}
_OPT_STR = {"type": ["string", "null"]}


def _obj(**props: Shape) -> dict[str, Any]:
    """An object with exactly these keys, all present."""
    return {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False}


def _arr(items: Shape) -> dict[str, Any]:
    return {"type": "array", "items": items}


_TP = _obj(topic=_STR, partition=_INT)

SHAPES: dict[str, dict[str, Any]] = {
    "topics list": _obj(topics=_arr(_obj(name=_STR, internal=_BOOL))),
    "topics describe": _obj(
        topics=_arr(
            _obj(
                name=_STR,
                topic_id=_STR,
                internal=_BOOL,
                partition_count=_INT,
                replication_factor=_INT,
                configs={"type": "object", "additionalProperties": _OPT_STR},
                partitions=_arr(
                    _obj(partition=_INT, leader=_OPT_INT, leader_epoch=_INT, replicas=_arr(_INT), isr=_arr(_INT))
                ),
            )
        )
    ),
    "groups list": _obj(groups=_arr(_obj(group=_STR, type=_OPT_STR, protocol_type=_OPT_STR, state=_OPT_STR))),
    "groups describe": _obj(
        groups=_arr(
            _obj(
                group=_STR,
                protocol=_STR,
                state=_STR,
                coordinator=_INT,
                assignment_strategy=_OPT_STR,
                group_epoch=_OPT_INT,
                assignment_epoch=_OPT_INT,
                members=_arr(
                    _obj(
                        consumer_id=_STR,
                        group_instance_id=_OPT_STR,
                        host=_STR,
                        client_id=_STR,
                        assignment=_arr(_TP),
                        member_epoch=_OPT_INT,
                        target_assignment={"type": ["array", "null"], "items": _TP},
                        subscribed_topics=_arr(_STR),
                        subscribed_topic_regex=_OPT_STR,
                    )
                ),
                offsets=_arr(
                    _obj(
                        topic=_STR,
                        partition=_INT,
                        current_offset=_OPT_INT,
                        log_end_offset=_OPT_INT,
                        lag=_OPT_INT,
                        consumer_id=_OPT_STR,
                        host=_OPT_STR,
                        client_id=_OPT_STR,
                    )
                ),
            )
        )
    ),
    "share-groups list": _obj(groups=_arr(_obj(group=_STR, state=_OPT_STR))),
    "share-groups describe": _obj(
        groups=_arr(
            _obj(
                group=_STR,
                state=_STR,
                coordinator=_INT,
                group_epoch=_INT,
                assignment_epoch=_INT,
                members=_arr(
                    _obj(
                        consumer_id=_STR,
                        member_epoch=_INT,
                        host=_STR,
                        client_id=_STR,
                        rack_id=_OPT_STR,
                        subscribed_topics=_arr(_STR),
                        assignment=_arr(_TP),
                    )
                ),
                offsets=_arr(
                    _obj(topic=_STR, partition=_INT, start_offset=_OPT_INT, leader_epoch=_OPT_INT, lag=_OPT_INT)
                ),
            )
        )
    ),
    "share-groups reset-offsets": _obj(
        group=_STR,
        executed=_BOOL,
        offsets=_arr(_obj(topic=_STR, partition=_INT, new_offset=_INT)),
        warnings=_arr(_STR),
    ),
    "configs describe": _obj(
        resource=_obj(type={"enum": ["topic", "broker", "group"]}, name=_STR),
        configs=_arr(_obj(name=_STR, value=_OPT_STR, source=_STR, read_only=_BOOL, sensitive=_BOOL)),
    ),
}

SHAPES["acls list"] = _obj(
    acls=_arr(
        _obj(
            resource_type=_STR,
            name=_STR,
            pattern_type=_STR,
            principal=_STR,
            host=_STR,
            operation=_STR,
            permission=_STR,
        )
    )
)
SHAPES["users list"] = _obj(users=_arr(_obj(user=_STR, mechanism=_STR, iterations=_INT)))
SHAPES["groups reset-offsets"] = SHAPES["share-groups reset-offsets"]  # the same plan, for a consumer group

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _is(value: Any, name: str) -> bool:
    if name == "integer":  # JSON has no bool/int distinction; Python does
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def validate(value: Any, shape: Shape, path: str = "$") -> list[str]:
    """Where ``value`` breaks ``shape``: one message per problem, empty when it fits."""
    problems: list[str] = []
    if "enum" in shape and value not in shape["enum"]:
        problems.append(f"{path}: {value!r} is not one of {shape['enum']}")
    if "type" in shape:
        names = shape["type"] if isinstance(shape["type"], list) else [shape["type"]]
        if not any(_is(value, n) for n in names):
            return [*problems, f"{path}: expected {'|'.join(names)}, got {type(value).__name__} {value!r}"]
    if isinstance(value, dict):
        props: Mapping[str, Shape] = shape.get("properties", {})
        for key in shape.get("required", ()):
            if key not in value:
                problems.append(f"{path}: missing key {key!r}")
        extra = shape.get("additionalProperties", True)
        for key, v in value.items():
            if key in props:
                problems += validate(v, props[key], f"{path}.{key}")
            elif extra is False:
                problems.append(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, Mapping):
                problems += validate(v, extra, f"{path}.{key}")
    if isinstance(value, list) and "items" in shape:
        for i, item in enumerate(value):
            problems += validate(item, shape["items"], f"{path}[{i}]")
    return problems
