"""The Spark source's ``kafka.``-prefixed SASL options: they reach the client config, the batch
planner logs in over SASL_SSL with them (the broker sees the SASL user), and the password
shows in no repr and no error.

Spark itself is not started (as in test_tls_spark_options.py): the options layer is what
the source reads its settings through, and the planner's connection is the real one.
"""

from __future__ import annotations

import asyncio
import traceback

import pytest

from shoal.client.core.client_core import ClientCore
from shoal.client.core.errors import ConfigError
from shoal.client.spark.options import parse_source_options
from shoal.testing import EmbeddedBroker
from tests.support.auth_wire import scram_upserts
from tests.support.brokers import RawClient
from tests.support.tls import TlsFiles, make_tls_files, principals
from tests.support.wire import create

pytest.importorskip("pyspark")
from shoal.client.spark.batch import plan_ranges

PASSWORD = "sp4rk-S3cret-pw"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("spark-sasl-certs"))


@pytest.fixture(scope="module")
def broker(files, tmp_path_factory):
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(files.broker),
        "ssl.truststore.location": str(files.ca),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "connection.failed.authentication.delay.ms": "20",
    }
    with EmbeddedBroker(settings, data_dir=tmp_path_factory.mktemp("spark-sasl") / "d") as eb:
        with RawClient(eb.port) as c:
            assert (
                c.call("AlterUserScramCredentials", 0, body=scram_upserts({"spark": PASSWORD})).results[0].error_code
                == 0
            )
            create(c, "spark-sasl", 3)
        yield eb


def _options(files: TlsFiles, port: int, password: str = PASSWORD, **extra: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": f"127.0.0.1:{port}",
        "subscribe": "spark-sasl",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "Kafka.SASL.Username": "spark",  # Spark's option keys are case-insensitive
        "kafka.sasl.password": password,
        "kafka.ssl.ca.location": str(files.ca),
        **extra,
    }


def test_sasl_options_reach_the_client_config(files) -> None:
    opts = parse_source_options(_options(files, 9093, **{"kafka.group.id": "g"}))
    for config in (opts.batch_client_config(), opts.stream_client_config()):
        assert config["security.protocol"] == "SASL_SSL"
        assert config["sasl.mechanism"] == "SCRAM-SHA-512"
        assert config["sasl.username"] == "spark"
        assert config["sasl.password"] == PASSWORD
        assert ClientCore(config).ssl_context is not None
        assert PASSWORD not in repr(config) and PASSWORD not in str(config)
    for shown in (opts, opts.for_batch(), opts.for_stream()):
        assert PASSWORD not in repr(shown) and PASSWORD not in str(shown)


def test_option_errors_do_not_show_the_password(files) -> None:
    bad = [
        {"kafka.sasl.mechanism": "GSSAPI"},
        {"kafka.security.protocol": "SASL_NOPE"},
        {"kafka.sasl.username": ""},
        {"kafka.no.such.setting": "x"},
        {"maxRecordsPerTrigger": "-1"},
    ]
    for extra in bad:
        opts = {**_options(files, 9093), **extra}
        with pytest.raises(ConfigError) as e:
            parse_source_options(opts).for_batch()
        text = "".join(traceback.format_exception(e.value))
        assert PASSWORD not in text, extra


def test_batch_planner_logs_in_over_sasl_ssl(files, broker) -> None:
    port = broker.listener_port("SASL_SSL")
    opts = parse_source_options(_options(files, port)).for_batch()
    ranges = asyncio.run(plan_ranges(opts, opts.batch_client_config()))
    assert sorted(r.partition for r in ranges) == [0, 1, 2]

    async def hold() -> list[str]:
        core = ClientCore(opts.batch_client_config())
        await core.start()
        try:
            return await asyncio.to_thread(principals, broker, "SASL_SSL")
        finally:
            await core.close()

    assert asyncio.run(hold()) == ["User:spark"]


def test_a_wrong_password_fails_without_showing_either_password(files, broker) -> None:
    wrong = "wr0ng-Spark-pw"
    extra = {"kafka.socket.connection.setup.timeout.ms": "2000", "kafka.default.api.timeout.ms": "3000"}
    opts = parse_source_options(_options(files, broker.listener_port("SASL_SSL"), wrong, **extra)).for_batch()
    with pytest.raises(Exception) as e:
        asyncio.run(plan_ranges(opts, opts.batch_client_config()))
    text = "".join(traceback.format_exception(e.value)) + repr(e.value)
    assert "uthentication" in text
    assert wrong not in text and PASSWORD not in text
