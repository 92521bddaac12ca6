"""Sans-IO half of AsyncAdmin: request bodies per negotiated version, responses to results
(cluster, topics, offsets, configs; groups are in ``client.admin.group_protocol``).

Why split from ``client.admin.client``: the admin is mostly translation (typed
arguments -> a request at whatever version the broker speaks, a response ->
typed results and per-entity errors) plus one piece of policy, which
per-entity errors are worth sending again. Both are pure functions of their
inputs, so they live here, are tested without a socket, and the asyncio
shell only routes, sends and sleeps.

Conventions:

* ``build_*`` return ``callable(version) -> body``, the shape
  ``BrokerConnection.send`` accepts, so each request is built for the version
  negotiated on the connection it goes out on. Fields a version lacks are
  never set (the codec refuses them).
* ``parse_*`` return ``{key: result | BrokerResponseError}``; an error names
  the entity and keeps the broker's error_message.
* ``EntityBatch`` tracks one batch call: which entities are done, which got an
  error that is worth retrying (NOT_CONTROLLER, THROTTLING_QUOTA_EXCEEDED,
  LEADER_NOT_AVAILABLE, ...: per API, as in Kafka's Java Admin), and gives up
  on them with their last error when time runs out.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from shoal.client.admin.types import (
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    ListOffsetsResult,
    NewTopic,
    PartitionDescription,
    ResourceType,
    TopicDescription,
    TopicListing,
)
from shoal.client.core.cluster import BrokerInfo, TopicPartition
from shoal.client.core.errors import BrokerResponseError, UnsupportedVersionError
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode, error_for
from shoal.protocol.messages import ZERO_UUID

__all__ = ["EntityBatch", "entity_error"]

K = TypeVar("K", bound=Hashable)
Builder = Callable[[int], Any]

# Per-entity codes that are worth another attempt, per API family (Kafka's Admin
# retries these; everything else is the entity's final answer).
TOPIC_ADMIN_RETRY = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.THROTTLING_QUOTA_EXCEEDED})
DESCRIBE_TOPIC_RETRY = frozenset({ErrorCode.LEADER_NOT_AVAILABLE})
LIST_OFFSETS_RETRY = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)


def entity_error(code: int, message: str | None, what: str) -> BrokerResponseError:
    """A typed error naming the entity it is about, keeping the broker's message (which is
    used alone when it names the entity already: "Topic 'demo' already exists", not
    "topic 'demo': Topic 'demo' already exists")."""
    if message:
        quoted = re.search(r"'(.*)'", what)
        if quoted is not None and quoted.group(1) in message:
            return BrokerResponseError(code, message)
    return BrokerResponseError(code, f"{what}: {message or error_for(code).message}")


def _req(name: str) -> Any:
    return api_by_name(name).request_class()


# -- batches --------------------------------------------------------------------------------


@dataclass(slots=True)
class EntityBatch(Generic[K]):
    """Outcome bookkeeping of one batch admin call (create these topics, delete these groups).

    ``pending`` are the keys still to send; ``record`` takes one entity's
    answer; a retriable code puts the entity back in ``pending`` (remembering
    the error), anything else is final. ``give_up`` turns what is still
    pending into its last error (or the given one) when time runs out.
    """

    keys: list[K]
    retry_codes: Collection[int] = frozenset()
    results: dict[K, Any] = field(default_factory=dict)
    last_errors: dict[K, BaseException] = field(default_factory=dict)
    pending: list[K] = field(default_factory=list)
    _answered: set[K] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.keys = list(dict.fromkeys(self.keys))
        self.pending = list(self.keys)

    def start_round(self) -> list[K]:
        """The keys to send this round; answers not recorded count as lost (sent again)."""
        self._answered = set()
        return list(self.pending)

    def record(self, key: K, value: Any) -> None:
        """``value``: a result, None (done) or a BrokerResponseError (retried when its code allows)."""
        if key not in self.pending:
            return  # an entity we did not ask about, or answered twice
        self._answered.add(key)
        if isinstance(value, BrokerResponseError) and value.code in self.retry_codes:
            self.last_errors[key] = value
            return
        self.results[key] = value
        self.last_errors.pop(key, None)

    def end_round(self) -> None:
        self.pending = [k for k in self.pending if k not in self.results]

    @property
    def done(self) -> bool:
        return not self.pending

    def give_up(self, error: BaseException | None = None) -> None:
        for k in self.pending:
            last = self.last_errors.get(k)
            self.results[k] = last if last is not None else error
        self.pending = []

    def outcome(self) -> dict[K, Any]:
        return {k: self.results.get(k) for k in self.keys}


# -- cluster and topics ---------------------------------------------------------------------


def build_metadata(topics: Iterable[str] | None) -> Builder:
    """Metadata for these topics (None: every topic); never creates topics."""
    cls = _req("Metadata")
    names = None if topics is None else list(topics)

    def build(version: int) -> Any:
        body = cls()
        if version >= 4:
            body.allow_auto_topic_creation = False
        if names is None:
            body.topics = None if version >= 1 else []
        else:
            body.topics = [cls.MetadataRequestTopic(name=n) for n in names]
        return body

    return build


def check_metadata(resp: Any) -> None:
    code = getattr(resp, "error_code", 0)
    if code:
        raise BrokerResponseError(code, "Metadata")


def parse_cluster_from_metadata(resp: Any) -> ClusterDescription:
    check_metadata(resp)
    return ClusterDescription(
        cluster_id=resp.cluster_id,
        controller_id=resp.controller_id,
        brokers=tuple(sorted((BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in resp.brokers), key=_node)),
    )


def _node(b: BrokerInfo) -> int:
    return b.node_id


def build_describe_cluster() -> Builder:
    cls = _req("DescribeCluster")

    def build(version: int) -> Any:
        return cls(include_cluster_authorized_operations=False)

    return build


def parse_describe_cluster(resp: Any) -> ClusterDescription:
    if resp.error_code:
        raise BrokerResponseError(resp.error_code, resp.error_message or "DescribeCluster")
    return ClusterDescription(
        cluster_id=resp.cluster_id,
        controller_id=resp.controller_id,
        brokers=tuple(sorted((BrokerInfo(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers), key=_node)),
    )


def parse_topic_listings(resp: Any, include_internal: bool) -> dict[str, TopicListing]:
    check_metadata(resp)
    out: dict[str, TopicListing] = {}
    for t in resp.topics:
        if t.error_code or t.name is None:
            continue
        if t.is_internal and not include_internal:
            continue
        out[t.name] = TopicListing(t.name, t.topic_id or ZERO_UUID, bool(t.is_internal))
    return dict(sorted(out.items()))


def parse_topic_descriptions(resp: Any, wanted: Iterable[str]) -> dict[str, TopicDescription | BrokerResponseError]:
    check_metadata(resp)
    by_name = {t.name: t for t in resp.topics if t.name is not None}
    out: dict[str, TopicDescription | BrokerResponseError] = {}
    for name in wanted:
        t = by_name.get(name)
        if t is None:
            out[name] = entity_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, f"topic {name!r}")
            continue
        if t.error_code:
            out[name] = entity_error(t.error_code, None, f"topic {name!r}")
            continue
        parts = tuple(
            PartitionDescription(
                p.partition_index,
                p.leader_id,
                p.leader_epoch,
                tuple(p.replica_nodes),
                tuple(p.isr_nodes),
                tuple(p.offline_replicas or ()),
            )
            for p in sorted(t.partitions, key=lambda p: p.partition_index)
        )
        out[name] = TopicDescription(name, t.topic_id or ZERO_UUID, bool(t.is_internal), parts)
    return out


def build_create_topics(topics: Iterable[NewTopic], validate_only: bool, timeout_ms: int) -> Builder:
    cls = _req("CreateTopics")
    items = list(topics)

    def build(version: int) -> Any:
        out = []
        for t in items:
            assignments = []
            num_partitions = t.num_partitions
            if t.replica_assignment:
                assignments = [
                    cls.CreatableReplicaAssignment(partition_index=p, broker_ids=list(ids))
                    for p, ids in sorted(t.replica_assignment.items())
                ]
                num_partitions = -1
            out.append(
                cls.CreatableTopic(
                    name=t.name,
                    num_partitions=num_partitions,
                    replication_factor=-1 if t.replica_assignment else t.replication_factor,
                    assignments=assignments,
                    configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()],
                )
            )
        body = cls(topics=out, timeout_ms=timeout_ms)
        if version >= 1:
            body.validate_only = validate_only
        return body

    return build


def parse_create_topics(resp: Any) -> dict[str, BrokerResponseError | None]:
    return {
        t.name: entity_error(t.error_code, t.error_message, f"topic {t.name!r}") if t.error_code else None
        for t in resp.topics
    }


def build_delete_topics(topics: Iterable[str | uuid.UUID], timeout_ms: int) -> Builder:
    cls = _req("DeleteTopics")
    items = list(topics)

    def build(version: int) -> Any:
        if version >= 6:
            return cls(
                topics=[
                    cls.DeleteTopicState(name=None, topic_id=t)
                    if isinstance(t, uuid.UUID)
                    else cls.DeleteTopicState(name=t, topic_id=ZERO_UUID)
                    for t in items
                ],
                timeout_ms=timeout_ms,
            )
        if any(isinstance(t, uuid.UUID) for t in items):
            raise UnsupportedVersionError("deleting topics by id needs DeleteTopics v6")
        return cls(topic_names=list(items), timeout_ms=timeout_ms)

    return build


def parse_delete_topics(
    resp: Any, asked: Iterable[str | uuid.UUID]
) -> dict[str | uuid.UUID, BrokerResponseError | None]:
    """Results keyed as asked: by name, or by topic id for topics deleted by id."""
    by_id = {k for k in asked if isinstance(k, uuid.UUID)}
    out: dict[str | uuid.UUID, BrokerResponseError | None] = {}
    for r in resp.responses:
        tid = getattr(r, "topic_id", None)
        key: str | uuid.UUID = tid if tid in by_id and tid is not None else r.name
        if key is None:
            continue
        what = f"topic {key!r}" if isinstance(key, str) else f"topic id {key}"
        out[key] = entity_error(r.error_code, r.error_message, what) if r.error_code else None
    return out


def build_create_partitions(counts: Mapping[str, int], validate_only: bool, timeout_ms: int) -> Builder:
    cls = _req("CreatePartitions")
    items = dict(counts)

    def build(version: int) -> Any:
        return cls(
            topics=[cls.CreatePartitionsTopic(name=n, count=c, assignments=None) for n, c in items.items()],
            timeout_ms=timeout_ms,
            validate_only=validate_only,
        )

    return build


def parse_create_partitions(resp: Any) -> dict[str, BrokerResponseError | None]:
    return {
        r.name: entity_error(r.error_code, r.error_message, f"topic {r.name!r}") if r.error_code else None
        for r in resp.results
    }


def build_list_offsets(specs: Mapping[TopicPartition, int], isolation_level: int) -> Builder:
    cls = _req("ListOffsets")
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for tp, ts in specs.items():
        by_topic.setdefault(tp.topic, []).append((tp.partition, ts))

    def build(version: int) -> Any:
        topics = [
            cls.ListOffsetsTopic(
                name=t, partitions=[cls.ListOffsetsPartition(partition_index=p, timestamp=ts) for p, ts in sorted(ps)]
            )
            for t, ps in by_topic.items()
        ]
        body = cls(replica_id=-1, topics=topics)
        if version >= 2:
            body.isolation_level = isolation_level
        return body

    return build


def parse_list_offsets(resp: Any) -> dict[TopicPartition, ListOffsetsResult | BrokerResponseError]:
    out: dict[TopicPartition, ListOffsetsResult | BrokerResponseError] = {}
    for t in resp.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if p.error_code:
                out[tp] = entity_error(p.error_code, None, str(tp))
            else:
                epoch = p.leader_epoch if p.leader_epoch >= 0 else None
                out[tp] = ListOffsetsResult(p.offset, p.timestamp, epoch)
    return out


# -- configs --------------------------------------------------------------------------------


def build_describe_configs(
    resources: Iterable[ConfigResource],
    keys: Mapping[ConfigResource, Iterable[str] | None],
    include_synonyms: bool,
    include_documentation: bool,
) -> Builder:
    cls = _req("DescribeConfigs")
    items = list(resources)

    def build(version: int) -> Any:
        body = cls(
            resources=[
                cls.DescribeConfigsResource(
                    resource_type=int(r.type),
                    resource_name=r.name,
                    configuration_keys=None if (k := keys.get(r)) is None else list(k),
                )
                for r in items
            ]
        )
        if version >= 1:
            body.include_synonyms = include_synonyms
        if version >= 3:
            body.include_documentation = include_documentation
        return body

    return build


def _resource_key(resource_type: int, name: str) -> ConfigResource:
    try:
        rtype = ResourceType(resource_type)
    except ValueError:
        rtype = ResourceType.UNKNOWN
    return ConfigResource(rtype, name)


def parse_describe_configs(resp: Any) -> dict[ConfigResource, dict[str, ConfigEntry] | BrokerResponseError]:
    out: dict[ConfigResource, dict[str, ConfigEntry] | BrokerResponseError] = {}
    for r in resp.results:
        key = _resource_key(r.resource_type, r.resource_name)
        if r.error_code:
            out[key] = entity_error(r.error_code, r.error_message, f"{key.type.name.lower()} {key.name!r}")
            continue
        entries: dict[str, ConfigEntry] = {}
        for c in r.configs:
            entries[c.name] = ConfigEntry(
                name=c.name,
                value=c.value,
                source=ConfigSource.of(c.config_source),
                is_read_only=bool(c.read_only),
                is_sensitive=bool(c.is_sensitive),
                synonyms=tuple(ConfigSynonym(s.name, s.value, ConfigSource.of(s.source)) for s in c.synonyms or ()),
                type=ConfigType.of(c.config_type),
                documentation=c.documentation,
            )
        out[key] = dict(sorted(entries.items()))
    return out


def build_incremental_alter_configs(
    changes: Mapping[ConfigResource, Iterable[AlterConfigOp]], validate_only: bool
) -> Builder:
    cls = _req("IncrementalAlterConfigs")
    items = {r: list(ops) for r, ops in changes.items()}

    def build(version: int) -> Any:
        return cls(
            resources=[
                cls.AlterConfigsResource(
                    resource_type=int(r.type),
                    resource_name=r.name,
                    configs=[cls.AlterableConfig(name=o.name, config_operation=int(o.op), value=o.value) for o in ops],
                )
                for r, ops in items.items()
            ],
            validate_only=validate_only,
        )

    return build


def parse_incremental_alter_configs(resp: Any) -> dict[ConfigResource, BrokerResponseError | None]:
    out: dict[ConfigResource, BrokerResponseError | None] = {}
    for r in resp.responses:
        key = _resource_key(r.resource_type, r.resource_name)
        out[key] = (
            entity_error(r.error_code, r.error_message, f"{key.type.name.lower()} {key.name!r}")
            if r.error_code
            else None
        )
    return out
