"""One partition of __share_group_state: the durable state of share-partitions.

Why a shard of its own: a share-partition leader keeps its in-flight records
in memory, but which offsets are done, released or archived (and how often
each was delivered) must survive a leader change or a crash. The share
coordinator stores that per (group, topic id, partition) as event-sourced
records on its internal topic, run by the same CoordinatorRuntime as the
group coordinator: operations only validate and return records, `replay`
applies them, both live and at load.

Two record types keep writes small while bounding replay:

* ShareSnapshot (type 0) holds the full state and replaces whatever was there;
* ShareUpdate (type 1) holds only the ranges a write changed and is merged
  onto the current state.

After `snapshot_every` updates since the last snapshot the next write emits
a ShareSnapshot of the merged state instead (with the snapshot epoch + 1), so
a replay applies at most one snapshot plus that many updates per key
(`snapshot_every` 0: every write is a snapshot, as Kafka's setting allows).

Because each key's latest snapshot makes its earlier records redundant, the
shard remembers where that snapshot sits in the log: every record below the
lowest such offset over the live keys can be deleted without changing what a
replay rebuilds (`redundant_offset`). The share coordinator uses that to
advance the topic's log start instead of compacting it, as Kafka does.

Fencing: the state epoch is owned by the group coordinator (it initializes the
state and bumps the epoch when it resets it); the leader epoch is owned by the
partition leaders, and a read by a newer leader is recorded so that writes of
a deposed leader are refused.

Choices where Kafka's behaviour is a judgement call:

* Initialize with a state epoch <= the stored one is FENCED_STATE_EPOCH: an
  equal epoch would otherwise wipe live state on a retried initialization.
  A re-initialization keeps the stored leader epoch (a deposed leader stays
  fenced); a fresh one starts at -1.
* Reading a key that was never initialized answers state epoch 0, start
  offset -1, no batches, no error, and writes nothing.
* Writing a key that was never initialized creates it (a ShareSnapshot with
  snapshot epoch 0), as Kafka's shard did before 4.1. Since 4.1 Kafka refuses
  reads and writes of uninitialized keys (INVALID_REQUEST); the share
  coordinator applies that rule before calling the shard.
* DeliveryCompleteCount is a whole-partition figure computed by the leader:
  each write replaces it, so -1 ("unknown") overrides an older count.
* Batches are kept canonical: trimmed at the start offset and coalesced when
  adjacent with the same (state, count), so equal delivery states give equal
  batch lists whatever the write history.
"""

from __future__ import annotations

import bisect
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shoal.broker.coordinator.shard import Record
from shoal.protocol.constants import ACKNOWLEDGED, ARCHIVED, ARCHIVING, AVAILABLE
from shoal.protocol.coordinator_records import CoordinatorRecord, serde
from shoal.protocol.errors import ErrorCode

_SERDE = serde("share")
ShareSnapshotKey = _SERDE.key_class("ShareSnapshot")
ShareSnapshotValue = _SERDE.value_class("ShareSnapshot")
ShareUpdateKey = _SERDE.key_class("ShareUpdate")
ShareUpdateValue = _SERDE.value_class("ShareUpdate")

SNAPSHOT = "ShareSnapshot"
UPDATE = "ShareUpdate"

# Persisted delivery states (ACQUIRED is never persisted; ARCHIVING is KIP-1191's, Kafka's id 3).
VALID_DELIVERY_STATES = frozenset({AVAILABLE, ACKNOWLEDGED, ARCHIVING, ARCHIVED})

UNINITIALIZED_START_OFFSET = -1
DEFAULT_STATE_EPOCH = 0

# (first_offset, last_offset, delivery_state, delivery_count), inclusive range.
Batch = tuple[int, int, int, int]
StateKey = tuple[str, uuid.UUID, int]

_INT16_MAX = (1 << 15) - 1


@dataclass(slots=True)
class ShareState:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    delivery_complete_count: int = -1
    state_batches: list[Batch] = field(default_factory=list)
    updates_since_snapshot: int = 0
    # an update record exists in the log under this key (delete must tombstone it)
    has_update_records: bool = False
    # log offset of the latest ShareSnapshot of this key (-1: not known)
    snapshot_offset: int = -1


@dataclass(slots=True)
class ReadResult:
    state_epoch: int
    start_offset: int
    batches: list[Batch]
    error: ErrorCode = ErrorCode.NONE


@dataclass(slots=True)
class SummaryResult:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    error: ErrorCode = ErrorCode.NONE


def _as_batch(b: Any) -> Batch:
    if isinstance(b, tuple):
        f, last, s, c = b
        return (int(f), int(last), int(s), int(c))
    return (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)


def valid_batches(batches: Sequence[Batch]) -> bool:
    """Ranges well formed, sorted, non-overlapping; persisted states only."""
    prev_last = -1
    for i, (first, last, state, count) in enumerate(batches):
        if first < 0 or first > last or state not in VALID_DELIVERY_STATES:
            return False
        if not 0 <= count <= _INT16_MAX:
            return False
        if i and first <= prev_last:
            return False
        prev_last = last
    return True


def merge_batches(current: Sequence[Batch], update: Sequence[Batch], start_offset: int) -> list[Batch]:
    """Overlay `update` onto `current`, drop what lies below `start_offset`
    (-1: nothing), coalesce equal neighbours. Both inputs are sorted and
    non-overlapping; so is the result."""
    update = sorted(update)
    lasts = [u[1] for u in update]
    out: list[Batch] = []
    for first, last, state, count in current:
        cur = first
        i = bisect.bisect_left(lasts, first)  # first update batch ending at or after `first`
        while i < len(update) and cur <= last:
            uf, ul = update[i][0], update[i][1]
            if uf > last:
                break
            if uf > cur:
                out.append((cur, uf - 1, state, count))
            cur = max(cur, ul + 1)
            i += 1
        if cur <= last:
            out.append((cur, last, state, count))
    out.extend(update)
    out.sort()
    result: list[Batch] = []
    for first, last, state, count in out:
        if start_offset >= 0:
            if last < start_offset:
                continue
            first = max(first, start_offset)
        if result:
            pf, pl, ps, pc = result[-1]
            if pl + 1 == first and ps == state and pc == count:
                result[-1] = (pf, last, ps, pc)
                continue
        result.append((first, last, state, count))
    return result


class ShareStateShard:
    """Sans-IO state of one __share_group_state partition.

    Operations return `(records, result)` and do not change the shard; the
    runtime appends the records and replays them.
    """

    def __init__(
        self,
        partition: int,
        snapshot_every: int = 500,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if snapshot_every < 0:
            raise ValueError("snapshot_every must be >= 0")
        self.partition = partition
        self.snapshot_every = snapshot_every
        self.now_ms = now_ms
        self.states: dict[StateKey, ShareState] = {}

    def state(self, group: str, topic_id: uuid.UUID, partition: int) -> ShareState | None:
        return self.states.get((group, topic_id, partition))

    # -- replay ----------------------------------------------------------------
    def replay(self, record: CoordinatorRecord, offset: int) -> None:
        name = record.type.name
        k = record.key
        key: StateKey = (k.group_id, k.topic_id, k.partition)
        v = record.value
        if v is None:
            self.states.pop(key, None)
            return
        if name == SNAPSHOT:
            old = self.states.get(key)
            self.states[key] = ShareState(
                snapshot_epoch=v.snapshot_epoch,
                state_epoch=v.state_epoch,
                leader_epoch=v.leader_epoch,
                start_offset=v.start_offset,
                create_timestamp=v.create_timestamp,
                write_timestamp=v.write_timestamp,
                delivery_complete_count=v.delivery_complete_count,
                state_batches=[_as_batch(b) for b in v.state_batches],
                updates_since_snapshot=0,
                has_update_records=old.has_update_records if old is not None else False,
                snapshot_offset=offset,
            )
        elif name == UPDATE:
            cur = self.states.get(key)
            batches = [_as_batch(b) for b in v.state_batches]
            if cur is None:
                # an update without a snapshot (should not happen): start from it
                cur = ShareState(v.snapshot_epoch, DEFAULT_STATE_EPOCH, -1, UNINITIALIZED_START_OFFSET, 0, 0)
                cur.snapshot_offset = offset  # nothing before it is known to matter
                self.states[key] = cur
            start = v.start_offset if v.start_offset != -1 else cur.start_offset
            cur.state_batches = merge_batches(cur.state_batches, batches, start)
            cur.start_offset = start
            if v.leader_epoch != -1:
                cur.leader_epoch = v.leader_epoch
            cur.delivery_complete_count = v.delivery_complete_count
            cur.updates_since_snapshot += 1
            cur.has_update_records = True

    def redundant_offset(self, log_end_offset: int) -> int:
        """The lowest log offset a replay still needs: every record below it is
        superseded by a later ShareSnapshot of its key, or belongs to a deleted
        key. With no live key, everything up to `log_end_offset` is."""
        return min((s.snapshot_offset for s in self.states.values()), default=log_end_offset)

    # -- records ---------------------------------------------------------------
    @staticmethod
    def _snapshot_record(key: StateKey, s: ShareState) -> Record:
        group, topic_id, partition = key
        value = ShareSnapshotValue(
            snapshot_epoch=s.snapshot_epoch,
            state_epoch=s.state_epoch,
            leader_epoch=s.leader_epoch,
            start_offset=s.start_offset,
            delivery_complete_count=s.delivery_complete_count,
            create_timestamp=s.create_timestamp,
            write_timestamp=s.write_timestamp,
            state_batches=[ShareSnapshotValue.StateBatch(*b) for b in s.state_batches],
        )
        return Record(SNAPSHOT, ShareSnapshotKey(group, topic_id, partition), value)

    def _state_record(
        self,
        key: StateKey,
        cur: ShareState,
        leader_epoch: int,
        start_offset: int,
        batches: Sequence[Batch],
        delivery_complete_count: int,
    ) -> Record:
        """A ShareUpdate for this change, or a merged ShareSnapshot when due."""
        if cur.updates_since_snapshot >= self.snapshot_every:
            start = start_offset if start_offset != -1 else cur.start_offset
            merged = ShareState(
                snapshot_epoch=cur.snapshot_epoch + 1,
                state_epoch=cur.state_epoch,
                leader_epoch=leader_epoch,
                start_offset=start,
                create_timestamp=cur.create_timestamp,
                write_timestamp=self.now_ms(),
                delivery_complete_count=delivery_complete_count,
                state_batches=merge_batches(cur.state_batches, batches, start),
            )
            return self._snapshot_record(key, merged)
        group, topic_id, partition = key
        value = ShareUpdateValue(
            snapshot_epoch=cur.snapshot_epoch,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            delivery_complete_count=delivery_complete_count,
            state_batches=[ShareUpdateValue.StateBatch(*b) for b in batches],
        )
        return Record(UPDATE, ShareUpdateKey(group, topic_id, partition), value)

    # -- operations ------------------------------------------------------------
    def initialize(
        self, group: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start_offset: int
    ) -> tuple[list[Record], ErrorCode]:
        """InitializeShareGroupState: (re)start the state at a new state epoch."""
        if start_offset < -1:
            return [], ErrorCode.INVALID_REQUEST
        key: StateKey = (group, topic_id, partition)
        cur = self.states.get(key)
        if cur is not None and cur.state_epoch >= state_epoch:
            return [], ErrorCode.FENCED_STATE_EPOCH
        now = self.now_ms()
        state = ShareState(
            snapshot_epoch=0 if cur is None else cur.snapshot_epoch + 1,
            state_epoch=state_epoch,
            leader_epoch=-1 if cur is None else cur.leader_epoch,
            start_offset=start_offset,
            create_timestamp=now,
            write_timestamp=now,
            delivery_complete_count=0,
        )
        return [self._snapshot_record(key, state)], ErrorCode.NONE

    def read(
        self, group: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> tuple[list[Record], ReadResult]:
        """ReadShareGroupState: the state, recording a newer leader epoch."""
        key: StateKey = (group, topic_id, partition)
        cur = self.states.get(key)
        if cur is None:
            return [], ReadResult(DEFAULT_STATE_EPOCH, UNINITIALIZED_START_OFFSET, [])
        if leader_epoch != -1 and leader_epoch < cur.leader_epoch:
            return [], ReadResult(0, UNINITIALIZED_START_OFFSET, [], ErrorCode.FENCED_LEADER_EPOCH)
        result = ReadResult(cur.state_epoch, cur.start_offset, list(cur.state_batches))
        if leader_epoch == -1 or leader_epoch == cur.leader_epoch:
            return [], result
        record = self._state_record(key, cur, leader_epoch, cur.start_offset, [], cur.delivery_complete_count)
        return [record], result

    def write(
        self,
        group: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Iterable[Any],
        delivery_complete_count: int = -1,
    ) -> tuple[list[Record], ErrorCode]:
        """WriteShareGroupState: merge changed ranges (and a new start offset)."""
        batch_list = [_as_batch(b) for b in batches]
        if start_offset < -1 or not valid_batches(batch_list):
            return [], ErrorCode.INVALID_REQUEST
        key: StateKey = (group, topic_id, partition)
        cur = self.states.get(key)
        if cur is None:
            now = self.now_ms()
            state = ShareState(
                snapshot_epoch=0,
                state_epoch=state_epoch,
                leader_epoch=leader_epoch,
                start_offset=start_offset,
                create_timestamp=now,
                write_timestamp=now,
                delivery_complete_count=delivery_complete_count,
                state_batches=merge_batches([], batch_list, start_offset),
            )
            return [self._snapshot_record(key, state)], ErrorCode.NONE
        if state_epoch < cur.state_epoch:
            return [], ErrorCode.FENCED_STATE_EPOCH
        if leader_epoch != -1 and leader_epoch < cur.leader_epoch:
            return [], ErrorCode.FENCED_LEADER_EPOCH
        new_leader_epoch = cur.leader_epoch if leader_epoch == -1 else leader_epoch
        record = self._state_record(key, cur, new_leader_epoch, start_offset, batch_list, delivery_complete_count)
        return [record], ErrorCode.NONE

    def delete(self, group: str, topic_id: uuid.UUID, partition: int) -> tuple[list[Record], ErrorCode]:
        """DeleteShareGroupState: tombstones for each record key the state used."""
        cur = self.states.get((group, topic_id, partition))
        if cur is None:
            return [], ErrorCode.NONE
        records = [Record(SNAPSHOT, ShareSnapshotKey(group, topic_id, partition), None)]
        if cur.has_update_records:
            records.append(Record(UPDATE, ShareUpdateKey(group, topic_id, partition), None))
        return records, ErrorCode.NONE

    def delete_topic(self, topic_id: uuid.UUID) -> tuple[list[Record], None]:
        """A topic was deleted: tombstones for the state of each of its share-partitions here."""
        records: list[Record] = []
        for group, tid, partition in [k for k in self.states if k[1] == topic_id]:
            records += self.delete(group, tid, partition)[0]
        return records, None

    def read_summary(
        self, group: str, topic_id: uuid.UUID, partition: int, leader_epoch: int = -1
    ) -> tuple[list[Record], SummaryResult]:
        """ReadShareGroupStateSummary: epochs, start offset and completed count (writes nothing)."""
        cur = self.states.get((group, topic_id, partition))
        if cur is None:
            return [], SummaryResult(DEFAULT_STATE_EPOCH, -1, UNINITIALIZED_START_OFFSET, -1)
        if leader_epoch != -1 and leader_epoch < cur.leader_epoch:
            return [], SummaryResult(0, -1, UNINITIALIZED_START_OFFSET, -1, ErrorCode.FENCED_LEADER_EPOCH)
        return [], SummaryResult(cur.state_epoch, cur.leader_epoch, cur.start_offset, cur.delivery_complete_count)
