"""Producer id allocation for InitProducerId, unique across restarts.

Ids are handed out from blocks: before the first id of a block is used, the
end of the block is persisted (write temp + fsync + rename), so a crash can
skip ids but never reuse one — a reused id would let a new producer's
sequence numbers collide with an old one's state. As in Kafka, a request
without a transactional id always gets a fresh id with epoch 0.
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK = 1000


class ProducerIdManager:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / "producer-id-block"
        self._next = 0
        self._limit = 0
        if self._path.exists():
            self._next = self._limit = int(self._path.read_text().strip() or 0)

    def _reserve(self) -> None:
        limit = self._next + BLOCK
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(f"{limit}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._limit = limit

    def next_id(self) -> int:
        if self._next >= self._limit:
            self._reserve()
        pid = self._next
        self._next += 1
        return pid

    def init(self, producer_id: int = -1, producer_epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for an idempotent (non-transactional) producer."""
        return self.next_id(), 0
