"""Options of the ``shoal`` Spark source: parsed once, checked before anything connects.

Why a module of its own: Spark hands a data source nothing but a
case-insensitive map of strings, and a typo there ("startingOffset",
"kafka.bootstrap.server") would otherwise surface as a hang or as silently
ignored behaviour deep inside a running query. Every option is declared here
once, with Spark's Kafka-source spelling wherever it means the same thing, and
``parse_source_options`` turns the map into a frozen ``SourceOptions`` or
raises ``ConfigError`` naming the option. Settings for the bundled client pass
through with Spark's ``kafka.`` prefix (``kafka.request.timeout.ms``) and are
validated by ``client.core.config`` against the client they will configure.

Parsing happens in two steps because Spark calls ``DataSource.schema()``
before it says whether the read is a batch or a stream: ``parse_source_options``
checks what holds for both, ``for_batch()`` / ``for_stream()`` add the rules of
one mode (options of the other mode are refused, not ignored). The module is
pure Python, no pyspark import, so it is tested directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from shoal.client.core.config import CONSUMER_OPTIONS, SHARE_CONSUMER_OPTIONS, Config, build_config, parse_bootstrap
from shoal.client.core.errors import ConfigError
from shoal.protocol.constants import ListOffsetsTimestamp

__all__ = [
    "BATCH_ONLY",
    "STREAM_ONLY",
    "OffsetSpec",
    "SourceOptions",
    "parse_offset_spec",
    "parse_source_options",
]

# The stream's share consumer returns renewed records from one poll only if a
# poll may return everything held; the broker's lock limits bound what it holds.
STREAM_MAX_POLL_RECORDS = 1_000_000

# Spark's spelling of every option, keyed by the lower-case form Spark passes.
_COMMON = (
    "kafka.bootstrap.servers",
    "subscribe",
    "includeHeaders",
    "startingOffsets",
    "minPartitions",
    "failOnDataLoss",
)
BATCH_ONLY = (
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "maxRecordsPerPartition",
)
STREAM_ONLY = ("kafka.group.id", "maxRecordsPerTrigger", "share.lock.renew", "share.poll.timeout.ms", "shoal.read.path")
# A stream's records are read and decoded by the executors, from the ranges the driver acquired
# (client.spark.stream). The option that chose the driver instead is still accepted with the one
# value left, so queries that spelled out the default keep working; any other value is refused.
_READ_PATH_OPTION = "shoal.read.path"
_CANONICAL = {name.lower(): name for name in (*_COMMON, *BATCH_ONLY, *STREAM_ONLY)}

# Spark's Kafka source refuses these consumer settings for the same reasons.
_REFUSED_CLIENT = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "the source decides when records are committed",
    "group.id": "use the source option 'kafka.group.id'",
    "share.acknowledgement.mode": "the source acknowledges explicitly, once Spark committed a batch",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
}
_CLIENT_KEYS = {o.name for o in CONSUMER_OPTIONS} | {o.name for o in SHARE_CONSUMER_OPTIONS}


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a batch read starts or ends.

    ``kind`` is ``earliest`` | ``latest`` | ``offsets`` (per partition, -2 =
    earliest, -1 = latest) | ``timestamp`` (one time for every partition) |
    ``timestamps`` (per partition). ``option`` is the option it came from, for
    error messages.
    """

    kind: str
    option: str
    timestamp: int | None = None
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Validated options of one ``shoal`` read (see the module docstring)."""

    bootstrap_servers: str
    topics: tuple[str, ...]
    include_headers: bool = False
    starting: OffsetSpec | None = None
    ending: OffsetSpec | None = None
    starting_timestamp_strategy: str = "error"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    group_id: str | None = None
    max_records_per_trigger: int | None = None
    lock_renew: bool = True
    poll_timeout_ms: int = 500
    # the kafka.* client settings; kept out of the repr: they may hold sasl.password or ssl.key.password
    client: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False)
    given: frozenset[str] = frozenset()

    # -- per mode --------------------------------------------------------------------
    def for_batch(self) -> SourceOptions:
        """Checks for ``spark.read``; returns self with the batch defaults filled in."""
        for name in STREAM_ONLY:
            if name in self.given and name != "kafka.group.id":
                raise ConfigError(name, "applies to streaming reads (spark.readStream) only")
        starting = self.starting or OffsetSpec("earliest", "startingOffsets")
        ending = self.ending or OffsetSpec("latest", "endingOffsets")
        if starting.kind == "latest" or (
            starting.kind == "offsets" and ListOffsetsTimestamp.LATEST in starting.per_partition.values()
        ):
            raise ConfigError(starting.option, "latest (-1) is not allowed as the start of a batch read")
        if ending.kind == "earliest" or (
            ending.kind == "offsets" and ListOffsetsTimestamp.EARLIEST in ending.per_partition.values()
        ):
            raise ConfigError(ending.option, "earliest (-2) is not allowed as the end of a batch read")
        self.batch_client_config()
        return replace(self, starting=starting, ending=ending)

    def for_stream(self) -> SourceOptions:
        """Checks for ``spark.readStream``."""
        for name in BATCH_ONLY:
            if name in self.given:
                raise ConfigError(name, "applies to batch reads (spark.read) only")
        if not self.group_id:
            raise ConfigError("kafka.group.id", "is required: the share group the stream reads")
        if self.starting is not None and self.starting.kind not in ("earliest", "latest"):
            raise ConfigError(
                "startingOffsets",
                "a share group stream starts at 'earliest' or 'latest' (the group's share.auto.offset.reset)",
            )
        self.stream_client_config()
        return self

    def batch_client_config(self) -> Config:
        """Settings of the Fetch connections executors open (consumer table)."""
        mapping: dict[str, Any] = {"max.partition.fetch.bytes": 8 * 1024 * 1024, "fetch.max.wait.ms": 100}
        mapping.update(self._client_settings("consumer"))
        mapping["bootstrap.servers"] = self.bootstrap_servers
        return _client_config("consumer", mapping)

    def stream_client_config(self) -> Config:
        """Settings of the runner's share consumer (share consumer table)."""
        settings = self._client_settings("share_consumer")
        if "max.poll.records" in settings:
            raise ConfigError(
                "kafka.max.poll.records",
                "is set by the stream source (every held record must come back from one poll); "
                "use maxRecordsPerTrigger to bound batches",
            )
        mapping: dict[str, Any] = {"max.poll.records": STREAM_MAX_POLL_RECORDS}
        mapping.update(settings)
        mapping["bootstrap.servers"] = self.bootstrap_servers
        mapping["group.id"] = self.group_id
        mapping["share.acknowledgement.mode"] = "explicit"
        return _client_config("share_consumer", mapping)

    def stream_fetch_config(self) -> Config:
        """Settings of the Fetch connections a stream's executors open:
        the batch reader's, with the stream's ``kafka.*`` settings that a consumer also has
        (security, timeouts, sizes). Always read_uncommitted: the broker acquires no control
        records and, for a read_committed share group, no aborted ones, and the executors keep
        exactly the acquired offsets."""
        consumer_keys = {o.name for o in CONSUMER_OPTIONS}
        # A task reads one partition's acquired ranges, at most share.partition.max.record.locks
        # records (10,000 at most: 10 MB of 1 KiB records); one answer of 16 MiB holds them, where
        # 8 MiB took a second round trip per task, which cost about a sixth of the stream's rows/s.
        mapping: dict[str, Any] = {"max.partition.fetch.bytes": 16 * 1024 * 1024, "fetch.max.wait.ms": 100}
        mapping.update({k: v for k, v in self._client_settings("share_consumer").items() if k in consumer_keys})
        mapping["bootstrap.servers"] = self.bootstrap_servers
        mapping["isolation.level"] = "read_uncommitted"
        return _client_config("consumer", mapping)

    def _client_settings(self, kind: str) -> dict[str, str]:
        table = {o.name for o in (CONSUMER_OPTIONS if kind == "consumer" else SHARE_CONSUMER_OPTIONS)}
        out = {}
        for key, value in self.client.items():
            if key not in table:
                mode = "batch" if kind == "consumer" else "streaming"
                raise ConfigError(f"kafka.{key}", f"is not a setting of {mode} reads")
            out[key] = value
        return out


def _client_config(kind: str, mapping: dict[str, Any]) -> Config:
    try:
        return build_config(kind, mapping)
    except ConfigError as e:
        key = "kafka.bootstrap.servers" if e.key == "bootstrap.servers" else f"kafka.{e.key}"
        raise ConfigError(key, e.reason) from None


def parse_source_options(options: Mapping[str, Any]) -> SourceOptions:
    """Validate Spark's option map (any key case); raises ConfigError naming the option."""
    values: dict[str, str] = {}
    client: dict[str, str] = {}
    for raw_key, raw_value in options.items():
        key = str(raw_key).lower()
        value = "" if raw_value is None else str(raw_value)
        name = _CANONICAL.get(key)
        if name is not None:
            values[name] = value
            continue
        if key.startswith("kafka."):
            setting = key[len("kafka.") :]
            if setting in _REFUSED_CLIENT:
                raise ConfigError(f"kafka.{setting}", f"is not supported: {_REFUSED_CLIENT[setting]}")
            if setting not in _CLIENT_KEYS:
                raise ConfigError(f"kafka.{setting}", "unknown client setting")
            client[setting] = value
            continue
        hint = {"assign": "use 'subscribe'", "subscribepattern": "use 'subscribe'"}.get(key)
        raise ConfigError(key, f"unknown option of the shoal source{'; ' + hint if hint else ''}")

    servers = values.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise ConfigError("kafka.bootstrap.servers", "is required (host:port[,host:port...])")
    parse_bootstrap(servers, "kafka.bootstrap.servers")
    topics = tuple(dict.fromkeys(t.strip() for t in values.get("subscribe", "").split(",") if t.strip()))
    if not topics:
        raise ConfigError("subscribe", "is required: a comma-separated list of topics")
    for t in topics:
        if any(c.isspace() for c in t) or len(t) > 249:
            raise ConfigError("subscribe", f"{t!r} is not a valid topic name")

    starting = ending = None
    # Spark's precedence: one timestamp for all partitions, then per-partition times, then offsets.
    for side, holder in (("starting", "starting"), ("ending", "ending")):
        spec = None
        for option in (f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets"):
            if option in values:
                spec = parse_offset_spec(option, values[option])
                break
        if spec is not None:
            _check_topics(spec, topics)
        if holder == "starting":
            starting = spec
        else:
            ending = spec

    strategy = values.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigError("startingOffsetsByTimestampStrategy", f"{strategy!r} is not one of error, latest")

    poll_timeout = _int(values, "share.poll.timeout.ms", 0)
    read_path = values.get(_READ_PATH_OPTION, "executor").strip().lower()
    if read_path != "executor":
        raise ConfigError(
            _READ_PATH_OPTION,
            f"{read_path!r} is not supported: the driver read path was removed, executors read every "
            "stream (the only value left is 'executor', the default; the option can be dropped)",
        )
    return SourceOptions(
        bootstrap_servers=servers,
        topics=topics,
        include_headers=_bool(values, "includeHeaders", False),
        starting=starting,
        ending=ending,
        starting_timestamp_strategy=strategy,
        min_partitions=_int(values, "minPartitions", 1),
        max_records_per_partition=_int(values, "maxRecordsPerPartition", 1),
        fail_on_data_loss=_bool(values, "failOnDataLoss", True),
        group_id=values.get("kafka.group.id", "").strip() or None,
        max_records_per_trigger=_int(values, "maxRecordsPerTrigger", 1),
        lock_renew=_bool(values, "share.lock.renew", True),
        poll_timeout_ms=500 if poll_timeout is None else poll_timeout,
        client=client,
        given=frozenset(values),
    )


def _bool(values: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in values:
        return default
    text = values[name].strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(name, f"expected true or false, got {values[name]!r}")
    return text == "true"


def _int(values: Mapping[str, str], name: str, lo: int) -> int | None:
    if name not in values:
        return None
    try:
        n = int(values[name].strip())
    except ValueError:
        raise ConfigError(name, f"expected an integer, got {values[name]!r}") from None
    if n < lo:
        raise ConfigError(name, f"{n} is below the minimum {lo}")
    return n


def parse_offset_spec(option: str, text: str) -> OffsetSpec:
    """One of Spark's offset options: 'earliest' | 'latest' | JSON per partition | a timestamp."""
    stripped = text.strip()
    if option.endswith("Timestamp") and not option.endswith("ByTimestamp"):
        try:
            ts = int(stripped)
        except ValueError:
            raise ConfigError(option, f"expected a timestamp in milliseconds, got {text!r}") from None
        if ts < 0:
            raise ConfigError(option, f"{ts} is not a timestamp")
        return OffsetSpec("timestamp", option, timestamp=ts)
    by_time = option.endswith("ByTimestamp")
    if not by_time and stripped.lower() in ("earliest", "latest"):
        return OffsetSpec(stripped.lower(), option)
    try:
        doc = json.loads(stripped)
    except ValueError:
        expected = "JSON like" if by_time else "'earliest', 'latest' or JSON like"
        raise ConfigError(option, f'expected {expected} {{"topic":{{"0":23}}}}, got {text!r}') from None
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(option, 'expected a JSON object of topics, like {"topic":{"0":23}}')
    per: dict[tuple[str, int], int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not parts:
            raise ConfigError(option, f"topic {topic!r} needs an object of partition -> offset")
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise ConfigError(option, f"{topic!r}: {p!r} is not a partition number") from None
            if partition < 0:
                raise ConfigError(option, f"{topic!r}: partition {partition} is negative")
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(option, f"{topic}-{partition}: {value!r} is not an integer")
            if value < ListOffsetsTimestamp.EARLIEST:
                what = "timestamp" if by_time else "offset (-2 earliest, -1 latest)"
                raise ConfigError(option, f"{topic}-{partition}: {value} is not a valid {what}")
            per[(topic, partition)] = value
    return OffsetSpec("timestamps" if by_time else "offsets", option, per_partition=per)


def _check_topics(spec: OffsetSpec, topics: tuple[str, ...]) -> None:
    extra = sorted({t for t, _ in spec.per_partition} - set(topics))
    if extra:
        raise ConfigError(spec.option, f"names topics not in 'subscribe': {', '.join(extra)}")
