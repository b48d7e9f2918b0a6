"""Streaming job: sessionize page views per user with event-time session windows.

Reads JSON page views from an odradek topic, assigns each user's views to sessions (a 30-minute
gap closes a session; late data up to 10 minutes is accepted by the watermark), and writes one
row per closed session both to an output topic (JSON, exactly once) and to Parquet.

    python -m pipelines.sessionize --bootstrap-server 127.0.0.1:9092 --work-dir ./.pipeline
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.events import TICK_USER

EVENT_SCHEMA = "user STRING, page STRING, ts TIMESTAMP"


def sessions(spark: SparkSession, bootstrap: str, topic: str, **source_options: str) -> DataFrame:
    events = (spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", "earliest")
              .options(**source_options)
              .load()
              .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
              .select("e.*"))
    return (events.withWatermark("ts", "10 minutes")
            .groupBy("user", F.session_window("ts", "30 minutes").alias("session"))
            .agg(F.count("*").alias("views"),
                 F.min_by("page", "ts").alias("landing_page"),
                 F.max_by("page", "ts").alias("exit_page"),
                 F.min("ts").alias("first_view"),
                 F.max("ts").alias("last_view"))
            # drop the generator's watermark tick. The predicate names an aggregate (views), so
            # Spark cannot push it below the aggregation and the watermark, where it would
            # filter the tick out before it moves the watermark
            .where((F.col("user") != TICK_USER) | (F.col("views") < 0))
            .select("user", "views", "landing_page", "exit_page", "first_view", "last_view",
                    (F.col("last_view").cast("long") - F.col("first_view").cast("long")).alias("duration_s")))


def run(spark: SparkSession, bootstrap: str, topic: str, out_topic: str, work_dir: Path,
        available_now: bool = True, **source_options: str) -> list[Any]:
    """Start the two sinks (topic and Parquet) and, with availableNow, wait for both to finish."""
    work_dir = Path(work_dir)
    rows = sessions(spark, bootstrap, topic, **source_options)
    trigger = {"availableNow": True} if available_now else {"processingTime": "2 seconds"}
    to_topic = (rows.select(F.col("user").alias("key"), F.to_json(F.struct(*rows.columns)).alias("value"))
                .writeStream.format("odradek").outputMode("append")
                .option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
                .option("checkpointLocation", str(work_dir / "checkpoints" / "topic"))
                .trigger(**trigger).start())
    to_parquet = (rows.writeStream.format("parquet").outputMode("append")
                  .option("path", str(work_dir / "sessions"))
                  .option("checkpointLocation", str(work_dir / "checkpoints" / "parquet"))
                  .trigger(**trigger).start())
    queries = [to_topic, to_parquet]
    if available_now:
        for q in queries:
            q.awaitTermination()
            if q.exception() is not None:
                raise RuntimeError(f"query {q.name or q.id} failed: {q.exception()}")
    return queries


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="page-views")
    ap.add_argument("--out-topic", default="sessions")
    ap.add_argument("--work-dir", type=Path, default=Path(".pipeline"))
    args = ap.parse_args(argv)
    from odradek.spark.session import local_session

    spark = local_session("odradek-sessionize")
    run(spark, args.bootstrap_server, args.topic, args.out_topic, args.work_dir)
    print(f"sessions written to topic {args.out_topic} and {args.work_dir / 'sessions'}")


if __name__ == "__main__":
    main()
