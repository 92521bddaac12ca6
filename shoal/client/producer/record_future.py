"""What ``AsyncProducer.send`` hands back: a lazy, asyncio-compatible future per record.

Why not an ``asyncio.Future`` per record: at hundreds of thousands of records
a second, creating, resolving and (for failures nobody looked at) logging one
future per record is a measurable share of the producer's CPU. A record's
outcome is its batch's outcome plus its index, so ``RecordFuture`` is a
three-field object that reads it from the batch when asked, and
``RecordMetadata`` is built only then. Waiters and callbacks are parked on
the batch (``ProducerBatch.listeners``) and woken by ``wake_listeners`` when
it completes — or, for a batch that was split, when all of its parts did.

``RecordFuture`` follows asyncio's future protocol (``_asyncio_future_blocking``,
``get_loop``, ``add_done_callback``, ...), so ``await``, ``asyncio.gather``,
``asyncio.wait`` and ``asyncio.wait_for`` accept it as a future. ``cancel()``
only stops *waiting*: a buffered record is still delivered, as with Kafka's
Java client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shoal.client.producer.accumulator import ProducerBatch
from shoal.protocol.records import TimestampType

__all__ = ["RecordFuture", "RecordMetadata", "failed_future", "wake_listeners"]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was stored. ``offset`` is -1 with acks=0 (and for a
    retry the broker recognised as a duplicate of something it no longer
    remembers the offset of)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int = TimestampType.CREATE_TIME
    log_start_offset: int = -1


class _Callback:
    __slots__ = ("context", "fn", "owner")

    def __init__(self, fn: Callable[[Any], Any], owner: RecordFuture, context: Any) -> None:
        self.fn = fn
        self.owner = owner
        self.context = context


class RecordFuture:
    """The outcome of one ``send``: an asyncio-compatible future of ``RecordMetadata``."""

    __slots__ = ("_batch", "_cancelled", "_index", "_loop")
    _asyncio_future_blocking = False

    def __init__(self, loop: asyncio.AbstractEventLoop, batch: ProducerBatch, index: int) -> None:
        self._loop = loop
        self._batch = batch
        self._index = index
        self._cancelled = False

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def done(self) -> bool:
        return self._cancelled or self._batch.done

    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self, msg: Any = None) -> bool:
        if self.done():
            return False
        self._cancelled = True
        b = self._batch
        mine = [cb for cb in b.listeners or () if type(cb) is _Callback and cb.owner is self]
        if mine:
            b.listeners = [cb for cb in b.listeners or () if not (type(cb) is _Callback and cb.owner is self)]
            for cb in mine:
                self._loop.call_soon(cb.fn, self, context=cb.context)
        return True

    def result(self) -> RecordMetadata:
        if self._cancelled:
            raise asyncio.CancelledError()
        b = self._batch
        if not b.done:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        i = self._index
        if b.children:
            b, i = b.leaf(i)
        if b.error is not None:
            raise b.error.with_traceback(None)
        ts = b.records[i][3]
        ts_type = TimestampType.CREATE_TIME
        if b.log_append_time >= 0:
            ts, ts_type = b.log_append_time, TimestampType.LOG_APPEND_TIME
        offset = b.base_offset + i if b.base_offset >= 0 else -1
        return RecordMetadata(b.topic, b.partition, offset, ts, ts_type, b.log_start_offset)

    def exception(self) -> BaseException | None:
        if self._cancelled:
            raise asyncio.CancelledError()
        b = self._batch
        if not b.done:
            raise asyncio.InvalidStateError("the record is not acknowledged yet")
        if b.children:
            b = b.leaf(self._index)[0]
        return b.error

    def add_done_callback(self, fn: Callable[[Any], Any], *, context: Any = None) -> None:
        if self.done():
            self._loop.call_soon(fn, self, context=context)
            return
        b = self._batch
        if b.listeners is None:
            b.listeners = []
        b.listeners.append(_Callback(fn, self, context))

    def remove_done_callback(self, fn: Callable[[Any], Any]) -> int:
        b = self._batch
        if not b.listeners:
            return 0
        keep = [cb for cb in b.listeners if not (type(cb) is _Callback and cb.owner is self and cb.fn == fn)]
        removed = len(b.listeners) - len(keep)
        b.listeners = keep
        return removed

    def __await__(self):
        b = self._batch
        if not b.done and not self._cancelled:
            waiter = self._loop.create_future()
            if b.listeners is None:
                b.listeners = []
            b.listeners.append(waiter)
            yield from waiter
        return self.result()

    __iter__ = __await__

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else ("done" if self._batch.done else "pending")
        return f"<RecordFuture {self._batch.topic}-{self._batch.partition} {state}>"


def failed_future(loop: asyncio.AbstractEventLoop, topic: str, partition: int, error: BaseException) -> RecordFuture:
    b = ProducerBatch(topic, partition, 0.0, 0, [(None, None, None, -1)])
    b.done = True
    b.error = error
    return RecordFuture(loop, b, 0)


def wake_listeners(loop: asyncio.AbstractEventLoop, b: ProducerBatch | None) -> None:
    """Wake whoever waits on ``b`` (and on the batch it was split from, once all its parts are done)."""
    while b is not None and b.done:
        listeners = b.listeners
        if listeners:
            b.listeners = None
            for item in listeners:
                if type(item) is _Callback:
                    loop.call_soon(item.fn, item.owner, context=item.context)
                elif not item.done():
                    item.set_result(None)
        b = b.parent
