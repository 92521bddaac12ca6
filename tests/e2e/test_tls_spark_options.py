"""The Spark source's ``kafka.``-prefixed options reach the client, TLS settings included.

Spark itself is not started (seconds per session): the options layer is what the source
reads its settings through, and the batch planner's real connection (ClientCore, Metadata,
ListOffsets) goes to a mutual-TLS listener, where the broker sees the certificate's principal.
"""

from __future__ import annotations

import asyncio

import pytest

from shoal.client.core.client_core import ClientCore
from shoal.client.spark.options import parse_source_options
from shoal.testing import EmbeddedBroker
from tests.support.brokers import RawClient
from tests.support.tls import make_tls_files, principals
from tests.support.wire import create

pytest.importorskip("pyspark")
from shoal.client.spark.batch import plan_ranges


def _options(files, port: int, **extra: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": f"127.0.0.1:{port}",
        "subscribe": "spark-tls",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.ca.location": str(files.ca),
        "kafka.ssl.certificate.location": str(files.client_cert("alice")),
        "kafka.ssl.key.location": str(files.client_key("alice")),
        "Kafka.SSL.Endpoint.Identification.Algorithm": "https",  # Spark's option keys are case-insensitive
        **extra,
    }


def test_ssl_options_reach_the_client_config(tmp_path) -> None:
    files = make_tls_files(tmp_path / "certs")
    opts = parse_source_options(_options(files, 9093, **{"kafka.group.id": "g"}))
    for config in (opts.batch_client_config(), opts.stream_client_config()):
        assert config["security.protocol"] == "SSL"  # normalized to Kafka's spelling
        assert config["ssl.ca.location"] == str(files.ca)
        assert config["ssl.certificate.location"] == str(files.client_cert("alice"))
        assert config["ssl.endpoint.identification.algorithm"] == "https"
        assert ClientCore(config).ssl_context is not None


def test_batch_planner_connects_over_mutual_tls(tmp_path) -> None:
    files = make_tls_files(tmp_path / "certs")
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": str(files.broker),
        "ssl.truststore.location": str(files.ca),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": r"RULE:^CN=([^,]+),.*$/spark-$1/",
    }
    with EmbeddedBroker(settings, data_dir=tmp_path / "d") as eb:
        with RawClient(eb.port) as c:
            create(c, "spark-tls", 2)
        opts = parse_source_options(_options(files, eb.listener_port("SSL"))).for_batch()
        ranges = asyncio.run(plan_ranges(opts, opts.batch_client_config()))
        assert sorted(r.partition for r in ranges) == [0, 1]
        # Without the client certificate the planner cannot connect at all.
        bare = parse_source_options(
            {
                k: v
                for k, v in _options(files, eb.listener_port("SSL")).items()
                if "certificate" not in k and "key" not in k
            }
            | {"kafka.socket.connection.setup.timeout.ms": "2000", "kafka.default.api.timeout.ms": "3000"}
        )
        with pytest.raises(Exception):  # noqa: B017 (any client error: the point is that it fails)
            asyncio.run(plan_ranges(bare.for_batch(), bare.batch_client_config()))
    assert files.dn["alice"].startswith("CN=alice,")


def test_planner_principal_is_the_mapped_name(tmp_path) -> None:
    files = make_tls_files(tmp_path / "certs")
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": str(files.broker),
        "ssl.truststore.location": str(files.ca),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": r"RULE:^CN=([^,]+),.*$/spark-$1/",
    }
    with EmbeddedBroker(settings, data_dir=tmp_path / "d") as eb:
        with RawClient(eb.port) as c:
            create(c, "spark-tls", 1)
        opts = parse_source_options(_options(files, eb.listener_port("SSL")))
        config = opts.batch_client_config()

        async def hold() -> list[str]:
            core = ClientCore(config)
            await core.start()
            try:
                return await asyncio.to_thread(principals, eb, "SSL")
            finally:
                await core.close()

        assert asyncio.run(hold()) == ["User:spark-alice"]
