"""Key-ordered delivery for share partitions (beyond Kafka). Sans-IO.

Why: a share group spreads one partition's records over all its members, so two
records of one key (two updates of one account) can be processed at once, or the
later one first. With ``shoal.share.key.ordering=true`` the share partition keeps,
per partition:

* at most one record per key in flight (ACQUIRED) across all members;
* the records of a key delivered in offset order: a record is acquirable only
  while it is the *first open* record of its key, so a released record of a key
  goes out again before that key's later records;
* records without a key (null key) unaffected.

"Open" means not done: AVAILABLE, ACQUIRED, or with a state write still pending
(an acceptance that might be undone). ACKNOWLEDGED, ARCHIVED and ARCHIVING (on
its way to the dead-letter topic: done for the consumers) are done.

:class:`KeyOrder` holds, for records the share partition has looked at, a queue
of open offsets per key, pruned lazily from its head (records only ever move from
open to done, in any order, so a done head can be dropped for good). Keys come
from decoding the log batches a fetch read (cached per batch), so nothing here is
persisted: after a restart nothing is ACQUIRED, and since an acquisition scans
forward from the first acquirable offset, a key's earlier open records are
registered again (re-read from the log) before any later record of it is
admitted -- the state is rebuilt, not stored. The share partition asks
:meth:`admit` for each record it considers in offset order and :meth:`blocked`
when looking for its next fetch offset.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["KeyOrder", "batch_keys"]

CACHED_BATCHES = 64  # decoded batches kept (the batches around the next fetch offset)
SWEEP_MIN = 4096  # registered offsets before a sweep of done records


def batch_keys(header: Any) -> list[bytes | None]:
    """The record keys of one log batch, by offset delta (None: no key, or no record there)."""
    n = header.last_offset - header.base_offset + 1
    keys: list[bytes | None] = [None] * n
    base = header.base_offset
    for offset, key in header.records(verify_crc=False, make=lambda o, _t, k, *_r: (o, k)):
        if 0 <= offset - base < n:
            keys[offset - base] = key
    return keys


class KeyOrder:
    """Per-key queues of open offsets; see the module docstring."""

    __slots__ = ("_cache", "_key_of", "_queues", "_sweep_at", "decode")

    def __init__(self, decode: Callable[[Any], list[bytes | None]] = batch_keys) -> None:
        self.decode = decode
        self._queues: dict[bytes, list[int]] = {}
        self._key_of: dict[int, bytes] = {}
        self._cache: OrderedDict[int, tuple[int, list[bytes | None]]] = OrderedDict()
        self._sweep_at = SWEEP_MIN

    def __len__(self) -> int:
        return len(self._key_of)

    def clear(self) -> None:
        self._queues.clear()
        self._key_of.clear()
        self._cache.clear()

    # -- keys ------------------------------------------------------------------------
    def keys_of(self, header: Any) -> list[bytes | None]:
        """The keys of a batch, decoded once per batch."""
        hit = self._cache.get(header.base_offset)
        if hit is not None and hit[0] == header.last_offset:
            self._cache.move_to_end(header.base_offset)
            return hit[1]
        keys = self.decode(header)
        self._cache[header.base_offset] = (header.last_offset, keys)
        while len(self._cache) > CACHED_BATCHES:
            self._cache.popitem(last=False)
        return keys

    def pieces(
        self, fetched: Sequence[Any], first: int, last: int, is_open: Callable[[int], bool]
    ) -> list[tuple[int, int, bool]]:
        """Cover [first, last] (data offsets of one fetched batch) with (a, b, admitted) pieces,
        registering every record: admitted records may be acquired now, the others wait."""
        i = bisect.bisect_right([h.base_offset for h in fetched], first) - 1
        h = fetched[max(i, 0)]
        if not h.base_offset <= first <= h.last_offset:
            return [(first, last, True)]
        keys = self.keys_of(h)
        base = h.base_offset
        out: list[tuple[int, int, bool]] = []
        for o in range(first, min(last, h.last_offset) + 1):
            key = keys[o - base]
            ok = key is None or self.admit(o, key, is_open)
            if out and out[-1][2] == ok and out[-1][1] == o - 1:
                out[-1] = (out[-1][0], o, ok)
            else:
                out.append((o, o, ok))
        return out

    # -- queues ------------------------------------------------------------------------
    def admit(self, offset: int, key: bytes, is_open: Callable[[int], bool]) -> bool:
        """Register `offset` under `key`; True when it is the first open record of its key."""
        q = self._queues.get(key)
        if q is None:
            self._queues[key] = [offset]
            self._key_of[offset] = key
            self._maybe_sweep(is_open)
            return True
        if offset not in self._key_of:
            bisect.insort(q, offset)
            self._key_of[offset] = key
        return self._head(q, is_open) == offset

    def blocked(self, offset: int, is_open: Callable[[int], bool]) -> bool:
        """Whether a known record waits behind an earlier open record of its key."""
        key = self._key_of.get(offset)
        if key is None:
            return False
        return self._head(self._queues[key], is_open) != offset

    def _head(self, q: list[int], is_open: Callable[[int], bool]) -> int:
        drop = 0
        while drop < len(q) - 1 and not is_open(q[drop]):
            del self._key_of[q[drop]]
            drop += 1
        if drop:
            del q[:drop]
        return q[0]

    def _maybe_sweep(self, is_open: Callable[[int], bool]) -> None:
        """Drop done records of keys not seen again (bounded memory with many keys)."""
        if len(self._key_of) < self._sweep_at:
            return
        for key, q in list(self._queues.items()):
            keep = [o for o in q if is_open(o)]
            for o in set(q).difference(keep):
                del self._key_of[o]
            if keep:
                self._queues[key] = keep
            else:
                del self._queues[key]
        self._sweep_at = max(SWEEP_MIN, 2 * len(self._key_of))

    def held_keys(self, is_acquired: Callable[[int], bool]) -> dict[bytes, int]:
        """Key -> offset of its ACQUIRED record (for tests and views)."""
        return {k: o for o, k in self._key_of.items() if is_acquired(o)}
