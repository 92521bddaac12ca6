"""Java's CooperativeStickyAssignor (KIP-429): the sticky assignment, then no partition moves in one step.

Why a separate assignor: under the cooperative protocol members keep their
partitions while the group rebalances, so a partition may not be handed to
its new owner in the same rebalance in which its old owner still holds it.
The assignment is the sticky one (``sticky.sticky_assign``), with two
differences that are Kafka's:

* who held what comes from each subscription's *owned partitions* and
  generation (ConsumerProtocolSubscription v1+/v2+), not from user data; for
  older subscriptions without a generation, the user data carries it as one
  big-endian int32 (``COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0``), which is
  also what this member sends;
* every partition that would move from a member that owns it to another
  member is left out of the new owner's assignment. The old owner, seeing it
  missing, revokes it and rejoins; the follow-up rebalance gives it to the
  new owner.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shoal.client.consumer.assignors.sticky import DEFAULT_GENERATION, sticky_assign
from shoal.client.consumer.assignors.subscription import MemberSubscription
from shoal.client.core.cluster import TopicPartition

__all__ = ["CooperativeStickyAssignor", "cooperative_member_data", "transferring_ownership"]

Assignment = dict[str, list[TopicPartition]]
_GENERATION = struct.Struct(">i")


def encode_generation(generation: int) -> bytes:
    return _GENERATION.pack(generation)


def cooperative_member_data(sub: MemberSubscription) -> tuple[list[TopicPartition], int | None]:
    """(owned partitions, generation) of one member, as CooperativeStickyAssignor reads them."""
    owned = list(sub.owned_partitions)
    if sub.generation_id != DEFAULT_GENERATION:
        return owned, sub.generation_id
    if sub.user_data is None:
        return owned, None
    if len(sub.user_data) >= _GENERATION.size:
        return owned, _GENERATION.unpack_from(sub.user_data)[0]
    return owned, DEFAULT_GENERATION


def transferring_ownership(
    subscriptions: Mapping[str, MemberSubscription], assignment: Mapping[str, Sequence[TopicPartition]]
) -> dict[TopicPartition, str]:
    """Partitions some member owns that the assignment gives to another member: partition -> new owner."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for member, assigned in assignment.items():
        sub = subscriptions.get(member)
        owned = set(sub.owned_partitions) if sub is not None else set()
        given = set(assigned)
        for tp in assigned:
            if tp not in owned:
                added[tp] = member
        revoked.update(tp for tp in owned if tp not in given)
    return {tp: member for tp, member in added.items() if tp in revoked}


def cooperative_sticky_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
) -> Assignment:
    result = sticky_assign(partitions_per_topic, subscriptions, cooperative_member_data)
    for tp, member in transferring_ownership(subscriptions, result).items():
        result[member].remove(tp)
    return result


@dataclass(slots=True)
class CooperativeStickyAssignor:
    """The assignor object a member offers as "cooperative-sticky"."""

    name: str = "cooperative-sticky"
    generation: int = DEFAULT_GENERATION
    cooperative: bool = True

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None:
        return encode_generation(self.generation)

    def on_assignment(self, partitions: Sequence[TopicPartition], generation_id: int) -> None:
        self.generation = generation_id

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
    ) -> Assignment:
        return cooperative_sticky_assign(partitions_per_topic, subscriptions)
