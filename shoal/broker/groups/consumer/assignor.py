"""Server-side assignors of KIP-848 consumer groups: ``uniform`` (default) and ``range``.

Why here and pure: with the consumer protocol the coordinator, not a group
leader, decides who owns what. Each assignor is a deterministic function of
the members' subscriptions, the partition counts and the previous target
(replaying the same inputs gives the same answer), so it can be tested with
properties alone and timed in isolation (benchmarks/groups.py).

Both assignors are sticky: a member keeps the partitions it had in the
previous target whenever its share of the topic (or of the pool) allows, and
only the rest moves. Every partition is owned by at most one member, and only
by a member subscribed to its topic.

* ``uniform`` balances the total count per member. With identical
  subscriptions all partitions form one pool and counts differ by at most one;
  with differing subscriptions partitions go to the least loaded subscriber,
  then a pass moves partitions from the most to the least loaded subscriber
  until no move helps.
* ``range`` balances each topic separately (the members subscribed to a topic
  get ``count // n`` or one more of its partitions, the extra ones going first
  to members that already hold that many), and hands out the free partitions
  in ascending order, so a fresh group gets Kafka's contiguous ranges.

Topics are keys of any orderable type (the group uses topic ids).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

__all__ = ["ASSIGNORS", "range_assign", "uniform_assign"]

# member -> topic -> partitions
Assignment = dict[str, dict[Any, frozenset[int]]]
Current = Mapping[str, Mapping[Any, frozenset[int]]]


def _quotas(members: list[str], total: int, held: Mapping[str, int]) -> dict[str, int]:
    """Split `total` among `members`: base or base+1, the +1 going first to those holding more."""
    if not members:
        return {}
    base, extra = divmod(total, len(members))
    order = sorted(members, key=lambda m: (-min(held.get(m, 0), base + 1), m))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}


def _existing(
    members: list[str], subscriptions: Mapping[str, frozenset[Any]], partitions: Mapping[Any, int]
) -> dict[str, frozenset[Any]]:
    """Each member's subscribed topics that have partitions; equal subscriptions share one object."""
    memo: dict[frozenset[Any], frozenset[Any]] = {}
    out = {}
    for m in members:
        s = subscriptions[m]
        found = memo.get(s)
        if found is None:
            found = frozenset(t for t in s if partitions.get(t, 0) > 0)
            found = memo.setdefault(found, found)
            memo[s] = found
        out[m] = found
    return out


def _finish(result: dict[str, dict[Any, set[int]]]) -> Assignment:
    return {m: {t: frozenset(ps) for t, ps in by_t.items() if ps} for m, by_t in result.items()}


def uniform_assign(
    subscriptions: Mapping[str, frozenset[Any]],
    partitions: Mapping[Any, int],
    current: Current | None = None,
) -> Assignment:
    """The ``uniform`` assignor: balanced by total partition count, then sticky."""
    current = current or {}
    members = sorted(subscriptions)
    result: dict[str, dict[Any, set[int]]] = {m: {} for m in members}
    if not members:
        return {}
    subs = _existing(members, subscriptions, partitions)
    if len({id(s) for s in subs.values()}) == 1:
        topics = sorted(subs[members[0]])
        pool_size = sum(partitions[t] for t in topics)
        held = {
            m: sum(1 for t, ps in current.get(m, {}).items() if t in subs[m] for p in ps if p < partitions.get(t, 0))
            for m in members
        }
        quota = _quotas(members, pool_size, held)
        owned: set[tuple[Any, int]] = set()
        load = dict.fromkeys(members, 0)
        for m in members:
            for t in sorted(current.get(m, {})):
                if t not in subs[m]:
                    continue
                for p in sorted(current[m][t]):
                    if load[m] >= quota[m] or p >= partitions[t] or (t, p) in owned:
                        continue
                    owned.add((t, p))
                    result[m].setdefault(t, set()).add(p)
                    load[m] += 1
        hungry = [m for m in members if load[m] < quota[m]]
        it = iter(hungry)
        nxt: str | None = next(it, None)
        for t in topics:
            for p in range(partitions[t]):
                if (t, p) in owned:
                    continue
                while nxt is not None and load[nxt] >= quota[nxt]:
                    nxt = next(it, None)
                if nxt is None:
                    break
                result[nxt].setdefault(t, set()).add(p)
                load[nxt] += 1
        return _finish(result)
    return _finish(_heterogeneous(members, subs, partitions, current, result))


def _heterogeneous(
    members: list[str],
    subs: Mapping[str, frozenset[Any]],
    partitions: Mapping[Any, int],
    current: Current,
    result: dict[str, dict[Any, set[int]]],
) -> dict[str, dict[Any, set[int]]]:
    topics = sorted({t for s in subs.values() for t in s})
    subscribers = {t: [m for m in members if t in subs[m]] for t in topics}
    # Everyone keeps what it held (the balancing pass below takes away what is too much).
    owner: dict[tuple[Any, int], str] = {}
    load = dict.fromkeys(members, 0)
    for m in members:
        for t in sorted(current.get(m, {})):
            if t not in subs[m]:
                continue
            for p in sorted(current[m][t]):
                if p < partitions[t] and (t, p) not in owner:
                    owner[(t, p)] = m
                    load[m] += 1
    # Free partitions, topics with the fewest subscribers first: each to its least loaded subscriber.
    for t in sorted(topics, key=lambda t: (len(subscribers[t]), t)):
        heap = [(load[m], m) for m in subscribers[t]]
        heapq.heapify(heap)
        for p in range(partitions[t]):
            if (t, p) in owner:
                continue
            while True:
                n, m = heapq.heappop(heap)
                if n == load[m]:
                    break
            owner[(t, p)] = m
            load[m] += 1
            heapq.heappush(heap, (load[m], m))
    # Balance: move a partition from a member to a less loaded subscriber while that narrows the gap.
    by_member: dict[str, list[tuple[Any, int]]] = {m: [] for m in members}
    for tp, m in owner.items():
        by_member[m].append(tp)
    moved = True
    while moved:
        moved = False
        for m in sorted(members, key=lambda m: (-load[m], m)):
            for tp in sorted(by_member[m], reverse=True):
                best = min(subscribers[tp[0]], key=lambda o: (load[o], o))
                if load[best] + 1 < load[m]:
                    by_member[m].remove(tp)
                    by_member[best].append(tp)
                    owner[tp] = best
                    load[m] -= 1
                    load[best] += 1
                    moved = True
    for tp, m in owner.items():
        result[m].setdefault(tp[0], set()).add(tp[1])
    return result


def range_assign(
    subscriptions: Mapping[str, frozenset[Any]],
    partitions: Mapping[Any, int],
    current: Current | None = None,
) -> Assignment:
    """The ``range`` assignor: each topic split evenly among its subscribers, sticky, in ranges."""
    current = current or {}
    members = sorted(subscriptions)
    result: dict[str, dict[Any, set[int]]] = {m: {} for m in members}
    by_topic: dict[Any, list[str]] = {}
    for m, wanted in _existing(members, subscriptions, partitions).items():
        for t in wanted:
            by_topic.setdefault(t, []).append(m)  # members are visited in order: lists stay sorted
    for t in sorted(by_topic):
        count = partitions[t]
        subs = by_topic[t]
        mine: dict[str, list[int]] = {}
        for m in subs:
            had = current.get(m)
            prev = had.get(t) if had else None
            if prev:
                mine[m] = sorted(p for p in prev if p < count)
        quota = _quotas(subs, count, {m: len(ps) for m, ps in mine.items()})
        taken: set[int] = set()
        for m, ps in mine.items():
            keep = [p for p in ps if p not in taken][: quota[m]]
            taken.update(keep)
            if keep:
                result[m][t] = set(keep)
        free = iter(p for p in range(count) if p not in taken)
        for m in subs:
            q = quota[m]
            if not q:
                continue
            have = result[m].setdefault(t, set())
            while len(have) < q:
                have.add(next(free))
    return _finish(result)


ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}
