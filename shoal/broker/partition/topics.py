"""Topics: names, ids, partition counts and config overrides, and their logs.

Shoal is a single-node cluster, so the "metadata log" Kafka keeps in KRaft is
one small JSON file (`topics.json` in the data dir) rewritten atomically on
every change (write temp, fsync, rename, fsync dir). Topic ids are random
UUIDs generated once at creation and kept across restarts, as clients (and
librdkafka's share consumer) resolve assignments by id. A deleted topic's
directories are removed; re-creating the name yields a new id.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from shoal.broker.errors import ErrorAnswer
from shoal.broker.log.fileops import fsync_dir
from shoal.broker.partition.partition import Partition
from shoal.protocol.errors import ErrorCode

log = logging.getLogger("shoal.topics")

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__share_group_state"})
_CLOSE_ERRORS_LOGGED = 10
FDS_PER_PARTITION = 1  # an open partition holds its active segment's file (measured: 1,000 partitions, 1,000 fds)
FD_RESERVE_FRACTION = 0.1  # of the open-file limit, kept free for connections, reads and flushes


def descriptor_headroom() -> int | None:
    """File descriptors this process may still open under its soft limit, less a reserve for
    connections and transient files; None where the count cannot be read (no /proc)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        used = len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    return soft - used - max(256, int(soft * FD_RESERVE_FRACTION))


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules: 1-249 of [a-zA-Z0-9._-], not '.' or '..'."""
    if not name or name in (".", "..") or len(name) > MAX_NAME_LENGTH or not _LEGAL.fullmatch(name):
        raise ErrorAnswer(ErrorCode.INVALID_TOPIC_EXCEPTION, f"invalid topic name {name!r}")


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str] = field(default_factory=dict)
    partitions: list[Partition] = field(default_factory=list)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class TopicManager:
    """Owns every topic and partition log of the broker."""

    def __init__(
        self,
        data_dir: Path,
        open_partition: Callable[[Topic, int, bool], Partition],
        max_partitions: int = 2**31 - 1,
        headroom: Callable[[], int | None] = descriptor_headroom,
    ) -> None:
        self.data_dir = data_dir
        self._open_partition = open_partition
        self.max_partitions = max_partitions  # every topic's partitions, internal ones included
        self._headroom = headroom
        self._creating: dict[str, int] = {}  # topic -> partitions being opened (a creation in steps)
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self._meta_path = data_dir / "topics.json"

    # -- lookups -------------------------------------------------------------
    def get(self, name: str) -> Topic | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)

    def partition(self, name: str, index: int) -> Partition | None:
        t = self._by_name.get(name)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

    # -- lifecycle -------------------------------------------------------------
    def load(self, clean_shutdown: bool) -> None:
        if not self._meta_path.exists():
            return
        meta = json.loads(self._meta_path.read_text(encoding="utf-8"))
        for entry in meta["topics"]:
            topic = Topic(entry["name"], uuid.UUID(entry["id"]), dict(entry.get("configs", {})))
            for i in range(entry["partitions"]):
                topic.partitions.append(self._open_partition(topic, i, clean_shutdown))
            self._by_name[topic.name] = topic
            self._by_id[topic.topic_id] = topic

    def close(self) -> list[str]:
        """Close every partition, whatever happens to the others.

        Returns the partitions that did not close cleanly (each logged): an
        offline log directory, a flush that failed, any other error. Their
        files are closed all the same; what they hold past their last flush
        is recovered at the next start, which must then be an unclean one.
        """
        unclean: list[str] = []
        for t in self._by_name.values():
            for p in t.partitions:
                try:
                    p.close()
                except Exception as e:  # noqa: BLE001 - one partition must not keep the rest open
                    name = f"{t.name}-{p.index}"
                    unclean.append(name)
                    if len(unclean) <= _CLOSE_ERRORS_LOGGED:
                        log.warning("partition %s did not close cleanly: %s", name, e)
        if len(unclean) > _CLOSE_ERRORS_LOGGED:  # an offline directory: every partition, for one reason
            log.warning("%d more partitions did not close cleanly", len(unclean) - _CLOSE_ERRORS_LOGGED)
        return unclean

    def abandon(self, *, lose_unflushed: bool) -> None:
        """Close every partition as a crash would (``Broker.halt``): nothing flushed or written."""
        for t in self._by_name.values():
            for p in t.partitions:
                p.abandon(lose_unflushed=lose_unflushed)

    def _persist(self) -> None:
        meta = {
            "version": 1,
            "topics": [
                {
                    "name": t.name,
                    "id": str(t.topic_id),
                    "partitions": len(t.partitions),
                    "configs": t.configs,
                }
                for t in self._by_name.values()
            ],
        }
        tmp = self._meta_path.with_suffix(".json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._meta_path)
        fsync_dir(self.data_dir)

    # -- changes -------------------------------------------------------------
    def check_create(self, name: str, num_partitions: int) -> None:
        """Raise the error Kafka gives for creating `name`, if any."""
        validate_topic_name(name)
        if name in self._by_name:
            raise ErrorAnswer(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        key = _collision_key(name)
        for other in self._by_name:
            if _collision_key(other) == key:
                raise ErrorAnswer(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic '{other}' ('.' and '_' may collide).",
                )
        if num_partitions <= 0:
            raise ErrorAnswer(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if name in self._creating:
            raise ErrorAnswer(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' is being created.")
        self.check_room(num_partitions)

    def partition_count(self) -> int:
        """Partitions open or being opened, over every topic."""
        return sum(len(t.partitions) for t in self._by_name.values()) + sum(self._creating.values())

    def check_room(self, more: int) -> None:
        """Refuse (POLICY_VIOLATION, as a creation policy would) ``more`` partitions past
        ``max.partitions`` or past what the open-file limit leaves: each holds a file."""
        total = self.partition_count() + more
        if total > self.max_partitions:
            raise ErrorAnswer(
                ErrorCode.POLICY_VIOLATION,
                f"{more} more partitions would make {total}, over this broker's max.partitions={self.max_partitions}.",
            )
        room = self._headroom()
        if room is not None and more * FDS_PER_PARTITION > room:
            raise ErrorAnswer(
                ErrorCode.POLICY_VIOLATION,
                f"{more} more partitions need {more * FDS_PER_PARTITION} open files; the broker's open-file "
                f"limit (ulimit -n) leaves room for {max(room, 0) // FDS_PER_PARTITION}.",
            )

    def create(self, name: str, num_partitions: int, configs: dict[str, str]) -> Topic:
        return _run(self.create_steps(name, num_partitions, configs))

    def create_steps(self, name: str, num_partitions: int, configs: dict[str, str]) -> Generator[None, None, Topic]:
        """Create a topic one partition at a time, yielding after each, so that an event loop can
        serve others in between (``handlers.admin`` drives it). The topic exists only once every
        partition opened; a failure or an abandoned creation (``close()``) deletes what it opened."""
        self.check_create(name, num_partitions)
        topic = Topic(name, uuid.uuid4(), dict(configs))
        self._creating[name] = num_partitions
        try:
            topic.partitions = yield from self._open_new(topic, range(num_partitions))
        finally:
            del self._creating[name]
        self._by_name[name] = topic
        self._by_id[topic.topic_id] = topic
        self._persist()
        log.info("created topic %s (%s) with %d partitions", name, topic.topic_id, num_partitions)
        return topic

    def _open_new(self, topic: Topic, indexes: range) -> Generator[None, None, list[Partition]]:
        """Open ``indexes`` of ``topic`` as new partitions and return them; if they do not all
        open, close and delete the ones that did and raise."""
        opened: list[Partition] = []
        failed: Path | None = None  # the directory of the partition that did not open
        done = False
        try:
            for i in indexes:
                try:
                    opened.append(self._open_partition(topic, i, True))
                except OSError as e:
                    failed = self.partition_dir(topic, i)
                    raise ErrorAnswer(
                        ErrorCode.UNKNOWN_SERVER_ERROR, f"could not open partition {topic.name}-{i}: {e}"
                    ) from e
                yield
            done = True
        finally:
            if not done:
                self._discard(topic.name, opened)  # first: closing their files frees descriptors
                if failed is not None:
                    shutil.rmtree(failed, ignore_errors=True)
        return opened

    def _discard(self, name: str, partitions: list[Partition]) -> None:
        for p in partitions:
            try:
                p.delete()
            except Exception as e:  # noqa: BLE001 - release every other one
                log.warning("could not remove partition %s-%d of an unfinished creation: %s", name, p.index, e)
        if partitions:
            log.warning("creation of %s failed: removed the %d partitions it had opened", name, len(partitions))

    def delete(self, name: str) -> Topic:
        topic = self._by_name.pop(name, None)
        if topic is None:
            raise ErrorAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        self._by_id.pop(topic.topic_id, None)
        self._persist()
        for p in topic.partitions:
            p.delete()
        log.info("deleted topic %s (%s)", name, topic.topic_id)
        return topic

    def add_partitions(self, name: str, total: int) -> Topic:
        return _run(self.add_partitions_steps(name, total))

    def add_partitions_steps(self, name: str, total: int) -> Generator[None, None, Topic]:
        """``create_steps`` for more partitions of an existing topic."""
        topic = self._by_name[name]
        start = len(topic.partitions)
        if name in self._creating:
            raise ErrorAnswer(ErrorCode.INVALID_PARTITIONS, f"Partitions of {name} are being added.")
        self.check_room(total - start)
        self._creating[name] = total - start
        try:
            added = yield from self._open_new(topic, range(start, total))
        finally:
            del self._creating[name]
        if self._by_name.get(name) is not topic:  # deleted while the partitions were opening
            self._discard(name, added)
            raise ErrorAnswer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} was deleted.")
        topic.partitions.extend(added)
        self._persist()
        log.info("topic %s now has %d partitions", name, total)
        return topic

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self._by_name[name]
        topic.configs = dict(configs)
        self._persist()
        for p in topic.partitions:
            p.reconfigure()

    def partition_dir(self, topic: Topic, index: int) -> Path:
        return self.data_dir / f"{topic.name}-{index}"


def _run(steps: Generator[None, None, Topic]) -> Topic:
    """Drive a creation to its end at once (internal topics, Metadata's auto-creation)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
