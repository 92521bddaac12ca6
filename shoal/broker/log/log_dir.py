"""A log directory's health: online until its first storage error, then offline.

Kafka's rule (``LogDirFailureChannel`` feeding ``ReplicaManager.handleLogDirFailure``):
an I/O error on any file of a log directory — a write that hits ENOSPC, an
fsync that returns EIO, a filesystem remounted read-only — takes the whole
directory offline, not just the partition that noticed it.  A disk that
failed one write cannot be trusted with the next, and a half-failed disk that
keeps serving some partitions would acknowledge records it may lose.  From
then on every partition in the directory answers KAFKA_STORAGE_ERROR, and the
directory comes back only when the broker restarts (recovering its logs as
after a crash).

This object only records the first error and tells its listeners once;
what "offline" means for requests is decided by the partition layer and the
broker (``broker.partition.partition``, ``broker.broker``).  Shoal stores everything
in one log directory (the first of ``log.dirs``), so an offline directory
means every partition of the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["LogDir"]

log = logging.getLogger("shoal.log")


class LogDir:
    __slots__ = ("_listeners", "error", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.error: BaseException | None = None  # the first storage error: offline from then on
        self._listeners: list[Callable[[LogDir], None]] = []

    @property
    def offline(self) -> bool:
        return self.error is not None

    def add_listener(self, listener: Callable[[LogDir], None]) -> None:
        """Call ``listener(self)`` once, when the directory goes offline."""
        self._listeners.append(listener)

    def fail(self, error: BaseException, where: str) -> None:
        """Record a storage error in ``where`` (a file or partition path); the first takes the dir offline."""
        if self.error is not None:
            return
        self.error = error
        log.error(
            "log directory %s is offline after a storage error in %s: %s; its partitions answer "
            "KAFKA_STORAGE_ERROR until the broker restarts",
            self.path,
            where,
            error,
        )
        for listener in self._listeners:
            listener(self)
