"""An idempotent librdkafka producer whose produce responses get lost.

A small TCP proxy sits between the producer and the broker. For the first few
Produce requests it forwards the request to the broker (which appends it) and
then cuts the client connection instead of relaying the response, so the
producer must retry batches the broker already stored. The log must hold
every record exactly once, in order.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from tests.support.clients import QUIET, DroppingProxy, _free_port, consume_all, create_topic


def test_retried_batches_are_not_duplicated(broker_factory, topic_name) -> None:
    # Clients must send every request through the proxy: advertise its port.
    proxy_port = _free_port()
    b = broker_factory(f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}")
    b.start()
    proxy = DroppingProxy(b.port, drops=3, listen_port=proxy_port)
    create_topic(f"127.0.0.1:{proxy_port}", topic_name, 1)
    try:
        p = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{proxy_port}",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "reconnect.backoff.ms": 10,
                **QUIET,
            }
        )
        errors = []
        for i in range(300):
            p.produce(topic_name, value=b"m%04d" % i, partition=0, on_delivery=lambda e, m: e and errors.append(e))
            if i % 20 == 0:
                p.poll(0.005)
                time.sleep(0.002)
        assert p.flush(60) == 0
        assert not errors
        assert proxy.dropped == 3
        # (all drops used up: the proxy now passes everything through)
        got = consume_all(f"127.0.0.1:{proxy_port}", topic_name, 1)[0]
    finally:
        proxy.close()
    assert [o for o, _ in got] == list(range(300))
    assert [v for _, v in got] == [b"m%04d" % i for i in range(300)]
