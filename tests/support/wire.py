"""Helpers shared by several test files (wire)."""

from __future__ import annotations

from typing import Any

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AlterConfigOpType, ConfigResourceType
from tests.support.brokers import RawClient, fetch_request


def create(c: RawClient, name: str, partitions: int = 1, **configs: str):
    CT = api_by_name("CreateTopics").request_class()
    resp = c.call(
        "CreateTopics",
        7,
        topics=[
            CT.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                configs=[CT.CreatableTopicConfig(name=k.replace("_", "."), value=v) for k, v in configs.items()],
            )
        ],
        timeout_ms=5000,
    )
    return resp.topics[0]


def fetch_body(topic: str) -> Any:
    return fetch_request(topic, max_wait_ms=500, max_bytes=1 << 20)


def hb(c: RawClient, gid: str, member: str, epoch: int, subs: list[str] | None = None, rack: str | None = None):
    return c.call(
        "ShareGroupHeartbeat",
        1,
        group_id=gid,
        member_id=member,
        member_epoch=epoch,
        rack_id=rack,
        subscribed_topic_names=subs,
    )


def describe(c: RawClient, gid: str):
    return c.call("ShareGroupDescribe", 1, group_ids=[gid], include_authorized_operations=False).groups[0]


def raw_share_offsets(port: int, group: str) -> dict:
    """{(topic, partition): (start offset, lag)} of a share group, by a raw DescribeShareGroupOffsets."""
    R = api_by_name("DescribeShareGroupOffsets").request_class()
    with RawClient(port) as c:
        r = c.call(
            "DescribeShareGroupOffsets",
            1,
            groups=[R.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)],
        )
    return {
        (t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in r.groups[0].topics for p in t.partitions
    }


def group_config(port: int, group: str, **configs: str) -> None:
    """Group configs by IncrementalAlterConfigs (resource type GROUP), e.g. share_auto_offset_reset="earliest"."""
    IAC = api_by_name("IncrementalAlterConfigs").request_class()
    with RawClient(port) as c:
        resp = c.call(
            "IncrementalAlterConfigs",
            1,
            resources=[
                IAC.AlterConfigsResource(
                    resource_type=ConfigResourceType.GROUP,
                    resource_name=group,
                    configs=[
                        IAC.AlterableConfig(name=k.replace("_", "."), config_operation=AlterConfigOpType.SET, value=v)
                        for k, v in configs.items()
                    ],
                )
            ],
            validate_only=False,
        )
    assert resp.responses[0].error_code == 0, resp
