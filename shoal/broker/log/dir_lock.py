"""The data directory's lock: one broker per log directory.

Two brokers writing the same partition files interleave their appends and
corrupt each other's offsets with no error anywhere (seen: 200 records, offsets
0-99 twice). Kafka takes an OS lock on a `.lock` file in every log directory at
start and refuses to run when another process holds it. We do the same with
`flock`: the kernel drops the lock when the holder's file descriptor closes, so
a broker killed with -9 leaves nothing stale behind, and no pid check is
needed. The holder writes its pid into the file only so that the refusal can
name it.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirLocked(RuntimeError):
    """Another process (or another broker in this process) holds the directory."""


class DirLock:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise DataDirLocked naming the holder; never blocks."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise DataDirLocked(
                f"{self.path.parent} is in use by another broker ({holder or 'holder unknown'}): {self.path} is locked"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, only the holder's name is missing

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""
