"""odradek for Apache Spark: a Python data source named `odradek` with the options and row
schema of Spark's built-in Kafka source.

    import odradek.spark
    odradek.spark.register(spark)
    df = (spark.read.format("odradek")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

See docs/spark.md. Importing this package does not import pyspark; `register` does.
"""
from __future__ import annotations

from typing import Any

FORMAT = "odradek"


def register(spark: Any) -> None:
    """Register the `odradek` data source with a SparkSession (pyspark >= 4.0)."""
    from odradek.spark.session import register as register_source

    register_source(spark)


def local_session(*args: Any, **kwargs: Any) -> Any:
    """A quiet local SparkSession with the source registered; see odradek.spark.session."""
    from odradek.spark.session import local_session as make

    return make(*args, **kwargs)
