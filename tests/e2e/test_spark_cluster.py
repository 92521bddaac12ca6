"""The stream on Spark's ``local-cluster[2,1,1024]`` master: separate executor JVMs with their own Python workers.

On ``local[2]`` the executors live in the driver's JVM; here two worker
processes each launch an executor JVM, and its Python workers read the
acquired ranges from the broker over their own connections. It works with
the pip-installed pyspark as it is: the package directory is SPARK_HOME and
holds the jars and ``bin/`` scripts the workers launch executors with.

The scenarios are test_spark_stream's, every one of them, run on the cluster
session: every record once; a failed or stopped batch redelivered after the
query restarts (deliveryCount >= 2); a slow batch keeping its locks by
renewal; bad options and an unreachable broker failing the query; a broker
restart losing nothing (executor tasks reconnect from their own JVMs).
"""

# ruff: noqa: F811 -- pytest fixtures imported from tests.support.spark and named as parameters
from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from tests.e2e import test_spark_stream as streams
from tests.support.spark import LOCAL_CLUSTER, get_spark, spark_broker  # noqa: F401


@pytest.fixture
def cluster() -> Any:
    spark = get_spark(LOCAL_CLUSTER)
    assert spark.sparkContext.master == LOCAL_CLUSTER
    return spark


def test_every_record_once_on_local_cluster(cluster, spark_broker, topic_name, tmp_path) -> None:
    streams.test_every_record_once_with_acks_flowing(cluster, spark_broker, topic_name, tmp_path)


@pytest.mark.parametrize("how", ["fail", "stop"])
def test_interrupted_batch_redelivered_on_local_cluster(cluster, spark_broker, topic_name, tmp_path, how) -> None:
    streams.test_interrupted_batch_is_redelivered_after_restart(cluster, spark_broker, topic_name, tmp_path, how)


@pytest.mark.parametrize("renew", [True, False])
def test_slow_batch_keeps_its_locks_on_local_cluster(cluster, spark_broker, topic_name, tmp_path, renew) -> None:
    streams.test_slow_batch_keeps_its_locks(cluster, spark_broker, topic_name, tmp_path, renew)


def test_bad_options_fail_the_query_on_local_cluster(cluster, spark_broker, topic_name, tmp_path) -> None:
    streams.test_bad_options_and_unreachable_broker_fail_the_query(cluster, spark_broker, topic_name, tmp_path)


def test_broker_restart_loses_nothing_on_local_cluster(cluster, broker_factory, topic_name, tmp_path) -> None:
    streams.test_broker_restart_loses_nothing(cluster, broker_factory, topic_name, tmp_path)
