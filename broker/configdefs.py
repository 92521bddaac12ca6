"""The declaration tables: every broker, topic and group setting Shoal knows.

Why a table: a setting is used in many places. The broker reads it at start,
DescribeConfigs reports it with its source and synonyms, CreateTopics and
IncrementalAlterConfigs validate new values for it, and the docs list it. If
each of those places carried its own idea of the name, type, default or
bounds, they would drift apart. So every setting is declared exactly once,
here, as a ``ConfigKey`` row, and everything else (defaults, parsing,
validation, describe answers, rendered docs) is computed from the rows.

Names, types, defaults and bounds are Kafka's (Apache Kafka 4.2/4.3) unless a
row says otherwise through ``kafka_default``: those are the places where Shoal,
a single-node broker, deliberately differs (loopback listener, replication
factors of 1, share groups on by default). The one-line docs are Shoal's own.

Three tables:

* ``BROKER_CONFIGS``: server settings, read from a properties file plus
  command-line overrides (see ``broker.config``).
* ``TOPIC_CONFIGS``: per-topic overrides; each names the broker setting it
  falls back to (Kafka's synonyms).
* ``GROUP_CONFIGS``: per-group overrides; each falls back to a broker
  setting and is bounded by the broker's min/max settings.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Final

__all__ = [  # noqa: RUF022 (grouped by kind, not sorted)
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "GROUP_CONFIGS",
    "BROKER_LESS_THAN",
    "GROUP_LESS_THAN",
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


class ConfigType(enum.Enum):
    """Value types; the numbers are the ConfigType ids DescribeConfigs uses."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


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
    if ctype is ConfigType.STRING:
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


def _protocol_map_problem(text: str) -> str | None:
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


def _auto_offset_reset_problem(value: str) -> str | None:
    try:
        parse_share_auto_offset_reset(value)
    except ValueError as e:
        return str(e)
    return None


def _dlq_topic_problem(name: str) -> str | None:
    if not name:
        return None
    if len(name) > 249 or name in (".", "..") or not _TOPIC_NAME_RE.fullmatch(name):
        return "not a legal topic name (letters, digits, '.', '_', '-'; at most 249)"
    if name.startswith("__"):
        return "must not be an internal topic"
    return None


def _one_assignor_problem(value: tuple[str, ...]) -> str | None:
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


# --- BROKER -----------------------------------------------------------------------

_BOOL, _STR, _INT, _LONG, _LIST, _SHORT = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.LIST,
    ConfigType.SHORT,
)
_HIGH, _MED, _LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW
_AT_LEAST_0, _AT_LEAST_1 = Range(0), Range(1)
_COMPRESSION = OneOf(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))
_TIMESTAMP_TYPE = OneOf(("CreateTime", "LogAppendTime"))
_CLEANUP = ListOf(("compact", "delete"))
_LISTENERS = Check(_listeners_problem, "NAME://host:port,...")
_IP_OVERRIDES = Check(_ip_overrides_problem, "host:count,...")
_INT_MAX = 2**31 - 1


def _key(name: str, ctype: ConfigType, default: Any, doc: str, **kw: Any) -> ConfigKey:
    return ConfigKey(name, ctype, default, doc, **kw)


BROKER_CONFIGS: Final = ConfigDef.of(
    "broker",
    # server and network
    _key(
        "node.id",
        _INT,
        1,
        "This broker's id, reported in metadata; unique within a cluster.",
        importance=_HIGH,
        validator=_AT_LEAST_0,
        kafka_default=-1,
    ),
    _key(
        "listeners",
        _LIST,
        ("PLAINTEXT://127.0.0.1:9092",),
        "NAME://host:port addresses to accept connections on; an empty host means all "
        "interfaces, IPv6 hosts go in brackets, port 0 picks a free port. Shoal binds loopback by default.",
        importance=_HIGH,
        validator=_LISTENERS,
        kafka_default=("PLAINTEXT://:9092",),
    ),
    _key(
        "advertised.listeners",
        _LIST,
        None,
        "Addresses given to clients in metadata. Unset: the listeners, with a wildcard host "
        "replaced by this machine's host name.",
        importance=_HIGH,
        validator=_LISTENERS,
    ),
    _key(
        "listener.security.protocol.map",
        _STR,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "Which security protocol each listener name speaks; Shoal serves PLAINTEXT only.",
        importance=_LOW,
        validator=Check(_protocol_map_problem, "NAME:PROTOCOL,..."),
    ),
    _key(
        "socket.request.max.bytes",
        _INT,
        104857600,
        "Largest request frame accepted; bigger ones close the connection.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "connections.max.idle.ms",
        _LONG,
        600000,
        "Connections silent for this long are closed.",
        importance=_MED,
    ),
    _key(
        "max.connections",
        _INT,
        _INT_MAX,
        "Connections the broker holds at once; a connection past it is closed as it is accepted.",
        importance=_MED,
        validator=_AT_LEAST_0,
    ),
    _key(
        "max.connections.per.ip",
        _INT,
        _INT_MAX,
        "Connections one IP address may hold; past it, new ones from that address are closed as accepted.",
        importance=_MED,
        validator=_AT_LEAST_0,
    ),
    _key(
        "max.connections.per.ip.overrides",
        _STR,
        "",
        "Per-address exceptions to max.connections.per.ip, as host:count,host:count.",
        importance=_MED,
        validator=_IP_OVERRIDES,
    ),
    _key(
        "queued.max.requests",
        _INT,
        500,
        "Requests read from one connection but not yet answered before Shoal stops reading from it.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "fetch.max.bytes",
        _INT,
        57671680,
        "Upper limit on the bytes one Fetch response carries.",
        validator=Range(1024),
    ),
    _key(
        "max.incremental.fetch.session.cache.slots",
        _INT,
        1000,
        "How many incremental fetch sessions the broker keeps at once.",
        validator=_AT_LEAST_0,
    ),
    _key(
        "log.level",
        _STR,
        "INFO",
        "Python logging level for Shoal's own loggers.",
        importance=_LOW,
        validator=OneOf(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), case_insensitive=True),
        dynamic=True,
        kafka_default=SHOAL_ONLY,
    ),
    # storage
    _key(
        "log.dirs",
        _LIST,
        ("./shoal-data",),
        "Directories holding partition data (Shoal uses the first).",
        importance=_HIGH,
        validator=ListOf(),
        kafka_default=None,
    ),
    _key(
        "log.dir",
        _STR,
        None,
        "A single data directory, used only when log.dirs is not set explicitly.",
        importance=_HIGH,
        kafka_default="/tmp/kafka-logs",
    ),
    _key("num.partitions", _INT, 1, "Partition count for topics created without one.", validator=_AT_LEAST_1),
    _key(
        "default.replication.factor",
        _INT,
        1,
        "Replication factor for topics created without one.",
        validator=_AT_LEAST_1,
    ),
    _key(
        "auto.create.topics.enable",
        _BOOL,
        True,
        "Create a topic when a client asks for metadata of a missing one.",
        importance=_HIGH,
    ),
    _key(
        "log.segment.bytes",
        _INT,
        1073741824,
        "Roll to a new segment file once the active one reaches this size.",
        importance=_HIGH,
        validator=Range(14),
        dynamic=True,
    ),
    _key(
        "log.roll.ms",
        _LONG,
        None,
        "Roll the active segment once its first record is this old; beats log.roll.hours.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "log.roll.hours",
        _INT,
        168,
        "Segment age limit in hours, used when log.roll.ms is unset.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "log.retention.ms",
        _LONG,
        None,
        "Delete segments older than this (-1: keep forever); beats log.retention.minutes and .hours.",
        importance=_HIGH,
        validator=Range(-1),
        dynamic=True,
    ),
    _key(
        "log.retention.minutes",
        _INT,
        None,
        "Retention in minutes, used when log.retention.ms is unset.",
        importance=_HIGH,
        validator=Range(-1),
        dynamic=True,
    ),
    _key(
        "log.retention.hours",
        _INT,
        168,
        "Retention in hours, used when neither ms nor minutes is set.",
        importance=_HIGH,
        validator=Range(-1),
        dynamic=True,
    ),
    _key(
        "log.retention.bytes",
        _LONG,
        -1,
        "Delete old segments while a partition is larger than this (-1: no size limit).",
        importance=_HIGH,
        validator=Range(-1),
        dynamic=True,
    ),
    _key(
        "log.retention.check.interval.ms",
        _LONG,
        300000,
        "How often retention is enforced.",
        validator=_AT_LEAST_1,
    ),
    _key(
        "log.flush.interval.messages",
        _LONG,
        LONG_MAX,
        "fsync a partition after this many unsynced records.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "log.flush.interval.ms",
        _LONG,
        None,
        "fsync unsynced records at least this often. Unset (the "
        "default): Shoal fsyncs a partition before acknowledging any acks=-1 produce instead.",
        importance=_HIGH,
        validator=_AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.flush.scheduler.interval.ms",
        _LONG,
        LONG_MAX,
        "How often the flusher looks for partitions due a timed fsync.",
        importance=_HIGH,
        validator=_AT_LEAST_0,
    ),
    _key(
        "log.index.interval.bytes",
        _INT,
        4096,
        "Add an offset-index entry every this many log bytes.",
        validator=_AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.index.size.max.bytes",
        _INT,
        10485760,
        "Largest size of one offset index file.",
        validator=Range(4),
        dynamic=True,
    ),
    _key(
        "log.cleanup.policy",
        _LIST,
        ("delete",),
        "What happens to old segments: delete, compact, or both.",
        validator=_CLEANUP,
        dynamic=True,
    ),
    _key(
        "log.cleaner.delete.retention.ms",
        _LONG,
        86400000,
        "How long tombstones survive on compacted topics.",
        validator=_AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.cleaner.min.compaction.lag.ms",
        _LONG,
        0,
        "Records younger than this are never compacted.",
        validator=_AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.cleaner.max.compaction.lag.ms",
        _LONG,
        LONG_MAX,
        "Records older than this are compacted soon.",
        validator=_AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "log.segment.delete.delay.ms",
        _LONG,
        60000,
        "Wait before removing a deleted segment's files.",
        importance=_HIGH,
        validator=_AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.message.timestamp.type",
        _STR,
        "CreateTime",
        "Whether stored timestamps come from the producer (CreateTime) or the broker (LogAppendTime).",
        validator=_TIMESTAMP_TYPE,
        dynamic=True,
    ),
    _key(
        "log.message.timestamp.before.max.ms",
        _LONG,
        LONG_MAX,
        "Reject CreateTime records older than now minus this.",
        validator=_AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "log.message.timestamp.after.max.ms",
        _LONG,
        3600000,
        "Reject CreateTime records newer than now plus this.",
        validator=_AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "message.max.bytes",
        _INT,
        1048588,
        "Largest record batch a partition accepts.",
        importance=_HIGH,
        validator=_AT_LEAST_0,
        dynamic=True,
    ),
    _key(
        "min.insync.replicas",
        _INT,
        1,
        "Replicas that must hold a write before acks=-1 succeeds.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
        dynamic=True,
    ),
    _key(
        "compression.type",
        _STR,
        "producer",
        "Compression of stored batches; 'producer' keeps the producer's.",
        importance=_HIGH,
        validator=_COMPRESSION,
        dynamic=True,
    ),
    # group coordinator and __consumer_offsets
    _key(
        "offsets.topic.num.partitions",
        _INT,
        50,
        "Partitions of __consumer_offsets; fixed once created.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "offsets.topic.replication.factor",
        _SHORT,
        1,
        "Replication factor of __consumer_offsets.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
        kafka_default=3,
    ),
    _key(
        "offsets.topic.segment.bytes",
        _INT,
        104857600,
        "Segment size of __consumer_offsets.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "offsets.load.buffer.size",
        _INT,
        5242880,
        "Read size used when replaying __consumer_offsets.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "offsets.commit.timeout.ms",
        _INT,
        5000,
        "How long a coordinator write may wait to become durable.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "offset.metadata.max.bytes",
        _INT,
        4096,
        "Largest metadata string an offset commit may carry.",
        validator=_AT_LEAST_1,
    ),
    _key(
        "offsets.retention.minutes",
        _INT,
        10080,
        "Keep committed offsets this long after a group empties.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "offsets.retention.check.interval.ms",
        _LONG,
        600000,
        "How often expired offsets are removed.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "group.initial.rebalance.delay.ms",
        _INT,
        3000,
        "Wait for more members before a new classic group's first rebalance.",
        validator=_AT_LEAST_0,
    ),
    _key("group.min.session.timeout.ms", _INT, 6000, "Smallest session timeout a classic member may ask for."),
    _key(
        "group.max.session.timeout.ms",
        _INT,
        1800000,
        "Largest session timeout a classic member may ask for.",
        min_key="group.min.session.timeout.ms",
    ),
    _key("group.max.size", _INT, INT_MAX, "Most members one classic group may hold.", validator=_AT_LEAST_1),
    _key(
        "group.coordinator.rebalance.protocols",
        _LIST,
        ("classic", "consumer", "share"),
        "Group protocols the coordinator serves; classic is always required.",
        validator=ListOf(("classic", "consumer", "share", "streams")),
        kafka_default=("classic", "consumer", "streams"),
    ),
    _key(
        "group.consumer.session.timeout.ms",
        _INT,
        45000,
        "Session timeout of consumer-protocol members.",
        validator=_AT_LEAST_1,
        min_key="group.consumer.min.session.timeout.ms",
        max_key="group.consumer.max.session.timeout.ms",
    ),
    _key(
        "group.consumer.min.session.timeout.ms",
        _INT,
        45000,
        "Lowest consumer.session.timeout.ms a group may set.",
        validator=_AT_LEAST_1,
    ),
    _key(
        "group.consumer.max.session.timeout.ms",
        _INT,
        60000,
        "Highest consumer.session.timeout.ms a group may set.",
        validator=_AT_LEAST_1,
        min_key="group.consumer.min.session.timeout.ms",
    ),
    _key(
        "group.consumer.heartbeat.interval.ms",
        _INT,
        5000,
        "Heartbeat interval told to consumer-protocol members.",
        validator=_AT_LEAST_1,
        min_key="group.consumer.min.heartbeat.interval.ms",
        max_key="group.consumer.max.heartbeat.interval.ms",
    ),
    _key(
        "group.consumer.min.heartbeat.interval.ms",
        _INT,
        5000,
        "Lowest consumer.heartbeat.interval.ms a group may set.",
        validator=_AT_LEAST_1,
    ),
    _key(
        "group.consumer.max.heartbeat.interval.ms",
        _INT,
        15000,
        "Highest consumer.heartbeat.interval.ms a group may set.",
        validator=_AT_LEAST_1,
        min_key="group.consumer.min.heartbeat.interval.ms",
    ),
    # share groups
    _key(
        "group.share.enable",
        _BOOL,
        True,
        "Serve share groups (also on whenever 'share' is among group.coordinator.rebalance.protocols).",
        kafka_default=False,
    ),
    _key("group.share.max.size", _INT, 200, "Most members one share group may hold.", validator=Range(1, 1000)),
    _key(
        "group.share.session.timeout.ms",
        _INT,
        45000,
        "A share member silent this long is removed.",
        validator=_AT_LEAST_1,
        min_key="group.share.min.session.timeout.ms",
        max_key="group.share.max.session.timeout.ms",
    ),
    _key(
        "group.share.min.session.timeout.ms",
        _INT,
        45000,
        "Lowest share session timeout a group may set (tests may lower it).",
        validator=_AT_LEAST_1,
    ),
    _key(
        "group.share.max.session.timeout.ms",
        _INT,
        60000,
        "Highest share session timeout a group may set.",
        validator=_AT_LEAST_1,
        min_key="group.share.min.session.timeout.ms",
    ),
    _key(
        "group.share.heartbeat.interval.ms",
        _INT,
        5000,
        "Heartbeat interval told to share members.",
        validator=_AT_LEAST_1,
        min_key="group.share.min.heartbeat.interval.ms",
        max_key="group.share.max.heartbeat.interval.ms",
    ),
    _key(
        "group.share.min.heartbeat.interval.ms",
        _INT,
        5000,
        "Lowest share heartbeat interval a group may set (tests may lower it).",
        validator=_AT_LEAST_1,
    ),
    _key(
        "group.share.max.heartbeat.interval.ms",
        _INT,
        15000,
        "Highest share heartbeat interval a group may set.",
        validator=_AT_LEAST_1,
        min_key="group.share.min.heartbeat.interval.ms",
    ),
    _key(
        "group.share.record.lock.duration.ms",
        _INT,
        30000,
        "How long a fetched record stays acquired by one share consumer.",
        validator=Range(1000, 3600000),
        min_key="group.share.min.record.lock.duration.ms",
        max_key="group.share.max.record.lock.duration.ms",
    ),
    _key(
        "group.share.min.record.lock.duration.ms",
        _INT,
        15000,
        "Lowest lock duration a group may set (down to 1000 for tests).",
        validator=Range(1000, 30000),
    ),
    _key(
        "group.share.max.record.lock.duration.ms",
        _INT,
        60000,
        "Highest lock duration a group may set.",
        validator=Range(30000, 3600000),
        min_key="group.share.min.record.lock.duration.ms",
    ),
    _key(
        "group.share.delivery.count.limit",
        _INT,
        5,
        "Deliveries of a record before it is archived.",
        validator=Range(2, 10),
        min_key="group.share.min.delivery.count.limit",
        max_key="group.share.max.delivery.count.limit",
    ),
    _key(
        "group.share.min.delivery.count.limit",
        _INT,
        2,
        "Lowest delivery count limit a group may set.",
        validator=Range(2, 10),
    ),
    _key(
        "group.share.max.delivery.count.limit",
        _INT,
        10,
        "Highest delivery count limit a group may set.",
        validator=Range(2, 10),
        min_key="group.share.min.delivery.count.limit",
    ),
    _key(
        "group.share.partition.max.record.locks",
        _INT,
        2000,
        "Most records in flight per share partition.",
        validator=Range(100, 10000),
        min_key="group.share.min.partition.max.record.locks",
        max_key="group.share.max.partition.max.record.locks",
    ),
    _key(
        "group.share.min.partition.max.record.locks",
        _INT,
        100,
        "Lowest in-flight record limit a group may set.",
        validator=Range(100, 10000),
    ),
    _key(
        "group.share.max.partition.max.record.locks",
        _INT,
        4000,
        "Highest in-flight record limit a group may set.",
        validator=Range(100, 10000),
        min_key="group.share.min.partition.max.record.locks",
    ),
    _key(
        "group.share.max.share.sessions",
        _INT,
        2000,
        "Most share sessions the broker keeps at once.",
        validator=_AT_LEAST_1,
    ),
    _key(
        "group.share.initialize.retry.interval.ms",
        _INT,
        30000,
        "Retry a share-partition initialization stuck this long.",
        importance=_LOW,
        validator=_AT_LEAST_1,
    ),
    _key(
        "group.share.assignors",
        _LIST,
        ("simple",),
        "Server-side share assignor; exactly one.",
        validator=Check(_one_assignor_problem, "[simple]"),
    ),
    # share coordinator and __share_group_state
    _key(
        "share.coordinator.state.topic.num.partitions",
        _INT,
        50,
        "Partitions of __share_group_state.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "share.coordinator.state.topic.replication.factor",
        _SHORT,
        1,
        "Replication factor of __share_group_state.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
        kafka_default=3,
    ),
    _key(
        "share.coordinator.state.topic.min.isr",
        _SHORT,
        1,
        "min.insync.replicas of __share_group_state.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
        kafka_default=2,
    ),
    _key(
        "share.coordinator.state.topic.segment.bytes",
        _INT,
        104857600,
        "Segment size of __share_group_state.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "share.coordinator.snapshot.update.records.per.snapshot",
        _INT,
        500,
        "Write a full ShareSnapshot after this many ShareUpdate records.",
        validator=Range(0, 500),
    ),
    _key(
        "share.coordinator.load.buffer.size",
        _INT,
        5242880,
        "Read size used when replaying __share_group_state.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "share.coordinator.write.timeout.ms",
        _INT,
        5000,
        "How long a share-state write may wait to become durable.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "share.coordinator.state.topic.prune.interval.ms",
        _INT,
        300000,
        "How often the redundant prefix of each __share_group_state partition is deleted.",
        importance=_LOW,
        validator=_AT_LEAST_1,
    ),
    # transactions and producer state
    _key(
        "transactional.id.expiration.ms",
        _INT,
        604800000,
        "Forget a transactional id unused for this long.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "transaction.max.timeout.ms",
        _INT,
        900000,
        "Largest transaction timeout a producer may ask for.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "transaction.state.log.num.partitions",
        _INT,
        50,
        "Partitions of __transaction_state.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "transaction.state.log.replication.factor",
        _SHORT,
        1,
        "Replication factor of __transaction_state.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
        kafka_default=3,
    ),
    _key(
        "transaction.state.log.min.isr",
        _INT,
        1,
        "min.insync.replicas of __transaction_state.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
        kafka_default=2,
    ),
    _key(
        "transaction.state.log.segment.bytes",
        _INT,
        104857600,
        "Segment size of __transaction_state.",
        importance=_HIGH,
        validator=_AT_LEAST_1,
    ),
    _key(
        "producer.id.expiration.ms",
        _INT,
        86400000,
        "Forget an idle producer id's state after this long.",
        importance=_LOW,
        validator=_AT_LEAST_1,
        dynamic=True,
    ),
)

# Pairs (a, b) where a must be strictly below b once everything is parsed.
BROKER_LESS_THAN: Final = (
    ("group.share.heartbeat.interval.ms", "group.share.session.timeout.ms"),
    ("group.consumer.heartbeat.interval.ms", "group.consumer.session.timeout.ms"),
)

# --- TOPIC ------------------------------------------------------------------------


def _topic(name: str, ctype: ConfigType, default: Any, synonym: str, doc: str, **kw: Any) -> ConfigKey:
    return ConfigKey(name, ctype, default, doc, synonym=synonym, dynamic=True, **kw)


TOPIC_CONFIGS: Final = ConfigDef.of(
    "topic",
    _topic(
        "cleanup.policy",
        _LIST,
        ("delete",),
        "log.cleanup.policy",
        "delete, compact, or both.",
        validator=_CLEANUP,
    ),
    _topic(
        "compression.type",
        _STR,
        "producer",
        "compression.type",
        "Compression of stored batches.",
        validator=_COMPRESSION,
    ),
    _topic(
        "delete.retention.ms",
        _LONG,
        86400000,
        "log.cleaner.delete.retention.ms",
        "How long tombstones survive compaction.",
        validator=_AT_LEAST_0,
    ),
    _topic(
        "file.delete.delay.ms",
        _LONG,
        60000,
        "log.segment.delete.delay.ms",
        "Wait before removing a deleted segment's files.",
        validator=_AT_LEAST_0,
    ),
    _topic(
        "flush.messages",
        _LONG,
        LONG_MAX,
        "log.flush.interval.messages",
        "fsync after this many unsynced records.",
        validator=_AT_LEAST_1,
    ),
    _topic(
        "flush.ms",
        _LONG,
        LONG_MAX,
        "log.flush.interval.ms",
        "fsync at least this often; unset everywhere means fsync before acks=-1 answers.",
        validator=_AT_LEAST_0,
    ),
    _topic(
        "index.interval.bytes",
        _INT,
        4096,
        "log.index.interval.bytes",
        "Offset-index entry every this many bytes.",
        validator=_AT_LEAST_0,
    ),
    _topic(
        "max.compaction.lag.ms",
        _LONG,
        LONG_MAX,
        "log.cleaner.max.compaction.lag.ms",
        "Compact records once they are this old.",
        validator=_AT_LEAST_1,
        min_key="min.compaction.lag.ms",
    ),
    _topic(
        "max.message.bytes",
        _INT,
        1048588,
        "message.max.bytes",
        "Largest record batch accepted.",
        validator=_AT_LEAST_0,
    ),
    _topic(
        "message.timestamp.after.max.ms",
        _LONG,
        3600000,
        "log.message.timestamp.after.max.ms",
        "Reject CreateTime records this far in the future.",
        validator=_AT_LEAST_0,
    ),
    _topic(
        "message.timestamp.before.max.ms",
        _LONG,
        LONG_MAX,
        "log.message.timestamp.before.max.ms",
        "Reject CreateTime records this far in the past.",
        validator=_AT_LEAST_0,
    ),
    _topic(
        "message.timestamp.type",
        _STR,
        "CreateTime",
        "log.message.timestamp.type",
        "CreateTime or LogAppendTime.",
        validator=_TIMESTAMP_TYPE,
    ),
    _topic(
        "min.compaction.lag.ms",
        _LONG,
        0,
        "log.cleaner.min.compaction.lag.ms",
        "Never compact records younger than this.",
        validator=_AT_LEAST_0,
    ),
    _topic(
        "min.insync.replicas",
        _INT,
        1,
        "min.insync.replicas",
        "Replicas needed before acks=-1 succeeds.",
        validator=_AT_LEAST_1,
    ),
    _topic(
        "retention.bytes",
        _LONG,
        -1,
        "log.retention.bytes",
        "Size limit per partition (-1: none).",
        validator=Range(-1),
    ),
    _topic(
        "retention.ms",
        _LONG,
        604800000,
        "log.retention.ms",
        "Age limit of segments (-1: none).",
        validator=Range(-1),
    ),
    _topic(
        "segment.bytes",
        _INT,
        1073741824,
        "log.segment.bytes",
        "Roll segments at this size.",
        validator=Range(14),
    ),
    _topic(
        "segment.index.bytes",
        _INT,
        10485760,
        "log.index.size.max.bytes",
        "Largest offset index file.",
        validator=Range(4),
    ),
    _topic("segment.ms", _LONG, 604800000, "log.roll.ms", "Roll segments at this age.", validator=_AT_LEAST_1),
)

# --- GROUP ------------------------------------------------------------------------


def _group(name: str, ctype: ConfigType, default: Any, doc: str, **kw: Any) -> ConfigKey:
    return ConfigKey(name, ctype, default, doc, dynamic=True, **kw)


_GS = "group.share."
GROUP_CONFIGS: Final = ConfigDef.of(
    "group",
    _group(
        "consumer.session.timeout.ms",
        _INT,
        45000,
        "Session timeout for this consumer group.",
        validator=_AT_LEAST_1,
        synonym="group.consumer.session.timeout.ms",
        min_key="group.consumer.min.session.timeout.ms",
        max_key="group.consumer.max.session.timeout.ms",
    ),
    _group(
        "consumer.heartbeat.interval.ms",
        _INT,
        5000,
        "Heartbeat interval for this consumer group.",
        validator=_AT_LEAST_1,
        synonym="group.consumer.heartbeat.interval.ms",
        min_key="group.consumer.min.heartbeat.interval.ms",
        max_key="group.consumer.max.heartbeat.interval.ms",
    ),
    _group(
        "share.session.timeout.ms",
        _INT,
        45000,
        "Session timeout for this share group.",
        validator=_AT_LEAST_1,
        synonym=_GS + "session.timeout.ms",
        min_key=_GS + "min.session.timeout.ms",
        max_key=_GS + "max.session.timeout.ms",
    ),
    _group(
        "share.heartbeat.interval.ms",
        _INT,
        5000,
        "Heartbeat interval for this share group.",
        validator=_AT_LEAST_1,
        synonym=_GS + "heartbeat.interval.ms",
        min_key=_GS + "min.heartbeat.interval.ms",
        max_key=_GS + "max.heartbeat.interval.ms",
    ),
    _group(
        "share.record.lock.duration.ms",
        _INT,
        30000,
        "Acquisition lock duration for this share group.",
        validator=Range(1000),
        synonym=_GS + "record.lock.duration.ms",
        min_key=_GS + "min.record.lock.duration.ms",
        max_key=_GS + "max.record.lock.duration.ms",
    ),
    _group(
        "share.delivery.count.limit",
        _INT,
        5,
        "Deliveries before a record is archived, for this group.",
        validator=_AT_LEAST_1,
        synonym=_GS + "delivery.count.limit",
        min_key=_GS + "min.delivery.count.limit",
        max_key=_GS + "max.delivery.count.limit",
    ),
    _group(
        "share.partition.max.record.locks",
        _INT,
        2000,
        "In-flight record limit per share partition.",
        validator=_AT_LEAST_1,
        synonym=_GS + "partition.max.record.locks",
        min_key=_GS + "min.partition.max.record.locks",
        max_key=_GS + "max.partition.max.record.locks",
    ),
    _group(
        "share.auto.offset.reset",
        _STR,
        "latest",
        "Where a share partition starts with no state: latest, "
        "earliest, or by_duration:<ISO-8601 duration> back from now.",
        validator=Check(_auto_offset_reset_problem, "[latest, earliest, by_duration:PnDTnHnMn.nS]"),
    ),
    _group(
        "share.isolation.level",
        _STR,
        "read_uncommitted",
        "read_committed hides aborted transactional records from the group.",
        validator=OneOf(("read_committed", "read_uncommitted")),
    ),
    _group("share.renew.acknowledge.enable", _BOOL, True, "Whether members may RENEW acquisition locks."),
    _group(
        "errors.deadletterqueue.topic.name",
        _STR,
        "",
        "Dead-letter topic for this share group; empty means none.",
        validator=Check(_dlq_topic_problem, "a topic name or empty"),
    ),
    _group(
        "errors.deadletterqueue.copy.record.enable",
        _BOOL,
        False,
        "Copy the original record into the dead-letter topic, not just its context headers.",
    ),
)

GROUP_LESS_THAN: Final = (
    ("share.heartbeat.interval.ms", "share.session.timeout.ms"),
    ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"),
)

# Attribute spellings must not collide (they back BrokerConfig attribute access).
if len({k.attr for k in BROKER_CONFIGS}) != len(BROKER_CONFIGS):
    raise RuntimeError("two broker configs share an attribute spelling")
