"""The consumer-group (KIP-848) side of the group coordinator: an asyncio shell over ConsumerGroup.

Consumer groups live in the same __consumer_offsets shards as classic and
share groups (one id names one type). This shell turns ConsumerGroupHeartbeat,
ConsumerGroupDescribe, the member-epoch checks of OffsetCommit/OffsetFetch and
DeleteGroups into calls on the sans-IO :class:`ConsumerGroup`; after each call
it writes the records that changed through the coordinator runtime
(``GroupShard.store_consumer_group``) and answers once they are durable, or,
with nothing to write, once earlier writes of the partition are
(``runtime.barrier``). It keeps one delayed operation per group in the
coordinator's purgatory, due at the group's earliest deadline (a session
timeout, or the rebalance timeout of a member asked to revoke); when it
expires the group removes whoever is due and the operation re-arms.

A consumer heartbeat for an id held by an empty classic group (say one that
only committed offsets) turns it into a consumer group, keeping the offsets,
as Kafka does; a live classic group is upgraded as
``group.consumer.migration.policy`` allows (else GROUP_ID_NOT_FOUND), its
members staying as classic members answered through JoinGroup/SyncGroup/
Heartbeat/LeaveGroup (``classic_*`` below, the rules in migration.py); and a
group whose remaining members are all classic goes back to a classic group
when a member is fenced; a classic JoinGroup to an empty consumer group
makes it give way to a classic group (offsets stay). Each conversion is one batch of records (the old
group's tombstones and the new group's records). Group deadlines use the
monotonic clock.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.groups.classic import JoinParams, JoinResult, SyncResult
from shoal.broker.groups.consumer import migration
from shoal.broker.groups.consumer import records as consumer_records
from shoal.broker.groups.consumer.group import LEAVE_EPOCH, ConsumerGroup, HeartbeatParams, HeartbeatResult
from shoal.broker.groups.heartbeats import INTERNAL_PREFIX, DelayedGroupSession, HeartbeatAnswer
from shoal.protocol.errors import ErrorCode

log = logging.getLogger("shoal.consumer.groups")


class ConsumerGroupService:
    def __init__(self, broker: Any, groups: Any) -> None:
        self.broker = broker
        self.groups = groups
        self.runtime = groups.runtime
        cfg = broker.config
        self.enabled = "consumer" in cfg.get("group.coordinator.rebalance.protocols")
        self.assignors: tuple[str, ...] = tuple(cfg.get("group.consumer.assignors")) or ("uniform",)
        self.max_size: int = cfg.get("group.consumer.max.size")
        self.policy: str = cfg.get("group.consumer.migration.policy")
        self.sessions: dict[str, DelayedGroupSession] = {}
        self._last_seen: dict[str, tuple] = {}

    def now(self) -> int:
        return self.broker.clock.monotonic_ms()

    def setting(self, gid: str, name: str) -> Any:
        store = self.broker.group_configs
        if store is not None:
            return store.get(gid, name)
        return self.broker.config.group_defaults()[name]

    def topic_view(self) -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        for t in self.broker.topics:
            if not t.name.startswith(INTERNAL_PREFIX):
                out[t.name] = (t.topic_id, len(t.partitions))
        return out

    # -- lifecycle ---------------------------------------------------------------------
    def after_load(self, p: int, shard: Any) -> None:
        now = self.now()
        for g in shard.consumer_groups.values():
            g.default_assignor = self.assignors[0]
            timeout = self.setting(g.group_id, "consumer.session.timeout.ms")
            for m in g.members.values():
                m.session_deadline_ms = now + timeout
                if m.revocation_deadline_ms is None and m.revoking:
                    m.revocation_deadline_ms = now + m.rebalance_timeout_ms
            self._arm(p, g)

    def find(self, gid: str) -> tuple[int, Any, ConsumerGroup]:
        if not gid:
            raise ErrorAnswer(ErrorCode.INVALID_GROUP_ID, "GroupId can't be empty.")
        p = self.runtime.partition_of(gid)
        shard = self.runtime.shard(p)
        g = shard.consumer_groups.get(gid)
        if g is None:
            raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        return p, shard, g

    # -- ConsumerGroupHeartbeat --------------------------------------------------------
    async def heartbeat(self, gid: str, params: HeartbeatParams) -> HeartbeatAnswer:
        interval = self.broker.config.get("group.consumer.heartbeat.interval.ms")
        pre: list = []
        converting = False
        upgraded: ConsumerGroup | None = None
        try:
            p = self.runtime.partition_of(gid)
            shard = self.runtime.shard(p)
            interval = self.setting(gid, "consumer.heartbeat.interval.ms")
            group = shard.consumer_groups.get(gid)
            if group is None:
                if gid in shard.share_groups:
                    raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
                classic = shard.groups.get(gid)
                if classic is not None and classic.members and params.member_epoch != 0:
                    raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
                if params.member_epoch != 0:
                    raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
                if classic is not None and classic.members:
                    upgraded = self._upgrade(classic)
                    group = shard.consumer_groups[gid] = upgraded
                else:
                    group = shard.consumer_groups[gid] = ConsumerGroup(gid, self.now(), self.assignors[0])
                converting = classic is not None
        except ErrorAnswer as e:
            return HeartbeatAnswer(e.code, e.message, params.member_id or None, params.member_epoch, interval)
        now = self.now()
        result: HeartbeatResult = group.heartbeat(
            params,
            self.topic_view(),
            now,
            self.setting(gid, "consumer.session.timeout.ms"),
            self.max_size,
            self.assignors.__contains__,
        )
        if upgraded is not None and result.error:
            shard.consumer_groups.pop(gid, None)  # a refused first heartbeat: the group stays classic
            return _answer(result, interval)
        if not group.members and group.group_epoch == 0 and not shard.consumer_images.get(gid):
            shard.consumer_groups.pop(gid, None)  # a failed first join leaves nothing behind
            return _answer(result, interval)
        if converting:  # the classic group goes now that the consumer group exists
            if upgraded is not None:
                self._retire_classic(shard, gid, now)
            pre = shard.convert_empty_classic(gid)
        elif params.member_epoch == LEAVE_EPOCH and not result.error and self._maybe_downgrade(p, group):
            fut = self.runtime.barrier(p)  # answered once the conversion is durable
            if fut is not None:
                try:
                    await fut
                except Exception:  # noqa: BLE001 - a failed write: the log directory is offline
                    return HeartbeatAnswer(ErrorCode.NOT_COORDINATOR, None, params.member_id, -1, interval)
            return _answer(result, interval)
        try:
            fut = self._persist(p, group, pre)
        except ErrorAnswer as e:
            return HeartbeatAnswer(e.code, e.message, params.member_id, params.member_epoch, interval)
        self._log_change(group)
        self._arm(p, group)
        if fut is not None:
            try:
                await fut
            except ErrorAnswer as e:
                return HeartbeatAnswer(e.code, None, params.member_id, params.member_epoch, interval)
            except Exception as e:  # noqa: BLE001 - cancelled at shutdown
                log.error("consumer group %s: persisting failed: %r", gid, e)
                return HeartbeatAnswer(ErrorCode.NOT_COORDINATOR, None, params.member_id, params.member_epoch, interval)
        return _answer(result, interval)

    def _persist(self, p: int, group: ConsumerGroup, pre: list | None = None) -> Any:
        if not group.dirty and not pre:
            return self.runtime.barrier(p)

        def op(shard: Any) -> tuple[list, None]:
            records, _ = shard.store_consumer_group(group)
            return list(pre or ()) + records, None

        _, fut = self.runtime.submit(p, op)
        return fut if fut is not None else self.runtime.barrier(p)

    def _log_change(self, g: ConsumerGroup) -> None:
        seen = (g.state, g.group_epoch, len(g.members))
        if self._last_seen.get(g.group_id) != seen:
            if self._last_seen.get(g.group_id, (None, 0))[1] != g.group_epoch:
                self.broker.stats.rebalance("consumer")
            self._last_seen[g.group_id] = seen
            log.info("consumer group %s: %s, epoch %d, %d members", g.group_id, g.state, g.group_epoch, len(g.members))

    # -- deadlines -----------------------------------------------------------------------
    def _arm(self, p: int, group: ConsumerGroup) -> None:
        gid = group.group_id
        deadline = group.next_deadline_ms()
        op = self.sessions.get(gid)
        if op is not None and not op.is_completed and deadline is not None and op.deadline <= deadline:
            return  # it fires early at worst, then re-arms
        if op is not None:
            del self.sessions[gid]
            self.groups.purgatory.check_and_complete(("consumer-session", gid))
        if deadline is not None:
            op = self.sessions[gid] = DelayedGroupSession(self, "consumer_groups", p, gid, deadline)
            self.groups.purgatory.try_complete_else_watch(op, [("consumer-session", gid)])

    def expire(self, op: DelayedGroupSession) -> None:
        gid, p = op.gid, op.partition
        if self.sessions.get(gid) is op:
            del self.sessions[gid]
        shard = self.runtime.shards.get(p)
        group = shard.consumer_groups.get(gid) if shard is not None else None
        if group is None:
            return
        gone = group.expire(self.now())
        for m in gone:
            log.info("consumer group %s: member %s removed (session or rebalance timeout)", gid, m)
        if gone and self._maybe_downgrade(p, group):
            return
        if gone:
            try:
                self._persist(p, group)
            except ErrorAnswer as e:
                log.error("consumer group %s: persisting expired members failed: %s", gid, e)
            self._log_change(group)
        self._arm(p, group)

    # -- offsets -------------------------------------------------------------------------
    def validate_commit(self, group: ConsumerGroup, member_id: str, epoch: int, api_version: int) -> int:
        """Kafka 4.2's checks of an OffsetCommit for a consumer group."""
        if epoch < 0 and not group.members:
            return ErrorCode.NONE  # an admin or standalone commit to an empty group
        m = group.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if api_version < 9 and m.classic is None:
            return ErrorCode.UNSUPPORTED_VERSION
        if epoch != m.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION if m.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    def validate_fetch(self, group: ConsumerGroup, member_id: str | None, epoch: int) -> int:
        if epoch < 0 and not member_id:
            return ErrorCode.NONE  # an admin fetch
        m = group.members.get(member_id or "")
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != m.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION if m.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # -- admin ---------------------------------------------------------------------------
    async def describe(self, gid: str) -> ConsumerGroup:
        p, _, g = self.find(gid)
        fut = self.runtime.barrier(p)
        if fut is not None:
            await fut
        return g

    def list_groups(self) -> list[ConsumerGroup]:
        return [g for shard in self.runtime.shards.values() for g in shard.consumer_groups.values()]

    async def delete_group(self, gid: str) -> int:
        try:
            p, _, g = self.find(gid)
        except ErrorAnswer as e:
            return e.code
        if g.members:
            return ErrorCode.NON_EMPTY_GROUP
        if self.sessions.pop(gid, None) is not None:
            self.groups.purgatory.check_and_complete(("consumer-session", gid))
        self._last_seen.pop(gid, None)
        try:
            await self.runtime.write(p, lambda s: s.delete_consumer_group(g, self.now()))
        except ErrorAnswer as e:
            return e.code
        log.info("consumer group %s deleted", gid)
        return ErrorCode.NONE

    def close(self) -> None:
        self.sessions.clear()

    # -- online migration (rules in migration.py) ---------------------------------------
    def _upgrade(self, classic: Any) -> ConsumerGroup:
        if not migration.can_upgrade(classic, self.policy, self.max_size):
            raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {classic.group_id} is not a consumer group.")
        try:
            return migration.from_classic(classic, self.topic_view(), self.now(), self.assignors[0])
        except migration.MigrationError as e:
            log.warning("classic group %s cannot be upgraded: %s", classic.group_id, e)
            raise ErrorAnswer(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade the classic group {classic.group_id} to consumer group because the embedded "
                "consumer protocol is malformed.",
            ) from e

    def _retire_classic(self, shard: Any, gid: str, now: int) -> None:
        """The upgraded classic group's waiting joins and syncs are told to rejoin; its timers go."""
        classic = shard.groups.get(gid)
        if classic is None:
            return
        classic.to_dead(now, ErrorCode.REBALANCE_IN_PROGRESS)
        self.groups._deliver(classic.take_outbox())
        self.groups._forget_group_timers(gid)
        log.info("classic group %s upgraded to a consumer group", gid)

    def _maybe_downgrade(self, p: int, group: ConsumerGroup) -> bool:
        """After a member was fenced: back to a classic group if every member left speaks classic."""
        if not migration.can_downgrade(group, self.policy, self.groups.settings.max_size):
            return False
        gid, now = group.group_id, self.now()
        names = {tid: name for name, (tid, _) in self.topic_view().items()}

        def op(shard: Any) -> tuple[list, Any]:
            if shard.consumer_groups.get(gid) is not group:
                return [], None
            records = consumer_records.tombstones(shard.consumer_images.get(gid, {}))
            del shard.consumer_groups[gid]
            group.mark_dead(now)
            classic = shard.group(gid, create=True)
            migration.to_classic(group, classic, names, now)
            classic.dirty = False
            records.append(shard.group_record(classic))
            return records, classic

        try:
            classic, _ = self.runtime.submit(p, op)
        except ErrorAnswer as e:
            log.error("consumer group %s: downgrade failed: %s", gid, e)
            return False
        if classic is None:
            return False
        if self.sessions.pop(gid, None) is not None:
            self.groups.purgatory.check_and_complete(("consumer-session", gid))
        self._last_seen.pop(gid, None)
        log.info("consumer group %s downgraded to a classic group", gid)
        self.groups.after(p, classic)
        return True

    def drop_empty(self, p: int, group: ConsumerGroup) -> bool:
        """A classic JoinGroup to an empty consumer group: the group goes (its offsets stay), as in Kafka."""
        gid, now = group.group_id, self.now()

        def op(shard: Any) -> tuple[list, bool]:
            if shard.consumer_groups.get(gid) is not group or group.members:
                return [], False
            del shard.consumer_groups[gid]
            group.mark_dead(now)
            return consumer_records.tombstones(shard.consumer_images.get(gid, {})), True

        try:
            dropped, _ = self.runtime.submit(p, op)
        except ErrorAnswer:
            return False
        if dropped:
            if self.sessions.pop(gid, None) is not None:
                self.groups.purgatory.check_and_complete(("consumer-session", gid))
            self._last_seen.pop(gid, None)
        return bool(dropped)

    # -- classic members of a consumer group -------------------------------------------
    async def classic_join(self, p: int, group: ConsumerGroup, params: JoinParams) -> JoinResult:
        result = migration.classic_join(group, params, self.topic_view(), self.now(), self.max_size)
        if result.error:
            return result
        try:
            fut = self._persist(p, group)
        except ErrorAnswer as e:
            return JoinResult(e.code, member_id=params.member_id)
        self._log_change(group)
        self._arm(p, group)
        if fut is not None:
            try:
                await fut
            except ErrorAnswer as e:
                return JoinResult(e.code, member_id=result.member_id)
            except Exception:  # noqa: BLE001 - cancelled at shutdown
                return JoinResult(ErrorCode.NOT_COORDINATOR, member_id=result.member_id)
        return result

    async def classic_sync(
        self,
        p: int,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        names = {tid: name for name, (tid, _) in self.topic_view().items()}
        result = migration.classic_sync(
            group, member_id, instance_id, generation, protocol_type, protocol_name, names, self.now()
        )
        if result.error:
            return result
        self._arm(p, group)
        fut = self.runtime.barrier(p)
        if fut is not None:
            try:
                await fut
            except Exception:  # noqa: BLE001 - a failed earlier write
                return SyncResult(ErrorCode.NOT_COORDINATOR)
        return result

    def classic_heartbeat(self, p: int, group: ConsumerGroup, member_id: str, iid: str | None, gen: int) -> int:
        error = migration.classic_heartbeat(group, member_id, iid, gen, self.now())
        self._arm(p, group)
        return error

    def classic_leave(self, p: int, group: ConsumerGroup, members: list[tuple[str, str | None]]) -> list[int]:
        errors = [migration.classic_leave(group, mid, iid, self.now()) for mid, iid in members]
        if group.dirty:
            try:
                self._persist(p, group)
            except ErrorAnswer as e:
                return [e.code for _ in members]
            self._log_change(group)
        self._arm(p, group)
        return errors


def _answer(r: HeartbeatResult, interval: int) -> HeartbeatAnswer:
    return HeartbeatAnswer(r.error, r.message, r.member_id, r.member_epoch, interval, r.assignment)
