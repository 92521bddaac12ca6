"""Java's orderings, so client-side assignors decide exactly as the Java client does.

Why this exists: a classic consumer group's assignment is computed by one
member, the leader, and Kafka's assignors are specified only by their Java
implementation. Wherever that implementation breaks ties by iterating a
``java.util.HashMap``/``HashSet`` or by comparing strings, the outcome depends
on Java's rules, not on anything in the protocol. To hand out the same
partitions as a Java leader would, the assignors here sort strings the way
``String.compareTo`` does and iterate hashed collections in the order Java's
would.

``HashMap`` iteration order, as implemented by OpenJDK 8 and later: buckets
in index order, index ``spread(hashCode) & (capacity - 1)``, and within one
bucket the order in which keys were (last) inserted — a resize splits each
bucket in two while keeping relative order, so insertion order survives. The
capacity starts at 16 (or ``tableSizeFor`` of the requested size) and doubles
whenever the size exceeds 3/4 of it; it never shrinks. Buckets holding eight
or more colliding keys are turned into trees by Java and ordered differently;
that needs ~8 keys with equal low hash bits among a dozen and is not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

from shoal.protocol.java_hash import java_string_hash

__all__ = [
    "JavaHashMap",
    "JavaHashSet",
    "java_hash",
    "java_sorted",
    "java_string_key",
    "topic_partition_hash",
]

K = TypeVar("K")
V = TypeVar("V")

_MASK = 0xFFFFFFFF
_DEFAULT_CAPACITY = 16
_MAX_CAPACITY = 1 << 30


def java_string_key(s: str) -> bytes:
    """Sort key ordering strings as Java's ``String.compareTo`` (UTF-16 code units)."""
    return s.encode("utf-16-be", "surrogatepass")


def java_sorted(items: Iterable[str]) -> list[str]:
    return sorted(items, key=java_string_key)


def topic_partition_hash(topic: str, partition: int) -> int:
    """``org.apache.kafka.common.TopicPartition.hashCode()`` (unsigned 32-bit)."""
    return (31 * ((31 + partition) & _MASK) + java_string_hash(topic)) & _MASK


def java_hash(key: object) -> int:
    """hashCode of a str or a (topic, partition) pair, as Java computes it."""
    if isinstance(key, str):
        return java_string_hash(key)
    if isinstance(key, tuple) and len(key) == 2:
        return topic_partition_hash(key[0], key[1])
    raise TypeError(f"no Java hashCode for {type(key).__name__}")


def _spread(h: int) -> int:
    return (h ^ (h >> 16)) & _MASK


def table_size_for(n: int) -> int:
    """Smallest power of two >= n (``HashMap.tableSizeFor``)."""
    if n <= 1:
        return 1
    return min(1 << (n - 1).bit_length(), _MAX_CAPACITY)


class JavaHashMap(Generic[K, V]):
    """A dict that iterates in ``java.util.HashMap`` order.

    ``initial_capacity`` mirrors ``new HashMap<>(n)``; the default is
    ``new HashMap<>()``. Keys must be str or (topic, partition) tuples.
    """

    __slots__ = ("_capacity", "_data", "_hashes")

    def __init__(self, initial_capacity: int | None = None) -> None:
        self._data: dict[K, V] = {}
        self._hashes: dict[K, int] = {}
        self._capacity = _DEFAULT_CAPACITY if initial_capacity is None else table_size_for(max(initial_capacity, 1))

    @property
    def capacity(self) -> int:
        return self._capacity

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self._data:
            self._hashes[key] = _spread(java_hash(key))
            self._data[key] = value
            while len(self._data) > self._capacity * 3 // 4 and self._capacity < _MAX_CAPACITY:
                self._capacity <<= 1
        else:
            self._data[key] = value

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __delitem__(self, key: K) -> None:
        del self._data[key]
        del self._hashes[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._data.get(key, default)

    def pop(self, key: K) -> V:
        value = self._data.pop(key)
        del self._hashes[key]
        return value

    def clear(self) -> None:
        """Like ``HashMap.clear()``: the table keeps its capacity."""
        self._data.clear()
        self._hashes.clear()

    def keys(self) -> list[K]:
        mask = self._capacity - 1
        hashes = self._hashes
        # Python dicts keep insertion order, so a stable sort by bucket is Java's order.
        return sorted(self._data, key=lambda k: hashes[k] & mask)

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def items(self) -> list[tuple[K, V]]:
        return [(k, self._data[k]) for k in self.keys()]

    def values(self) -> list[V]:
        return [self._data[k] for k in self.keys()]


class JavaHashSet(Generic[K]):
    """A set that iterates in ``java.util.HashSet`` order (a HashMap's keys)."""

    __slots__ = ("_map",)

    def __init__(self, items: Iterable[K] = ()) -> None:
        self._map: JavaHashMap[K, bool] = JavaHashMap()
        for item in items:
            self._map[item] = True

    def add(self, item: K) -> None:
        self._map[item] = True

    def discard(self, item: K) -> None:
        if item in self._map:
            del self._map[item]

    def __contains__(self, item: object) -> bool:
        return item in self._map

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[K]:
        return iter(self._map.keys())

    def first(self) -> K:
        """``set.iterator().next()``."""
        return self._map.keys()[0]
