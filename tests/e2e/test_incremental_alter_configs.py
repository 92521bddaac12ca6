"""IncrementalAlterConfigs APPEND/SUBTRACT on topics, as Kafka 4.2's controller does them.

Over the wire with our codec (RawClient) and judged by confluent-kafka's
AdminClient: a list config without an override starts from its default
(cleanup.policy "delete", not the broker's log.cleanup.policy), APPEND skips
values already present, SUBTRACT removes them, the result becomes an override;
APPEND/SUBTRACT on a config that is not a LIST (or unknown) is INVALID_CONFIG
for topics and groups; a null value for anything but DELETE is INVALID_REQUEST.
A rejected resource changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from shoal.protocol.api import api_by_name
from shoal.protocol.constants import AlterConfigOpType as Op
from shoal.protocol.constants import ConfigResourceType as Resource
from shoal.protocol.constants import ConfigSource as Source
from shoal.protocol.errors import ErrorCode
from tests.support.brokers import BrokerProcess, RawClient

_IAC = api_by_name("IncrementalAlterConfigs").request_class()
_DC = api_by_name("DescribeConfigs").request_class()
_CT = api_by_name("CreateTopics").request_class()


def op(name: str, value: str | None, operation: int) -> Any:
    return _IAC.AlterableConfig(name=name, config_operation=operation, value=value)


def alter(c: RawClient, name: str, ops: list[Any], rtype: int = Resource.TOPIC) -> Any:
    body = _IAC(resources=[_IAC.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=ops)])
    return c.call("IncrementalAlterConfigs", 1, body).responses[0]


def describe(c: RawClient, topic: str) -> dict[str, tuple[str, int]]:
    body = _DC(resources=[_DC.DescribeConfigsResource(resource_type=Resource.TOPIC, resource_name=topic)])
    r = c.call("DescribeConfigs", 4, body).results[0]
    assert r.error_code == 0, r
    return {e.name: (e.value, e.config_source) for e in r.configs}


def create(c: RawClient, topic: str) -> None:
    t = _CT.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)
    r = c.call("CreateTopics", 5, _CT(topics=[t], timeout_ms=10_000)).topics[0]
    assert r.error_code == 0, r


def test_append_and_subtract_start_from_the_default(shared_broker: BrokerProcess, topic_name: str) -> None:
    with RawClient(shared_broker.port) as c:
        create(c, topic_name)
        assert describe(c, topic_name)["cleanup.policy"] == ("delete", Source.DEFAULT_CONFIG)
        assert alter(c, topic_name, [op("cleanup.policy", "compact", Op.APPEND)]).error_code == 0
        assert describe(c, topic_name)["cleanup.policy"] == ("delete,compact", Source.DYNAMIC_TOPIC_CONFIG)
        # values already there are not repeated
        assert alter(c, topic_name, [op("cleanup.policy", "compact,delete", Op.APPEND)]).error_code == 0
        assert describe(c, topic_name)["cleanup.policy"] == ("delete,compact", Source.DYNAMIC_TOPIC_CONFIG)
        assert alter(c, topic_name, [op("cleanup.policy", "delete", Op.SUBTRACT)]).error_code == 0
        assert describe(c, topic_name)["cleanup.policy"] == ("compact", Source.DYNAMIC_TOPIC_CONFIG)
        # back to no override: SUBTRACT starts from the default again
        assert alter(c, topic_name, [op("cleanup.policy", None, Op.DELETE)]).error_code == 0
        assert alter(c, topic_name, [op("cleanup.policy", "compact", Op.SUBTRACT)]).error_code == 0
        assert describe(c, topic_name)["cleanup.policy"] == ("delete", Source.DYNAMIC_TOPIC_CONFIG)


def test_non_list_unknown_and_null_are_rejected_and_change_nothing(
    shared_broker: BrokerProcess, topic_name: str
) -> None:
    with RawClient(shared_broker.port) as c:
        create(c, topic_name)
        before = describe(c, topic_name)
        for operation, verb in ((Op.APPEND, "APPEND"), (Op.SUBTRACT, "SUBTRACT")):
            r = alter(c, topic_name, [op("cleanup.policy", "compact", Op.APPEND), op("retention.ms", "5", operation)])
            assert r.error_code == ErrorCode.INVALID_CONFIG
            assert r.error_message == f"Can't {verb} to key retention.ms because its type is not LIST."
            r = alter(c, topic_name, [op("no.such.config", "x", operation)])
            assert r.error_code == ErrorCode.INVALID_CONFIG and "no.such.config" in r.error_message
            r = alter(c, topic_name, [op("cleanup.policy", None, operation)])
            assert r.error_code == ErrorCode.INVALID_REQUEST
            assert r.error_message == "Null value not supported for : cleanup.policy"
            g = alter(c, topic_name + "-g", [op("share.isolation.level", "read_committed", operation)], Resource.GROUP)
            assert g.error_code == ErrorCode.INVALID_CONFIG
            assert g.error_message == f"Can't {verb} to key share.isolation.level because its type is not LIST."
        r = alter(c, topic_name, [op("segment.ms", None, Op.SET)])  # a null SET is no DELETE
        assert r.error_code == ErrorCode.INVALID_REQUEST
        assert describe(c, topic_name) == before


def test_the_default_is_the_topic_configs_not_the_brokers(broker_factory, topic_name: str) -> None:
    # Kafka's controller starts from the topic config's own default ("delete"), not from
    # log.cleanup.policy: on such a broker APPEND delete turns a compacted-by-default topic into delete.
    b = broker_factory("log.cleanup.policy=compact").start()
    with RawClient(b.port) as c:
        create(c, topic_name)
        assert describe(c, topic_name)["cleanup.policy"] == ("compact", Source.STATIC_BROKER_CONFIG)
        assert alter(c, topic_name, [op("cleanup.policy", "delete", Op.APPEND)]).error_code == 0
        assert describe(c, topic_name)["cleanup.policy"] == ("delete", Source.DYNAMIC_TOPIC_CONFIG)
    assert b.stop() == 0


def test_confluent_admin_client_append_subtract(shared_broker: BrokerProcess, topic_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap, "log_level": 0})
    with RawClient(shared_broker.port) as c:
        create(c, topic_name)

    def alter_ck(name: str, value: str, operation: AlterConfigOpType) -> None:
        entry = ConfigEntry(name, value, incremental_operation=operation)
        res = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[entry])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(15)

    def policy() -> str:
        (f,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic_name)]).values()
        return f.result(15)["cleanup.policy"].value

    alter_ck("cleanup.policy", "compact", AlterConfigOpType.APPEND)
    assert policy() == "delete,compact"
    alter_ck("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)
    assert policy() == "compact"
    with pytest.raises(KafkaException) as info:
        alter_ck("retention.ms", "1000", AlterConfigOpType.APPEND)
    err = info.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG and "retention.ms" in err.str()
    assert policy() == "compact"


def test_a_resource_named_twice_is_refused_in_both_places_and_applied_in_neither(
    shared_broker: BrokerProcess, topic_name: str
) -> None:
    """Kafka's ConfigAdminManager.preprocess: INVALID_REQUEST "Each resource must appear at most
    once." for every copy; a different resource in the same request is still applied."""
    other = topic_name + "-other"
    with RawClient(shared_broker.port) as c:
        create(c, topic_name)
        create(c, other)
        res = [
            _IAC.AlterConfigsResource(
                resource_type=Resource.TOPIC, resource_name=topic_name, configs=[op("retention.ms", "1000", Op.SET)]
            ),
            _IAC.AlterConfigsResource(
                resource_type=Resource.TOPIC, resource_name=other, configs=[op("retention.ms", "2000", Op.SET)]
            ),
            _IAC.AlterConfigsResource(
                resource_type=Resource.TOPIC, resource_name=topic_name, configs=[op("retention.ms", "3000", Op.SET)]
            ),
        ]
        rs = c.call("IncrementalAlterConfigs", 1, _IAC(resources=res)).responses
        assert [(r.resource_name, r.error_code, r.error_message) for r in rs] == [
            (topic_name, ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."),
            (other, 0, None),
            (topic_name, ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."),
        ]
        assert describe(c, topic_name)["retention.ms"][1] == Source.DEFAULT_CONFIG
        assert describe(c, other)["retention.ms"] == ("2000", Source.DYNAMIC_TOPIC_CONFIG)
