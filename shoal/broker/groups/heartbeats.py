"""What share groups (KIP-932) and consumer groups (KIP-848) share around their heartbeats.

Both protocols answer a heartbeat with the same facts and expire members the same way: one
delayed operation per group in the purgatory, due at the group's next session (or
revocation) deadline, replaced whenever that deadline moves. Only where the group lives in
the shard differs, so the two services name that attribute and share the rest.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from shoal.broker.timing.purgatory import DelayedOperation

INTERNAL_PREFIX: Final = "__"  # internal topics: never subscribed, never assigned


@dataclass(slots=True)
class HeartbeatAnswer:
    error: int
    message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Mapping[uuid.UUID, Collection[int]] | None = None


class DelayedGroupSession(DelayedOperation):
    """Expire the members of one group whose session (or revocation) ran out.

    ``groups`` names the shard's mapping of this group's type (``share_groups``,
    ``consumer_groups``); ``service`` has ``now()``, ``runtime``, ``sessions`` (group id ->
    its current operation) and ``expire(op)``.
    """

    __slots__ = ("deadline", "gid", "groups", "partition", "service")

    def __init__(self, service: Any, groups: str, partition: int, gid: str, deadline: int) -> None:
        super().__init__(max(0, deadline - service.now()))
        self.service, self.groups, self.partition, self.gid, self.deadline = service, groups, partition, gid, deadline

    def try_complete(self) -> bool:
        shard = self.service.runtime.shards.get(self.partition)
        g = getattr(shard, self.groups).get(self.gid) if shard is not None else None
        if g is None or self.service.sessions.get(self.gid) is not self:
            return self.force_complete()  # the group went away, or a newer operation took over
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.service.expire(self)
