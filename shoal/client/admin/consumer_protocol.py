"""ConsumerGroupDescribe (KIP-848 consumer groups) for the admin client: request and answer.

Why its own module: a consumer-protocol group has what a classic group has
not (group and assignment epochs, per-member epochs, the target assignment
next to the current one, regex subscriptions), and DescribeGroups does not
describe it (Kafka answers GROUP_ID_NOT_FOUND there), so it gets its own
description type. ``as_classic`` turns one into the classic shape, so code
showing offsets and owners (the CLI's lag table) serves both kinds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shoal.client.admin.group_protocol import (
    build_heartbeat_group_describe,
    described_partitions,
    heartbeat_group_fields,
    heartbeat_member_fields,
)
from shoal.client.admin.protocol import Builder, entity_error
from shoal.client.admin.types import ConsumerGroupDescription, MemberDescription
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import BrokerResponseError

__all__ = [
    "ConsumerProtocolGroupDescription",
    "ConsumerProtocolMember",
    "build_consumer_group_describe",
    "parse_consumer_group_describe",
]


@dataclass(frozen=True, slots=True)
class ConsumerProtocolMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    host: str
    subscribed_topics: tuple[str, ...]
    subscribed_regex: str | None
    assignment: tuple[TopicPartition, ...]  # what the member owns now
    target_assignment: tuple[TopicPartition, ...]  # what the coordinator wants it to own
    member_type: int = -1  # v1: 0 classic, 1 consumer; -1 unknown


@dataclass(frozen=True, slots=True)
class ConsumerProtocolGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ConsumerProtocolMember, ...]
    coordinator: int
    authorized_operations: int | None = None
    protocol_type: str = "consumer"

    def as_classic(self) -> ConsumerGroupDescription:
        return ConsumerGroupDescription(
            group_id=self.group_id,
            state=self.state,
            protocol_type=self.protocol_type,
            partition_assignor=self.assignor,
            members=tuple(
                MemberDescription(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    host=m.host,
                    assignment=m.assignment,
                    subscription=m.subscribed_topics,
                )
                for m in self.members
            ),
            coordinator=self.coordinator,
            authorized_operations=self.authorized_operations,
        )


def build_consumer_group_describe(groups: Iterable[str]) -> Builder:
    return build_heartbeat_group_describe("ConsumerGroupDescribe", groups)


def parse_consumer_group_describe(g: Any, coordinator: int) -> ConsumerProtocolGroupDescription | BrokerResponseError:
    """One DescribedGroup; a group of another type (or none) is GROUP_ID_NOT_FOUND."""
    if g.error_code:
        return entity_error(g.error_code, g.error_message, f"group {g.group_id!r}")
    members = tuple(
        ConsumerProtocolMember(
            **heartbeat_member_fields(m),
            instance_id=m.instance_id,
            subscribed_regex=m.subscribed_topic_regex,
            assignment=described_partitions(m.assignment),
            target_assignment=described_partitions(m.target_assignment),
            member_type=getattr(m, "member_type", -1),
        )
        for m in g.members
    )
    return ConsumerProtocolGroupDescription(members=members, **heartbeat_group_fields(g, coordinator))
