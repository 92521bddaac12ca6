"""Helpers shared by several test files (share wire)."""

from __future__ import annotations

import time
import uuid

from shoal.protocol.api import api_by_name
from tests.support.brokers import RawClient
from tests.support.share_clients import group_config, produce
from tests.support.wire import create

SF = api_by_name("ShareFetch").request_class()
SA = api_by_name("ShareAcknowledge").request_class()


FAST = (
    "offsets.topic.num.partitions=3",
    "share.coordinator.state.topic.num.partitions=3",
    "group.share.min.heartbeat.interval.ms=100",
    "group.share.heartbeat.interval.ms=100",
    "group.share.assignment.interval.ms=0",
    "group.share.min.record.lock.duration.ms=1000",
    "group.share.max.share.sessions=3",
    "group.share.max.partition.max.record.locks=10000",
)


def ready_topic(broker, topic: str, group: str, n: int, partitions: int = 1, **configs: str) -> uuid.UUID:
    """A topic with `n` records whose share state in `group` is initialized (earliest)."""
    with RawClient(broker.port) as c:
        create(c, topic, partitions)
        md = c.call("Metadata", 12, topics=[api_by_name("Metadata").request_class().MetadataRequestTopic(name=topic)])
        tid = md.topics[0].topic_id
    group_config(broker.port, group, share_auto_offset_reset="earliest", **configs)
    with RawClient(broker.port) as c:
        r = c.call(
            "ShareGroupHeartbeat", 1, group_id=group, member_id="init", member_epoch=0, rack_id=None,
            subscribed_topic_names=[topic],
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            d = c.call("ShareGroupDescribe", 1, group_ids=[group], include_authorized_operations=False).groups[0]
            if any(tp.partitions for m in d.members for tp in m.assignment.topic_partitions):
                break
            r = c.call(
                "ShareGroupHeartbeat", 1, group_id=group, member_id="init", member_epoch=r.member_epoch,
                rack_id=None, subscribed_topic_names=None,
            )  # fmt: skip
            time.sleep(0.05)
        c.call(
            "ShareGroupHeartbeat", 1, group_id=group, member_id="init", member_epoch=-1, rack_id=None,
            subscribed_topic_names=None,
        )  # fmt: skip
    if n:
        produce(broker.bootstrap, topic, n)
    return tid


def fetch(
    c,
    group,
    member,
    epoch,
    parts=(),
    acks=None,
    max_records=500,
    max_wait=0,
    version=1,
    max_bytes=1 << 20,
    min_bytes=1,
    **kw,
):
    topics = {}
    for tid, p in parts:
        topics.setdefault(tid, []).append(
            SF.FetchPartition(partition_index=p, acknowledgement_batches=(acks or {}).get((tid, p), []))
        )
    for (tid, p), batches in (acks or {}).items():
        if (tid, p) not in parts:
            topics.setdefault(tid, []).append(SF.FetchPartition(partition_index=p, acknowledgement_batches=batches))
    return c.call(
        "ShareFetch",
        version,
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        max_wait_ms=max_wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        max_records=max_records,
        batch_size=max_records,
        topics=[SF.FetchTopic(topic_id=t, partitions=ps) for t, ps in topics.items()],
        forgotten_topics_data=[],
        **kw,
    )


def batch(first, last, *types):
    return SF.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=list(types))


def acquired(resp):
    return [(a.first_offset, a.last_offset, a.delivery_count) for t in resp.responses for p in t.partitions
            for a in p.acquired_records]  # fmt: skip


def part(resp):
    (t,) = resp.responses
    (p,) = t.partitions
    return p


def acknowledge(c, group, member, epoch, tid, p, *batches, version=1, **kw):
    return c.call(
        "ShareAcknowledge",
        version,
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        topics=[
            SA.AcknowledgeTopic(
                topic_id=tid,
                partitions=[
                    SA.AcknowledgePartition(
                        partition_index=p,
                        acknowledgement_batches=[
                            SA.AcknowledgementBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                    acknowledge_types=b.acknowledge_types) for b in batches
                        ],
                    )
                ],
            )
        ],
        **kw,
    )  # fmt: skip
