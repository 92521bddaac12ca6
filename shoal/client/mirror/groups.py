"""Moving consumer-group offsets and share-group state to the target (the asyncio shell).

Why only while a group is empty on the target: a commit from outside a live group would fight
its members (Kafka answers UNKNOWN_MEMBER_ID to it, and AlterShareGroupOffsets answers
NON_EMPTY_GROUP), and a group that already runs on the target has moved: its own commits are
newer than anything the source can say. So a consumer group with members on the target is
skipped with that reason. A share group with members on the target stops the run before
anything is written (``check_share_groups_empty``); in ``--follow`` mode, once it has members
later on, it is skipped like a consumer group.

A share group moves as its share-partition start offset, translated, plus its ``share.*``
group configs. Records past the start offset that are in flight (acquired), released or
available at the source are not accepted there, so the target delivers them again; their
acquisition locks and delivery counts stay behind. Records acknowledged past the start offset
while an earlier one is still in flight are also delivered again: the admin API carries only the
start offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from shoal.client.admin.client import AsyncAdmin
from shoal.client.admin.types import (
    AlterConfigOp,
    ConfigResource,
    ConfigSource,
    OffsetAndMetadata,
    ShareGroupDescription,
    SharePartitionOffsetInfo,
)
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import BrokerResponseError
from shoal.client.mirror.offsets import OffsetMap
from shoal.client.mirror.plan import MirrorError, share_configs, translate_offsets

__all__ = ["GroupResult", "check_share_groups_empty", "sync_consumer_group", "sync_share_group"]


@dataclass(slots=True)
class GroupResult:
    group: str
    written: dict[str, int] = field(default_factory=dict)  # "topic-partition" -> target offset
    skipped: dict[str, str] = field(default_factory=dict)  # "topic-partition" or "*" -> reason
    configs: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"written": self.written, "skipped": self.skipped, "configs": self.configs}


def _key(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


def _refused(e: BaseException, what: str) -> MirrorError | None:
    if isinstance(e, BrokerResponseError) and "AUTHORIZATION" in e.name:
        return MirrorError(f"the target refused {what}: {e}")
    return None


async def _share_members(admin: AsyncAdmin, group: str) -> int | None:
    """Members of ``group`` on the target as a share group; None when there is no such group."""
    try:
        got = (await admin.describe_share_groups([group]))[group]
    except BrokerResponseError as e:
        got = e
    if isinstance(got, ShareGroupDescription):
        return len(got.members)
    if isinstance(got, BrokerResponseError) and got.name == "GROUP_ID_NOT_FOUND":
        return None
    if isinstance(got, BrokerResponseError):
        err = _refused(got, f"to describe share group {group!r}")
        raise err or MirrorError(f"cannot describe share group {group!r} on the target: {got}")
    return None


async def check_share_groups_empty(target: AsyncAdmin, groups: list[str]) -> list[str]:
    """Problems that stop the run: share groups that have members on the target."""
    problems = []
    for g in groups:
        n = await _share_members(target, g)
        if n:
            problems.append(
                f"share group {g!r} has {n} member(s) on the target: its start offsets can only be set while it is "
                "empty; stop its consumers there (or leave it out with --share-groups) and run again"
            )
    return problems


async def sync_consumer_group(
    source: AsyncAdmin, target: AsyncAdmin, group: str, maps: Mapping[TopicPartition, OffsetMap]
) -> GroupResult:
    res = GroupResult(group)
    committed = await source.list_consumer_group_offsets(group)
    offsets: dict[tuple[str, int], int] = {}
    metadata: dict[tuple[str, int], str] = {}
    for tp, om in committed.items():
        if isinstance(om, OffsetAndMetadata) and om.offset >= 0:
            offsets[(tp.topic, tp.partition)] = om.offset
            metadata[(tp.topic, tp.partition)] = om.metadata
    translated, skipped = translate_offsets(offsets, {(tp.topic, tp.partition): m for tp, m in maps.items()})
    res.skipped = {_key(tp): why for tp, why in skipped.items()}
    if not translated:
        return res
    try:
        desc = (await target.describe_consumer_groups([group]))[group]
    except BrokerResponseError as e:
        desc = e
    members = getattr(desc, "members", ())
    if members:
        res.skipped["*"] = (
            f"the group has {len(members)} member(s) on the target; offsets are written only while it is empty"
        )
        return res
    todo = {TopicPartition(*tp): OffsetAndMetadata(off, metadata.get(tp, "")) for tp, off in translated.items()}
    try:
        answers = await target.alter_consumer_group_offsets(group, todo)
    except BrokerResponseError as e:
        err = _refused(e, f"to commit offsets of group {group!r}")
        if err is not None:
            raise err from None
        res.skipped["*"] = f"the target refused the commit: {e}"
        return res
    for tp, answer in answers.items():
        if answer is None:
            res.written[_key(tp)] = todo[tp].offset
        else:
            err = _refused(answer, f"to commit offsets of group {group!r}")
            if err is not None:
                raise err
            res.skipped[_key(tp)] = str(answer)
    return res


async def sync_share_group(
    source: AsyncAdmin, target: AsyncAdmin, group: str, maps: Mapping[TopicPartition, OffsetMap]
) -> GroupResult:
    res = GroupResult(group)
    starts = await source.list_share_group_offsets(group)
    offsets = {
        (tp.topic, tp.partition): info.start_offset
        for tp, info in starts.items()
        if isinstance(info, SharePartitionOffsetInfo) and info.start_offset is not None and info.start_offset >= 0
    }
    translated, skipped = translate_offsets(offsets, {(tp.topic, tp.partition): m for tp, m in maps.items()})
    res.skipped = {_key(tp): why for tp, why in skipped.items()}
    members = await _share_members(target, group)
    if members:
        res.skipped["*"] = f"the share group has {members} member(s) on the target; it is moved only while empty"
        return res
    if translated:
        try:
            answers = await target.alter_share_group_offsets(
                group, {TopicPartition(*tp): off for tp, off in translated.items()}
            )
        except BrokerResponseError as e:
            err = _refused(e, f"to set the start offsets of share group {group!r}")
            if err is not None:
                raise err from None
            if e.name == "NON_EMPTY_GROUP":
                res.skipped["*"] = "the share group has members on the target; it is moved only while empty"
                return res
            raise MirrorError(f"the target refused the start offsets of share group {group!r}: {e}") from None
        for tp, answer in answers.items():
            if answer is None:
                res.written[_key(tp)] = translated[(tp.topic, tp.partition)]
            else:
                res.skipped[_key(tp)] = str(answer)
    wanted = await _group_overrides(source, group)
    if wanted:
        resource = ConfigResource.group(group)
        answer = (
            await target.incremental_alter_configs({resource: [AlterConfigOp.set(k, v) for k, v in wanted.items()]})
        )[resource]
        if answer is not None:
            err = _refused(answer, f"to set the configs of share group {group!r}")
            raise err or MirrorError(f"the target refused the configs of share group {group!r}: {answer}")
        res.configs = wanted
    return res


async def _group_overrides(source: AsyncAdmin, group: str) -> dict[str, str]:
    resource = ConfigResource.group(group)
    got = (await source.describe_configs([resource]))[resource]
    if isinstance(got, BaseException):
        return {}
    overrides = {
        name: e.value
        for name, e in got.items()
        if e.value is not None and e.source in (ConfigSource.GROUP_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG)
    }
    return share_configs(overrides)
