"""Batch job over the sessionizer's Parquet output: which landing page leads to the longest
sessions? One row per landing page: sessions, average views, average minutes, and how many of
those sessions ended on /cart or /checkout.

    python -m pipelines.report --work-dir ./.pipeline
"""
from __future__ import annotations

import argparse
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def landing_pages(spark: SparkSession, work_dir: Path) -> DataFrame:
    s = spark.read.parquet(str(Path(work_dir) / "sessions"))
    return (s.groupBy("landing_page")
            .agg(F.count("*").alias("sessions"),
                 F.round(F.avg("views"), 2).alias("avg_views"),
                 F.round(F.avg("duration_s") / 60, 1).alias("avg_minutes"),
                 F.sum(F.col("exit_page").isin("/cart", "/checkout").cast("int")).alias("ended_in_cart"))
            .orderBy(F.desc("avg_minutes"), "landing_page"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work-dir", type=Path, default=Path(".pipeline"))
    args = ap.parse_args(argv)
    from odradek.spark.session import local_session

    spark = local_session("odradek-report")
    landing_pages(spark, args.work_dir).show(truncate=False)


if __name__ == "__main__":
    main()
