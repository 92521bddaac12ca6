"""The group coordinator's asyncio shell around the sans-IO shards and groups.

It turns requests into calls on `ClassicGroup` / `GroupShard`, answers them
through futures (the tokens the groups hand back in their outbox), and makes
every write an operation of the shard run by the coordinator runtime
(`runtime.submit` / `runtime.write`: records appended as one batch, replayed
into the shard, answered once durable): a group's GroupMetadata image when
the group marked a durable change, a leader's assignment (whose outcome goes
back to the group, which holds every SyncGroup until then), offset commits
and deletions, group deletion and expiry. It drives the groups' deadlines
with delayed operations in the purgatory, as Kafka does:

* DelayedJoin (watched under ("join", group)) completes when every member
  rejoined — checked whenever a join or leave arrives — or when the
  rebalance timeout (or the initial rebalance delay) runs out;
* DelayedHeartbeat (under ("heartbeat", group, member)) is completed and
  replaced on every heartbeat/join/sync/commit; when one expires the member
  is removed and the group rebalances;
* a sync deadline removes members that never sent SyncGroup.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from shoal.broker.coordinator.runtime import CoordinatorRuntime
from shoal.broker.coordinator.write_errors import append_error_code, append_error_to_response
from shoal.broker.errors import ErrorAnswer
from shoal.broker.groups.classic import AssignmentWrite, ClassicGroup, GroupState, JoinParams
from shoal.broker.groups.consumer.service import ConsumerGroupService
from shoal.broker.groups.shard import GroupSettings, GroupShard
from shoal.broker.groups.share.service import ShareGroupService
from shoal.broker.timing.purgatory import DelayedOperation, Purgatory
from shoal.broker.timing.wheel import TimerTask
from shoal.protocol.coordinator_records import serde
from shoal.protocol.errors import ErrorCode

log = logging.getLogger("shoal.groups")
TOPIC = "__consumer_offsets"


class DelayedJoin(DelayedOperation):
    __slots__ = ("coord", "gid", "partition")

    def __init__(self, coord: GroupCoordinator, partition: int, gid: str, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coord, self.partition, self.gid = coord, partition, gid

    def _group(self) -> ClassicGroup | None:
        shard = self.coord.runtime.shards.get(self.partition)
        return shard.groups.get(self.gid) if shard is not None else None

    def try_complete(self) -> bool:
        g = self._group()
        if g is None or g.state != GroupState.PREPARING_REBALANCE or g.can_complete_join(self.coord.now()):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        g = self._group()
        if g is None or g.state != GroupState.PREPARING_REBALANCE:
            return
        now = self.coord.now()
        if g.can_complete_join(now) or (g.join_deadline_ms is not None and now >= g.join_deadline_ms):
            g.complete_join(now)
        self.coord.after(self.partition, g)

    def on_expiration(self) -> None:
        pass


class DelayedHeartbeat(DelayedOperation):
    __slots__ = ("coord", "deadline", "gid", "member_id", "partition")

    def __init__(self, coord: GroupCoordinator, partition: int, gid: str, member_id: str, deadline: int) -> None:
        super().__init__(max(0, deadline - coord.mono()))
        self.coord, self.partition, self.gid, self.member_id = coord, partition, gid, member_id
        self.deadline = deadline

    def try_complete(self) -> bool:
        shard = self.coord.runtime.shards.get(self.partition)
        g = shard.groups.get(self.gid) if shard is not None else None
        if g is None:
            return self.force_complete()
        m = g.members.get(self.member_id)
        pending = g.pending_members.get(self.member_id)
        current = m.heartbeat_deadline_ms if m is not None else pending
        if current is None or current > self.deadline:
            return self.force_complete()  # renewed (or gone): this expiry is moot
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        shard = self.coord.runtime.shards.get(self.partition)
        g = shard.groups.get(self.gid) if shard is not None else None
        if g is None:
            return
        self.coord.forget_heartbeat(self.gid, self.member_id, self.deadline)
        if g.expire_member(self.member_id, self.coord.now()):
            log.info("group %s: member %s left (session timeout)", self.gid, self.member_id)
        self.coord.after(self.partition, g)


class GroupCoordinator:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        cfg = broker.config
        self.settings = GroupSettings(
            min_session_timeout_ms=cfg.get("group.min.session.timeout.ms"),
            max_session_timeout_ms=cfg.get("group.max.session.timeout.ms"),
            max_size=cfg.get("group.max.size"),
            initial_rebalance_delay_ms=cfg.get("group.initial.rebalance.delay.ms"),
            offset_metadata_max_bytes=cfg.get("offset.metadata.max.bytes"),
            offsets_retention_ms=cfg.get("offsets.retention.minutes") * 60_000,
        )
        self.runtime = CoordinatorRuntime(
            broker,
            TOPIC,
            cfg.get("offsets.topic.num.partitions"),
            serde("group"),
            self._make_shard,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(cfg.get("offsets.topic.segment.bytes")),
                "compression.type": "producer",
            },
            on_loaded=self._shard_loaded,
            on_unloaded=self._shard_unloaded,
        )
        self.purgatory = Purgatory("Rebalance", broker.timer)
        self._heartbeats: dict[tuple[str, str], int] = {}  # scheduled expiry per member
        self._sync_timers: dict[str, TimerTask] = {}
        self._joins: dict[str, DelayedJoin] = {}  # the group's DelayedJoin while it prepares a rebalance
        self._last_seen: dict[str, tuple] = {}  # (state, generation) last logged per group
        self._tasks: set[asyncio.Task] = set()
        self._expiry_task: asyncio.Task | None = None
        self.share = ShareGroupService(broker, self)
        self.consumer = ConsumerGroupService(broker, self)

    # -- clocks ------------------------------------------------------------------
    def now(self) -> int:
        """Group deadlines use the monotonic clock (the timer's)."""
        return self.broker.clock.monotonic_ms()

    mono = now

    def _make_shard(self, partition: int) -> GroupShard:
        return GroupShard(partition, self.settings, self.broker.clock.now_ms)

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        self.runtime.start()
        interval = self.broker.config.get("offsets.retention.check.interval.ms")
        self._expiry_task = asyncio.create_task(self._expire_loop(interval))

    def _shard_loaded(self, p: int, shard: GroupShard) -> None:
        """A partition was replayed (at start, or again after a failed write) and serves from now on."""
        shard.finish_loading()
        for g in list(shard.groups.values()):
            # Restored groups: members must heartbeat within their session timeout.
            for m in g.members.values():
                m.heartbeat_deadline_ms = self.now() + m.session_timeout_ms
            self.after(p, g)
        self.share.after_load(p, shard)
        self.consumer.after_load(p, shard)

    def _shard_unloaded(self, p: int, shard: GroupShard, error: int) -> None:
        """A shard dropped after a failed write: its waiting joins and syncs get the write's error."""
        for g in shard.groups.values():
            g.to_dead(self.now(), error)
            self._deliver(g.take_outbox())

    def close(self) -> None:
        self.share.close()
        self.consumer.close()
        self.runtime.close()
        if self._expiry_task is not None:
            self._expiry_task.cancel()
        for t in self._tasks:
            t.cancel()
        self.purgatory.shutdown()

    # -- the common tail of every group operation -------------------------------------
    def after(self, p: int, group: ClassicGroup) -> None:
        """Deliver answers, persist if needed, (re)arm deadlines, try to complete a join."""
        seen = (group.state, group.generation_id)
        before = self._last_seen.get(group.group_id)
        if before != seen:
            self._last_seen[group.group_id] = seen
            if group.state == GroupState.PREPARING_REBALANCE and (before is None or before[0] != group.state):
                self.broker.stats.rebalance("classic")  # a rebalance begins (Kafka counts it there too)
            log.info(
                "group %s: %s, generation %d, %d members",
                group.group_id,
                group.state.value,
                group.generation_id,
                len(group.members),
            )
        outbox = group.take_outbox()
        for write in group.take_assignment_writes():
            self._store_assignment(p, group, write)
        fut = None
        if group.dirty:  # (checked here too: a heartbeat, the common case, writes nothing)
            try:
                _, fut = self.runtime.submit(p, lambda shard: shard.store_group(group))
            except ErrorAnswer as e:
                # Nothing was written and the shard is being replayed from its log: this group
                # object is gone, and the requests it answered get the write's error instead.
                self._deliver_failed(outbox, e.code)
                return
        if fut is not None:
            fut.add_done_callback(lambda f, out=outbox, g=group: self._deliver_after_write(f, out, g))
        else:
            self._deliver(outbox)
        self._arm(p, group)
        if group.state == GroupState.PREPARING_REBALANCE:
            self.purgatory.check_and_complete(("join", group.group_id))
        if group.state == GroupState.DEAD or (group.state == GroupState.EMPTY and not group.members):
            self._forget_group_timers(group.group_id)

    def _store_assignment(self, p: int, group: ClassicGroup, write: AssignmentWrite) -> None:
        """Persist a leader's assignment; the group learns the outcome once the write settled."""
        try:
            _, fut = self.runtime.submit(p, lambda shard: shard.store_assignment(group, write))
        except ErrorAnswer:
            return  # the shard was dropped and is replayed from its log; its syncs were answered
        if fut is not None:  # (None: the group belongs to a shard since reloaded)
            fut.add_done_callback(lambda f: self._assignment_stored(p, group, write, f))

    def _assignment_stored(self, p: int, group: ClassicGroup, write: AssignmentWrite, fut: asyncio.Future) -> None:
        exc = asyncio.CancelledError() if fut.cancelled() else fut.exception()
        if exc is not None:
            log.error("group %s: persisting the assignment failed: %r", group.group_id, exc)
        group.assignment_stored(write, append_error_code(exc), self.now())
        if p in self.runtime.shards:
            self.after(p, group)
        else:
            self._deliver(group.take_outbox())

    def _deliver(self, outbox: list[tuple[Any, Any]]) -> None:
        for token, result in outbox:
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_result(result)

    def _deliver_after_write(self, fut: asyncio.Future, outbox: list, group: ClassicGroup) -> None:
        exc = None if not fut.cancelled() else asyncio.CancelledError()
        if exc is None:
            exc = fut.exception()
        if exc is not None:
            log.error("group %s: persisting metadata failed: %r", group.group_id, exc)
            self._deliver_failed(outbox, append_error_to_response(append_error_code(exc)))
            return
        self._deliver(outbox)

    def _deliver_failed(self, outbox: list[tuple[Any, Any]], error: int) -> None:
        for token, result in outbox:
            if isinstance(token, asyncio.Future) and not token.done():
                result.error = error
                token.set_result(result)

    def _arm(self, p: int, group: ClassicGroup) -> None:
        gid = group.group_id
        if group.state == GroupState.PREPARING_REBALANCE and group.join_deadline_ms is not None:
            # One live DelayedJoin per rebalance. (The watch list also holds completed operations until
            # a purge, so its length cannot tell: counting it left a group that had emptied and was
            # joined again with no DelayedJoin, waiting for an unrelated expiry.)
            current = self._joins.get(gid)
            if current is None or current.is_completed:
                timeout = max(0, group.join_deadline_ms - self.now())
                op = self._joins[gid] = DelayedJoin(self, p, gid, timeout)
                self.purgatory.try_complete_else_watch(op, [("join", gid)])
        deadlines = {m.member_id: m.heartbeat_deadline_ms for m in group.members.values()}
        deadlines.update(group.pending_members)
        for mid, deadline in deadlines.items():
            key = (gid, mid)
            if self._heartbeats.get(key) == deadline:
                continue
            if key in self._heartbeats:
                self.purgatory.check_and_complete(("heartbeat", gid, mid))  # retire the old expiry
            self._heartbeats[key] = deadline
            self.purgatory.try_complete_else_watch(
                DelayedHeartbeat(self, p, gid, mid, deadline), [("heartbeat", gid, mid)]
            )
        for key in [k for k in self._heartbeats if k[0] == gid and k[1] not in deadlines]:
            del self._heartbeats[key]
            self.purgatory.check_and_complete(("heartbeat", gid, key[1]))
        timer = self._sync_timers.pop(gid, None)
        if timer is not None:
            timer.cancel()
        if group.state == GroupState.COMPLETING_REBALANCE and group.sync_deadline_ms is not None:
            task = TimerTask(group.sync_deadline_ms, lambda: self._sync_expired(p, gid))
            self._sync_timers[gid] = task
            self.broker.timer.add(task)

    def _sync_expired(self, p: int, gid: str) -> None:
        self._sync_timers.pop(gid, None)
        shard = self.runtime.shards.get(p)
        g = shard.groups.get(gid) if shard is not None else None
        if g is not None:
            g.expire_sync(self.now())
            self.after(p, g)

    def forget_heartbeat(self, gid: str, member_id: str, deadline: int) -> None:
        if self._heartbeats.get((gid, member_id)) == deadline:
            del self._heartbeats[(gid, member_id)]

    def _forget_group_timers(self, gid: str) -> None:
        self._joins.pop(gid, None)
        for key in [k for k in self._heartbeats if k[0] == gid]:
            del self._heartbeats[key]
        timer = self._sync_timers.pop(gid, None)
        if timer is not None:
            timer.cancel()

    # -- membership ------------------------------------------------------------------
    def loaded_shards(self) -> list[GroupShard]:
        """The shards this node serves now, in the order they were loaded (ListGroups walks them)."""
        return [s for s in self.runtime.shards.values() if isinstance(s, GroupShard)]

    def _route(self, gid: str) -> tuple[int, GroupShard]:
        """The shard of a classic group id (a share group's id is GROUP_ID_NOT_FOUND here)."""
        if not gid:
            raise ErrorAnswer(ErrorCode.INVALID_GROUP_ID)
        p = self.runtime.partition_of(gid)
        shard = self.runtime.shard(p)
        if gid in shard.share_groups or gid in shard.consumer_groups:
            raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a classic group.")
        return p, shard

    def _route_any(self, gid: str) -> tuple[int, GroupShard]:
        """The shard holding `gid`'s offsets whatever the group's protocol, classic or consumer
        (a share group's id is GROUP_ID_NOT_FOUND: it commits no offsets here)."""
        if not gid:
            raise ErrorAnswer(ErrorCode.INVALID_GROUP_ID)
        p = self.runtime.partition_of(gid)
        shard = self.runtime.shard(p)
        if gid in shard.share_groups:
            raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is a share group.")
        return p, shard

    async def join(self, gid: str, params: JoinParams) -> Any:
        from shoal.broker.groups.classic import JoinResult

        try:
            p, shard = self._route(gid)
        except ErrorAnswer as e:
            cg = None
            if e.code == ErrorCode.GROUP_ID_NOT_FOUND:
                cg = self.runtime.shard(self.runtime.partition_of(gid)).consumer_groups.get(gid)
            if cg is not None and cg.members:  # classic members in a consumer group: not built yet
                return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=params.member_id)
            return JoinResult(e.code, member_id=params.member_id)
        s = self.settings
        if not s.min_session_timeout_ms <= params.session_timeout_ms <= s.max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=params.member_id)
        group = shard.group(gid)
        if group is None:
            if params.member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=params.member_id)
            group = shard.group(gid, create=True)
        fut = asyncio.get_running_loop().create_future()
        group.join(params, fut, self.now())
        self.after(p, group)
        return await fut

    async def sync(
        self,
        gid: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> Any:
        from shoal.broker.groups.classic import SyncResult

        try:
            p, shard = self._route(gid)
        except ErrorAnswer as e:
            return SyncResult(e.code)
        group = shard.group(gid)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        fut = asyncio.get_running_loop().create_future()
        group.sync(member_id, instance_id, generation, protocol_type, protocol_name, assignments, fut, self.now())
        self.after(p, group)
        return await fut

    def heartbeat(self, gid: str, member_id: str, instance_id: str | None, generation: int) -> int:
        try:
            p, shard = self._route(gid)
        except ErrorAnswer as e:
            return e.code
        group = shard.group(gid)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        error = group.heartbeat(member_id, instance_id, generation, self.now())
        self.after(p, group)
        return error

    def leave(self, gid: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        try:
            p, shard = self._route(gid)
        except ErrorAnswer as e:
            return e.code, []
        group = shard.group(gid)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID for _ in members]
        errors = [group.leave(mid, iid, self.now()) for mid, iid in members]
        self.after(p, group)
        return ErrorCode.NONE, errors

    # -- offsets -----------------------------------------------------------------------
    async def commit(
        self,
        gid: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: list[tuple[str, int, int, int, str | None]],
        api_version: int = 9,
        commit_timestamps: list[int] | None = None,
    ) -> tuple[int, list[int]]:
        """offsets: (topic, partition, offset, leader_epoch, metadata). Returns (group error, per-offset errors).

        A v0 commit names no member: it is taken whatever the group's state, as Kafka 3.x took it
        (into ZooKeeper, outside the group). `commit_timestamps` (v1) gives each offset's commit
        time, -1 for the broker's clock; the time is what retention counts from."""
        p = self.runtime.partition_of(gid) if gid else -1
        cg = self.runtime.shard(p).consumer_groups.get(gid) if gid else None
        if api_version == 0:
            p, _ = self._route_any(gid)
        elif cg is not None:
            error = self.consumer.validate_commit(cg, member_id, generation, api_version)
            if error:
                return error, [error] * len(offsets)
        else:
            p, shard = self._route(gid)
            error, _ = shard.validate_commit(gid, generation, member_id, instance_id, self.now())
            if error:
                return error, [error] * len(offsets)
            group = shard.group(gid)
            if group is not None:
                self.after(p, group)
        now = self.broker.clock.now_ms()
        accepted: list[tuple[str, int, int, int, str | None]] = []
        stamps: list[int] = []
        errors = []
        topics = self.broker.topics
        given = commit_timestamps if commit_timestamps is not None else [-1] * len(offsets)
        for (topic, partition, offset, epoch, metadata), stamp in zip(offsets, given):
            if metadata is not None and len(metadata.encode()) > self.settings.offset_metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
                continue
            if topics.partition(topic, partition) is None:
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            errors.append(ErrorCode.NONE)
            accepted.append((topic, partition, offset, epoch, metadata))
            stamps.append(now if stamp == -1 else stamp)
        await self.runtime.write(p, lambda shard: shard.commit_offsets(gid, accepted, now, stamps))
        return ErrorCode.NONE, errors

    def fetch_offsets(
        self, gid: str, wanted: list[tuple[str, list[int]]] | None, member: tuple[str | None, int] = (None, -1)
    ) -> tuple[int, dict]:
        """(error, {(topic, partition): CommittedOffset | None}); wanted None = all.

        `member` (member id, epoch) of an OffsetFetch v9+ is checked for a consumer group."""
        cg = self.runtime.shard(self.runtime.partition_of(gid)).consumer_groups.get(gid) if gid else None
        if cg is not None:
            error = self.consumer.validate_fetch(cg, *member)
            if error:
                return error, {}
            shard = self.runtime.shard(self.runtime.partition_of(gid))
        else:
            _, shard = self._route(gid)
        committed = shard.committed(gid)
        if wanted is None:
            return ErrorCode.NONE, dict(committed)
        return ErrorCode.NONE, {(t, i): committed.get((t, i)) for t, parts in wanted for i in parts}

    async def delete_offsets(self, gid: str, partitions: list[tuple[str, int]]) -> tuple[int, list[int]]:
        p, shard = self._route(gid)
        group = shard.group(gid)
        if group is None and gid not in shard.offsets:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        if group is not None and group.state not in (GroupState.EMPTY, GroupState.DEAD):
            # Kafka refuses only for partitions the group is subscribed to; we use the member metadata's names.
            subscribed = _subscribed_topics(group)
            errors = [ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if t in subscribed else ErrorCode.NONE for t, _ in partitions]
            allowed = [tp for tp, e in zip(partitions, errors) if e == ErrorCode.NONE]
        else:
            errors = [ErrorCode.NONE] * len(partitions)
            allowed = list(partitions)
        await self.runtime.write(p, lambda shard: shard.delete_offsets(gid, allowed))
        return ErrorCode.NONE, errors

    async def delete_groups(self, gids: list[str]) -> list[int]:
        out = []
        for gid in gids:
            try:
                p, shard = self._route(gid)
            except ErrorAnswer as e:
                if (
                    e.code == ErrorCode.GROUP_ID_NOT_FOUND
                    and gid in self.runtime.shard(self.runtime.partition_of(gid)).consumer_groups
                ):
                    out.append(await self.consumer.delete_group(gid))
                elif e.code == ErrorCode.GROUP_ID_NOT_FOUND:
                    out.append(await self.share.delete_group(gid))
                else:
                    out.append(e.code)
                continue
            group = shard.group(gid)
            if group is None and gid not in shard.offsets:
                out.append(ErrorCode.GROUP_ID_NOT_FOUND)
                continue
            if group is not None and group.state not in (GroupState.EMPTY, GroupState.DEAD):
                out.append(ErrorCode.NON_EMPTY_GROUP)
                continue
            if group is not None:
                self._forget_group_timers(gid)
            try:
                dead, durable = self.runtime.submit(p, lambda shard, gid=gid: shard.delete_group(gid, self.now()))
            except ErrorAnswer as e:
                out.append(e.code)  # not deleted: the shard is replayed from its log, the group comes back
                continue
            if dead is not None:
                self._deliver(dead.take_outbox())
            try:
                if durable is not None:
                    await durable
            except ErrorAnswer as e:
                out.append(e.code)
                continue
            out.append(ErrorCode.NONE)
        return out

    async def _expire_loop(self, interval_ms: int) -> None:
        await self.runtime.loaded.wait()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await self.expire_offsets()

    async def expire_offsets(self) -> int:
        now = self.broker.clock.now_ms()
        n = 0
        for p in list(self.runtime.shards):
            try:
                n += await self.runtime.write(p, lambda shard: shard.expire(now))
            except ErrorAnswer as e:
                log.error("__consumer_offsets-%d: expiring offsets failed (%s); retried next round", p, e)
        if n:
            log.info("expired %d offsets/groups", n)
        return n

    def on_topic_deleted(self, name: str) -> None:
        """Committed offsets of a deleted topic go away (tombstones)."""
        for p in list(self.runtime.shards):
            try:
                _, fut = self.runtime.submit(p, lambda shard: shard.delete_topic_offsets(name))
            except ErrorAnswer as e:
                log.error("__consumer_offsets-%d: tombstoning offsets of deleted topic %s failed: %s", p, name, e)
                continue
            if fut is not None:
                fut.add_done_callback(_log_failure(f"tombstoning offsets of deleted topic {name}"))


def _log_failure(what: str):
    def done(fut: asyncio.Future) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            log.error("%s failed: %s", what, fut.exception())

    return done


def _subscribed_topics(group: ClassicGroup) -> set[str]:
    from shoal.protocol.coordinator_records import decode_versioned
    from shoal.protocol.exceptions import ProtocolError

    topics: set[str] = set()
    if group.protocol_type != "consumer" or group.protocol_name is None:
        return topics
    for m in group.members.values():
        try:
            _, sub = decode_versioned("ConsumerProtocolSubscription", m.metadata(group.protocol_name))
        except (ProtocolError, KeyError):
            continue
        topics.update(sub.topics)
    return topics
