"""Structured Streaming through the `odradek` source and sink: checkpoint resume, triggers,
and exactly-once output across a crash between the sink commit and Spark's checkpoint."""
from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from spark_helpers import consume_all, create_topic, topic_name

from client_helpers import produce
from odradek.spark.commits import CommitMarkers
from odradek.spark.options import MARKER_TOPIC

pytestmark = pytest.mark.integration


def _records(prefix: str, n: int) -> list[tuple[bytes, bytes, None]]:
    return [(f"{prefix}-k{i % 50}".encode(), f"{prefix}-v{i}".encode(), None) for i in range(n)]


def test_stream_resumes_from_checkpoint_without_rereading(spark, cluster, tmp_path: Path) -> None:
    bs = cluster.bootstrap_servers
    src = create_topic(bs, topic_name("stream-src"), 3)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run() -> list[int]:
        stream = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", src).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "300").load()
                  .selectExpr("partition", "offset", "CAST(value AS STRING) AS value"))
        q = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        return [p["numInputRows"] for p in q.recentProgress]

    first = produce(bs, src, _records("a", 1000))
    batches = run()
    assert sum(batches) == 1000 and max(batches) <= 300   # maxOffsetsPerTrigger split the backlog
    second = produce(bs, src, _records("b", 500))
    assert sum(run()) == 500                              # resumed at the checkpoint: only the new ones
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r.partition, r.offset, r.value.encode()) for r in rows) == \
        sorted((p, o, v) for p, o, _, v in first + second)


def test_processing_time_trigger_picks_up_new_data(spark, cluster, tmp_path: Path) -> None:
    bs = cluster.bootstrap_servers
    src = create_topic(bs, topic_name("stream-live"), 2)
    name = "live_" + src.replace("-", "_")
    q = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", src)
         .load().selectExpr("CAST(value AS STRING) AS value")
         .writeStream.format("memory").queryName(name).trigger(processingTime="1 second")
         .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        deadline = time.monotonic() + 60
        while not q.recentProgress and time.monotonic() < deadline:   # startingOffsets=latest
            time.sleep(0.2)
        acked = produce(bs, src, _records("live", 400))
        while spark.table(name).count() < 400 and time.monotonic() < deadline:
            time.sleep(0.5)
        values = sorted(r.value.encode() for r in spark.table(name).collect())
        assert values == sorted(v for _, _, _, v in acked)
    finally:
        q.stop()


def _copy_query(spark, bs: str, src: str, dst: str, ckpt: Path, **options: str):
    stream = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bs)
              .option("subscribe", src).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "400").load().select("key", "value"))
    writer = (stream.writeStream.format("odradek").option("kafka.bootstrap.servers", bs)
              .option("topic", dst).option("checkpointLocation", str(ckpt)).trigger(availableNow=True))
    for k, v in options.items():
        writer = writer.option(k, v)
    return writer.start()


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "control-without-markers"])
def test_crash_between_sink_commit_and_checkpoint(spark, cluster, tmp_path: Path, exactly_once: bool) -> None:
    """Batch 1 is written and committed to the sink, then the query dies before Spark records
    the batch in its commit log. The restarted query replays batch 1 (same offsets, same batch
    id): with exactly-once markers nothing is written twice; the control run, with the markers
    off, shows the replay really happens and duplicates what batch 1 wrote."""
    bs = cluster.bootstrap_servers
    src = create_topic(bs, topic_name("eos-src"), 2)
    dst = create_topic(bs, topic_name("eos-dst"), 3)
    ckpt = tmp_path / "ckpt"
    acked = produce(bs, src, _records("e", 1000))
    flag = str(exactly_once).lower()

    q = _copy_query(spark, bs, src, dst, ckpt, exactlyOnce=flag, **{"odradek.testing.failAfterCommit": "1"})
    with pytest.raises(StreamingQueryException, match="crash after the sink commit of batch 1"):
        q.awaitTermination(120)
    # the state a driver crash at that point leaves: batch 1 planned, not in Spark's commit log
    assert (ckpt / "offsets" / "1").exists() and not (ckpt / "commits" / "1").exists()
    written_before_restart = len(consume_all(bs, dst))
    assert written_before_restart == 800

    q = _copy_query(spark, bs, src, dst, ckpt, exactlyOnce=flag)
    q.awaitTermination(120)
    assert q.exception() is None
    assert (ckpt / "commits" / "1").exists()
    replayed_rows = q.recentProgress[0]["numInputRows"]
    assert replayed_rows == 400            # the restarted query really re-ran batch 1

    out = Counter((k, v) for _, _, k, v, _ in consume_all(bs, dst))
    want = Counter((k, v) for _, _, k, v in acked)
    if exactly_once:
        assert out == want
        query_id = q.id
        markers = CommitMarkers({"bootstrap.servers": bs}, MARKER_TOPIC).read(query_id)
        assert f"{query_id}/1" in markers and f"{query_id}/2" in markers
    else:
        assert sum(out.values()) == 1000 + 400 and set(out) == set(want)
