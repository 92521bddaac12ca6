"""Per-topic log settings, under Kafka's topic config names (snake_cased)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shoal.broker.log.index import INT32_MAX

__all__ = ["CLEANUP_POLICIES", "LONG_MAX", "TIMESTAMP_TYPES", "LogConfig"]

LONG_MAX = 2**63 - 1
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")


@dataclass(slots=True)
class LogConfig:
    """Per-topic log settings (Kafka's topic config names, snake_cased).

    ``cleanup_policy`` is "delete", "compact" or both ("compact,delete" or a
    sequence).  "delete" is ``enforce_retention``; "compact" is carried out by
    ``broker.log.cleaner.LogCleaner``, driven by the broker.  ``segment_index_bytes``
    caps an index like Kafka's ``segment.index.bytes``: a full index rolls.
    """

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    cleanup_policy: str | Sequence[str] = "delete"
    flush_interval_messages: int = LONG_MAX
    flush_interval_ms: int = LONG_MAX
    segment_index_bytes: int = 10 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 0 < self.segment_bytes <= INT32_MAX:
            raise ValueError(f"segment_bytes {self.segment_bytes} must be in [1, {INT32_MAX}]")
        if self.segment_ms <= 0:
            raise ValueError(f"segment_ms {self.segment_ms} must be positive")
        if self.index_interval_bytes < 0 or self.segment_index_bytes < 12:
            raise ValueError("index_interval_bytes must be >= 0 and segment_index_bytes >= 12")
        if self.max_message_bytes <= 0:
            raise ValueError(f"max_message_bytes {self.max_message_bytes} must be positive")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"message_timestamp_type must be one of {TIMESTAMP_TYPES}")
        unknown = set(self.policies) - set(CLEANUP_POLICIES)
        if unknown or not self.policies:
            raise ValueError(f"cleanup_policy {self.cleanup_policy!r} is not delete and/or compact")

    @property
    def policies(self) -> tuple[str, ...]:
        raw = self.cleanup_policy.split(",") if isinstance(self.cleanup_policy, str) else self.cleanup_policy
        return tuple(p.strip() for p in raw if p.strip())

    @property
    def deletes(self) -> bool:
        return "delete" in self.policies

    @property
    def compacts(self) -> bool:
        return "compact" in self.policies

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"
