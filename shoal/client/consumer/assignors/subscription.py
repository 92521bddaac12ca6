"""What classic-group members exchange through the broker: ConsumerProtocolSubscription and -Assignment.

The broker only relays these bytes (JoinGroup metadata, SyncGroup
assignments); every assignor reads subscriptions and writes assignments in
Kafka's versioned layouts, so they live here, below the assignors that use them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from shoal.client.consumer.assignors.java_order import java_string_key
from shoal.client.core.cluster import TopicPartition
from shoal.protocol.api import codec
from shoal.protocol.coordinator_records import decode_versioned, encode_versioned
from shoal.protocol.exceptions import ProtocolError

SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3

Assignment = dict[str, list[TopicPartition]]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One member's ConsumerProtocolSubscription, plus its static instance id."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None


# -- consumer protocol bytes ---------------------------------------------------------


def encode_subscription(sub: MemberSubscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """ConsumerProtocolSubscription bytes (int16 version + struct) for JoinGroup metadata."""
    c = codec("ConsumerProtocolSubscription", version)
    owned: dict[str, list[int]] = {}
    for tp in sub.owned_partitions:
        owned.setdefault(tp.topic, []).append(tp.partition)
    body = c.cls(
        topics=list(sub.topics),
        user_data=sub.user_data,
        owned_partitions=[c.cls.TopicPartition(topic=t, partitions=ps) for t, ps in owned.items()],
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
    )
    return encode_versioned("ConsumerProtocolSubscription", version, body)


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> MemberSubscription:
    """Parse a member's JoinGroup metadata (any version; newer ones by our newest layout)."""
    version, sub = decode_versioned("ConsumerProtocolSubscription", data)
    owned = tuple(TopicPartition(t.topic, p) for t in (sub.owned_partitions or ()) for p in t.partitions)
    user_data = bytes(sub.user_data) if sub.user_data is not None else None
    return MemberSubscription(
        tuple(sub.topics),
        user_data,
        owned,
        sub.generation_id if version >= 2 else -1,
        sub.rack_id if version >= 3 else None,
        group_instance_id,
    )


def encode_assignment(
    partitions: Iterable[TopicPartition], user_data: bytes | None = None, version: int = ASSIGNMENT_VERSION
) -> bytes:
    """ConsumerProtocolAssignment bytes for SyncGroup, partitions grouped by topic."""
    c = codec("ConsumerProtocolAssignment", version)
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions, key=lambda tp: (java_string_key(tp.topic), tp.partition)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    body = c.cls(
        assigned_partitions=[c.cls.TopicPartition(topic=t, partitions=ps) for t, ps in by_topic.items()],
        user_data=user_data,
    )
    return encode_versioned("ConsumerProtocolAssignment", version, body)


def decode_assignment(data: bytes | None) -> tuple[list[TopicPartition], bytes | None]:
    """Partitions and user data of a SyncGroup assignment; empty bytes mean no partitions."""
    if not data:
        return [], None
    _, a = decode_versioned("ConsumerProtocolAssignment", data)
    parts = [TopicPartition(t.topic, p) for t in a.assigned_partitions for p in t.partitions]
    return parts, (bytes(a.user_data) if a.user_data is not None else None)


def safe_decode_subscription(data: bytes, group_instance_id: str | None = None) -> MemberSubscription | None:
    """``decode_subscription`` that answers None for bytes that do not parse."""
    try:
        return decode_subscription(data, group_instance_id)
    except ProtocolError:
        return None
