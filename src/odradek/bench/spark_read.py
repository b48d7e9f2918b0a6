"""`odradek bench spark-read`: rows/s reading a topic through Spark vs a plain confluent-kafka
consumer, on the same topic in the same run.

Both readers get the whole topic from offset 0 to the high watermark. The consumer is one
Python process with assign() over all partitions that touches each record's key and value
(the work any consumer does). Spark (local[N]) reads with the `odradek` source and
materializes every column into the `noop` sink; its time includes planning but not the
SparkSession start, and a small warm-up query runs first.
"""
from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass
class SparkReadResult:
    records: int
    size: int
    partitions: int
    spark_master: str
    consumer_s: float
    consumer_rows_per_s: float
    spark_s: float
    spark_rows_per_s: float
    ratio: float


def fill_topic(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 3)]).values():
        f.result(30)
    from odradek.bench.produce import wait_for_leaders

    wait_for_leaders(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(size)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("benchmark records not delivered")


def consumer_read(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "enable.partition.eof": False})
    try:
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        n = nbytes = 0
        while n < records:
            for m in c.consume(num_messages=10_000, timeout=1.0):
                if m.error() is None:
                    key, value = m.key(), m.value()
                    assert value is not None  # every record the benchmark wrote has a value
                    nbytes += len(value) + (len(key) if key else 0)
                    n += 1
        return time.perf_counter() - t0
    finally:
        c.close()


def spark_read(spark: object, bootstrap: str, topic: str) -> float:
    df = (spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)  # type: ignore[attr-defined]
          .option("subscribe", topic).load())
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def run_spark_read(bootstrap: str | None, records: int = 1_000_000, size: int = 100, partitions: int = 6,
                   master: str = "local[2]") -> SparkReadResult:
    from odradek.bench.produce import private_cluster

    if bootstrap is None:
        with private_cluster() as bs:
            return run_spark_read(bs, records, size, partitions, master)
    topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
    fill_topic(bootstrap, topic, records, size, partitions)
    from odradek.spark.session import local_session

    spark = local_session("odradek-bench", master=master)
    try:
        warm = f"{topic}-warmup"
        fill_topic(bootstrap, warm, 1000, size, partitions)
        spark_read(spark, bootstrap, warm)
        consumer_s = consumer_read(bootstrap, topic, partitions, records)
        spark_s = spark_read(spark, bootstrap, topic)
    finally:
        spark.stop()
    return SparkReadResult(records, size, partitions, master, round(consumer_s, 2), round(records / consumer_s),
                           round(spark_s, 2), round(records / spark_s), round(consumer_s / spark_s, 2))


def format_result(r: SparkReadResult, as_json: bool = False) -> str:
    if as_json:
        return json.dumps(asdict(r))
    return (f"records {r.records:,} x {r.size} B in {r.partitions} partitions, Spark {r.spark_master}\n"
            f"confluent-kafka consumer: {r.consumer_s:.2f} s  {r.consumer_rows_per_s:,} rows/s\n"
            f"Spark (odradek source):   {r.spark_s:.2f} s  {r.spark_rows_per_s:,} rows/s\n"
            f"Spark / consumer rate: {r.ratio:.2f}")


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m odradek.bench.spark_read", description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap-server", help="an existing cluster (default: a private 3-broker one)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    print(format_result(run_spark_read(args.bootstrap_server, args.records, args.size, args.partitions,
                                       args.master), args.json))


if __name__ == "__main__":
    main()
