"""What a setting is: the row type ``ConfigKey``, the table type ``ConfigDef``, value rules.

Why a table: a setting is used in many places. The broker reads it at start,
DescribeConfigs reports it with its source and synonyms, CreateTopics and
IncrementalAlterConfigs validate new values for it, and the docs list it. If
each of those places carried its own idea of the name, type, default or
bounds, they would drift apart. So every setting is declared exactly once, as
a ``ConfigKey`` row in one of the tables, and everything else (defaults,
parsing, validation, describe answers, rendered docs) is computed from the rows.

The tables, by scope: ``broker_keys.BROKER_CONFIGS`` (server settings, read
from a properties file plus command-line overrides; its coordinator rows are in
``coordinator_keys``), ``topic_keys.TOPIC_CONFIGS`` (per-topic overrides, each
naming the broker setting it falls back to: Kafka's synonyms) and
``group_keys.GROUP_CONFIGS`` (per-group overrides, bounded by the broker's
min/max settings).

Names, types, defaults and bounds are Kafka's (Apache Kafka 4.2/4.3) unless a
row says otherwise through ``kafka_default``: those are the places where Shoal,
a single-node broker, deliberately differs (loopback listener, replication
factors of 1, share groups on by default). The one-line docs are Shoal's own.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Final

from shoal.protocol.constants import ConfigType

__all__ = [  # noqa: RUF022 (grouped by kind, not sorted)
    "ConfigDef",
    "ConfigKey",
    "ConfigType",
    "Importance",
    "ConfigError",
    "Range",
    "OneOf",
    "ListOf",
    "Check",
    "INT_MAX",
    "LONG_MAX",
    "SAME_AS_KAFKA",
    "SHOAL_ONLY",
    "ShareAutoOffsetReset",
    "parse_iso8601_duration",
    "parse_share_auto_offset_reset",
    "parse_value",
    "render_value",
    "listener_problem",
    "synonym_chain",
]

SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

_NO_VALUE: Final = object()


class ConfigError(ValueError):
    """A setting was unknown, malformed, out of bounds or inconsistent.

    ``key`` is the setting's name and ``reason`` says what is wrong; the
    message carries both, so it can go straight into an INVALID_CONFIG
    response or a start-up failure.
    """

    def __init__(self, key: str, reason: str, value: object = _NO_VALUE) -> None:
        self.key = key
        self.reason = reason
        self.value = None if value is _NO_VALUE else value
        shown = "" if value is _NO_VALUE else f" (got {value!r})"
        super().__init__(f"{key}: {reason}{shown}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (self.key, self.reason, self.args[0]))


def _rebuild_error(key: str, reason: str, message: str) -> ConfigError:
    err = ConfigError(key, reason)
    err.args = (message,)
    return err


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class _Provenance(enum.Enum):
    """Markers for ``ConfigKey.kafka_default`` (it otherwise holds Kafka's value)."""

    SAME_AS_KAFKA = "same default as Kafka"
    SHOAL_ONLY = "not a Kafka setting"


SAME_AS_KAFKA: Final = _Provenance.SAME_AS_KAFKA
SHOAL_ONLY: Final = _Provenance.SHOAL_ONLY

_INT_RE = re.compile(r"[+-]?\d+")
_WIDTH = {
    ConfigType.SHORT: (SHORT_MIN, SHORT_MAX, "a 16-bit"),
    ConfigType.INT: (INT_MIN, INT_MAX, "a 32-bit"),
    ConfigType.LONG: (LONG_MIN, LONG_MAX, "a 64-bit"),
}


def parse_value(key: str, ctype: ConfigType, raw: Any) -> Any:
    """Convert ``raw`` (a string from a file, or an already-typed value) to ``ctype``."""
    if raw is None:
        return None
    if ctype is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise ConfigError(key, "expected true or false", raw)
    if ctype in _WIDTH:
        lo, hi, width = _WIDTH[ctype]
        if isinstance(raw, int) and not isinstance(raw, bool):
            value = raw
        elif isinstance(raw, str) and _INT_RE.fullmatch(raw.strip()):
            value = int(raw.strip())
        else:
            raise ConfigError(key, "expected a whole number", raw)
        if not lo <= value <= hi:
            raise ConfigError(key, f"does not fit in {width} integer", raw)
        return value
    if ctype is ConfigType.DOUBLE:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return float(raw)
        try:
            return float(str(raw).strip())
        except ValueError:
            raise ConfigError(key, "expected a number", raw) from None
    if ctype is ConfigType.STRING or ctype is ConfigType.PASSWORD:
        if not isinstance(raw, str):
            raise ConfigError(key, "expected a string", raw)
        return raw.strip()
    # LIST
    if isinstance(raw, str):
        text = raw.strip()
        items = [] if not text else [part.strip() for part in text.split(",")]
    elif isinstance(raw, (list, tuple)) and all(isinstance(x, str) for x in raw):
        items = [x.strip() for x in raw]
    else:
        raise ConfigError(key, "expected a comma-separated list", raw)
    if any(not item for item in items):
        raise ConfigError(key, "list has an empty entry", raw)
    return tuple(items)


def render_value(value: Any) -> str | None:
    """A typed value as DescribeConfigs and properties files spell it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


# --- validators ---------------------------------------------------------------
# Each is called with (key, value) for non-null values and raises ConfigError.


@dataclass(frozen=True, slots=True)
class Range:
    """Inclusive numeric bounds; either side may be open (None)."""

    min: float | None = None
    max: float | None = None

    def __call__(self, key: str, value: Any) -> None:
        if self.min is not None and value < self.min:
            raise ConfigError(key, f"must be at least {self.min}", value)
        if self.max is not None and value > self.max:
            raise ConfigError(key, f"must be at most {self.max}", value)

    @property
    def text(self) -> str:
        if self.max is None:
            return f"[{self.min},...]"
        if self.min is None:
            return f"[...,{self.max}]"
        return f"[{self.min},...,{self.max}]"


@dataclass(frozen=True, slots=True)
class OneOf:
    """The value must be one of ``choices``."""

    choices: tuple[str, ...]
    case_insensitive: bool = False

    def __call__(self, key: str, value: Any) -> None:
        if self.case_insensitive:
            ok = value.lower() in (c.lower() for c in self.choices)
        else:
            ok = value in self.choices
        if not ok:
            raise ConfigError(key, f"must be one of {', '.join(self.choices)}", value)

    @property
    def text(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True, slots=True)
class ListOf:
    """A non-empty list without repeats, optionally drawn from ``choices``."""

    choices: tuple[str, ...] | None = None
    allow_empty: bool = False

    def __call__(self, key: str, value: Any) -> None:
        if not value and not self.allow_empty:
            raise ConfigError(key, "must not be empty", render_value(value))
        if len(set(value)) != len(value):
            raise ConfigError(key, "has a repeated entry", render_value(value))
        for item in value:
            if self.choices is not None and item not in self.choices:
                raise ConfigError(key, f"entries must be among {', '.join(self.choices)}", item)

    @property
    def text(self) -> str:
        return "any" if self.choices is None else "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True, slots=True)
class Check:
    """Custom rule: ``test(value)`` returns None when fine, else the reason."""

    test: Callable[[Any], str | None]
    text: str

    def __call__(self, key: str, value: Any) -> None:
        reason = self.test(value)
        if reason is not None:
            raise ConfigError(key, reason, render_value(value))


Validator = Range | OneOf | ListOf | Check


# --- custom rules -----------------------------------------------------------------

_LISTENER_RE = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)://(?P<host>\[[0-9A-Za-z:.%]*\]|[A-Za-z0-9._-]*):(?P<port>\d+)"
)
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_TOPIC_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")
_DURATION_RE = re.compile(
    r"(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?"
    r"(?P<t>T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?(?:(?P<s>[-+]?\d+)(?:[.,](?P<f>\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def listener_problem(url: str) -> str | None:
    """Why ``url`` is not a NAME://host:port listener, or None if it is one."""
    m = _LISTENER_RE.fullmatch(url)
    if m is None:
        return f"{url!r} is not of the form NAME://host:port"
    if not 0 <= int(m["port"]) <= 65535:
        return f"port {m['port']} of {url!r} is outside 0..65535"
    if m["host"].startswith("[") and ":" not in m["host"]:
        return f"{url!r}: brackets are only for IPv6 addresses"
    return None


def _listeners_problem(urls: tuple[str, ...]) -> str | None:
    for url in urls:
        problem = listener_problem(url)
        if problem is not None:
            return problem
    names = [url.split("://", 1)[0].upper() for url in urls]
    if len(set(names)) != len(names):
        return "each listener needs its own name"
    return None


def http_listener_problem(url: str) -> str | None:
    """Why ``url`` is not an http://host:port operations listener, or None if it is one."""
    if not url.lower().startswith("http://"):
        return f"{url!r} is not of the form http://host:port"
    return listener_problem("HTTP" + url[4:])


def _http_listeners_problem(urls: tuple[str, ...]) -> str | None:
    for url in urls:
        problem = http_listener_problem(url)
        if problem is not None:
            return problem
    return None


def parse_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: "host:count,host:count" (Kafka's form) as a dict."""
    out: dict[str, int] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not _INT_RE.fullmatch(count) or int(count) < 0:
            raise ValueError(f"{item!r} is not host:count")
        out[host] = int(count)
    return out


def _ip_overrides_problem(text: str) -> str | None:
    try:
        parse_ip_overrides(text)
    except ValueError as e:
        return str(e)
    return None


def protocol_map_problem(text: str) -> str | None:
    for pair in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, proto = pair.partition(":")
        if not sep or not name.strip() or proto.strip().upper() not in _SECURITY_PROTOCOLS:
            return f"{pair!r} is not NAME:PROTOCOL with PROTOCOL among {', '.join(_SECURITY_PROTOCOLS)}"
    return None


def parse_iso8601_duration(text: str) -> timedelta:
    """Parse an ISO-8601 duration the way java.time.Duration does (PnDTnHnMn.nS).

    Days, hours, minutes and seconds (with up to nine fraction digits) are
    allowed, each optionally signed, as is a sign before the whole. Years,
    months and weeks are not. Raises ValueError when ``text`` does not match.
    """
    m = _DURATION_RE.fullmatch(text.strip())
    if m is None or not any(m[g] for g in "dhms") or (m["t"] and not any(m[g] for g in "hms")):
        raise ValueError(f"{text!r} is not an ISO-8601 duration like PT1H or P1DT30M")
    seconds = int(m["s"] or 0)
    micros = int(((m["f"] or "") + "000000000")[:9]) / 1000
    if seconds < 0 or m["s"] == "-0":
        micros = -micros
    total = timedelta(
        days=int(m["d"] or 0),
        hours=int(m["h"] or 0),
        minutes=int(m["m"] or 0),
        seconds=seconds,
        microseconds=micros,
    )
    return -total if m["sign"] == "-" else total


@dataclass(frozen=True, slots=True)
class ShareAutoOffsetReset:
    """A parsed share.auto.offset.reset: 'latest', 'earliest' or 'by_duration'."""

    strategy: str
    duration: timedelta | None = None


def parse_share_auto_offset_reset(value: str) -> ShareAutoOffsetReset:
    """Parse latest | earliest | by_duration:<ISO-8601 duration>; ValueError if invalid."""
    text = value.strip()
    lowered = text.lower()
    if lowered in ("latest", "earliest"):
        return ShareAutoOffsetReset(lowered)
    prefix = "by_duration:"
    if not lowered.startswith(prefix):
        raise ValueError("must be latest, earliest or by_duration:<ISO-8601 duration>")
    duration = parse_iso8601_duration(text[len(prefix) :])
    if duration < timedelta(0):
        raise ValueError("a by_duration duration must not be negative")
    return ShareAutoOffsetReset("by_duration", duration)


def auto_offset_reset_problem(value: str) -> str | None:
    try:
        parse_share_auto_offset_reset(value)
    except ValueError as e:
        return str(e)
    return None


def dlq_topic_problem(name: str) -> str | None:
    if not name:
        return None
    if len(name) > 249 or name in (".", "..") or not _TOPIC_NAME_RE.fullmatch(name):
        return "not a legal topic name (letters, digits, '.', '_', '-'; at most 249)"
    if name.startswith("__"):
        return "must not be an internal topic"
    return None


def one_assignor_problem(value: tuple[str, ...]) -> str | None:
    return None if value == ("simple",) else "must name exactly one assignor; Shoal has only 'simple'"


# --- the row type and the table type ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One declared setting.

    ``min_key``/``max_key`` name settings whose values bound this one (in the
    same table for broker and topic keys; in the broker table for group keys).
    ``synonym`` names the broker setting a topic or group key falls back to.
    ``dynamic`` is False for settings fixed at start (reported read-only).
    ``kafka_default`` records Kafka's default where Shoal's differs.
    """

    name: str
    type: ConfigType
    default: Any
    doc: str
    importance: Importance = Importance.MEDIUM
    validator: Validator | None = None
    dynamic: bool = False
    min_key: str | None = None
    max_key: str | None = None
    synonym: str | None = None
    kafka_default: Any = SAME_AS_KAFKA
    sensitive: bool = False

    def parse(self, raw: Any) -> Any:
        """Typed, validated value for ``raw``; ConfigError names this key."""
        value = parse_value(self.name, self.type, raw)
        if value is not None and self.validator is not None:
            self.validator(self.name, value)
        return value

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    @property
    def read_only(self) -> bool:
        return not self.dynamic

    @property
    def valid_values(self) -> str:
        return "" if self.validator is None else self.validator.text


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """An ordered, read-only collection of ConfigKeys for one scope."""

    scope: str
    keys: Mapping[str, ConfigKey]

    @classmethod
    def of(cls, scope: str, *keys: ConfigKey) -> ConfigDef:
        table: dict[str, ConfigKey] = {}
        for key in keys:
            if key.name in table:
                raise ValueError(f"{scope} config {key.name} declared twice")
            # Every default must pass its own row's rules.
            if key.parse(key.default) != key.default:
                raise ValueError(f"{scope} config {key.name}: default is not in canonical form")
            table[key.name] = key
        return cls(scope, MappingProxyType(table))

    def __contains__(self, name: object) -> bool:
        return name in self.keys

    def __iter__(self) -> Iterator[ConfigKey]:
        return iter(self.keys.values())

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, name: str) -> ConfigKey:
        try:
            return self.keys[name]
        except KeyError:
            raise ConfigError(name, f"unknown {self.scope} config") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self.keys)

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self}

    def parse(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Parse and validate each entry on its own (unknown names are errors)."""
        return {name: self[name].parse(value) for name, value in raw.items()}

    def markdown(self) -> str:
        """The table as Markdown, for docs generated from the declarations."""
        rows = ["| name | type | default | valid values | doc |", "| --- | --- | --- | --- | --- |"]
        for k in self:
            rows.append(
                f"| {k.name} | {k.type.name.lower()} | {render_value(k.default)} | {k.valid_values} | {k.doc} |"
            )
        return "\n".join(rows)


# Broker settings that stand for one value in several units, most precise
# first; the first one set explicitly wins, else the first non-null default.
_SYNONYMS: Final[dict[str, tuple[tuple[str, int], ...]]] = {
    "log.retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ),
    "log.roll.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "log.flush.interval.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "log.dirs": (("log.dirs", 1), ("log.dir", 1)),
}
_CHAIN_OF: Final = {member: chain for chain in _SYNONYMS.values() for member, _ in chain}


def synonym_chain(name: str) -> tuple[tuple[str, int], ...]:
    """(broker name, factor to milliseconds or 1) for every spelling of ``name``."""
    return _CHAIN_OF.get(name, ((name, 1),))


# Shorthands for the tables' rows.
BOOL, STR, INT, LONG, LIST, SHORT = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.LIST,
    ConfigType.SHORT,
)
HIGH, MED, LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW
AT_LEAST_0, AT_LEAST_1 = Range(0), Range(1)
COMPRESSION = OneOf(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))
TIMESTAMP_TYPE = OneOf(("CreateTime", "LogAppendTime"))
CLEANUP = ListOf(("compact", "delete"))
LISTENERS = Check(_listeners_problem, "NAME://host:port,...")
HTTP_LISTENERS = Check(_http_listeners_problem, "http://host:port,...")
IP_OVERRIDES = Check(_ip_overrides_problem, "host:count,...")
