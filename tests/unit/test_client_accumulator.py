"""The producer's sans-IO accumulator, driven directly with a fake clock.

Linger and batch.size readiness, buffer.memory accounting, draining order
and request size, sequence assignment, retry ordering, and the idempotent
producer's reactions to OUT_OF_ORDER_SEQUENCE_NUMBER, unknown outcomes and
expiry (epoch bumps). The last test is model-based: a simulated broker that
applies Kafka's sequence rules loses responses and connections at random,
and every record must still end up in its partition exactly once, in order.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from shoal.client.core.errors import BrokerResponseError, KafkaConnectionError, KafkaTimeoutError
from shoal.client.producer.accumulator import (
    BATCH_OVERHEAD,
    MAX_IN_FLIGHT_PER_PARTITION,
    Outcome,
    ProducerBatch,
    RecordAccumulator,
    record_size,
)
from shoal.protocol.errors import ErrorCode


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock, **kw) -> RecordAccumulator:
    args = dict(batch_size=1000, linger_ms=5, buffer_memory=10_000, retry_backoff_ms=10, retry_backoff_max_ms=10)
    args.update(kw)
    acc = RecordAccumulator(clock=clock, rng=random.Random(1), **args)
    if acc.idempotent:
        acc.set_producer_id(42, 0)
    return acc


def rec(i: int, size: int = 100) -> tuple:
    return (None, bytes(size - 20), None, i)


def leader0(topic: str, partition: int) -> int | None:
    return 0


def add(acc: RecordAccumulator, partition: int, i: int, size: int = 100, topic: str = "t") -> ProducerBatch:
    b = acc.append(topic, partition, rec(i, size), size)
    assert b is not None
    return b


def prime(acc: RecordAccumulator, *partitions: int) -> None:
    """Send and acknowledge one single-record batch per partition (sequence 0):
    the broker then holds state for the producer and more batches may fly."""
    for p in partitions:
        b = add(acc, p, -1)
        acc.flushing += 1
        (out,) = acc.drain(0, [acc.queue("t", p)], 1 << 20)
        acc.flushing -= 1
        assert out is b and b.base_sequence == 0
        acc.complete(b, 0)


def test_record_size_counts_payload_and_headers() -> None:
    assert record_size(None, None, None) == 20
    assert record_size(b"k", b"vv", [("h", b"x"), ("n", None)]) == 20 + 3 + 12 + 11


def test_linger_then_ready() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=5)
    add(acc, 0, 1)
    check = acc.ready(leader0)
    assert check.nodes == {} and check.next_check_ms == pytest.approx(5)
    clock.now += 4.9
    assert acc.ready(leader0).nodes == {}
    clock.now += 0.1
    assert list(acc.ready(leader0).nodes) == [0]


def test_full_batch_is_ready_at_once_and_next_record_opens_a_new_one() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=10_000)
    first = add(acc, 0, 0)
    for i in range(1, 9):  # 61 + 9 * 100 = 961 <= 1000
        assert add(acc, 0, i) is first
    assert acc.ready(leader0).nodes == {}
    second = add(acc, 0, 9)
    assert second is not first and first.closed and first.count == 9
    assert list(acc.ready(leader0).nodes) == [0]
    batches = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert batches == [first]  # one batch per partition per request; the open one waits
    assert acc.ready(leader0).nodes == {}


def test_large_record_gets_a_batch_of_its_own_size() -> None:
    clock = Clock()
    acc = make(clock, buffer_memory=100_000)
    b = add(acc, 0, 0, size=5000)
    assert b.alloc == 5000 + BATCH_OVERHEAD and acc.used == b.alloc
    assert add(acc, 0, 1) is not b


def test_memory_is_reserved_per_batch_and_released_on_completion() -> None:
    clock = Clock()
    acc = make(clock, buffer_memory=3000, batch_size=1000)
    batches = [add(acc, p, p) for p in range(3)]
    assert acc.used == 3000
    assert add(acc, 0, 10) is batches[0]  # room in an open batch needs no memory
    assert acc.append("t", 3, rec(11), 100) is None  # a new batch does
    acc.memory_waiters = 1  # the buffer is "exhausted": everything is ready now
    assert set(acc.ready(leader0).nodes) == {0}
    drained = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert sorted(b.partition for b in drained) == [0, 1, 2]
    acc.complete(drained[0], 0)
    assert acc.used == 2000
    # waiters queue in FIFO order: a newcomer may not jump the line ...
    assert acc.append("t", 3, rec(11), 100) is None
    # ... the shell grants the waiter memory, and the append uses the grant
    assert acc.grant(acc.alloc_for(100))
    acc.memory_waiters = 0
    b = acc.append("t", 3, rec(11), 100, reserved=1000)
    assert b is not None and acc.used == 3000
    # a grant not needed (the record fit an open batch) is given back
    assert acc.grant(0) and acc.append("t", 3, rec(12), 100, reserved=0) is b
    acc.complete(drained[1], 0)
    assert acc.grant(1000)
    assert acc.append("t", 3, rec(13), 100, reserved=1000) is b
    assert acc.used == 2000


def test_flush_and_close_make_lingering_batches_ready() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=60_000)
    add(acc, 0, 0)
    assert acc.ready(leader0).nodes == {}
    acc.flushing += 1
    assert list(acc.ready(leader0).nodes) == [0]
    acc.flushing -= 1
    acc.closing = True
    assert list(acc.ready(leader0).nodes) == [0]


def test_unknown_leader_is_reported_and_not_drained() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0)
    add(acc, 0, 0, topic="a")
    add(acc, 0, 0, topic="b")
    check = acc.ready(lambda t, p: None if t == "a" else 3)
    assert check.unknown_leaders == {"a"} and list(check.nodes) == [3]
    assert [q.topic for q in check.nodes[3]] == ["b"]


def test_drain_respects_max_request_size_and_rotates_partitions() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, buffer_memory=100_000)
    prime(acc, 0, 1, 2, 3)
    for p in range(4):
        for i in range(5):
            add(acc, p, i)  # 61 + 500 bytes each
    queues = acc.ready(leader0).nodes[0]
    first = acc.drain(0, queues, 1200)
    assert len(first) == 2  # 2 * 561 bytes fit in 1200, a third does not
    second = acc.drain(0, acc.ready(leader0).nodes[0], 1200)
    assert len(second) == 2  # the next request starts where the last one stopped
    assert sorted(b.partition for b in first + second) == [0, 1, 2, 3]
    # a single batch larger than the limit still goes (alone)
    big = add(acc, 0, 99, size=3000)
    out = acc.drain(0, acc.ready(leader0).nodes[0], 1200)
    assert out == [big]


def test_sequences_are_assigned_on_drain_per_partition() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, buffer_memory=100_000)
    a = add(acc, 0, 0)
    add(acc, 0, 1)
    b = add(acc, 1, 2)
    assert a.base_sequence == -1
    out = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert [(x.partition, x.base_sequence, x.producer_id, x.producer_epoch) for x in out] == [
        (0, 0, 42, 0),
        (1, 0, 42, 0),
    ]
    c = add(acc, 0, 3)
    # nothing acknowledged on partition 0 yet: the broker may not know us, the next batch waits
    assert acc.ready(leader0).nodes == {}
    acc.complete(a, 0)
    out = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert out == [c] and c.base_sequence == 2 and b.base_sequence == 0


def test_retries_keep_sequences_and_go_out_oldest_first() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, buffer_memory=100_000)
    prime(acc, 0)
    sent = []
    for i in range(3):
        add(acc, 0, i)
        sent += acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert [b.base_sequence for b in sent] == [1, 2, 3]
    # the connection drops: all three come back without an answer, newest first here
    for b in reversed(sent):
        assert acc.on_request_failed(b, KafkaConnectionError("lost")) == Outcome.RETRY
    clock.now += 100
    fresh = add(acc, 0, 9)
    out = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert out == [sent[0]] and out[0].base_sequence == 1 and out[0].attempts == 2
    assert acc.ready(leader0).nodes == {}  # seq 2 waits until seq 1 is answered
    acc.complete(sent[0], 10)
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [sent[1]]
    acc.complete(sent[1], 11)
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [sent[2]]  # the retry goes before newer batches
    assert acc.ready(leader0).nodes == {}  # new batches wait while a retry is out
    acc.complete(sent[2], 12)
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [fresh] and fresh.base_sequence == 4


def test_at_most_five_batches_in_flight_per_partition() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, buffer_memory=100_000)
    prime(acc, 0)
    sent = []
    for i in range(MAX_IN_FLIGHT_PER_PARTITION + 2):
        add(acc, 0, i)
        sent += acc.drain(0, acc.ready(leader0).nodes.get(0, []), 1 << 20)
    assert len(sent) == MAX_IN_FLIGHT_PER_PARTITION
    acc.complete(sent[0], 0)
    assert len(acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)) == 1


def test_non_idempotent_max_in_flight_one_keeps_order() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, idempotent=False, guarantee_order=True)
    add(acc, 0, 0)
    first = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    add(acc, 0, 1)
    assert acc.ready(leader0).nodes == {}  # muted while the first is out
    acc.on_error(first[0], ErrorCode.NOT_LEADER_OR_FOLLOWER)
    clock.now += 100
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == first
    assert first[0].base_sequence == -1


def test_out_of_order_for_the_next_batch_bumps_the_epoch_and_restarts_at_zero() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, buffer_memory=100_000)
    prime(acc, 0)
    sent = []
    for i in range(3):
        add(acc, 0, i)
        sent += acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    acc.complete(sent[0], 0)
    # the broker lost what it acknowledged (acks=1 and a crash): seq 2 is "out of order"
    assert acc.on_error(sent[1], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER) == Outcome.RETRY
    # seq 3 is not the next expected one: retried without a second bump
    assert acc.on_error(sent[2], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER) == Outcome.RETRY
    clock.now += 100
    acc.prepare()
    assert acc.producer_epoch == 1
    assert [(b.producer_epoch, b.base_sequence, b.sequence_reset) for b in sent[1:]] == [(1, 0, True), (1, 1, True)]
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [sent[1]]


def test_out_of_order_behind_a_missing_batch_does_not_bump() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, buffer_memory=100_000)
    prime(acc, 0)
    sent = []
    for i in range(2):
        add(acc, 0, i)
        sent += acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    acc.on_error(sent[0], ErrorCode.NOT_LEADER_OR_FOLLOWER)
    acc.on_error(sent[1], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    acc.prepare()
    assert acc.producer_epoch == 0 and sent[1].base_sequence == 2


def test_out_of_order_behind_acknowledged_sequences_means_stored() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, buffer_memory=100_000)
    prime(acc, 0)
    sent = []
    for i in range(2):
        add(acc, 0, i)
        sent += acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    # the answer for seq 1 is lost on a dead connection; seq 2 (on a new one) is acknowledged
    acc.on_request_failed(sent[0], KafkaConnectionError("lost"))
    acc.complete(sent[1], 7)
    clock.now += 100
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [sent[0]]
    # by now the broker forgot seq 1's offset and calls it out of order: it is stored all the same
    assert acc.on_error(sent[0], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER) == Outcome.DONE
    assert sent[0].done and sent[0].error is None and sent[0].base_offset == -1
    acc.prepare()
    assert acc.producer_epoch == 0


def test_a_rejected_batch_fails_and_the_partition_moves_to_a_new_epoch() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, buffer_memory=100_000)
    prime(acc, 0)
    sent = []
    for i in range(2):
        add(acc, 0, i)
        sent += acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert acc.on_error(sent[0], ErrorCode.INVALID_RECORD) == Outcome.FAILED
    assert isinstance(sent[0].error, BrokerResponseError) and sent[0].error.code == ErrorCode.INVALID_RECORD
    assert acc.on_error(sent[1], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER) == Outcome.RETRY
    acc.prepare()
    assert acc.producer_epoch == 1 and sent[1].base_sequence == 0
    assert sent[0].done and acc.used == sent[1].alloc


def test_other_partitions_join_the_new_epoch_once_their_batches_are_done() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, buffer_memory=100_000)
    add(acc, 0, 0)
    add(acc, 1, 1)
    p0, p1 = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    acc.on_error(p0, ErrorCode.INVALID_RECORD)
    acc.prepare()
    assert acc.producer_epoch == 1
    later = add(acc, 1, 2)
    assert acc.ready(leader0).nodes == {}  # partition 1 still has an epoch-0 batch out
    acc.complete(p1, 0)
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [later]
    assert (later.producer_epoch, later.base_sequence) == (1, 0)


def test_epoch_exhaustion_asks_for_a_new_producer_id() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200)
    acc.set_producer_id(42, 32767)
    add(acc, 0, 0)
    (b,) = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    acc.on_error(b, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    acc.prepare()
    assert acc.need_producer_id and acc.producer_id == -1
    clock.now += 100
    assert acc.ready(leader0).nodes == {}
    acc.set_producer_id(43, 0)
    acc.prepare()
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [b]
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (43, 0, 0)


def test_unknown_producer_id_is_retried_with_a_bump_unless_log_start_is_unknown() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200)
    add(acc, 0, 0)
    (b,) = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert acc.on_error(b, ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=-1) == Outcome.RETRY
    acc.prepare()
    assert acc.producer_epoch == 0
    clock.now += 100
    acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert acc.on_error(b, ErrorCode.UNKNOWN_PRODUCER_ID, log_start_offset=7) == Outcome.RETRY
    acc.prepare()
    assert acc.producer_epoch == 1


def test_delivery_timeout_expires_queued_batches() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, delivery_timeout_ms=1000)
    b = add(acc, 0, 0)
    clock.now += 999
    assert acc.expire() == []
    clock.now += 1
    assert acc.expire() == [b]
    assert isinstance(b.error, KafkaTimeoutError) and acc.used == 0 and acc.queued_count() == 0


def test_a_batch_expiring_on_the_wire_leaves_its_sequence_unresolved() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, delivery_timeout_ms=1000, buffer_memory=100_000)
    add(acc, 0, 0)
    (a,) = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    clock.now += 1000
    assert acc.expire() == [a]
    fresh = add(acc, 0, 1)
    assert acc.ready(leader0).nodes == {}  # nothing new goes out while the fate of seq 0 is unknown
    acc.on_request_failed(a, KafkaConnectionError("lost"))  # the late answer changes nothing
    acc.prepare()  # nothing acknowledged seq 0: bump
    assert acc.producer_epoch == 1
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [fresh]
    assert (fresh.producer_epoch, fresh.base_sequence) == (1, 0)


def test_an_unresolved_sequence_is_resolved_by_a_later_acknowledgement() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, delivery_timeout_ms=1000, buffer_memory=100_000)
    prime(acc, 0)
    add(acc, 0, 0)
    (a,) = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    clock.now += 500
    add(acc, 0, 1)
    (b,) = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    clock.now += 500
    assert acc.expire() == [a]
    acc.complete(b, 1)  # seq 2 stored means seq 1 was stored too
    acc.prepare()
    assert acc.producer_epoch == 0
    c = add(acc, 0, 2)
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [c] and c.base_sequence == 3


def test_retries_stop_at_the_delivery_timeout_and_the_retry_limit() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, batch_size=200, delivery_timeout_ms=1000, retries=1)
    add(acc, 0, 0)
    (b,) = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert acc.on_error(b, ErrorCode.NOT_LEADER_OR_FOLLOWER) == Outcome.RETRY
    clock.now += 50
    acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert acc.on_request_failed(b, KafkaConnectionError("lost")) == Outcome.FAILED
    assert isinstance(b.error, KafkaConnectionError)
    acc2 = make(clock, linger_ms=0, batch_size=200, delivery_timeout_ms=1000, idempotent=False)
    b2 = acc2.append("t", 0, rec(0), 100)
    acc2.drain(0, acc2.ready(leader0).nodes[0], 1 << 20)
    clock.now += 995
    assert acc2.on_error(b2, ErrorCode.NOT_LEADER_OR_FOLLOWER) == Outcome.RETRY
    clock.now += 5
    assert acc2.expire() == [b2] and isinstance(b2.error, KafkaTimeoutError)
    b3 = acc2.append("t", 0, rec(1), 100)
    acc2.drain(0, acc2.ready(leader0).nodes[0], 1 << 20)
    clock.now += 1000
    assert acc2.on_error(b3, ErrorCode.NOT_LEADER_OR_FOLLOWER) == Outcome.FAILED
    assert isinstance(b3.error, BrokerResponseError)


def test_a_batch_too_large_for_the_broker_is_split_keeping_its_sequences() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, buffer_memory=100_000)
    prime(acc, 0)
    for i in range(5):
        add(acc, 0, i)
    (big,) = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    add(acc, 0, 5)
    (after,) = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert (big.base_sequence, after.base_sequence) == (1, 6)
    assert acc.on_error(big, ErrorCode.MESSAGE_TOO_LARGE) == Outcome.SPLIT
    left, right = big.children
    assert [r[3] for r in left.records] == [0, 1] and [r[3] for r in right.records] == [2, 3, 4]
    assert (left.base_sequence, right.base_sequence) == (1, 3)
    assert acc.used == left.alloc + after.alloc
    acc.on_error(after, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)  # it overtook the split halves
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [left]
    acc.complete(left, 0)
    assert not big.done and big.leaf(3) == (right, 1)
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [right]
    assert acc.on_error(right, ErrorCode.MESSAGE_TOO_LARGE) == Outcome.SPLIT
    r1, r2 = right.children
    assert big.leaf(2) == (r1, 0) and big.leaf(4) == (r2, 1)
    for part in (r1, r2):
        (out,) = acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
        assert out is part
        acc.complete(part, 2 if part is r1 else 3)
    assert big.done and right.done and acc.producer_epoch == 0
    clock.now += 100
    assert acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20) == [after] and after.base_sequence == 6
    # a single record that is too large fails; its partition moves to a new epoch
    acc.complete(after, 5)
    lone = add(acc, 0, 9, size=900)
    acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    assert acc.on_error(lone, ErrorCode.MESSAGE_TOO_LARGE) == Outcome.FAILED
    acc.prepare()
    assert acc.producer_epoch == 1


def test_abort_all_fails_everything_and_frees_memory() -> None:
    clock = Clock()
    acc = make(clock, linger_ms=0, buffer_memory=100_000)
    add(acc, 0, 0)
    add(acc, 1, 1)
    acc.drain(0, acc.ready(leader0).nodes[0], 1 << 20)
    add(acc, 0, 2)
    failed = acc.abort_all(KafkaConnectionError("closed"))
    assert len(failed) == 3 and all(b.done and b.error for b in failed)
    assert acc.used == 0 and not acc.has_incomplete()


# --------------------------------------------------------------------------
# model-based: a broker with Kafka's sequence rules, losing answers at random


class ModelPartition:
    def __init__(self) -> None:
        self.log: list[int] = []
        self.epoch = -1
        self.last_seq = -1
        self.recent: list[tuple[int, int, int]] = []  # (base seq, last seq, base offset)

    def append(self, b: ProducerBatch) -> tuple[int, int]:
        """(error code, base offset), as Kafka's leader answers an idempotent batch."""
        last = b.base_sequence + b.count - 1
        if b.producer_epoch < self.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, -1
        if b.producer_epoch > self.epoch:
            if self.epoch >= 0 and b.base_sequence != 0:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
            self.epoch, self.last_seq, self.recent = b.producer_epoch, -1, []
        else:
            for base, end, offset in self.recent:
                if (base, end) == (b.base_sequence, last):
                    return 0, offset
            if b.base_sequence != self.last_seq + 1:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        offset = len(self.log)
        self.log.extend(r[3] for r in b.records)
        self.last_seq = last
        self.recent = [*self.recent, (b.base_sequence, last, offset)][-5:]
        return 0, offset


@pytest.mark.slow
@settings(max_examples=400, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(st.integers(0, 2**32), st.integers(2, 4))
def test_idempotent_delivery_is_exactly_once_in_order_despite_lost_answers(seed: int, partitions: int) -> None:
    rnd = random.Random(seed)
    clock = Clock()
    acc = RecordAccumulator(
        batch_size=400,
        linger_ms=2,
        buffer_memory=1 << 30,
        delivery_timeout_ms=1e12,
        retry_backoff_ms=1,
        retry_backoff_max_ms=5,
        clock=clock,
        rng=random.Random(rnd.random()),
    )
    acc.set_producer_id(1, 0)
    broker = [ModelPartition() for _ in range(partitions)]
    wire: list[list[ProducerBatch]] = []  # requests in flight, answered in order
    sent: dict[int, list[int]] = {p: [] for p in range(partitions)}
    next_record = 0
    total = 300

    def answer(request: list[ProducerBatch], lose: bool) -> None:
        for b in request:
            code, offset = broker[b.partition].append(b)
            if lose:
                continue
            if code == 0:
                acc.complete(b, offset)
            else:
                acc.on_error(b, code)

    for _ in range(5000):
        if next_record >= total and not acc.has_incomplete():
            break
        action = rnd.random()
        if action < 0.45 and next_record < total:
            p = rnd.randrange(partitions)
            acc.append("t", p, (None, b"x" * 80, None, next_record), 100)
            sent[p].append(next_record)
            next_record += 1
        elif action < 0.7:
            acc.prepare()
            check = acc.ready(leader0)
            if 0 in check.nodes and len(wire) < 5:
                request = acc.drain(0, check.nodes[0], 1 << 20)
                if request:
                    wire.append(request)
        elif action < 0.9 and wire:
            answer(wire.pop(0), lose=False)
        elif action < 0.95 and wire:
            # the connection drops: the broker handled the first k requests, nobody hears back
            k = rnd.randrange(len(wire) + 1)
            for i, request in enumerate(wire):
                if i < k:
                    answer(request, lose=True)
                for b in request:
                    acc.on_request_failed(b, KafkaConnectionError("lost"))
            wire.clear()
        elif wire and rnd.random() < 0.5:
            # a partition-level retriable error, broker stored nothing for that batch
            request = wire.pop(0)
            victim = rnd.randrange(len(request))
            for i, b in enumerate(request):
                if i == victim:
                    acc.on_error(b, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                else:
                    code, offset = broker[b.partition].append(b)
                    acc.complete(b, offset) if code == 0 else acc.on_error(b, code)
        else:
            clock.now += rnd.choice([1, 3, 10])
    # let everything finish
    for _ in range(20000):
        if not acc.has_incomplete() and not wire:
            break
        clock.now += 5
        acc.prepare()
        check = acc.ready(leader0)
        if 0 in check.nodes and len(wire) < 5:
            request = acc.drain(0, check.nodes[0], 1 << 20)
            if request:
                wire.append(request)
        if wire:
            answer(wire.pop(0), lose=False)
    assert not acc.has_incomplete()
    for p in range(partitions):
        assert broker[p].log == sent[p]
    assert acc.used == 0
