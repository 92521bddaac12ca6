"""The ``shoal`` PySpark data source (pyspark >= 4.0 with pyarrow)::

    from shoal.client.spark import register
    register(spark)            # then spark.read / spark.readStream .format("shoal")

``source`` declares the data source (its docstring lists the options), ``batch`` reads
exact offset ranges (planned by ``offsets``), ``stream`` reads a share group and
acknowledges after Spark commits (the sans-IO ``ledger`` tracks what it holds),
``options`` parses and checks options, ``rows`` builds Spark's Kafka-source rows,
``worker`` settles the PySpark worker process executor tasks read in.

``register`` and ``ShoalDataSource`` load on first use, so the sans-IO parts import
without pyspark.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ShoalDataSource", "register"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from shoal.client.spark import source

        return getattr(source, name)
    raise AttributeError(f"module 'shoal.client.spark' has no attribute {name!r}")
