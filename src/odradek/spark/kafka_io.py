"""Kafka-protocol I/O for the Spark data source: metadata, offset ranges, Arrow reads, writes.

Only confluent-kafka (librdkafka) calls, so the same code reads and writes odradek and Apache
Kafka. Nothing here imports pyspark: Spark's Python workers run these functions on pickled
arguments, and the benchmark and tests call them directly too.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from odradek.client.librdkafka_log import client_logger

log = logging.getLogger("odradek.spark")

READER_GROUP = "odradek-spark-reader"  # librdkafka wants a group.id; assign() never joins it
ARROW_BATCH_RECORDS = 20_000


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (retention, or a truncated log); see failOnDataLoss."""


def consumer_conf(kafka_conf: Mapping[str, str]) -> dict[str, object]:
    conf: dict[str, object] = {
        "group.id": READER_GROUP,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",  # an out-of-range offset is reported, never silently skipped
        "enable.partition.eof": False,
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 5000,
        "logger": client_logger("odradek.spark.librdkafka"),
    }
    conf.update(kafka_conf)
    return conf


def producer_conf(kafka_conf: Mapping[str, str]) -> dict[str, object]:
    conf: dict[str, object] = {
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 10,
        "batch.size": 1_000_000,
        "message.timeout.ms": 120_000,
        "logger": client_logger("odradek.spark.librdkafka"),
    }
    conf.update(kafka_conf)
    return conf


# -- metadata and offsets (driver side) --------------------------------------------------------

class Metadata:
    """Topic partitions and watermarks of a cluster, through one short-lived consumer."""

    def __init__(self, kafka_conf: Mapping[str, str], timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self._consumer = Consumer(consumer_conf(kafka_conf))

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> "Metadata":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topics(self) -> dict[str, list[int]]:
        """{topic: [partition ids]}, retried while the cluster elects leaders or starts up."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                md = self._consumer.list_topics(timeout=min(10.0, self.timeout_s))
                return {name: sorted(t.partitions) for name, t in md.topics.items() if t.error is None}
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def watermarks(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """{(topic, partition): (log start offset, high watermark)}; retried across leader changes."""
        out = {}
        for topic, partition in tps:
            deadline = time.monotonic() + self.timeout_s
            while True:
                try:
                    low, high = self._consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=min(10.0, self.timeout_s), cached=False)
                    out[(topic, partition)] = (low, high)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        return out


def check_start(tp: tuple[str, int], start: int, low: int, high: int, fail_on_data_loss: bool) -> int:
    """The offset to start reading `tp` from, given its (log start, high watermark).

    Offsets below the log start were removed (retention, DeleteRecords): an error with failOnDataLoss=true
    (naming the lost range), else reading resumes at the log start. A start past the high
    watermark means the log was truncated below what was already read (an unclean leader
    election): again data loss."""
    topic, partition = tp
    if start < low:
        msg = (f"offsets {start}..{low - 1} of {topic}-{partition} are gone (removed by retention or "
               f"DeleteRecords; the log now starts at {low})")
        if fail_on_data_loss:
            raise DataLossError(msg + ". Set failOnDataLoss=false to skip them.")
        log.warning("%s; skipping them (failOnDataLoss=false)", msg)
        return low
    if start > high:
        msg = (f"{topic}-{partition}: starting offset {start} is past the high watermark {high} "
               "(the log was truncated, e.g. by an unclean leader election)")
        if fail_on_data_loss:
            raise DataLossError(msg + ". Set failOnDataLoss=false to continue from the high watermark.")
        log.warning("%s; continuing from %d", msg, high)
        return high
    return start


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int   # first offset to read
    end: int     # exclusive; never above the high watermark seen when the range was planned

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: with minPartitions above the number of ranges, split
    the big ranges into pieces proportional to their size; never more pieces than offsets."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, round(r.size / total * min_partitions)))
        step, extra = divmod(r.size, parts)
        start = r.start
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


# -- reading (executor side) -------------------------------------------------------------------

def _timestamps(ms: list[int]) -> pa.Array:
    arr = pa.array(ms, pa.int64())
    return pc.multiply(arr, 1000).cast(pa.timestamp("us", tz="UTC"))


def _batch(schema: pa.Schema, r: OffsetRange, keys: list, values: list, offsets: list,
           ts: list, ts_types: list, headers: list | None) -> pa.RecordBatch:
    n = len(offsets)
    cols = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([r.topic] * n, pa.string()),
        pa.array([r.partition] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        _timestamps(ts),
        pa.array(ts_types, pa.int32()),
    ]
    if headers is not None:
        cols.append(pa.array(headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def read_range(kafka_conf: Mapping[str, str], r: OffsetRange, schema: pa.Schema, *,
               fail_on_data_loss: bool = True, poll_timeout_s: float = 180.0,
               stall_s: float = 10.0, batch_records: int = ARROW_BATCH_RECORDS,
               pause_dir: str | None = None) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of offsets [r.start, r.end) of one partition, in offset order.

    The end never exceeds the high watermark at planning time, and the broker serves consumers
    nothing above the high watermark, so only committed (fully replicated) records are read.
    librdkafka follows leader changes by itself (NOT_LEADER -> metadata refresh -> new leader);
    if the partition still makes no progress for `stall_s`, the consumer is closed and a new one
    (new connections, fresh metadata) resumes at the next offset. No progress for
    `poll_timeout_s` in total is an error.
    """
    include_headers = "headers" in schema.names
    if pause_dir is not None:
        batch_records = min(batch_records, 500)  # pause early, with most of the range unread
    nxt = r.start
    consumer: Consumer | None = None
    last_progress = time.monotonic()
    last_restart = last_progress
    paused = pause_dir is None
    keys: list = []
    values: list = []
    offsets: list[int] = []
    ts: list[int] = []
    ts_types: list[int] = []
    headers: list | None = [] if include_headers else None

    def open_consumer(at: int) -> Consumer:
        c = Consumer(consumer_conf(kafka_conf))
        c.assign([TopicPartition(r.topic, r.partition, at)])
        return c

    try:
        consumer = open_consumer(nxt)
        while nxt < r.end:
            msgs = consumer.consume(num_messages=min(10_000, batch_records, r.end - nxt), timeout=0.5)
            progressed = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    nxt = _on_error(kafka_conf, consumer, r, nxt, err, fail_on_data_loss)
                    if nxt >= r.end:
                        break
                    continue
                off = m.offset()
                assert off is not None  # set on every message without an error
                if off < nxt:
                    continue
                if off >= r.end:
                    nxt = r.end
                    break
                keys.append(m.key())
                values.append(m.value())
                offsets.append(off)
                tstype, t = m.timestamp()
                ts.append(t)
                ts_types.append(tstype - 1)  # librdkafka: 1 create, 2 log-append; Spark: 0, 1
                if headers is not None:
                    # a consumed message's headers are (key, value) pairs; confluent_kafka's type
                    # also allows the dict produce() takes
                    headers.append([{"key": k, "value": v} for k, v in (m.headers() or ())])  # type: ignore[str-unpack]
                nxt = off + 1
                progressed = True
            now = time.monotonic()
            if progressed:
                last_progress = last_restart = now
            elif nxt < r.end:
                # nothing new: the position may have passed `end` over gaps (compaction, txn markers)
                pos = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
                if pos >= r.end:
                    nxt = r.end
                elif now - last_progress > poll_timeout_s:
                    raise TimeoutError(f"{r.topic}-{r.partition}: no progress at offset {nxt} for "
                                       f"{poll_timeout_s:g} s (kafkaConsumer.pollTimeoutMs); "
                                       f"{_watermarks_text(kafka_conf, r)}, consumer position {pos}")
                elif now - last_restart > stall_s:
                    log.warning("%s-%d: stalled at offset %d for %.0f s; reconnecting with fresh metadata",
                                r.topic, r.partition, nxt, now - last_progress)
                    consumer.close()
                    consumer = None
                    consumer = open_consumer(nxt)
                    last_restart = now
            if len(offsets) >= batch_records or (offsets and nxt >= r.end):
                yield _batch(schema, r, keys, values, offsets, ts, ts_types, headers)
                keys, values, offsets, ts, ts_types = [], [], [], [], []
                headers = [] if include_headers else None
                if pause_dir is not None and not paused:
                    paused = True
                    _testing_pause(pause_dir, r)
    finally:
        if consumer is not None:
            consumer.close()


def _watermarks_text(kafka_conf: Mapping[str, str], r: OffsetRange) -> str:
    """The partition's watermarks for an error message, or why they could not be read."""
    try:
        with Metadata(kafka_conf) as md:
            low, high = md.watermarks([(r.topic, r.partition)])[(r.topic, r.partition)]
    except Exception as exc:  # noqa: BLE001 - a diagnostic must not hide the real error
        return f"watermarks unavailable ({exc})"
    return f"log start {low}, high watermark {high}, range [{r.start}, {r.end})"


def _on_error(kafka_conf: Mapping[str, str], consumer: Consumer, r: OffsetRange, nxt: int,
              err: KafkaError, fail_on_data_loss: bool) -> int:
    """Handle a consumer error event; returns the next offset to read."""
    if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        with Metadata(kafka_conf) as md:
            low, high = md.watermarks([(r.topic, r.partition)])[(r.topic, r.partition)]
        if low <= nxt <= high:   # a transient view of an out-of-date leader: just retry
            _reposition(consumer, r, nxt)
            return nxt
        new = check_start((r.topic, r.partition), nxt, low, high, fail_on_data_loss)
        new = min(new, r.end)
        if new < r.end:
            _reposition(consumer, r, new)
        return new
    if err.fatal():
        raise KafkaException(err)
    log.info("%s-%d: consumer event at offset %d: %s (retrying)", r.topic, r.partition, nxt, err)
    return nxt


def _reposition(consumer: Consumer, r: OffsetRange, offset: int) -> None:
    """Move the consumer to `offset` of the range's partition. librdkafka refuses a seek while the
    partition is still resetting from an earlier out-of-range answer (_STATE, "Erroneous
    state": seen when retention moved the log start twice during one read); assigning the
    partition afresh at the offset works in any state."""
    tp = TopicPartition(r.topic, r.partition, offset)
    try:
        consumer.seek(tp)
    except KafkaException:
        consumer.assign([tp])


def _testing_pause(pause_dir: str, r: OffsetRange) -> None:
    """Tests only (option odradek.testing.pauseDir): after the first Arrow batch of a range, say so
    in `<dir>/started-<topic>-<partition>` and wait for `<dir>/resume`, so a test can kill the
    partition's leader while the read is in flight."""
    open(os.path.join(pause_dir, f"started-{r.topic}-{r.partition}"), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(pause_dir, "resume")) and time.monotonic() < deadline:
        time.sleep(0.05)


# -- writing -----------------------------------------------------------------------------------

class Writer:
    """A producer with acks=all and idempotence that raises on the first failed delivery."""

    def __init__(self, kafka_conf: Mapping[str, str], default_topic: str | None) -> None:
        self.producer = Producer(producer_conf(kafka_conf))
        self.default_topic = default_topic
        self.errors: list[str] = []
        self.delivered = 0
        self.ranges: dict[tuple[str, int], list[int]] = {}  # (topic, partition) -> [first, last]

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        self.delivered += 1
        key = (msg.topic(), msg.partition())  # type: ignore[attr-defined]
        off = msg.offset()  # type: ignore[attr-defined]
        span = self.ranges.get(key)
        if span is None:
            self.ranges[key] = [off, off]
        else:
            span[0] = min(span[0], off)
            span[1] = max(span[1], off)

    def produce(self, topic: str, value: object, key: object = None, partition: int | None = None,
                headers: list | None = None) -> None:
        kwargs: dict[str, Any] = {"value": value, "key": key, "on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                self.producer.produce(topic, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.1)

    def write_arrow(self, batches: Iterable[pa.RecordBatch]) -> int:
        """Produce every row of Arrow batches with columns key, value, and optionally topic,
        partition, headers (Spark's Kafka sink columns); returns the number of rows."""
        rows = 0
        for batch in batches:
            names = batch.schema.names
            if "value" not in names:
                raise ValueError("the DataFrame to write needs a value column")
            n = batch.num_rows
            values = batch.column("value").to_pylist()
            keys = batch.column("key").to_pylist() if "key" in names else [None] * n
            topics = batch.column("topic").to_pylist() if "topic" in names else [None] * n
            parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
            hdrs = batch.column("headers").to_pylist() if "headers" in names else [None] * n
            for i in range(n):
                topic = topics[i] or self.default_topic
                if topic is None:
                    raise ValueError("no topic: set the topic option or give the rows a topic column")
                row_headers = hdrs[i]
                h = [(x["key"], x["value"]) for x in row_headers] if row_headers else None
                self.produce(topic, values[i], keys[i], parts[i], h)
            rows += n
            self.producer.poll(0)
            self.check()
        return rows

    def check(self) -> None:
        if self.errors:
            raise KafkaException(f"{len(self.errors)} record(s) not delivered; first: {self.errors[0]}")

    def flush(self, timeout_s: float = 180.0) -> None:
        left = self.producer.flush(timeout_s)
        self.check()
        if left:
            raise KafkaException(f"{left} record(s) still undelivered after {timeout_s:g} s")
