"""The share-group SimpleAssignor: which members of a share group hold which partitions.

Why this exists: in a share group several members may consume the same
partition (records are handed out one by one and acknowledged individually),
so the classic "each partition has exactly one owner" assignors do not fit.
The group coordinator needs a target assignment that

* covers every partition of every subscribed topic that exists;
* shares a partition only when there are more members than partitions: each
  partition gets ``desired_sharing = ceil(members / partitions)`` holders;
* is balanced first -- member loads differ by at most one (member ``i`` of the
  sorted members gets ``ceil(s*(i+1)/M) - ceil(s*i/M)`` partitions, with
  ``s = desired_sharing * partitions`` slots in total);
* is sticky second -- (member, partition) pairs of the previous target
  assignment are kept whenever balance allows, so members keep their
  in-flight records and acquisition locks across rebalances.

With identical subscriptions all subscribed partitions form one pool; with
differing subscriptions each topic is its own pool shared among the members
that subscribe to it, and the extra partitions of a topic go preferably to the
members with the smallest load so far.

:func:`assign` is pure and deterministic (members are sorted, nothing is
random, no I/O), so any coordinator replaying the same inputs computes the
same answer.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence

__all__ = ["assign"]

# member id -> topic -> partitions
Assignment = dict[str, dict[str, set[int]]]


def assign(
    members: Mapping[str, frozenset[str]],
    topic_partitions: Mapping[str, int | Collection[int]],
    current: Mapping[str, Mapping[str, frozenset[int]]] | None = None,
) -> Assignment:
    """Compute the target assignment of a share group.

    `members` maps member id to subscribed topic names; `topic_partitions` maps
    topic to its partition count, or to the partitions that may be assigned
    (a share group assigns only partitions whose share state is initialized);
    topics missing from it do not exist yet and are skipped. `current` is the
    previous target assignment (member -> topic -> partitions), used only for
    stickiness. Every member appears in the result, possibly with an empty
    mapping.
    """
    member_ids = sorted(members)
    result: Assignment = {m: {} for m in member_ids}
    if not member_ids:
        return result
    previous = current or {}
    assignable = {
        t: tuple(range(ps)) if isinstance(ps, int) else tuple(sorted(ps)) for t, ps in topic_partitions.items()
    }
    subscriptions = {m: frozenset(members[m]) for m in member_ids}
    first = subscriptions[member_ids[0]]

    if all(subscriptions[m] == first for m in member_ids):
        topics = [(t, assignable[t]) for t in sorted(first) if assignable.get(t)]
        _assign_pool(member_ids, topics, previous, dict.fromkeys(member_ids, 0), result)
        return result

    load = dict.fromkeys(member_ids, 0)
    for topic in sorted({t for s in subscriptions.values() for t in s}):
        partitions = assignable.get(topic)
        if not partitions:
            continue
        subscribers = [m for m in member_ids if topic in subscriptions[m]]
        _assign_pool(subscribers, [(topic, partitions)], previous, load, result)
        for m in subscribers:
            load[m] += len(result[m].get(topic, ()))
    return result


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _assign_pool(
    members: Sequence[str],
    topics: Sequence[tuple[str, Sequence[int]]],
    previous: Mapping[str, Mapping[str, frozenset[int]]],
    load_so_far: Mapping[str, int],
    result: Assignment,
) -> None:
    """Share the partitions of `topics` among `members` (sorted), writing into `result`."""
    pool = [(t, p) for t, partitions in topics for p in partitions]
    n_members, n_parts = len(members), len(pool)
    if n_members == 0 or n_parts == 0:
        return
    index_of: dict[tuple[str, int], int] = {tp: i for i, tp in enumerate(pool)}
    sharing = _ceil_div(n_members, n_parts)
    slots = sharing * n_parts
    # Exact integer form of ceil(p*(i+1)) - ceil(p*i) with p = slots / members.
    formula = [_ceil_div(slots * (i + 1), n_members) - _ceil_div(slots * i, n_members) for i in range(n_members)]
    low = slots // n_members
    high = low + (1 if slots % n_members else 0)
    n_high = slots - low * n_members

    # 1. Keep only previous pairs that are still assignable (subscribed, existing).
    held: list[set[int]] = []
    for m in members:
        mine = previous.get(m, {})
        kept: set[int] = set()
        for t, _ in topics:
            kept.update(index_of[(t, p)] for p in mine.get(t, ()) if (t, p) in index_of)
        held.append(kept)

    # 2. Quotas: the multiset of counts comes from the formula; the larger counts
    #    go to members already holding that many (stickiness), then to the least
    #    loaded so far, then to the positions the formula picks.
    quota = [low] * n_members
    if high > low:
        order = sorted(
            range(n_members),
            key=lambda i: (-min(len(held[i]), high), load_so_far[members[i]], formula[i] != high, i),
        )
        for i in order[:n_high]:
            quota[i] = high

    holders: list[list[int]] = [[] for _ in range(n_parts)]
    for i, mine_idx in enumerate(held):
        for p in mine_idx:
            holders[p].append(i)

    # 3. Revoke from over-filled members, keeping their least-shared partitions.
    for i in range(n_members):
        excess = len(held[i]) - quota[i]
        if excess > 0:
            ranked = sorted(held[i], key=lambda p: (len(holders[p]), p))
            for p in ranked[quota[i] :]:
                held[i].discard(p)
                holders[p].remove(i)

    # 4. Revoke over-shared partitions (keep the first holders in member order).
    for p in range(n_parts):
        if len(holders[p]) > sharing:
            holders[p].sort()
            for i in holders[p][sharing:]:
                held[i].discard(p)
            del holders[p][sharing:]

    # 5. Fill: one slot at a time to the member missing the most, taking the
    #    least-shared partition it does not hold yet.
    capacity = [sharing - len(h) for h in holders]
    part_heap = [(-c, p) for p, c in enumerate(capacity) if c > 0]
    heapq.heapify(part_heap)
    member_heap = [(-(quota[i] - len(held[i])), i) for i in range(n_members) if quota[i] > len(held[i])]
    heapq.heapify(member_heap)
    while member_heap and part_heap:
        neg_deficit, i = heapq.heappop(member_heap)
        skipped: list[tuple[int, int]] = []
        chosen = -1
        while part_heap:
            neg_cap, p = heapq.heappop(part_heap)
            if -neg_cap != capacity[p]:
                continue  # stale entry
            if p in held[i]:
                skipped.append((neg_cap, p))
                continue
            chosen = p
            break
        for entry in skipped:
            heapq.heappush(part_heap, entry)
        if chosen < 0:
            if not skipped or not _swap(i, skipped[0][1], held):
                continue  # cannot place this member's remaining slots
            chosen = skipped[0][1]
        else:
            held[i].add(chosen)
        capacity[chosen] -= 1
        if capacity[chosen] > 0:
            heapq.heappush(part_heap, (-capacity[chosen], chosen))
        if neg_deficit + 1 < 0:
            heapq.heappush(member_heap, (neg_deficit + 1, i))

    for i, m in enumerate(members):
        out = result[m]
        for p in sorted(held[i]):
            t, n = pool[p]
            out.setdefault(t, set()).add(n)


def _swap(i: int, x: int, held: list[set[int]]) -> bool:
    """Member `i` needs a slot but every partition with room (`x`) is already its own.

    Find a member `j` without `x` holding some `y` that `i` lacks: `j` hands `y`
    to `i` and takes `x`, so `j`'s load is unchanged and `x` gains a holder.
    """
    for j, theirs in enumerate(held):
        if j == i or x in theirs:
            continue
        for y in sorted(theirs):
            if y not in held[i]:
                theirs.discard(y)
                theirs.add(x)
                held[i].add(y)
                return True
    return False
