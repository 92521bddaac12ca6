"""librdkafka's AdminClient.delete_records against Shoal: the low watermark it reports is
the start a consumer then reads from, and an offset past the end is refused per partition."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import BrokerProcess


def test_admin_client_delete_records(shared_broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap, "log_level": 0})
    for f in admin.create_topics([NewTopic(topic_name, 2, 1)]).values():
        f.result(15)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "log_level": 0})
    for i in range(10):
        producer.produce(topic_name, value=b"v%d" % i, partition=0)
        producer.produce(topic_name, value=b"w%d" % i, partition=1)
    assert producer.flush(15) == 0

    (f,) = admin.delete_records([TopicPartition(topic_name, 0, 6)], request_timeout=15).values()
    assert f.result(15).low_watermark == 6
    (f,) = admin.delete_records([TopicPartition(topic_name, 1, 11)], request_timeout=15).values()
    with pytest.raises(KafkaException) as info:
        f.result(15)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    consumer = Consumer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "group.id": topic_name,
            "auto.offset.reset": "earliest",
            "log_level": 0,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=15)
        assert (low, high) == (6, 10)
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 1), timeout=15) == (0, 10)
        consumer.assign([TopicPartition(topic_name, 0)])
        got = []
        while len(got) < 4:
            m = consumer.poll(10)
            assert m is not None, got
            assert m.error() is None, m.error()
            got.append((m.offset(), m.value()))
        assert got == [(o, b"v%d" % o) for o in range(6, 10)]
    finally:
        consumer.close()
