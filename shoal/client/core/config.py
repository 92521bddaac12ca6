"""Client configuration: every setting declared once, checked at construction.

Why: a typo in a setting name is the most common client bug, and Kafka's
Java client catches it late or never. Here every client kind has one table of
``Option`` rows (Kafka's dotted name, type, default, bounds, doc), and
``build_config`` turns what the application passed — a mapping with Kafka's
names, keyword arguments with underscores (``linger_ms=5``), or both — into a
read-only ``Config``. Unknown keys, wrong types, values out of bounds and bad
``bootstrap.servers`` strings raise ``ConfigError`` naming the key, before
any socket is opened.

Names and defaults follow Apache Kafka 4.2's clients. Python-only settings
(serializers) take callables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shoal.client.core.errors import ConfigError

__all__ = [
    "ADMIN_OPTIONS",
    "CONSUMER_OPTIONS",
    "PRODUCER_OPTIONS",
    "SHARE_CONSUMER_OPTIONS",
    "Config",
    "Option",
    "build_config",
    "parse_bootstrap",
]

_REQUIRED = object()


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: Kafka's name, a type tag, a default and its bounds."""

    name: str
    type: str  # "int" | "bool" | "str" | "list" | "servers" | "callable" | "choice" | "acks"
    default: Any
    doc: str
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False

    def convert(self, value: Any) -> Any:
        """Check and normalise one value; raises ConfigError naming the key."""
        if value is None:
            if self.nullable:
                return None
            raise ConfigError(self.name, "must not be None")
        kind = self.type
        if kind == "int":
            if isinstance(value, bool):
                raise ConfigError(self.name, f"expected an integer, got {value!r}")
            if isinstance(value, str):
                try:
                    value = int(value.strip())
                except ValueError:
                    raise ConfigError(self.name, f"expected an integer, got {value!r}") from None
            if not isinstance(value, int):
                raise ConfigError(self.name, f"expected an integer, got {type(value).__name__}")
            if self.lo is not None and value < self.lo:
                raise ConfigError(self.name, f"{value} is below the minimum {self.lo}")
            if self.hi is not None and value > self.hi:
                raise ConfigError(self.name, f"{value} is above the maximum {self.hi}")
            return value
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            raise ConfigError(self.name, f"expected true or false, got {value!r}")
        if kind == "str":
            if not isinstance(value, str):
                raise ConfigError(self.name, f"expected a string, got {type(value).__name__}")
            return value
        if kind == "choice":
            text = str(value).strip().lower() if isinstance(value, str) else value
            if text not in self.choices:
                raise ConfigError(self.name, f"{value!r} is not one of {', '.join(self.choices)}")
            return text
        if kind == "acks":
            text = str(value).strip().lower()
            mapping = {"all": -1, "-1": -1, "0": 0, "1": 1}
            if text not in mapping:
                raise ConfigError(self.name, f"{value!r} is not one of all, -1, 0, 1")
            return mapping[text]
        if kind == "list":
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, Iterable):
                raise ConfigError(self.name, f"expected a list, got {type(value).__name__}")
            out = []
            for item in items:
                if not isinstance(item, str):
                    raise ConfigError(self.name, f"expected strings, got {item!r}")
                item = item.strip().lower()
                if not item:
                    continue
                if self.choices and item not in self.choices:
                    raise ConfigError(self.name, f"{item!r} is not one of {', '.join(self.choices)}")
                out.append(item)
            if not out:
                raise ConfigError(self.name, "must name at least one entry")
            return tuple(out)
        if kind == "servers":
            return parse_bootstrap(value, self.name)
        if kind == "callable":
            if not callable(value):
                raise ConfigError(self.name, f"expected a callable, got {type(value).__name__}")
            return value
        raise AssertionError(kind)


def parse_bootstrap(value: Any, key: str = "bootstrap.servers") -> tuple[tuple[str, int], ...]:
    """``"h1:9092,h2:9093"`` (or a list of such strings) -> ((host, port), ...)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, Iterable) or isinstance(items, bytes):
        raise ConfigError(key, f"expected 'host:port[,host:port...]', got {value!r}")
    out: list[tuple[str, int]] = []
    for raw in items:
        if isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[0], str) and isinstance(raw[1], int):
            raw = f"[{raw[0]}]:{raw[1]}" if ":" in raw[0] else f"{raw[0]}:{raw[1]}"  # already parsed
        if not isinstance(raw, str):
            raise ConfigError(key, f"expected 'host:port' strings, got {raw!r}")
        entry = raw.strip()
        if not entry:
            continue
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        host, sep, port_text = entry.rpartition(":")
        if not sep or not host:
            raise ConfigError(key, f"{raw!r} is not 'host:port'")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(key, f"{raw!r} has no valid port")
        if any(c.isspace() for c in host):
            raise ConfigError(key, f"{raw!r} has an invalid host")
        out.append((host, int(port_text)))
    if not out:
        raise ConfigError(key, "no servers given")
    return tuple(out)


_MAX_INT = 2147483647

COMMON_OPTIONS: tuple[Option, ...] = (
    Option("bootstrap.servers", "servers", _REQUIRED, "host:port pairs used to discover the cluster"),
    Option("client.id", "str", "shoal-python", "sent to brokers in every request header"),
    Option("request.timeout.ms", "int", 30000, "time to wait for one response before failing it", 1, _MAX_INT),
    Option("default.api.timeout.ms", "int", 60000, "time limit of blocking calls (commit, metadata, admin)", 1),
    Option("retry.backoff.ms", "int", 100, "first pause before retrying a failed request", 0, _MAX_INT),
    Option("retry.backoff.max.ms", "int", 1000, "largest pause between retries (exponential, with jitter)", 0),
    Option("reconnect.backoff.ms", "int", 50, "first pause before reconnecting to a broker", 0),
    Option("reconnect.backoff.max.ms", "int", 1000, "largest pause between reconnects", 0),
    Option("socket.connection.setup.timeout.ms", "int", 10000, "time to open a TCP connection", 1),
    Option("metadata.max.age.ms", "int", 300000, "metadata is refreshed at least this often", 0),
    # TLS (librdkafka's names; shoal.client.core.tls builds the context)
    Option("ssl.ca.location", "str", None, "PEM file of the CAs the broker's certificate must chain to", nullable=True),
    Option("ssl.certificate.location", "str", None, "PEM file of this client's certificate (chain)", nullable=True),
    Option("ssl.key.location", "str", None, "PEM file of this client's private key", nullable=True),
    Option("ssl.key.password", "str", None, "password of an encrypted ssl.key.location", nullable=True),
    Option(
        "ssl.endpoint.identification.algorithm",
        "choice",
        "https",
        "https: the broker's certificate must name the host connected to; none: not checked",
        choices=("https", "none"),
    ),
    # SASL, by librdkafka's names (core/sasl.py logs in on every new connection)
    Option(
        "security.protocol",
        "str",
        "PLAINTEXT",
        "PLAINTEXT, SSL (TLS: ssl.*), SASL_PLAINTEXT (log in with sasl.mechanism) or SASL_SSL (both)",
    ),
    Option("sasl.mechanism", "str", "PLAIN", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (GSSAPI is not offered)"),
    Option("sasl.username", "str", None, "SASL user name", nullable=True),
    Option("sasl.password", "str", None, "SASL password (never logged)", nullable=True),
)

PRODUCER_OPTIONS: tuple[Option, ...] = (
    *COMMON_OPTIONS,
    Option("acks", "acks", -1, "all/-1: wait for the durable write; 1: for the leader's write; 0: no answer"),
    Option("linger.ms", "int", 5, "how long a batch waits for more records before it is sent", 0),
    Option("batch.size", "int", 16384, "upper size of one partition's batch in bytes", 1),
    Option(
        "compression.type",
        "choice",
        "none",
        "codec of produced batches",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
    ),
    Option("compression.level", "int", None, "codec level (codec default when unset)", nullable=True),
    Option("enable.idempotence", "bool", True, "producer ids and sequence numbers: retries never duplicate"),
    Option("max.in.flight.requests.per.connection", "int", 5, "unanswered produce requests per broker", 1),
    Option("retries", "int", _MAX_INT, "how often a failed batch is retried (bounded by delivery.timeout.ms)", 0),
    Option("delivery.timeout.ms", "int", 120000, "time limit from send() to the broker's acknowledgement", 1),
    Option("buffer.memory", "int", 33554432, "bytes of records waiting to be sent before send() blocks", 1),
    Option("max.block.ms", "int", 60000, "how long send() may block on a full buffer or missing metadata", 0),
    Option("max.request.size", "int", 1048576, "largest record batch and produce request in bytes", 1),
    Option(
        "partitioner",
        "choice",
        "murmur2_random",
        "murmur2_random: Java's default (murmur2 on keys, sticky for null keys); murmur2; random",
        choices=("murmur2_random", "murmur2", "random"),
    ),
    Option("partitioner.ignore.keys", "bool", False, "spread keyed records like null-key ones"),
    Option("key.serializer", "callable", None, "turns keys into bytes (default: bytes or UTF-8 str)", nullable=True),
    Option(
        "value.serializer", "callable", None, "turns values into bytes (default: bytes or UTF-8 str)", nullable=True
    ),
)

_FETCH_OPTIONS: tuple[Option, ...] = (
    Option("fetch.min.bytes", "int", 1, "bytes a fetch waits for before the broker answers", 0),
    Option("fetch.max.bytes", "int", 52428800, "upper size of one fetch response", 0),
    Option("fetch.max.wait.ms", "int", 500, "longest time the broker holds a fetch waiting for data", 0),
    Option("max.poll.records", "int", 500, "records returned by one poll", 1),
    Option("max.poll.interval.ms", "int", 300000, "a consumer that does not poll this long leaves its group", 1),
    Option("check.crcs", "bool", True, "verify the CRC of every fetched batch"),
    Option("client.rack", "str", "", "rack of this client, sent to the broker"),
    Option("key.deserializer", "callable", None, "turns key bytes into objects (default: bytes)", nullable=True),
    Option("value.deserializer", "callable", None, "turns value bytes into objects (default: bytes)", nullable=True),
)

CONSUMER_OPTIONS: tuple[Option, ...] = (
    *COMMON_OPTIONS,
    *_FETCH_OPTIONS,
    Option("group.id", "str", None, "consumer group (None: no group, assign() only)", nullable=True),
    Option("group.instance.id", "str", None, "static membership id", nullable=True),
    Option("group.protocol", "choice", "classic", "rebalance protocol", choices=("classic", "consumer")),
    Option("group.remote.assignor", "str", None, "server-side assignor (group.protocol=consumer)", nullable=True),
    Option("session.timeout.ms", "int", 45000, "the group drops a member silent this long", 1),
    Option("heartbeat.interval.ms", "int", 3000, "pause between heartbeats", 1),
    Option(
        "auto.offset.reset",
        "choice",
        "latest",
        "where to start without a committed offset",
        choices=("latest", "earliest", "none"),
    ),
    Option("enable.auto.commit", "bool", True, "commit the positions of returned records periodically"),
    Option("auto.commit.interval.ms", "int", 5000, "pause between automatic commits", 0),
    Option(
        "partition.assignment.strategy",
        "list",
        ("range",),
        "assignors offered to the group, preferred first",
        choices=("range", "roundrobin", "sticky", "cooperative-sticky"),
    ),
    Option("max.partition.fetch.bytes", "int", 1048576, "upper size of one partition in a fetch response", 1),
    Option(
        "isolation.level",
        "choice",
        "read_uncommitted",
        "whether aborted transactional records are returned",
        choices=("read_uncommitted", "read_committed"),
    ),
)

SHARE_CONSUMER_OPTIONS: tuple[Option, ...] = (
    *COMMON_OPTIONS,
    *_FETCH_OPTIONS,
    Option("group.id", "str", _REQUIRED, "the share group"),
    Option(
        "share.acknowledgement.mode",
        "choice",
        "implicit",
        "implicit: the next poll accepts the previous poll's records; explicit: acknowledge() each record",
        choices=("implicit", "explicit"),
    ),
    Option(
        "share.acquire.mode",
        "choice",
        "batch_optimized",
        "batch_optimized: whole batches may exceed max.poll.records; record_limit: never more than it",
        choices=("batch_optimized", "record_limit"),
    ),
)

ADMIN_OPTIONS: tuple[Option, ...] = COMMON_OPTIONS

_TABLES: dict[str, tuple[Option, ...]] = {
    "producer": PRODUCER_OPTIONS,
    "consumer": CONSUMER_OPTIONS,
    "share_consumer": SHARE_CONSUMER_OPTIONS,
    "admin": ADMIN_OPTIONS,
}

_UNSUPPORTED = {
    "transactional.id": "transactions are not supported by this client",
}


class Config(Mapping[str, Any]):
    """Read-only, validated settings; ``cfg["linger.ms"]`` or ``cfg.linger_ms``."""

    __slots__ = ("_kind", "_values")

    def __init__(self, kind: str, values: dict[str, Any]) -> None:
        self._kind = kind
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            # Private and dunder names are never settings; answering them from
            # _values recursed forever while pickle restored an instance.
            raise AttributeError(attr)
        try:
            return self._values[attr.replace("_", ".")]
        except KeyError:
            raise AttributeError(attr) from None

    def __repr__(self) -> str:
        shown = {k: "***" if "password" in k and v is not None else v for k, v in self._values.items()}
        return f"Config({self._kind}, {shown!r})"

    def with_overrides(self, **changes: Any) -> Config:
        """A copy with some values replaced (validated like the originals)."""
        return build_config(self._kind, self._values, changes)


def build_config(kind: str, config: Mapping[str, Any] | None = None, kwargs: Mapping[str, Any] | None = None) -> Config:
    """Validate ``config`` (Kafka names) merged with ``kwargs`` (underscored names)."""
    table = {o.name: o for o in _TABLES[kind]}
    given: dict[str, Any] = {}
    for source in (config or {}), {k.replace("_", "."): v for k, v in (kwargs or {}).items()}:
        if not isinstance(source, Mapping):
            raise ConfigError("<config>", f"expected a mapping of settings, got {type(source).__name__}")
        for key, value in source.items():
            if not isinstance(key, str):
                raise ConfigError(repr(key), "setting names must be strings")
            if key not in table:
                raise ConfigError(key, _UNSUPPORTED.get(key, f"unknown {kind.replace('_', ' ')} setting"))
            given[key] = value
    values: dict[str, Any] = {}
    for name, opt in table.items():
        if name in given:
            values[name] = opt.convert(given[name])
        elif opt.default is _REQUIRED:
            raise ConfigError(name, "is required")
        else:
            values[name] = opt.default
    _check_relations(kind, values, given)
    return Config(kind, values)


# Upper-case names, as librdkafka and Kafka spell them (any case is accepted).
SECURITY_PROTOCOLS: tuple[str, ...] = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _check_security(v: dict[str, Any]) -> None:
    for key, allowed in (("security.protocol", SECURITY_PROTOCOLS), ("sasl.mechanism", SASL_MECHANISMS)):
        text = str(v[key]).strip().upper()
        if text not in allowed:
            raise ConfigError(key, f"{v[key]!r} is not one of {', '.join(allowed)}")
        v[key] = text
    if v["security.protocol"].startswith("SASL_") and (not v["sasl.username"] or v["sasl.password"] is None):
        raise ConfigError("sasl.username", f"sasl.username and sasl.password are needed with {v['security.protocol']}")


def _check_relations(kind: str, v: dict[str, Any], given: Mapping[str, Any]) -> None:
    _check_security(v)
    if v["retry.backoff.max.ms"] < v["retry.backoff.ms"]:
        raise ConfigError("retry.backoff.max.ms", "must not be below retry.backoff.ms")
    if kind == "producer" and v["enable.idempotence"] and "enable.idempotence" not in given:
        # As in Kafka: idempotence is on by default, but quietly off when the
        # application picked settings it cannot work with.
        if v["acks"] != -1 or v["max.in.flight.requests.per.connection"] > 5 or v["retries"] == 0:
            v["enable.idempotence"] = False
    if kind == "producer" and v["delivery.timeout.ms"] < v["linger.ms"] + v["request.timeout.ms"]:
        # As in Kafka: an explicit value that cannot hold one linger and one
        # request is an error; the default is raised to fit.
        if "delivery.timeout.ms" in given:
            raise ConfigError("delivery.timeout.ms", "must be at least linger.ms + request.timeout.ms")
        v["delivery.timeout.ms"] = min(v["linger.ms"] + v["request.timeout.ms"], _MAX_INT)
    if kind == "producer" and v["enable.idempotence"]:
        if v["retries"] == 0:
            raise ConfigError("retries", "must not be 0 with enable.idempotence")
        if v["max.in.flight.requests.per.connection"] > 5:
            raise ConfigError("max.in.flight.requests.per.connection", "must be at most 5 with enable.idempotence")
        if v["acks"] != -1:
            raise ConfigError("acks", "must be all (-1) with enable.idempotence")
    if kind == "consumer" and v["heartbeat.interval.ms"] >= v["session.timeout.ms"]:
        raise ConfigError("heartbeat.interval.ms", "must be lower than session.timeout.ms")


def describe(kind: str) -> list[tuple[str, str, Any, str]]:
    """(name, type, default, doc) of every setting of a client kind, for docs and the CLI."""
    return [(o.name, o.type, None if o.default is _REQUIRED else o.default, o.doc) for o in _TABLES[kind]]


SerializerFn = Callable[[Any], bytes | None]
