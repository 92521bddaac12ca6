"""Client-side partition assignors of the classic consumer protocol: range, roundrobin, sticky,
cooperative-sticky (``assignors.cooperative``).

Why client-side and why "exactly like Java": in a classic group the broker
only relays bytes; the member elected leader runs the assignor named by the
group's chosen protocol and sends everybody's partitions in SyncGroup. A group
may mix our members with Java, librdkafka or sarama members, and any of them
can become leader, so the assignors must compute the same result as Kafka's
Java client for the same input — including its tie-breaks (member order,
``HashMap`` iteration, see ``client.consumer.assignors.java_order``). librdkafka and current
sarama implement range and roundrobin the same way.

Everything here is a pure function of ``partitions_per_topic`` (topic ->
partition count, topics without metadata left out, as Java's
``AbstractPartitionAssignor`` does) and ``subscriptions`` (member id ->
``MemberSubscription``, in the order the JoinGroup response listed the
members). Rack-aware variants (KIP-881) are not implemented: members' racks
are carried but ignored, which is Java's result whenever partitions' racks
do not differ (e.g. a single-rack or rack-less cluster).

The ``*Assignor`` classes add what a member needs around the function: its
protocol name, the user data it sends when joining, and the state it keeps
from its last assignment (only sticky keeps any).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from shoal.client.consumer.assignors.cooperative import CooperativeStickyAssignor
from shoal.client.consumer.assignors.java_order import java_string_key
from shoal.client.consumer.assignors.sticky import encode_user_data, sticky_assign
from shoal.client.consumer.assignors.subscription import Assignment, MemberSubscription
from shoal.client.core.cluster import TopicPartition

# -- member order --------------------------------------------------------------------


def _member_order(member_id: str, sub: MemberSubscription) -> tuple[int, bytes]:
    # Java's MemberInfo.compareTo: static members first, by instance id; then the
    # dynamic ones by member id (String.compareTo, i.e. UTF-16 code units).
    if sub.group_instance_id is not None:
        return (0, java_string_key(sub.group_instance_id))
    return (1, java_string_key(member_id))


def _sorted_members(members: Iterable[str], subscriptions: Mapping[str, MemberSubscription]) -> list[str]:
    return sorted(members, key=lambda m: _member_order(m, subscriptions[m]))


def _empty_assignment(subscriptions: Mapping[str, MemberSubscription]) -> Assignment:
    return {m: [] for m in subscriptions}


def _finish(assignment: Assignment) -> Assignment:
    for parts in assignment.values():
        parts.sort(key=lambda tp: (java_string_key(tp.topic), tp.partition))
    return assignment


# -- range ---------------------------------------------------------------------------


def range_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
) -> Assignment:
    """Java's RangeAssignor: per topic, members in order, the first ``n % m`` get one more.

    For each topic, partitions 0..n-1 are cut into contiguous ranges of
    ``n // m`` partitions (members sorted as Java's MemberInfo), the first
    ``n % m`` members taking one extra.
    """
    assignment = _empty_assignment(subscriptions)
    members_per_topic: dict[str, list[str]] = {}
    for member, sub in subscriptions.items():
        for topic in dict.fromkeys(sub.topics):
            members_per_topic.setdefault(topic, []).append(member)
    for topic, count in partitions_per_topic.items():
        members = members_per_topic.get(topic)
        if not members or count <= 0:
            continue
        members = _sorted_members(members, subscriptions)
        per, extra = divmod(count, len(members))
        for i, member in enumerate(members):
            start = per * i + min(i, extra)
            length = per + (1 if i < extra else 0)
            assignment[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
    return _finish(assignment)


# -- roundrobin ----------------------------------------------------------------------


def roundrobin_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
) -> Assignment:
    """Java's RoundRobinAssignor: all partitions sorted by (topic, partition), dealt to
    the members in order, skipping members not subscribed to the partition's topic."""
    assignment = _empty_assignment(subscriptions)
    if not subscriptions:
        return assignment
    members = _sorted_members(subscriptions, subscriptions)
    topic_sets = {m: set(subscriptions[m].topics) for m in members}
    topics = sorted({t for sub in subscriptions.values() for t in sub.topics}, key=java_string_key)
    n = len(members)
    cursor = 0
    for topic in topics:
        count = partitions_per_topic.get(topic)
        if not count or count <= 0:
            continue
        for p in range(count):
            # Every topic here has at least one subscriber, so this terminates.
            while topic not in topic_sets[members[cursor % n]]:
                cursor += 1
            assignment[members[cursor % n]].append(TopicPartition(topic, p))
            cursor += 1
    return _finish(assignment)


# -- assignor objects ------------------------------------------------------------------


class Assignor(Protocol):
    """What a member needs from one assignment strategy."""

    name: str

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None: ...

    def on_assignment(self, partitions: Sequence[TopicPartition], generation_id: int) -> None: ...

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
    ) -> Assignment: ...


class _StatelessAssignor:
    """An assignor that sends no user data and keeps nothing between rebalances."""

    __slots__ = ()
    name: str

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None:
        return None

    def on_assignment(self, partitions: Sequence[TopicPartition], generation_id: int) -> None:
        pass


@dataclass(slots=True)
class RangeAssignor(_StatelessAssignor):
    name: str = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
    ) -> Assignment:
        return range_assign(partitions_per_topic, subscriptions)


@dataclass(slots=True)
class RoundRobinAssignor(_StatelessAssignor):
    name: str = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
    ) -> Assignment:
        return roundrobin_assign(partitions_per_topic, subscriptions)


@dataclass(slots=True)
class StickyAssignor:
    """Java's (eager) StickyAssignor: balanced, then as few moves as possible.

    Remembers the last assignment and generation and sends them as user data
    (``StickyAssignorUserData``) when rejoining: eager members own nothing by
    the time they join, so this is how the leader learns who held what.
    """

    name: str = "sticky"
    member_assignment: list[TopicPartition] | None = None
    generation: int = -1

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None:
        if self.member_assignment is None:
            return None
        return encode_user_data(self.member_assignment, self.generation)

    def on_assignment(self, partitions: Sequence[TopicPartition], generation_id: int) -> None:
        self.member_assignment = list(partitions)
        self.generation = generation_id

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
    ) -> Assignment:
        return sticky_assign(partitions_per_topic, subscriptions)


ASSIGNORS: dict[str, type] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}


def make_assignors(names: Iterable[str]) -> list[Assignor]:
    """Fresh assignor objects for ``partition.assignment.strategy`` (preferred first)."""
    out: list[Assignor] = []
    for name in names:
        cls = ASSIGNORS.get(name)
        if cls is None:
            raise ValueError(f"unknown assignor {name!r}")
        out.append(cls())
    return out
