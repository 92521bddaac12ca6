"""Shoal as a test kit: a real Kafka-protocol broker inside the test process.

``EmbeddedBroker`` starts a full Shoal broker on an ephemeral 127.0.0.1 port
(in a thread with ``with``, on your loop with ``async with``); every Kafka
client connects to ``bootstrap_servers``. ``faults`` makes chosen requests
fail, wait or lose their connection, so retry paths can be tested.
The pytest plugin (``shoal.testing.pytest_plugin``, registered on install)
gives the fixtures ``shoal_broker``, ``shoal_broker_module``,
``shoal_broker_session`` and ``shoal_bootstrap_servers``, and the marker
``@pytest.mark.shoal_config(...)``.
"""

from shoal.broker.faults import FaultInjector, InterceptedRequest
from shoal.testing.embedded import EMBEDDED_DEFAULTS, FAST_TIMERS, EmbeddedBroker, SharePartitionState

__all__ = [
    "EMBEDDED_DEFAULTS",
    "FAST_TIMERS",
    "EmbeddedBroker",
    "FaultInjector",
    "InterceptedRequest",
    "SharePartitionState",
]
