"""The data verbs of ``shoal``: produce (stdin lines -> records), consume, share-consume.

Why they look like Kafka's console tools: a line is a record, ``--key-separator``
splits key from value, output is the value per line (``--print-key`` adds the
key); data goes to stdout, and a progress bar to stderr only when stderr is a terminal
(``cli.progress``), so ``shoal consume ... > file`` captures only records and piped or
logged stderr holds only Kafka's closing "Processed a total of N messages".

* **produce** reads stdin in blocks on a worker thread (a regular file or a
  pipe alike) and keeps the producer's send path on the event loop; every
  record's outcome is counted through its future, and the exit code is 1
  when any record failed (one line names how many and the first error).
* **consume** reads as a consumer group (``--group``, committing what it
  printed), or one partition without a group (``--partition`` with
  ``--offset N|earliest|latest``), or every partition of the topic without a
  group. It stops after ``--max-messages``, ``--timeout-ms`` without a record (counted once
  partitions are assigned: a group's join is not idleness), or with ``-e`` once every
  partition reached the end offset it had when the run started (kcat's ``-e``).
* Every read verb checks the topic first: an unknown topic exits 1 naming it, in every mode.
  ``--format`` prints kcat-style (``%t %p %o %k %s %h %T %K %S``); the run always ends with
  Kafka's "Processed a total of N messages" on stderr.
* **share-consume** joins a share group in explicit acknowledgement mode and
  acknowledges every delivered record: REJECT when ``--reject`` matches its
  value, RELEASE when ``--release`` does, ACCEPT otherwise (records past
  ``--max-messages`` are RELEASEd unprinted, so nothing is lost). Meant for
  scripts and tests that want to watch redelivery. A new share group starts at the latest
  offset: ``--from-beginning`` sets the group's share.auto.offset.reset=earliest first, and a
  run that got nothing says why on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import stat
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from shoal.client.cli.progress import bar
from shoal.client.cli.support import Progress, UsageError, parse_key_values
from shoal.client.core.cluster import TopicPartition
from shoal.client.core.errors import KafkaClientError

__all__ = ["VERBS"]

_BLOCK = 1 << 16
PROGRESS_INTERVAL_S = 5.0


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _stdin_size() -> int | None:
    """The size of stdin when it is a regular file (``produce t < file``): the bar's total."""
    try:
        st = os.fstat(sys.stdin.fileno())
    except (OSError, ValueError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


async def _stdin_lines() -> AsyncIterator[bytes]:
    """Lines of stdin without their line ending, read in blocks on a worker thread."""
    stream = sys.stdin.buffer
    read = getattr(stream, "read1", stream.read)
    rest = b""
    while True:
        block = await asyncio.to_thread(read, _BLOCK)
        if not block:
            break
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if rest:
        yield rest[:-1] if rest.endswith(b"\r") else rest


def _text(b: Any) -> str:
    if b is None:
        return "null"
    if isinstance(b, (bytes, bytearray, memoryview)):
        return bytes(b).decode("utf-8", errors="replace")
    return str(b)


def _size(b: Any) -> int:
    return -1 if b is None else len(b)


_TOKENS: dict[str, Callable[[Any], str]] = {
    "t": lambda r: r.topic,
    "p": lambda r: str(r.partition),
    "o": lambda r: str(r.offset),
    "k": lambda r: _text(r.key) if r.key is not None else "",
    "s": lambda r: _text(r.value) if r.value is not None else "",
    "h": lambda r: ",".join(f"{k}={_text(v)}" for k, v in (r.headers or ())),
    "T": lambda r: str(r.timestamp),
    "K": lambda r: str(_size(r.key)),
    "S": lambda r: str(_size(r.value)),
    "%": lambda r: "%",
}
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}
_TOKEN_RE = re.compile(r"%(.)|\\(.)", re.S)


def check_format(fmt: str) -> None:
    for m in _TOKEN_RE.finditer(fmt):
        if m.group(1) is not None and m.group(1) not in _TOKENS:
            raise UsageError(f"--format: unknown token %{m.group(1)} (known: %t %p %o %k %s %h %T %K %S %%)")
        if m.group(2) is not None and m.group(2) not in _ESCAPES:
            raise UsageError(f"--format: unknown escape \\{m.group(2)} (known: \\n \\t \\\\)")


def format_record(fmt: str, record: Any) -> str:
    """kcat's -f: tokens replaced by the record's fields, escapes by their characters."""
    return _TOKEN_RE.sub(lambda m: _TOKENS[m.group(1)](record) if m.group(1) else _ESCAPES[m.group(2)], fmt)


def _line(record: Any, args: argparse.Namespace) -> str:
    """The text printed for one record, its line end included."""
    if getattr(args, "format", None):
        return format_record(args.format, record)
    value = _text(record.value)
    if getattr(args, "print_key", False):
        return f"{_text(record.key)}{args.key_separator}{value}\n"
    return value + "\n"


class _Out:
    """Records to stdout; a progress bar on stderr when it is a terminal (``cli.progress``).

    Records printed to a terminal are their own progress, so the read verbs draw a bar only
    when stdout goes elsewhere (``shoal consume t --max-messages 1000000 > file``)."""

    def __init__(self, what: str, total: int | None = None, unit: str = "records", *, data_out: bool) -> None:
        self.progress = Progress(what, clock=time.monotonic, interval_s=PROGRESS_INTERVAL_S)
        shown = sys.stderr.isatty() and not (data_out and sys.stdout.isatty())
        self.bar = bar(what, total, unit, enabled=shown)
        self.shown = shown

    def record(self, text: str) -> None:
        sys.stdout.write(text)
        self.count(1)

    def count(self, n: int, steps: int | None = None) -> None:
        self.progress.add(n)
        self.bar.advance(n if steps is None else steps)

    def finish(self) -> None:
        self.bar.close()
        sys.stdout.flush()
        if self.shown:
            _err(self.progress.summary())
        _err(f"Processed a total of {self.progress.total} messages")  # as Kafka's console tools


# -- produce ------------------------------------------------------------------------------------


async def produce(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    headers = list(parse_key_values(args.header or (), "--header").items()) or None
    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    sep = args.key_separator.encode() if args.key_separator is not None else None
    from shoal.client.producer.producer import AsyncProducer

    failed = 0
    first: BaseException | None = None

    def done(fut: Any) -> None:
        nonlocal failed, first
        if fut.cancelled():
            return
        e = fut.exception()
        if e is not None:
            failed += 1
            first = first or e

    size = _stdin_size()
    out = _Out(f"Producing to {args.topic}", size, "bytes" if size is not None else "records", data_out=False)
    line_no = 0
    async with AsyncProducer(settings) as producer:
        try:
            async for line in _stdin_lines():
                line_no += 1
                key = None
                if sep is not None:
                    key, found, value = line.partition(sep)
                    if not found:
                        raise KafkaClientError(f"line {line_no} has no key separator {args.key_separator!r}")
                else:
                    value = line
                fut = await producer.send(args.topic, value, key=key, partition=args.partition, headers=headers)
                fut.add_done_callback(done)
                out.count(1, len(line) + 1 if size is not None else None)
        finally:
            await producer.flush()
    await asyncio.sleep(0)  # let the last outcome callbacks run
    out.finish()
    if failed:
        _err(f"Error: {failed} of {line_no} records were not delivered; the first failure: {first}")
        return 1
    return 0


# -- consume ------------------------------------------------------------------------------------


async def consume(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    if args.group and args.partition is not None:
        raise UsageError("use --group or --partition, not both")
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    offset: int | None = None
    reset = "earliest" if args.from_beginning else "latest"
    if args.offset is not None:
        if args.offset in ("earliest", "latest"):
            reset = args.offset
        else:
            try:
                offset = int(args.offset)
            except ValueError:
                raise UsageError(f"--offset expects a number, 'earliest' or 'latest', got {args.offset!r}") from None
            if offset < 0:
                raise UsageError("--offset must not be negative")
    from shoal.client.consumer.consumer import AsyncConsumer

    cfg = dict(settings)
    cfg.setdefault("auto.offset.reset", reset)
    if args.group:
        cfg["group.id"] = args.group
        cfg.setdefault("enable.auto.commit", "false")  # we commit what we printed, no more
    if args.format:
        check_format(args.format)
    every = await _all_partitions(args.topic, settings)  # an unknown topic fails here, in every mode
    if args.partition is not None and TopicPartition(args.topic, args.partition) not in every:
        raise KafkaClientError(f"topic {args.topic!r} has no partition {args.partition}")
    out = _Out(f"Consuming {args.topic}", args.max_messages, data_out=True)
    left = args.max_messages
    async with AsyncConsumer(cfg) as consumer:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            tps = [TopicPartition(args.topic, args.partition)] if args.partition is not None else every
            consumer.assign(tps)
            if offset is not None:
                consumer.seek(tps[0], offset)
        positions: dict[TopicPartition, int] = {}
        ends: dict[TopicPartition, int] | None = None  # --exit-at-end: where each partition ended at start
        idle_since = time.monotonic()
        try:
            while left is None or left > 0:
                assigned = consumer.assignment()
                if not assigned:
                    idle_since = time.monotonic()  # --timeout-ms counts from the assignment, not the join
                elif args.exit_at_end:
                    if ends is None:
                        ends = await consumer.end_offsets(assigned)
                        for tp in assigned:
                            positions.setdefault(tp, await consumer.position(tp))
                    if all(positions.get(tp, 0) >= end for tp, end in ends.items()):
                        break
                wait_ms = _poll_wait_ms(args.timeout_ms, idle_since)
                if wait_ms is None:
                    break
                batches = await consumer.getmany(timeout_ms=min(wait_ms, 200) if args.exit_at_end else wait_ms)
                for tp, records in sorted(batches.items()):
                    for r in records:
                        if left is not None and left <= 0:
                            break
                        out.record(_line(r, args))
                        positions[TopicPartition(tp[0], tp[1])] = r.offset + 1
                        if left is not None:
                            left -= 1
                if any(batches.values()):
                    idle_since = time.monotonic()
        finally:
            out.finish()
            if args.group and positions:
                await consumer.commit(positions)
    return 0


def _poll_wait_ms(timeout_ms: int | None, idle_since: float) -> int | None:
    """How long the next poll may wait: 1 s, less near ``--timeout-ms`` of idleness; None once it passed."""
    if timeout_ms is None:
        return 1000
    remaining = timeout_ms / 1000 - (time.monotonic() - idle_since)
    if remaining <= 0:
        return None
    return int(max(1, min(1000, remaining * 1000)))


def _admin(settings: dict[str, Any]) -> Any:
    from shoal.client.admin.client import AsyncAdmin
    from shoal.client.core.config import describe

    admin_keys = {name for name, *_ in describe("admin")}
    return AsyncAdmin({k: v for k, v in settings.items() if k in admin_keys})


async def _all_partitions(topic: str, settings: dict[str, Any]) -> list[TopicPartition]:
    """Every partition of ``topic``; an unknown topic fails every verb the same way, at once
    (a group or a share group would otherwise wait for it in silence)."""
    from shoal.client.core.errors import BrokerResponseError

    async with _admin(settings) as admin:
        d = (await admin.describe_topics([topic]))[topic]
    if isinstance(d, BrokerResponseError) and d.code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
        raise KafkaClientError(f"topic {topic!r} does not exist")
    if isinstance(d, BaseException):
        raise d
    return [TopicPartition(topic, p.partition) for p in d.partitions]


# -- share-consume ------------------------------------------------------------------------------


async def _share_from_beginning(group: str, settings: dict[str, Any]) -> None:
    """share.auto.offset.reset=earliest on the group (it only matters while the group has no
    offsets for a partition: a group that already consumed keeps its place, as in Kafka)."""
    from shoal.client.admin.types import AlterConfigOp, ConfigResource

    res = ConfigResource.group(group)
    async with _admin(settings) as admin:
        result = (
            await admin.incremental_alter_configs({res: [AlterConfigOp.set("share.auto.offset.reset", "earliest")]})
        )[res]
    if result is not None:
        raise result


def _pattern(text: str | None, option: str) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as e:
        raise UsageError(f"{option}: not a regular expression: {e}") from None


async def share_consume(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    release = _pattern(args.release, "--release")
    reject = _pattern(args.reject, "--reject")
    from shoal.client.share.consumer import AcknowledgeType, AsyncShareConsumer

    if args.format:
        check_format(args.format)
    await _all_partitions(args.topic, settings)  # an unknown topic fails at once
    if args.from_beginning:
        await _share_from_beginning(args.group, settings)
    cfg = dict(settings)
    cfg["group.id"] = args.group
    cfg["share.acknowledgement.mode"] = "explicit"
    out = _Out(f"Share-consuming {args.topic}", args.max_messages, data_out=True)
    left = args.max_messages
    failures: list[BaseException] = []
    async with AsyncShareConsumer(cfg) as consumer:
        consumer.subscribe([args.topic])
        idle_since = time.monotonic()
        try:
            while left is None or left > 0:
                if not consumer.assignment():
                    idle_since = time.monotonic()  # --timeout-ms counts from the assignment, not the join
                wait_ms = _poll_wait_ms(args.timeout_ms, idle_since)
                if wait_ms is None:
                    break
                records = await consumer.poll(wait_ms)
                for r in records:
                    if left is not None and left <= 0:
                        consumer.acknowledge(r, AcknowledgeType.RELEASE)  # not ours to print: back it goes
                        continue
                    value = _text(r.value)
                    if reject is not None and reject.search(value):
                        kind = AcknowledgeType.REJECT
                    elif release is not None and release.search(value):
                        kind = AcknowledgeType.RELEASE
                    else:
                        kind = AcknowledgeType.ACCEPT
                    consumer.acknowledge(r, kind)
                    out.record(_line(r, args))
                    if left is not None:
                        left -= 1
                if records:
                    idle_since = time.monotonic()
        finally:
            out.finish()
            results = await consumer.commit_sync()
            failures = [e for e in results.values() if e is not None]
    if out.progress.total == 0 and not args.from_beginning:
        _err(
            f"No records came. A share group with no offsets starts at the latest offset "
            f"(share.auto.offset.reset=latest): only records produced after it joined are delivered. "
            f"--from-beginning sets the group's share.auto.offset.reset=earliest first "
            f"(or: shoal configs alter --group {args.group} --set share.auto.offset.reset=earliest)."
        )
    if failures:
        _err(f"Error: acknowledgements failed: {failures[0]}")
        return 1
    return 0


VERBS = {"produce": produce, "consume": consume, "share-consume": share_consume}
