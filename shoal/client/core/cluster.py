"""The client's picture of the cluster: brokers, topics, partition leaders.

Sans-IO on purpose: ``ClusterMetadata`` is filled from Metadata responses
and asked questions ("who leads t-3?", "what is topic id X called?"); it never
sends anything. ``client.core.client_core.ClientCore`` decides when to refresh it. That
split lets the refresh rules (on NOT_LEADER_OR_FOLLOWER, on an unknown
partition, after ``metadata.max.age.ms``) be tested without a socket.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shoal.protocol.messages import ZERO_UUID

__all__ = ["BrokerInfo", "ClusterMetadata", "PartitionInfo", "TopicInfo", "TopicPartition"]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    error_code: int = 0


class ClusterMetadata:
    """Brokers and topics as last reported; updated from Metadata responses."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.topic_errors: dict[str, int] = {}
        self.updated_ms: float = 0.0

    def update(self, resp: Any, now_ms: float, *, full: bool = False) -> None:
        """Apply one Metadata response.

        ``full`` means the request asked for every topic: topics missing from
        the answer were deleted and are forgotten. Otherwise only the named
        topics change. Topics answered with an error are recorded in
        ``topic_errors`` and dropped from ``topics``.
        """
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        self.controller_id = resp.controller_id
        if full:
            self.topics.clear()
            self.topic_names.clear()
            self.topic_errors.clear()
        for t in resp.topics:
            name = t.name
            if name is None:
                name = self.topic_names.get(t.topic_id)
                if name is None:
                    continue
            if t.error_code:
                self.topic_errors[name] = t.error_code
                old = self.topics.pop(name, None)
                if old is not None:
                    self.topic_names.pop(old.topic_id, None)
                continue
            self.topic_errors.pop(name, None)
            info = TopicInfo(name, t.topic_id or ZERO_UUID, bool(t.is_internal))
            for p in t.partitions:
                info.partitions[p.partition_index] = PartitionInfo(
                    p.partition_index,
                    p.leader_id,
                    p.leader_epoch,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    p.error_code,
                )
            old = self.topics.get(name)
            if old is not None and old.topic_id != info.topic_id:
                self.topic_names.pop(old.topic_id, None)
            self.topics[name] = info
            if info.topic_id != ZERO_UUID:
                self.topic_names[info.topic_id] = name
        self.updated_ms = now_ms

    def leader(self, tp: TopicPartition) -> int | None:
        """Node id leading ``tp`` (None when unknown or leaderless)."""
        t = self.topics.get(tp.topic)
        if t is None:
            return None
        p = t.partitions.get(tp.partition)
        if p is None or p.leader < 0 or p.leader not in self.brokers:
            return None
        return p.leader

    def leader_epoch(self, tp: TopicPartition) -> int:
        t = self.topics.get(tp.topic)
        p = t.partitions.get(tp.partition) if t is not None else None
        return p.leader_epoch if p is not None else -1

    def partitions_for(self, topic: str) -> list[int] | None:
        """Sorted partition numbers of ``topic`` (None when the topic is unknown)."""
        t = self.topics.get(topic)
        return None if t is None else sorted(t.partitions)

    def topic_id(self, topic: str) -> uuid.UUID:
        t = self.topics.get(topic)
        return t.topic_id if t is not None else ZERO_UUID

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.topic_names.get(topic_id)

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self.brokers.get(node_id)

    def add_broker(self, info: BrokerInfo) -> None:
        """Remember a node learned elsewhere (a FindCoordinator answer)."""
        self.brokers.setdefault(info.node_id, info)
