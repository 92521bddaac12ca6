"""Share-group members driven with our codec, as librdkafka's ShareConsumer drives them.

Not a benchmark itself: the client side of benchmarks/share_fetch.py (its
docstring describes the exact request sequence), split out to keep each module
under the project's 800-line rule. ``Conn`` is one pipelined connection,
``Member`` one share consumer (heartbeat and share-session state, ShareFetch
with piggy-backed ACCEPTs, the final ShareAcknowledge), ``Group`` the members
of one group heartbeating on a coordinator connection, ``Tally`` what they saw
(exactly-once bookkeeping), and ``share_run`` one timed run against a broker.
share_references.py and share_memory.py drive the same members.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from share_common import (  # noqa: E402
    FETCH_WAIT_MS,
    HB,
    HB_V,
    MAX_RECORDS,
    MIB,
    SA,
    SA_V,
    SF,
    SF_V,
    cpu_seconds,
    group_config,
    wait_acknowledged,
)

from shoal.protocol.constants import ACCEPT  # noqa: E402
from shoal.protocol.frames import decode_response, encode_request  # noqa: E402
from shoal.protocol.records import iter_batches  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402

_I32 = struct.Struct(">i")


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
    **configs: str,
) -> ShareRun:
    import uvloop

    group_config(b.port, group, share_auto_offset_reset="earliest", **configs)
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
