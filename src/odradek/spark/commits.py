"""Commit markers for exactly-once streaming writes, stored in the cluster itself.

One topic (default `__odradek_spark_commits`, one partition, cleanup.policy=compact) holds a
record per finished write task, keyed `<queryId>/<batchId>/task/<partitionId>`, and one per
committed micro-batch, keyed `<queryId>/<batchId>`. A write task that finds either marker for
its (query, batch[, partition]) writes nothing, and a commit that finds its batch marker does
nothing: replaying a batch after a crash between the sink commit and Spark's checkpoint (or
after a crash between the tasks and the commit) writes no record twice.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.spark.kafka_io import Metadata, consumer_conf


def batch_key(query_id: str, batch_id: int) -> str:
    return f"{query_id}/{batch_id}"


def task_key(query_id: str, batch_id: int, partition_id: int) -> str:
    return f"{query_id}/{batch_id}/task/{partition_id}"


class CommitMarkers:
    def __init__(self, kafka_conf: Mapping[str, str], topic: str) -> None:
        self.kafka_conf = dict(kafka_conf)
        self.topic = topic

    def ensure_topic(self, timeout_s: float = 30.0) -> None:
        with Metadata(self.kafka_conf) as md:
            if self.topic in md.topics():
                return
            brokers = len(md._consumer.list_topics(timeout=10).brokers)
        admin = AdminClient(dict(self.kafka_conf))  # its security settings too
        topic = NewTopic(self.topic, 1, min(3, max(1, brokers)), config={"cleanup.policy": "compact"})
        for future in admin.create_topics([topic]).values():
            try:
                future.result(timeout_s)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        # wait until the new partition has a leader that answers ListOffsets
        with Metadata(self.kafka_conf, timeout_s=timeout_s) as md:
            md.watermarks([(self.topic, 0)])

    def read(self, query_id: str, timeout_s: float = 60.0) -> dict[str, dict]:
        """Every marker of `query_id` (key -> JSON value), read up to the high watermark."""
        with Metadata(self.kafka_conf) as md:
            low, high = md.watermarks([(self.topic, 0)])[(self.topic, 0)]
        out: dict[str, dict] = {}
        if high <= low:
            return out
        prefix = query_id + "/"
        consumer = Consumer(consumer_conf(self.kafka_conf))
        try:
            consumer.assign([TopicPartition(self.topic, 0, low)])
            deadline = time.monotonic() + timeout_s
            nxt = low
            while nxt < high:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading commit markers from {self.topic}: stuck at {nxt} of {high}")
                for m in consumer.consume(num_messages=10_000, timeout=0.5):
                    error = m.error()
                    if error is not None:
                        if error.fatal():
                            raise KafkaException(error)
                        continue
                    offset = m.offset()
                    assert offset is not None  # set on every message without an error
                    nxt = max(nxt, offset + 1)
                    key = (m.key() or b"").decode()
                    if key.startswith(prefix):
                        out[key] = json.loads(m.value() or b"{}")
                if nxt < high and consumer.position([TopicPartition(self.topic, 0)])[0].offset >= high:
                    break
        finally:
            consumer.close()
        return out

    def write(self, key: str, value: dict) -> None:
        """Store a marker with acks=all; returns once it is committed (below the high watermark)."""
        producer = Producer({"bootstrap.servers": self.kafka_conf["bootstrap.servers"], "acks": "all",
                             "enable.idempotence": True,
                             **{k: v for k, v in self.kafka_conf.items() if k != "bootstrap.servers"}})
        errors: list[object] = []
        producer.produce(self.topic, key=key.encode(), value=json.dumps(value).encode(),
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
        left = producer.flush(120)
        if errors or left:
            raise KafkaException(f"commit marker {key} not stored: {errors or 'timed out'}")
