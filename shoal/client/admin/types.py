"""What AsyncAdmin takes and returns: plain, slotted, immutable records.

Why separate from ``client.admin.client``: these types are the admin's public
vocabulary (the CLI, tests and applications build and read them) and they
carry no I/O, so they stay importable without pulling in asyncio machinery.
Names follow Kafka's Java Admin (``NewTopic``, ``ConfigResource``,
``AlterConfigOp``, ``OffsetSpec``, ``SharePartitionOffsetInfo``, ...) so that
Kafka's documentation maps onto them; numeric codes are Kafka's wire values.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from shoal.client.core.cluster import BrokerInfo, TopicPartition
from shoal.protocol.constants import (
    AlterConfigOpType,
    ConfigResourceType,
    ConfigSource,
    ConfigType,
    ListOffsetsTimestamp,
)

__all__ = [
    "AlterConfigOp",
    "BrokerInfo",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "ConsumerGroupDescription",
    "GroupListing",
    "ListOffsetsResult",
    "MemberDescription",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "OpType",
    "PartitionDescription",
    "ResourceType",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffsetInfo",
    "TopicDescription",
    "TopicListing",
    "TopicPartition",
]


# Kafka's codes, declared once in the protocol layer; the Admin names them as Java's Admin does.
ResourceType = ConfigResourceType
OpType = AlterConfigOpType
OffsetSpec = ListOffsetsTimestamp


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. ``num_partitions``/``replication_factor`` of -1 mean the broker's default;
    ``replica_assignment`` maps partition -> broker ids (then leave num_partitions at -1)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)
    replica_assignment: dict[int, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class TopicListing:
    name: str
    topic_id: uuid.UUID
    is_internal: bool


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int  # -1 when leaderless
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A config resource; ``name`` is a topic, a broker id ("" = the broker answering) or a group id."""

    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def broker(cls, node_id: int | str = "") -> ConfigResource:
        return cls(ResourceType.BROKER, str(node_id))

    @classmethod
    def group(cls, name: str) -> ConfigResource:
        return cls(ResourceType.GROUP, name)


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None  # None for sensitive values
    source: ConfigSource
    is_read_only: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...] = ()
    type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One change for IncrementalAlterConfigs. APPEND/SUBTRACT apply to list configs."""

    name: str
    value: str | None = None
    op: OpType = OpType.SET

    @classmethod
    def set(cls, name: str, value: str) -> AlterConfigOp:
        return cls(name, value, OpType.SET)

    @classmethod
    def delete(cls, name: str) -> AlterConfigOp:
        return cls(name, None, OpType.DELETE)

    @classmethod
    def append(cls, name: str, value: str) -> AlterConfigOp:
        return cls(name, value, OpType.APPEND)

    @classmethod
    def subtract(cls, name: str, value: str) -> AlterConfigOp:
        return cls(name, value, OpType.SUBTRACT)


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    offset: int
    timestamp: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One ListGroups entry; ``type`` is "classic", "consumer" or "share" ("" from brokers before v5)."""

    group_id: str
    protocol_type: str
    state: str
    type: str


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A classic-group member; ``assignment``/``subscription`` are decoded when the group uses the
    consumer protocol (protocol type "consumer"), else empty and the raw bytes are kept."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...] = ()
    subscription: tuple[str, ...] = ()
    raw_assignment: bytes = b""
    raw_metadata: bytes = b""


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    state: str
    protocol_type: str
    partition_assignor: str
    members: tuple[MemberDescription, ...]
    coordinator: int
    authorized_operations: int | None = None

    @property
    def is_simple_consumer_group(self) -> bool:
        return self.protocol_type == ""


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    member_epoch: int
    client_id: str
    host: str
    rack_id: str | None
    subscribed_topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]
    coordinator: int
    authorized_operations: int | None = None


@dataclass(frozen=True, slots=True)
class SharePartitionOffsetInfo:
    """A share-partition's state: the share-partition start offset (None before any state),
    the leader epoch it was recorded under and the lag (records from the start offset to the
    high watermark not yet in a final state; None when the broker cannot tell, before DescribeShareGroupOffsets v1)."""

    start_offset: int | None
    leader_epoch: int | None
    lag: int | None
