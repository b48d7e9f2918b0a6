"""The `odradek` Python data source (pyspark.sql.datasource): batch and streaming read and write.

Option names, defaults and the row schema are those of Spark's built-in Kafka source
(https://spark.apache.org/docs/latest/streaming/structured-streaming-kafka-integration.html),
so a Kafka job ports by changing `.format("kafka")` to `.format("odradek")`.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek.spark import options as o
from odradek.spark.commits import CommitMarkers, batch_key, task_key
from odradek.spark.kafka_io import Metadata, OffsetRange, Writer, check_start, read_range, split_ranges

log = logging.getLogger("odradek.spark")

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def read_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (headers only with includeHeaders=true, as in Spark)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


class OdradekDataSource(DataSource):
    """`spark.read/readStream/write/writeStream.format("odradek")`."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> StructType:
        opts = o.lower_keys(self.options)
        return read_schema(opts.get("includeheaders", "false").lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(o.parse_source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(o.parse_source_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return BatchWriter(o.parse_sink_options(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        opts = o.parse_sink_options(self.options)
        if opts.exactly_once:
            CommitMarkers(opts.kafka_conf, opts.marker_topic).ensure_topic()
        return StreamWriter(opts)


# -- reading -----------------------------------------------------------------------------------

def _read(opts: o.SourceOptions, schema: StructType, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    r: OffsetRange | None = partition.value
    if r is None:   # Spark plans one task with no value when there is nothing to read
        return iter(())
    return read_range(opts.kafka_conf, r, _arrow_schema(schema), fail_on_data_loss=opts.fail_on_data_loss,
                      poll_timeout_s=opts.poll_timeout_s, pause_dir=opts.testing_pause_dir)


class BatchReader(DataSourceReader):
    def __init__(self, opts: o.SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        with Metadata(opts.kafka_conf) as md:
            tps = opts.subscription.select(md.topics())
            wm = md.watermarks(tps)
        starts = o.resolve(opts.starting, tps, o.EARLIEST)
        ends = o.resolve(opts.ending, tps, o.LATEST)
        ranges = []
        for tp in tps:
            low, high = wm[tp]
            s = starts[tp]
            s = low if s == o.EARLIEST else high if s == o.LATEST else check_start(tp, s, low, high, opts.fail_on_data_loss)
            e = high if ends[tp] == o.LATEST else ends[tp]
            if e > high:
                raise ValueError(f"endingOffsets: {e} for {tp[0]}-{tp[1]} is past its high watermark {high}")
            if e < s:
                raise ValueError(f"{tp[0]}-{tp[1]}: ending offset {e} is before the starting offset {s}")
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        return [InputPartition(r) for r in split_ranges(ranges, opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, self.schema, partition)


def rate_limit(start: dict[tuple[str, int], int], latest: dict[tuple[str, int], int],
               max_rows: int) -> dict[tuple[str, int], int]:
    """Spark's maxOffsetsPerTrigger: share `max_rows` among partitions by their backlog."""
    backlog = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    out = {}
    for tp, size in backlog.items():
        out[tp] = start[tp] + int(size * max_rows / total)
    # integer shares may all round to 0: never stall, give the leftovers in partition order
    left = max_rows - sum(out[tp] - start[tp] for tp in out)
    for tp in sorted(out):
        if left <= 0:
            break
        extra = min(left, latest[tp] - out[tp])
        out[tp] += extra
        left -= extra
    return out


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets are Spark's Kafka JSON: {"topic": {"0": next offset}}.

    New partitions (partition expansion, or new topics matching subscribePattern) are read from
    their log start, as Spark's Kafka source does. Runs in one long-lived Python process on the
    driver, so the metadata connection is kept between calls."""

    def __init__(self, opts: o.SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._target: dict[tuple[str, int], int] | None = None
        self._md: Metadata | None = None

    def _metadata(self) -> Metadata:
        if self._md is None:
            self._md = Metadata(self.opts.kafka_conf)
        return self._md

    def _watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        md = self._metadata()
        return md.watermarks(self.opts.subscription.select(md.topics()))

    def initialOffset(self) -> dict:
        wm = self._watermarks()
        starts = o.resolve(self.opts.starting, list(wm), o.EARLIEST)
        out = {}
        for tp, (low, high) in wm.items():
            s = starts[tp]
            out[tp] = low if s == o.EARLIEST else high if s == o.LATEST else check_start(
                tp, s, low, high, self.opts.fail_on_data_loss)
        return o.to_json_offsets(out)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: high for tp, (_, high) in self._watermarks().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        wm = self._watermarks()
        begin = o.from_json_offsets(start)
        latest = {tp: high for tp, (_, high) in wm.items()}
        if self._target is not None:
            latest = {tp: min(high, self._target[tp]) for tp, high in latest.items() if tp in self._target}
        # partitions the start does not know start at their log start; never move backwards
        begin_all = {tp: begin.get(tp, wm[tp][0]) for tp in latest}
        latest = {tp: max(off, begin_all[tp]) for tp, off in latest.items()}
        for tp, off in begin.items():     # keep partitions that vanished from metadata
            latest.setdefault(tp, off)
            begin_all.setdefault(tp, off)
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin_all, latest, limit.max_rows)
        return o.to_json_offsets(latest)

    def reportLatestOffset(self) -> dict | None:
        return o.to_json_offsets({tp: high for tp, (_, high) in self._watermarks().items()})

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = o.from_json_offsets(start)
        stop = o.from_json_offsets(end)
        wm = self._watermarks()
        ranges = []
        for tp, e in sorted(stop.items()):
            low, high = wm.get(tp, (0, e))
            s = begin.get(tp, low)
            if s < low:   # removed (retention, DeleteRecords) since the offset was planned or checkpointed
                s = check_start(tp, s, low, high, self.opts.fail_on_data_loss)
            # `e` above the current high watermark is left to the reader: a new leader's high
            # watermark can lag for a moment; a truly truncated log shows up as out-of-range there
            if s < e:
                ranges.append(OffsetRange(tp[0], tp[1], s, e))
        return [InputPartition(r) for r in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, self.schema, partition)

    def commit(self, end: dict) -> None:
        pass  # Spark's checkpoint is the truth; nothing is stored in the cluster for the source

    def stop(self) -> None:
        if self._md is not None:
            self._md.close()
            self._md = None


# -- writing -----------------------------------------------------------------------------------

@dataclass
class WriteResult(WriterCommitMessage):
    rows: int = 0
    query_id: str | None = None
    batch_id: int | None = None
    partition_id: int | None = None
    skipped: bool = False
    ranges: dict = field(default_factory=dict)


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: o.SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        w = Writer(self.opts.kafka_conf, self.opts.topic)
        rows = w.write_arrow(iterator)
        w.flush()
        return WriteResult(rows=rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # every task flushed with acks=all before reporting success

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # Kafka has no undo: records of finished tasks stay (Spark's Kafka sink does the same)


class StreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch; exactly once per (query id, batch id) with exactlyOnce=true."""

    def __init__(self, opts: o.SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        batch_prop = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        batch_id = int(batch_prop) if batch_prop is not None else None
        pid = ctx.partitionId() if ctx else None
        eos = self.opts.exactly_once and query_id is not None and batch_id is not None
        if eos:
            assert query_id is not None and batch_id is not None and pid is not None  # eos: in a task
            markers = CommitMarkers(self.opts.kafka_conf, self.opts.marker_topic)
            done = markers.read(query_id)
            if batch_key(query_id, batch_id) in done or task_key(query_id, batch_id, pid) in done:
                skipped = sum(b.num_rows for b in iterator)
                log.warning("query %s batch %s partition %s already written; skipping %d rows",
                            query_id, batch_id, pid, skipped)
                return WriteResult(rows=0, query_id=query_id, batch_id=batch_id, partition_id=pid, skipped=True)
        w = Writer(self.opts.kafka_conf, self.opts.topic)
        rows = w.write_arrow(iterator)
        w.flush()
        ranges = {f"{t}-{p}": span for (t, p), span in w.ranges.items()}
        if eos:
            assert query_id is not None and batch_id is not None and pid is not None  # eos: in a task
            markers.write(task_key(query_id, batch_id, pid), {"rows": rows, "ranges": ranges})
        return WriteResult(rows=rows, query_id=query_id, batch_id=batch_id, partition_id=pid, ranges=ranges)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        results = [m for m in messages if isinstance(m, WriteResult)]
        query_ids = {m.query_id for m in results if m.query_id}
        if self.opts.exactly_once and query_ids:
            (query_id,) = query_ids
            markers = CommitMarkers(self.opts.kafka_conf, self.opts.marker_topic)
            if batch_key(query_id, batchId) not in markers.read(query_id):
                markers.write(batch_key(query_id, batchId), {
                    "rows": sum(m.rows for m in results),
                    "tasks": len(results),
                    "skipped_tasks": sum(m.skipped for m in results),
                })
        if self.opts.testing_fail_after_commit == batchId:
            raise RuntimeError(f"odradek.testing.failAfterCommit: crash after the sink commit of batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # finished tasks keep their markers, so a retry of the batch skips what they wrote
