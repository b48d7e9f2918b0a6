"""A partition leader is killed while a Spark batch read of that partition is in flight; the
task follows the new leader and the read returns every record exactly once."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from spark_helpers import create_topic, topic_name

from client_helpers import produce

pytestmark = pytest.mark.integration


def _leader(bs: str, topic: str, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": bs}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[partition].leader


def test_read_survives_leader_kill(spark, private_cluster, tmp_path: Path) -> None:
    cluster = private_cluster
    bs = cluster.bootstrap_servers
    topic = create_topic(bs, topic_name("leader-kill"), 1, 3)
    acked = produce(bs, topic, [(f"k{i}".encode(), f"value-{i:06d}".encode() * 5, None) for i in range(10000)],
                    **{"batch.size": 4096})   # small record batches: a fetch returns whole batches
    pause = tmp_path / "pause"
    pause.mkdir()

    df = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", topic)
          # small fetches, so most of the partition is still on the broker when the leader dies
          .option("kafka.fetch.max.bytes", "16384").option("kafka.message.max.bytes", "16384")
          .option("kafka.max.partition.fetch.bytes", "16384").option("kafka.fetch.queue.backoff.ms", "100")
          .option("kafka.queued.max.messages.kbytes", "16").option("kafka.queued.min.messages", "1")
          .option("odradek.testing.pauseDir", str(pause)).load())
    result: dict[str, object] = {}

    def collect() -> None:
        try:
            result["rows"] = df.select("offset", "value").collect()
        except Exception as exc:  # reported by the assertion below
            result["error"] = exc

    reader = threading.Thread(target=collect)
    reader.start()
    started = pause / f"started-{topic}-0"
    deadline = time.monotonic() + 120
    while not started.exists() and reader.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), f"the read never started: {result.get('error')}"
    old_leader = _leader(bs, topic, 0)
    cluster.kill_broker(old_leader)
    survivors = [b for b in cluster.broker_ids if b != old_leader]
    survivor_bs = ",".join(f"127.0.0.1:{cluster.broker_port(b)}" for b in survivors)
    while _leader(survivor_bs, topic, 0) not in survivors and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _leader(survivor_bs, topic, 0) in survivors   # the rest of the read needs the new leader
    (pause / "resume").touch()
    reader.join(300)
    assert not reader.is_alive()
    assert "error" not in result, result.get("error")
    rows = result["rows"]
    assert sorted((r.offset, r.value) for r in rows) == sorted((o, v) for _, o, _, v in acked)
