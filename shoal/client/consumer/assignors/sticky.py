"""The eager "sticky" assignor, decision for decision as Java's AbstractStickyAssignor.

Goals, in order: (1) balance — members' partition counts differ by at most one
where subscriptions allow; (2) stickiness — as many partitions as possible
stay with the member that held them. Java has two builders and so do we:

* **constrained** (every member subscribes to the same topics): each member
  keeps up to its quota of previously held partitions (``minQuota`` or, for
  the first ``total % members`` members in HashMap order that held enough,
  ``maxQuota``), then the rest are dealt round-robin to members below quota,
  members sorted by id.
* **general** (subscriptions differ): keep valid previous holdings, give each
  unassigned partition to the least loaded eligible member, then move
  partitions one at a time from members with two or more partitions above an
  eligible member until balanced, preferring to undo earlier moves
  (``_PartitionMovements``) and reverting if balance did not improve.

Where Java breaks ties by iterating a HashMap or HashSet (which member's
claim wins, which member may keep ``maxQuota``, which moved partition goes
back), ``client.consumer.assignors.java_order`` reproduces the iteration order, so a group led by
this client assigns as a Java-led group would. Eager members own nothing when
they rejoin, so who held what comes from ``StickyAssignorUserData`` in each
subscription's user data. Rack awareness (KIP-881) is not implemented.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shoal.client.consumer.assignors.java_order import JavaHashMap, JavaHashSet, java_string_key
from shoal.client.core.cluster import TopicPartition
from shoal.protocol.api import codec
from shoal.protocol.exceptions import ProtocolError

if TYPE_CHECKING:
    from shoal.client.consumer.assignors.subscription import MemberSubscription

__all__ = ["decode_user_data", "eager_member_data", "encode_user_data", "sticky_assign"]

DEFAULT_GENERATION = -1
_USER_DATA = "StickyAssignorUserData"

Assignment = dict[str, list[TopicPartition]]
MemberData = Callable[["MemberSubscription"], tuple[list[TopicPartition], "int | None"]]


# -- user data ---------------------------------------------------------------------------


def encode_user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
    """StickyAssignorUserData v1 (no version prefix, as Java writes it)."""
    c = codec(_USER_DATA, 1)
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    body = c.cls(
        previous_assignment=[c.cls.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()],
        generation=generation,
    )
    return c.encode(body)


def decode_user_data(data: bytes | None) -> tuple[list[TopicPartition], int | None]:
    """(previous partitions, generation or None) — Java's ``memberData`` for StickyAssignor.

    Tries v1, then v0 (which has no generation); bytes neither can read mean
    "held nothing, generation -1", as in Java.
    """
    if not data:
        return [], None
    for version in (1, 0):
        try:
            body, _ = codec(_USER_DATA, version).decode(data)
        except ProtocolError:
            continue
        parts = [TopicPartition(t.topic, p) for t in body.previous_assignment for p in t.partitions]
        return parts, (body.generation if version == 1 else None)
    return [], DEFAULT_GENERATION


def _remove(items: list[TopicPartition], tp: TopicPartition) -> None:
    # java.util.List.remove(Object): first occurrence, silently nothing when absent.
    try:
        items.remove(tp)
    except ValueError:
        pass


def _tp_key(tp: TopicPartition) -> tuple[bytes, int]:
    return (java_string_key(tp.topic), tp.partition)


# -- entry point ---------------------------------------------------------------------------


def eager_member_data(sub: MemberSubscription) -> tuple[list[TopicPartition], int | None]:
    """The eager assignor's view of who held what: its user data."""
    return decode_user_data(sub.user_data)


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, MemberSubscription],
    member_data: MemberData = eager_member_data,
) -> Assignment:
    """Java's AbstractStickyAssignor.assign for ``subscriptions`` in JoinGroup member order;
    ``member_data`` reads a member's previous partitions and generation (StickyAssignor: its
    user data; CooperativeStickyAssignor: the subscription's owned partitions)."""
    # As Java's AbstractPartitionAssignor: only subscribed topics that have partitions take part.
    subscribed = {t for sub in subscriptions.values() for t in sub.topics}
    counts = {t: n for t, n in partitions_per_topic.items() if n > 0 and t in subscribed}
    subs: JavaHashMap[str, MemberSubscription] = JavaHashMap()
    for member, sub in subscriptions.items():  # ConsumerCoordinator fills a HashMap in response order
        subs[member] = sub
    owned: JavaHashMap[str, list[TopicPartition]] = JavaHashMap()
    multiple: set[TopicPartition] = set()
    equal, max_generation = _all_subscriptions_equal(counts, subs, owned, multiple, member_data)
    if equal:
        result = _Constrained(counts, owned, multiple).build()
    else:
        result = _General(counts, owned, subs, max_generation, member_data).build()
    return {m: sorted(parts, key=_tp_key) for m, parts in result.items()}


def _all_subscriptions_equal(
    all_topics: Mapping[str, int],
    subs: JavaHashMap[str, MemberSubscription],
    owned: JavaHashMap[str, list[TopicPartition]],
    multiple: set[TopicPartition],
    member_data: MemberData,
) -> tuple[bool, int]:
    """Whether every member subscribes to the same topics; fills each member's valid
    previous partitions (a partition claimed twice goes to the higher generation,
    and to nobody when both claim the same generation)."""
    equal = True
    subscribed: set[str] = set()
    previous_owner: dict[TopicPartition, str] = {}
    max_generation = DEFAULT_GENERATION
    for member, sub in subs.items():
        if not subscribed:
            subscribed.update(sub.topics)
        elif equal and not (len(sub.topics) == len(subscribed) and subscribed.issuperset(sub.topics)):
            equal = False
        partitions, generation = member_data(sub)
        member_generation = DEFAULT_GENERATION if generation is None else generation
        max_generation = max(max_generation, member_generation)
        mine: list[TopicPartition] = []
        owned[member] = mine
        for tp in partitions:
            if tp.topic not in all_topics or not 0 <= tp.partition < all_topics[tp.topic]:
                # Java keeps claims on partitions a topic no longer has (recreated smaller) and then
                # fails or hands a partition out twice; they cannot be kept, so they are dropped.
                continue
            other = previous_owner.get(tp)
            if other is None:
                mine.append(tp)
                previous_owner[tp] = member
                continue
            # Java compares this member's user-data generation with the other's
            # subscription generation.
            other_generation = subs[other].generation_id
            if member_generation == other_generation:
                multiple.add(tp)
                _remove(owned[other], tp)
                previous_owner[tp] = member
            elif member_generation > other_generation:
                mine.append(tp)
                _remove(owned[other], tp)
                previous_owner[tp] = member
    return equal, max_generation


def _all_partitions(counts: Mapping[str, int], topics: Iterable[str]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in topics for p in range(counts[t])]


# -- constrained -----------------------------------------------------------------------------


class _Constrained:
    """Same subscriptions everywhere: quotas, previous holdings first, then round-robin."""

    def __init__(
        self,
        counts: Mapping[str, int],
        owned: JavaHashMap[str, list[TopicPartition]],
        multiple: set[TopicPartition],
    ) -> None:
        self.counts = counts
        self.owned = owned
        self.multiple = multiple
        total = sum(counts.values())
        n = len(owned)
        self.min_quota = total // n
        self.max_quota = math.ceil(total / n)
        self.expected_over = total % n
        self.current_over = 0
        self.assignment: Assignment = {m: [] for m in owned}
        self.assigned: list[TopicPartition] = []
        self.revoked: set[TopicPartition] = set()
        self.under: list[str] = []  # below minQuota
        self.exact: list[str] = []  # at minQuota, may still take one more

    def build(self) -> Assignment:
        self._assign_owned()
        assigned = set(self.assigned)
        topics = sorted(self.counts, key=java_string_key)
        unassigned = [tp for tp in _all_partitions(self.counts, topics) if tp not in assigned]
        self.under.sort(key=java_string_key)
        self.exact.sort(key=java_string_key)
        self._round_robin(unassigned)
        self._verify()
        return self.assignment

    def _assign_owned(self) -> None:
        min_q, max_q = self.min_quota, self.max_quota
        for member, held in self.owned.items():
            mine = sorted(held, key=lambda tp: (tp.partition, java_string_key(tp.topic)))
            for tp in self.multiple:
                _remove(mine, tp)
            target = self.assignment[member]
            if len(mine) < min_q:
                target.extend(mine)
                self.assigned.extend(mine)
                self.under.append(member)
            elif len(mine) >= max_q and self.current_over < self.expected_over:
                self.current_over += 1
                if self.current_over == self.expected_over:
                    self.exact.clear()
                target.extend(mine[:max_q])
                self.assigned.extend(mine[:max_q])
                self.revoked.update(mine[max_q:])
            else:
                target.extend(mine[:min_q])
                self.assigned.extend(mine[:min_q])
                self.revoked.update(mine[min_q:])
                if self.current_over < self.expected_over:
                    self.exact.append(member)

    def _round_robin(self, unassigned: list[TopicPartition]) -> None:
        under, exact = self.under, self.exact
        cursor = 0  # a java.util.Iterator over `under`; cursor - 1 is the last element returned
        for tp in unassigned:
            from_iterator = True
            if cursor < len(under):
                member = under[cursor]
                cursor += 1
            elif not under and not exact:
                raise RuntimeError("sticky assignor: no member left below its quota")
            elif not under:
                member = exact.pop(0)
                from_iterator = False
            else:
                cursor = 1
                member = under[0]
            target = self.assignment[member]
            target.append(tp)
            count = len(target)
            if count == self.min_quota:
                if from_iterator:
                    del under[cursor - 1]
                    cursor -= 1
                exact.append(member)
            elif count == self.max_quota:
                self.current_over += 1

    def _verify(self) -> None:
        if not self.under:
            return
        if self.current_over != self.expected_over:
            raise RuntimeError("sticky assignor: members left below quota with no partition to give")
        for member in self.under:
            if len(self.assignment[member]) != self.min_quota:
                raise RuntimeError(f"sticky assignor: {member} did not reach its quota")


# -- general ---------------------------------------------------------------------------------


class _SortedMembers:
    """Java's TreeSet of members ordered by (assigned partition count, member id)."""

    def __init__(self, assignment: Mapping[str, list[TopicPartition]] | JavaHashMap[str, list[TopicPartition]]) -> None:
        self._assignment = assignment
        self._keys: dict[str, tuple[int, bytes]] = {}
        self._order: list[tuple[int, bytes, str]] = []

    def add(self, member: str) -> None:
        if member in self._keys:
            return
        key = (len(self._assignment[member]), java_string_key(member))
        self._keys[member] = key
        bisect.insort(self._order, (*key, member))

    def remove(self, member: str) -> None:
        key = self._keys.pop(member, None)
        if key is not None:
            i = bisect.bisect_left(self._order, (*key, member))
            del self._order[i]

    def __iter__(self):
        return iter([m for _, _, m in self._order])

    def first(self) -> str:
        return self._order[0][2]

    def last(self) -> str:
        return self._order[-1][2]


@dataclass(frozen=True, slots=True)
class _Owner:
    member: str
    generation: int


class _PartitionMovements:
    """Which partitions moved between which members, to move back rather than further."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[tuple[str, str], JavaHashSet[TopicPartition]]] = {}
        self.moves: dict[TopicPartition, tuple[str, str]] = {}

    def _remove_record(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.moves.pop(tp)
        per_topic = self.by_topic[tp.topic]
        per_topic[pair].discard(tp)
        if not len(per_topic[pair]):
            del per_topic[pair]
        if not per_topic:
            del self.by_topic[tp.topic]
        return pair

    def _add_record(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp.topic, {}).setdefault(pair, JavaHashSet()).add(tp)

    def move(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.moves:
            src, _ = self._remove_record(tp)
            if src != new:
                self._add_record(tp, (src, new))
        else:
            self._add_record(tp, (old, new))

    def partition_to_move(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        per_topic = self.by_topic.get(tp.topic)
        if per_topic is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        moved_back = per_topic.get((new, old))
        if moved_back is None:
            return tp
        return moved_back.first()


class _General:
    """Different subscriptions: keep, fill the least loaded, then rebalance by moves."""

    def __init__(
        self,
        counts: Mapping[str, int],
        current: JavaHashMap[str, list[TopicPartition]],
        subs: JavaHashMap[str, MemberSubscription],
        max_generation: int,
        member_data: MemberData = eager_member_data,
    ) -> None:
        self.member_data = member_data
        self.counts = counts
        self.total = sum(counts.values())
        self.current = current
        self.subs = subs
        self.max_generation = max_generation
        self.potential_members: dict[str, list[str]] = {t: [] for t in counts}
        self.potential_topics: dict[str, list[str]] = {}
        for member, sub in subs.items():
            mine = [t for t in sub.topics if t in counts]
            self.potential_topics[member] = mine
            for t in mine:
                self.potential_members[t].append(member)
            if member not in current:
                current[member] = []
        self.owner: dict[TopicPartition, str] = {}
        for member, parts in current.items():
            for tp in parts:
                self.owner[tp] = member
        topics = sorted(counts, key=lambda t: (len(self.potential_members[t]), java_string_key(t)))
        self.sorted_partitions = _all_partitions(counts, topics)
        self.sorted_members = _SortedMembers(current)
        self.movements = _PartitionMovements()
        self.revocation_required = False

    def build(self) -> Assignment:
        previous = self._previous_owners()
        assigned = set(self._keep_owned())
        unassigned = [tp for tp in self.sorted_partitions if tp not in assigned]
        for member in self.current:
            self.sorted_members.add(member)
        self._balance(previous, unassigned)
        return {m: parts for m, parts in self.current.items()}

    def _keep_owned(self) -> list[TopicPartition]:
        kept: list[TopicPartition] = []
        for member, parts in self.current.items():
            sub = self.subs.get(member)
            if sub is None:  # cannot happen: every member is subscribed
                for tp in parts:
                    self.owner.pop(tp, None)
                del self.current[member]
                continue
            for tp in list(parts):
                if tp.topic not in self.potential_members:
                    parts.remove(tp)
                    self.owner.pop(tp, None)
                elif tp.topic not in sub.topics:
                    parts.remove(tp)
                    self.revocation_required = True
                else:
                    kept.append(tp)
        return kept

    def _previous_owners(self) -> dict[TopicPartition, _Owner]:
        """Owners from older generations (user data), the newest such one per partition."""
        previous: dict[TopicPartition, _Owner] = {}
        for member, sub in self.subs.items():
            partitions, generation = self.member_data(sub)
            if generation is not None and generation < self.max_generation:
                gen = generation
            elif generation is None and self.max_generation > DEFAULT_GENERATION:
                gen = DEFAULT_GENERATION
            else:
                continue
            for tp in partitions:
                have = previous.get(tp)
                if have is None or gen > have.generation:
                    previous[tp] = _Owner(member, gen)
        return previous

    # -- balance checks ------------------------------------------------------------
    def _max_size(self, topics: list[str]) -> int:
        if len(topics) == len(self.counts):
            return self.total
        return sum(self.counts[t] for t in topics)

    def _is_balanced(self) -> bool:
        current = self.current
        low = len(current[self.sorted_members.first()])
        high = len(current[self.sorted_members.last()])
        if low >= high - 1:
            return True
        where: dict[TopicPartition, str] = {}
        for member, parts in current.items():
            for tp in parts:
                where[tp] = member
        for member in self.sorted_members:
            mine = current[member]
            count = len(mine)
            topics = self.potential_topics[member]
            if count == self._max_size(topics):
                continue
            have = set(mine)
            for topic in topics:
                for p in range(self.counts[topic]):
                    tp = TopicPartition(topic, p)
                    if tp not in have and count + 1 < len(current[where[tp]]):
                        return False
        return True

    @staticmethod
    def _balance_score(assignment: Mapping[str, list[TopicPartition]] | JavaHashMap[str, list[TopicPartition]]) -> int:
        sizes = [len(parts) for parts in assignment.values()]
        return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1 :])

    def _topic_can_move(self, topic: str) -> bool:
        return len(self.potential_members[topic]) >= 2

    def _member_can_move(self, member: str) -> bool:
        mine = self.current[member]
        if len(mine) < self._max_size(self.potential_topics[member]):
            return True
        return any(self._topic_can_move(tp.topic) for tp in mine)

    # -- assignment steps --------------------------------------------------------
    def _assign_to_least_loaded(self, tp: TopicPartition) -> None:
        for member in self.sorted_members:
            if tp.topic in self.potential_topics[member]:
                self.sorted_members.remove(member)
                self.current[member].append(tp)
                self.owner[tp] = member
                self.sorted_members.add(member)
                return

    def _balance(self, previous: dict[TopicPartition, _Owner], unassigned: list[TopicPartition]) -> None:
        initializing = not self.current[self.sorted_members.last()]
        for tp in unassigned:
            if self.potential_members[tp.topic]:
                self._assign_to_least_loaded(tp)
        fixed = {
            TopicPartition(t, p)
            for t, members in self.potential_members.items()
            if len(members) < 2
            for p in range(self.counts[t])
        }
        self.sorted_partitions = [tp for tp in self.sorted_partitions if tp not in fixed]
        unassigned = [tp for tp in unassigned if tp not in fixed]
        fixed_assignments: dict[str, list[TopicPartition]] = {}
        for member in self.potential_topics:
            if not self._member_can_move(member):
                self.sorted_members.remove(member)
                fixed_assignments[member] = self.current.pop(member)
        before = {m: list(parts) for m, parts in self.current.items()}
        before_owner = dict(self.owner)
        if not self.revocation_required:
            self._reassign(unassigned, previous)
        moved = self._reassign(self.sorted_partitions, previous)
        if not initializing and moved and self._balance_score(self.current) >= self._balance_score(before):
            self.current.clear()
            for m, parts in before.items():
                self.current[m] = list(parts)
            self.owner = before_owner
        for member, parts in fixed_assignments.items():
            self.current[member] = parts
            self.sorted_members.add(member)

    def _reassign(self, partitions: list[TopicPartition], previous: dict[TopicPartition, _Owner]) -> bool:
        performed = False
        current = self.current
        while True:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                member = self.owner[tp]
                prev = previous.get(tp)
                if prev is not None and prev.member in current and len(current[member]) > len(current[prev.member]) + 1:
                    self._move(tp, prev.member)
                    performed = modified = True
                    continue
                for other in self.potential_members[tp.topic]:
                    if len(current[member]) > len(current[other]) + 1:
                        self._move(tp, self._least_loaded_for(tp.topic))
                        performed = modified = True
                        break
            if not modified:
                return performed

    def _least_loaded_for(self, topic: str) -> str:
        for member in self.sorted_members:
            if topic in self.potential_topics[member]:
                return member
        raise RuntimeError(f"sticky assignor: no member for topic {topic}")

    def _move(self, tp: TopicPartition, new: str) -> None:
        actual = self.movements.partition_to_move(tp, self.owner[tp], new)
        old = self.owner[actual]
        self.sorted_members.remove(old)
        self.sorted_members.remove(new)
        self.movements.move(actual, old, new)
        self.current[old].remove(actual)
        self.current[new].append(actual)
        self.owner[actual] = new
        self.sorted_members.add(new)
        self.sorted_members.add(old)
