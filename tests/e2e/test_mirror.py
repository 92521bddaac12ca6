"""``shoal mirror`` between two real Shoal brokers (issue 23).

The scenario: 100k records over 3 topics on the source, a classic group halfway through one
topic, a share group with some records accepted and some in flight (its consumer stays alive,
holding them, while the mirror runs), a target topic that already holds foreign records (so
target offsets are not source offsets). The mirror runs as a subprocess and is killed with
kill -9 twice mid-copy, then run to the end. Afterwards the target's records are compared
with the source's byte for byte and in order, the classic group resumes on the target exactly
after its commit, and the share group delivers on the target exactly the records the source had
not accepted. Then the refusals: an unreachable target, a target topic with fewer partitions,
a share group with members on the target -- each a clear error with nothing written -- and a
``--follow`` run stopped by SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import pytest

from shoal.client import AsyncAdmin, AsyncConsumer, AsyncProducer, AsyncShareConsumer
from shoal.client.admin.types import AlterConfigOp, ConfigResource, NewTopic, OffsetSpec, SharePartitionOffsetInfo
from shoal.client.cli.mirror import SHAPE
from shoal.client.cli.shapes import validate
from shoal.client.core.cluster import TopicPartition
from shoal.client.mirror import CHECKPOINT_TOPIC
from shoal.client.share.consumer import AcknowledgeType
from tests.support.brokers import ROOT, BrokerProcess

FAST = (
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.share.min.heartbeat.interval.ms=200",
    "group.share.heartbeat.interval.ms=200",
    "group.share.assignment.interval.ms=0",
    "group.share.min.record.lock.duration.ms=1000",
)
TOPICS = {"mt0": 2, "mt1": 1, "mt2": 3}
TOTAL = 100_000
FOREIGN = 5  # records already on the target's mt0-0 before the mirror
BASE_TS = 1_600_000_000_000


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    d = tmp_path_factory.mktemp("mirror")
    a = BrokerProcess(d / "source", FAST).start()
    b = BrokerProcess(d / "target", FAST).start()
    yield a, b
    a.stop()
    b.stop()


def record(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]:
    key = None if i % 7 == 0 else b"k%d" % i
    value = None if i % 11 == 0 else (b"v%d-" % i) * (1 + i % 5)
    headers: list[tuple[str, bytes | None]] = [("i", b"%d" % i), ("empty", None)] if i % 3 == 0 else []
    return key, value, headers, BASE_TS + i


def mirror_args(a: BrokerProcess, b: BrokerProcess, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "shoal.client.cli",
        "mirror",
        "--source-bootstrap",
        a.bootstrap,
        "--target-bootstrap",
        b.bootstrap,
        *extra,
    ]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    return e


async def start_mirror(a, b, *extra: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *mirror_args(a, b, *extra), cwd=ROOT, env=env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def finish(proc: asyncio.subprocess.Process, timeout: float = 120) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode(), err.decode()


async def ends(admin: AsyncAdmin, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """End offsets; 0 for a partition the target does not have yet."""
    got = await admin.list_offsets(dict.fromkeys(tps, OffsetSpec.LATEST))
    return {tp: getattr(r, "offset", 0) for tp, r in got.items()}


async def read_all(bootstrap: str, tp: TopicPartition, start: int = 0) -> list[tuple]:
    return (await read_many(bootstrap, {tp: start}))[tp]


async def read_many(bootstrap: str, starts: dict[TopicPartition, int]) -> dict[TopicPartition, list[tuple]]:
    """Every record of each partition from its start offset, with one consumer."""
    async with AsyncConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=50000) as c:
        c.assign(list(starts))
        end = await c.end_offsets(list(starts))
        for tp, start in starts.items():
            c.seek(tp, start)
        out: dict[TopicPartition, list[tuple]] = {tp: [] for tp in starts}
        while any([await c.position(tp) < end[tp] for tp in starts]):
            for tp, recs in (await c.getmany(timeout_ms=1000)).items():
                out[tp] += [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in recs]
        return out


def content(rows: list[tuple]) -> list[tuple]:
    return [row[1:] for row in rows]


async def test_mirror_moves_records_groups_and_share_groups_through_two_kills(brokers) -> None:
    a, b = brokers
    tps = [TopicPartition(t, p) for t, n in TOPICS.items() for p in range(n)]
    async with AsyncAdmin(bootstrap_servers=a.bootstrap) as src, AsyncAdmin(bootstrap_servers=b.bootstrap) as tgt:
        configs = {"mt1": {"retention.ms": "86400000"}, "mt2": {"message.timestamp.type": "CreateTime"}}
        assert not any(
            (await src.create_topics([NewTopic(t, n, configs=configs.get(t, {})) for t, n in TOPICS.items()])).values()
        )
        assert not any((await tgt.create_topics([NewTopic("mt0", 2)])).values())
        async with AsyncProducer(bootstrap_servers=b.bootstrap) as p:
            for i in range(FOREIGN):
                await p.send("mt0", b"foreign%d" % i, partition=0)
        async with AsyncProducer(bootstrap_servers=a.bootstrap, linger_ms=10, batch_size=256 * 1024) as p:
            names = list(TOPICS)
            for i in range(TOTAL):
                key, value, headers, ts = record(i)
                t = names[i % 3]
                await p.send(t, value, key=key, partition=(i // 3) % TOPICS[t], timestamp_ms=ts, headers=headers)
            await p.flush()

        # a classic group halfway through mt0
        half = TOTAL // 3 // 2
        async with AsyncConsumer(
            bootstrap_servers=a.bootstrap, group_id="cg", enable_auto_commit=False, auto_offset_reset="earliest"
        ) as c:
            c.subscribe(["mt0"])
            got = 0
            while got < half:
                got += sum(len(r) for r in (await c.getmany(timeout_ms=1000, max_records=1000)).values())
            await c.commit()
        committed = {tp: om.offset for tp, om in (await src.list_consumer_group_offsets("cg")).items()}  # type: ignore[union-attr]
        assert sum(committed.values()) == got and 0 < got < TOTAL // 3

        # a share group on mt1: some accepted, some in flight (held by a live member during the mirror)
        res = ConfigResource.group("sg")
        ops = [
            AlterConfigOp.set("share.auto.offset.reset", "earliest"),
            AlterConfigOp.set("share.record.lock.duration.ms", "45000"),
        ]
        assert (await src.incremental_alter_configs({res: ops}))[res] is None
        sc = AsyncShareConsumer(
            bootstrap_servers=a.bootstrap, group_id="sg", share_acknowledgement_mode="explicit", max_poll_records=500
        )
        await sc.start()
        sc.subscribe(["mt1"])
        accepted: list[int] = []
        while len(accepted) < 1500:
            for r in await sc.poll(500):
                sc.acknowledge(r, AcknowledgeType.ACCEPT)
                accepted.append(r.offset)
            await sc.commit_sync()
        in_flight: list[int] = []
        while not in_flight:
            in_flight = [r.offset for r in await sc.poll(500)]
        assert sorted(accepted) == list(range(len(accepted)))
        assert min(in_flight) == len(accepted)
        starts = await src.list_share_group_offsets("sg")
        info = starts[TopicPartition("mt1", 0)]
        assert isinstance(info, SharePartitionOffsetInfo) and info.start_offset == len(accepted)

        proc = None
        try:
            selection = ("--topics", "mt[0-2]", "--groups", "cg", "--share-groups", "sg")
            # run 1: checkpoints every 200 ms, killed mid-copy
            proc = await start_mirror(a, b, *selection, "--checkpoint-interval-ms", "200")
            copied = 0
            while copied < 15_000:
                assert proc.returncode is None, (await finish(proc))[2]
                await asyncio.sleep(0.05)
                copied = sum((await ends(tgt, tps)).values()) - FOREIGN
            proc.kill()
            await proc.wait()
            t1 = sum((await ends(tgt, tps)).values()) - FOREIGN
            assert t1 < TOTAL, "the copy finished before the kill"
            # run 2: no checkpoint after the restart's own, killed again: everything it copies is past it
            proc = await start_mirror(a, b, *selection, "--checkpoint-interval-ms", "600000")
            copied = t1
            while copied < t1 + 20_000:
                assert proc.returncode is None, (await finish(proc))[2]
                await asyncio.sleep(0.05)
                copied = sum((await ends(tgt, tps)).values()) - FOREIGN
            proc.kill()
            await proc.wait()
            t2 = sum((await ends(tgt, tps)).values()) - FOREIGN
            assert t1 < t2 < TOTAL, "the copy finished before the second kill"
            # run 3: to the end
            rc, out, err = await finish(await start_mirror(a, b, *selection, "--output", "json"))
            assert rc == 0, err
            summary = json.loads(out)
            assert validate(summary, SHAPE) == []
            assert summary["reconciled_after_restart"] == t2 - t1  # the target's tail was matched, not copied again
            assert summary["records"] == TOTAL - t2
        finally:
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
            await sc.close()

        # records: byte-exact, in order, no duplicates
        source_rows = await read_many(a.bootstrap, dict.fromkeys(tps, 0))
        target_rows = await read_many(b.bootstrap, {tp: FOREIGN if tp == TopicPartition("mt0", 0) else 0 for tp in tps})
        assert sum(len(rows) for rows in source_rows.values()) == TOTAL
        for tp in tps:
            assert content(target_rows[tp]) == content(source_rows[tp]), tp
        cfg = (await tgt.describe_configs([ConfigResource.topic("mt1")]))[ConfigResource.topic("mt1")]
        assert cfg["retention.ms"].value == "86400000"  # type: ignore[index]
        assert summary["topics"] == {"created": [], "existing": ["mt0", "mt1", "mt2"]}  # run 1 created them
        checkpoints = await ends(tgt, [TopicPartition(CHECKPOINT_TOPIC, 0)])
        assert checkpoints[TopicPartition(CHECKPOINT_TOPIC, 0)] > 0

        # the classic group resumes on the target exactly after its commit
        target_committed = await tgt.list_consumer_group_offsets("cg")
        for tp, off in committed.items():
            shift = FOREIGN if tp.partition == 0 else 0
            assert target_committed[tp].offset == off + shift  # type: ignore[union-attr]
        async with AsyncConsumer(bootstrap_servers=b.bootstrap, group_id="cg", enable_auto_commit=False) as c:
            c.subscribe(["mt0"])
            resumed: dict[int, list[tuple]] = {0: [], 1: []}
            mt0 = {p: source_rows[TopicPartition("mt0", p)] for p in range(2)}
            want = {p: len(mt0[p]) - committed[TopicPartition("mt0", p)] for p in range(2)}
            deadline = time.monotonic() + 30
            while any(len(resumed[p]) < want[p] for p in range(2)) and time.monotonic() < deadline:
                for tp, recs in (await c.getmany(timeout_ms=500)).items():
                    resumed[tp.partition] += [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in recs]
            for p in range(2):
                assert content(resumed[p]) == content(mt0[p][committed[TopicPartition("mt0", p)] :]), p

        # the share group delivers on the target every record not accepted at the source, and none accepted
        res_cfg = (await tgt.describe_configs([res]))[res]
        assert res_cfg["share.record.lock.duration.ms"].value == "45000"  # type: ignore[index]
        source_mt1 = source_rows[TopicPartition("mt1", 0)]
        expected = content(source_mt1[len(accepted) :])
        delivered: list[tuple] = []
        async with AsyncShareConsumer(bootstrap_servers=b.bootstrap, group_id="sg") as tc:
            tc.subscribe(["mt1"])
            deadline = time.monotonic() + 40
            quiet_until = None
            while time.monotonic() < deadline:
                got = await tc.poll(300)
                delivered += [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in got]
                if len(delivered) >= len(expected):
                    quiet_until = quiet_until or time.monotonic() + 1.5  # anything more would be a duplicate
                    if time.monotonic() > quiet_until:
                        break
        delivered.sort()
        assert content(delivered) == expected
        assert summary["share_groups"]["sg"]["written"] == {"mt1-0": len(accepted)}


async def test_an_unreachable_target_is_a_clear_error(brokers) -> None:
    a, _ = brokers
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "shoal.client.cli", "mirror", "--source-bootstrap", a.bootstrap,
        "--target-bootstrap", "127.0.0.1:1", "--target-property", "default.api.timeout.ms=1500",
        cwd=ROOT, env=env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    rc, _, err = await finish(proc, 60)
    assert rc == 1
    assert "the target cluster at 127.0.0.1:1 is unreachable" in err


async def test_a_target_topic_with_fewer_partitions_stops_the_run_before_any_write(brokers) -> None:
    a, b = brokers
    async with AsyncAdmin(bootstrap_servers=a.bootstrap) as src, AsyncAdmin(bootstrap_servers=b.bootstrap) as tgt:
        await src.create_topics([NewTopic("few", 2), NewTopic("few-other", 1)])
        await tgt.create_topics([NewTopic("few", 1)])
        async with AsyncProducer(bootstrap_servers=a.bootstrap) as p:
            await p.send_and_wait("few-other", b"x")
        before = set(await tgt.list_topics(include_internal=True))
        rc, _, err = await finish(await start_mirror(a, b, "--topics", "few.*"))
        assert rc == 1
        assert "target topic 'few' has 1 partitions, fewer than the source's 2" in err
        assert set(await tgt.list_topics(include_internal=True)) == before  # neither few-other nor checkpoints


async def test_a_share_group_with_members_on_the_target_stops_the_run_before_any_write(brokers) -> None:
    a, b = brokers
    async with AsyncAdmin(bootstrap_servers=a.bootstrap) as src, AsyncAdmin(bootstrap_servers=b.bootstrap) as tgt:
        await src.create_topics([NewTopic("busy-t", 1)])
        await tgt.create_topics([NewTopic("busy-elsewhere", 1)])
        assert (await src.alter_share_group_offsets("busy", {TopicPartition("busy-t", 0): 0}))[
            TopicPartition("busy-t", 0)
        ] is None
        before = set(await tgt.list_topics(include_internal=True))
        async with AsyncShareConsumer(bootstrap_servers=b.bootstrap, group_id="busy") as member:
            member.subscribe(["busy-elsewhere"])
            await member.poll(1000)
            rc, _, err = await finish(await start_mirror(a, b, "--topics", "busy-t", "--share-groups", "busy"))
        assert rc == 1
        assert "share group 'busy' has 1 member(s) on the target" in err
        assert set(await tgt.list_topics(include_internal=True)) == before


async def test_follow_keeps_copying_and_stops_cleanly_on_sigterm(brokers) -> None:
    a, b = brokers
    tp = TopicPartition("fol", 0)
    async with AsyncAdmin(bootstrap_servers=a.bootstrap) as src, AsyncAdmin(bootstrap_servers=b.bootstrap) as tgt:
        await src.create_topics([NewTopic("fol", 1)])
        async with AsyncProducer(bootstrap_servers=a.bootstrap) as p:
            for i in range(1000):
                await p.send("fol", b"f%d" % i)
            await p.flush()
            proc = await start_mirror(
                a, b, "--topics", "fol", "--groups", "", "--share-groups", "", "--follow", "--output", "json"
            )
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (await ends(tgt, [tp]))[tp] < 1000:
                await asyncio.sleep(0.1)
            for i in range(1000, 1500):
                await p.send("fol", b"f%d" % i)
            await p.flush()
        while time.monotonic() < deadline and (await ends(tgt, [tp]))[tp] < 1500:
            await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        rc, out, err = await finish(proc, 30)
        assert rc == 0, err
        assert json.loads(out)["records"] == 1500
        assert content(await read_all(b.bootstrap, tp)) == content(await read_all(a.bootstrap, tp))


async def test_the_targets_authorization_errors_stop_the_run_before_any_write(brokers, tmp_path) -> None:
    a, _ = brokers
    standard = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    with BrokerProcess(tmp_path / "locked", (*FAST, standard)) as locked:  # no ACLs: ANONYMOUS may do nothing
        async with AsyncAdmin(bootstrap_servers=a.bootstrap) as src:
            await src.create_topics([NewTopic("authz-t", 1)])
        rc, _, err = await finish(
            await start_mirror(a, locked, "--topics", "authz-t", "--groups", "", "--share-groups", "")
        )
        assert rc == 1
        assert "the target refused to create topic 'authz-t'" in err
        assert "AUTHORIZATION_FAILED" in err
        written = [p.name for p in (tmp_path / "locked").iterdir() if p.name.startswith(("authz-t", CHECKPOINT_TOPIC))]
        assert written == []  # neither the topic nor the checkpoints reached the target's data directory
        table = tmp_path / "locked" / "topics.json"
        assert not table.exists() or "authz-t" not in table.read_text()
