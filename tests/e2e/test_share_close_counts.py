"""A share session closed normally gives its records back without counting the delivery
(Kafka's share partition decreases the delivery count of records released by a closing
session: they were acquired, maybe never seen). Judged with both clients that close
normally, librdkafka's ShareConsumer and AsyncShareConsumer: with a delivery limit of 2, three
members in a row poll the same records and close without acknowledging them; if a close counted
as a delivery the records would be archived by the second close. The last member still gets
every record, at delivery count 1.
"""

from __future__ import annotations

import time

import pytest

from shoal.client.share.consumer import AsyncShareConsumer
from tests.support.brokers import InProcessBroker
from tests.support.share_clients import FAST, poll_until, produce, setup

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("this confluent-kafka has no ShareConsumer", allow_module_level=True)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = InProcessBroker(tmp_path_factory.mktemp("share-close-counts") / "data", FAST).start()
    yield b
    b.stop()


def _librdkafka_round(broker, group: str, topic: str, want: int) -> list[int]:
    sc = confluent_kafka.ShareConsumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 0,
         "share.acknowledgement.mode": "explicit"}
    )  # fmt: skip
    sc.subscribe([topic])
    counts: list[int] = []
    try:
        deadline = time.monotonic() + 20
        while len(counts) < want and time.monotonic() < deadline:
            for m in sc.poll(0.2):
                assert m.error() is None, m.error()
                counts.append(m.delivery_count())
    finally:
        sc.close()  # nothing acknowledged: every record goes back
    return counts


async def _async_round(broker, group: str, topic: str, want: int) -> list[int]:
    sc = AsyncShareConsumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group}, share_acknowledgement_mode="explicit"
    )
    await sc.start()
    try:
        sc.subscribe([topic])
        got = await poll_until(sc, want)
    finally:
        await sc.close()
    return [r.delivery_count for r in got]


@pytest.mark.parametrize("client", ["librdkafka", "AsyncShareConsumer"])
async def test_records_released_by_a_normal_close_keep_their_delivery_count(broker, client) -> None:
    topic, group = f"close-counts-{client.lower()}", f"g-close-counts-{client.lower()}"
    setup(broker, topic, group, share_delivery_count_limit="2")
    produce(broker.bootstrap, topic, 5)
    for _ in range(3):
        if client == "librdkafka":
            counts = _librdkafka_round(broker, group, topic, 5)
        else:
            counts = await _async_round(broker, group, topic, 5)
        assert counts == [1] * 5
    async with AsyncShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) as last:
        last.subscribe([topic])
        got = await poll_until(last, 5)
    assert sorted((r.offset, r.delivery_count) for r in got) == [(i, 1) for i in range(5)]
