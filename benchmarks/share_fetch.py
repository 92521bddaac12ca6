"""Share groups' data path (KIP-932): ShareFetch throughput, latency and memory.

Run: python benchmarks/share_fetch.py [--quick] [--profile FILE]

Starts a broker process (temporary data dir, 127.0.0.1, free port), produces
1 KiB records with librdkafka (linger 5 ms, 64 KiB batches) and prints:

  * records/s delivered and acknowledged by share-group members driven with
    our codec, one asyncio client per member doing exactly what librdkafka's
    ShareConsumer does: ShareGroupHeartbeat v1 on a coordinator connection
    (22-char member id, epoch 0 with the subscription, then the interval the
    broker asks for), ShareFetch v1 on its own connection (epoch 0 naming the
    assigned partitions, then epoch + 1 naming nothing; MaxRecords =
    BatchSize = 500, MaxWaitMs 500, MinBytes 1, MaxBytes 50 MiB) carrying the
    ACCEPT acknowledgements of the previous answer's AcquiredRecords (one
    AcknowledgementBatch with one type per range), and a final
    ShareAcknowledge (epoch -1). For 1, 4 and 16 members on one partition and
    16 members on 16 partitions. Every offset must be delivered exactly once
    (delivery count 1) and every acknowledgement answered without error;
    "acknowledged" is when DescribeShareGroupOffsets first shows lag 0 on
    every partition, so it includes the durable write of the last
    acknowledgement (a persisted start offset still below the high watermark
    then is reported in the checks). A diagnostic line repeats the 4-member
    case with MaxBytes 1 MiB. Next to it, in the same run: the classic Fetch
    path reading the same records (our codec, one connection, 1 MiB per
    partition as a Java consumer asks; and librdkafka's Consumer), and
    librdkafka's ShareConsumer (implicit acknowledgement, 1 and 4 consumers in
    threads, timed from the first record any of them got) on one partition;
  * produce-to-delivery latency (median, p99) at ~200 records/s: one member
    waiting in ShareFetch (MaxWaitMs 500) while librdkafka produces one 1 KiB
    record every 5 ms with its send time in the value; next to a classic Fetch
    long poll (MaxWaitMs 500) on the same kind of stream;
  * broker memory per in-flight record: in process, with tracemalloc, a
    SharePartition holding N records acquired 500 at a time from synthetic
    log-batch headers (as a fetch does), then the worst case where every other
    record is acknowledged (each range split into per-offset state), then that
    worst case plus the share coordinator's copy of the state (a
    ShareStateShard fed every write); and the anonymous RSS growth of a fresh
    broker while 16 members hold 16 partitions at the in-flight limit
    (10,000, the highest allowed; 2,000 with --quick), every other record
    acknowledged.

Targets from the issue are printed next to the figures (not asserted):
>= 100,000 records/s acknowledged with 4 members on one partition; p99
produce-to-delivery <= 10 ms at low load; <= 200 bytes per in-flight record.

--quick: 50k records, 300 latency samples, smaller memory runs (about 30 s
instead of about 1.5 min on 2 cores). --profile FILE: after the measured runs,
run the 4-member case once more on a new group under py-spy (raw collapsed
stacks to FILE) and print the broker's hottest frames (about 10 s more).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoal.protocol.api import api_by_name  # noqa: E402
from shoal.protocol.frames import decode_response, encode_request  # noqa: E402
from shoal.protocol.records import iter_batches  # noqa: E402

from tests.brokers import BrokerProcess, RawClient  # noqa: E402

MIB = 1 << 20
RECORD = 1024
QUIET = {"log_level": 3}
ACCEPT = 1
MAX_RECORDS = 500
FETCH_WAIT_MS = 500
OVERRIDES = [
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.share.min.heartbeat.interval.ms=100",
    "group.share.heartbeat.interval.ms=200",
    "log.segment.bytes=536870912",
]

SF = api_by_name("ShareFetch")
SA = api_by_name("ShareAcknowledge")
HB = api_by_name("ShareGroupHeartbeat")
FETCH = api_by_name("Fetch")
SF_V = SA_V = HB_V = 1
FETCH_V = 12
_I32 = struct.Struct(">i")

ROWS: list[tuple[str, str, str, str]] = []  # (figure, ours, reference, target)


def row(label: str, ours: str, ref: str, target: str = "") -> None:
    ROWS.append((label, ours, ref, target))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_anon(pid: int) -> int:
    """Anonymous resident memory of a process (Linux), bytes: no page cache, no mapped log files."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def quantiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))]


# -- admin (blocking, our codec) -------------------------------------------------------------


def create_topic(port: int, name: str, partitions: int) -> None:
    CT = api_by_name("CreateTopics").request_class()
    with RawClient(port) as c:
        resp = c.call(
            "CreateTopics",
            7,
            topics=[CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
            timeout_ms=10000,
        )
    assert resp.topics[0].error_code == 0, resp.topics[0]


def group_config(port: int, group: str, **configs: str) -> None:
    """Group configs (IncrementalAlterConfigs, resource type 32), e.g. share.auto.offset.reset."""
    IAC = api_by_name("IncrementalAlterConfigs").request_class()
    with RawClient(port) as c:
        resp = c.call(
            "IncrementalAlterConfigs",
            1,
            resources=[
                IAC.AlterConfigsResource(
                    resource_type=32,
                    resource_name=group,
                    configs=[
                        IAC.AlterableConfig(name=k.replace("_", "."), config_operation=0, value=v)
                        for k, v in configs.items()
                    ],
                )
            ],
            validate_only=False,
        )
    assert resp.responses[0].error_code == 0, resp


def share_offsets(c: RawClient, group: str) -> list[tuple[int, int, int]]:
    """(partition, persisted start offset, lag) of every partition `group` has state for."""
    DSO = api_by_name("DescribeShareGroupOffsets").request_class()
    req = [DSO.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]
    g = c.call("DescribeShareGroupOffsets", 1, groups=req).groups[0]
    return [(p.partition_index, p.start_offset, p.lag) for t in g.topics for p in t.partitions]


def wait_acknowledged(
    port: int, group: str, hwms: list[int], timeout: float = 30.0, every: float = 0.005
) -> tuple[float, list[int]]:
    """Poll the group's persisted state (DescribeShareGroupOffsets) until every partition has a
    start offset and lag 0: every record below the high watermark is durably acknowledged.
    Returns the perf_counter time it first was (nan after `timeout`) and the persisted start
    offsets then."""
    deadline = time.perf_counter() + timeout
    seen: list[tuple[int, int, int]] = []
    with RawClient(port) as c:
        while time.perf_counter() < deadline:
            seen = sorted(share_offsets(c, group))
            if len(seen) == len(hwms) and all(start >= 0 and lag == 0 for _, start, lag in seen):
                acked = time.perf_counter()
                # Lag 0 can be durable one write before the start offset is: the write that moves
                # the start past acknowledgements made while an earlier one was pending follows
                # them. The starts reported are those once that write landed (or after 5 s).
                settle = acked + 5.0
                while any(start < hwm for (_, start, _), hwm in zip(seen, hwms)) and time.perf_counter() < settle:
                    time.sleep(every)
                    seen = sorted(share_offsets(c, group))
                return acked, [start for _, start, _ in seen]
            time.sleep(every)
    return float("nan"), [start for _, start, _ in seen]


def high_watermarks(port: int, topic: str, partitions: int) -> list[int]:
    LO = api_by_name("ListOffsets").request_class()
    with RawClient(port) as c:
        resp = c.call(
            "ListOffsets",
            7,
            replica_id=-1,
            isolation_level=0,
            topics=[
                LO.ListOffsetsTopic(
                    name=topic,
                    partitions=[LO.ListOffsetsPartition(partition_index=i, timestamp=-1) for i in range(partitions)],
                )
            ],
        )
    out = sorted((p.partition_index, p.offset) for p in resp.topics[0].partitions)
    return [o for _, o in out]


def produce(bootstrap: str, topic: str, partitions: int, n: int, batch_bytes: int, value_bytes: int = RECORD) -> float:
    """n records of `value_bytes` (1 KiB), spread evenly over the partitions; returns seconds."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": batch_bytes,
            "batch.num.messages": 1_000_000,  # small records fill batch.size, not a record count
            "queue.buffering.max.kbytes": 256 * 1024,
            "enable.idempotence": False,
            "compression.type": "none",
            **QUIET,
        }
    )
    value = os.urandom(value_bytes)
    failed: list = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=i % partitions, on_delivery=report)
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(120) == 0
    if failed:
        raise RuntimeError(f"{len(failed)} deliveries failed: {failed[0]}")
    return time.perf_counter() - start


# -- our codec client: connections and share-group members ---------------------------------------


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w, self.corr = reader, writer, 0

    @classmethod
    async def open(cls, port: int) -> Conn:
        r, w = await asyncio.open_connection("127.0.0.1", port, limit=1 << 24)
        return cls(r, w)

    def send(self, a: Any, version: int, body: Any) -> None:
        self.corr += 1
        self.w.write(b"".join(encode_request(a.key, version, self.corr, "share-bench", body)))

    async def recv(self, a: Any, version: int) -> Any:
        size = _I32.unpack(await self.r.readexactly(4))[0]
        return decode_response(await self.r.readexactly(size), a.key, version)[1]

    async def call(self, a: Any, version: int, body: Any) -> Any:
        self.send(a, version, body)
        return await self.recv(a, version)

    def close(self) -> None:
        self.w.close()


PKey = tuple[uuid.UUID, int]


def new_member_id() -> str:
    """A member id as Java and librdkafka make it: a random UUID, URL-safe base64, 22 chars."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass
class Tally:
    """What a run's members saw, shared by all of them."""

    hwms: dict[int, int]  # partition -> high watermark (records to deliver)
    counts: dict[int, bytearray] = field(default_factory=dict)  # partition -> deliveries per offset
    delivered: int = 0
    duplicates: int = 0
    redelivered: int = 0  # acquired with delivery count > 1
    acked: int = 0  # records whose ACCEPT came back with AcknowledgeErrorCode 0
    fetches: int = 0
    empty_fetches: int = 0
    errors: Counter = field(default_factory=Counter)  # (where, error code) -> times
    uncovered: int = 0  # acquired ranges the returned batches do not hold
    t_delivered: float = float("nan")
    failed: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)
    latencies: list[float] | None = None  # ms, when measuring latency

    def __post_init__(self) -> None:
        self.counts = {p: bytearray(h) for p, h in self.hwms.items()}
        self.total = sum(self.hwms.values())

    def deliver(self, p: int, first: int, last: int, count: int) -> None:
        if count != 1:
            self.redelivered += last - first + 1
        if not self.hwms:
            return  # not counting
        c = self.counts.get(p)
        if c is None or last >= len(c):
            self.errors[("offset beyond the high watermark", p)] += 1
            return
        n = last - first + 1
        if c.count(0, first, last + 1) == n:
            c[first : last + 1] = b"\x01" * n
            self.delivered += n
        else:
            for o in range(first, last + 1):
                if c[o]:
                    self.duplicates += 1
                else:
                    self.delivered += 1
                c[o] = min(c[o] + 1, 255)
        if self.total and self.delivered >= self.total and not self.done.is_set():
            self.t_delivered = time.perf_counter()
            self.done.set()

    def exactly_once(self) -> bool:
        return all(c.count(1) == len(c) for c in self.counts.values()) and not self.duplicates


class Member:
    """One share consumer: a member of the group and its share session on the broker."""

    def __init__(self, group: str, topic: str) -> None:
        self.group, self.topic = group, topic
        self.member_id = new_member_id()
        self.epoch = 0  # member epoch (heartbeat)
        self.assigned: set[PKey] = set()
        self.session_epoch = 0  # share session epoch (ShareFetch)
        self.session: set[PKey] = set()  # partitions the broker's share session holds
        self.pending: dict[PKey, list[tuple[int, int]]] = {}  # acks to send: ranges to ACCEPT
        self.left = False

    # heartbeats
    def heartbeat(self, joining: bool) -> Any:
        return HB.request_class()(
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=-1 if self.left else self.epoch,
            rack_id=None,
            subscribed_topic_names=[self.topic] if joining else None,
        )

    def on_heartbeat(self, resp: Any, tally: Tally | None) -> bool:
        """Apply an answer; True if the assignment changed."""
        if resp.error_code:
            if tally is not None:
                tally.errors[("ShareGroupHeartbeat", resp.error_code)] += 1
            return False
        self.epoch = resp.member_epoch
        if resp.assignment is None:
            return False
        new = {(tp.topic_id, p) for tp in resp.assignment.topic_partitions for p in tp.partitions}
        changed = new != self.assigned
        self.assigned = new
        return changed

    # share fetch
    def _topics(self, cls: Any, keys: set[PKey], ack_request: bool) -> list:
        """Topics of a ShareFetch (ack_request False) or ShareAcknowledge naming `keys`, each
        with its pending ACCEPTs: one AcknowledgementBatch, one type, per acquired range."""
        part = cls.AcknowledgePartition if ack_request else cls.FetchPartition
        topic = cls.AcknowledgeTopic if ack_request else cls.FetchTopic
        by_topic: dict[uuid.UUID, list] = {}
        for tid, p in sorted(keys):
            batches = [
                cls.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=[ACCEPT])
                for f, last in self.pending.get((tid, p), ())
            ]
            by_topic.setdefault(tid, []).append(part(partition_index=p, acknowledgement_batches=batches))
        return [topic(topic_id=tid, partitions=parts) for tid, parts in by_topic.items()]

    def fetch_request(
        self, max_wait_ms: int, max_records: int = MAX_RECORDS, max_bytes: int = 50 * MIB
    ) -> tuple[Any, dict]:
        """The next ShareFetch, as librdkafka builds it, and the acks it carries."""
        R = SF.request_class()
        if self.session_epoch == 0:
            names, acks, forgotten = set(self.assigned), {}, []
        else:
            acks = {k: v for k, v in self.pending.items() if v}
            names = (self.assigned - self.session) | set(acks)
            gone = self.session - self.assigned - set(acks)
            forgotten = [
                R.ForgottenTopic(topic_id=tid, partitions=sorted(p for t, p in gone if t == tid))
                for tid in {t for t, _ in gone}
            ]
        body = R(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=self.session_epoch,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=max_bytes,
            max_records=max_records,
            batch_size=max_records,
            topics=self._topics(R, names, ack_request=False),
            forgotten_topics_data=forgotten,
        )
        if self.session_epoch == 0:
            self.session = set(names)
        else:
            self.session = (self.session | names) - {
                k for f in forgotten for k in ((f.topic_id, p) for p in f.partitions)
            }
        for k in acks:
            self.pending[k] = []
        self.session_epoch = 1 if self.session_epoch >= 0x7FFFFFFF else self.session_epoch + 1
        return body, acks

    def on_fetch(self, resp: Any, acks: dict, tally: Tally) -> int:
        """Apply a ShareFetch answer: count deliveries, queue their ACCEPTs; records acquired."""
        tally.fetches += 1
        if resp.error_code:
            tally.errors[("ShareFetch", resp.error_code)] += 1
            self.session_epoch = 0  # librdkafka reopens the session
            return 0
        got = 0
        recv_ns = time.time_ns() if tally.latencies is not None else 0
        for t in resp.responses:
            for pd in t.partitions:
                key = (t.topic_id, pd.partition_index)
                if pd.error_code:
                    tally.errors[("ShareFetch partition", pd.error_code)] += 1
                if key in acks:
                    if pd.acknowledge_error_code:
                        tally.errors[("acknowledgement", pd.acknowledge_error_code)] += 1
                    else:
                        tally.acked += sum(last - f + 1 for f, last in acks.pop(key))
                if not pd.acquired_records:
                    continue
                lo, hi = None, -1
                for h, _ in iter_batches(pd.records, allow_partial=True):
                    lo = h.base_offset if lo is None else lo
                    hi = h.last_offset
                    if tally.latencies is not None:
                        for rec in h.records():
                            tally.latencies.append((recv_ns - int(bytes(rec.value[:20]))) / 1e6)
                ranges = self.pending.setdefault(key, [])
                for ar in pd.acquired_records:
                    if lo is None or ar.first_offset < lo or ar.last_offset > hi:
                        tally.uncovered += 1
                    tally.deliver(pd.partition_index, ar.first_offset, ar.last_offset, ar.delivery_count)
                    ranges.append((ar.first_offset, ar.last_offset))
                    got += ar.last_offset - ar.first_offset + 1
        if acks:  # acks whose partition the answer left out
            tally.errors[("acknowledgement not answered", 0)] += len(acks)
        if not got:
            tally.empty_fetches += 1
        return got

    def final_acknowledge(self) -> tuple[Any, dict]:
        """ShareAcknowledge epoch -1: the last ACCEPTs, and the session is closed."""
        R = SA.request_class()
        acks = {k: v for k, v in self.pending.items() if v}
        body = R(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=-1,
            topics=self._topics(R, set(acks), ack_request=True),
        )
        self.pending = {}
        self.session_epoch, self.session = 0, set()
        return body, acks

    def on_acknowledge(self, resp: Any, acks: dict, tally: Tally) -> None:
        if resp.error_code:
            tally.errors[("ShareAcknowledge", resp.error_code)] += 1
            return
        for t in resp.responses:
            for pd in t.partitions:
                key = (t.topic_id, pd.partition_index)
                if pd.error_code:
                    tally.errors[("ShareAcknowledge partition", pd.error_code)] += 1
                elif key in acks:
                    tally.acked += sum(last - f + 1 for f, last in acks.pop(key))
        if acks:
            tally.errors[("acknowledgement not answered", 0)] += len(acks)


class Group:
    """Members of one share group, heartbeating on one coordinator connection (pipelined)."""

    def __init__(self, port: int, group: str, topic: str, n_members: int) -> None:
        self.port, self.group, self.topic = port, group, topic
        self.members = [Member(group, topic) for _ in range(n_members)]
        self.interval = 0.2
        self.conn: Conn | None = None
        self.task: asyncio.Task | None = None
        self.tally: Tally | None = None
        self.last_change = time.perf_counter()
        self.rounds = 0
        self.stopping = False

    async def _round(self, joining: bool) -> None:
        assert self.conn is not None
        for m in self.members:
            self.conn.send(HB, HB_V, m.heartbeat(joining))
        for m in self.members:
            resp = await self.conn.recv(HB, HB_V)
            if m.on_heartbeat(resp, self.tally):
                self.last_change = time.perf_counter()
            if resp.heartbeat_interval_ms > 0:
                self.interval = resp.heartbeat_interval_ms / 1000
        self.rounds += 1

    async def join(self, partitions: int, timeout: float = 30.0) -> None:
        """Join every member, heartbeat in the background, return once the assignment settled:
        every partition held, every member holding some, no change for three intervals."""
        self.conn = await Conn.open(self.port)
        await self._round(joining=True)
        self.task = asyncio.create_task(self._beat())
        deadline = time.perf_counter() + timeout
        while True:
            held = {k for m in self.members for k in m.assigned}
            if (
                len(held) == partitions
                and all(m.assigned for m in self.members)
                and time.perf_counter() - self.last_change > 3 * self.interval
            ):
                return
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{self.group}: assignment did not settle ({len(held)} of {partitions} held)")
            await asyncio.sleep(0.02)

    async def _beat(self) -> None:
        while not self.stopping:
            await asyncio.sleep(self.interval)
            if not self.stopping:
                await self._round(joining=False)

    async def leave(self) -> None:
        self.stopping = True
        if self.task is not None:
            await self.task
        for m in self.members:
            m.left = True
        if self.conn is not None:
            await self._round(joining=False)
            self.conn.close()


async def member_loop(
    m: Member, port: int, tally: Tally, max_wait_ms: int = FETCH_WAIT_MS, max_bytes: int = 50 * MIB
) -> None:
    """ShareFetch with piggy-backed ACCEPTs until the tally is complete, then the final acks."""
    conn = await Conn.open(port)
    try:
        while not tally.done.is_set():
            body, acks = m.fetch_request(max_wait_ms, max_bytes=max_bytes)
            m.on_fetch(await conn.call(SF, SF_V, body), acks, tally)
            if sum(tally.errors.values()) > 100:
                raise RuntimeError(f"too many errors: {dict(tally.errors)}")
        body, acks = m.final_acknowledge()
        m.on_acknowledge(await conn.call(SA, SA_V, body), acks, tally)
    finally:
        conn.close()


@dataclass
class ShareRun:
    members: int
    partitions: int
    tally: Tally
    deliver_s: float
    ack_s: float
    broker_cpu: float  # share of one core, from the first fetch to "acknowledged"
    client_cpu: float
    starts: list[int]  # persisted start offsets once everything was acknowledged
    hwms: list[int]

    @property
    def ok(self) -> bool:
        t = self.tally
        return (
            t.exactly_once()
            and not t.errors
            and not t.uncovered
            and not t.redelivered
            and t.acked == t.total
            and self.ack_s == self.ack_s  # not nan
        )

    @property
    def stale_starts(self) -> int:
        """Partitions whose persisted start offset is below the high watermark with lag 0."""
        return sum(1 for s, h in zip(self.starts, self.hwms) if s < h)


def share_run(
    b: BrokerProcess,
    topic: str,
    partitions: int,
    n_members: int,
    group: str,
    hwms: list[int],
    max_bytes: int = 50 * MIB,
) -> ShareRun:
    import uvloop

    group_config(b.port, group, share_auto_offset_reset="earliest")
    assert b.proc is not None
    pid = b.proc.pid

    def watch(tally: Tally, t0: float, cpu0: float, pcpu0: float) -> tuple[float, list[int], float, float]:
        """(In a thread.) Once every record was delivered, poll the persisted share state."""
        while not tally.done.is_set():
            time.sleep(0.002)
        if tally.failed:
            return float("nan"), [], float("nan"), float("nan")
        t, starts = wait_acknowledged(b.port, group, hwms)
        return t, starts, cpu_seconds(pid) - cpu0, time.process_time() - pcpu0

    async def main() -> ShareRun:
        g = Group(b.port, group, topic, n_members)
        tally = Tally(dict(enumerate(hwms)))
        g.tally = tally
        await g.join(partitions)
        loop = asyncio.get_running_loop()
        cpu0, pcpu0 = cpu_seconds(pid), time.process_time()
        t0 = time.perf_counter()
        watcher = loop.run_in_executor(None, watch, tally, t0, cpu0, pcpu0)
        try:
            await asyncio.gather(*(member_loop(m, b.port, tally, max_bytes=max_bytes) for m in g.members))
        except BaseException:
            tally.failed = True
            tally.done.set()
            raise
        finally:
            t_acked, starts, cpu, pcpu = await watcher
            await g.leave()
        elapsed = max(tally.t_delivered, t_acked) - t0 if t_acked == t_acked else float("nan")
        return ShareRun(
            n_members,
            partitions,
            tally,
            tally.t_delivered - t0,
            elapsed,
            cpu / elapsed,
            pcpu / elapsed,
            starts,
            hwms,
        )

    return uvloop.run(main())


# -- references: classic Fetch ------------------------------------------------------------------


def classic_fetch_codec(port: int, topic: str, hwms: list[int], partition_max: int = MIB) -> tuple[float, int, int]:
    """One connection, Fetch v12 long polls of every partition (partition_max each), until the
    high watermarks; (seconds, records, log batches)."""
    import uvloop

    R = FETCH.request_class()

    async def main() -> tuple[float, int, int]:
        conn = await Conn.open(port)
        offsets = [0] * len(hwms)
        got = batches = 0
        start = time.perf_counter()
        try:
            while any(o < h for o, h in zip(offsets, hwms)):
                body = R(
                    replica_id=-1,
                    max_wait_ms=FETCH_WAIT_MS,
                    min_bytes=1,
                    max_bytes=50 * MIB,
                    isolation_level=0,
                    topics=[
                        R.FetchTopic(
                            topic=topic,
                            partitions=[
                                R.FetchPartition(partition=i, fetch_offset=o, partition_max_bytes=partition_max)
                                for i, (o, h) in enumerate(zip(offsets, hwms))
                                if o < h
                            ],
                        )
                    ],
                )
                resp = await conn.call(FETCH, FETCH_V, body)
                for pd in resp.responses[0].partitions:
                    assert pd.error_code == 0, pd
                    i = pd.partition_index
                    for h, _ in iter_batches(pd.records, allow_partial=True):
                        if h.last_offset >= offsets[i]:
                            got += h.last_offset + 1 - max(h.base_offset, offsets[i])
                            batches += 1
                            offsets[i] = h.last_offset + 1
        finally:
            conn.close()
        return time.perf_counter() - start, got, batches

    return uvloop.run(main())


def classic_fetch_confluent(bootstrap: str, topic: str, hwms: list[int]) -> tuple[float, int]:
    """librdkafka's Consumer, assigned every partition from offset 0, defaults otherwise."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "classic-ref", "enable.auto.commit": False, **QUIET})
    total = sum(hwms)
    got = 0
    start = time.perf_counter()
    c.assign([TopicPartition(topic, i, 0) for i in range(len(hwms))])
    try:
        while got < total and time.perf_counter() - start < 120:
            for m in c.consume(10000, 1.0):
                if m.error() is None:
                    got += 1
        return time.perf_counter() - start, got
    finally:
        c.close()


# -- reference: librdkafka's ShareConsumer ---------------------------------------------------------


def share_consumer_run(b: BrokerProcess, topic: str, group: str, n_consumers: int, hwm: int) -> dict[str, Any]:
    """n ShareConsumers (implicit acknowledgement) in threads on a one-partition topic. Timed from
    the first record any of them got (their join is not counted), to every offset delivered and to
    the persisted state at the high watermark."""
    from confluent_kafka import ShareConsumer

    group_config(b.port, group, share_auto_offset_reset="earliest")
    counts = bytearray(hwm)
    state = {"delivered": 0, "dups": 0, "redelivered": 0, "errors": 0, "t0": float("nan"), "t_done": float("nan")}
    lock = threading.Lock()
    done = threading.Event()  # every offset delivered
    stop = threading.Event()  # the persisted state reached the high watermark (or we gave up)
    consumers = [
        ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group, **QUIET}) for _ in range(n_consumers)
    ]

    def run(sc: Any) -> None:
        sc.subscribe([topic])
        while not stop.is_set():  # as an application does: polling sends the implicit ACCEPTs
            msgs = sc.poll(0.1)
            if not msgs:
                continue
            offs = []
            errors = redelivered = 0
            for m in msgs:
                if m.error() is not None:
                    errors += 1
                    continue
                offs.append(m.offset())
                if m.delivery_count() != 1:
                    redelivered += 1
            with lock:
                if state["t0"] != state["t0"]:
                    state["t0"] = time.perf_counter()
                state["errors"] += errors
                state["redelivered"] += redelivered
                for o in offs:
                    if counts[o]:
                        state["dups"] += 1
                    else:
                        state["delivered"] += 1
                    counts[o] = min(counts[o] + 1, 255)
                if state["delivered"] >= hwm and not done.is_set():
                    state["t_done"] = time.perf_counter()
                    done.set()

    threads = [threading.Thread(target=run, args=(sc,)) for sc in consumers]
    for t in threads:
        t.start()
    t_acked, starts = float("nan"), []
    try:
        if done.wait(180):
            t_acked, starts = wait_acknowledged(b.port, group, [hwm], timeout=15)
    finally:
        stop.set()
        for t in threads:
            t.join()
        for sc in consumers:
            sc.close()
    state["deliver_s"] = state["t_done"] - state["t0"]
    state["ack_s"] = t_acked - state["t0"]
    state["starts"] = starts
    state["ok"] = counts.count(1) == hwm and not state["errors"] and t_acked == t_acked
    return state


# -- latency ----------------------------------------------------------------------------------


def timed_producer(bootstrap: str, topic: str, count: int, every: float) -> None:
    """One 1 KiB record every `every` s, its value starting with the send time (ns, 20 digits)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1", **QUIET})
    pad = b"x" * (RECORD - 20)
    nxt = time.perf_counter()
    for _ in range(count):
        p.produce(topic, value=b"%020d" % time.time_ns() + pad, partition=0)
        p.poll(0)
        nxt += every
        time.sleep(max(0.0, nxt - time.perf_counter()))
    p.flush(10)


def share_latency(b: BrokerProcess, topic: str, group: str, count: int, skip: int) -> list[float]:
    import uvloop

    group_config(b.port, group, share_auto_offset_reset="earliest")

    async def main() -> list[float]:
        g = Group(b.port, group, topic, 1)
        tally = Tally({0: count + skip})
        tally.latencies = []
        await g.join(1)
        loop = asyncio.get_running_loop()
        try:
            fetching = asyncio.create_task(member_loop(g.members[0], b.port, tally))
            await asyncio.sleep(0.5)  # the member waits in ShareFetch
            await loop.run_in_executor(None, timed_producer, b.bootstrap, topic, count + skip, 0.005)
            await asyncio.wait_for(fetching, 15)
        finally:
            await g.leave()
        assert not tally.errors and tally.exactly_once(), (dict(tally.errors), tally.duplicates)
        return tally.latencies

    lat = uvloop.run(main())
    return lat[skip:]


def classic_latency(b: BrokerProcess, topic: str, count: int, skip: int) -> list[float]:
    """A classic Fetch v12 long poll (MaxWaitMs 500, MinBytes 1) on our codec."""
    import uvloop

    R = FETCH.request_class()

    async def main() -> list[float]:
        conn = await Conn.open(b.port)
        loop = asyncio.get_running_loop()
        out: list[float] = []
        offset = 0

        async def consume() -> None:
            nonlocal offset
            while offset < count + skip:
                body = R(
                    replica_id=-1,
                    max_wait_ms=FETCH_WAIT_MS,
                    min_bytes=1,
                    max_bytes=50 * MIB,
                    isolation_level=0,
                    topics=[
                        R.FetchTopic(
                            topic=topic,
                            partitions=[R.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=MIB)],
                        )
                    ],
                )
                resp = await conn.call(FETCH, FETCH_V, body)
                now = time.time_ns()
                for h, _ in iter_batches(resp.responses[0].partitions[0].records, allow_partial=True):
                    for rec in h.records():
                        if rec.offset >= offset:
                            out.append((now - int(bytes(rec.value[:20]))) / 1e6)
                    offset = max(offset, h.last_offset + 1)

        try:
            fetching = asyncio.create_task(consume())
            await asyncio.sleep(0.5)
            await loop.run_in_executor(None, timed_producer, b.bootstrap, topic, count + skip, 0.005)
            await asyncio.wait_for(fetching, 15)
        finally:
            conn.close()
        return out

    return uvloop.run(main())[skip:]


# -- broker memory --------------------------------------------------------------------------


@dataclass(slots=True)
class _Header:
    """What SharePartition.acquire reads of a log batch header."""

    base_offset: int
    last_offset: int
    is_control: bool = False
    producer_id: int = -1
    is_transactional: bool = False


def in_flight_memory(n: int, per_log_batch: int, every_other_acked: bool, with_state: bool = False) -> float:
    """tracemalloc bytes per in-flight record of a SharePartition holding n records, acquired
    MAX_RECORDS at a time from log batches of `per_log_batch` records; optionally with every
    other record acknowledged (and its write committed) so each range is split per offset.
    `with_state`: also the share coordinator's copy (a ShareStateShard fed every Change, as
    WriteShareGroupState does, records replayed as the coordinator runtime does)."""
    import tracemalloc

    from shoal.broker.share.share_partition import SharePartition
    from shoal.broker.share.state import ShareStateShard
    from shoal.protocol.coordinator_records import CoordinatorRecord, serde

    ser = serde("share")
    tid = uuid.UUID(int=1)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        shard = ShareStateShard(0, now_ms=lambda: 0) if with_state else None

        def persist(records: list) -> None:
            assert shard is not None
            for r in records:
                shard.replay(CoordinatorRecord(ser.record_type(r.name), r.key, r.value, 0), 0)

        if shard is not None:
            records, err = shard.initialize("bench", tid, 0, 1, 0)
            assert not err
            persist(records)
        sp = SharePartition("bench", tid, 0, max_in_flight_records=n, lock_duration_ms=30000)
        sp.initialize(1, 0, [], log_start_offset=0, high_watermark=n)
        for off in range(0, n, MAX_RECORDS):
            end = min(off + MAX_RECORDS, n)
            headers = [_Header(b, min(b + per_log_batch, end) - 1) for b in range(off, end, per_log_batch)]
            ranges = sp.acquire("member-1", headers, MAX_RECORDS, now_ms=0, fetch_offset=off, batch_size=MAX_RECORDS)
            assert ranges and ranges[-1].last_offset == end - 1, (off, ranges)
            if every_other_acked:
                acks = [(o, o, [ACCEPT]) for o in range(off + 1, end, 2)]  # odd offsets: the start stays at 0
                errors, change = sp.acknowledge("member-1", acks, 0)
                assert not any(errors), errors[:3]
                if shard is not None:
                    records, err = shard.write(
                        "bench", tid, 0, 1, 0, change.start_offset, change.batches, change.delivery_complete_count
                    )
                    assert not err
                    persist(records)
                change.commit()
                del change, acks
            del headers, ranges
        assert sp.in_flight_count == n, (sp.in_flight_count, n)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return held / n


def rss_while_holding(port: int, pid: int, topic: str, partitions: int, group: str) -> dict[str, Any]:
    """One member per partition fetches (MaxWaitMs 0) and ACCEPTs only every other record (odd
    offsets), until every partition holds its in-flight limit: the worst case, every range split
    per offset. The broker's anonymous RSS growth is taken over a baseline after every member
    already fetched one record (group, sessions, share partitions and connections exist)."""
    import uvloop

    async def main() -> dict[str, Any]:
        g = Group(port, group, topic, partitions)
        await g.join(partitions)
        tally = Tally({})
        conns = [await Conn.open(port) for _ in g.members]
        held = 0
        try:
            for m, c in zip(g.members, conns):
                body, acks = m.fetch_request(FETCH_WAIT_MS, max_records=1)
                held += m.on_fetch(await c.call(SF, SF_V, body), acks, tally)
                m.pending = {}  # that record stays held
            await asyncio.sleep(0.3)
            base = rss_anon(pid)
            base_held = held

            async def fill(m: Member, c: Conn) -> int:
                got = 0
                while True:
                    body, acks = m.fetch_request(0)
                    n = m.on_fetch(await c.call(SF, SF_V, body), acks, tally)
                    for key, ranges in m.pending.items():
                        m.pending[key] = [(o, o) for f, last in ranges for o in range(f | 1, last + 1, 2)]
                    got += n
                    if not n and not acks:
                        return got

            held += sum(await asyncio.gather(*(fill(m, c) for m, c in zip(g.members, conns))))
            await asyncio.sleep(0.3)
            grown = rss_anon(pid) - base
            errors = dict(tally.errors)
            for m, c in zip(g.members, conns):  # close the sessions: everything held is released
                body, acks = m.final_acknowledge()
                m.on_acknowledge(await c.call(SA, SA_V, body), acks, tally)
        finally:
            for c in conns:
                c.close()
            await g.leave()
        return {"held": held, "added": held - base_held, "acked": tally.acked, "grown": grown, "errors": errors}

    return uvloop.run(main())


def rss_figures(tmp: str, limit: int) -> bool:
    """A fresh broker (so earlier runs' freed memory is not reused), 16 partitions, `limit`
    records in flight per partition."""
    over = [*OVERRIDES, f"group.share.max.partition.max.record.locks={max(limit, 4000)}"]
    b = BrokerProcess(Path(tmp) / "data-rss", over)
    b.start()
    try:
        assert b.proc is not None
        create_topic(b.port, "q-rss", 16)
        produce(b.bootstrap, "q-rss", 16, 16 * (limit + 1000), 64 * 1024)
        group_config(b.port, "g-rss", share_auto_offset_reset="earliest", share_partition_max_record_locks=str(limit))
        r = rss_while_holding(b.port, b.proc.pid, "q-rss", 16, "g-rss")
    finally:
        rc = b.stop()
    per = r["grown"] / max(1, r["added"])
    ok = not r["errors"] and rc == 0
    problems = "" if ok else f"   FAILED: errors {r['errors']}, broker exit code {rc}"
    print(
        f"broker anonymous RSS (fresh broker) while 16 members hold {r['held']:,} records in flight (16 partitions"
        f" at their limit of {limit:,}, every other record ACCEPTed, {r['acked']:,} acks):"
    )
    print(
        f"  +{r['grown'] / MIB:.2f} MiB over {r['added']:,} records added = {per:.0f} bytes/record"
        f" (target <= 200; includes transient response buffers){problems}"
    )
    row("broker RSS/in-flight record (split)", f"{per:.0f} B", f"{r['added']:,} records", "<= 200 B")
    return ok


# -- profile ----------------------------------------------------------------------------------


def start_profile(pid: int, path: str) -> subprocess.Popen:
    spy = Path(sys.executable).with_name("py-spy")
    cmd = [str(spy if spy.exists() else "py-spy"), "record", "--format", "raw", "--nonblocking", "-r", "200"]
    return subprocess.Popen(
        [*cmd, "-o", path, "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def stop_profile(spy: subprocess.Popen) -> str:
    time.sleep(0.3)
    spy.send_signal(signal.SIGINT)
    try:
        _, err = spy.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    return err or ""


def _frame_name(frame: str, line: bool = True) -> str:
    """'func (path/to/file.py:123)' -> 'func (file.py:123)', or 'func (file.py)' without the line."""
    name, _, where = frame.partition(" (")
    if not where:
        return name
    where = Path(where.rstrip(")")).name
    return f"{name} ({where if line else where.rsplit(':', 1)[0]})"


# Frames that only carry every stack of their thread (interpreter start-up, the event loop's
# Python entry, thread bootstrap): left out of the inclusive list.
_WRAPPERS = {
    "<module> (__main__.py)",
    "_run_module_as_main (<frozen runpy>)",
    "_run_code (<frozen runpy>)",
    "main (cli.py)",
    "run (__init__.py)",
    "Runner.run (runners.py)",
    "Thread._bootstrap (threading.py)",
    "Thread._bootstrap_inner (threading.py)",
    "Thread.run (threading.py)",
}


def summarize_profile(path: str, top: int) -> None:
    """Self time per frame (with its line) and inclusive time per function of py-spy's raw
    (collapsed) stacks."""
    self_t: Counter = Counter()
    incl: Counter = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            count = int(n)
            frames = stack.split(";")
            total += count
            self_t[_frame_name(frames[-1])] += count
            for fr in {_frame_name(x, line=False) for x in frames}:
                incl[fr] += count
    if not total:
        print("  (no samples)")
        return
    print(f"  {total} samples of the broker's busy threads; top self time (uvloop's own C code shows as Runner.run):")
    for fr, n in self_t.most_common(top):
        print(f"    {n / total:6.1%}  {fr}")
    print("  top inclusive time per function:")
    for fr, n in [(fr, n) for fr, n in incl.most_common() if fr not in _WRAPPERS][:top]:
        print(f"    {n / total:6.1%}  {fr}")


# -- main -------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller volumes (a smoke run)")
    ap.add_argument("--records", type=int, default=0, help="records per topic (default 200k, 50k with --quick)")
    ap.add_argument("--batch-kib", type=int, default=64, help="producer batch.size in KiB (records per log batch)")
    ap.add_argument("--profile", metavar="FILE", help="profile an extra 4-member run with py-spy (raw stacks to FILE)")
    args = ap.parse_args()
    quick = args.quick
    per_batch = max(1, args.batch_kib * 1024 // (RECORD + 70))  # measured below
    n = args.records or (50_000 if quick else 200_000)
    lat_count = 300 if quick else 1000
    ok = True

    with tempfile.TemporaryDirectory(prefix="shoal-bench-share-fetch-") as tmp:
        b = BrokerProcess(Path(tmp) / "data", OVERRIDES)
        b.start()
        try:
            assert b.proc is not None
            pid = b.proc.pid
            # Latency first, on an idle broker.
            for t in ("lat-share", "lat-classic"):
                create_topic(b.port, t, 1)
            skip = 20  # the first records also measure connection and session set-up
            s_med, s_p99 = quantiles(share_latency(b, "lat-share", "g-lat", lat_count, skip))
            c_med, c_p99 = quantiles(classic_latency(b, "lat-classic", lat_count, skip))
            print(f"produce-to-delivery latency, one 1 KiB record every 5 ms, {lat_count} records, MaxWaitMs 500:")
            print(f"  ShareFetch (1 member):  median {s_med:6.2f} ms   p99 {s_p99:6.2f} ms   (target: p99 <= 10 ms)")
            print(f"  classic Fetch long poll: median {c_med:6.2f} ms   p99 {c_p99:6.2f} ms")
            row("latency median", f"{s_med:.2f} ms", f"{c_med:.2f} ms classic Fetch")
            row("latency p99", f"{s_p99:.2f} ms", f"{c_p99:.2f} ms classic Fetch", "<= 10 ms")
            print()

            create_topic(b.port, "q1", 1)
            create_topic(b.port, "q16", 16)
            batch = args.batch_kib * 1024
            prod1 = produce(b.bootstrap, "q1", 1, n, batch)
            prod16 = produce(b.bootstrap, "q16", 16, n, batch)
            hwm1 = high_watermarks(b.port, "q1", 1)
            hwm16 = high_watermarks(b.port, "q16", 16)
            assert sum(hwm1) == n and sum(hwm16) == n, (hwm1, hwm16)
            print(
                f"{n:,} records of 1 KiB produced to q1 (1 partition) in {prod1:.1f} s and to q16 (16 partitions)"
                f" in {prod16:.1f} s; producer batch.size {args.batch_kib} KiB"
            )

            ref_s, ref_n, n_batches = classic_fetch_codec(b.port, "q1", hwm1)
            per_batch = round(n / n_batches)
            print(f"  {n_batches:,} log batches in q1: {per_batch} records per batch")
            assert ref_n == n, (ref_n, n)
            ref_rate = n / ref_s
            rk_s, rk_n = classic_fetch_confluent(b.bootstrap, "q1", hwm1)
            assert rk_n == n, (rk_n, n)
            rk_rate = n / rk_s
            ref16_s, ref16_n, _ = classic_fetch_codec(b.port, "q16", hwm16)
            assert ref16_n == n, (ref16_n, n)
            ref16_rate = n / ref16_s

            print(
                f"share groups, codec members (ShareFetch v1, MaxRecords 500, ACCEPT piggy-backed); {n:,} records each:"
            )
            print(
                f"  {'members x partitions':<21} {'delivered/s':>12} {'acked/s':>10} {'fetches':>8} {'empty':>6}"
                f" {'broker CPU':>10} {'client CPU':>10}  checks"
            )
            runs: list[tuple[str, ShareRun, bool]] = []  # (label, run, the target applies)
            scenarios = [(1, "q1", 1, hwm1, 50), (4, "q1", 1, hwm1, 50), (16, "q1", 1, hwm1, 50),
                         (16, "q16", 16, hwm16, 50), (4, "q1", 1, hwm1, 1)]  # fmt: skip
            for members, topic, parts, hwms, max_mib in scenarios:
                label = f"{members:>2} x {parts:<2}" + ("" if max_mib == 50 else f" MaxBytes {max_mib} MiB")
                r = share_run(b, topic, parts, members, f"g-{members}x{parts}-{max_mib}", hwms, max_mib * MIB)
                runs.append((label, r, (members, parts, max_mib) == (4, 1, 50)))
                t = r.tally
                checks = "exactly once, acks ok" if r.ok else (
                    f"FAILED: delivered {t.delivered}/{t.total} dup {t.duplicates} redelivered {t.redelivered}"
                    f" acked {t.acked} uncovered {t.uncovered} errors {dict(t.errors)} ack_s {r.ack_s}"
                )  # fmt: skip
                if r.stale_starts:
                    checks += f"; persisted start offset < high watermark on {r.stale_starts} partition(s)"
                ok &= r.ok
                print(
                    f"  {label:<21} {n / r.deliver_s:12,.0f} {n / r.ack_s:10,.0f}"
                    f" {t.fetches:8} {t.empty_fetches:6} {r.broker_cpu:10.0%} {r.client_cpu:10.0%}  {checks}"
                )
            print(
                f"  classic Fetch, codec, 1 connection, 1 MiB/partition:  1 partition {ref_rate:10,.0f} /s"
                f"   16 partitions {ref16_rate:10,.0f} /s"
            )
            print(f"  classic Fetch, librdkafka Consumer, 1 partition:     {rk_rate:10,.0f} /s")
            print(
                "  (the MaxBytes 1 MiB line is a diagnostic: librdkafka asks for 50 MiB; the gap is what the"
                " broker spends on log data it reads but does not hand out)"
            )
            for label, r, targeted in runs:
                ref = ref_rate if r.partitions == 1 else ref16_rate
                target = ">= 100,000 /s" if targeted else ""
                row(
                    f"acked/s {label.strip()} (members x partitions)",
                    f"{n / r.ack_s:,.0f} /s",
                    f"{ref:,.0f} /s classic Fetch",
                    target,
                )

            sc_rows = []
            for consumers in (1, 4):
                s = share_consumer_run(b, "q1", f"g-rdk-{consumers}", consumers, hwm1[0])
                ok &= s["ok"]
                sc_rows.append((consumers, s))
                print(
                    f"  librdkafka ShareConsumer x{consumers} (implicit ack), 1 partition: delivered"
                    f" {n / s['deliver_s']:10,.0f} /s, acked {n / s['ack_s']:10,.0f} /s"
                    f"   (duplicates {s['dups']}, redelivered {s['redelivered']}, errors {s['errors']};"
                    f" persisted start offset {s['starts']} of {hwm1[0]})"
                )
                row(
                    f"acked/s librdkafka ShareConsumer x{consumers}",
                    f"{n / s['ack_s']:,.0f} /s",
                    f"{rk_rate:,.0f} /s librdkafka Consumer",
                )

            if args.profile:
                spy = start_profile(pid, args.profile)
                time.sleep(1.0)
                r = share_run(b, "q1", 1, 4, "g-profiled", hwm1)
                ok &= r.ok
                err = stop_profile(spy)
                print()
                print(
                    f"py-spy on the broker during the 4-member run (acked {n / r.ack_s:,.0f} /s while sampled,"
                    f" {'ok' if r.ok else 'FAILED'}), raw stacks in {args.profile}:"
                )
                if Path(args.profile).exists():
                    summarize_profile(args.profile, 15)
                else:
                    print(f"  py-spy wrote nothing: {err.strip()[-500:]}")
        finally:
            rc = b.stop()
            log = b.log_text()
    bad = [ln for ln in log.splitlines() if " ERROR " in ln or "Traceback" in ln or " WARNING " in ln]
    print()
    print(f"broker exit code {rc}; {len(bad)} ERROR/WARNING/Traceback lines in its log")
    for ln in bad[:10]:
        print(f"  {ln[:200]}")

    print()
    with tempfile.TemporaryDirectory(prefix="shoal-bench-share-rss-") as tmp:
        ok &= rss_figures(tmp, 2000 if quick else 10_000)

    print()
    sizes = [2_000, 10_000] if quick else [2_000, 10_000, 100_000]
    state_up_to = 10_000  # the shard merges every write into its whole state: slow to feed 100k
    print(
        f"SharePartition memory per in-flight record (tracemalloc; acquired {MAX_RECORDS} at a time"
        f" from log batches of {per_batch} records; 10,000 is the highest share.partition.max.record.locks):"
    )
    print(f"  {'in flight':>9}  {'acquired':>9}  {'every other acked (split)':>26}  {'split + coordinator state':>26}")
    for size in sizes:
        whole = in_flight_memory(size, per_batch, False)
        split = in_flight_memory(size, per_batch, True)
        state = in_flight_memory(size, per_batch, True, with_state=True) if size <= state_up_to else float("nan")
        print(f"  {size:>9,}  {whole:7.1f} B  {split:24.1f} B  {state:24.1f} B")
        if size == state_up_to:
            row(
                f"memory/in-flight record, split ({size:,})",
                f"{state:.1f} B",
                "+ ShareStateShard (coordinator)",
                "<= 200 B",
            )
        if size == sizes[-1]:
            row(f"memory/in-flight record, acquired ({size:,})", f"{whole:.1f} B", "SharePartition", "<= 200 B")
            row(f"memory/in-flight record, split ({size:,})", f"{split:.1f} B", "SharePartition", "<= 200 B")

    print()
    w = max(len(r[0]) for r in ROWS)
    print(f"{'figure':<{w}}  {'ours':>22}  {'reference':<34} target")
    for label, ours, ref, target in ROWS:
        print(f"{label:<{w}}  {ours:>22}  {ref:<34} {target}")
    if not ok:
        print("FAILED: a run lost, duplicated or redelivered records, or an acknowledgement failed (see above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
