"""Share-group state APIs (KIP-932), served by the share coordinator:
InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86) and
ReadShareGroupStateSummary (87).

Kafka's brokers send these to each other; Shoal is a single node whose group
coordinator and partition leaders call the coordinator in process, but
serving them keeps the node honest against tools and tests that speak to the
share coordinator directly. Thin: each partition of a request becomes one
coordinator call (all started at once, so their appends share fsyncs) and
the answers are grouped per topic in request order.

Request-level problems are answered as Kafka does: no topics, a topic with no
partitions or an empty group id give an empty response; everything else is
a per-partition error code with a message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.contract import Broker
from shoal.broker.net.contract import RequestContext
from shoal.protocol import messages
from shoal.protocol.errors import ErrorCode

_NO_COORDINATOR = "share groups are disabled on this broker"


def _malformed(req: Any) -> bool:
    return not req.group_id or not req.topics or any(not t.partitions for t in req.topics)


async def _per_partition(req: Any, call: Callable[[Any, Any], Awaitable[Any]]) -> list[tuple[Any, list[Any]]]:
    """[(topic data, [call result per partition])], every call running concurrently."""
    tasks = [[asyncio.ensure_future(call(t, p)) for p in t.partitions] for t in req.topics]
    out = []
    for t, ts in zip(req.topics, tasks):
        out.append((t, [await task for task in ts]))
    return out


def _error_fields(code: int, message: str | None) -> dict[str, Any]:
    return {"error_code": int(code), "error_message": message if code != ErrorCode.NONE else None}


async def handle_initialize(broker: Broker, ctx: RequestContext, req: messages.InitializeShareGroupStateRequest) -> Any:
    cls = messages.InitializeShareGroupStateResponse
    if _malformed(req):
        return cls(results=[])
    coord = broker.share_coordinator

    async def one(t: Any, p: Any) -> Any:
        msg: str | None
        if coord is None:
            code, msg = ErrorCode.COORDINATOR_NOT_AVAILABLE, _NO_COORDINATOR
        else:
            code, msg = await coord.initialize_state(
                req.group_id, t.topic_id, p.partition, p.state_epoch, p.start_offset
            )
        return cls.PartitionResult(partition=p.partition, **_error_fields(code, msg))

    results = await _per_partition(req, one)
    return cls(results=[cls.InitializeStateResult(topic_id=t.topic_id, partitions=ps) for t, ps in results])


async def handle_read(broker: Broker, ctx: RequestContext, req: messages.ReadShareGroupStateRequest) -> Any:
    cls = messages.ReadShareGroupStateResponse
    if _malformed(req):
        return cls(results=[])
    coord = broker.share_coordinator

    async def one(t: Any, p: Any) -> Any:
        if coord is None:
            return cls.PartitionResult(
                partition=p.partition,
                state_epoch=0,
                start_offset=-1,
                state_batches=[],
                **_error_fields(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NO_COORDINATOR),
            )
        r, msg = await coord.read_state(req.group_id, t.topic_id, p.partition, p.leader_epoch)
        return cls.PartitionResult(
            partition=p.partition,
            state_epoch=r.state_epoch,
            start_offset=r.start_offset,
            state_batches=[
                cls.StateBatch(first_offset=f, last_offset=last, delivery_state=s, delivery_count=c)
                for f, last, s, c in r.batches
            ],
            **_error_fields(r.error, msg),
        )

    results = await _per_partition(req, one)
    return cls(results=[cls.ReadStateResult(topic_id=t.topic_id, partitions=ps) for t, ps in results])


async def handle_write(broker: Broker, ctx: RequestContext, req: messages.WriteShareGroupStateRequest) -> Any:
    cls = messages.WriteShareGroupStateResponse
    if _malformed(req):
        return cls(results=[])
    coord = broker.share_coordinator

    async def one(t: Any, p: Any) -> Any:
        msg: str | None
        if coord is None:
            code, msg = ErrorCode.COORDINATOR_NOT_AVAILABLE, _NO_COORDINATOR
        else:
            code, msg = await coord.write_state(
                req.group_id,
                t.topic_id,
                p.partition,
                p.state_epoch,
                p.leader_epoch,
                p.start_offset,
                p.state_batches,
                p.delivery_complete_count if ctx.api_version >= 1 else -1,
            )
        return cls.PartitionResult(partition=p.partition, **_error_fields(code, msg))

    results = await _per_partition(req, one)
    return cls(results=[cls.WriteStateResult(topic_id=t.topic_id, partitions=ps) for t, ps in results])


async def handle_delete(broker: Broker, ctx: RequestContext, req: messages.DeleteShareGroupStateRequest) -> Any:
    cls = messages.DeleteShareGroupStateResponse
    if _malformed(req):
        return cls(results=[])
    coord = broker.share_coordinator

    async def one(t: Any, p: Any) -> Any:
        msg: str | None
        if coord is None:
            code, msg = ErrorCode.COORDINATOR_NOT_AVAILABLE, _NO_COORDINATOR
        else:
            code, msg = await coord.delete_state(req.group_id, t.topic_id, p.partition)
        return cls.PartitionResult(partition=p.partition, **_error_fields(code, msg))

    results = await _per_partition(req, one)
    return cls(results=[cls.DeleteStateResult(topic_id=t.topic_id, partitions=ps) for t, ps in results])


async def handle_read_summary(
    broker: Broker, ctx: RequestContext, req: messages.ReadShareGroupStateSummaryRequest
) -> Any:
    cls = messages.ReadShareGroupStateSummaryResponse
    if _malformed(req):
        return cls(results=[])
    coord = broker.share_coordinator
    v1 = ctx.api_version >= 1

    async def one(t: Any, p: Any) -> Any:
        fields: dict[str, Any]
        if coord is None:
            fields = dict(state_epoch=0, leader_epoch=-1, start_offset=-1, delivery_complete_count=-1)
            fields.update(_error_fields(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NO_COORDINATOR))
        else:
            r, msg = await coord.read_state_summary(req.group_id, t.topic_id, p.partition, p.leader_epoch)
            fields = dict(
                state_epoch=r.state_epoch,
                leader_epoch=r.leader_epoch,
                start_offset=r.start_offset,
                delivery_complete_count=r.delivery_complete_count,
            )
            fields.update(_error_fields(r.error, msg))
        if not v1:
            fields["delivery_complete_count"] = -1  # not in v0: leave the default
        return cls.PartitionResult(partition=p.partition, **fields)

    results = await _per_partition(req, one)
    return cls(results=[cls.ReadStateSummaryResult(topic_id=t.topic_id, partitions=ps) for t, ps in results])


def register(table: HandlerTable) -> None:
    table.add("InitializeShareGroupState", handle_initialize)
    table.add("ReadShareGroupState", handle_read)
    table.add("WriteShareGroupState", handle_write)
    table.add("DeleteShareGroupState", handle_delete)
    table.add("ReadShareGroupStateSummary", handle_read_summary)
