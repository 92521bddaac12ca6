"""Broker configuration: loading, typed access, validation and describe answers.

Why this module exists: configuration is declared once, in
``broker.configdefs`` (name, type, default, bounds, importance, doc per
setting). This module is the only code that turns text into typed values, so
the rules a value must obey at start-up, in CreateTopics, and in
IncrementalAlterConfigs are the same rules, and DescribeConfigs reports
exactly what the broker runs with.

* ``parse_properties`` reads Java ``.properties`` text (comments, ``=``/``:``
  or whitespace separators, backslash continuations, escapes).
* ``BrokerConfig.from_sources(properties, overrides)`` layers defaults <
  file values < ``k=v`` overrides, validates every value and the relations
  between values, and answers typed look-ups (``cfg.get("log.segment.bytes")``
  or ``cfg.log_segment_bytes``) and ``describe()``.
* ``validate_topic_configs`` / ``validate_group_configs`` check per-topic and
  per-group overrides; group values are bounded by the broker's min/max.

Every problem raises ``ConfigError`` naming the setting and the reason.

Settings written in several units follow Kafka's precedence: log.retention.ms
> .minutes > .hours, log.roll.ms > .hours, log.dirs > log.dir, and
log.flush.interval.ms falls back to log.flush.scheduler.interval.ms. Durability
differs on purpose: while log.flush.interval.ms is unset (the default), Shoal,
which has no replicas to lean on, fsyncs a partition before it acknowledges an
acks=-1 produce (``BrokerConfig.fsync_acks_all``); the coordinators' writes
(__consumer_offsets, __share_group_state) follow the same rule.
"""

from __future__ import annotations

import enum
import os
import re
import socket
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from shoal.broker.config.broker_keys import BROKER_CONFIGS, BROKER_LESS_THAN
from shoal.broker.config.group_keys import GROUP_CONFIGS, GROUP_LESS_THAN
from shoal.broker.config.keys import (
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    ShareAutoOffsetReset,
    listener_problem,
    parse_iso8601_duration,
    parse_share_auto_offset_reset,
    render_value,
    synonym_chain,
)
from shoal.broker.config.topic_keys import TOPIC_CONFIGS
from shoal.protocol.constants import ConfigSource as KafkaConfigSource

__all__ = [  # noqa: RUF022 (grouped by kind, not sorted)
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "GROUP_CONFIGS",
    "ConfigDef",
    "ConfigKey",
    "ConfigType",
    "BrokerConfig",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "Listener",
    "ShareAutoOffsetReset",
    "describe_group_configs",
    "describe_topic_configs",
    "parse_iso8601_duration",
    "parse_listener",
    "parse_overrides",
    "parse_properties",
    "parse_share_auto_offset_reset",
    "resolve_group_configs",
    "resolve_topic_configs",
    "validate_group_configs",
    "validate_topic_configs",
]

# --- Java .properties --------------------------------------------------------------

_BLANK: Final = " \t\f"
_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_NEWLINE: Final = re.compile(r"\r\n|\r|\n")


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text into a dict (a later duplicate key wins).

    Follows java.util.Properties.load: ``#`` and ``!`` start comment lines;
    the key ends at the first unescaped ``=``, ``:`` or blank, and one ``=``
    or ``:`` may follow blanks; a line ending in an odd number of backslashes
    continues on the next line, whose leading blanks are dropped; ``\\t``,
    ``\\n``, ``\\r``, ``\\f`` and ``\\uXXXX`` are escapes and a backslash before
    any other character just keeps that character.
    """
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_entry(line)
        result[_unescape(key)] = _unescape(value)
    return result


def _logical_lines(text: str) -> Iterator[str]:
    pending: list[str] | None = None
    for natural in _NEWLINE.split(text):
        stripped = natural.lstrip(_BLANK)
        if pending is None and (not stripped or stripped[0] in "#!"):
            continue
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        continues = trailing % 2 == 1
        piece = stripped[:-1] if continues else stripped
        pending = [piece] if pending is None else [*pending, piece]
        if not continues:
            yield "".join(pending)
            pending = None
    if pending is not None:  # the text ended right after a continuation backslash
        yield "".join(pending)


def _split_entry(line: str) -> tuple[str, str]:
    n, end = len(line), 0
    while end < n and line[end] not in "=:" and line[end] not in _BLANK:
        end += 2 if line[end] == "\\" else 1
    end = min(end, n)
    i = end
    if i < n and line[i] in _BLANK:
        while i < n and line[i] in _BLANK:
            i += 1
        if i < n and line[i] in "=:":
            i += 1
    elif i < n:
        i += 1  # the '=' or ':' that ended the key
    while i < n and line[i] in _BLANK:
        i += 1
    return line[:end], line[i:]


def _unescape(raw: str) -> str:
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            break
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError("properties", "malformed \\uXXXX escape", raw[i : i + 6])
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` (command-line overrides) to a dict; a later key wins."""
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(key.strip() or item, "override must look like key=value", item)
        result[key.strip()] = value.strip()
    return result


# --- listeners ---------------------------------------------------------------------

_WILDCARDS: Final = ("", "0.0.0.0", "::")
LISTENER_PREFIX: Final = "listener.name."
# Security protocols a listener may speak; one that is not here is refused at start.
SERVED_SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Listener:
    """One parsed listener. ``host`` is bare ("" means every interface)."""

    name: str
    host: str
    port: int
    security_protocol: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"

    @property
    def is_wildcard(self) -> bool:
        return self.host in _WILDCARDS


def parse_listener(url: str, protocol_map: Mapping[str, str] | None = None, key: str = "listeners") -> Listener:
    """Parse NAME://host:port; ``protocol_map`` maps names to security protocols."""
    problem = listener_problem(url)
    if problem is not None:
        raise ConfigError(key, problem, url)
    name, rest = url.split("://", 1)
    host, _, port = rest.rpartition(":")
    name = name.upper()
    protocols = (
        _parse_protocol_map(BROKER_CONFIGS["listener.security.protocol.map"].default)
        if protocol_map is None
        else protocol_map
    )
    if name not in protocols:
        raise ConfigError(key, f"listener name {name} has no entry in listener.security.protocol.map", url)
    return Listener(name, host.strip("[]"), int(port), protocols[name])


def _parse_protocol_map(text: str) -> dict[str, str]:
    pairs = (p.partition(":") for p in text.split(",") if p.strip())
    return {name.strip().upper(): proto.strip().upper() for name, _, proto in pairs}


# --- describe answers --------------------------------------------------------------


class ConfigSource(enum.Enum):
    """Where a value came from; ``kafka_id`` is DescribeConfigs' ConfigSource."""

    DEFAULT = "default"
    FILE = "file"
    OVERRIDE = "override"
    TOPIC = "topic"
    GROUP = "group"

    @property
    def kafka_id(self) -> int:
        return _KAFKA_SOURCE_IDS[self]


_KAFKA_SOURCE_IDS: Final = {
    ConfigSource.DEFAULT: KafkaConfigSource.DEFAULT_CONFIG,
    ConfigSource.FILE: KafkaConfigSource.STATIC_BROKER_CONFIG,
    ConfigSource.OVERRIDE: KafkaConfigSource.STATIC_BROKER_CONFIG,
    ConfigSource.TOPIC: KafkaConfigSource.DYNAMIC_TOPIC_CONFIG,
    ConfigSource.GROUP: KafkaConfigSource.GROUP_CONFIG,
}


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of a DescribeConfigs answer."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    synonyms: tuple[ConfigSynonym, ...]
    type: ConfigType
    doc: str


def _select(table: ConfigDef, names: Iterable[str] | None) -> list[ConfigKey]:
    """The keys DescribeConfigs asked for (all when None); unknown names are skipped."""
    return list(table) if names is None else [table[n] for n in names if n in table]


def _check_bounds(
    table: ConfigDef,
    values: Mapping[str, Any],
    bounds: Mapping[str, Any],
    less_than: Iterable[tuple[str, str]],
) -> None:
    """Relations between settings: min_key <= value <= max_key, and a < b pairs."""
    for key in table:
        value = values.get(key.name)
        if value is None:
            continue
        low = bounds.get(key.min_key) if key.min_key else None
        if low is not None and value < low:
            raise ConfigError(key.name, f"must be at least {key.min_key} ({low})", value)
        high = bounds.get(key.max_key) if key.max_key else None
        if high is not None and value > high:
            raise ConfigError(key.name, f"must be at most {key.max_key} ({high})", value)
    for a, b in less_than:
        if values.get(a) is not None and values.get(b) is not None and values[a] >= values[b]:
            raise ConfigError(a, f"must be less than {b} ({values[b]})", values[a])


# --- the broker's configuration ---------------------------------------------------

_BY_ATTR: Final = {k.attr: k.name for k in BROKER_CONFIGS}
_DEFAULT, _FILE, _OVERRIDE = ConfigSource.DEFAULT, ConfigSource.FILE, ConfigSource.OVERRIDE


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """The broker's validated, typed configuration (immutable).

    ``values`` holds every broker setting (None where a setting is unset and
    has no default); ``sources`` says where each came from. Attribute access
    spells a name with underscores: ``cfg.log_segment_bytes``. Lists are
    tuples of strings.
    """

    values: Mapping[str, Any]
    sources: Mapping[str, ConfigSource]
    endpoints: tuple[Listener, ...]
    advertised_endpoints: tuple[Listener, ...]
    # listener.name.<listener>.<setting> overrides: listener name (upper case) -> setting -> typed
    # value. A mechanism-scoped setting keeps its mechanism: "scram-sha-256.sasl.jaas.config".
    per_listener: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))

    # -- construction --
    @classmethod
    def from_sources(cls, properties: Mapping[str, Any] | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
        """Defaults, then ``properties`` (a parsed file), then ``k=v`` overrides."""
        explicit = {name: (raw, _FILE) for name, raw in (properties or {}).items()}
        explicit.update((name, (raw, _OVERRIDE)) for name, raw in parse_overrides(overrides).items())
        return cls._build(explicit)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None, overrides: Iterable[str] = ()) -> BrokerConfig:
        """Read a properties file (None: defaults only) and apply overrides."""
        properties: dict[str, str] = {}
        if path is not None:
            with open(path, encoding="utf-8") as f:
                properties = parse_properties(f.read())
        return cls.from_sources(properties, overrides)

    @classmethod
    def defaults(cls) -> BrokerConfig:
        return cls._build({})

    def with_overrides(self, changes: Mapping[str, Any]) -> BrokerConfig:
        """A copy with ``changes`` applied as overrides (None resets to the default)."""
        explicit = {n: (v, s) for n, v in self.values.items() if (s := self.sources[n]) is not _DEFAULT}
        for listener, settings in self.per_listener.items():
            for setting, value in settings.items():
                explicit[f"{LISTENER_PREFIX}{listener.lower()}.{setting}"] = (value, _FILE)
        for key, raw in changes.items():
            name = BROKER_CONFIGS[key].name  # unknown names fail here
            if raw is None:
                explicit.pop(name, None)
            else:
                explicit[name] = (raw, _OVERRIDE)
        return self._build(explicit)

    @classmethod
    def _build(cls, explicit: Mapping[str, tuple[Any, ConfigSource]]) -> BrokerConfig:
        values = BROKER_CONFIGS.defaults()
        sources = dict.fromkeys(values, _DEFAULT)
        listener_explicit = {n: v for n, (v, _) in explicit.items() if n.startswith(LISTENER_PREFIX)}
        explicit = {n: v for n, v in explicit.items() if not n.startswith(LISTENER_PREFIX)}
        for name, (raw, source) in explicit.items():
            values[name] = BROKER_CONFIGS[name].parse(raw)
            sources[name] = source
        _check_bounds(BROKER_CONFIGS, values, values, BROKER_LESS_THAN)
        queued = values["queued.max.request.bytes"]
        if queued != -1 and queued < values["socket.request.max.bytes"]:
            raise ConfigError(  # Kafka's rule: every request must fit an empty pool
                "queued.max.request.bytes",
                "must be -1 or at least socket.request.max.bytes",
                render_value(queued),
            )
        if "classic" not in values["group.coordinator.rebalance.protocols"]:
            raise ConfigError("group.coordinator.rebalance.protocols", "must include classic")
        protocols = _parse_protocol_map(values["listener.security.protocol.map"])
        endpoints = tuple(parse_listener(u, protocols) for u in values["listeners"])
        unserved = [e for e in endpoints if e.security_protocol not in SERVED_SECURITY_PROTOCOLS]
        if unserved:  # refused, never served as something weaker than asked
            raise ConfigError(
                "listeners",
                "Shoal does not serve "
                + ", ".join(f"{e.name}://{e.host}:{e.port} ({e.security_protocol})" for e in unserved)
                + f"; it serves {', '.join(SERVED_SECURITY_PROTOCOLS)}",
                render_value(values["listeners"]),
            )
        ports = [e.port for e in endpoints if e.port != 0]
        if len(set(ports)) != len(ports):
            raise ConfigError("listeners", "each listener needs its own port", render_value(values["listeners"]))
        advertised = cls._advertised(values["advertised.listeners"], endpoints, protocols)
        per_listener = _per_listener(listener_explicit, {e.name for e in endpoints})
        return cls(MappingProxyType(values), MappingProxyType(sources), endpoints, advertised, per_listener)

    @staticmethod
    def _advertised(
        urls: tuple[str, ...] | None, endpoints: tuple[Listener, ...], protocols: Mapping[str, str]
    ) -> tuple[Listener, ...]:
        if urls is None:
            return tuple(_routable(e) for e in endpoints)
        names = {e.name for e in endpoints}
        result = []
        for url in urls:
            listener = parse_listener(url, protocols, key="advertised.listeners")
            if listener.name not in names:
                raise ConfigError(
                    "advertised.listeners",
                    f"listener name {listener.name} is not among the names in listeners",
                    url,
                )
            if listener.host in ("0.0.0.0", "::"):
                raise ConfigError("advertised.listeners", "a wildcard address cannot be advertised", url)
            result.append(_routable(listener))
        return tuple(result)

    # -- typed access --
    def get(self, name: str) -> Any:
        """The typed value of broker setting ``name`` (ConfigError if unknown)."""
        return self.values[BROKER_CONFIGS[name].name]

    def source(self, name: str) -> ConfigSource:
        return self.sources[BROKER_CONFIGS[name].name]

    def __getattr__(self, attr: str) -> Any:
        name = _BY_ATTR.get(attr)
        if name is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {attr!r}")
        return self.values[name]

    def _winner(self, name: str) -> tuple[str, int]:
        """Which spelling of ``name`` decides its value, and its unit factor."""
        chain = synonym_chain(name)
        explicit = [(n, f) for n, f in chain if self.sources[n] is not _DEFAULT and self.values[n] is not None]
        for member in explicit or chain:
            if self.values[member[0]] is not None:
                return member
        return chain[0]

    def deciding_key(self, name: str) -> str:
        """The spelling of ``name`` that currently supplies its value."""
        return self._winner(BROKER_CONFIGS[name].name)[0]

    def effective(self, name: str) -> Any:
        """``name`` after its synonyms, in the unit of the first spelling (-1 stays -1)."""
        member, factor = self._winner(BROKER_CONFIGS[name].name)
        value = self.values[member]
        if isinstance(value, int) and not isinstance(value, bool) and factor != 1:
            return -1 if value < 0 else value * factor
        return value

    # -- derived values --
    @property
    def retention_ms(self) -> int:
        """Effective log retention in ms; -1 means no time limit."""
        return self.effective("log.retention.ms")

    @property
    def roll_ms(self) -> int:
        return self.effective("log.roll.ms")

    @property
    def flush_interval_ms(self) -> int:
        return self.effective("log.flush.interval.ms")

    @property
    def fsync_acks_all(self) -> bool:
        """True while log.flush.interval.ms is unset: fsync before answering acks=-1."""
        return self.values["log.flush.interval.ms"] is None

    @property
    def data_dirs(self) -> tuple[str, ...]:
        dirs = self.effective("log.dirs")
        return (dirs,) if isinstance(dirs, str) else dirs

    @property
    def data_dir(self) -> str:
        """The directory Shoal stores partitions in (the first data dir)."""
        return self.data_dirs[0]

    @property
    def share_groups_enabled(self) -> bool:
        protocols = self.values["group.coordinator.rebalance.protocols"]
        return self.values["group.share.enable"] or "share" in protocols

    @property
    def listener(self) -> Listener:
        """The first listener: the one named in start-up lines and reached by in-process tools."""
        return self.endpoints[0]

    @property
    def advertised_listener(self) -> Listener:
        """What clients are told for ``listener``."""
        return self.advertised_for(self.listener.name)

    def advertised_for(self, name: str) -> Listener:
        """What clients that came in on listener ``name`` are told (Kafka answers each request
        with the addresses of the listener it arrived on)."""
        own = next(e for e in self.endpoints if e.name == name)
        return next((a for a in self.advertised_endpoints if a.name == own.name), _routable(own))

    def for_listener(self, listener: str, name: str, mechanism: str | None = None) -> Any:
        """Setting ``name`` as listener ``listener`` sees it: its listener.name.<l>.[<mechanism>.]<name>
        override if set, else the broker-wide value (None for a mechanism-scoped setting nobody set)."""
        own = self.per_listener.get(listener.upper(), {})
        if mechanism is not None:
            scoped = f"{mechanism.lower()}.{name}"
            return own.get(scoped)
        if name in own:
            return own[name]
        return self.values[BROKER_CONFIGS[name].name]

    def listener_host_port(self) -> tuple[str, int]:
        return self.listener.host, self.listener.port

    def advertised_host_port(self) -> tuple[str, int]:
        return self.advertised_listener.host, self.advertised_listener.port

    def topic_defaults(self) -> dict[str, Any]:
        """Every topic setting as it applies to a topic without overrides."""
        out: dict[str, Any] = {}
        for k in TOPIC_CONFIGS:  # a key with no broker setting behind it has its own default
            out[k.name] = k.default if k.synonym is None else self.effective(k.synonym)
        return out

    def group_defaults(self) -> dict[str, Any]:
        """Every group setting as it applies to a group without overrides."""
        return {k.name: k.default if k.synonym is None else self.get(k.synonym) for k in GROUP_CONFIGS}

    # -- DescribeConfigs --
    def describe(self, names: Iterable[str] | None = None) -> list[ConfigEntry]:
        """Entries for ``names`` (all when None; unknown names are skipped)."""
        keys = _select(BROKER_CONFIGS, names)
        return [
            ConfigEntry(
                k.name,
                None if k.sensitive else render_value(self.values[k.name]),  # secrets are never shown
                self.sources[k.name],
                k.read_only,
                k.sensitive,
                tuple(ConfigSynonym(s.name, None, s.source) for s in self.synonyms(k.name))
                if k.sensitive
                else self.synonyms(k.name),
                k.type,
                k.doc,
            )
            for k in keys
        ]

    def synonyms(self, name: str) -> tuple[ConfigSynonym, ...]:
        """Every spelling that could supply ``name``, strongest first."""
        chain = [n for n, _ in synonym_chain(name)]
        explicit = [
            ConfigSynonym(n, render_value(self.values[n]), self.sources[n])
            for n in chain
            if self.sources[n] is not _DEFAULT
        ]
        defaults = [
            ConfigSynonym(n, render_value(d), _DEFAULT) for n in chain if (d := BROKER_CONFIGS[n].default) is not None
        ]
        return tuple(explicit + defaults)


def _per_listener(explicit: Mapping[str, Any], names: set[str]) -> Mapping[str, Mapping[str, Any]]:
    """Parse listener.name.<listener>.[<mechanism>.]<setting> entries (Kafka's per-listener
    overrides); the listener must be one of ``listeners``, the setting one the broker knows."""
    out: dict[str, dict[str, Any]] = {}
    for key, raw in explicit.items():
        rest = key[len(LISTENER_PREFIX) :]
        listener, _, setting = rest.partition(".")
        if listener.upper() not in names:
            raise ConfigError(key, f"listener {listener} is not among the names in listeners", str(raw))
        scope = ""
        if setting not in BROKER_CONFIGS:
            mechanism, _, inner = setting.partition(".")
            if inner not in BROKER_CONFIGS or not mechanism:
                raise ConfigError(key, f"{setting} is not a setting Shoal knows", "")
            scope, setting = mechanism.lower() + ".", inner
        known = BROKER_CONFIGS[setting]
        out.setdefault(listener.upper(), {})[scope + known.name] = None if raw is None else known.parse(raw)
    return MappingProxyType({k: MappingProxyType(v) for k, v in out.items()})


def _routable(listener: Listener) -> Listener:
    if not listener.is_wildcard:
        return listener
    return Listener(listener.name, socket.gethostname(), listener.port, listener.security_protocol)


# --- topic and group overrides ------------------------------------------------------


def _parse_overrides(table: ConfigDef, configs: Mapping[str, Any]) -> dict[str, Any]:
    return {name: None if raw is None else table[name].parse(raw) for name, raw in configs.items()}


def validate_topic_configs(configs: Mapping[str, Any], broker: BrokerConfig | None = None) -> dict[str, Any]:
    """Check a topic's overrides (CreateTopics, IncrementalAlterConfigs).

    Pass the topic's complete override set; a None value means "no override"
    and is kept as None. Returns typed values; raises ConfigError.
    """
    parsed = _parse_overrides(TOPIC_CONFIGS, configs)
    merged = resolve_topic_configs(parsed, broker)
    _check_bounds(TOPIC_CONFIGS, merged, merged, ())
    return parsed


def resolve_topic_configs(overrides: Mapping[str, Any], broker: BrokerConfig | None = None) -> dict[str, Any]:
    """Every topic setting for a topic with ``overrides``, falling back to the broker."""
    base = TOPIC_CONFIGS.defaults() if broker is None else broker.topic_defaults()
    given = _parse_overrides(TOPIC_CONFIGS, overrides)
    return {**base, **{k: v for k, v in given.items() if v is not None}}


def describe_topic_configs(
    overrides: Mapping[str, Any], broker: BrokerConfig, names: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries for one topic."""
    given = {k: v for k, v in _parse_overrides(TOPIC_CONFIGS, overrides).items() if v is not None}
    keys = _select(TOPIC_CONFIGS, names)
    entries = []
    for k in keys:
        synonym = k.synonym or k.name
        inherited = broker.synonyms(synonym) if k.synonym else ()
        if k.name in given:
            value, source = render_value(given[k.name]), ConfigSource.TOPIC
            inherited = (ConfigSynonym(k.name, value, source), *inherited)
        elif k.synonym is None:  # no broker setting behind it: its own default
            value, source = render_value(k.default), _DEFAULT
        else:
            value = render_value(broker.effective(synonym))
            source = broker.source(broker.deciding_key(synonym))
        entries.append(ConfigEntry(k.name, value, source, False, k.sensitive, inherited, k.type, k.doc))
    return entries


def validate_group_configs(configs: Mapping[str, Any], broker: BrokerConfig) -> dict[str, Any]:
    """Check a group's overrides against the broker's min/max settings.

    Pass the group's complete override set; None values mean "no override".
    Returns typed values; raises ConfigError naming the offending setting.
    """
    parsed = _parse_overrides(GROUP_CONFIGS, configs)
    merged = resolve_group_configs(parsed, broker)
    _check_bounds(GROUP_CONFIGS, merged, broker.values, GROUP_LESS_THAN)
    return parsed


def resolve_group_configs(overrides: Mapping[str, Any], broker: BrokerConfig) -> dict[str, Any]:
    """Every group setting for a group with ``overrides``, falling back to the broker."""
    given = _parse_overrides(GROUP_CONFIGS, overrides)
    return {**broker.group_defaults(), **{k: v for k, v in given.items() if v is not None}}


def describe_group_configs(
    overrides: Mapping[str, Any], broker: BrokerConfig, names: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries for one group."""
    given = {k: v for k, v in _parse_overrides(GROUP_CONFIGS, overrides).items() if v is not None}
    keys = _select(GROUP_CONFIGS, names)
    entries = []
    for k in keys:
        inherited = () if k.synonym is None else broker.synonyms(k.synonym)
        if k.name in given:
            value, source = render_value(given[k.name]), ConfigSource.GROUP
            inherited = (ConfigSynonym(k.name, value, source), *inherited)
        elif k.synonym is None:
            value, source = render_value(k.default), _DEFAULT
        else:
            value, source = render_value(broker.get(k.synonym)), broker.source(k.synonym)
        entries.append(ConfigEntry(k.name, value, source, False, k.sensitive, inherited, k.type, k.doc))
    return entries
