"""``shoal mirror``: the command line of ``shoal.client.mirror``.

Why its own module: the verb has two clusters where every other verb has one, so it takes its
own connection options (``--source-bootstrap``/``--target-bootstrap``, ``--source-property``,
``--source-config`` and the target's), and it reports progress while it runs: a bar on a
terminal (``cli.progress``), else a line of rates and lag every few seconds on stderr. The
summary goes to stdout, as text or (``--output json``) one document of shape ``SHAPE``.
``--follow`` stops cleanly on SIGTERM or Ctrl-C: the records sent are acknowledged, a last
checkpoint written and the groups moved once more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from typing import Any

from shoal.client.cli.progress import bar
from shoal.client.cli.support import UsageError, parse_key_values, parse_properties

__all__ = ["SHAPE", "add_parser", "run"]

_GROUP = {
    "type": "object",
    "required": ["written", "skipped", "configs"],
    "additionalProperties": False,
    "properties": {"written": {"type": "object"}, "skipped": {"type": "object"}, "configs": {"type": "object"}},
}
SHAPE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "topics",
        "configs_not_copied",
        "partitions",
        "records",
        "bytes",
        "reconciled_after_restart",
        "seconds",
        "records_per_s",
        "mb_per_s",
        "groups",
        "share_groups",
    ],
    "properties": {
        "topics": {
            "type": "object",
            "required": ["created", "existing"],
            "properties": {"created": {"type": "array"}, "existing": {"type": "array"}},
        },
        "configs_not_copied": {"type": "object"},
        "partitions": {"type": "integer"},
        "records": {"type": "integer"},
        "bytes": {"type": "integer"},
        "reconciled_after_restart": {"type": "integer"},
        # numbers (floats): shapes.validate knows no float type, so these are checked by presence
        "seconds": {},
        "records_per_s": {},
        "mb_per_s": {},
        "groups": {"type": "object", "additionalProperties": _GROUP},
        "share_groups": {"type": "object", "additionalProperties": _GROUP},
    },
}

HELP = "copy topics, consumer-group offsets and share-group state to another Kafka-compatible cluster"


def add_parser(areas: Any, epilog: str, connection_options: Any) -> argparse.ArgumentParser:
    """The verb; ``connection_options`` adds the common ones (``--bootstrap-server`` names the
    source here, ``--command-config``/``--command-property`` apply to both sides)."""
    p = areas.add_parser(
        "mirror", help=HELP, description=HELP, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    connection_options(p, "verb")
    for side in ("source", "target"):
        p.add_argument(
            f"--{side}-bootstrap",
            metavar="HOST:PORT[,...]",
            help="the source cluster (default: --bootstrap-server)" if side == "source" else "the target cluster",
        )
        p.add_argument(f"--{side}-config", metavar="FILE", help=f"a .properties file of client settings for the {side}")
        p.add_argument(
            f"--{side}-property",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"one client setting for the {side} (repeatable)",
        )
    p.add_argument("--topics", metavar="REGEX", help="topics to mirror (whole-name match; default: all but internal)")
    p.add_argument("--groups", metavar="REGEX", help="consumer groups whose offsets move (default: all)")
    p.add_argument("--share-groups", metavar="REGEX", help="share groups whose state moves (default: all)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="copy up to the source's end now, then stop (the default)")
    mode.add_argument("--follow", action="store_true", help="keep copying until SIGTERM / Ctrl-C")
    p.add_argument("--checkpoint-interval-ms", type=int, default=1000, metavar="MS", help="default 1000")
    p.add_argument(
        "--sync-interval-ms", type=int, default=5000, metavar="MS", help="--follow: group moves, default 5000"
    )
    p.add_argument("--output", choices=("text", "json"), default="text", help="the summary on stdout")
    p.set_defaults(verb_parser=p)
    return p


def _side(args: argparse.Namespace, side: str, common: dict[str, Any]) -> dict[str, Any]:
    """One side's client settings: the common ones, then the side's file, then its properties."""
    settings = dict(common)
    bootstrap = getattr(args, f"{side}_bootstrap")
    if side == "source" and bootstrap is None:
        bootstrap = getattr(args, "bootstrap_verb", None) or getattr(args, "bootstrap_top", None)
    if bootstrap is None:
        raise UsageError(
            "mirror needs --target-bootstrap"
            if side == "target"
            else "mirror needs --source-bootstrap (or --bootstrap-server)"
        )
    path = getattr(args, f"{side}_config")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                settings.update(parse_properties(f.read()))
        except OSError as e:
            raise UsageError(f"--{side}-config {path}: {e.strerror or e}") from None
    settings.update(parse_key_values(getattr(args, f"{side}_property"), f"--{side}-property"))
    settings["bootstrap.servers"] = bootstrap
    if settings.get("client.id") in (None, "shoal-cli"):
        settings["client.id"] = "shoal-mirror"
    return settings


class _Reporter:
    """Progress on stderr: a bar on a terminal, else one line every ``every_s`` seconds."""

    def __init__(self, every_s: float = 2.0) -> None:
        self.tty = sys.stderr.isatty()
        self.every_s = every_s
        self.copied = 0
        self.lag: int | None = None
        self.started = time.monotonic()
        self._last = self.started
        self._bar: Any = None

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event == "start":
            self.lag = data["lag"]
            if self.tty:
                self._bar = bar("mirror", total=data["lag"], unit="records")
            else:
                self._line(f"copying {data['lag']} records of {data['partitions']} partitions")
        elif event == "copied":
            self.copied += data["records"]
            if self._bar is not None:
                self._bar.advance(data["records"])
            elif time.monotonic() - self._last >= self.every_s:
                self._rate()
        elif event in ("group", "share-group") and data["skipped"]:
            kind = "share group" if event == "share-group" else "group"
            for where, why in sorted(data["skipped"].items()):
                if where == "*" or "past the copy" in why:
                    self._line(f"{kind} {data['group']!r} {'' if where == '*' else where + ' '}skipped: {why}")
        elif event == "follow" and not self.tty and time.monotonic() - self._last >= self.every_s:
            self._rate()

    def _rate(self) -> None:
        secs = max(time.monotonic() - self.started, 1e-9)
        lag = "" if self.lag is None else f", lag {max(0, self.lag - self.copied)}"
        self._line(f"copied {self.copied} records, {self.copied / secs:,.0f} records/s{lag}")

    def _line(self, text: str) -> None:
        self._last = time.monotonic()
        print(f"mirror: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


async def run(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    from shoal.client.mirror.runner import MirrorOptions, run_mirror

    common = {k: v for k, v in settings.items() if k != "bootstrap.servers"}
    opts = MirrorOptions(
        source=_side(args, "source", common),
        target=_side(args, "target", common),
        topics=args.topics,
        groups=args.groups,
        share_groups=args.share_groups,
        follow=args.follow,
        checkpoint_interval_s=max(args.checkpoint_interval_ms, 10) / 1000,
        sync_interval_s=max(args.sync_interval_ms, 100) / 1000,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reporter = _Reporter()
    try:
        summary = await run_mirror(opts, stop, reporter)
    finally:
        reporter.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    doc = summary.to_json()
    if args.output == "json":
        print(json.dumps(doc))
    else:
        print(
            f"mirrored {doc['records']} records ({doc['bytes']} bytes) of {doc['partitions']} partitions in "
            f"{doc['seconds']} s: {doc['records_per_s']:,.0f} records/s, {doc['mb_per_s']} MB/s"
        )
        created = summary.topics_created
        print(f"topics created: {', '.join(created) if created else 'none'}")
        for name, dropped in sorted(summary.dropped_configs.items()):
            print(f"topic {name}: configs not copied: {', '.join(dropped)}")
        for kind, results in (("group", summary.groups), ("share group", summary.share_groups)):
            for g, r in sorted(results.items()):
                print(f"{kind} {g}: {len(r.written)} offsets written, {len(r.skipped)} skipped")
    return 0
