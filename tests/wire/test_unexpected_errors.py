"""A handler that raises (a bug) gets Kafka's answer: UNKNOWN_SERVER_ERROR, the connection lives.

Kafka's request handler turns any unexpected exception into the request's
error response (UNKNOWN_SERVER_ERROR wherever the response has a place for a
code) and keeps the connection; only an acks=0 produce, which expects no
answer, has its connection closed. The bug is planted with the broker's own
fault injection: an intercept callback that raises, synchronously or in the
coroutine it returns, runs where the handler would.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode
from shoal.testing import EmbeddedBroker
from tests.support.brokers import RawClient

MD = api_by_name("Metadata").request_class()


def boom(request) -> None:
    raise RuntimeError("a planted bug")


async def boom_later(request) -> None:
    await asyncio.sleep(0)
    raise RuntimeError("a planted bug, after an await")


@pytest.mark.parametrize("callback", [boom, boom_later], ids=["sync", "async"])
def test_a_raising_handler_answers_unknown_server_error_and_keeps_the_connection(callback, caplog) -> None:
    caplog.set_level(logging.ERROR, logger="shoal")
    with EmbeddedBroker() as eb:
        eb.create_topic("t", 1)
        eb.broker.faults.intercept("Metadata", callback, times=1)
        with RawClient(eb.port) as c:
            topics = [MD.MetadataRequestTopic(name="t", topic_id=uuid.UUID(int=0))]
            bad = c.call(
                "Metadata",
                12,
                topics=topics,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
            assert [t.error_code for t in bad.topics] == [ErrorCode.UNKNOWN_SERVER_ERROR]
            good = c.call(
                "Metadata",
                12,
                topics=topics,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )  # same connection
            assert [(t.name, t.error_code) for t in good.topics] == [("t", ErrorCode.NONE)]
    logged = [r for r in caplog.records if r.exc_info and "a planted bug" in str(r.exc_info[1])]
    assert len(logged) == 1  # the bug is in the log, with its traceback


def test_a_raising_acks0_produce_closes_the_connection() -> None:
    with EmbeddedBroker() as eb:
        eb.create_topic("t", 1)
        eb.broker.faults.intercept("Produce", boom, times=1)
        PR = api_by_name("Produce").request_class()
        with RawClient(eb.port) as c:
            c.send("Produce", 9, PR(transactional_id=None, acks=0, timeout_ms=1000, topic_data=[]))
            c.sock.settimeout(5)
            assert c.sock.recv(1) == b""  # closed by the broker, nothing answered
        with RawClient(eb.port) as c:  # the broker itself carries on
            assert c.call("ApiVersions", 3, client_software_name="t", client_software_version="1").error_code == 0
