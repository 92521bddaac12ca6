"""Classic consumer groups: rebalance time, commit rate, __consumer_offsets replay.

Run: python benchmarks/groups.py [--quick]

Prints, in one run:
  * time for 100 members (one connection each, our codec as the client) to
    join one group and reach Stable (JoinGroup x2 + SyncGroup), next to the
    time of 100 ApiVersions round trips on the same connections (reference);
  * OffsetCommit requests/s from 10 consumers (each commit is answered once
    durable), next to acks=-1 produce requests/s of one small record from
    the same 10 connections (the same fsync path, reference);
  * replay time of a __consumer_offsets partition holding 1M commits
    (10,000 distinct group/topic/partition keys), before and after compaction;
  * KIP-848 consumer groups, next to the classic figures: time for 100
    members (ConsumerGroupHeartbeat, each reporting what it holds) to reach
    Stable on a 200-partition topic, and ConsumerGroupHeartbeat/s of those
    100 members once stable;
  * side by side, classic and consumer protocol (``side_by_side``, members in
    benchmarks/group_protocols.py): 100 members to Stable, heartbeats/s of 100
    stable members, assignment time for 1,000 members x 1,000 partitions (the
    classic leader's in our client, the broker's for consumer groups), and the
    pause in consumption capacity when a 101st member joins;
  * the server-side assignors alone (``assignment_time``, also runnable with
    --assignors-only): uniform and range for 1,000 members x 1,000 partitions,
    a fresh assignment and a sticky one after a member joins (goal < 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoal.protocol.api import api_by_name  # noqa: E402
from shoal.protocol.frames import decode_response, encode_request  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w, self.corr = reader, writer, 0

    @classmethod
    async def open(cls, port: int) -> Conn:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    async def call(self, api: str, version: int, **fields):
        a = api_by_name(api)
        self.corr += 1
        self.w.write(b"".join(encode_request(a.key, version, self.corr, "bench", a.request_class()(**fields))))
        size = struct.unpack(">i", await self.r.readexactly(4))[0]
        _, body = decode_response(await self.r.readexactly(size), a.key, version)
        return body

    def close(self) -> None:
        self.w.close()


async def rebalance_100(port: int, members: int) -> tuple[float, float]:
    JG = api_by_name("JoinGroup").request_class()
    SG = api_by_name("SyncGroup").request_class()
    conns = [await Conn.open(port) for _ in range(members)]
    start = time.perf_counter()
    await asyncio.gather(
        *(c.call("ApiVersions", 3, client_software_name="b", client_software_version="1") for c in conns)
    )
    reference = time.perf_counter() - start
    protocols = [JG.JoinGroupRequestProtocol(name="range", metadata=b"m")]

    async def member(c: Conn) -> None:
        first = await c.call(
            "JoinGroup",
            5,
            group_id="bench",
            session_timeout_ms=30000,
            rebalance_timeout_ms=30000,
            member_id="",
            protocol_type="consumer",
            protocols=protocols,
        )
        joined = await c.call(
            "JoinGroup",
            5,
            group_id="bench",
            session_timeout_ms=30000,
            rebalance_timeout_ms=30000,
            member_id=first.member_id,
            protocol_type="consumer",
            protocols=protocols,
        )
        assert joined.error_code == 0, joined.error_code
        assignments = [SG.SyncGroupRequestAssignment(member_id=m.member_id, assignment=b"a") for m in joined.members]
        synced = await c.call(
            "SyncGroup",
            3,
            group_id="bench",
            generation_id=joined.generation_id,
            member_id=first.member_id,
            assignments=assignments,
        )
        assert synced.error_code == 0, synced.error_code

    start = time.perf_counter()
    await asyncio.gather(*(member(c) for c in conns))
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return elapsed, reference


async def commit_rate(port: int, consumers: int, seconds: float) -> tuple[float, float]:
    OC = api_by_name("OffsetCommit").request_class()
    P = api_by_name("Produce").request_class()
    from shoal.protocol.records import build_batch

    conns = [await Conn.open(port) for _ in range(consumers)]

    async def committer(i: int, c: Conn, stop: float) -> int:
        n = 0
        while time.perf_counter() < stop:
            resp = await c.call(
                "OffsetCommit",
                8,
                group_id=f"committer-{i}",
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=[
                    OC.OffsetCommitRequestTopic(
                        name="bench-commits",
                        partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=n)],
                    )
                ],
            )
            assert resp.topics[0].partitions[0].error_code == 0
            n += 1
        return n

    async def producer(c: Conn, stop: float) -> int:
        n = 0
        while time.perf_counter() < stop:
            batch = build_batch([(None, b"x" * 60, [], int(time.time() * 1000))])
            resp = await c.call(
                "Produce",
                9,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    P.TopicProduceData(
                        name="bench-commits", partition_data=[P.PartitionProduceData(index=0, records=batch)]
                    )
                ],
            )
            assert resp.responses[0].partition_responses[0].error_code == 0
            n += 1
        return n

    stop = time.perf_counter() + seconds
    commits = sum(await asyncio.gather(*(committer(i, c, stop) for i, c in enumerate(conns))))
    stop = time.perf_counter() + seconds
    produces = sum(await asyncio.gather(*(producer(c, stop) for c in conns)))
    for c in conns:
        c.close()
    return commits / seconds, produces / seconds


def replay_figures(records: int, keys: int) -> tuple[float, float, int, int]:
    from shoal.broker.groups.shard import GroupSettings, GroupShard
    from shoal.broker.log import LogConfig, PartitionLog
    from shoal.broker.log.cleaner import LogCleaner
    from shoal.protocol.coordinator_records import serde
    from shoal.protocol.records import build_batch

    s = serde("group")
    clock = [1_700_000_000_000]

    def now() -> int:
        return clock[0]

    with tempfile.TemporaryDirectory(prefix="shoal-replay-") as tmp:
        log = PartitionLog.open(
            Path(tmp) / "__consumer_offsets-0", LogConfig(segment_bytes=64 << 20, cleanup_policy="compact"), now, True
        )
        shard = GroupShard(0, GroupSettings(6000, 300000, 1000, 0, 4096, 7 * 86400000), now)
        batch = []
        for i in range(records):
            k = i % keys
            rec = shard.commit_record(f"group-{k // 10}", "topic", k % 10, i, -1, "", now())
            batch.append(
                (s.encode_key(rec.name, rec.key), s.encode_value(rec.name, rec.value, rec.value_version), [], now())
            )
            if len(batch) == 1000:
                log.append(build_batch(batch), now_ms=now())
                batch.clear()
        if batch:
            log.append(build_batch(batch), now_ms=now())
        log.roll()

        def replay() -> tuple[float, int]:
            fresh = GroupShard(0, shard.settings, now)
            start = time.perf_counter()
            n = 0
            for header, _ in log.scan(log.log_start_offset):
                for r in header.records():
                    fresh.replay(s.decode(r.key, r.value), r.offset)
                    n += 1
            return time.perf_counter() - start, n

        before, n_before = replay()
        clock[0] += 1000
        LogCleaner().clean(log, now(), delete_retention_ms=0, force=True)
        after, n_after = replay()
        log.close()
        return before, after, n_before, n_after


def assignment_time(members: int = 1000, partitions: int = 1000, topics: int = 10, runs: int = 5) -> dict[str, float]:
    """Median ms of each assignor: a fresh assignment, and a sticky one after one member joins."""
    import statistics
    import uuid

    from shoal.broker.groups.consumer.assignor import ASSIGNORS

    counts = {uuid.UUID(int=i + 1): partitions // topics for i in range(topics)}
    subs = frozenset(counts)
    group = {f"member-{i:05d}": subs for i in range(members)}
    out: dict[str, float] = {}
    for name, fn in ASSIGNORS.items():
        fresh, sticky = [], []
        for _ in range(runs):
            t = time.perf_counter()
            first = fn(group, counts)
            fresh.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            fn({**group, "member-new": subs}, counts, first)
            sticky.append((time.perf_counter() - t) * 1000)
        out[f"{name} fresh"] = statistics.median(fresh)
        out[f"{name} sticky (+1 member)"] = statistics.median(sticky)
    return out


async def consumer_protocol(port: int, members: int, seconds: float) -> tuple[float, float]:
    """(seconds for `members` KIP-848 members to reach Stable, heartbeats/s once stable)."""
    HB = api_by_name("ConsumerGroupHeartbeat").request_class()
    conns = [await Conn.open(port) for _ in range(members)]
    held: dict[int, dict] = {}
    epochs: dict[int, int] = {}

    def owned(i: int) -> list:
        return [HB.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in held[i].items()]

    async def beat(i: int, first: bool = False):
        r = await conns[i].call(
            "ConsumerGroupHeartbeat",
            1,
            group_id="bench-cg",
            member_id=f"m-{i:03d}",
            member_epoch=0 if first else epochs[i],
            rebalance_timeout_ms=30000 if first else -1,
            subscribed_topic_names=["bench-cg"] if first else None,
            topic_partitions=[] if first else owned(i),
        )
        assert r.error_code == 0, r
        epochs[i] = r.member_epoch
        if r.assignment is not None:
            held[i] = {tp.topic_id: set(tp.partitions) for tp in r.assignment.topic_partitions}
        return r

    start = time.perf_counter()
    await asyncio.gather(*(beat(i, True) for i in range(members)))
    while True:
        await asyncio.gather(*(beat(i) for i in range(members)))
        d = await conns[0].call("ConsumerGroupDescribe", 1, group_ids=["bench-cg"], include_authorized_operations=False)
        if d.groups[0].group_state == "Stable":
            break
    stable = time.perf_counter() - start
    n = 0
    end = time.perf_counter() + seconds

    async def steady(i: int) -> None:
        nonlocal n
        while time.perf_counter() < end:
            await beat(i)
            n += 1

    t = time.perf_counter()
    await asyncio.gather(*(steady(i) for i in range(members)))
    rate = n / (time.perf_counter() - t)
    for c in conns:
        c.close()
    return stable, rate


def side_by_side(b: BrokerProcess, classic_stable: float, consumer_stable: float, consumer_hb: float,
                 seconds: float) -> None:  # fmt: skip
    """The classic and the consumer protocol in one table (members: benchmarks/group_protocols.py)."""
    from benchmarks.group_protocols import (
        classic_heartbeats,
        classic_join_pause,
        client_assignment_time,
        consumer_join_pause,
    )
    from benchmarks.produce_fetch import create_topic

    for t in ("bench-hb", "bench-pause-classic", "bench-pause-cg"):
        create_topic(b.bootstrap, t, 200)

    async def conn() -> Conn:
        return await Conn.open(b.port)

    classic_hb = asyncio.run(classic_heartbeats(conn, "bench-hb", 100, 200, seconds))
    c_low, c_ms, c_lost = asyncio.run(classic_join_pause(conn, "bench-pause-classic", 100, 200))
    k_low, k_ms, k_lost = asyncio.run(consumer_join_pause(conn, "bench-pause-cg", 100, 200))
    client = client_assignment_time()
    server = assignment_time(runs=3)
    rows = [
        ("100 members to a stable group", f"{classic_stable * 1000:.0f} ms", f"{consumer_stable * 1000:.0f} ms"),
        ("heartbeats/s, 100 stable members", f"{classic_hb:.0f}", f"{consumer_hb:.0f}"),
        ("assignment 1,000 x 1,000, fresh",
         f"range {client['range fresh']:.0f} ms, coop-sticky {client['cooperative-sticky fresh']:.0f} ms",
         f"uniform {server['uniform fresh']:.1f} ms, range {server['range fresh']:.1f} ms"),
        ("assignment 1,000 x 1,000, +1 member",
         f"range {client['range +1 member']:.0f} ms, coop-sticky {client['cooperative-sticky +1 member']:.0f} ms",
         f"uniform {server['uniform sticky (+1 member)']:.1f} ms, range {server['range sticky (+1 member)']:.1f} ms"),
        ("join of a 101st member: lowest capacity", f"{c_low:.1f} %", f"{k_low:.1f} %"),
        ("  capacity below 100 % for", f"{c_ms:.0f} ms", f"{k_ms:.0f} ms"),
        ("  partition-seconds lost (of 200)", f"{c_lost:.2f}", f"{k_lost:.2f}"),
    ]  # fmt: skip
    print()
    print(f"{'':42s} {'classic (eager, range)':>44s}   {'consumer (KIP-848)':>36s}")
    for name, classic, consumer in rows:
        print(f"{name:42s} {classic:>44s}   {consumer:>36s}")
    print("(classic assignment: the leader's, in our client; consumer: the broker's. Capacity: share of the")
    print(" 200 partitions owned by some member, sampled every 5 ms; records/s is proportional to it.)")
    print()


def print_assignors() -> None:
    for name, ms in assignment_time().items():
        print(f"assignor {name:24s} 1,000 members x 1,000 partitions: {ms:7.1f} ms  (goal < 50 ms)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--assignors-only", action="store_true")
    args = ap.parse_args()
    if args.assignors_only:
        print_assignors()
        return
    with tempfile.TemporaryDirectory(prefix="shoal-bench-groups-") as tmp:
        b = BrokerProcess(
            Path(tmp) / "data",
            [
                "group.initial.rebalance.delay.ms=0",
                "num.partitions=1",
                "group.consumer.min.heartbeat.interval.ms=500",
                "group.consumer.heartbeat.interval.ms=500",
            ],
        )
        b.start()
        try:
            from benchmarks.produce_fetch import create_topic

            create_topic(b.bootstrap, "bench-commits")
            elapsed, ref = asyncio.run(rebalance_100(b.port, 100))
            print(
                f"100 members join one group and reach Stable: {elapsed * 1000:8.1f} ms"
                f"   (100 ApiVersions round trips, same connections: {ref * 1000:.1f} ms)"
            )
            commits, produces = asyncio.run(commit_rate(b.port, 10, 2.0 if args.quick else 5.0))
            print(
                f"OffsetCommit from 10 consumers (durable):   {commits:8.0f} /s"
                f"   (acks=-1 produce requests, same connections: {produces:.0f} /s)"
            )
            create_topic(b.bootstrap, "bench-cg", 200)
            stable, rate = asyncio.run(consumer_protocol(b.port, 100, 2.0 if args.quick else 5.0))
            print(f"100 KIP-848 members reach Stable:           {stable * 1000:8.1f} ms")
            print(f"ConsumerGroupHeartbeat, 100 stable members: {rate:8.0f} /s")
            side_by_side(b, elapsed, stable, rate, 2.0 if args.quick else 5.0)
        finally:
            b.stop()
    n = 100_000 if args.quick else 1_000_000
    before, after, n_before, n_after = replay_figures(n, 10_000)
    print(
        f"replay of __consumer_offsets with {n_before:,} commits: {before:7.2f} s;"
        f" after compaction ({n_after:,} records): {after:6.3f} s"
    )
    print_assignors()


if __name__ == "__main__":
    main()
