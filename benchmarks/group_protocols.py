"""Classic and KIP-848 consumer groups side by side: heartbeats, assignment, the pause of a join.

Used by ``benchmarks/groups.py`` (which prints the table); the members here are
raw protocol clients (one connection each, our codec) that follow each
protocol's rules:

* **classic, eager** (what a JoinGroup/SyncGroup member must do): members
  heartbeat every ``HEARTBEAT_MS``; REBALANCE_IN_PROGRESS makes a member
  drop everything it owns and JoinGroup again; the leader computes the
  range assignment (our client's ``range_assign``) and sends it in SyncGroup.
* **consumer (KIP-848)**: members heartbeat at the interval the coordinator
  gives, owning what the last answer assigned; a partition missing from a
  new assignment is dropped at once (nothing to commit here) and the member
  acknowledges at once.

**The pause when one member joins a 100-member group** is measured as
consumption capacity: every 5 ms the share of the topic's partitions that
some member owns is sampled (a member consumes only what it owns, so with a
steady per-partition rate, records/s is proportional to it). Reported: the
lowest share, how long it stayed below 100 %, and the partition-seconds lost
(multiply by a per-partition rate for records); the processing of records
itself is not simulated.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shoal.client.consumer.assignors.builtin import range_assign
from shoal.client.consumer.assignors.cooperative import cooperative_sticky_assign
from shoal.client.consumer.assignors.subscription import (
    MemberSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from shoal.protocol.api import api_by_name

HEARTBEAT_MS = 500
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79


@dataclass
class Coverage:
    """Samples of how many partitions are owned, from the moment a member joins."""

    total: int
    owners: list[set[Any]] = field(default_factory=list)
    samples: list[tuple[float, int]] = field(default_factory=list)

    def owned(self) -> int:
        return len(set().union(*self.owners)) if self.owners else 0

    async def watch(self, stop: Callable[[], bool], start: float) -> None:
        while not stop():
            self.samples.append((time.perf_counter() - start, self.owned()))
            await asyncio.sleep(0.005)
        self.samples.append((time.perf_counter() - start, self.owned()))

    def report(self) -> tuple[float, float, float]:
        """(lowest share %, ms below 100 %, partition-seconds lost)."""
        low = min(n for _, n in self.samples) / self.total * 100
        below = lost = 0.0
        for (t0, n), (t1, _) in zip(self.samples, self.samples[1:]):
            if n < self.total:
                below += t1 - t0
                lost += (self.total - n) * (t1 - t0)
        return low, below * 1000, lost


# -- classic ------------------------------------------------------------------------------------


class ClassicMember:
    def __init__(self, conn: Any, group: str, topic: str, partitions: int, cover: set) -> None:
        self.c, self.group, self.topic, self.partitions = conn, group, topic, partitions
        self.member_id = ""
        self.generation = -1
        self.owned = cover
        self.beats = 0

    async def join(self) -> None:
        JG = api_by_name("JoinGroup").request_class()
        SG = api_by_name("SyncGroup").request_class()
        meta = encode_subscription(MemberSubscription((self.topic,)))
        protocols = [JG.JoinGroupRequestProtocol(name="range", metadata=meta)]
        while True:
            r = await self.c.call("JoinGroup", 5, group_id=self.group, session_timeout_ms=30000,
                                  rebalance_timeout_ms=30000, member_id=self.member_id, protocol_type="consumer",
                                  protocols=protocols)  # fmt: skip
            if r.error_code == MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            assert r.error_code == 0, r.error_code
            self.member_id, self.generation = r.member_id, r.generation_id
            assignments = []
            if r.leader == r.member_id:
                subs = {m.member_id: decode_subscription(m.metadata) for m in r.members}
                plan = range_assign({self.topic: self.partitions}, subs)
                assignments = [SG.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(plan.get(m, ())))
                               for m in subs]  # fmt: skip
            s = await self.c.call("SyncGroup", 3, group_id=self.group, generation_id=self.generation,
                                  member_id=self.member_id, assignments=assignments)  # fmt: skip
            if s.error_code == REBALANCE_IN_PROGRESS:
                continue
            assert s.error_code == 0, s.error_code
            self.owned.clear()
            self.owned.update(decode_assignment(s.assignment)[0])
            return

    async def run(self, until: Callable[[], bool]) -> None:
        while not until():
            r = await self.c.call("Heartbeat", 4, group_id=self.group, generation_id=self.generation,
                                  member_id=self.member_id)  # fmt: skip
            self.beats += 1
            if r.error_code == REBALANCE_IN_PROGRESS:
                self.owned.clear()  # eager: everything is revoked before rejoining
                await self.join()
                continue
            await asyncio.sleep(HEARTBEAT_MS / 1000)


# -- consumer (KIP-848) -------------------------------------------------------------------------


class ConsumerMember:
    def __init__(self, conn: Any, group: str, topic: str, index: int, cover: set) -> None:
        self.c, self.group, self.topic = conn, group, topic
        self.member_id = f"bench-member-{index:04d}"
        self.epoch = 0
        self.owned = cover
        self.acked: set | None = None
        self.interval = HEARTBEAT_MS
        self.beats = 0

    async def beat(self) -> bool:
        """One heartbeat; True when the assignment changed (acknowledge at once)."""
        HB = api_by_name("ConsumerGroupHeartbeat").request_class()
        first = self.epoch == 0
        owned = None
        if first or self.acked != self.owned:
            by_topic: dict[Any, list[int]] = {}
            for t, p in sorted(self.owned):
                by_topic.setdefault(t, []).append(p)
            owned = [HB.TopicPartitions(topic_id=t, partitions=ps) for t, ps in by_topic.items()]
        r = await self.c.call("ConsumerGroupHeartbeat", 1, group_id=self.group, member_id=self.member_id,
                              member_epoch=self.epoch, rebalance_timeout_ms=30000 if first else -1,
                              subscribed_topic_names=[self.topic] if first else None,
                              topic_partitions=owned)  # fmt: skip
        assert r.error_code == 0, r
        self.beats += 1
        if owned is not None:
            self.acked = set(self.owned)
        self.epoch, self.interval = r.member_epoch, r.heartbeat_interval_ms or self.interval
        if r.assignment is None:
            return False
        new = {(t.topic_id, p) for t in r.assignment.topic_partitions for p in t.partitions}
        if new == self.owned:
            return False
        self.owned.intersection_update(new)  # revoke first (nothing to commit in this model) ...
        self.owned.update(new)  # ... then take what is new
        return True

    async def run(self, until: Callable[[], bool]) -> None:
        while not until():
            if not await self.beat():
                await asyncio.sleep(self.interval / 1000)


# -- the measurements --------------------------------------------------------------------------


async def _join_pause(open_conn: Callable[[], Any], make: Callable[[Any, int, set], Any], members: int,
                      partitions: int, settle: float) -> tuple[float, float, float]:  # fmt: skip
    """(lowest share %, ms below 100 %, partition-seconds lost) when one member joins `members`."""
    cover = Coverage(partitions)
    conns = [await open_conn() for _ in range(members + 1)]
    group = [make(conns[i], i, set()) for i in range(members)]
    cover.owners = [m.owned for m in group]
    await asyncio.gather(*(m.join() if hasattr(m, "join") else m.beat() for m in group))
    done = False
    tasks = [asyncio.ensure_future(m.run(lambda: done)) for m in group]
    deadline = time.perf_counter() + 60
    while cover.owned() < partitions or _busy(group):
        assert time.perf_counter() < deadline, "the group did not settle"
        await asyncio.sleep(0.05)
    await asyncio.sleep(settle)
    newcomer = make(conns[members], members, set())
    cover.owners.append(newcomer.owned)
    start = time.perf_counter()
    stop = False
    watcher = asyncio.ensure_future(cover.watch(lambda: stop, start))
    if hasattr(newcomer, "join"):
        await newcomer.join()
    else:
        await newcomer.beat()
    tasks.append(asyncio.ensure_future(newcomer.run(lambda: done)))
    while not newcomer.owned or cover.owned() < partitions or _busy([*group, newcomer]):
        assert time.perf_counter() < deadline + 60, "the join did not settle"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    stop = True
    await watcher
    done = True
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in conns:
        c.close()
    return cover.report()


def _busy(members: list) -> bool:
    """A KIP-848 member with an unacknowledged change (classic members settle inside join)."""
    return any(getattr(m, "acked", None) is not None and m.acked != m.owned for m in members)


async def classic_join_pause(open_conn: Callable[[], Any], topic: str, members: int, partitions: int,
                             settle: float = 1.0) -> tuple[float, float, float]:  # fmt: skip
    return await _join_pause(
        open_conn, lambda c, i, s: ClassicMember(c, "bench-pause-classic", topic, partitions, s), members,
        partitions, settle,
    )  # fmt: skip


async def consumer_join_pause(open_conn: Callable[[], Any], topic: str, members: int, partitions: int,
                              settle: float = 1.0) -> tuple[float, float, float]:  # fmt: skip
    return await _join_pause(
        open_conn, lambda c, i, s: ConsumerMember(c, "bench-pause-cg", topic, i, s), members, partitions, settle
    )


async def classic_heartbeats(open_conn: Callable[[], Any], topic: str, members: int, partitions: int,
                             seconds: float) -> float:  # fmt: skip
    """Heartbeat requests/s of `members` stable classic members, each sending back to back."""
    conns = [await open_conn() for _ in range(members)]
    group = [ClassicMember(c, "bench-hb-classic", topic, partitions, set()) for c in conns]
    await asyncio.gather(*(m.join() for m in group))
    while True:  # members that joined an earlier generation rejoin until one generation holds all
        answers = await asyncio.gather(*(m.c.call("Heartbeat", 4, group_id=m.group, generation_id=m.generation,
                                                  member_id=m.member_id) for m in group))  # fmt: skip
        late = [m for m, r in zip(group, answers) if r.error_code]
        if not late:
            break
        await asyncio.gather(*(m.join() for m in group))
    n = 0
    end = time.perf_counter() + seconds

    async def steady(m: ClassicMember) -> None:
        nonlocal n
        while time.perf_counter() < end:
            r = await m.c.call("Heartbeat", 4, group_id=m.group, generation_id=m.generation, member_id=m.member_id)
            assert r.error_code == 0, r.error_code
            n += 1

    t = time.perf_counter()
    await asyncio.gather(*(steady(m) for m in group))
    rate = n / (time.perf_counter() - t)
    for c in conns:
        c.close()
    return rate


def client_assignment_time(members: int = 1000, partitions: int = 1000, topics: int = 10, runs: int = 3) -> dict:
    """Median ms of the classic group leader's assignment (our client-side assignors), fresh and +1 member."""
    counts = {f"t{i}": partitions // topics for i in range(topics)}
    names = tuple(counts)
    out = {}
    for name, fn in (("range", range_assign), ("cooperative-sticky", cooperative_sticky_assign)):
        fresh, again = [], []
        for _ in range(runs):
            subs = {f"member-{i:05d}": MemberSubscription(names) for i in range(members)}
            t = time.perf_counter()
            first = fn(counts, subs)
            fresh.append((time.perf_counter() - t) * 1000)
            owned = {m: MemberSubscription(names, None, tuple(first[m]), 1) for m in subs}
            owned["member-new"] = MemberSubscription(names)
            t = time.perf_counter()
            fn(counts, owned)
            again.append((time.perf_counter() - t) * 1000)
        out[f"{name} fresh"] = statistics.median(fresh)
        out[f"{name} +1 member"] = statistics.median(again)
    return out


__all__ = ["classic_heartbeats", "classic_join_pause", "client_assignment_time", "consumer_join_pause"]
