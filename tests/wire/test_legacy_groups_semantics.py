"""What the group versions Kafka 4 removed (KIP-896) meant in Kafka 3.9, over a real socket.

- OffsetCommit v0 names no member: Kafka 3.9 wrote it to ZooKeeper without looking at the
  group, so it is taken even while the group has live members (where a v1+ commit without a
  member is refused). Shoal keeps it in __consumer_offsets: it survives a restart, and every
  OffsetFetch version reads it. OffsetFetch v0 answers an empty metadata string, as ZooKeeper
  kept none.
- OffsetCommit v1 has generation checks and a commit time per partition; retention counts from
  that time for a group that only stores offsets (-1: the broker's clock).
- JoinGroup v0 has no rebalance timeout: the session timeout is the time the coordinator waits
  for known members to rejoin; v1 sends its own.
"""

from __future__ import annotations

import threading
import time

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import RawClient
from tests.support.wire import create

OC = api_by_name("OffsetCommit").request_class()
OF = api_by_name("OffsetFetch").request_class()
JG = api_by_name("JoinGroup").request_class()
SG = api_by_name("SyncGroup").request_class()
PROTOCOLS = [JG.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")]


def _until(cond, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def commit(c: RawClient, version: int, gid: str, topic: str, offset: int, **fields) -> int:
    stamp = fields.pop("commit_timestamp", -1)
    part = OC.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_metadata="meta", commit_timestamp=stamp
    )
    resp = c.call(
        "OffsetCommit",
        version,
        group_id=gid,
        topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[part])],
        **fields,
    )
    return resp.topics[0].partitions[0].error_code


def fetched(c: RawClient, version: int, gid: str, topic: str) -> tuple[int, str | None, int]:
    resp = c.call(
        "OffsetFetch", version, group_id=gid, topics=[OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]
    )
    p = resp.topics[0].partitions[0]
    return p.committed_offset, p.metadata, p.error_code


def join(c: RawClient, gid: str, version: int = 0, session_ms: int = 6000, rebalance_ms: int = -1):
    """A JoinGroup of `version` without a member id (v0 and v1 join at once: MEMBER_ID_REQUIRED is v4+)."""
    fields = dict(group_id=gid, session_timeout_ms=session_ms, member_id="", protocol_type="consumer")
    if version >= 1:
        fields["rebalance_timeout_ms"] = rebalance_ms
    return c.call("JoinGroup", version, protocols=PROTOCOLS, **fields)


def stable(c: RawClient, gid: str, version: int = 0, session_ms: int = 6000, rebalance_ms: int = -1) -> tuple[str, int]:
    """One member, joined (JoinGroup `version`) and synced with SyncGroup v0."""
    j = join(c, gid, version, session_ms, rebalance_ms)
    assert j.error_code == 0 and j.leader == j.member_id
    s = c.call(
        "SyncGroup",
        0,
        group_id=gid,
        generation_id=j.generation_id,
        member_id=j.member_id,
        assignments=[SG.SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"a")],
    )
    assert s.error_code == 0 and s.assignment == b"a"
    return j.member_id, j.generation_id


@pytest.fixture
def broker(broker_factory):
    b = broker_factory("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000")
    b.start()
    return b


def test_v0_commit_needs_no_member_and_lasts(broker, topic_name) -> None:
    with RawClient(broker.port) as c:
        create(c, topic_name)
        _until(lambda: c.call("FindCoordinator", 0, key="live").error_code == 0)
        _until(lambda: commit(c, 0, "warm-up", topic_name, 0) == 0)
        member, gen = stable(c, "live")
        # v1+ without a member: refused while the group has members (Kafka's rule since 0.9)
        assert commit(c, 2, "live", topic_name, 9, generation_id_or_member_epoch=-1, member_id="") == (
            ErrorCode.UNKNOWN_MEMBER_ID
        )
        assert commit(c, 1, "live", topic_name, 9, generation_id_or_member_epoch=gen + 1, member_id=member) == (
            ErrorCode.ILLEGAL_GENERATION
        )
        # v0: taken whatever the group's state, no generation asked
        assert commit(c, 0, "live", topic_name, 11) == 0
        assert fetched(c, 1, "live", topic_name) == (11, "meta", 0)
        assert fetched(c, 0, "live", topic_name) == (11, "", 0)  # no metadata in v0, as ZooKeeper had none
        hb = c.call("Heartbeat", 0, group_id="live", generation_id=gen, member_id=member)
        assert hb.error_code == 0  # the v0 commit left the group as it was
        assert commit(c, 1, "live", topic_name, 12, generation_id_or_member_epoch=gen, member_id=member) == 0
        assert fetched(c, 0, "live", topic_name) == (12, "", 0)
        assert commit(c, 0, "live", topic_name, 13) == 0
    broker.kill()
    broker.start()
    with RawClient(broker.port) as c:
        _until(lambda: fetched(c, 0, "live", topic_name)[2] == 0)
        assert fetched(c, 0, "live", topic_name) == (13, "", 0)
        r = c.call("OffsetFetch", 8, groups=[OF.OffsetFetchRequestGroup(group_id="live", topics=None)])
        assert [(t.name, p.committed_offset) for t in r.groups[0].topics for p in t.partitions] == [(topic_name, 13)]


def test_v0_fetch_of_unknown_partitions_and_a_loading_group(broker, topic_name) -> None:
    with RawClient(broker.port) as c:
        create(c, topic_name)
        _until(lambda: c.call("FindCoordinator", 0, key="nobody").error_code == 0)
        _until(lambda: fetched(c, 0, "nobody", topic_name)[2] == 0)
        assert fetched(c, 0, "nobody", topic_name) == (-1, "", 0)
        assert fetched(c, 0, "nobody", "no-such-topic") == (-1, "", 0)  # as Kafka's v0: no offset, no error


def test_v1_commit_time_starts_retention(broker_factory, topic_name) -> None:
    b = broker_factory("offsets.retention.minutes=1", "offsets.retention.check.interval.ms=100")
    b.start()
    with RawClient(b.port) as c:
        create(c, topic_name)
        _until(lambda: c.call("FindCoordinator", 0, key="old").error_code == 0)
        _until(lambda: commit(c, 0, "warm-up", topic_name, 0) == 0)
        two_minutes_ago = int(time.time() * 1000) - 120_000
        plain = dict(generation_id_or_member_epoch=-1, member_id="")
        assert commit(c, 1, "old", topic_name, 5, commit_timestamp=two_minutes_ago, **plain) == 0
        assert commit(c, 1, "new", topic_name, 6, commit_timestamp=-1, **plain) == 0
        # the check runs every 100 ms: the commit dated two minutes back is past the one-minute retention
        _until(lambda: fetched(c, 1, "old", topic_name)[0] == -1, timeout=10)
        time.sleep(0.5)
        assert fetched(c, 1, "new", topic_name) == (6, "meta", 0)


def _rebalance_seconds(port: int, gid: str, version: int, session_ms: int, rebalance_ms: int) -> float:
    """A stable member that keeps heartbeating but never rejoins; how long a second member's join
    waits for it (the rebalance timeout, after which the coordinator drops it)."""
    with RawClient(port) as a, RawClient(port) as b:
        _until(lambda: a.call("FindCoordinator", 0, key=gid).error_code == 0)
        first, gen = stable(a, gid, version, session_ms, rebalance_ms)
        stop = threading.Event()

        def heartbeat() -> None:
            while not stop.is_set():
                a.call("Heartbeat", 0, group_id=gid, generation_id=gen, member_id=first)
                stop.wait(0.3)

        t = threading.Thread(target=heartbeat)
        t.start()
        try:
            started = time.monotonic()
            j = join(b, gid, version, session_ms, rebalance_ms)
            took = time.monotonic() - started
        finally:
            stop.set()
            t.join()
        assert j.error_code == 0
        assert [m.member_id for m in j.members] == [j.member_id]  # the silent member was dropped
        return took


def test_join_v0_waits_the_session_timeout_v1_its_own(broker) -> None:
    # v0: the session timeout (4 s) is the rebalance timeout; the heartbeats keep the old member's
    # session alive, so only the rebalance timeout can end the wait
    took = _rebalance_seconds(broker.port, "jg-v0", 0, session_ms=4000, rebalance_ms=-1)
    assert 3.5 <= took < 9
    # v1 with the same session timeout and a 1 s rebalance timeout: the shorter wait
    took = _rebalance_seconds(broker.port, "jg-v1", 1, session_ms=4000, rebalance_ms=1000)
    assert took < 3
