"""Broker memory per in-flight share-group record, as share_fetch.py reports it.

Not a benchmark itself: split out of benchmarks/share_fetch.py to keep each
module under the project's 800-line rule. ``in_flight_memory`` measures a
SharePartition (and optionally the share coordinator's copy of its state) in
process with tracemalloc; ``rss_figures`` starts a fresh broker and measures its
anonymous RSS growth while share-group members (share_members.py) hold every
partition at its in-flight limit, every other record acknowledged.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from share_common import (  # noqa: E402
    FETCH_WAIT_MS,
    MAX_RECORDS,
    MIB,
    OVERRIDES,
    SA,
    SA_V,
    SF,
    SF_V,
    create_topic,
    group_config,
    produce,
    row,
    rss_anon,
)
from share_members import Conn, Group, Member, Tally  # noqa: E402

from shoal.protocol.constants import ACCEPT  # noqa: E402
from tests.support.brokers import BrokerProcess  # noqa: E402

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
    from shoal.broker.share_coordinator.shard import ShareStateShard
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
