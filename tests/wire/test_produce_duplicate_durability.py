"""A retried idempotent batch at acks=-1 is answered only once the original is durable.

The retry of a batch whose original is still waiting for its fsync must not
be acknowledged early: if the broker crashed before that fsync, the producer
would have been told "stored" for records that are gone. In process, with the
partition's fsync gated so the test decides when it completes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from shoal.broker.broker import Broker
from shoal.broker.config.settings import BrokerConfig
from shoal.client.core.conn import BrokerConnection
from shoal.protocol.api import api_by_name
from shoal.protocol.records import build_batch
from tests.support.flush_gate import FlushGate

TOPIC = "dup-durable"
PR = api_by_name("Produce").request_class()


def produce_body(batch: bytes) -> PR:
    return PR(
        acks=-1,
        timeout_ms=30000,
        topic_data=[PR.TopicProduceData(name=TOPIC, partition_data=[PR.PartitionProduceData(index=0, records=batch)])],
    )


async def test_retried_batch_waits_for_the_originals_fsync(tmp_path: Path) -> None:
    config = BrokerConfig.from_sources(
        {}, [f"log.dirs={tmp_path / 'data'}", "listeners=PLAINTEXT://127.0.0.1:0", "shoal.http.listeners="]
    )
    broker = Broker(config)
    await broker.start()
    try:
        broker.topics.create(TOPIC, 1, {})
        port = broker.server.bound[0][1]
        gate = FlushGate(broker, broker.topics.partition(TOPIC, 0).log)
        first = await BrokerConnection.connect("127.0.0.1", port)
        retry = await BrokerConnection.connect("127.0.0.1", port)
        ip = await first.request(
            "InitProducerId",
            api_by_name("InitProducerId").request_class()(transactional_id=None, transaction_timeout_ms=60000),
        )
        assert ip.error_code == 0 and ip.producer_id >= 0, ip
        batch = build_batch(
            [(b"k", b"v%d" % i, (), None) for i in range(5)],
            producer_id=ip.producer_id,
            producer_epoch=ip.producer_epoch,
            base_sequence=0,
        )
        original = first.send("Produce", produce_body(batch), version=9)
        await asyncio.sleep(0.3)
        assert not original.done()  # held: its fsync has not completed
        duplicate = retry.send("Produce", produce_body(batch), version=9)
        await asyncio.sleep(0.3)
        assert not duplicate.done(), "a retry was acknowledged before the original was durable"
        await gate.release(wait=False)
        await asyncio.sleep(0)
        await gate.release(wait=False)  # the retry's own wait, if it queued one after the first release
        a, b = await asyncio.wait_for(asyncio.gather(original, duplicate), 10)
        pa, pb = a.responses[0].partition_responses[0], b.responses[0].partition_responses[0]
        assert pa.error_code == pb.error_code == 0
        assert pa.base_offset == pb.base_offset == 0
        assert broker.topics.partition(TOPIC, 0).log.log_end_offset == 5  # stored once
        first.close()
        retry.close()
    finally:
        await broker.stop()
