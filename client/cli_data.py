"""The data verbs of ``shoal``: produce (stdin lines -> records), consume, share-consume.

Why they look like Kafka's console tools: a line is a record, ``--key-separator``
splits key from value, output is the value per line (``--print-key`` adds the
key); data goes to stdout, progress and rates to stderr every few seconds on
long runs, so ``shoal consume ... > file`` captures only records.

* **produce** reads stdin in blocks on a worker thread (a regular file or a
  pipe alike) and keeps the producer's send path on the event loop; every
  record's outcome is counted through its future, and the exit code is 1
  when any record failed (one line names how many and the first error).
* **consume** reads as a consumer group (``--group``, committing what it
  printed), or one partition without a group (``--partition`` with
  ``--offset N|earliest|latest``), or every partition of the topic without a
  group. It stops after ``--max-messages`` or ``--timeout-ms`` without a record.
* **share-consume** joins a share group in explicit acknowledgement mode and
  acknowledges every delivered record: REJECT when ``--reject`` matches its
  value, RELEASE when ``--release`` does, ACCEPT otherwise (records past
  ``--max-messages`` are RELEASEd unprinted, so nothing is lost). Meant for
  scripts and tests that want to watch redelivery.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from client.cli_support import Progress, UsageError, parse_key_values
from client.cluster import TopicPartition
from client.errors import KafkaClientError

__all__ = ["VERBS"]

_BLOCK = 1 << 16
PROGRESS_INTERVAL_S = 5.0


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


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


def _line(record: Any, args: argparse.Namespace) -> str:
    value = _text(record.value)
    if getattr(args, "print_key", False):
        return f"{_text(record.key)}{args.key_separator}{value}"
    return value


class _Out:
    """Records to stdout, progress to stderr."""

    def __init__(self, what: str) -> None:
        self.progress = Progress(what, clock=time.monotonic, interval_s=PROGRESS_INTERVAL_S)
        self.reported = False

    def record(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        self.count(1)

    def count(self, n: int) -> None:
        msg = self.progress.add(n)
        if msg is not None:
            sys.stdout.flush()
            _err(msg)
            self.reported = True

    def finish(self) -> None:
        sys.stdout.flush()
        if self.reported:
            _err(self.progress.summary())


# -- produce ------------------------------------------------------------------------------------


async def produce(args: argparse.Namespace, settings: dict[str, Any]) -> int:
    headers = list(parse_key_values(args.header or (), "--header").items()) or None
    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    sep = args.key_separator.encode() if args.key_separator is not None else None
    from client.producer import AsyncProducer

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

    out = _Out("Produced")
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
                out.count(1)
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
    from client.consumer import AsyncConsumer

    cfg = dict(settings)
    cfg.setdefault("auto.offset.reset", reset)
    if args.group:
        cfg["group.id"] = args.group
        cfg.setdefault("enable.auto.commit", "false")  # we commit what we printed, no more
    out = _Out("Consumed")
    left = args.max_messages
    async with AsyncConsumer(cfg) as consumer:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            if args.partition is not None:
                tps = [TopicPartition(args.topic, args.partition)]
            else:
                tps = await _all_partitions(args.topic, settings)
            consumer.assign(tps)
            if offset is not None:
                consumer.seek(tps[0], offset)
        positions: dict[TopicPartition, int] = {}
        idle_since = time.monotonic()
        try:
            while left is None or left > 0:
                wait_ms = _poll_wait_ms(args.timeout_ms, idle_since)
                if wait_ms is None:
                    break
                batches = await consumer.getmany(timeout_ms=wait_ms)
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


async def _all_partitions(topic: str, settings: dict[str, Any]) -> list[TopicPartition]:
    """Every partition of ``topic``, asked with an admin client on the connection settings."""
    from client.admin import AsyncAdmin
    from client.config import describe

    admin_keys = {name for name, *_ in describe("admin")}
    async with AsyncAdmin({k: v for k, v in settings.items() if k in admin_keys}) as admin:
        d = (await admin.describe_topics([topic]))[topic]
    if isinstance(d, BaseException):
        raise d
    return [TopicPartition(topic, p.partition) for p in d.partitions]


# -- share-consume ------------------------------------------------------------------------------


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
    from client.share_consumer import AcknowledgeType, AsyncShareConsumer

    cfg = dict(settings)
    cfg["group.id"] = args.group
    cfg["share.acknowledgement.mode"] = "explicit"
    out = _Out("Delivered")
    left = args.max_messages
    failures: list[BaseException] = []
    async with AsyncShareConsumer(cfg) as consumer:
        consumer.subscribe([args.topic])
        idle_since = time.monotonic()
        try:
            while left is None or left > 0:
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
    if failures:
        _err(f"Error: acknowledgements failed: {failures[0]}")
        return 1
    return 0


VERBS = {"produce": produce, "consume": consume, "share-consume": share_consume}
