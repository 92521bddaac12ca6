"""Receive buffers for large frames, reused instead of allocated per frame.

Used by both ends of a connection: the broker's (large produce requests) and
the client's (large fetch answers). A fresh ``bytearray(size)`` per frame
costs malloc plus a zero-fill of every byte, one more pass over memory than
the socket copy itself; and off the main thread glibc serves sizes of many
MiB with a new memory mapping each time, so every 4 KiB page of every answer
also costs a page fault (the Spark source's driver thread spent more CPU on
those faults than on everything else it does). The pool hands the buffer of a
finished frame to the next large frame instead.

The one rule: a buffer is never reused while anything still reads it. A
frame's records are decoded as memoryview slices of its buffer and may
outlive the frame (an in-flight write, a handler or a consumer that keeps
them), so the pool does not trust callers to say when they are done. It asks
CPython: a ``bytearray`` with a live buffer export (any memoryview of it, or a
C function such as ``os.write`` reading it) refuses to be resized, so
``in_use`` tries a one-byte shrink-and-grow that stays inside the allocation
(no copy, no realloc) and reports a BufferError as "in use". Buffers still in
use stay on the pool's list and are passed over.

A new buffer is an anonymous memory mapping, not a ``bytearray(size)``: the
kernel backs its pages only as a frame's bytes land in them, so a size a
peer *announces* costs nothing until it sends the bytes (a ``bytearray``
was zero-filled at once: 20 sockets announcing 8 MiB frames and sending
nothing more held 160 MiB). A mapping refuses ``resize`` while exported, which
is the same "in use" test.
"""

from __future__ import annotations

import mmap
from collections import deque
from typing import Any

__all__ = ["GRANULE", "FramePool", "in_use"]

GRANULE = 256 * 1024  # capacities are multiples of this, so near sizes share buffers
DEFAULT_POOL_BYTES = 32 * 1024 * 1024
MAX_POOLED_FRAME = 8 * 1024 * 1024  # larger frames get their own buffer, dropped after use


def in_use(buf: bytearray | mmap.mmap) -> bool:
    """True while any memoryview (or other buffer export) of ``buf`` is alive.

    For spent buffers only: when free, a ``bytearray``'s last byte is left as 0.
    """
    try:
        if isinstance(buf, mmap.mmap):
            buf.resize(len(buf))  # refused while exported; the same size changes nothing
        else:
            del buf[-1:]  # a resize: refused while exported; shrinking by one byte never reallocates
    except BufferError:
        return True
    if not isinstance(buf, mmap.mmap):
        buf.append(0)  # back to its length, inside the same allocation
    return False


def _mapping(size: int) -> mmap.mmap:
    """``size`` bytes of anonymous memory, backed page by page as they are written."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class FramePool:
    """Reusable ``bytearray``s for frames; single-threaded (the event loop).

    ``take(size)`` returns a buffer of at least ``size`` bytes (the caller
    uses ``memoryview(buf)[:size]``); ``give(buf)`` returns it once the
    caller has passed its views on. Given buffers are kept, newest last, up
    to ``max_bytes`` in total; the oldest are dropped beyond that.
    """

    __slots__ = ("_bufs", "_bytes", "max_bytes", "max_frame")

    def __init__(self, max_bytes: int = DEFAULT_POOL_BYTES, max_frame: int = MAX_POOLED_FRAME) -> None:
        self.max_bytes = max_bytes
        self.max_frame = max_frame
        self._bufs: deque[bytearray] = deque()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._bufs)

    @property
    def pooled_bytes(self) -> int:
        return self._bytes

    def take(self, size: int) -> Any:
        """A ``bytearray`` or ``mmap`` of at least ``size`` bytes (use ``memoryview(buf)[:size]``)."""
        if size <= self.max_frame:
            bufs = self._bufs
            for i in range(len(bufs) - 1, -1, -1):  # newest first: likeliest still in the CPU cache
                buf = bufs[i]
                if len(buf) >= size and not in_use(buf):
                    del bufs[i]
                    self._bytes -= len(buf)
                    return buf
            return _mapping(-(-size // GRANULE) * GRANULE)
        return _mapping(size)  # too large to pool: dropped after use

    def give(self, buf: Any) -> None:
        n = len(buf)
        if n > self.max_frame or n > self.max_bytes:
            return
        self._bufs.append(buf)
        self._bytes += n
        while self._bytes > self.max_bytes:
            self._bytes -= len(self._bufs.popleft())
