"""The system calls a log makes on its own files, gathered in one object.

Why: a disk fails a log in a handful of ways — ENOSPC from a write on a full
filesystem, EIO from an fsync when the device gave up, EROFS once the kernel
remounted the filesystem read-only — and each arrives as an ``OSError`` from
one of a few calls: appending to a segment, rewriting a small file in place,
fsyncing.  Sending the log's appends (on the event loop and on the writer
thread, ``broker.log.writer``), its index and checkpoint writes and the
group-commit fsyncs (``broker.log.flusher``) through one ``FileOps`` gives the
broker a single place where storage I/O happens, and gives tests a seam to
make the next of those calls fail with a chosen errno: without root, without
filling a disk, and with the error raised exactly where the kernel's would
be, so everything above it runs as it would on a failing disk.

A fault is armed with ``fail_next(op, errno, times)``; ``op`` is ``"write"``
(appends, index files, checkpoints) or ``"fsync"``.  An armed fault fails
the call before it reaches the file, as ENOSPC does for a write that finds no
free block.  ``stall(op)`` makes calls hang until released, as a disk that
stopped answering does: what waits on them can be watched while they hang.
Unarmed, each call costs one attribute test.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable

from shoal.broker.log.segment import write_all

__all__ = ["FileOps"]

_OPS = ("write", "fsync")


class FileOps:
    """Writes and fsyncs of log files; thread-safe (the writer thread uses it too)."""

    __slots__ = ("_armed", "_faults", "_lock", "_stalls")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: dict[str, list] = {}  # op -> [errno, calls left to fail (None: until cleared)]
        self._stalls: dict[str, threading.Event] = {}  # op -> released when set
        self._armed = False  # any fault or stall: the only thing an unarmed call looks at

    # -- faults ------------------------------------------------------------------
    def fail_next(self, op: str, errno_: int, times: int | None = 1) -> None:
        """Make the next ``times`` calls of kind ``op`` raise ``OSError(errno_)`` (None: all of them)."""
        _check_op(op)
        if times is not None and times <= 0:
            raise ValueError("times must be positive or None")
        with self._lock:
            self._faults[op] = [errno_, times]
            self._armed = True

    def stall(self, op: str) -> Callable[[], None]:
        """Make calls of kind ``op`` block (a hung disk) until the returned ``release()`` is called."""
        _check_op(op)
        gate = threading.Event()
        with self._lock:
            self._stalls[op] = gate
            self._armed = True

        def release() -> None:
            with self._lock:
                if self._stalls.get(op) is gate:
                    del self._stalls[op]
                self._rearm()
            gate.set()

        return release

    def clear_faults(self) -> None:
        """Disarm every fault and release every stall."""
        with self._lock:
            self._faults.clear()
            stalls, self._stalls = self._stalls, {}
            self._armed = False
        for gate in stalls.values():
            gate.set()

    def _rearm(self) -> None:
        self._armed = bool(self._faults or self._stalls)

    def _check(self, op: str) -> None:
        with self._lock:
            gate = self._stalls.get(op)
        if gate is not None:
            gate.wait()
        with self._lock:
            fault = self._faults.get(op)
            if fault is None:
                return
            err, left = fault
            if left is not None:
                if left <= 1:
                    del self._faults[op]
                    self._rearm()
                else:
                    fault[1] = left - 1
        raise OSError(err, f"{os.strerror(err)} (injected {op} fault)")

    # -- the calls -----------------------------------------------------------------
    def write_all(self, fd: int, data: memoryview, start: int) -> None:
        """``write_all`` through the seam: an append to a segment."""
        if self._armed:
            self._check("write")
        write_all(fd, data, start)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        """One ``os.write`` (index files are written whole by their callers' loops)."""
        if self._armed:
            self._check("write")
        return os.write(fd, data)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        """Rewrite bytes in place (the recovery-point checkpoint)."""
        if self._armed:
            self._check("write")
        return os.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        if self._armed:
            self._check("fsync")
        os.fsync(fd)

    def fsync_dir(self, path: str | os.PathLike) -> None:
        fsync_dir(path, self.fsync)


def fsync_dir(path: str | os.PathLike, fsync: Callable[[int], None] = os.fsync) -> None:
    """Make a directory's entries (a create, rename or unlink in it) durable. ``FileOps`` passes
    its own fsync (fault injection); files outside the log writer's path use the plain one."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def _check_op(op: str) -> None:
    if op not in _OPS:
        raise ValueError(f"unknown file operation {op!r}; one of {_OPS}")


def write_json_durably(path: str | os.PathLike, document: object) -> None:
    """Replace ``path`` with ``document`` as JSON so that a crash leaves the old or the new file,
    never a mix: written to a sibling, fsynced, renamed over, and the directory fsynced. For small
    state files rewritten whole (security metadata: ACLs, SCRAM credentials)."""
    target = os.fspath(path)
    directory = os.path.dirname(target) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = target + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    fsync_dir(directory)


def read_json(path: str | os.PathLike) -> object | None:
    """The document `write_json_durably` left at ``path``, or None if there is none yet (a stale
    ``.tmp`` sibling from a crash mid-write is ignored: the rename never happened)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
