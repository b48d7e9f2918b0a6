"""failOnDataLoss against offsets a broker's retention really deleted."""
from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from client_helpers import produce
from spark_helpers import create_topic, topic_name

pytestmark = pytest.mark.integration


def wait_log_start_above_zero(bootstrap: str, topic: str, timeout_s: float = 60) -> tuple[int, int]:
    """The (low, high) watermarks once retention has deleted the first segments."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            if low > 0:
                return low, high
            assert time.monotonic() < deadline, "retention deleted nothing"
            time.sleep(0.5)
    finally:
        consumer.close()


def test_fail_on_data_loss_reports_offsets_retention_deleted(spark, cluster) -> None:
    bs = cluster.bootstrap_servers
    topic = create_topic(bs, topic_name("spark-loss"), 1,
                         config={"segment.bytes": "2048", "retention.bytes": "4096"})
    # small batches, so the log rolls many small segments and retention can delete old ones
    produce(bs, topic, [(None, b"x" * 100, None) for _ in range(400)], **{"batch.num.messages": 5})
    low, high = wait_log_start_above_zero(bs, topic)
    reader = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs)
              .option("subscribe", topic).option("startingOffsets", json.dumps({topic: {"0": 0}})))

    with pytest.raises(Exception, match=f"{topic}.*failOnDataLoss"):
        reader.load().collect()

    offsets = sorted(r.offset for r in reader.option("failOnDataLoss", "false").load()
                     .select("offset").collect())
    assert offsets[0] >= low > 0
    assert offsets == list(range(offsets[0], high))


def test_a_range_that_makes_no_progress_times_out_naming_the_watermarks(cluster) -> None:
    """A partition that never reaches the planned end (here: a range past the high watermark,
    which planning never makes) fails after kafkaConsumer.pollTimeoutMs with what the broker
    holds, so a stalled query can be told from lost data."""
    from odradek.spark.kafka_io import OffsetRange, read_range
    from odradek.spark.source import _arrow_schema, read_schema

    bs = cluster.bootstrap_servers
    topic = create_topic(bs, topic_name("spark-stall"), 1)
    produce(bs, topic, [(None, b"v", None) for _ in range(3)])
    batches = read_range({"bootstrap.servers": bs}, OffsetRange(topic, 0, 0, 5),
                         _arrow_schema(read_schema()), poll_timeout_s=2.0, stall_s=1.0)
    with pytest.raises(TimeoutError, match=r"no progress at offset 3 .*log start 0, high "
                                           r"watermark 3, range \[0, 5\), consumer position"):
        list(batches)
