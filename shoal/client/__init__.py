"""Shoal's bundled asyncio Kafka client, on the project's own codec.

    from shoal.client import AsyncProducer, AsyncConsumer, AsyncShareConsumer, AsyncAdmin

Every client is an async context manager (``async with AsyncProducer(...) as p``)
and takes settings by Kafka's names, as a mapping, as keyword arguments with
underscores, or both: ``AsyncProducer({"bootstrap.servers": "h:9092"}, linger_ms=5)``.
Unknown or invalid settings raise ``client.core.errors.ConfigError`` naming the key.

Names are imported lazily so that ``import client`` stays cheap and the
pieces load only when used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AsyncProducer": "shoal.client.producer.producer",
    "RecordMetadata": "shoal.client.producer.producer",
    "AsyncConsumer": "shoal.client.consumer.consumer",
    "ConsumerRebalanceListener": "shoal.client.consumer.consumer",
    "OffsetAndMetadata": "shoal.client.consumer.consumer",
    "OffsetAndTimestamp": "shoal.client.consumer.consumer",
    "AsyncShareConsumer": "shoal.client.share.consumer",
    "AcknowledgeType": "shoal.client.share.consumer",
    "AsyncAdmin": "shoal.client.admin.client",
    "ConsumerRecord": "shoal.client.core.records",
    "TopicPartition": "shoal.client.core.cluster",
    "ConfigError": "shoal.client.core.errors",
    "KafkaClientError": "shoal.client.core.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(module), name)
