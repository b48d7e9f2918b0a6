"""Batch read and write through the `odradek` Spark data source against a real 3-broker cluster."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from pyspark.sql import functions as F
from spark_helpers import consume_all, create_topic, topic_name

from client_helpers import produce
from odradek.spark.kafka_io import DataLossError, OffsetRange, check_start, split_ranges
from odradek.spark.options import OptionError, parse_sink_options, parse_source_options

pytestmark = pytest.mark.integration


def test_batch_round_trip(spark, cluster) -> None:
    bs = cluster.bootstrap_servers
    src = create_topic(bs, topic_name("spark-src"), 3)
    dst = create_topic(bs, topic_name("spark-dst"), 2)
    records = [(f"k{i}".encode() if i % 7 else None, f"value-{i}".encode() * 3,
                [("h", f"{i}".encode()), ("n", None)] if i % 2 else None) for i in range(3000)]
    acked = produce(bs, src, records)

    df = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs)
          .option("subscribe", src).option("includeHeaders", "true").load())
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = df.collect()
    got = sorted((r.partition, r.offset, r.key, r.value) for r in rows)
    assert got == sorted((p, o, k, v) for p, o, k, v in acked)
    assert {r.topic for r in rows} == {src} and {r.timestampType for r in rows} == {0}
    headers = {r.value: [(h.key, h.value) for h in r.headers] for r in rows}
    for key, value, hdrs in records:
        assert headers[value] == [(k, v) for k, v in (hdrs or [])]

    # write back: key, value, headers, and a per-row topic column overriding the topic option
    (df.select("key", "value", "headers", F.lit(dst).alias("topic"))
       .write.format("odradek").option("kafka.bootstrap.servers", bs).option("topic", "not-used")
       .mode("append").save())
    out = consume_all(bs, dst)
    assert Counter((k, v, tuple(h)) for _, _, k, v, h in out) == \
        Counter((k, v, tuple(h or ())) for k, v, h in records)


def test_offset_options_and_min_partitions(spark, cluster) -> None:
    bs = cluster.bootstrap_servers
    src = create_topic(bs, topic_name("spark-range"), 2)
    acked = produce(bs, src, [(f"k{i}".encode(), f"v{i}".encode(), None) for i in range(1000)])
    per_part = Counter(p for p, *_ in acked)
    assert per_part[0] > 20 and per_part[1] > 0
    starting = json.dumps({src: {"0": 10, "1": -2}})
    ending = json.dumps({src: {"0": per_part[0] - 5, "1": -1}})
    df = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", src)
          .option("startingOffsets", starting).option("endingOffsets", ending)
          .option("minPartitions", "7").load())
    assert df.rdd.getNumPartitions() >= 7
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    want = sorted([(0, o) for o in range(10, per_part[0] - 5)] + [(1, o) for o in range(per_part[1])])
    assert got == want

    # assign names partitions directly; subscribePattern matches topic names
    one = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs)
           .option("assign", json.dumps({src: [1]})).load())
    assert one.count() == per_part[1]
    pat = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs)
           .option("subscribePattern", src.replace("-", ".")).load())
    assert pat.count() == 1000
    # a range with nothing in it is an empty DataFrame, not an error
    empty = (spark.read.format("odradek").option("kafka.bootstrap.servers", bs).option("subscribe", src)
             .option("startingOffsets", json.dumps({src: {"0": -1, "1": -1}})).load())
    assert empty.count() == 0


def test_option_errors() -> None:
    base = {"kafka.bootstrap.servers": "h:1"}
    with pytest.raises(OptionError, match="exactly one of"):
        parse_source_options(base, streaming=True)
    with pytest.raises(OptionError, match="exactly one of"):
        parse_source_options({**base, "subscribe": "a", "assign": '{"a":[0]}'}, streaming=True)
    with pytest.raises(OptionError, match="bootstrap.servers"):
        parse_source_options({"subscribe": "a"}, streaming=True)
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_source_options({**base, "subscribe": "a", "startingOffsets": "soon"}, streaming=True)
    with pytest.raises(OptionError, match="batch queries only"):
        parse_source_options({**base, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="maxOffsetsPerTrigger"):
        parse_source_options({**base, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, streaming=True)
    opts = parse_source_options({**base, "SUBSCRIBE": "a,b", "FailOnDataLoss": "false"}, streaming=False)
    assert opts.subscription.topics == ("a", "b") and opts.fail_on_data_loss is False
    assert opts.starting == "earliest" and opts.ending == "latest"
    assert parse_sink_options({**base, "topic": "t"}).exactly_once is True


def test_data_loss_rules() -> None:
    # offsets removed by retention: named in the error, or skipped with failOnDataLoss=false
    with pytest.raises(DataLossError, match="offsets 5..9 of t-0 are gone"):
        check_start(("t", 0), 5, 10, 20, fail_on_data_loss=True)
    assert check_start(("t", 0), 5, 10, 20, fail_on_data_loss=False) == 10
    with pytest.raises(DataLossError, match="past the high watermark"):
        check_start(("t", 0), 25, 10, 20, fail_on_data_loss=True)
    assert check_start(("t", 0), 15, 10, 20, fail_on_data_loss=True) == 15


def test_split_ranges() -> None:
    ranges = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 5, 15), OffsetRange("t", 2, 3, 3)]
    assert split_ranges(ranges, None) == ranges[:2]
    split = split_ranges(ranges, 10)
    assert len(split) == 10
    for p, lo, hi in ((0, 0, 90), (1, 5, 15)):
        mine = sorted((r.start, r.end) for r in split if r.partition == p)
        assert mine[0][0] == lo and mine[-1][1] == hi
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
