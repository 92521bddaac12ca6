"""What a consumer is subscribed to, what it holds, and where it is in each partition (sans-IO).

Why one object: the consumer's answers to "which partitions are mine?",
"where do I fetch next?", "what do I commit?" must change together — a
rebalance, an ``assign()`` or a ``seek()`` all alter several of them at once.
Kafka's Java client keeps them in ``SubscriptionState``; this is the same idea
without its locking: the asyncio consumer changes it only from the event loop.

Per partition there are two offsets. ``position`` is the next offset the
application will be given (what ``position()`` answers and what commits
record); ``fetch_offset`` is where the next Fetch starts, ahead of
``position`` by whatever is already fetched and buffered. Every ``seek``
(or reset, or new assignment) bumps the partition's ``version``: fetched data,
committed-offset lookups and offset resets started under an older version are
dropped when they come back, so a late answer can never move a position the
application has set.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import IllegalStateError

__all__ = ["PartitionState", "SubscriptionState", "SubscriptionType"]


class SubscriptionType(enum.Enum):
    NONE = "none"
    AUTO_TOPICS = "auto_topics"  # subscribe(): the group assigns partitions
    USER_ASSIGNED = "user_assigned"  # assign(): the application picked them


@dataclass(slots=True)
class PartitionState:
    position: int | None = None
    position_epoch: int = -1  # leader epoch of the last record returned (committed with the offset)
    fetch_offset: int | None = None
    reset_to: str | None = None  # "earliest" / "latest": resolve by ListOffsets, not by a committed offset
    paused: bool = False
    version: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    initializing: bool = False  # a committed-offset lookup or reset is under way

    @property
    def has_position(self) -> bool:
        return self.position is not None

    def set_position(self, offset: int, epoch: int = -1) -> None:
        self.position = offset
        self.position_epoch = epoch
        self.fetch_offset = offset
        self.reset_to = None
        self.initializing = False
        self.version += 1


class SubscriptionState:
    """Subscription, assignment and per-partition positions of one consumer."""

    def __init__(self, default_reset: str) -> None:
        self.default_reset = default_reset  # "earliest" | "latest" | "none"
        self.type = SubscriptionType.NONE
        self.topics: tuple[str, ...] = ()
        self.pattern: str | None = None  # a regular expression the broker evaluates (group.protocol=consumer)
        self.listener: object | None = None
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.assignment_version = 0  # bumped whenever the set of partitions changes

    # -- subscription --------------------------------------------------------------
    def subscribe(self, topics: Iterable[str], listener: object | None = None) -> bool:
        """Subscribe to topics; True when the topic set changed."""
        if self.type is SubscriptionType.USER_ASSIGNED:
            raise IllegalStateError("subscribe() and assign() are mutually exclusive: unsubscribe() first")
        new = tuple(sorted(set(topics)))
        changed = new != self.topics
        self.type = SubscriptionType.AUTO_TOPICS
        self.topics = new
        self.pattern = None
        self.listener = listener
        return changed

    def subscribe_pattern(self, pattern: str, listener: object | None = None) -> bool:
        """Subscribe to the topics matching ``pattern``; True when the pattern changed."""
        if self.type is SubscriptionType.USER_ASSIGNED:
            raise IllegalStateError("subscribe() and assign() are mutually exclusive: unsubscribe() first")
        changed = pattern != self.pattern
        self.type = SubscriptionType.AUTO_TOPICS
        self.topics = ()
        self.pattern = pattern
        self.listener = listener
        return changed

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        if self.type is SubscriptionType.AUTO_TOPICS:
            raise IllegalStateError("subscribe() and assign() are mutually exclusive: unsubscribe() first")
        self.type = SubscriptionType.USER_ASSIGNED
        self._set_assignment(partitions)
        self.topics = tuple(sorted({tp.topic for tp in self.assignment}))

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's assignment (after SyncGroup); every partition starts without a position."""
        if self.type is not SubscriptionType.AUTO_TOPICS:
            raise IllegalStateError("not subscribed")
        self.assignment = {}
        self._set_assignment(partitions)

    def change_assignment(self, add: Iterable[TopicPartition], remove: Iterable[TopicPartition]) -> None:
        """Incremental (cooperative) change: partitions kept keep their positions."""
        if self.type is not SubscriptionType.AUTO_TOPICS:
            raise IllegalStateError("not subscribed")
        gone = {TopicPartition(tp[0], tp[1]) for tp in remove}
        kept = [tp for tp in self.assignment if tp not in gone]
        self._set_assignment([*kept, *(TopicPartition(tp[0], tp[1]) for tp in add)])

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        old = self.assignment
        new: dict[TopicPartition, PartitionState] = {}
        for tp in partitions:
            tp = TopicPartition(tp[0], tp[1])
            new[tp] = old.get(tp) or PartitionState()
        self.assignment = new
        self.assignment_version += 1

    def unsubscribe(self) -> None:
        self.type = SubscriptionType.NONE
        self.topics = ()
        self.pattern = None
        self.listener = None
        self.assignment = {}
        self.assignment_version += 1

    @property
    def is_group_managed(self) -> bool:
        return self.type is SubscriptionType.AUTO_TOPICS

    # -- positions -------------------------------------------------------------------
    def state(self, tp: TopicPartition) -> PartitionState:
        st = self.assignment.get(tp)
        if st is None:
            raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
        return st

    def seek(self, tp: TopicPartition, offset: int, epoch: int = -1) -> None:
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self.state(tp).set_position(offset, epoch)

    def request_reset(self, tp: TopicPartition, strategy: str) -> None:
        st = self.state(tp)
        st.position = None
        st.fetch_offset = None
        st.reset_to = strategy
        st.initializing = False
        st.version += 1

    def needing_position(self) -> list[TopicPartition]:
        """Partitions with no position and no lookup under way."""
        return [tp for tp, st in self.assignment.items() if st.position is None and not st.initializing]

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, st in self.assignment.items() if st.position is None]

    def all_consumed(self) -> dict[TopicPartition, tuple[int, int]]:
        """(position, leader epoch) of every partition with a position: what commits store."""
        return {tp: (st.position, st.position_epoch) for tp, st in self.assignment.items() if st.position is not None}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self.assignment.items() if st.paused}
