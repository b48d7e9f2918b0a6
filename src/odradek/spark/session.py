"""A local SparkSession set up the way odradek's tests, demo and benchmark need it.

Quiet (log4j2 at warn, no console progress bar, no UI), on loopback only, with Python workers
running this interpreter (so they import odradek from the same environment), and the
`odradek` data source registered.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

LOG4J2 = Path(__file__).with_name("log4j2.properties")


def register(spark: Any) -> None:
    """Register the `odradek` data source with a SparkSession (pyspark >= 4.0)."""
    from odradek.spark.source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)


def local_session(app_name: str = "odradek", master: str = "local[2]", shuffle_partitions: int = 2,
                  conf: dict[str, str] | None = None) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    java_opts = f"-Dlog4j2.configurationFile=file:{LOG4J2}"
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.driver.extraJavaOptions", java_opts)
               .config("spark.executor.extraJavaOptions", java_opts)
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.stopTimeout", "30s"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
