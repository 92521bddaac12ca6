"""The ``shoal`` command line's pure parts: settings files, argument mini-languages,
offset-reset planning, tables and progress lines.

Why apart from ``client.cli.main``: everything here is a function of its inputs
(text in, values out; an injected clock for progress), so it is tested
directly, and the asyncio verbs in ``cli_admin``/``cli_data`` only fetch
what these functions need and print what they return. Formats follow
Kafka's tools (``kafka-topics.sh``, ``kafka-share-groups.sh``): Java
``.properties`` files, ``--topic T:0,1``, ``--to-datetime
2024-01-31T12:00:00.000[+01:00]``, column-aligned tables.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shoal.client.core.cluster import TopicPartition

__all__ = [
    "Progress",
    "ResetPlan",
    "UsageError",
    "format_table",
    "kafka_actions",
    "parse_datetime_ms",
    "parse_key_values",
    "parse_properties",
    "parse_topic_partitions",
    "plan_reset",
    "split_config_list",
]


class UsageError(Exception):
    """The command line or a settings file is wrong (exit code 2)."""


# -- settings -----------------------------------------------------------------------------------


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` file: ``key=value``, ``key: value`` or ``key value`` lines,
    ``#``/``!`` comments, a trailing backslash continues the line, backslash escapes."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    out: dict[str, str] = {}
    for line in logical:
        m = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:]?\s*(.*)$", line, re.S)
        assert m is not None
        key, value = _unescape(m.group(1)), _unescape(m.group(2))
        if key:
            out[key] = value
    return out


def parse_key_values(items: Iterable[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` from repeated options; a malformed item is a UsageError naming ``what``."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{what} expects key=value, got {item!r}")
        out[key.strip()] = value
    return out


def split_config_list(text: str) -> list[str]:
    """kafka-configs.sh's ``--add-config 'k1=v1,k2=[a,b]'``: ``["k1=v1", "k2=a,b"]`` (brackets hold a list)."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for c in text:
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(depth - 1, 0)
        elif c == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        else:
            current.append(c)
            continue
    items.append("".join(current))
    return [i.strip() for i in items if i.strip()]


# -- Kafka's spellings ---------------------------------------------------------------------------

# kafka-topics.sh, kafka-consumer-groups.sh, kafka-share-groups.sh and kafka-configs.sh name the
# action with a flag (--describe); shoal with a verb (describe). Both are accepted.
_ACTIONS: dict[str, tuple[str, ...]] = {
    "topics": ("list", "describe", "create", "alter", "delete"),
    "groups": ("list", "describe", "delete", "reset-offsets"),
    "consumer-groups": ("list", "describe", "delete", "reset-offsets"),
    "share-groups": ("list", "describe", "delete", "reset-offsets", "delete-offsets"),
    "configs": ("describe", "alter"),
}


def kafka_actions(argv: Sequence[str], valued: frozenset[str]) -> list[str]:
    """``shoal topics --describe --topic t`` -> ``shoal topics describe --topic t``.

    ``valued`` are the top-level options that take a value (skipped while looking for the
    area). Unchanged when a verb follows the area or no action flag is given (argparse then
    says what is missing); two action flags are a UsageError, as Kafka's tools refuse them."""
    args = list(argv)
    i = 0
    while i < len(args):
        tok = args[i]
        if tok in valued:
            i += 2
            continue
        if tok.startswith("-"):
            i += 1
            continue
        break
    if i >= len(args) or args[i] not in _ACTIONS:
        return args
    area = args[i]
    if i + 1 < len(args) and not args[i + 1].startswith("-"):
        return args  # a verb (or a typo argparse will name)
    flags = {f"--{a}": a for a in _ACTIONS[area]}
    found = [j for j in range(i + 1, len(args)) if args[j] in flags]
    if len(found) > 1:
        raise UsageError(f"{area}: give exactly one action, not {' and '.join(args[j] for j in found)}")
    if not found:
        return args
    verb = flags[args.pop(found[0])]
    args.insert(i + 1, verb)
    return args


# -- topics and partitions ----------------------------------------------------------------------


def parse_topic_partitions(specs: Iterable[str]) -> list[tuple[str, list[int] | None]]:
    """``--topic T`` (every partition) or ``--topic T:0,2-4`` (some), as kafka-share-groups.sh takes them."""
    out: list[tuple[str, list[int] | None]] = []
    for spec in specs:
        topic, sep, parts = spec.rpartition(":") if ":" in spec else (spec, "", "")
        if not topic:
            raise UsageError(f"--topic expects TOPIC or TOPIC:PARTITIONS, got {spec!r}")
        if not sep:
            out.append((topic, None))
            continue
        chosen: list[int] = []
        for piece in parts.split(","):
            piece = piece.strip()
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", piece)
            if m is None:
                raise UsageError(f"bad partition list in --topic {spec!r}: {piece!r}")
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
            if hi < lo:
                raise UsageError(f"bad partition range in --topic {spec!r}: {piece!r}")
            chosen.extend(range(lo, hi + 1))
        out.append((topic, sorted(set(chosen))))
    return out


_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?(Z|[+-]\d{2}:?\d{2})?$")


def parse_datetime_ms(text: str, local_tz: dt.tzinfo | None = None) -> int:
    """``YYYY-MM-DDTHH:mm:SS[.sss][Z|+HH:MM]`` -> epoch ms; without a zone, local time (as Kafka's tools)."""
    m = _DATETIME.match(text.strip())
    if m is None:
        raise UsageError(f"--to-datetime expects YYYY-MM-DDTHH:mm:SS.sss with an optional zone, got {text!r}")
    y, mo, d, h, mi, s, frac, zone = m.groups()
    ms = int((frac or "0").ljust(3, "0"))
    if zone is None:
        tz = local_tz or dt.datetime.now().astimezone().tzinfo
    elif zone == "Z":
        tz = dt.UTC
    else:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = dt.timezone(sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    try:
        when = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), ms * 1000, tzinfo=tz)
    except ValueError as e:
        raise UsageError(f"--to-datetime {text!r}: {e}") from None
    return int(when.timestamp() * 1000)


# -- offset resets ------------------------------------------------------------------------------


@dataclass(slots=True)
class ResetPlan:
    """New start offsets per partition, and warnings for offsets moved into range."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def plan_reset(
    partitions: Iterable[TopicPartition],
    scenario: str,
    *,
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    to_offset: int | None = None,
    by_time: Mapping[TopicPartition, int] | None = None,
) -> ResetPlan:
    """Where each partition's offset goes for ``scenario`` (to-earliest, to-latest, to-offset,
    to-datetime), as Kafka's GroupOffsetsResetter decides: --to-offset is clamped into
    [earliest, latest] with a warning; --to-datetime uses the first offset at or after the
    time (``by_time``, -1 when there is none), else the latest offset."""
    plan = ResetPlan()
    for tp in sorted(partitions):
        lo, hi = earliest[tp], latest[tp]
        if scenario == "to-earliest":
            new = lo
        elif scenario == "to-latest":
            new = hi
        elif scenario == "to-offset":
            assert to_offset is not None
            new = to_offset
            if new > hi:
                plan.warnings.append(
                    f"New offset ({new}) is higher than latest offset for topic partition {tp}. Value will be set to {hi}"
                )
                new = hi
            elif new < lo:
                plan.warnings.append(
                    f"New offset ({new}) is lower than earliest offset for topic partition {tp}. Value will be set to {lo}"
                )
                new = lo
        elif scenario == "to-datetime":
            assert by_time is not None
            found = by_time.get(tp, -1)
            new = found if found >= 0 else hi
        else:
            raise UsageError(f"unknown reset scenario {scenario!r}")
        plan.offsets[tp] = new
    return plan


# -- output -------------------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns separated by at least one space; '-' for None (Kafka's missing value)."""
    text_rows = [[("-" if v is None else str(v)) for v in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in text_rows:
        for i, v in enumerate(r):
            widths[i] = max(widths[i], len(v))
    lines = []
    for r in [list(headers), *text_rows]:
        lines.append(" ".join(v.ljust(widths[i]) for i, v in enumerate(r)).rstrip())
    return "\n".join(lines)


@dataclass(slots=True)
class Progress:
    """Rate lines for long runs: ``add(n)`` returns a line when ``interval_s`` passed since the last one."""

    what: str
    clock: Callable[[], float]
    interval_s: float = 5.0
    total: int = 0
    _start: float = 0.0
    _last: float = 0.0
    _last_total: int = 0

    def __post_init__(self) -> None:
        self._start = self._last = self.clock()

    def add(self, n: int = 1) -> str | None:
        self.total += n
        now = self.clock()
        if now - self._last < self.interval_s:
            return None
        rate = (self.total - self._last_total) / max(now - self._last, 1e-9)
        self._last, self._last_total = now, self.total
        return f"{self.what}: {self.total} records so far, {rate:.0f} records/s"

    def summary(self) -> str:
        took = max(self.clock() - self._start, 1e-9)
        return f"{self.what} {self.total} records in {took:.1f} s ({self.total / took:.0f} records/s)"
