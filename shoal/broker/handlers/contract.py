"""The broker as its handlers see it: a Protocol naming every part of it they use.

Why a Protocol rather than the class: ``shoal.broker.broker`` sits above the
handlers in the layers contract (it imports the handler table), so a handler
may not import ``Broker``, not even for type checking (import-linter counts
those imports too). Naming the parts here, with their real classes, lets mypy
check the handlers and lets a reader follow a call from a handler into the
share-partition manager, the group coordinator or the topic table.

The attributes have the types they hold once the broker has started: the real
``Broker`` leaves them None until then, and requests are dispatched only after.
``share_coordinator`` stays None when share groups are turned off, and handlers
check for that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shoal.broker.config.group_configs import GroupConfigs
    from shoal.broker.config.settings import BrokerConfig
    from shoal.broker.groups.coordinator import GroupCoordinator
    from shoal.broker.handlers import HandlerTable
    from shoal.broker.log.flusher import Flusher
    from shoal.broker.metrics.counters import BrokerStats
    from shoal.broker.net.contract import RequestContext
    from shoal.broker.partition.fetch_session import FetchSessionCache
    from shoal.broker.partition.partition import Partition
    from shoal.broker.partition.producer_ids import ProducerIdManager
    from shoal.broker.partition.topics import TopicManager
    from shoal.broker.security.authenticator import SaslServer
    from shoal.broker.security.authorizer import Authorizer
    from shoal.broker.share.partition_manager import SharePartitionManager
    from shoal.broker.share_coordinator.service import ShareCoordinator
    from shoal.broker.timing.clock import Clock
    from shoal.broker.timing.purgatory import Purgatory

__all__ = ["Broker"]


class Broker(Protocol):
    """What a handler may use of ``shoal.broker.broker.Broker``."""

    # who and where this node is (Metadata, FindCoordinator, DescribeCluster)
    node_id: int
    cluster_id: str
    host: str
    port: int
    config: BrokerConfig
    clock: Clock

    def endpoint(self, ctx: RequestContext) -> tuple[str, int]: ...  # this node, as ctx's listener advertises it

    handlers: HandlerTable  # ApiVersions answers from the same table that dispatches
    stats: BrokerStats  # counters behind /metrics, bumped where things happen

    # topics, their partitions and what waits on them
    topics: TopicManager
    fetch_purgatory: Purgatory
    fetch_sessions: FetchSessionCache
    flusher: Flusher
    producer_ids: ProducerIdManager

    # groups: classic and share membership, committed offsets, share-group state, share partitions
    groups: GroupCoordinator
    group_configs: GroupConfigs
    share_coordinator: ShareCoordinator | None
    share_partitions: SharePartitionManager

    # ACLs: None when authorizer.class.name is empty (no authorization: every check passes)
    authorizer: Authorizer | None

    def save_acls(self) -> None:
        """Write the authorizer's bindings durably (raises if the write fails)."""
        ...

    sasl: SaslServer  # SASL listeners' settings and the SCRAM credentials

    def on_append(self, partition: Partition) -> None:
        """Records were appended to `partition`: wake the fetches waiting on it."""
        ...

    def delete_topic(self, name: str) -> None:
        """Delete topic `name` and everything that waits on or refers to it."""
        ...
