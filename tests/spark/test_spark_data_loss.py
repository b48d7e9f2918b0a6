"""failOnDataLoss against offsets a broker's retention really deleted."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from spark_helpers import create_topic, topic_name

from client_helpers import produce

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


def test_skipping_lost_offsets_reads_on_from_the_log_start(cluster) -> None:
    """With failOnDataLoss=false a range starting below the log start is read from the log
    start. librdkafka refuses the seek there (_STATE, "Erroneous state") while the partition is
    still resetting from the out-of-range answer; a read that relied on the seek once failed
    when retention moved the log start during a test run."""
    from odradek.spark.kafka_io import OffsetRange, read_range
    from odradek.spark.source import _arrow_schema, read_schema

    bs = cluster.bootstrap_servers
    topic = create_topic(bs, topic_name("spark-skip"), 1)
    produce(bs, topic, [(None, b"v", None) for _ in range(40)])
    _delete_records(bs, topic, 21)
    batches = read_range({"bootstrap.servers": bs}, OffsetRange(topic, 0, 0, 40), _arrow_schema(read_schema()),
                         fail_on_data_loss=False, poll_timeout_s=30.0)
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(21, 40))


def _delete_records(bootstrap: str, topic: str, before: int) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, before)], operation_timeout=30)
    assert next(iter(futures.values())).result(60).low_watermark == before


def _stream(spark, bs: str, topic: str, out: Path, fail_on_data_loss: bool):
    """A running query: 10 records a second from the log start into parquet files under `out`
    (the file sink, unlike the memory sink, restarts from its checkpoint)."""
    return (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "10").option("failOnDataLoss", str(fail_on_data_loss).lower())
            .load().selectExpr("offset").writeStream.format("parquet").option("path", str(out / "data"))
            .trigger(processingTime="1 second").option("checkpointLocation", str(out / "ckpt")).start())


def _offsets(spark, out: Path) -> list[int]:
    if not (out / "data" / "_spark_metadata").exists():
        return []
    return sorted(r.offset for r in spark.read.schema("offset LONG").parquet(str(out / "data")).collect())


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.mark.slow  # 45 s of streaming triggers; make test keeps the batch variant above (make test-long runs this)
def test_fail_on_data_loss_with_records_deleted_under_running_and_restarted_queries(spark, cluster, tmp_path) -> None:
    """As Spark's Kafka source: DeleteRecords below the offset a streaming query is at fails it
    with failOnDataLoss=true and makes it skip to the new log start with false, whether the
    records go while the query runs or while it is stopped (restarted from its checkpoint)."""
    bs = cluster.bootstrap_servers
    topic = create_topic(bs, topic_name("spark-delrec"), 1)
    produce(bs, topic, [(None, b"v%d" % i, None) for i in range(300)])
    fail_out, skip_out = tmp_path / "fail", tmp_path / "skip"
    failing = _stream(spark, bs, topic, fail_out, True)
    skipping = _stream(spark, bs, topic, skip_out, False)
    try:
        # both have read their first batch, and at 10 records a second are far from offset 250
        # (25 s: a slow start of the other query on a loaded machine must not carry this one past it)
        _wait(lambda: len(_offsets(spark, fail_out)) >= 10 and len(_offsets(spark, skip_out)) >= 10,
              90, "both queries' first batch")
        _delete_records(bs, topic, 250)
        _wait(lambda: not failing.isActive, 60, "the failOnDataLoss=true query to fail")
        assert "failOnDataLoss" in str(failing.exception())
        _wait(lambda: _offsets(spark, skip_out)[-1:] == [299], 60, "the other query to reach 299")
        read = _offsets(spark, skip_out)
        assert read[-50:] == list(range(250, 300))        # skipped to the new log start
        assert read[:-50] == list(range(len(read) - 50))  # what it read before the deletion, in order
        assert len(read) - 50 < 250
    finally:
        failing.stop()
        skipping.stop()

    # stopped at 300: records written and deleted meanwhile, then the query restarts
    produce(bs, topic, [(None, b"w%d" % i, None) for i in range(100)])
    _delete_records(bs, topic, 350)
    restarted = _stream(spark, bs, topic, skip_out, True)
    try:
        _wait(lambda: not restarted.isActive, 60, "the restarted failOnDataLoss=true query to fail")
        assert "300..349" in str(restarted.exception())
    finally:
        restarted.stop()
    restarted = _stream(spark, bs, topic, skip_out, False)
    try:
        _wait(lambda: _offsets(spark, skip_out)[-1:] == [399], 60, "the restarted query to reach 399")
        assert [o for o in _offsets(spark, skip_out) if o >= 300] == list(range(350, 400))
    finally:
        restarted.stop()
