"""The client core without sockets: configuration checks, cluster metadata,
backoff. Its connections, retries and coordinator lookups over real sockets
are in tests/wire/test_client_core_wire.py."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from shoal.client.core.client_core import Backoff
from shoal.client.core.cluster import ClusterMetadata, TopicPartition
from shoal.client.core.config import build_config, parse_bootstrap
from shoal.client.core.errors import (
    ConfigError,
)
from shoal.protocol.api import api_by_name
from shoal.protocol.errors import ErrorCode

# -- configuration -----------------------------------------------------------------------


def test_unknown_key_names_the_key() -> None:
    with pytest.raises(ConfigError) as e:
        build_config("producer", {"bootstrap.servers": "h:1", "linger.msec": 5})
    assert e.value.key == "linger.msec"
    assert "linger.msec" in str(e.value)


def test_kwargs_use_underscores_and_merge_with_mapping() -> None:
    cfg = build_config("producer", {"bootstrap.servers": "h:1"}, {"linger_ms": "7", "compression_type": "ZSTD"})
    assert cfg["linger.ms"] == 7 and cfg.linger_ms == 7
    assert cfg.compression_type == "zstd"
    assert cfg.bootstrap_servers == (("h", 1),)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("linger.ms", "soon"),
        ("linger.ms", -1),
        ("linger.ms", True),
        ("enable.idempotence", "yes"),
        ("compression.type", "brotli"),
        ("acks", "2"),
        ("key.serializer", "str"),
        ("client.id", 7),
    ],
)
def test_bad_values_name_the_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as e:
        build_config("producer", {"bootstrap.servers": "h:1", key: value})
    assert e.value.key == key


@pytest.mark.parametrize("servers", ["", "localhost", "h:", ":9092", "h:0", "h:70000", "h:x", "a b:1", 42, [7]])
def test_bad_bootstrap_strings(servers: Any) -> None:
    with pytest.raises(ConfigError) as e:
        build_config("admin", {"bootstrap.servers": servers})
    assert e.value.key == "bootstrap.servers"


def test_bootstrap_forms() -> None:
    assert parse_bootstrap("a:1, b:2") == (("a", 1), ("b", 2))
    assert parse_bootstrap(["PLAINTEXT://a:1", "[::1]:3"]) == (("a", 1), ("::1", 3))


def test_required_and_unsupported_keys() -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        build_config("admin", {})
    with pytest.raises(ConfigError, match=r"group\.id"):
        build_config("share_consumer", {"bootstrap.servers": "h:1"})
    with pytest.raises(ConfigError, match="transactions are not supported"):
        build_config("producer", {"bootstrap.servers": "h:1", "transactional.id": "t"})


def test_idempotence_rules_follow_kafka() -> None:
    # Default idempotence quietly yields to settings it cannot work with ...
    cfg = build_config("producer", {"bootstrap.servers": "h:1", "acks": 1})
    assert cfg.enable_idempotence is False and cfg.acks == 1
    # ... but asked for explicitly, the conflict is an error.
    with pytest.raises(ConfigError) as e:
        build_config("producer", {"bootstrap.servers": "h:1", "acks": "1", "enable.idempotence": True})
    assert e.value.key == "acks"
    assert build_config("producer", {"bootstrap.servers": "h:1"}).acks == -1


def test_consumer_heartbeat_below_session() -> None:
    with pytest.raises(ConfigError) as e:
        build_config("consumer", {"bootstrap.servers": "h:1", "heartbeat.interval.ms": 50000})
    assert e.value.key == "heartbeat.interval.ms"


# -- sans-IO pieces ------------------------------------------------------------------------


def _metadata(topics: list[tuple[str | None, uuid.UUID, int, list[tuple[int, int]]]]) -> Any:
    M = api_by_name("Metadata").response_class()
    return M(
        brokers=[M.MetadataResponseBroker(node_id=1, host="h", port=1)],
        cluster_id="c",
        controller_id=1,
        topics=[
            M.MetadataResponseTopic(
                error_code=err,
                name=name,
                topic_id=tid,
                partitions=[M.MetadataResponsePartition(partition_index=p, leader_id=leader) for p, leader in parts],
            )
            for name, tid, err, parts in topics
        ],
    )


def test_cluster_metadata_partial_and_full_updates() -> None:
    m = ClusterMetadata()
    a, b = uuid.uuid4(), uuid.uuid4()
    m.update(_metadata([("a", a, 0, [(0, 1), (1, 1)]), ("b", b, 0, [(0, -1)])]), 1.0)
    assert m.partitions_for("a") == [0, 1]
    assert m.leader(TopicPartition("a", 1)) == 1
    assert m.leader(TopicPartition("b", 0)) is None  # leaderless
    assert m.leader(TopicPartition("a", 9)) is None
    assert m.topic_name(b) == "b"
    # A partial update naming only "a" keeps "b"; an error on "a" drops it.
    m.update(_metadata([("a", a, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])]), 2.0)
    assert "a" not in m.topics and m.topic_errors["a"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert m.topic_name(a) is None and m.partitions_for("b") == [0]
    # A recreated topic gets a new id; the old id no longer resolves.
    a2 = uuid.uuid4()
    m.update(_metadata([("a", a2, 0, [(0, 1)])]), 3.0)
    assert m.topic_id("a") == a2 and m.topic_name(a) is None
    # A full update forgets topics it does not name.
    m.update(_metadata([("a", a2, 0, [(0, 1)])]), 4.0, full=True)
    assert set(m.topics) == {"a"} and m.topic_name(b) is None
    # Topic named only by id (Metadata v12+ may answer name null).
    m.update(_metadata([(None, a2, 0, [(0, 1), (1, 1)])]), 5.0)
    assert m.partitions_for("a") == [0, 1]


def test_backoff_grows_with_jitter_and_caps() -> None:
    b = Backoff(100, 1000)
    waits = [b.next_ms() for _ in range(8)]
    assert 80 <= waits[0] <= 120
    assert 160 <= waits[1] <= 240
    assert all(w <= 1200 for w in waits) and waits[-1] >= 800
    b.reset()
    assert b.next_ms() <= 120


def test_config_survives_pickling() -> None:
    # Spark ships a data source's settings to its workers with pickle.
    import pickle

    cfg = build_config("consumer", {"bootstrap.servers": "h:1", "fetch.max.wait.ms": 7})
    copy = pickle.loads(pickle.dumps(cfg))
    assert copy == cfg and copy.fetch_max_wait_ms == 7
    assert copy.with_overrides(client_id="x")["client.id"] == "x"
