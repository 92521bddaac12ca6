"""Topic administration and configs: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, IncrementalAlterConfigs (TOPIC, BROKER and GROUP resources;
group overrides live in ``broker.config.group_configs``).

Validation happens before any change, so a rejected request leaves topics and
their logs untouched. IncrementalAlterConfigs follows Kafka's split: the
broker's own checks first (duplicate keys, null values: INVALID_REQUEST), then
the controller's rules (APPEND/SUBTRACT on LIST configs only, starting from the
config's default when there is no override; bad values INVALID_CONFIG).
A single node means replication factor 1 (or -1 for the default) and replica
assignments naming only this node.

Creating partitions is bounded and never holds the event loop: one request may
create at most ``max.partitions.per.request``, the broker holds at most
``max.partitions`` and no more than its open-file limit leaves room for (each
refused with POLICY_VIOLATION, as Kafka answers a creation policy), and the
partitions are opened a few at a time (``STEP_BUDGET_S`` of work, then the
loop serves others). A creation that fails midway removes what it opened.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Generator
from typing import Any

from shoal.broker.config.keys import render_value
from shoal.broker.config.settings import (
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigError,
    ConfigSource,
    ConfigType,
    describe_topic_configs,
    validate_topic_configs,
)
from shoal.broker.errors import ErrorAnswer
from shoal.broker.handlers import HandlerTable
from shoal.broker.handlers.authz import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    TOPIC,
    TopicChecks,
    allowed,
    allowed_on_cluster,
)
from shoal.broker.handlers.contract import Broker
from shoal.broker.net.contract import RequestContext
from shoal.broker.partition.topics import validate_topic_name
from shoal.protocol import messages
from shoal.protocol.constants import AlterConfigOpType, ConfigResourceType
from shoal.protocol.errors import ErrorCode
from shoal.protocol.messages import ZERO_UUID


def _check_replication(broker: Broker, replication_factor: int, assignments: list | None) -> None:
    if replication_factor not in (-1, 1) and not assignments:
        raise ErrorAnswer(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): "
            "the target replication factor cannot be reached because only 1 broker is registered.",
        )
    for a in assignments or ():
        ids = a.broker_ids
        if list(ids) != [broker.node_id]:
            raise ErrorAnswer(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"replica assignment {list(ids)} names brokers other than {broker.node_id}",
            )


def _config_dict(items: Any) -> dict[str, str | None]:
    return {c.name: c.value for c in items or ()}


STEP_BUDGET_S = 0.002  # partition opening done in one turn of the event loop, at most (about 6 partitions)


def _checked(broker: Broker, name: str, num_partitions: int, configs: dict[str, str | None]) -> tuple[int, dict]:
    if num_partitions == -1:
        num_partitions = broker.config.get("num.partitions")
    broker.topics.check_create(name, num_partitions)
    try:
        typed = validate_topic_configs(configs, broker.config)
    except ConfigError as e:
        raise ErrorAnswer(ErrorCode.INVALID_CONFIG, str(e)) from None
    return num_partitions, {k: v for k, v in configs.items() if typed.get(k) is not None}


def create_topic(broker: Broker, name: str, num_partitions: int, configs: dict[str, str | None]) -> Any:
    """Validate and create a topic at once; raises ErrorAnswer. For Metadata's auto-creation
    (``num.partitions`` partitions); CreateTopics creates in steps."""
    n, overrides = _checked(broker, name, num_partitions, configs)
    return broker.topics.create(name, n, overrides)


async def _drive(steps: Generator[None, None, Any]) -> Any:
    """Run a creation in steps, giving the loop back after every ``STEP_BUDGET_S`` of work.
    Cancelled (the broker stopping), the creation is abandoned and removes what it opened."""
    try:
        deadline = time.monotonic() + STEP_BUDGET_S
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            if time.monotonic() >= deadline:
                await asyncio.sleep(0)
                deadline = time.monotonic() + STEP_BUDGET_S
    finally:
        steps.close()


def _check_request_room(broker: Broker, so_far: int, more: int) -> None:
    cap = broker.config.get("max.partitions.per.request")
    if so_far + more > cap:
        raise ErrorAnswer(
            ErrorCode.POLICY_VIOLATION,
            f"This request would create {so_far + more} partitions; max.partitions.per.request is {cap}.",
        )


async def handle_create_topics(broker: Broker, ctx: RequestContext, req: messages.CreateTopicsRequest) -> Any:
    cls = messages.CreateTopicsResponse
    results = []
    created = 0  # partitions this request created (or would, validating)
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    # CREATE on the cluster, or else on each topic; configs are shown only with DESCRIBE_CONFIGS
    az = broker.authorizer
    may_create = None if az is None or allowed_on_cluster(broker, ctx, CREATE) else TopicChecks(broker, ctx, CREATE)
    may_see_configs = TopicChecks(broker, ctx, DESCRIBE_CONFIGS) if az is not None else None
    for t in req.topics:
        r = cls.CreatableTopicResult(name=t.name, error_message=None, configs=None)
        results.append(r)
        hide_configs = may_see_configs is not None and not may_see_configs.ok(t.name)
        if hide_configs and ctx.api_version >= 5:
            r.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        try:
            if seen[t.name] > 1:
                raise ErrorAnswer(ErrorCode.INVALID_REQUEST, f"Duplicate topic name {t.name} in request.")
            if may_create is not None and not may_create.ok(t.name):
                raise ErrorAnswer(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            if t.assignments and t.num_partitions != -1:
                raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "Both numPartitions and replica assignments were given.")
            _check_replication(broker, t.replication_factor, t.assignments)
            partitions = len(t.assignments) if t.assignments else t.num_partitions
            configs = _config_dict(t.configs)
            if req.validate_only:
                validate_topic_name(t.name)
                n = broker.config.get("num.partitions") if partitions == -1 else partitions
                _check_request_room(broker, created, max(n, 0))
                broker.topics.check_create(t.name, n)
                try:
                    validate_topic_configs(configs, broker.config)
                except ConfigError as e:
                    raise ErrorAnswer(ErrorCode.INVALID_CONFIG, str(e)) from None
                created += n
                r.num_partitions, r.replication_factor = n, 1
                r.configs = None if hide_configs else _created_configs(cls, broker, configs)
                continue
            n = broker.config.get("num.partitions") if partitions == -1 else partitions
            _check_request_room(broker, created, max(n, 0))
            n, overrides = _checked(broker, t.name, n, configs)
            topic = await _drive(broker.topics.create_steps(t.name, n, overrides))
            created += n
        except ErrorAnswer as e:
            r.error_code, r.error_message = e.code, e.message
            continue
        r.topic_id = topic.topic_id
        r.num_partitions = len(topic.partitions)
        r.replication_factor = 1
        r.configs = None if hide_configs else _created_configs(cls, broker, topic.configs)
    return cls(throttle_time_ms=0, topics=results)


def _created_configs(cls: Any, broker: Broker, overrides: dict) -> list:
    return [
        cls.CreatableTopicConfigs(
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=e.source.kafka_id,
            is_sensitive=e.sensitive,
        )
        for e in describe_topic_configs(overrides, broker.config)
    ]


def handle_delete_topics(broker: Broker, ctx: RequestContext, req: messages.DeleteTopicsRequest) -> Any:
    cls = messages.DeleteTopicsResponse
    if ctx.api_version >= 6:  # (name, id): a topic by either; a null name looks the id up
        wanted = [(t.name, t.topic_id) for t in req.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in req.topic_names]
    out = []
    may_delete = TopicChecks(broker, ctx, DELETE) if broker.authorizer is not None else None
    may_describe = TopicChecks(broker, ctx, DESCRIBE) if broker.authorizer is not None else None
    for name, topic_id in wanted:
        r = cls.DeletableTopicResult(name=name, error_message=None)
        out.append(r)
        if name is None:
            topic = broker.topics.by_id(topic_id) if topic_id and topic_id.int else None
            if topic is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                r.topic_id = topic_id
                continue
            if may_describe is not None and not may_describe.ok(topic.name):
                # as Kafka: the id is no secret, the name behind it is
                r.error_code, r.topic_id = ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic_id
                continue
            if may_delete is not None and not may_delete.ok(topic.name):
                r.error_code, r.name, r.topic_id = ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic.name, topic_id
                continue
        else:
            if may_delete is not None and not may_delete.ok(name):
                r.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # before looking it up: existence not shown
                continue
            topic = broker.topics.get(name)
            if topic is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
        r.name, r.topic_id = topic.name, topic.topic_id
        if topic.internal:
            r.error_code, r.error_message = ErrorCode.INVALID_REQUEST, "internal topics cannot be deleted"
            continue
        broker.delete_topic(topic.name)
    return cls(throttle_time_ms=0, responses=out)


async def handle_create_partitions(broker: Broker, ctx: RequestContext, req: messages.CreatePartitionsRequest) -> Any:
    cls = messages.CreatePartitionsResponse
    out = []
    created = 0
    may_alter = TopicChecks(broker, ctx, ALTER) if broker.authorizer is not None else None
    for t in req.topics:
        r = cls.CreatePartitionsTopicResult(name=t.name, error_message=None)
        out.append(r)
        topic = broker.topics.get(t.name)
        try:
            if may_alter is not None and not may_alter.ok(t.name):
                raise ErrorAnswer(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "The topic authorization is failed.")
            if topic is None:
                raise ErrorAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {t.name} does not exist.")
            current = len(topic.partitions)
            if t.count < current:
                raise ErrorAnswer(
                    ErrorCode.INVALID_PARTITIONS,
                    f"Topic currently has {current} partitions, which is higher than the requested {t.count}.",
                )
            if t.count == current:
                raise ErrorAnswer(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
            if topic.internal:
                # Kafka accepts this, and then a group's coordinator partition (hash of the id
                # modulo the partition count) moves: committed offsets and group state read back
                # as absent after a restart. Shoal refuses it as a policy would.
                raise ErrorAnswer(
                    ErrorCode.POLICY_VIOLATION,
                    f"Adding partitions to the internal topic {t.name} is refused: groups are placed on its "
                    "partitions by hash, so their committed offsets and state would be lost.",
                )
            if t.assignments is not None:
                if len(t.assignments) != t.count - current:
                    raise ErrorAnswer(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Increasing the number of partitions by {t.count - current} "
                        f"but {len(t.assignments)} assignments provided.",
                    )
                _check_replication(broker, -1, t.assignments)
            _check_request_room(broker, created, t.count - current)
            broker.topics.check_room(t.count - current)
            if not req.validate_only:
                await _drive(broker.topics.add_partitions_steps(t.name, t.count))
            created += t.count - current
        except ErrorAnswer as e:
            r.error_code, r.error_message = e.code, e.message
    return cls(throttle_time_ms=0, results=out)


def handle_describe_configs(broker: Broker, ctx: RequestContext, req: messages.DescribeConfigsRequest) -> Any:
    cls = messages.DescribeConfigsResponse
    results = []
    for res in req.resources:
        r = cls.DescribeConfigsResult(
            resource_type=res.resource_type, resource_name=res.resource_name, error_message=None
        )
        results.append(r)
        # Kafka describes every config when the key list is null or empty.
        names = res.configuration_keys or None
        refused = _config_access(broker, ctx, DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
        if refused:
            r.error_code = refused
            continue
        if res.resource_type == ConfigResourceType.TOPIC:
            topic = broker.topics.get(res.resource_name)
            if topic is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                r.error_message = f"Topic {res.resource_name} does not exist."
                continue
            entries = describe_topic_configs(topic.configs, broker.config, names)
        elif res.resource_type == ConfigResourceType.BROKER:
            if res.resource_name not in ("", str(broker.node_id)):
                r.error_code = ErrorCode.INVALID_REQUEST
                r.error_message = f"Unexpected broker id, expected {broker.node_id}."
                continue
            entries = broker.config.describe(names)
        elif res.resource_type == ConfigResourceType.GROUP and broker.group_configs is not None:
            try:
                entries = broker.group_configs.describe(res.resource_name, names)
            except ErrorAnswer as e:
                r.error_code, r.error_message = e.code, e.message
                continue
        else:
            r.error_code = ErrorCode.INVALID_REQUEST
            r.error_message = f"Unsupported resource type {res.resource_type}."
            continue
        r.configs = [
            cls.DescribeConfigsResourceResult(
                name=e.name,
                value=None if e.sensitive else e.value,
                read_only=e.read_only,
                config_source=e.source.kafka_id,
                # v0 has no source, only whether the value is the default (Kafka 2.x set it so;
                # its clients read it back as DEFAULT_CONFIG).
                is_default=e.source == ConfigSource.DEFAULT if ctx.api_version == 0 else False,
                is_sensitive=e.sensitive,
                synonyms=[
                    cls.DescribeConfigsSynonym(name=s.name, value=s.value, source=s.source.kafka_id) for s in e.synonyms
                ]
                if req.include_synonyms
                else [],
                config_type=e.type.value,
                documentation=e.doc if req.include_documentation else None,
            )
            for e in entries
        ]
    return cls(throttle_time_ms=0, results=results)


_CONFIG_RESOURCES: dict[int, tuple[Any, int]] = {
    ConfigResourceType.TOPIC: (TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    ConfigResourceType.GROUP: (GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
    ConfigResourceType.BROKER: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
}


def _config_access(broker: Broker, ctx: RequestContext, op: Any, resource_type: int, name: str) -> int:
    """0 if the caller may do ``op`` (DESCRIBE_CONFIGS, ALTER_CONFIGS) on the config resource, else
    the error Kafka answers for its type (a BROKER resource is checked on the cluster)."""
    if broker.authorizer is None:
        return 0
    entry = _CONFIG_RESOURCES.get(resource_type)
    if entry is None:
        return 0  # a type Shoal does not serve: answered as before
    rtype, code = entry
    ok = allowed_on_cluster(broker, ctx, op) if rtype == CLUSTER else allowed(broker, ctx, op, rtype, name)
    return 0 if ok else code


def _preprocess(res: Any) -> None:
    """The checks Kafka's broker makes on every resource before anything else (INVALID_REQUEST)."""
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [c.name for c in res.configs if c.config_operation != AlterConfigOpType.DELETE and c.value is None]
    if nulls:
        raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))


def apply_alter_ops(current: dict[str, str], ops: Any, defs: ConfigDef) -> dict[str, str]:
    """The new override set after SET/DELETE/APPEND/SUBTRACT operations.

    As Kafka's controller: APPEND/SUBTRACT work on LIST configs only (else
    INVALID_CONFIG) and start from the override, or, when there is none, from
    the config's own default (a topic's cleanup.policy: "delete", whatever the
    broker's log.cleanup.policy), so APPEND compact to a fresh topic gives
    "delete,compact". APPEND skips values already present; SUBTRACT removes
    them; the result is stored as an override even when it equals the default.
    """
    new = dict(current)
    for op in ops:
        code = op.config_operation
        if code == AlterConfigOpType.SET:
            new[op.name] = op.value
        elif code == AlterConfigOpType.DELETE:
            new.pop(op.name, None)
        elif code in (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT):
            key = defs.keys.get(op.name)
            if key is None or key.type is not ConfigType.LIST:
                verb = "APPEND" if code == AlterConfigOpType.APPEND else "SUBTRACT"
                raise ErrorAnswer(
                    ErrorCode.INVALID_CONFIG, f"Can't {verb} to key {op.name} because its type is not LIST."
                )
            start = new.get(op.name)
            if start is None:
                start = render_value(key.default) or ""  # no default: start from nothing
            items = [x for x in start.split(",") if x]
            values = [x for x in op.value.split(",") if x]
            if code == AlterConfigOpType.APPEND:
                items += [v for v in dict.fromkeys(values) if v not in items]
            else:
                items = [x for x in items if x not in values]
            new[op.name] = ",".join(items)
        else:
            raise ErrorAnswer(ErrorCode.INVALID_REQUEST, f"Unknown operations type {code}")
    return new


def handle_incremental_alter_configs(
    broker: Broker, ctx: RequestContext, req: messages.IncrementalAlterConfigsRequest
) -> Any:
    cls = messages.IncrementalAlterConfigsResponse
    out = []
    # As Kafka's ConfigAdminManager.preprocess: every copy of a resource named twice is refused
    # and none of them applied.
    seen = Counter((res.resource_type, res.resource_name) for res in req.resources)
    for res in req.resources:
        r = cls.AlterConfigsResourceResponse(
            resource_type=res.resource_type, resource_name=res.resource_name, error_message=None
        )
        out.append(r)
        try:
            if seen[res.resource_type, res.resource_name] > 1:
                raise ErrorAnswer(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            refused = _config_access(broker, ctx, ALTER_CONFIGS, res.resource_type, res.resource_name)
            if refused:
                raise ErrorAnswer(refused, None)
            _preprocess(res)
            if res.resource_type == ConfigResourceType.TOPIC:
                topic = broker.topics.get(res.resource_name)
                if topic is None:
                    raise ErrorAnswer(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {res.resource_name} does not exist."
                    )
                new = apply_alter_ops(topic.configs, res.configs, TOPIC_CONFIGS)
                try:
                    typed = validate_topic_configs(new, broker.config)
                except ConfigError as e:
                    raise ErrorAnswer(ErrorCode.INVALID_CONFIG, str(e)) from None
                if not req.validate_only:
                    broker.topics.set_configs(topic.name, {k: v for k, v in new.items() if typed.get(k) is not None})
            elif res.resource_type == ConfigResourceType.GROUP and broker.group_configs is not None:
                broker.group_configs.alter(res.resource_name, res.configs, req.validate_only)
            elif res.resource_type == ConfigResourceType.BROKER:
                raise ErrorAnswer(ErrorCode.INVALID_CONFIG, "Shoal broker configs are static (set at start)")
            else:
                raise ErrorAnswer(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}.")
        except ErrorAnswer as e:
            r.error_code, r.error_message = e.code, e.message
    return cls(throttle_time_ms=0, responses=out)


def register(table: HandlerTable) -> None:
    table.add("CreateTopics", handle_create_topics)
    table.add("DeleteTopics", handle_delete_topics)
    table.add("CreatePartitions", handle_create_partitions)
    table.add("DescribeConfigs", handle_describe_configs)
    table.add("IncrementalAlterConfigs", handle_incremental_alter_configs)
