"""Share groups: assignment time, heartbeat rate, __share_group_state replay.

Run: python benchmarks/share_groups.py [--quick]

Prints, in one run:
  * time of ``broker.share.assign`` for 1000 members x 1000 partitions: from
    scratch (one topic, identical subscriptions), the sticky recomputation
    after one member joins and after one leaves (with the (member, partition)
    pairs kept, revoked and added), and a heterogeneous group (10 topics x 100
    partitions, each member subscribing to a random subset, fixed seed); next
    to a plain Python round-robin of the same slots (reference: the floor of
    any Python assignor), whose moved pairs show what stickiness saves;
  * ShareGroupHeartbeat requests/s one broker (one coordinator) answers for
    1000 members in 50 groups, pipelined over a few connections, every answer
    checked for error 0 (each member sends the epoch of its previous answer),
    next to ApiVersions v3 requests/s sent the same way on the same
    connections (reference: the broker's per-request floor); and the p50/p99
    of a single heartbeat round trip next to a single ApiVersions round trip;
  * replay time of a __share_group_state partition holding 1M ShareUpdate
    records (plus the ShareSnapshots the shard emits) over 1000 share-partition
    keys, built with ShareStateShard + PartitionLog as the coordinator runtime
    writes it (one record per batch: the runtime builds one batch per
    operation), checked against the live shard's state; next to a raw scan of
    the same log that parses every record without decoding it (reference: the
    I/O + batch-parse floor).

--quick: shorter windows, 100k updates; about 30 s instead of about 3 min.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoal.protocol.api import api_by_name  # noqa: E402
from shoal.protocol.frames import decode_response, encode_request  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402

ROWS: list[tuple[str, str, str]] = []  # (figure, ours, reference) for the closing table


def row(label: str, ours: str, ref: str) -> None:
    ROWS.append((label, ours, ref))


# -- 1. assignment ------------------------------------------------------------------------

Assignment = dict[str, dict[str, set[int]]]


def round_robin(members: Mapping[str, frozenset[str]], topic_partitions: Mapping[str, int]) -> Assignment:
    """The same slots as the assignor (ceil(M/P) holders per partition), dealt out
    in turn with no stickiness and no balancing across pools: the floor."""
    ids = sorted(members)
    out: Assignment = {m: {} for m in ids}
    first = members[ids[0]]
    if all(members[m] == first for m in ids):
        pools = [(ids, [(t, p) for t in sorted(first) for p in range(topic_partitions[t])])]
    else:
        pools = [
            ([m for m in ids if t in members[m]], [(t, p) for p in range(n)])
            for t, n in sorted(topic_partitions.items())
        ]
    for subs, pool in pools:
        n_m, n_p = len(subs), len(pool)
        if not n_m or not n_p:
            continue
        for s in range(-(-n_m // n_p) * n_p):
            t, p = pool[s % n_p]
            out[subs[s % n_m]].setdefault(t, set()).add(p)
    return out


def as_current(a: Assignment) -> dict[str, dict[str, frozenset[int]]]:
    return {m: {t: frozenset(ps) for t, ps in by_topic.items()} for m, by_topic in a.items()}


def pairs(a: Assignment) -> set[tuple[str, str, int]]:
    return {(m, t, p) for m, by_topic in a.items() for t, ps in by_topic.items() for p in ps}


def check_balanced(a: Assignment, topic_partitions: Mapping[str, int]) -> None:
    """Every partition held, equal sharing, member loads within one (one pool)."""
    holders: dict[tuple[str, int], int] = {}
    for _, t, p in pairs(a):
        holders[(t, p)] = holders.get((t, p), 0) + 1
    want = {(t, p) for t, n in topic_partitions.items() for p in range(n)}
    assert set(holders) == want, "a partition is not assigned"
    assert len(set(holders.values())) == 1, "partitions are shared unequally"
    loads = [sum(len(ps) for ps in by_topic.values()) for by_topic in a.values()]
    assert max(loads) - min(loads) <= 1, (min(loads), max(loads))


def timed_median(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def moves(before: Assignment, after: Assignment) -> tuple[int, int, int]:
    b, a = pairs(before), pairs(after)
    return len(b & a), len(b - a), len(a - b)


def assignment_figures(runs: int) -> None:
    from shoal.broker.groups.share.assignor import assign

    n_members, n_parts = 1000, 1000
    members = {f"member-{i:04d}": frozenset({"topic"}) for i in range(n_members)}
    tps = {"topic": n_parts}

    def line(label: str, ours: float, ref: float, extra: str = "") -> None:
        print(f"  {label:<36} {ours * 1000:7.2f} ms   round-robin {ref * 1000:7.2f} ms   {ours / ref:5.1f}x{extra}")
        row(f"assign {label}", f"{ours * 1000:.2f} ms", f"{ref * 1000:.2f} ms")

    print(f"share assignor, {n_members} members x {n_parts} partitions (median of {runs}):")
    ours, base = timed_median(lambda: assign(members, tps), runs)
    ref, rr_base = timed_median(lambda: round_robin(members, tps), runs)
    check_balanced(base, tps)
    line("(a) from scratch, one topic", ours, ref)

    current = as_current(base)
    for label, changed in (
        ("(b) one member joins (sticky)", {**members, "member-9999": frozenset({"topic"})}),
        ("(c) one member leaves (sticky)", {m: s for m, s in members.items() if m != "member-0500"}),
    ):
        ours, after = timed_median(lambda changed=changed: assign(changed, tps, current), runs)
        ref, rr_after = timed_median(lambda changed=changed: round_robin(changed, tps), runs)
        check_balanced(after, tps)
        kept, revoked, added = moves(base, after)
        _, rr_revoked, rr_added = moves(rr_base, rr_after)
        line(label, ours, ref)
        print(
            f"  {'':<36} pairs kept {kept}, revoked {revoked}, added {added}"
            f"   (round-robin: revoked {rr_revoked}, added {rr_added})"
        )
        if len(changed) > n_parts:
            print(f"  {'':<36} ({len(changed)} members > {n_parts} partitions: each partition now has 2 holders)")
        row(f"  moved pairs {label[:3]} revoked/added", f"{revoked}/{added}", f"{rr_revoked}/{rr_added}")

    rng = random.Random(1234)
    topics = [f"topic-{i}" for i in range(10)]
    hetero = {f"member-{i:04d}": frozenset(rng.sample(topics, rng.randint(1, 5))) for i in range(n_members)}
    htps = dict.fromkeys(topics, 100)
    ours, result = timed_median(lambda: assign(hetero, htps), runs)
    ref, _ = timed_median(lambda: round_robin(hetero, htps), runs)
    held = {(t, p) for _, t, p in pairs(result)}
    assert held == {(t, p) for t in topics for p in range(100)}, "heterogeneous: a partition is not assigned"
    line("(d) 10 topics x 100, random subsets", ours, ref)


# -- 2. heartbeats ------------------------------------------------------------------------

HB = api_by_name("ShareGroupHeartbeat")
AV = api_by_name("ApiVersions")
HB_VERSION = 1
_I32 = struct.Struct(">i")
_HB_FIXED = struct.Struct(">ih")  # throttle_time_ms, error_code


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def parse_heartbeat(frame: bytes) -> tuple[int, int]:
    """(error_code, member_epoch) of a ShareGroupHeartbeat v1 response, without
    building the whole body (so the client is not what we measure)."""
    pos = 4  # correlation id
    n_tags, pos = _uvarint(frame, pos)
    for _ in range(n_tags):
        _, pos = _uvarint(frame, pos)
        size, pos = _uvarint(frame, pos)
        pos += size
    _, error = _HB_FIXED.unpack_from(frame, pos)
    pos += 6
    for _ in range(2):  # error_message, member_id: compact nullable strings
        n, pos = _uvarint(frame, pos)
        pos += max(n - 1, 0)
    return error, _I32.unpack_from(frame, pos)[0]


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w, self.corr = reader, writer, 0

    @classmethod
    async def open(cls, port: int) -> Conn:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        return cls(r, w)

    def send(self, api_key: int, version: int, body: Any) -> None:
        self.corr += 1
        self.w.write(b"".join(encode_request(api_key, version, self.corr, "bench", body)))

    async def frame(self) -> bytes:
        size = _I32.unpack(await self.r.readexactly(4))[0]
        return await self.r.readexactly(size)

    async def call(self, api: str, version: int, **fields: Any) -> Any:
        a = api_by_name(api)
        self.send(a.key, version, a.request_class()(**fields))
        return decode_response(await self.frame(), a.key, version)[1]

    def close(self) -> None:
        self.w.close()


class Member:
    __slots__ = ("_frame", "_frame_epoch", "epoch", "group", "member_id")

    def __init__(self, group: str, member_id: str) -> None:
        self.group, self.member_id, self.epoch = group, member_id, 0
        self._frame, self._frame_epoch = b"", -2

    def frame(self) -> bytes:
        """The steady-state heartbeat for the current epoch (encoded once per epoch)."""
        if self._frame_epoch != self.epoch:
            body = HB.request_class()(
                group_id=self.group, member_id=self.member_id, member_epoch=self.epoch, subscribed_topic_names=None
            )
            self._frame = b"".join(encode_request(HB.key, HB_VERSION, 1, "bench", body))
            self._frame_epoch = self.epoch
        return self._frame


class Tally:
    def __init__(self) -> None:
        self.answered = 0
        self.errors: dict[int, int] = {}
        self.epoch_changes = 0


async def heartbeat_round(conn: Conn, mine: list[Member], tally: Tally) -> None:
    """One heartbeat per member, all written before the first answer is read."""
    conn.w.write(b"".join(m.frame() for m in mine))
    for m in mine:
        error, epoch = parse_heartbeat(await conn.frame())
        tally.answered += 1
        if error:
            tally.errors[error] = tally.errors.get(error, 0) + 1
        elif epoch != m.epoch:
            m.epoch = epoch
            tally.epoch_changes += 1


async def api_versions_round(conn: Conn, frame: bytes, n: int, tally: Tally) -> None:
    conn.w.write(frame * n)
    for _ in range(n):
        body = await conn.frame()
        tally.answered += 1
        error = struct.unpack_from(">h", body, 4)[0]  # response header v0, then error_code
        if error:
            tally.errors[error] = tally.errors.get(error, 0) + 1


async def for_seconds(seconds: float, conns: list[Conn], one_round: Callable[[int, Conn], Any]) -> float:
    """Run `one_round` on every connection in a loop for `seconds`; the elapsed time."""
    start = time.perf_counter()
    stop = start + seconds

    async def loop(i: int, c: Conn) -> None:
        while time.perf_counter() < stop:
            await one_round(i, c)

    await asyncio.gather(*(loop(i, c) for i, c in enumerate(conns)))
    return time.perf_counter() - start


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def heartbeat_figures(
    port: int, pid: int, n_members: int, n_groups: int, n_conns: int, partitions: int, seconds: float, samples: int
) -> dict[str, Any]:
    topic = "share-bench"
    conns = [await Conn.open(port) for _ in range(n_conns)]
    try:
        CT = api_by_name("CreateTopics").request_class()
        created = await conns[0].call(
            "CreateTopics",
            7,
            topics=[CT.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1)],
            timeout_ms=10000,
        )
        assert created.topics[0].error_code == 0, created.topics[0]

        members = [Member(f"share-group-{i % n_groups:02d}", f"member-{i:04d}") for i in range(n_members)]
        by_conn = [members[i::n_conns] for i in range(n_conns)]

        # Join: epoch 0 with the subscription, pipelined; every answer fully decoded
        # (it carries the first assignment), and the cheap parser checked against it.
        t = time.perf_counter()

        async def join(conn: Conn, mine: list[Member]) -> None:
            for m in mine:
                body = HB.request_class()(
                    group_id=m.group, member_id=m.member_id, member_epoch=0, subscribed_topic_names=[topic]
                )
                conn.send(HB.key, HB_VERSION, body)
            for m in mine:
                frame = await conn.frame()
                _, resp = decode_response(frame, HB.key, HB_VERSION)
                assert resp.error_code == 0, (m.member_id, resp)
                assert parse_heartbeat(frame) == (resp.error_code, resp.member_epoch)
                m.epoch = resp.member_epoch

        await asyncio.gather(*(join(c, mine) for c, mine in zip(conns, by_conn)))
        join_s = time.perf_counter() - t

        # Warm up until the share state of every group is initialized and the epochs
        # settle: a whole round with no epoch change once every group holds every partition.
        group_ids = sorted({m.group for m in members})

        async def all_assigned() -> bool:
            desc = await conns[0].call(
                "ShareGroupDescribe", 1, group_ids=group_ids, include_authorized_operations=False
            )
            for g in desc.groups:
                assert g.error_code == 0 and len(g.members) == n_members // n_groups, g
                held = {p for m in g.members for tp in m.assignment.topic_partitions for p in tp.partitions}
                if len(held) < partitions:
                    return False
            return True

        t = time.perf_counter()
        while True:
            tally = Tally()
            await asyncio.gather(*(heartbeat_round(c, mine, tally) for c, mine in zip(conns, by_conn)))
            assert not tally.errors, f"warm-up heartbeats failed: {tally.errors}"
            if tally.epoch_changes == 0 and await all_assigned():
                break
            assert time.perf_counter() - t < 30, "share groups did not settle in 30 s"
            await asyncio.sleep(0.05)
        settle_s = time.perf_counter() - t

        # Steady state: each member heartbeats with its current epoch, no subscription.
        hb = Tally()
        cpu0, mine0 = cpu_seconds(pid), time.process_time()
        hb_s = await for_seconds(seconds, conns, lambda i, c: heartbeat_round(c, by_conn[i], hb))
        hb_cpu = ((cpu_seconds(pid) - cpu0) / hb_s, (time.process_time() - mine0) / hb_s)

        # Reference: ApiVersions v3, the same number in flight per connection.
        av_frame = b"".join(
            encode_request(
                AV.key,
                3,
                1,
                "bench",
                AV.request_class()(client_software_name="bench", client_software_version="1"),
            )
        )
        av = Tally()
        cpu0, mine0 = cpu_seconds(pid), time.process_time()
        av_s = await for_seconds(seconds, conns, lambda i, c: api_versions_round(c, av_frame, len(by_conn[i]), av))
        av_cpu = ((cpu_seconds(pid) - cpu0) / av_s, (time.process_time() - mine0) / av_s)

        # Latency: one request at a time on one connection.
        c = conns[0]
        hb_lat, av_lat = [], []
        for i in range(samples):
            m = members[i % n_members]
            t = time.perf_counter()
            c.w.write(m.frame())
            error, epoch = parse_heartbeat(await c.frame())
            hb_lat.append(time.perf_counter() - t)
            if error:
                hb.errors[error] = hb.errors.get(error, 0) + 1
            else:
                m.epoch = epoch
            t = time.perf_counter()
            c.w.write(av_frame)
            await c.frame()
            av_lat.append(time.perf_counter() - t)
    finally:
        for c in conns:
            c.close()
    return {
        "join_s": join_s,
        "settle_s": settle_s,
        "hb": hb,
        "hb_rate": hb.answered / hb_s,
        "hb_cpu": hb_cpu,
        "av": av,
        "av_rate": av.answered / av_s,
        "av_cpu": av_cpu,
        "hb_lat": quantiles(hb_lat),
        "av_lat": quantiles(av_lat),
    }


def quantiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return xs[len(xs) // 2], xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def run_heartbeats(quick: bool) -> bool:
    import uvloop

    n_members, n_groups, n_conns, partitions = 1000, 50, 8, 20
    seconds = 2.0 if quick else 5.0
    samples = 500 if quick else 2000
    with tempfile.TemporaryDirectory(prefix="shoal-bench-share-") as tmp:
        b = BrokerProcess(
            Path(tmp) / "data",
            [
                "group.share.min.heartbeat.interval.ms=100",
                "group.share.heartbeat.interval.ms=100",
                "group.share.session.timeout.ms=60000",
            ],
        )
        b.start()
        try:
            r = uvloop.run(
                heartbeat_figures(b.port, b.proc.pid, n_members, n_groups, n_conns, partitions, seconds, samples)
            )
        finally:
            b.stop()
    per_conn = n_members // n_conns
    print(
        f"ShareGroupHeartbeat, {n_members} members in {n_groups} groups on one topic of {partitions} partitions,"
        f" {n_conns} connections x {per_conn} in flight:"
    )
    print(
        f"  {n_members} joins (epoch 0, pipelined): {r['join_s']:.2f} s;"
        f" share state initialized and epochs settled {r['settle_s']:.2f} s later"
    )
    hb, av = r["hb"], r["av"]
    print(
        f"  steady-state heartbeats: {r['hb_rate']:8.0f} /s   ApiVersions v3, same way: {r['av_rate']:8.0f} /s"
        f"   {r['hb_rate'] / r['av_rate']:.2f}x"
    )
    print(
        "  CPU during the window, broker / this client: heartbeats {:.0%} / {:.0%}, ApiVersions {:.0%} / {:.0%}".format(
            *r["hb_cpu"], *r["av_cpu"]
        )
    )
    print(
        f"  answers checked: {hb.answered:,} heartbeats, errors {hb.errors or 0},"
        f" epoch changes {hb.epoch_changes}; {av.answered:,} ApiVersions, errors {av.errors or 0}"
    )
    (h50, h99), (a50, a99) = r["hb_lat"], r["av_lat"]
    print(
        f"  one heartbeat round trip: p50 {h50 * 1e3:.3f} ms, p99 {h99 * 1e3:.3f} ms"
        f"   ApiVersions: p50 {a50 * 1e3:.3f} ms, p99 {a99 * 1e3:.3f} ms"
    )
    row("heartbeats/s (pipelined)", f"{r['hb_rate']:.0f} /s", f"{r['av_rate']:.0f} /s ApiVersions")
    row("heartbeat round trip p50", f"{h50 * 1e3:.3f} ms", f"{a50 * 1e3:.3f} ms ApiVersions")
    row("heartbeat round trip p99", f"{h99 * 1e3:.3f} ms", f"{a99 * 1e3:.3f} ms ApiVersions")
    return not hb.errors and not av.errors


# -- 3. __share_group_state replay ----------------------------------------------------------


def replay_figures(updates: int, keys: int, per_batch: int) -> bool:
    from shoal.broker.log import LogConfig, PartitionLog
    from shoal.broker.share_coordinator.shard import UPDATE, ShareStateShard
    from shoal.protocol.constants import ACKNOWLEDGED, ARCHIVED, AVAILABLE
    from shoal.protocol.coordinator_records import CoordinatorRecord, serde
    from shoal.protocol.records import build_batch

    s = serde("share")
    clock = [1_700_000_000_000]

    def now() -> int:
        return clock[0]

    rng = random.Random(42)
    with tempfile.TemporaryDirectory(prefix="shoal-bench-share-state-") as tmp:
        log = PartitionLog.open(Path(tmp) / "__share_group_state-0", LogConfig(segment_bytes=100 << 20), now, True)
        try:
            live = ShareStateShard(0, now_ms=now)
            pending: list[Any] = []

            def persist() -> None:
                """What CoordinatorRuntime.append does: one batch, then replay into the shard."""
                encoded = [
                    (s.encode_key(r.name, r.key), s.encode_value(r.name, r.value, r.value_version), [], now())
                    for r in pending
                ]
                info = log.append(build_batch(encoded), now_ms=now())
                for i, r in enumerate(pending):
                    rt = s.record_type(r.name)
                    live.replay(CoordinatorRecord(rt, r.key, r.value, 0), info.first_offset + i)
                pending.clear()

            # keys = (group, topic id, partition): 10 groups x 10 topics x keys/100 partitions
            names = [(f"share-group-{k % 10}", uuid.UUID(int=k // 10 % 10 + 1), k // 100) for k in range(keys)]
            t = time.perf_counter()
            for g, tid, p in names:
                records, err = live.initialize(g, tid, p, 1, 0)
                assert err == 0
                pending.extend(records)
                if len(pending) >= per_batch:
                    persist()
            cursor = [0] * keys
            n_updates = n_snapshots = 0
            i = 0
            while n_updates < updates:
                k = i % keys
                i += 1
                g, tid, p = names[k]
                c = cursor[k]
                cursor[k] = c + 10
                # a leader acknowledging 10 records, one of them released or archived after
                # a few deliveries, and moving the start offset so ~40 offsets stay in flight
                batches = [
                    (c, c + 4, ACKNOWLEDGED, 1),
                    (c + 5, c + 5, rng.choice((AVAILABLE, ARCHIVED)), rng.randint(1, 5)),
                    (c + 6, c + 9, ACKNOWLEDGED, 1),
                ]
                records, err = live.write(g, tid, p, 1, 0, max(0, c - 40), batches, -1)
                assert err == 0
                for r in records:
                    if r.name == UPDATE:
                        n_updates += 1
                    else:
                        n_snapshots += 1
                pending.extend(records)
                if len(pending) >= per_batch:
                    persist()
                clock[0] += 1
            if pending:
                persist()
            log.roll()
            build_s = time.perf_counter() - t
            total = log.log_end_offset
            size = sum(f.stat().st_size for f in Path(log.path).glob("*.log"))

            # Reference: scan and parse every record, decode nothing.
            t = time.perf_counter()
            n_raw = 0
            for header, view in log.scan(log.log_start_offset):
                for _ in header.records():
                    n_raw += 1
                view.release()
            raw_s = time.perf_counter() - t

            # CoordinatorRuntime._replay_partition into a fresh shard.
            fresh = ShareStateShard(0, now_ms=now)
            t = time.perf_counter()
            n = 0
            for header, view in log.scan(log.log_start_offset):
                if header.is_control:
                    continue
                for rec in header.records():
                    fresh.replay(s.decode(rec.key, rec.value), rec.offset)
                    n += 1
                view.release()
            replay_s = time.perf_counter() - t
        finally:
            log.close()
    assert n == n_raw == total, (n, n_raw, total)
    same = fresh.states == live.states and len(fresh.states) == keys
    bad = sum(1 for key, st in live.states.items() if fresh.states.get(key) != st)
    print(
        f"__share_group_state replay: {n_updates:,} ShareUpdate + {n_snapshots + keys:,} ShareSnapshot"
        f" ({keys} initial) records over {keys} keys, {per_batch} record(s) per batch, {size / (1 << 20):.0f} MiB"
        f" (built in {build_s:.1f} s)"
    )
    print(
        f"  replay into a fresh shard: {replay_s:7.2f} s {n / replay_s:9.0f} records/s"
        f"   raw scan, no decoding: {raw_s:6.2f} s {n_raw / raw_s:9.0f} records/s   {replay_s / raw_s:5.1f}x"
    )
    print(f"  replayed state equals the live shard's for every key: {same} ({bad} keys differ)")
    row(
        f"replay {n:,} records",
        f"{replay_s:.2f} s, {n / replay_s:.0f} rec/s",
        f"{raw_s:.2f} s, {n_raw / raw_s:.0f} rec/s raw",
    )
    return same


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--records-per-batch",
        type=int,
        default=1,
        help="records per log batch in the replay test (1: as the runtime writes, one operation per batch)",
    )
    args = ap.parse_args()
    ok = True
    assignment_figures(3 if args.quick else 7)
    print()
    ok &= run_heartbeats(args.quick)
    print()
    ok &= replay_figures(100_000 if args.quick else 1_000_000, 1000, args.records_per_batch)
    print()
    w = max(len(r[0]) for r in ROWS)
    print(f"{'figure':<{w}}  {'ours':>28}  reference")
    for label, ours, ref in ROWS:
        print(f"{label:<{w}}  {ours:>28}  {ref}")
    if not ok:
        print("FAILED: some answers had errors or the replayed state differs (see above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
