"""The admin verbs of ``shoal``: topics, groups and share-groups.

Each verb is ``async def verb(args, settings) -> exit code``: it opens one
AsyncAdmin with the admin settings, asks, prints data on stdout in the
layout of Kafka's tools (so habits and scripts carry over), and reports
per-entity failures as one ``Error: ...`` line each on stderr with exit
code 1. Errors about the whole call (no broker, a typed broker error for the
one group asked about) propagate to ``client.cli.main.main``, which prints one
line and exits 1; usage mistakes raise ``UsageError`` (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from shoal.client.admin.client import AsyncAdmin
from shoal.client.admin.consumer_protocol import ConsumerProtocolGroupDescription
from shoal.client.admin.types import (
    AlterConfigOp,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    NewTopic,
    OffsetSpec,
    ShareGroupDescription,
    TopicDescription,
)
from shoal.client.cli.progress import bar
from shoal.client.cli.support import (
    UsageError,
    format_table,
    parse_datetime_ms,
    parse_key_values,
    parse_topic_partitions,
    plan_reset,
    split_config_list,
)
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import BrokerResponseError, KafkaClientError
from shoal.protocol.errors import ErrorCode

__all__ = ["VERBS"]


def out(text: str = "") -> None:
    print(text, flush=True)


def err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def emit(doc: object) -> None:
    """One JSON document on stdout (``--output json``; its shape is in ``client.cli.shapes``)."""
    out(json.dumps(doc, indent=2))


def _json(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "text") == "json"


def names(args: argparse.Namespace, positional: str, option: str, what: str) -> list[str]:
    """Entities named positionally (``shoal topics describe t``) or as Kafka's tools do (``--topic t``)."""
    found = [*(getattr(args, positional, None) or ()), *(getattr(args, option, None) or ())]
    if not found:
        raise UsageError(f"name at least one {what}")
    return list(dict.fromkeys(found))


def _tp(tp: TopicPartition) -> dict[str, object]:
    return {"topic": tp.topic, "partition": tp.partition}


def _report(results: Mapping[Any, Any], ok: str | None, *, ignore: frozenset[str] = frozenset()) -> int:
    """One line per entity: ``ok.format(key)`` on stdout or ``Error: ...`` on stderr; the exit code."""
    rc = 0
    for key, v in results.items():
        if isinstance(v, BrokerResponseError) and v.name in ignore:
            continue
        if isinstance(v, BaseException):
            err(f"Error: {v}")
            rc = 1
        elif ok is not None:
            out(ok.format(key))
    return rc


# -- topics -------------------------------------------------------------------------------------


async def topics_create(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    configs = parse_key_values(args.config or (), "--config")
    topics = [
        NewTopic(n, args.partitions, args.replication_factor, configs) for n in names(args, "topics", "topic", "topic")
    ]
    async with AsyncAdmin(settings) as admin:
        res = await admin.create_topics(topics, validate_only=args.validate_only)
    ignore = frozenset({"TOPIC_ALREADY_EXISTS"}) if args.if_not_exists else frozenset()
    ok = "Topic {} would be created." if args.validate_only else "Created topic {}."
    return _report(res, ok, ignore=ignore)


async def topics_list(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with AsyncAdmin(settings) as admin:
        topics = await admin.list_topics(include_internal=not args.exclude_internal)
    if _json(args):
        emit({"topics": [{"name": t.name, "internal": t.is_internal} for t in topics.values()]})
        return 0
    for name in topics:
        out(name)
    return 0


async def topics_describe(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with AsyncAdmin(settings) as admin:
        wanted = [*(args.topics or ()), *(args.topic or ())]
        wanted = list(dict.fromkeys(wanted)) or list(
            await admin.list_topics(include_internal=not args.exclude_internal)
        )
        described = await admin.describe_topics(wanted)
        found = [n for n, d in described.items() if isinstance(d, TopicDescription)]
        configs = await admin.describe_configs([ConfigResource.topic(n) for n in found]) if found else {}
    rc = 0
    docs = []
    for name, d in described.items():
        if not isinstance(d, TopicDescription):
            err(f"Error: {d}")
            rc = 1
            continue
        entries = configs.get(ConfigResource.topic(name))
        overridden = (
            {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG}
            if isinstance(entries, dict)
            else {}
        )
        overrides = ",".join(f"{k}={v}" for k, v in overridden.items())
        rf = len(d.partitions[0].replicas) if d.partitions else 0
        if _json(args):
            docs.append(_topic_doc(d, rf, overridden))
            continue
        out(
            f"Topic: {name}\tTopicId: {d.topic_id}\tPartitionCount: {len(d.partitions)}\t"
            f"ReplicationFactor: {rf}\tConfigs: {overrides}"
        )
        for p in d.partitions:
            leader = "none" if p.leader < 0 else p.leader
            out(
                f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {leader}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
            )
    if _json(args):
        emit({"topics": docs})
    return rc


def _topic_doc(d: TopicDescription, rf: int, configs: dict[str, str | None]) -> dict[str, object]:
    return {
        "name": d.name,
        "topic_id": str(d.topic_id),
        "internal": d.is_internal,
        "partition_count": len(d.partitions),
        "replication_factor": rf,
        "configs": configs,
        "partitions": [
            {
                "partition": p.partition,
                "leader": None if p.leader < 0 else p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
            }
            for p in d.partitions
        ],
    }


async def topics_delete(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with AsyncAdmin(settings) as admin:
        res = await admin.delete_topics(names(args, "topics", "topic", "topic"))
    ignore = frozenset({"UNKNOWN_TOPIC_OR_PARTITION"}) if args.if_exists else frozenset()
    return _report(res, "Deleted topic {}.", ignore=ignore)


async def topics_alter(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    if args.partitions is None:
        raise UsageError("topics alter needs --partitions N")
    async with AsyncAdmin(settings) as admin:
        res = await admin.create_partitions({t: args.partitions for t in names(args, "topics", "topic", "topic")})
    return _report(res, "Topic {} now has " + str(args.partitions) + " partitions.")


# -- configs ------------------------------------------------------------------------------------


def _resource(args: argparse.Namespace) -> ConfigResource:
    if args.entity_type is not None:  # kafka-configs.sh: --entity-type topics --entity-name t
        if args.entity_name is None and args.entity_type != "brokers":
            raise UsageError(f"--entity-type {args.entity_type} needs --entity-name")
        make = {"topics": ConfigResource.topic, "brokers": ConfigResource.broker, "groups": ConfigResource.group}
        return make[args.entity_type](args.entity_name or "")
    if args.entity_name is not None:
        raise UsageError("--entity-name needs --entity-type")
    if args.topic is not None:
        return ConfigResource.topic(args.topic)
    if args.group is not None:
        return ConfigResource.group(args.group)
    if args.broker is not None:
        return ConfigResource.broker(args.broker)
    raise UsageError("name the resource: --topic, --broker, --group or --entity-type/--entity-name")


# What "configs describe" shows without --all: values someone set (Shoal's broker settings are static).
_OVERRIDES = frozenset(
    {
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        ConfigSource.GROUP_CONFIG,
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,
    }
)


async def configs_describe(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    resource = _resource(args)
    async with AsyncAdmin(settings) as admin:
        entries = (await admin.describe_configs([resource]))[resource]
    if isinstance(entries, BaseException):
        err(f"Error: {entries}")
        return 1
    shown = [e for e in entries.values() if args.all or e.source in _OVERRIDES]
    if _json(args):
        emit(
            {
                "resource": {"type": resource.type.name.lower(), "name": resource.name},
                "configs": [
                    {
                        "name": e.name,
                        "value": e.value,
                        "source": e.source.name,
                        "read_only": e.is_read_only,
                        "sensitive": e.is_sensitive,
                    }
                    for e in shown
                ],
            }
        )
        return 0
    out(format_table(["NAME", "VALUE", "SOURCE"], ((e.name, e.value, e.source.name) for e in shown)))
    return 0


async def configs_alter(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    added = [item for text in args.add_config for item in split_config_list(text)]
    ops = [AlterConfigOp.set(k, v) for k, v in parse_key_values([*args.set, *added], "--set").items()]
    ops += [AlterConfigOp.delete(k) for k in [*args.delete, *(k for t in args.delete_config for k in t.split(","))]]
    ops += [AlterConfigOp.append(k, v) for k, v in parse_key_values(args.append, "--append").items()]
    ops += [AlterConfigOp.subtract(k, v) for k, v in parse_key_values(args.subtract, "--subtract").items()]
    if not ops:
        raise UsageError("configs alter needs --set, --delete, --append or --subtract")
    resource = _resource(args)
    async with AsyncAdmin(settings) as admin:
        res = await admin.incremental_alter_configs({resource: ops})
    kind = resource.type.name.lower()
    return _report({resource.name: res[resource]}, f"Completed updating config for {kind} {{}}.")


# -- consumer groups ----------------------------------------------------------------------------


async def groups_list(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    # Kafka's --list --state / --type take an optional value; given bare, they ask for the columns
    # (with a value they only filter, as they always have here: the ids stay one per line).
    types = [t for t in args.type or () if t]
    states = [s.strip() for v in args.state or () if v for s in v.split(",") if s.strip()]
    bare = None in (args.type or ()) or None in (args.state or ())
    async with AsyncAdmin(settings) as admin:
        groups = await admin.list_groups(types=types or None, states=states or None)
    if _json(args):
        rows = [
            {
                "group": g.group_id,
                "type": g.type or None,
                "protocol_type": g.protocol_type or None,
                "state": g.state or None,
            }
            for g in groups
        ]
        emit({"groups": rows})
    elif args.long or bare:
        out(
            format_table(
                ["GROUP", "TYPE", "PROTOCOL", "STATE"], ((g.group_id, g.type, g.protocol_type, g.state) for g in groups)
            )
        )
    else:
        for g in groups:
            out(g.group_id)
    return 0


async def _group_ids(admin: AsyncAdmin, args: argparse.Namespace, share: bool) -> list[str]:
    """``GROUP ...``, ``--group G`` (repeatable) or ``--all-groups``."""
    if getattr(args, "all_groups", False):
        if share:
            return [g.group_id for g in await admin.list_share_groups()]
        return [g.group_id for g in await admin.list_groups(types=["classic", "consumer"])]
    return names(args, "groups", "group", "group (or --all-groups)")


async def _describe_both(admin: AsyncAdmin, ids: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each group described by the API of its kind: ConsumerGroupDescribe for KIP-848 consumer
    groups, DescribeGroups for the rest (a broker without ConsumerGroupDescribe has only those)."""
    modern: dict[str, Any] = {}
    try:
        found = await admin.describe_consumer_protocol_groups(ids)
        modern = {g: d for g, d in found.items() if isinstance(d, ConsumerProtocolGroupDescription)}
    except KafkaClientError:
        pass
    rest = [g for g in ids if g not in modern]
    classic = await admin.describe_consumer_groups(rest) if rest else {}
    return {g: modern[g].as_classic() if g in modern else classic[g] for g in ids}, modern


async def groups_describe(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    rc = 0
    docs = []
    async with AsyncAdmin(settings) as admin:
        described, modern = await _describe_both(admin, await _group_ids(admin, args, share=False))
        for gid, d in described.items():
            if not isinstance(d, ConsumerGroupDescription):
                err(f"Error: {d}")
                rc = 1
                continue
            k = modern.get(gid)
            if _json(args):
                docs.append(
                    {
                        "group": gid,
                        "protocol": "consumer" if k is not None else "classic",
                        "state": d.state,
                        "coordinator": d.coordinator,
                        "assignment_strategy": d.partition_assignor or None,
                        "group_epoch": k.group_epoch if k else None,
                        "assignment_epoch": k.assignment_epoch if k else None,
                        "members": [
                            {
                                "consumer_id": m.member_id,
                                "group_instance_id": m.group_instance_id,
                                "host": m.host,
                                "client_id": m.client_id,
                                "assignment": [_tp(tp) for tp in sorted(m.assignment)],
                                **_member_epochs(k, m),
                            }
                            for m in d.members
                        ],
                        "offsets": [
                            dict(zip(_OFFSET_KEYS, row[1:], strict=True)) for row in await _group_offsets(admin, d)
                        ],
                    }
                )
            elif args.state and k is not None:
                out(
                    format_table(
                        [
                            "GROUP",
                            "COORDINATOR (ID)",
                            "ASSIGNMENT-STRATEGY",
                            "PROTOCOL",
                            "STATE",
                            "GROUP-EPOCH",
                            "TARGET-ASSIGNMENT-EPOCH",
                            "#MEMBERS",
                        ],
                        [
                            (
                                gid,
                                d.coordinator,
                                k.assignor or None,
                                "consumer",
                                d.state,
                                k.group_epoch,
                                k.assignment_epoch,
                                len(d.members),
                            )
                        ],
                    )
                )
            elif args.state:
                out(
                    format_table(
                        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                        [(gid, d.coordinator, d.partition_assignor or None, d.state, len(d.members))],
                    )
                )
            elif args.members and k is not None:
                out(
                    format_table(
                        [
                            "GROUP",
                            "CONSUMER-ID",
                            "HOST",
                            "CLIENT-ID",
                            "#PARTITIONS",
                            "CURRENT-EPOCH",
                            "CURRENT-ASSIGNMENT",
                            "TARGET-EPOCH",
                            "TARGET-ASSIGNMENT",
                        ],
                        (
                            (
                                gid,
                                m.member_id,
                                m.host,
                                m.client_id,
                                len(m.assignment),
                                m.member_epoch,
                                _assignment(m.assignment),
                                k.assignment_epoch,
                                _assignment(m.target_assignment),
                            )
                            for m in k.members
                        ),
                    )
                )
            elif args.members:
                out(_members_table(gid, d.members))
            else:
                out(format_table(_OFFSET_HEADERS, await _group_offsets(admin, d)))
            if d.state == "Empty":
                err(f"Consumer group '{gid}' has no active members.")
    if _json(args):
        emit({"groups": docs})
    return rc


def _member_epochs(k: ConsumerProtocolGroupDescription | None, member: Any) -> dict[str, Any]:
    """The KIP-848 part of a member's JSON (epoch, target assignment; null in classic groups) and
    its subscription."""
    m = None if k is None else next((m for m in k.members if m.member_id == member.member_id), None)
    if m is None:
        return {
            "member_epoch": None,
            "target_assignment": None,
            "subscribed_topics": list(member.subscription),
            "subscribed_topic_regex": None,
        }
    return {
        "member_epoch": m.member_epoch,
        "target_assignment": [_tp(tp) for tp in m.target_assignment],
        "subscribed_topics": list(m.subscribed_topics),
        "subscribed_topic_regex": m.subscribed_regex,
    }


def _members_table(gid: str, members: Any) -> str:
    """``--members`` for either group kind: who holds which partitions."""
    return format_table(
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
        ((gid, m.member_id, m.host, m.client_id, len(m.assignment), _assignment(m.assignment)) for m in members),
    )


def _assignment(tps: tuple[TopicPartition, ...]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{t}:{'.'.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items())) or "-"


# kafka-consumer-groups.sh --describe's columns, and the same as JSON keys.
_OFFSET_HEADERS = [
    "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"
]  # fmt: skip
_OFFSET_KEYS = [h.lower().replace("-", "_") for h in _OFFSET_HEADERS[1:]]


async def _group_offsets(admin: AsyncAdmin, d: ConsumerGroupDescription) -> list[tuple[Any, ...]]:
    """One row per partition the group has an offset for or owns, in ``_OFFSET_HEADERS`` order."""
    committed = await admin.list_consumer_group_offsets(d.group_id)
    owner = {tp: m for m in d.members for tp in m.assignment}
    tps = sorted(set(committed) | set(owner))
    ends = await admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps}) if tps else {}
    rows = []
    for tp in tps:
        c = committed.get(tp)
        current = c.offset if c is not None and not isinstance(c, BaseException) else None
        end = ends.get(tp)
        log_end = None if end is None or isinstance(end, BaseException) else end.offset
        lag = None if current is None or log_end is None else max(log_end - current, 0)
        m = owner.get(tp)
        rows.append(
            (d.group_id, tp.topic, tp.partition, current, log_end, lag)
            + ((m.member_id, m.host, m.client_id) if m is not None else (None, None, None))
        )
    return rows


async def groups_delete(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with AsyncAdmin(settings) as admin:
        res = await admin.delete_consumer_groups(await _group_ids(admin, args, share=False))
    return _report(res, "Deleted consumer group '{}'.")


# -- share groups -------------------------------------------------------------------------------


async def share_groups_list(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    states = [s.strip() for s in (args.state or "").split(",") if s.strip()]
    async with AsyncAdmin(settings) as admin:
        groups = await admin.list_share_groups(states=states or None)
    if _json(args):
        emit({"groups": [{"group": g.group_id, "state": g.state or None} for g in groups]})
    elif args.state is not None:
        out(format_table(["GROUP", "STATE"], ((g.group_id, g.state) for g in groups)))
    else:
        for g in groups:
            out(g.group_id)
    return 0


async def share_groups_describe(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    rc = 0
    docs = []
    async with AsyncAdmin(settings) as admin:
        described = await admin.describe_share_groups(await _group_ids(admin, args, share=True))
        for gid, d in described.items():
            offsets: list[tuple[TopicPartition, Any]] = []
            if not isinstance(d, ShareGroupDescription):
                err(f"Error: {d}")
                rc = 1
                continue
            if _json(args) or not (args.state or args.members):
                offsets = []
                for tp, info in sorted((await admin.list_share_group_offsets(gid)).items()):
                    if isinstance(info, BaseException):
                        err(f"Error: {info}")
                        rc = 1
                        continue
                    offsets.append((tp, info))
            if _json(args):
                docs.append(_share_group_doc(d, offsets))
            elif args.state:
                out(
                    format_table(
                        ["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"],
                        [(gid, d.coordinator, d.state, len(d.members))],
                    )
                )
            elif args.members:
                out(_members_table(gid, d.members))
            elif not offsets:
                out(f"Share group '{gid}' has no offset information.")
            else:
                headers = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
                if args.verbose:
                    headers.insert(3, "LEADER-EPOCH")
                rows = []
                for tp, info in offsets:
                    row: list[object] = [gid, tp.topic, tp.partition, info.start_offset, info.lag]
                    if args.verbose:
                        row.insert(3, info.leader_epoch)
                    rows.append(row)
                out(format_table(headers, rows))
            if d.state == "Empty":
                err(f"Share group '{gid}' has no active members.")
    if _json(args):
        emit({"groups": docs})
    return rc


def _share_group_doc(d: ShareGroupDescription, offsets: list[tuple[TopicPartition, Any]]) -> dict[str, object]:
    return {
        "group": d.group_id,
        "state": d.state,
        "coordinator": d.coordinator,
        "group_epoch": d.group_epoch,
        "assignment_epoch": d.assignment_epoch,
        "members": [
            {
                "consumer_id": m.member_id,
                "member_epoch": m.member_epoch,
                "host": m.host,
                "client_id": m.client_id,
                "rack_id": m.rack_id,
                "subscribed_topics": list(m.subscribed_topics),
                "assignment": [_tp(tp) for tp in sorted(m.assignment)],
            }
            for m in d.members
        ],
        "offsets": [
            {**_tp(tp), "start_offset": i.start_offset, "leader_epoch": i.leader_epoch, "lag": i.lag}
            for tp, i in offsets
        ],
    }


async def share_groups_reset_offsets(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    return await _reset_offsets(args, settings, share=True)


async def groups_reset_offsets(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    return await _reset_offsets(args, settings, share=False)


_RESET_CHUNK = 200  # partitions per alter request: the bar moves on many partitions


async def _reset_offsets(args: argparse.Namespace, settings: dict[str, Any], *, share: bool) -> int:
    """kafka-share-groups.sh / kafka-consumer-groups.sh --reset-offsets: a plan, applied with --execute."""
    scenarios = [s for s in ("to_earliest", "to_latest") if getattr(args, s)]
    if args.to_offset is not None:
        scenarios.append("to_offset")
    if args.to_datetime is not None:
        scenarios.append("to_datetime")
    if len(scenarios) != 1:
        raise UsageError("reset-offsets needs exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime")
    if bool(args.topic) == bool(args.all_topics):
        raise UsageError("reset-offsets needs --topic (repeatable) or --all-topics")
    if args.dry_run and args.execute:
        raise UsageError("--dry-run and --execute exclude each other")
    scenario = scenarios[0].replace("_", "-")
    when = parse_datetime_ms(args.to_datetime) if args.to_datetime is not None else None
    specs = parse_topic_partitions(args.topic or ())
    group = args.group
    async with AsyncAdmin(settings) as admin:
        described = await (admin.describe_share_groups if share else admin.describe_consumer_groups)([group])
        d = described[group]
        if isinstance(d, (ShareGroupDescription, ConsumerGroupDescription)) and d.state not in ("Empty", "Dead"):
            raise BrokerResponseError(
                ErrorCode.NON_EMPTY_GROUP,
                f"{'share ' if share else ''}group {group!r}: the group is not empty "
                f"({d.state}, {len(d.members)} members)",
            )
        if isinstance(d, BrokerResponseError) and d.name != "GROUP_ID_NOT_FOUND":
            raise d
        partitions = await _reset_partitions(admin, group, specs, share)
        earliest = await _offsets(admin, partitions, OffsetSpec.EARLIEST)
        latest = await _offsets(admin, partitions, OffsetSpec.LATEST)
        by_time = await _offsets(admin, partitions, when) if when is not None else None
        plan = plan_reset(
            partitions, scenario, earliest=earliest, latest=latest, to_offset=args.to_offset, by_time=by_time
        )
        for w in plan.warnings:
            err(f"WARN: {w}")
        rc = 0
        if args.execute:
            alter = admin.alter_share_group_offsets if share else admin.alter_consumer_group_offsets
            items = list(plan.offsets.items())
            shown = bar(f"Resetting offsets of {group}", total=len(items), unit="partitions")
            try:
                for i in range(0, len(items), _RESET_CHUNK):
                    chunk = dict(items[i : i + _RESET_CHUNK])
                    rc = max(rc, _report(await alter(group, chunk), None))
                    shown.advance(len(chunk))
            finally:
                shown.close()
        elif not args.dry_run:
            err("WARN: No action will be performed as the --execute option is missing. Add --dry-run to say so.")
    if _json(args):
        emit(
            {
                "group": group,
                "executed": bool(args.execute),
                "offsets": [{**_tp(tp), "new_offset": o} for tp, o in plan.offsets.items()],
                "warnings": plan.warnings,
            }
        )
        return rc
    out(
        format_table(
            ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            ((group, tp.topic, tp.partition, o) for tp, o in plan.offsets.items()),
        )
    )
    return rc


async def _reset_partitions(
    admin: AsyncAdmin, group: str, specs: list[tuple[str, list[int] | None]], share: bool
) -> list[TopicPartition]:
    if not specs:  # --all-topics: what the group has offsets for
        if share:
            return sorted(await admin.list_share_group_offsets(group))
        return sorted(await admin.list_consumer_group_offsets(group))
    described = await admin.describe_topics(sorted({t for t, _ in specs}))
    chosen: list[TopicPartition] = []
    for topic, parts in specs:
        d = described[topic]
        if not isinstance(d, TopicDescription):
            raise d
        have = {p.partition for p in d.partitions}
        for p in sorted(have) if parts is None else parts:
            if p not in have:
                raise BrokerResponseError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {p}")
            chosen.append(TopicPartition(topic, p))
    return sorted(set(chosen))


async def _offsets(admin: AsyncAdmin, partitions: list[TopicPartition], spec: int) -> dict[TopicPartition, int]:
    res = await admin.list_offsets({tp: spec for tp in partitions})
    found: dict[TopicPartition, int] = {}
    for tp, r in res.items():
        if isinstance(r, BaseException):
            raise r
        found[tp] = r.offset
    return found


async def share_groups_delete_offsets(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with AsyncAdmin(settings) as admin:
        res = await admin.delete_share_group_offsets(args.group, args.topic)
    out(
        format_table(
            ["TOPIC", "STATUS"], ((t, "Successful" if v is None else f"Error: {v}") for t, v in sorted(res.items()))
        )
    )
    return 1 if any(v is not None for v in res.values()) else 0


async def share_groups_delete(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    async with AsyncAdmin(settings) as admin:
        res = await admin.delete_share_groups(await _group_ids(admin, args, share=True))
    return _report(res, "Deleted share group '{}'.")


VERBS = {
    ("topics", "create"): topics_create,
    ("topics", "list"): topics_list,
    ("topics", "describe"): topics_describe,
    ("topics", "delete"): topics_delete,
    ("topics", "alter"): topics_alter,
    ("configs", "describe"): configs_describe,
    ("configs", "alter"): configs_alter,
    ("groups", "list"): groups_list,
    ("groups", "describe"): groups_describe,
    ("groups", "delete"): groups_delete,
    ("groups", "reset-offsets"): groups_reset_offsets,
    ("share-groups", "list"): share_groups_list,
    ("share-groups", "describe"): share_groups_describe,
    ("share-groups", "reset-offsets"): share_groups_reset_offsets,
    ("share-groups", "delete-offsets"): share_groups_delete_offsets,
    ("share-groups", "delete"): share_groups_delete,
}
