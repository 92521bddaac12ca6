"""The web console's views: broker state turned into plain dicts. Sans-IO.

Why a separate layer of dicts: the same view feeds the HTML page (``pages.py``)
and the JSON the page polls for live updates, and it can be tested against
real share partitions and a fake clock without a browser or a socket. Every
function here only reads: the console never changes broker state.

The broker is seen by duck typing (the attributes ``Broker`` has), as the
metrics collector sees it; times come in as arguments (``now_ms`` wall clock,
``mono_ms`` the broker's monotonic clock, which lock deadlines use).

Nothing here runs until a page or its JSON is requested: no timer samples the
counters. ``RateHistory`` takes at most one reading per second when asked, so
the sparklines fill while somebody watches and cost nothing otherwise.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from shoal.broker.errors import ErrorAnswer
from shoal.broker.share.dead_letter import HEADER_PREFIX
from shoal.broker.share.in_flight import STATE_NAMES
from shoal.protocol.constants import ACKNOWLEDGED, ACQUIRED, ARCHIVED, ARCHIVING, AVAILABLE
from shoal.protocol.records import iter_batches

__all__ = [
    "FORMATS",
    "STATE_ORDER",
    "RateHistory",
    "dead_letters_view",
    "decode_bytes",
    "overview_view",
    "records_view",
    "share_group_view",
    "share_partition_view",
    "topic_view",
]

# The in-flight states in the order the page lists them (Kafka's RecordState names).
STATE_ORDER = tuple(STATE_NAMES[s] for s in (AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED))
FORMATS = ("utf8", "json", "hex")
MAX_BROWSE = 200  # records per page of the record browser
BROWSE_READ = 1 << 20  # log bytes per read of the record browser
MAX_RUNS = 1_000  # strip segments per share partition (the strip is 1,000 units wide); the rest is counted, not drawn
MAX_SHOWN_BYTES = 4096  # a key or value longer than this is cut (the page says so)
DLQ_CONTEXT = ("group", "topic", "partition", "offset", "delivery.count", "message")  # Kafka's __dlq.errors.*


def _int(x: Any, default: int) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return default


# -- rates -------------------------------------------------------------------------
@dataclass(slots=True)
class RateHistory:
    """Readings of the broker's cumulative counters, at most one per ``min_gap_ms``.

    ``series`` turns consecutive readings into per-second rates for one key.
    """

    capacity: int = 60
    min_gap_ms: int = 1000
    readings: deque = field(default_factory=deque)  # (now_ms, {key: cumulative value})

    def sample(self, now_ms: int, stats: Any) -> None:
        if self.readings and now_ms - self.readings[-1][0] < self.min_gap_ms:
            return
        values: dict[tuple[str, str], int] = {}
        for name, c in list(stats.topics.items()):
            values[("in", name)] = c.messages_in
            values[("bytes_in", name)] = c.bytes_in
            values[("bytes_out", name)] = c.bytes_out
        for (group, _topic), c in list(stats.share.items()):
            key = ("acquired", group)
            values[key] = values.get(key, 0) + c.acquired
            key = ("acked", group)
            values[key] = values.get(key, 0) + sum(c.acks.values())
        self.readings.append((now_ms, values))
        while len(self.readings) > self.capacity:
            self.readings.popleft()

    def series(self, kind: str, name: str) -> list[float]:
        """Per-second rates of one counter between consecutive readings (oldest first)."""
        out: list[float] = []
        prev: tuple[int, int] | None = None
        for t, values in self.readings:
            v = values.get((kind, name), 0)
            if prev is not None and t > prev[0]:
                out.append(max(0.0, (v - prev[1]) * 1000.0 / (t - prev[0])))
            prev = (t, v)
        return out


# -- bytes shown as text ---------------------------------------------------------------
def decode_bytes(data: bytes | None, fmt: str) -> dict[str, Any]:
    """A key, value or header value as text: {"text", "format", "cut"}; None stays None.

    ``fmt`` is asked for; bytes that are not JSON fall back to UTF-8, and bytes that are
    not UTF-8 to hex, and "format" says which was used. Past ``MAX_SHOWN_BYTES`` the text is
    cut ("cut"). The text is raw: escaping is the page's job.
    """
    if data is None:
        return {"text": None, "format": "null", "cut": False}
    data = bytes(data)
    cut = len(data) > MAX_SHOWN_BYTES
    shown = data[:MAX_SHOWN_BYTES]
    if fmt == "json" and not cut:
        try:
            pretty = json.dumps(json.loads(data), indent=2, ensure_ascii=False, sort_keys=True)
        except (ValueError, UnicodeDecodeError, RecursionError):
            pass
        else:
            return {"text": pretty, "format": "json", "cut": False}
    if fmt in ("utf8", "json"):
        try:
            return {"text": shown.decode("utf-8"), "format": "utf8", "cut": cut}
        except UnicodeDecodeError as e:
            if cut and e.start >= len(shown) - 3:  # the cut split a character
                return {"text": shown[: e.start].decode("utf-8"), "format": "utf8", "cut": True}
    return {"text": shown.hex(" "), "format": "hex", "cut": cut}


# -- share partitions -------------------------------------------------------------------
def share_partition_view(
    sp: Any, *, high_watermark: int, mono_ms: int, now_ms: int, max_runs: int = MAX_RUNS
) -> dict[str, Any]:
    """One share partition: SPSO/SPEO, lag, counts per state and the strip of runs.

    Runs are maximal ranges whose offsets agree on state, delivery count, owner and
    lock deadline, clipped to [SPSO, SPEO]; offsets in that window no run covers are
    holes (no deliverable record). Counts cover the whole window, read per range (a
    split range's states counted in C); the strip stops after ``max_runs`` runs and
    says where ("undrawn_from"). Lock deadlines are given as wall-clock ms and as ms left.
    """
    start, end = sp.start_offset, sp.end_offset
    by_state = dict.fromkeys(STATE_NAMES, 0)
    runs: list[dict[str, Any]] = []
    pending = covered = 0
    undrawn: int | None = None
    for u in sp.units():
        a, b = max(u.first, start), min(u.last, end)
        if a > b:
            continue
        covered += b - a + 1
        o = u.offsets
        if o is None:
            by_state[u.state] = by_state.get(u.state, 0) + b - a + 1
            pending += b - a + 1 if u.pending is not None else 0
        else:
            i, j = a - u.first, b - u.first + 1
            states = o.states[i:j]
            for s in by_state:
                by_state[s] += states.count(s)
            pending += (j - i) - o.pending[i:j].count(None)
        if undrawn is not None:
            continue
        for first, last, state, count, member, deadline, change in u.runs(a, b):
            if len(runs) >= max_runs:
                undrawn = first
                break
            run: dict[str, Any] = {
                "first": first,
                "last": last,
                "state": STATE_NAMES.get(state, str(state)),
                "deliveries": count,
                "member": member,
            }
            if state == ACQUIRED and deadline >= 0:
                run["lock_left_ms"] = deadline - mono_ms
                run["lock_deadline_ms"] = now_ms + deadline - mono_ms
            if change is not None:
                run["pending"] = True
            runs.append(run)
    counts = {STATE_NAMES[s]: n for s, n in by_state.items()}
    complete = counts[STATE_NAMES[ACKNOWLEDGED]] + counts[STATE_NAMES[ARCHIVED]]
    return {
        "partition": sp.partition,
        "spso": start,
        "speo": end,
        "high_watermark": high_watermark,
        "in_flight": sp.in_flight_count,
        "counts": {name: counts[name] for name in STATE_ORDER},
        "holes": max(0, sp.in_flight_count - covered),
        "pending": pending,
        "delivery_complete": complete,
        "lag": max(0, high_watermark - start - sp.delivery_complete_count()),
        "runs": runs,
        "undrawn_from": undrawn,
        "delivery_count_limit": sp.delivery_count_limit,
        "lock_duration_ms": sp.lock_duration_ms,
    }


def _shards(broker: Any) -> list[Any]:
    groups = getattr(broker, "groups", None)
    return list(groups.loaded_shards()) if groups is not None else []


def _topic_name(broker: Any, topic_id: Any) -> str:
    topics = broker.topics
    t = topics.by_id(topic_id) if topics is not None else None
    return t.name if t is not None else str(topic_id)


def _share_group(broker: Any, gid: str) -> Any:
    for shard in _shards(broker):
        g = shard.share_groups.get(gid)
        if g is not None:
            return g
    return None


def _entries(broker: Any, gid: str | None = None) -> Iterator[tuple[str, Any]]:
    """(group, entry) of every loaded share partition (of one group), in a stable order."""
    manager = getattr(broker, "share_partitions", None)
    if manager is None:
        return
    items = sorted(manager.entries.items(), key=lambda kv: (kv[0][0], kv[1].topic.name, kv[0][2]))
    for (group, _tid, _index), entry in items:
        if entry.sp is not None and (gid is None or group == gid):
            yield group, entry


def share_group_view(broker: Any, gid: str, *, now_ms: int, mono_ms: int, max_runs: int = MAX_RUNS) -> dict | None:
    """A share group's members, assignment, configs and share partitions; None when unknown."""
    group = _share_group(broker, gid)
    entries = list(_entries(broker, gid))
    if group is None and not entries:
        return None
    members = []
    if group is not None:
        for m in sorted(group.members.values(), key=lambda m: m.member_id):
            members.append(
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_epoch": m.member_epoch,
                    "subscribed": sorted(m.subscribed_topic_names),
                    "assignment": sorted((_topic_name(broker, t), sorted(ps)) for t, ps in m.assigned.items() if ps),
                }
            )
    configs: list[tuple[str, str, str]] = []
    store = getattr(broker, "group_configs", None)
    if store is not None:
        overrides = store.overrides(gid)
        for name, value in sorted(store.resolved(gid).items()):
            if name.startswith(("share.", "errors.")):
                configs.append((name, _config_text(value), "override" if name in overrides else "default"))
    partitions = []
    for _g, entry in entries:
        view = share_partition_view(
            entry.sp, high_watermark=entry.partition.high_watermark, mono_ms=mono_ms, now_ms=now_ms, max_runs=max_runs
        )
        view["topic"] = entry.topic.name
        partitions.append(view)
    totals = dict.fromkeys(STATE_ORDER, 0)
    for p in partitions:
        for k, v in p["counts"].items():
            totals[k] = totals.get(k, 0) + v
    dlq = store.get(gid, "errors.deadletterqueue.topic.name") if store is not None else ""
    return {
        "group_id": gid,
        "state": str(group.state) if group is not None else "Unknown",
        "group_epoch": group.group_epoch if group is not None else -1,
        "members": members,
        "configs": configs,
        "partitions": partitions,
        "totals": totals,
        "lag": sum(p["lag"] for p in partitions),
        "dead_letter_topic": dlq or None,
    }


def _config_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(getattr(value, "value", value))


# -- overview and topics ---------------------------------------------------------------
def overview_view(broker: Any, history: RateHistory | None = None) -> dict[str, Any]:
    """Broker, listeners, topics with sizes and rates, groups with state and lag."""
    config = broker.config
    topics = []
    for t in sorted(broker.topics or (), key=lambda t: t.name):
        counts = broker.stats.topics.get(t.name)
        topics.append(
            {
                "name": t.name,
                "internal": bool(t.internal),
                "partitions": len(t.partitions),
                "size_bytes": sum(p.log.size_bytes for p in t.partitions),
                "records": sum(p.high_watermark - p.log_start_offset for p in t.partitions),
                "messages_in": counts.messages_in if counts is not None else 0,
                "in_rate": history.series("in", t.name) if history is not None else [],
                "out_bytes_rate": history.series("bytes_out", t.name) if history is not None else [],
            }
        )
    groups = []
    share_lag: dict[str, int] = {}
    for group, entry in _entries(broker):
        sp = entry.sp
        lag = max(0, entry.partition.high_watermark - sp.start_offset - sp.delivery_complete_count())
        share_lag[group] = share_lag.get(group, 0) + lag
    for shard in _shards(broker):
        for gid, g in shard.groups.items():
            groups.append(_group_row(broker, shard, gid, "classic", g.state.value, len(g.members)))
        for gid, g in shard.consumer_groups.items():
            groups.append(_group_row(broker, shard, gid, "consumer", str(g.state), len(g.members)))
        for gid, g in shard.share_groups.items():
            row = {"group_id": gid, "type": "share", "state": str(g.state), "members": len(g.members)}
            row["lag"] = share_lag.get(gid)
            row["acquired_rate"] = history.series("acquired", gid) if history is not None else []
            groups.append(row)
    groups.sort(key=lambda r: (r["type"], r["group_id"]))
    return {
        "node_id": broker.node_id,
        "cluster_id": broker.cluster_id,
        "ready": bool(getattr(broker, "started", False)),
        "listeners": _bound(broker),
        "http_listeners": [f"http://{h}:{p}" for h, p in getattr(broker.ops, "bound", ())]
        or list(config.get("shoal.http.listeners") or ()),
        "topics": topics,
        "groups": groups,
    }


def _bound(broker: Any) -> list[str]:
    """Each listener with the addresses it is bound to (the configured URL before binding)."""
    server = getattr(broker, "server", None)
    bound = getattr(server, "bound_by_listener", None) or {}
    out = []
    for e in broker.config.endpoints:
        addrs = bound.get(e.name)
        out.append(f"{e.name} " + (", ".join(f"{h}:{p}" for h, p in addrs) if addrs else e.url))
    return out


def _group_row(broker: Any, shard: Any, gid: str, kind: str, state: str, members: int) -> dict[str, Any]:
    lag = 0
    found = False
    for (topic_name, index), c in shard.offsets.get(gid, {}).items():
        part = broker.topics.partition(topic_name, index) if broker.topics is not None else None
        if part is None or c.offset < 0:
            continue
        found = True
        lag += max(0, part.high_watermark - c.offset)
    return {"group_id": gid, "type": kind, "state": state, "members": members, "lag": lag if found else None}


def topic_view(broker: Any, name: str) -> dict[str, Any] | None:
    topics = broker.topics
    t = topics.get(name) if topics is not None else None
    if t is None:
        return None
    return {
        "name": t.name,
        "topic_id": str(t.topic_id),
        "internal": bool(t.internal),
        "configs": sorted(t.configs.items()),
        "partitions": [
            {
                "index": p.index,
                "log_start": p.log_start_offset,
                "high_watermark": p.high_watermark,
                "log_end": p.log_end_offset,
                "size_bytes": p.log.size_bytes,
            }
            for p in t.partitions
        ],
    }


def _read_records(partition: Any, first: int, count: int) -> list[Any]:
    """Up to `count` data records from offset `first` (control batches skipped)."""
    out: list[Any] = []
    pos = first
    while len(out) < count and pos < partition.high_watermark:
        try:
            read = partition.read(pos, BROWSE_READ, read_committed=False, min_one=True)
        except ErrorAnswer:  # the log start passed `pos` meanwhile, or the log directory went offline
            break
        advanced = pos
        for header, _ in iter_batches(read.records, allow_partial=True):
            advanced = max(advanced, header.last_offset + 1)
            if header.is_control or header.last_offset < pos:
                continue
            for rec in header.records():
                if rec.offset >= pos and len(out) < count:
                    out.append(rec)
        if advanced == pos:
            break
        pos = advanced
    return out


def records_view(
    broker: Any, name: str, partition: Any = 0, offset: Any = None, count: Any = 50, fmt: Any = "utf8"
) -> dict[str, Any] | None:
    """One page of a partition's records, with every input clamped to what exists.

    Unknown topic: None. Partition outside the topic: the first one. Offset outside
    [log start, high watermark]: the nearest end (none given: the last page). Count: 1 to 200.
    """
    topics = broker.topics
    t = topics.get(name) if topics is not None else None
    if t is None:
        return None
    notes: list[str] = []
    index = _int(partition, 0)
    if not 0 <= index < len(t.partitions):
        notes.append(f"partition {partition} does not exist; showing partition 0")
        index = 0
    p = t.partitions[index]
    n = min(max(_int(count, 50), 1), MAX_BROWSE)
    if _int(count, n) != n:
        notes.append(f"count limited to {n}")
    lo, hi = p.log_start_offset, p.high_watermark
    want = _int(offset, hi - n) if offset not in (None, "") else hi - n
    start = min(max(want, lo), max(hi - 1, lo))
    if offset not in (None, "") and start != _int(offset, -1):
        notes.append(f"offset {offset} is outside [{lo}, {hi}); showing from {start}")
    fmt = fmt if fmt in FORMATS else "utf8"
    rows = []
    for rec in _read_records(p, start, n) if hi > lo else ():
        rows.append(
            {
                "offset": rec.offset,
                "timestamp": rec.timestamp,
                "key": decode_bytes(rec.key, fmt),
                "value": decode_bytes(rec.value, fmt),
                "headers": [(k, decode_bytes(v, fmt)) for k, v in rec.headers],
            }
        )
    return {
        "topic": t.name,
        "partition": index,
        "partitions": len(t.partitions),
        "offset": start,
        "count": n,
        "format": fmt,
        "log_start": lo,
        "high_watermark": hi,
        "records": rows,
        "notes": notes,
    }


def dead_letters_view(broker: Any, gid: str, *, per_partition: int = MAX_BROWSE) -> dict[str, Any] | None:
    """The group's dead-letter records (newest ``per_partition`` of each partition) with their
    context headers. None when the group is unknown."""
    store = getattr(broker, "group_configs", None)
    known = _share_group(broker, gid) is not None or any(True for _ in _entries(broker, gid))
    if not known:
        return None
    name = store.get(gid, "errors.deadletterqueue.topic.name") if store is not None else ""
    out: dict[str, Any] = {"group_id": gid, "topic": name or None, "exists": False, "records": []}
    topics = broker.topics
    t = topics.get(name) if name and topics is not None else None
    if t is None:
        return out
    out["exists"] = True
    n = min(max(per_partition, 1), MAX_BROWSE)
    for p in t.partitions:
        first = max(p.log_start_offset, p.high_watermark - n)
        for rec in _read_records(p, first, n) if p.high_watermark > first else ():
            context = _dlq_context(rec.headers)
            if context.get("group") not in (None, gid):
                continue  # a dead-letter topic may be shared by several groups
            out["records"].append(
                {
                    "partition": p.index,
                    "offset": rec.offset,
                    "timestamp": rec.timestamp,
                    "context": context,
                    "key": decode_bytes(rec.key, "utf8"),
                    "value": decode_bytes(rec.value, "utf8"),
                    "other_headers": [
                        (k, decode_bytes(v, "utf8")) for k, v in rec.headers if not k.startswith(HEADER_PREFIX)
                    ],
                }
            )
    return out


def _dlq_context(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, str]:
    ctx: dict[str, str] = {}
    for k, v in headers:
        if k.startswith(HEADER_PREFIX) and v is not None:
            ctx[k[len(HEADER_PREFIX) :]] = bytes(v).decode("utf-8", errors="replace")
    return ctx
