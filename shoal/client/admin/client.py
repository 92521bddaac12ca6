"""AsyncAdmin: topics, configs, consumer groups and share groups, over asyncio.

    async with AsyncAdmin(bootstrap_servers="127.0.0.1:9092") as admin:
        res = await admin.create_topics([NewTopic("orders", 3)])
        raise_for_errors(res)

**Result convention.** A call that acts on several entities (topics, groups,
config resources, partitions) returns a ``dict`` with one entry per entity
asked about, in the order asked: the entity's result, or ``None`` for a
change that has nothing to return, or the ``BrokerResponseError`` that entity
failed with (its ``name`` is Kafka's, e.g. ``TOPIC_ALREADY_EXISTS``, and its
message names the entity). One bad entity therefore never hides what
happened to the others; ``raise_for_errors(results)`` turns the first failure
into an exception for callers that want all-or-nothing. Errors about the
whole request raise: no broker reachable (``KafkaConnectionError``), time
out (``KafkaTimeoutError``), a broker too old for the call
(``UnsupportedVersionError``), and errors about the one group a group call
targets (``GROUP_ID_NOT_FOUND``, ``NON_EMPTY_GROUP``, ``UNKNOWN_MEMBER_ID``
when altering a group that has members, ...) as ``BrokerResponseError``.

**Routing.** Topic administration (CreateTopics, DeleteTopics,
CreatePartitions) goes to the controller named in metadata when known, else
to any broker (KRaft brokers forward it); config calls go to any broker,
except BROKER resources, which go to that broker. Group and share-group
calls go to the group's coordinator (FindCoordinator, cached and re-found on
NOT_COORDINATOR by ``ClientCore.coordinator_call``); ListGroups asks every
broker; ListOffsets asks each partition's leader.

**Retries.** Lost connections and retriable request errors are retried with
exponential backoff until ``default.api.timeout.ms`` (or the call's
``timeout_ms``). Per-entity errors are retried only where Kafka's Admin does
(NOT_CONTROLLER and THROTTLING_QUOTA_EXCEEDED for topic changes, a topic
without a leader yet, a moved partition leader for ListOffsets, a
coordinator that is loading or moved); everything else is final at once.

The request/response translation lives in ``client.admin.protocol``
(sans-IO); this module only routes, sends and waits.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Mapping
from typing import Any, TypeVar

from shoal.client.admin import acls as A
from shoal.client.admin import group_protocol as G
from shoal.client.admin import protocol as P
from shoal.client.admin import scram as S
from shoal.client.admin.consumer_protocol import (
    ConsumerProtocolGroupDescription,
    build_consumer_group_describe,
    parse_consumer_group_describe,
)
from shoal.client.admin.types import (
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConsumerGroupDescription,
    GroupListing,
    ListOffsetsResult,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    ResourceType,
    ShareGroupDescription,
    SharePartitionOffsetInfo,
    TopicDescription,
    TopicListing,
)
from shoal.client.core.client_core import Backoff, ClientCore
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.config import build_config
from shoal.client.core.errors import BrokerResponseError, KafkaConnectionError, KafkaTimeoutError
from shoal.protocol.constants import IsolationLevel
from shoal.protocol.errors import ErrorCode

__all__ = [
    "AlterConfigOp",
    "AsyncAdmin",
    "ConfigResource",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "ResourceType",
    "first_error",
    "raise_for_errors",
]

K = TypeVar("K", bound=Hashable)
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_GRACE_S = 0.5  # the hard cap sits this far past the deadline the call's own retries aim for

_ISOLATION = {"read_uncommitted": IsolationLevel.READ_UNCOMMITTED, "read_committed": IsolationLevel.READ_COMMITTED}


def first_error(results: Mapping[Any, Any]) -> BrokerResponseError | None:
    """The first per-entity error in a result dict (None when everything succeeded)."""
    for v in results.values():
        if isinstance(v, BaseException):
            return v  # type: ignore[return-value]
    return None


def raise_for_errors(results: Mapping[Any, Any]) -> None:
    """Raise the first per-entity error of a result dict; a note lists how many others failed."""
    errors = [v for v in results.values() if isinstance(v, BaseException)]
    if errors:
        first = errors[0]
        if len(errors) > 1:
            first.add_note(f"{len(errors) - 1} more of {len(results)} failed: " + "; ".join(map(str, errors[1:6])))
        raise first


def _bounded(fn: F) -> F:
    """Hard-cap a call at its ``timeout_ms`` (default.api.timeout.ms): whatever waits inside
    (a coordinator lookup with retries of its own, a broker that stopped answering), the call
    ends with KafkaTimeoutError shortly after its deadline, never later."""

    @functools.wraps(fn)
    async def wrapper(self: AsyncAdmin, *args: Any, **kwargs: Any) -> Any:
        t = kwargs.get("timeout_ms")
        limit = self.config["default.api.timeout.ms"] if t is None else t
        started = time.monotonic()
        self._core.last_retry_error = None
        try:
            async with asyncio.timeout(limit / 1000 + _GRACE_S):
                return await fn(self, *args, **kwargs)
        except TimeoutError as e:
            if isinstance(e, KafkaTimeoutError):
                raise
            last = self._core.last_retry_error
            elapsed = (time.monotonic() - started) * 1000
            cause = f"; last error: {last}" if last is not None else "; no answer came"
            raise KafkaTimeoutError(
                f"{fn.__name__} did not finish in {elapsed:.0f} ms (timeout {limit:.0f} ms){cause}"
            ) from None

    return wrapper  # type: ignore[return-value]


class AsyncAdmin:
    """Kafka administration over asyncio; use as ``async with AsyncAdmin(...) as admin``.

    Settings are Kafka's admin client settings (``bootstrap.servers``,
    ``client.id``, ``request.timeout.ms``, ``default.api.timeout.ms``,
    ``retry.backoff.ms``, ...), as a mapping and/or keyword arguments with
    underscores. See the module docstring for the result convention.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = build_config("admin", config, kwargs)
        self._core = ClientCore(self.config)

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        await self._core.start()

    async def close(self) -> None:
        await self._core.close()

    async def __aenter__(self) -> AsyncAdmin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def core(self) -> ClientCore:
        return self._core

    # -- plumbing ------------------------------------------------------------------------
    def _deadline(self, timeout_ms: float | None) -> float:
        t = self.config["default.api.timeout.ms"] if timeout_ms is None else timeout_ms
        return self._core.now_ms() + t

    def _remaining(self, deadline: float) -> float:
        return max(deadline - self._core.now_ms(), 0.0)

    def _wire_timeout(self, deadline: float) -> int:
        """The broker-side timeout field of a request: what is left, within one request timeout."""
        return int(max(1, min(self._remaining(deadline), self.config["request.timeout.ms"])))

    async def _any(self, api: str, body: Any, deadline: float) -> Any:
        """One request to any broker, retried while retriable until the deadline."""
        return await self._core.retry(
            lambda: self._core.send_any(api, body), timeout_ms=self._remaining(deadline), what=api
        )

    async def _to_node(self, node: int, api: str, body: Any, deadline: float) -> Any:
        return await self._core.retry(
            lambda: self._core.send(node, api, body), timeout_ms=self._remaining(deadline), what=f"{api} to {node}"
        )

    async def _controller_call(self, api: str, body: Any, deadline: float) -> Any:
        async def once() -> Any:
            node = self._core.metadata.controller_id
            if node < 0 or self._core.metadata.broker(node) is None:
                return await self._core.send_any(api, body)
            return await self._core.send(node, api, body)

        return await self._core.retry(once, timeout_ms=self._remaining(deadline), what=api)

    async def _batch(
        self,
        keys: Iterable[K],
        retry_codes: Collection[int],
        round_: Callable[[list[K]], Awaitable[Mapping[K, Any]]],
        deadline: float,
        *,
        on_retry: Callable[[], Awaitable[None]] | None = None,
    ) -> dict[K, Any]:
        """Run ``round_`` on the pending keys until each has a final answer or time runs out."""
        batch: P.EntityBatch[K] = P.EntityBatch(list(keys), retry_codes)
        backoff = Backoff(self.config["retry.backoff.ms"], self.config["retry.backoff.max.ms"])
        while not batch.done:
            asked = batch.start_round()
            for k, v in (await round_(asked)).items():
                batch.record(k, v)
            batch.end_round()
            if batch.done:
                break
            pause = backoff.next_ms()
            if self._core.now_ms() + pause >= deadline:
                batch.give_up(KafkaTimeoutError("no answer from the broker in time"))
                break
            if on_retry is not None:
                await on_retry()
            await asyncio.sleep(pause / 1000)
        return batch.outcome()

    async def _group_call(
        self,
        group: str,
        api: str,
        body: Any,
        error_of: Callable[[Any], int],
        deadline: float,
        *,
        max_version: int | None = None,
    ) -> Any:
        return await self._core.coordinator_call(
            group, api, body, error_of=error_of, timeout_ms=self._remaining(deadline), max_version=max_version
        )

    async def _per_group(self, groups: Iterable[str], one: Callable[[str], Awaitable[Any]]) -> dict[str, Any]:
        """Run ``one`` for each group concurrently; a BrokerResponseError becomes that group's result."""
        names = list(dict.fromkeys(groups))
        done = await asyncio.gather(*(one(g) for g in names), return_exceptions=True)
        out: dict[str, Any] = {}
        for g, r in zip(names, done):
            if isinstance(r, BaseException) and not isinstance(r, BrokerResponseError):
                raise r
            out[g] = r
        return out

    # -- cluster -------------------------------------------------------------------------
    @_bounded
    async def describe_cluster(self, *, timeout_ms: float | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers: DescribeCluster, or Metadata from brokers without it."""
        deadline = self._deadline(timeout_ms)

        async def once() -> ClusterDescription:
            node = self._core.least_loaded_node()
            if node is None:
                raise KafkaConnectionError("no broker known")
            conn = await self._core.connection(node)
            if conn.supports("DescribeCluster"):
                return P.parse_describe_cluster(await conn.request("DescribeCluster", P.build_describe_cluster()))
            return P.parse_cluster_from_metadata(await conn.request("Metadata", P.build_metadata([])))

        return await self._core.retry(once, timeout_ms=self._remaining(deadline), what="DescribeCluster")

    # -- topics --------------------------------------------------------------------------
    @_bounded
    async def list_topics(
        self, *, include_internal: bool = False, timeout_ms: float | None = None
    ) -> dict[str, TopicListing]:
        """Every topic (internal ones only when asked), sorted by name."""
        resp = await self._any("Metadata", P.build_metadata(None), self._deadline(timeout_ms))
        return P.parse_topic_listings(resp, include_internal)

    @_bounded
    async def describe_topics(
        self, topics: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, TopicDescription | BrokerResponseError]:
        """Partitions, leaders, replicas and topic ids; unknown topics get UNKNOWN_TOPIC_OR_PARTITION."""
        deadline = self._deadline(timeout_ms)

        async def round_(names: list[str]) -> Mapping[str, Any]:
            resp = await self._any("Metadata", P.build_metadata(names), deadline)
            return P.parse_topic_descriptions(resp, names)

        return await self._batch(topics, P.DESCRIBE_TOPIC_RETRY, round_, deadline)

    @_bounded
    async def create_topics(
        self, topics: Iterable[NewTopic], *, validate_only: bool = False, timeout_ms: float | None = None
    ) -> dict[str, BrokerResponseError | None]:
        """Create topics (``validate_only``: check only). None per topic created."""
        deadline = self._deadline(timeout_ms)
        wanted = {t.name: t for t in topics}

        async def round_(names: list[str]) -> Mapping[str, Any]:
            body = P.build_create_topics([wanted[n] for n in names], validate_only, self._wire_timeout(deadline))
            return P.parse_create_topics(await self._controller_call("CreateTopics", body, deadline))

        return await self._batch(wanted, P.TOPIC_ADMIN_RETRY, round_, deadline, on_retry=self._refresh)

    @_bounded
    async def delete_topics(
        self, topics: Iterable[str | uuid.UUID], *, timeout_ms: float | None = None
    ) -> dict[str | uuid.UUID, BrokerResponseError | None]:
        """Delete topics by name, or by topic id (``uuid.UUID``, DeleteTopics v6+)."""
        deadline = self._deadline(timeout_ms)

        async def round_(keys: list[str | uuid.UUID]) -> Mapping[str | uuid.UUID, Any]:
            body = P.build_delete_topics(keys, self._wire_timeout(deadline))
            return P.parse_delete_topics(await self._controller_call("DeleteTopics", body, deadline), keys)

        return await self._batch(topics, P.TOPIC_ADMIN_RETRY, round_, deadline, on_retry=self._refresh)

    @_bounded
    async def create_partitions(
        self, new_totals: Mapping[str, int], *, validate_only: bool = False, timeout_ms: float | None = None
    ) -> dict[str, BrokerResponseError | None]:
        """Grow topics to ``new_totals[topic]`` partitions in all."""
        deadline = self._deadline(timeout_ms)
        totals = dict(new_totals)

        async def round_(names: list[str]) -> Mapping[str, Any]:
            body = P.build_create_partitions({n: totals[n] for n in names}, validate_only, self._wire_timeout(deadline))
            return P.parse_create_partitions(await self._controller_call("CreatePartitions", body, deadline))

        return await self._batch(totals, P.TOPIC_ADMIN_RETRY, round_, deadline, on_retry=self._refresh)

    async def _refresh(self) -> None:
        try:
            await self._core.refresh_metadata()
        except (KafkaConnectionError, KafkaTimeoutError):
            pass

    @_bounded
    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, int],
        *,
        isolation_level: str = "read_uncommitted",
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, ListOffsetsResult | BrokerResponseError]:
        """Offsets by ``OffsetSpec`` (EARLIEST, LATEST, MAX_TIMESTAMP) or by timestamp in ms.

        For a timestamp after the last record the result's offset is -1 (as in Kafka).
        """
        if isolation_level not in _ISOLATION:
            raise ValueError(f"isolation_level must be one of {sorted(_ISOLATION)}")
        deadline = self._deadline(timeout_ms)
        wanted = dict(specs)

        async def round_(tps: list[TopicPartition]) -> Mapping[TopicPartition, Any]:
            out: dict[TopicPartition, Any] = {}
            topics = sorted({tp.topic for tp in tps})
            described = await self.describe_topics(topics, timeout_ms=self._remaining(deadline))
            by_leader: dict[int, dict[TopicPartition, int]] = {}
            for tp in tps:
                d = described.get(tp.topic)
                if not isinstance(d, TopicDescription):
                    out[tp] = P.entity_error(d.code, None, str(tp)) if isinstance(d, BrokerResponseError) else d
                    continue
                part = next((p for p in d.partitions if p.partition == tp.partition), None)
                if part is None:  # final: the topic exists without this partition
                    out[tp] = P.entity_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no such partition", str(tp))
                    continue
                if part.leader < 0:
                    out[tp] = P.entity_error(ErrorCode.LEADER_NOT_AVAILABLE, None, str(tp))
                    continue
                by_leader.setdefault(part.leader, {})[tp] = wanted[tp]
            iso = _ISOLATION[isolation_level]
            answers = await asyncio.gather(
                *(
                    self._to_node(node, "ListOffsets", P.build_list_offsets(group, iso), deadline)
                    for node, group in by_leader.items()
                )
            )
            for resp in answers:
                out.update(P.parse_list_offsets(resp))
            return out

        return await self._batch(wanted, P.LIST_OFFSETS_RETRY, round_, deadline)

    # -- configs -------------------------------------------------------------------------
    @_bounded
    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        keys: Mapping[ConfigResource, Iterable[str]] | None = None,
        include_synonyms: bool = False,
        include_documentation: bool = False,
        timeout_ms: float | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry] | BrokerResponseError]:
        """Configs of TOPIC, BROKER and GROUP resources with their sources (and synonyms when asked).

        ``keys`` limits a resource to some config names (default: all of them).
        """
        deadline = self._deadline(timeout_ms)
        items = list(dict.fromkeys(resources))
        key_map = dict(keys or {})
        routes = self._route_configs(items)
        out: dict[ConfigResource, Any] = {}

        async def one(node: int | None, group: list[ConfigResource]) -> None:
            body = P.build_describe_configs(group, key_map, include_synonyms, include_documentation)
            if node is None:
                resp = await self._any("DescribeConfigs", body, deadline)
            else:
                resp = await self._to_node(node, "DescribeConfigs", body, deadline)
            out.update(P.parse_describe_configs(resp))

        await asyncio.gather(*(one(node, group) for node, group in routes.items()))
        return {
            r: out[r] if r in out else P.entity_error(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer", r.name)
            for r in items
        }

    def _route_configs(self, resources: list[ConfigResource]) -> dict[int | None, list[ConfigResource]]:
        """BROKER resources naming a broker id go to that broker; everything else to any broker."""
        routes: dict[int | None, list[ConfigResource]] = {}
        for r in resources:
            node: int | None = None
            if r.type in (ResourceType.BROKER, ResourceType.BROKER_LOGGER) and r.name.strip().lstrip("-").isdigit():
                node = int(r.name)
            routes.setdefault(node, []).append(r)
        return routes

    @_bounded
    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_ms: float | None = None,
    ) -> dict[ConfigResource, BrokerResponseError | None]:
        """SET/DELETE/APPEND/SUBTRACT config changes of TOPIC, BROKER and GROUP resources."""
        deadline = self._deadline(timeout_ms)
        items = {r: list(ops) for r, ops in changes.items()}
        routes = self._route_configs(list(items))
        out: dict[ConfigResource, Any] = {}

        async def one(node: int | None, group: list[ConfigResource]) -> None:
            body = P.build_incremental_alter_configs({r: items[r] for r in group}, validate_only)
            if node is None:
                resp = await self._any("IncrementalAlterConfigs", body, deadline)
            else:
                resp = await self._to_node(node, "IncrementalAlterConfigs", body, deadline)
            out.update(P.parse_incremental_alter_configs(resp))

        await asyncio.gather(*(one(node, group) for node, group in routes.items()))
        return {r: out.get(r, P.entity_error(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer", r.name)) for r in items}

    # -- groups --------------------------------------------------------------------------
    @_bounded
    async def list_groups(
        self,
        *,
        types: Collection[str] | None = None,
        states: Collection[str] | None = None,
        timeout_ms: float | None = None,
    ) -> list[GroupListing]:
        """Groups on every broker; ``types`` ("classic", "consumer", "share") and ``states``
        ("Stable", "Empty", ...) filter on the broker (ListGroups v5 / v4)."""
        deadline = self._deadline(timeout_ms)
        await self._core.retry(self._core.refresh_metadata, timeout_ms=self._remaining(deadline), what="Metadata")
        nodes = sorted(self._core.metadata.brokers)
        body = G.build_list_groups(list(types) if types else None, list(states) if states else None)
        answers = await asyncio.gather(*(self._to_node(n, "ListGroups", body, deadline) for n in nodes))
        seen: dict[str, GroupListing] = {}
        for resp in answers:
            for g in G.parse_list_groups(resp):
                seen.setdefault(g.group_id, g)
        return sorted(seen.values(), key=lambda g: g.group_id)

    @_bounded
    async def describe_consumer_groups(
        self, groups: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, ConsumerGroupDescription | BrokerResponseError]:
        """Classic groups (DescribeGroups): state, assignor, members with decoded assignments."""
        return await self._describe_groups(
            groups, "DescribeGroups", G.build_describe_groups, G.parse_describe_group, timeout_ms
        )

    @_bounded
    async def describe_consumer_protocol_groups(
        self, groups: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, ConsumerProtocolGroupDescription | BrokerResponseError]:
        """KIP-848 consumer groups (ConsumerGroupDescribe): epochs, members' current and target assignments."""
        return await self._describe_groups(
            groups, "ConsumerGroupDescribe", build_consumer_group_describe, parse_consumer_group_describe, timeout_ms
        )

    @_bounded
    async def list_consumer_group_offsets(
        self,
        group: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata | BrokerResponseError]:
        """Committed offsets of ``group`` (all its partitions, or those given; uncommitted ones are left out)."""
        deadline = self._deadline(timeout_ms)
        body = G.build_offset_fetch(group, None if partitions is None else list(partitions), require_stable)

        async def once() -> Any:
            resp = await self._group_call(group, "OffsetFetch", body, G.offset_fetch_error, deadline, max_version=9)
            result = G.parse_offset_fetch(resp, group)
            unstable = next((v for v in result.values() if isinstance(v, BrokerResponseError) and v.retriable), None)
            if unstable is not None:
                raise unstable  # UNSTABLE_OFFSET_COMMIT: pending transactional offsets; ask again
            return result

        return await self._core.retry(once, timeout_ms=self._remaining(deadline), what=f"OffsetFetch({group!r})")

    @_bounded
    async def alter_consumer_group_offsets(
        self,
        group: str,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        """Set committed offsets of an empty (or unknown) group: OffsetCommit with generation -1.

        A group with members raises UNKNOWN_MEMBER_ID (Kafka's answer to a
        commit from outside the group); partition errors are per partition.
        """
        deadline = self._deadline(timeout_ms)
        om = {tp: v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v) for tp, v in offsets.items()}
        resp = await self._group_call(
            group, "OffsetCommit", G.build_offset_commit(group, om), G.offset_commit_error, deadline, max_version=9
        )
        return G.parse_offset_commit(resp, group)

    @_bounded
    async def delete_consumer_group_offsets(
        self, group: str, partitions: Iterable[TopicPartition], *, timeout_ms: float | None = None
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        """Delete committed offsets (OffsetDelete); a partition of a subscribed topic gets GROUP_SUBSCRIBED_TO_TOPIC."""
        deadline = self._deadline(timeout_ms)
        resp = await self._group_call(
            group, "OffsetDelete", G.build_offset_delete(group, partitions), lambda r: r.error_code, deadline
        )
        return G.parse_offset_delete(resp, group)

    @_bounded
    async def delete_consumer_groups(
        self, groups: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, BrokerResponseError | None]:
        """Delete groups (DeleteGroups); a group with members gets NON_EMPTY_GROUP."""
        return await self._delete_groups(groups, timeout_ms)

    async def _delete_groups(self, groups: Iterable[str], timeout_ms: float | None) -> dict[str, Any]:
        deadline = self._deadline(timeout_ms)

        async def one(g: str) -> BrokerResponseError | None:
            resp = await self._group_call(
                g,
                "DeleteGroups",
                G.build_delete_groups([g]),
                lambda r: r.results[0].error_code if r.results else 0,
                deadline,
            )
            return G.parse_delete_groups(resp).get(g)

        return await self._per_group(groups, one)

    # -- share groups --------------------------------------------------------------------
    @_bounded
    async def list_share_groups(
        self, *, states: Collection[str] | None = None, timeout_ms: float | None = None
    ) -> list[GroupListing]:
        return await self.list_groups(types=["share"], states=states, timeout_ms=timeout_ms)

    @_bounded
    async def describe_share_groups(
        self, groups: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, ShareGroupDescription | BrokerResponseError]:
        """Share groups (ShareGroupDescribe): state, epochs, members and their assignments."""
        return await self._describe_groups(
            groups,
            "ShareGroupDescribe",
            G.build_share_group_describe,
            lambda group, coordinator: G.parse_share_group(group, coordinator, self._core.metadata.topic_names),
            timeout_ms,
        )

    async def _describe_groups(
        self,
        groups: Iterable[str],
        api: str,
        build: Callable[[list[str]], Any],
        parse: Callable[[Any, Any], Any],
        timeout_ms: float | None,
    ) -> dict[str, Any]:
        """One describe request per group, to its coordinator; ``parse(group, coordinator)``."""
        deadline = self._deadline(timeout_ms)

        async def one(g: str) -> Any:
            resp = await self._group_call(
                g, api, build([g]), lambda r: r.groups[0].error_code if r.groups else 0, deadline
            )
            return parse(resp.groups[0], await self._core.find_coordinator(g))

        return await self._per_group(groups, one)

    @_bounded
    async def delete_share_groups(
        self, groups: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, BrokerResponseError | None]:
        """Delete share groups with their share-partition state; a group with members gets NON_EMPTY_GROUP."""
        return await self._delete_groups(groups, timeout_ms)

    @_bounded
    async def list_share_group_offsets(
        self,
        group: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: float | None = None,
    ) -> dict[TopicPartition, SharePartitionOffsetInfo | BrokerResponseError]:
        """Start offset, leader epoch and lag of each share-partition (DescribeShareGroupOffsets).

        Without ``partitions``: every partition the group has state for (v1).
        """
        deadline = self._deadline(timeout_ms)
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for tp in partitions:
                topics.setdefault(tp.topic, []).append(tp.partition)
        resp = await self._group_call(
            group,
            "DescribeShareGroupOffsets",
            G.build_describe_share_group_offsets(group, topics),
            G.describe_share_offsets_error,
            deadline,
        )
        return G.parse_describe_share_group_offsets(resp, group)

    @_bounded
    async def alter_share_group_offsets(
        self, group: str, offsets: Mapping[TopicPartition, int], *, timeout_ms: float | None = None
    ) -> dict[TopicPartition, BrokerResponseError | None]:
        """Move share-partition start offsets of an empty share group (AlterShareGroupOffsets).

        A group with members raises NON_EMPTY_GROUP; partition errors are per partition. A group id
        nobody uses yet becomes an empty share group starting at these offsets (Kafka 4.2 brokers and
        Shoal; older Kafka brokers raise GROUP_ID_NOT_FOUND), so offsets can be seeded before first use.
        """
        deadline = self._deadline(timeout_ms)
        resp = await self._group_call(
            group,
            "AlterShareGroupOffsets",
            G.build_alter_share_group_offsets(group, offsets),
            lambda r: r.error_code,
            deadline,
        )
        return G.parse_alter_share_group_offsets(resp, group)

    @_bounded
    async def delete_share_group_offsets(
        self, group: str, topics: Iterable[str], *, timeout_ms: float | None = None
    ) -> dict[str, BrokerResponseError | None]:
        """Forget an empty share group's state for whole topics (DeleteShareGroupOffsets).

        The next member to subscribe starts from ``share.auto.offset.reset``.
        """
        deadline = self._deadline(timeout_ms)
        resp = await self._group_call(
            group,
            "DeleteShareGroupOffsets",
            G.build_delete_share_group_offsets(group, topics),
            lambda r: r.error_code,
            deadline,
        )
        return G.parse_delete_share_group_offsets(resp, group)

    # -- ACLs ----------------------------------------------------------------------------
    @_bounded
    async def create_acls(
        self, bindings: Iterable[A.AclBinding], *, timeout_ms: float | None = None
    ) -> dict[A.AclBinding, BrokerResponseError | None]:
        """Add ACLs (CreateAcls): None per binding added (or already there), else its error
        (SECURITY_DISABLED with no authorizer, CLUSTER_AUTHORIZATION_FAILED without ALTER on the
        cluster, INVALID_REQUEST for a malformed binding)."""
        wanted = list(dict.fromkeys(bindings))
        resp = await self._any("CreateAcls", A.build_create_acls(wanted), self._deadline(timeout_ms))
        return A.parse_create_acls(resp, wanted)

    @_bounded
    async def describe_acls(
        self, acl_filter: A.AclBindingFilter | None = None, *, timeout_ms: float | None = None
    ) -> list[A.AclBinding]:
        """The ACLs a filter selects (DescribeAcls; default: all). Raises BrokerResponseError for
        an error answer."""
        flt = acl_filter if acl_filter is not None else A.AclBindingFilter()
        resp = await self._any("DescribeAcls", A.build_describe_acls(flt), self._deadline(timeout_ms))
        return A.parse_describe_acls(resp)

    @_bounded
    async def delete_acls(
        self, filters: Iterable[A.AclBindingFilter], *, timeout_ms: float | None = None
    ) -> dict[A.AclBindingFilter, list[A.AclBinding] | BrokerResponseError]:
        """Remove every ACL each filter selects (DeleteAcls): per filter, the bindings removed or
        its error."""
        wanted = list(dict.fromkeys(filters))
        resp = await self._any("DeleteAcls", A.build_delete_acls(wanted), self._deadline(timeout_ms))
        return A.parse_delete_acls(resp, wanted)

    # -- SCRAM users ---------------------------------------------------------------------
    @_bounded
    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: float | None = None
    ) -> dict[str, S.UserScramCredentials | BrokerResponseError]:
        """Each user's SCRAM mechanisms and iteration counts (every user with one when ``users``
        is None); a user without any gets RESOURCE_NOT_FOUND."""
        body = S.build_describe(None if users is None else list(users))
        return S.parse_describe(await self._any("DescribeUserScramCredentials", body, self._deadline(timeout_ms)))

    @_bounded
    async def alter_user_scram_credentials(
        self, alterations: Iterable[S.ScramUpsertion | S.ScramDeletion], *, timeout_ms: float | None = None
    ) -> dict[str, BrokerResponseError | None]:
        """Create, replace or delete SCRAM credentials; per user, None or the broker's refusal
        (none of a refused user's changes is applied)."""
        body = S.build_alter(alterations)
        return S.parse_alter(await self._controller_call("AlterUserScramCredentials", body, self._deadline(timeout_ms)))
