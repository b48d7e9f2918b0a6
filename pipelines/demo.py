"""The whole pipeline against a running cluster: generate page views, sessionize them with
Spark Structured Streaming (to a topic and Parquet), then answer a question over the Parquet.

    python -m pipelines.demo --bootstrap-server 127.0.0.1:9092 --work-dir ./.odradek-demo/pipeline
"""
from __future__ import annotations

import argparse
import shutil
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from pipelines import events, report, sessionize


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    ap.add_argument("--work-dir", type=Path, default=Path(".pipeline"))
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--sessions-per-user", type=int, default=5)
    args = ap.parse_args(argv)
    bs = args.bootstrap_server
    run_id = uuid.uuid4().hex[:6]     # fresh topics per run, so re-running the demo is safe
    topic, out_topic = f"page-views-{run_id}", f"sessions-{run_id}"
    shutil.rmtree(args.work_dir, ignore_errors=True)
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, 3, 3), NewTopic(out_topic, 3, 3)]).values():
        f.result(30)
    n = events.produce(bs, topic, events.generate(args.users, args.sessions_per_user))
    print(f"produced {n} page views to {topic}")

    from odradek.spark.session import local_session

    spark = local_session("odradek-pipeline-demo")
    sessionize.run(spark, bs, topic, out_topic, args.work_dir)
    count = spark.read.parquet(str(args.work_dir / "sessions")).count()
    in_topic = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs)
                .option("subscribe", out_topic).load().count())
    print(f"sessionized into {count} sessions (Parquet: {args.work_dir / 'sessions'}; topic {out_topic}: {in_topic})")
    print("Which landing page leads to the longest sessions?")
    report.landing_pages(spark, args.work_dir).show(truncate=False)
    spark.stop()


if __name__ == "__main__":
    main()
