"""The share-group side of the group coordinator: an asyncio shell over ShareGroup.

Share groups live in the same __consumer_offsets shards as classic groups
(the coordinator of a group id is the same whatever its type; one id names
one type). This shell turns ShareGroupHeartbeat, ShareGroupDescribe, the
share-offset admin APIs and DeleteGroups into calls on the sans-IO
:class:`~broker.share.group.ShareGroup`, and after each call

* writes the records that changed (``GroupShard.store_share_group``: the
  diff between the group and the image its records left, run as an
  operation by the coordinator runtime, which replays them into that image)
  and answers once they are durable -- an answer with no records of its own
  still waits for earlier writes of its partition (``runtime.barrier``);
* starts InitializeShareGroupState / DeleteShareGroupState calls on the
  share coordinator for partitions the group started or stopped using.
  They run after the heartbeat is answered (Kafka does the same: a slow
  share coordinator must not hold up heartbeats); their outcome is recorded
  and, for initializations, bumps the group epoch so the next heartbeat
  assigns the partitions;
* keeps one DelayedGroupSession per group in the coordinator's purgatory
  (watched under ("share-session", group)), due at the earliest member
  deadline. Heartbeats only push deadlines later, so a heartbeat never
  touches it: when it expires it removes whoever is due and re-arms at the
  next deadline. Only a member joining with an earlier deadline, or the
  group emptying, completes it early.

Group deadlines use the monotonic clock (the timer's). The assignment
interval (``share.assignment.interval.ms``) is measured in wall-clock time,
as the time of the last target computation is written with the target; no
timer runs for it: the first heartbeat after it ends computes the target.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.groups.heartbeats import INTERNAL_PREFIX, DelayedGroupSession, HeartbeatAnswer
from shoal.broker.groups.share.group import HeartbeatResult, InitState, ShareGroup
from shoal.protocol.errors import ErrorCode

log = logging.getLogger("shoal.share.groups")


class ShareGroupService:
    def __init__(self, broker: Any, groups: Any) -> None:
        self.broker = broker
        self.groups = groups  # the GroupCoordinator (its runtime holds the shards)
        self.runtime = groups.runtime
        cfg = broker.config
        self.max_size: int = cfg.get("group.share.max.size")
        self.retry_interval_ms: int = cfg.get("group.share.initialize.retry.interval.ms")
        self.sessions: dict[str, DelayedGroupSession] = {}
        self._tasks: set[asyncio.Task] = set()
        self._last_seen: dict[str, tuple] = {}
        self._counted_epoch: dict[str, int] = {}  # group epoch up to which rebalances were counted

    def now(self) -> int:
        return self.broker.clock.monotonic_ms()

    # -- settings per group ------------------------------------------------------------
    def setting(self, gid: str, name: str) -> Any:
        """A group-level setting (share.session.timeout.ms, ...): the group's override or the broker's."""
        store = self.broker.group_configs
        if store is not None:
            return store.get(gid, name)
        return self.broker.config.group_defaults()[name]

    # -- lifecycle -------------------------------------------------------------------------
    def after_load(self, p: int, shard: Any) -> None:
        """Partition p was (re)loaded: restored members must heartbeat within their session;
        stuck initializations retry."""
        now = self.now()
        for g in list(shard.share_groups.values()):
            self._counted_epoch[g.group_id] = g.group_epoch  # epochs of a restored group were counted before
            timeout = self.setting(g.group_id, "share.session.timeout.ms")
            for m in g.members.values():
                m.session_deadline_ms = now + timeout
            for st in g.initializing.values():
                st.timestamp_ms = now
            self._arm(p, g)
            if g.deleting:
                self._start_deletes(p, g, {t: InitState(n, frozenset()) for t, n in g.deleting.items()})

    def close(self) -> None:
        self.sessions.clear()
        for task in self._tasks:
            task.cancel()

    # -- routing -----------------------------------------------------------------------------
    def _route(self, gid: str) -> tuple[int, Any]:
        if not gid:
            raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        p = self.runtime.partition_of(gid)
        return p, self.runtime.shard(p)

    def find(self, gid: str) -> tuple[int, Any, ShareGroup]:
        """The share group `gid`, or GROUP_ID_NOT_FOUND (also when the id is a classic group)."""
        p, shard = self._route(gid)
        g = shard.share_groups.get(gid)
        if g is None:
            if gid in shard.groups:
                raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
            raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        return p, shard, g

    def find_or_create(self, gid: str) -> tuple[int, Any, ShareGroup, bool]:
        """The share group `gid`, created empty if no group has that id: (partition, shard, group, created).

        For AlterShareGroupOffsets: as in Kafka 4.2 (KAFKA-19662) an admin may
        seed a share group's offsets before its first member arrives. An id
        held by a classic group stays GROUP_ID_NOT_FOUND. A created group is
        only in memory until the caller persists it (or drops it with
        `drop_if_unused` when nothing was seeded).
        """
        p, shard = self._route(gid)
        g = shard.share_groups.get(gid)
        if g is not None:
            return p, shard, g, False
        if gid in shard.groups:
            raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
        g = shard.share_groups[gid] = ShareGroup(gid, self.now())
        g.dirty = True  # its ShareGroupMetadata record is what makes it exist after a restart
        return p, shard, g, True

    def drop_if_unused(self, shard: Any, g: ShareGroup) -> bool:
        """Forget a group `find_or_create` made if it still has nothing: no member, no record written."""
        if shard.share_groups.get(g.group_id) is not g or g.members or shard.share_images.get(g.group_id):
            return False
        if g.initialized or g.initializing or g.deleting:
            return False
        del shard.share_groups[g.group_id]
        return True

    def topic_view(self, names: Iterable[str]) -> dict[str, tuple[uuid.UUID, int]]:
        """Current metadata of the named topics that exist: name -> (topic id, partition count)."""
        out = {}
        topics = self.broker.topics
        for name in names:
            if name.startswith(INTERNAL_PREFIX):
                continue
            t = topics.get(name)
            if t is not None:
                out[name] = (t.topic_id, len(t.partitions))
        return out

    # -- persistence -------------------------------------------------------------------------
    def persist(self, p: int, group: ShareGroup) -> asyncio.Future | None:
        """Write what changed in `group`; a future for durability (None: nothing pending).

        Raises ErrorAnswer when the log refuses the write; the runtime then
        replays the shard from its log, so the change made to `group` is dropped with it.
        """
        if not group.dirty and not group.state_dirty:
            return self.runtime.barrier(p)  # a steady heartbeat: nothing to write
        _, fut = self.runtime.submit(p, lambda s: s.store_share_group(group))
        return fut if fut is not None else self.runtime.barrier(p)

    def _persist_quietly(self, p: int, group: ShareGroup, what: str) -> asyncio.Future | None:
        """persist() for background changes (expiry, topic deletion): a failure is logged."""
        try:
            return self.persist(p, group)
        except ErrorAnswer as e:
            log.error("share group %s: persisting %s failed: %s", group.group_id, what, e)
            return None

    def _log_change(self, g: ShareGroup) -> None:
        counted = self._counted_epoch.get(g.group_id, 0)
        if g.group_epoch < counted:  # deleted and created again under the id: a new group from epoch 0
            counted = 0
        if g.group_epoch > counted:  # each group-epoch bump is a share group's rebalance
            self._counted_epoch[g.group_id] = g.group_epoch
            self.broker.stats.rebalance("share", g.group_epoch - counted)
        seen = (g.state, g.group_epoch, len(g.members))
        if self._last_seen.get(g.group_id) != seen:
            self._last_seen[g.group_id] = seen
            log.info("share group %s: %s, epoch %d, %d members", g.group_id, g.state, g.group_epoch, len(g.members))

    # -- ShareGroupHeartbeat -----------------------------------------------------------------
    async def heartbeat(
        self,
        gid: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed: list[str] | None,
        client_id: str,
        client_host: str,
    ) -> HeartbeatAnswer:
        interval = self.broker.config.get("group.share.heartbeat.interval.ms")
        try:
            _validate(gid, member_id, member_epoch, rack_id, subscribed)
            p, shard = self._route(gid)
            interval = self.setting(gid, "share.heartbeat.interval.ms")
            group = shard.share_groups.get(gid)
            if group is None:
                if gid in shard.groups:
                    raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
                if member_epoch != 0:
                    raise ErrorAnswer(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
                group = shard.share_groups[gid] = ShareGroup(gid, self.now())
        except ErrorAnswer as e:
            return HeartbeatAnswer(e.code, e.message, member_id or None, member_epoch, interval)
        now = self.now()
        rejoined = member_epoch == 0 and member_id in group.members
        names = set(subscribed or ()) | group.subscribed_names()
        topics = self.topic_view(names)
        result: HeartbeatResult = group.heartbeat(
            member_id,
            member_epoch,
            rack_id,
            subscribed,
            topics,
            now,
            self.setting(gid, "share.session.timeout.ms"),
            self.max_size,
            client_id=client_id,
            client_host=client_host,
            assignment_interval_ms=self.setting(gid, "share.assignment.interval.ms"),
            wall_ms=self.broker.clock.now_ms(),
        )
        if result.error == ErrorCode.NONE and member_epoch in (-1, 0) and (member_epoch == -1 or rejoined):
            # A member that left, or rejoined after losing its state, gives back what it holds.
            self._member_gone(gid, member_id)
        inits: dict[uuid.UUID, InitState] = {}
        deletes: dict[uuid.UUID, InitState] = {}
        if result.error == ErrorCode.NONE:
            inits = group.to_initialize(topics, now, self.retry_interval_ms)
            if subscribed is not None and member_epoch != -1:
                # A subscription change may leave topics nobody reads: their state goes.
                # Leaving or expiring does not: an empty group keeps its offsets.
                deletes = group.to_delete(topics)
        if not group.members and not shard.share_images.get(gid) and group.group_epoch == 0:
            shard.share_groups.pop(gid, None)  # a failed first join leaves nothing behind
            return _answer(result, interval)
        try:
            durable = self.persist(p, group)
        except ErrorAnswer as e:  # nothing written; the group is replayed from the log as it was
            return HeartbeatAnswer(e.code, e.message, member_id or None, member_epoch, interval)
        self._log_change(group)
        self._arm(p, group)
        if durable is not None:
            try:
                await durable
            except ErrorAnswer as e:  # the write failed: the member must retry
                log.error("share group %s: persisting failed: %s", gid, e)
                return HeartbeatAnswer(e.code, None, member_id, member_epoch, interval)
            except Exception as e:  # noqa: BLE001 - cancelled at shutdown
                log.error("share group %s: persisting failed: %r", gid, e)
                return HeartbeatAnswer(ErrorCode.NOT_COORDINATOR, None, member_id, member_epoch, interval)
        if inits:
            self._start_inits(p, group, inits)
        if deletes:
            self._start_deletes(p, group, deletes)
        return _answer(result, interval)

    # -- share state initialization / deletion -----------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_inits(self, p: int, group: ShareGroup, inits: dict[uuid.UUID, InitState]) -> None:
        self._spawn(self._initialize(p, group, group.group_epoch, inits))

    async def _initialize(self, p: int, group: ShareGroup, epoch: int, inits: dict[uuid.UUID, InitState]) -> None:
        sc = self.broker.share_coordinator
        for tid, st in inits.items():
            parts = sorted(st.partitions)
            if sc is None:
                errors = [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(parts)
            else:
                errors = await asyncio.gather(*(sc.initialize(group.group_id, tid, i, epoch, -1) for i in parts))
            # A state already at this epoch or newer was initialized by an earlier attempt.
            ok = [i for i, e in zip(parts, errors) if e in (ErrorCode.NONE, ErrorCode.FENCED_STATE_EPOCH)]
            failed = [i for i, e in zip(parts, errors) if i not in ok]
            if failed:
                log.warning("share group %s: initializing %s %s failed: %s", group.group_id, st.name, failed, errors)
            if self._current(p, group) is None:
                return
            group.initialized_partitions(tid, st.name, ok)
            group.initialize_failed(tid, failed)
        await self._write_back(p, group)

    def _start_deletes(self, p: int, group: ShareGroup, deletes: dict[uuid.UUID, InitState]) -> None:
        self._spawn(self._delete_state(p, group, deletes))

    async def _delete_state(self, p: int, group: ShareGroup, deletes: dict[uuid.UUID, InitState]) -> None:
        sc = self.broker.share_coordinator
        done = []
        for tid, st in deletes.items():
            parts = sorted(st.partitions)
            if not parts:
                t = self.broker.topics.get(st.name)
                parts = list(range(len(t.partitions))) if t is not None and t.topic_id == tid else []
            if sc is not None and parts:
                errors = await asyncio.gather(*(sc.delete(group.group_id, tid, i) for i in parts))
                if any(errors):
                    log.warning("share group %s: deleting state of %s: %s", group.group_id, st.name, errors)
                    continue
            done.append(tid)
        if self._current(p, group) is None:
            return
        group.deleted_topics(done)
        await self._write_back(p, group)

    def _current(self, p: int, group: ShareGroup) -> Any:
        shard = self.runtime.shards.get(p)
        if shard is None or shard.share_groups.get(group.group_id) is not group:
            return None
        return shard

    async def _write_back(self, p: int, group: ShareGroup) -> None:
        shard = self._current(p, group)
        if shard is None:
            return
        fut = self._persist_quietly(p, group, "state partitions")
        self._log_change(group)
        if fut is not None:
            try:
                await fut
            except Exception as e:  # noqa: BLE001
                log.error("share group %s: persisting state partitions failed: %r", group.group_id, e)

    # -- session timeouts --------------------------------------------------------------------
    def _arm(self, p: int, group: ShareGroup) -> None:
        gid = group.group_id
        op = self.sessions.get(gid)
        if op is not None and not op.is_completed and group.members:
            return  # deadlines only move later: it expires early at worst, then re-arms
        deadline = group.next_deadline_ms()
        if op is not None:
            del self.sessions[gid]
            self.groups.purgatory.check_and_complete(("share-session", gid))
        if deadline is not None:
            op = self.sessions[gid] = DelayedGroupSession(self, "share_groups", p, gid, deadline)
            self.groups.purgatory.try_complete_else_watch(op, [("share-session", gid)])

    def expire(self, op: DelayedGroupSession) -> None:
        """A group's session operation ran out: remove the members that are due."""
        gid, p = op.gid, op.partition
        if self.sessions.get(gid) is op:
            del self.sessions[gid]
        shard = self.runtime.shards.get(p)
        group = shard.share_groups.get(gid) if shard is not None else None
        if group is None:
            return
        gone = group.expire(self.now())
        for m in gone:
            log.info("share group %s: member %s left (session timeout)", gid, m)
            self._member_gone(gid, m)
        if gone:
            self._persist_quietly(p, group, "expired members")
            self._log_change(group)
        self._arm(p, group)

    def _member_gone(self, gid: str, member_id: str) -> None:
        partitions = self.broker.share_partitions
        if partitions is not None:
            partitions.member_removed(gid, member_id)

    def on_topic_deleted(self, topic_id: uuid.UUID) -> None:
        """The share coordinator drops the topic's state; groups forget they initialized it."""
        for p, shard in self.runtime.shards.items():
            for g in shard.share_groups.values():
                if g.forget_offsets(topic_id) is not None:
                    self._persist_quietly(p, g, f"the deletion of topic {topic_id}")

    # -- admin -------------------------------------------------------------------------------
    async def describe(self, gid: str) -> ShareGroup:
        p, _, g = self.find(gid)
        fut = self.runtime.barrier(p)
        if fut is not None:
            await fut
        return g

    def list_groups(self) -> list[ShareGroup]:
        return [g for shard in self.runtime.shards.values() for g in shard.share_groups.values()]

    async def delete_group(self, gid: str) -> int:
        """DeleteGroups for a share group: it must be empty; its share state goes too."""
        try:
            p, shard, g = self.find(gid)
        except ErrorAnswer as e:
            return e.code
        if g.members:
            return ErrorCode.NON_EMPTY_GROUP
        sc = self.broker.share_coordinator
        if sc is not None:
            for tid, st in {**g.initializing, **g.initialized}.items():
                errors = await asyncio.gather(*(sc.delete(gid, tid, i) for i in sorted(st.partitions)))
                if any(errors):
                    return ErrorCode(errors[0]) if errors[0] else ErrorCode.UNKNOWN_SERVER_ERROR
        if shard.share_groups.get(gid) is not g or g.members:
            return ErrorCode.NON_EMPTY_GROUP  # someone joined while the state was deleted
        self.broker.share_partitions.forget(gid)
        if self.sessions.pop(gid, None) is not None:
            self.groups.purgatory.check_and_complete(("share-session", gid))
        self._last_seen.pop(gid, None)
        self._counted_epoch.pop(gid, None)
        try:
            await self.runtime.write(p, lambda s: s.delete_share_group(g, self.now()))
        except ErrorAnswer as e:
            return e.code  # the shard is replayed from its log: the group comes back as it was
        log.info("share group %s deleted", gid)
        return ErrorCode.NONE


def _validate(gid: str, member_id: str, epoch: int, rack_id: str | None, subscribed: list[str] | None) -> None:
    if not gid:
        raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if not member_id:
        raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    if rack_id is not None and not rack_id:
        raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
    if epoch < -1:
        raise ErrorAnswer(ErrorCode.INVALID_REQUEST, f"MemberEpoch {epoch} is invalid.")
    if epoch == 0 and not subscribed:
        raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")


def _answer(r: HeartbeatResult, interval: int) -> HeartbeatAnswer:
    message = None if r.error == ErrorCode.NONE else ErrorCode(r.error).name
    return HeartbeatAnswer(r.error, message, r.member_id, r.member_epoch, interval, r.assignment)
