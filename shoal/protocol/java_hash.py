"""Java's ``String.hashCode``, which Kafka's placement decisions are made of.

A group's coordinator partition is ``abs(groupId.hashCode()) % partitions`` and
Java's assignors iterate ``HashMap``s ordered by these hashes, so a broker or a
client that computes them differently places groups or partitions differently
from Kafka. One definition, over UTF-16 code units as Java counts them.
"""

from __future__ import annotations

__all__ = ["java_string_hash", "java_string_hashcode"]

_MASK = 0xFFFFFFFF


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` as an unsigned 32-bit value."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK
    return h


def java_string_hashcode(s: str) -> int:
    """``String.hashCode()`` as Java returns it: a signed 32-bit int."""
    h = java_string_hash(s)
    return h - (1 << 32) if h >= 1 << 31 else h
