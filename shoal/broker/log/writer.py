"""One background thread that writes log bytes to the page cache, in order.

Why: a large produce costs the event loop three passes over its bytes —
the socket receive, the CRC check, and ``os.write`` copying them into the
page cache — and the last is the largest (a third or more of the broker's
CPU on big batches).  ``os.write`` releases the GIL, so handing it to a
thread lets the loop receive and check request N+1 on one core while
request N is copied on the other.

What it promises:

* Order.  One thread, one FIFO queue: jobs are written in submission order,
  so appends to a file land in the order their offsets were assigned, and
  completions are delivered in that order too.
* Completions on the owner's thread.  ``done(error)`` callbacks run on the
  event loop (``call_soon_threadsafe``, coalesced), never on the writer
  thread, so the log's bookkeeping stays single-threaded.
* All or nothing per job, and a failed channel stays failed.  A job that
  cannot be written whole is cut back (``write_all``) and its error recorded
  on its channel; every later job of that channel is skipped with the same
  error, so a file never gets bytes after a hole.
* Bounded.  ``submit`` blocks the caller while more than ``max_inflight``
  bytes are queued (acks=0 producers are otherwise unbounded).
* Cheap for small appends.  Large appends come here, and small ones too
  while the page cache is slow (``inline_writes``: a ``write()`` on the loop
  can block it for 100 ms when the page cache throttles dirty pages; every
  write here is timed for it).  Handing each one over alone cost a wake-up of
  the thread and a GIL hand-over per append, and halved small-produce rates
  (``benchmarks/small_appends.py``).  So jobs submitted in one loop turn are
  handed over together at the end of the turn (``call_soon``), and the thread
  joins runs of small ones that follow each other in one file into one
  ``write()``.
* Syncing (``sync``), for the coordinators' logs: every write there waits
  for its fsync anyway, so a writer of their own writes and fsyncs in one
  trip -- everything queued meanwhile written, each file fsynced once, then
  the jobs reported -- instead of one trip to a writer and another to the
  flusher's threads (each trip costs GIL hand-overs on a busy loop; the two
  cost share groups' acknowledged throughput about a tenth). A failed fsync
  fails the jobs it covered and their channel, as a failed write does.
  Its jobs are handed over at once, not at the end of the loop turn: they
  are few (one state write per share partition and turn, say) and someone
  waits for each, and on a loaded loop the end of the turn is milliseconds
  away (share acknowledgements of 128 members: the write's mean 15-19 ms ->
  9-11 ms). Jobs queued while the thread syncs still share its next fsync.
* ``wait(channel)`` blocks until every job of the channel is written and
  has had its callback run: for the rare operations that need the file and
  the bookkeeping to agree (roll, truncate, close, delete).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from shoal.broker.log.inline_writes import InlineWrites
from shoal.broker.log.segment import write_all

__all__ = ["ThreadedWriter", "WriteChannel"]

log = logging.getLogger("shoal.log.writer")

Done = Callable[[BaseException | None], None]
DEFAULT_MAX_INFLIGHT = 64 * 1024 * 1024
# Consecutive jobs into one file are joined into one write() while each is under
# JOIN_BYTES and the run stays under JOIN_RUN_BYTES (the join copies, under the GIL).
JOIN_BYTES = 64 * 1024
JOIN_RUN_BYTES = 1024 * 1024


class WriteChannel:
    """The jobs of one log: a failure domain and counts ``wait`` can wait on."""

    __slots__ = ("error", "finished", "submitted")

    def __init__(self) -> None:
        self.error: BaseException | None = None  # set by the writer thread on the first failed job
        # Each counter has one writing thread (no lock on the hot path): the owner's, the writer's.
        self.submitted = 0
        self.finished = 0


class ThreadedWriter:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        write: Callable[[int, memoryview, int], None] = write_all,
        sync: Callable[[int], None] | None = None,
        inline: InlineWrites | None = None,
        name: str = "shoal-log-writer",
    ) -> None:
        self._loop = loop
        self._inline = inline  # told how long each write took (slow ones keep small appends here)
        self.max_inflight = max_inflight
        self._write = write  # (fd, data, start); tests inject failures here
        self._sync = sync  # (fd): fsync every file written before reporting its jobs (see ``syncs``)
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()  # lists of jobs, or None to stop
        self._staged: list[tuple[WriteChannel, int, memoryview, int, Done]] = []  # this loop turn's
        self._push_scheduled = False
        self._done: deque[tuple[Done, BaseException | None]] = deque()
        # Bytes in flight = submitted - written; each counter has a single writing thread.
        self._submitted_bytes = 0
        self._written_bytes = 0
        self._cond = threading.Condition()  # only for the rare blocking waits
        self._waiting = False
        self._wake_scheduled = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @staticmethod
    def channel() -> WriteChannel:
        return WriteChannel()

    @property
    def syncs(self) -> bool:
        """Whether a job is reported done only once its file was fsynced after it was written."""
        return self._sync is not None

    @property
    def inflight_bytes(self) -> int:
        return self._submitted_bytes - self._written_bytes

    @property
    def submitted_bytes(self) -> int:
        """Bytes handed to this writer since it started."""
        return self._submitted_bytes

    def submit(self, channel: WriteChannel, fd: int, data: memoryview, start: int, done: Done) -> None:
        """Queue ``data`` for appending to ``fd`` (whose size will then be ``start``).

        ``data`` must stay unchanged until ``done`` runs.  Blocks while the
        queue holds more than ``max_inflight`` bytes.
        """
        if self._closed:
            raise RuntimeError("log writer is closed")
        if self.inflight_bytes > self.max_inflight:
            self._push()
            self._block_until(lambda: self.inflight_bytes <= self.max_inflight)
        self._submitted_bytes += len(data)
        channel.submitted += 1
        if self._sync is not None:  # at once (see the module's doc)
            self._jobs.put([(channel, fd, data, start, done)])
            return
        self._staged.append((channel, fd, data, start, done))
        if not self._push_scheduled:
            self._push_scheduled = True
            self._loop.call_soon(self._push)

    def _push(self) -> None:
        """Hand this loop turn's jobs to the thread, as one list (one wake-up)."""
        self._push_scheduled = False
        if self._staged:
            staged, self._staged = self._staged, []
            self._jobs.put(staged)

    def wait(self, channel: WriteChannel) -> None:
        """Block until every job of ``channel`` is written, then run due callbacks."""
        if channel.finished != channel.submitted:
            self._push()
            self._block_until(lambda: channel.finished == channel.submitted)
        self._deliver()

    def _block_until(self, ready: Callable[[], bool]) -> None:
        with self._cond:
            self._waiting = True
            try:
                while not ready():
                    # The writer notifies when it sees _waiting; the timeout covers
                    # a job that finished between its check and ours.
                    self._cond.wait(0.005)
            finally:
                self._waiting = False

    def close(self) -> None:
        """Finish what is queued and stop the thread (callbacks still due run on the loop)."""
        if self._closed:
            return
        self._closed = True
        self._push()
        self._jobs.put(None)
        self._thread.join()
        self._deliver()

    # -- the writer thread -------------------------------------------------------
    def _run(self) -> None:
        if self._sync is not None:
            self._run_syncing()
            return
        jobs, write, inline, clock = self._jobs, self._write, self._inline, time.perf_counter
        while True:
            staged = jobs.get()
            if staged is None:
                return
            i, n = 0, len(staged)
            while i < n:
                channel, fd, data, start, _ = staged[i]
                # A run of small jobs of one channel that follow each other in one file: one write().
                j, end = i + 1, start + len(data)
                if len(data) < JOIN_BYTES:
                    while j < n:
                        c2, fd2, d2, s2, _ = staged[j]
                        if c2 is not channel or fd2 != fd or s2 != end or len(d2) >= JOIN_BYTES:
                            break
                        if end - start + len(d2) > JOIN_RUN_BYTES:
                            break
                        end += len(d2)
                        j += 1
                error = channel.error
                if error is None:
                    buf = data if j == i + 1 else memoryview(b"".join([staged[k][2] for k in range(i, j)]))
                    started = clock()
                    try:
                        write(fd, buf, start)
                    except Exception as e:  # noqa: BLE001 - handed to the log, which goes offline
                        log.error("log write failed (fd %d at %d): %s", fd, start, e)
                        error = channel.error = e
                    if inline is not None:
                        inline.took(clock() - started)
                    del buf
                for k in range(i, j):
                    self._done.append((staged[k][4], error))
                    self._written_bytes += len(staged[k][2])
                    channel.finished += 1
                i = j
                self._announce()
            del staged, data

    def _announce(self) -> None:
        """(Writer thread.) Wake a blocked ``wait`` and have the loop take what is done so far."""
        if self._waiting:
            with self._cond:
                self._cond.notify_all()
        if not self._wake_scheduled:
            self._wake_scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed: nobody is left to tell
                self._wake_scheduled = False

    def _run_syncing(self) -> None:
        """The loop of a writer with ``sync``: every list queued meanwhile is written, then each
        file written is fsynced once (group commit), then the jobs are reported, the bytes
        durable. A failed fsync fails every job of that file it covered, and its channel."""
        jobs, write, sync = self._jobs, self._write, self._sync
        assert sync is not None
        stop = False
        while not stop:
            staged = jobs.get()
            if staged is None:
                return
            while True:  # take what else is queued: one fsync covers it all
                try:
                    more = jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                staged.extend(more)  # the loop handed these lists over: ours to join
            written: list[tuple[WriteChannel, int, BaseException | None]] = []  # per job
            for channel, fd, data, start, _ in staged:
                error = channel.error
                if error is None:
                    try:
                        write(fd, data, start)
                    except Exception as e:  # noqa: BLE001 - handed to the log, which goes offline
                        log.error("log write failed (fd %d at %d): %s", fd, start, e)
                        error = channel.error = e
                written.append((channel, fd, error))
            synced: dict[int, BaseException | None] = {}
            for _channel, fd, error in written:
                if error is None and fd not in synced:
                    try:
                        sync(fd)
                        synced[fd] = None
                    except Exception as e:  # noqa: BLE001 - handed to the log, which goes offline
                        log.error("log fsync failed (fd %d): %s", fd, e)
                        synced[fd] = e
            for (channel, fd, error), job in zip(written, staged):
                if error is None and synced[fd] is not None:
                    error = synced[fd]
                    if channel.error is None:
                        channel.error = error
                self._done.append((job[4], error))
                self._written_bytes += len(job[2])
                channel.finished += 1
            self._announce()
            del staged, written

    # -- the owner's thread ------------------------------------------------------
    def _deliver(self) -> None:
        self._wake_scheduled = False
        done = self._done
        while done:
            callback, error = done.popleft()
            callback(error)
