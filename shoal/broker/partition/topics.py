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
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from shoal.broker.log.fileops import fsync_dir
from shoal.broker.partition.partition import Partition
from shoal.protocol.errors import ErrorCode, KafkaErrorResponse

log = logging.getLogger("shoal.topics")

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__share_group_state"})
_CLOSE_ERRORS_LOGGED = 10


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules: 1-249 of [a-zA-Z0-9._-], not '.' or '..'."""
    if not name or name in (".", "..") or len(name) > MAX_NAME_LENGTH or not _LEGAL.fullmatch(name):
        raise KafkaErrorResponse(ErrorCode.INVALID_TOPIC_EXCEPTION, f"invalid topic name {name!r}")


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
    ) -> None:
        self.data_dir = data_dir
        self._open_partition = open_partition
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
            raise KafkaErrorResponse(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        key = _collision_key(name)
        for other in self._by_name:
            if _collision_key(other) == key:
                raise KafkaErrorResponse(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic '{other}' ('.' and '_' may collide).",
                )
        if num_partitions <= 0:
            raise KafkaErrorResponse(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")

    def create(self, name: str, num_partitions: int, configs: dict[str, str]) -> Topic:
        self.check_create(name, num_partitions)
        topic = Topic(name, uuid.uuid4(), dict(configs))
        for i in range(num_partitions):
            topic.partitions.append(self._open_partition(topic, i, True))
        self._by_name[name] = topic
        self._by_id[topic.topic_id] = topic
        self._persist()
        log.info("created topic %s (%s) with %d partitions", name, topic.topic_id, num_partitions)
        return topic

    def delete(self, name: str) -> Topic:
        topic = self._by_name.pop(name, None)
        if topic is None:
            raise KafkaErrorResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        self._by_id.pop(topic.topic_id, None)
        self._persist()
        for p in topic.partitions:
            p.delete()
        log.info("deleted topic %s (%s)", name, topic.topic_id)
        return topic

    def add_partitions(self, name: str, total: int) -> Topic:
        topic = self._by_name[name]
        start = len(topic.partitions)
        for i in range(start, total):
            topic.partitions.append(self._open_partition(topic, i, True))
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
