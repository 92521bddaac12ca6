"""Offset expiry and compaction of __consumer_offsets, on a real log.

A group's commits are written as records, expire after a (shortened)
retention into tombstones, the compacted log drops both the commits and the
tombstones, and a replay of what is left sees neither the offsets nor the
group — so replay time follows live state, not history.
"""

from __future__ import annotations

from shoal.broker.groups.classic import GroupState
from shoal.broker.groups.shard import GroupSettings, GroupShard
from shoal.broker.log import LogConfig, PartitionLog
from shoal.broker.log.cleaner import LogCleaner
from shoal.protocol.coordinator_records import serde
from shoal.protocol.records import build_batch

SERDE = serde("group")
RETENTION = 60_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def settings() -> GroupSettings:
    return GroupSettings(6000, 300000, 1000, 0, 4096, RETENTION)


def write(log: PartitionLog, shard: GroupShard, records, clock: Clock) -> None:
    encoded = [
        (SERDE.encode_key(r.name, r.key), SERDE.encode_value(r.name, r.value, r.value_version), [], clock.now)
        for r in records
    ]
    info = log.append(build_batch(encoded), now_ms=clock.now)
    from shoal.protocol.coordinator_records import CoordinatorRecord

    for i, r in enumerate(records):
        version = r.value_version if r.value_version is not None else SERDE.latest_value_version(r.name)
        shard.replay(CoordinatorRecord(SERDE.record_type(r.name), r.key, r.value, version), info.first_offset + i)


def replay(log: PartitionLog, clock: Clock) -> tuple[GroupShard, int]:
    shard = GroupShard(0, settings(), clock)
    n = 0
    for header, _ in log.scan(log.log_start_offset):
        for rec in header.records():
            shard.replay(SERDE.decode(rec.key, rec.value), rec.offset)
            n += 1
    shard.finish_loading()
    return shard, n


def test_expired_offsets_are_tombstoned_compacted_and_gone_on_replay(tmp_path) -> None:
    clock = Clock()
    config = LogConfig(segment_bytes=1 << 20, cleanup_policy="compact")
    log = PartitionLog.open(tmp_path / "__consumer_offsets-0", config, clock, True)
    shard = GroupShard(0, settings(), clock)
    shard.finish_loading()
    # a standalone consumer commits many times (history), and a live one too
    for round_ in range(50):
        write(
            log,
            shard,
            [shard.commit_record("old", "t", p, round_ * 10 + p, -1, "", clock.now) for p in range(4)],
            clock,
        )
        clock.now += 10
    write(log, shard, [shard.commit_record("fresh", "t", 0, 7, -1, "", clock.now + RETENTION)], clock)
    assert set(shard.offsets) == {"old", "fresh"}
    # before retention nothing expires
    assert shard.expired_records(clock.now) == []
    clock.now += RETENTION + 1
    expired = shard.expired_records(clock.now)
    names = [(r.name, r.value is None) for r in expired]
    assert names.count(("OffsetCommit", True)) == 4
    assert ("GroupMetadata", True) in names  # the empty, offset-less group goes too
    write(log, shard, expired, clock)
    assert "old" not in shard.offsets and "old" not in shard.groups
    assert shard.groups["fresh"].state == GroupState.EMPTY
    # compaction: history and (after delete.retention.ms) the tombstones disappear
    log.roll()
    clock.now += 1000
    LogCleaner().clean(log, clock.now, delete_retention_ms=0, force=True)
    replayed, n = replay(log, clock)
    assert "old" not in replayed.offsets and "old" not in replayed.groups
    assert replayed.offsets["fresh"][("t", 0)].offset == 7
    assert n == 1  # only the live commit is left
    log.close()
