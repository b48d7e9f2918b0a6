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
