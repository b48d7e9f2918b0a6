"""Helpers for the log cleaner tests: keyed batches and what a log holds, record by record."""
from __future__ import annotations

from pathlib import Path

from odradek.broker.producer_state import AbortedTxn, ProducerStateManager
from odradek.common.metadata import TopicPartition
from odradek.log.log import Log, LogConfig
from odradek.log.log_cleaner import LogCleaner
from odradek.log.log_manager import LogManager
from odradek.protocol.records import (
    TRANSACTIONAL_FLAG,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
    iter_batches_with_markers,
)

TP = TopicPartition("compacted", 0)


def compact_config(**overrides: object) -> LogConfig:
    """Small segments (about four one-record batches each), every dirty byte cleanable."""
    settings: dict[str, object] = {"segment_bytes": 400, "cleanup_policy": "compact",
                                   "min_cleanable_dirty_ratio": 0.0}
    settings.update(overrides)
    return LogConfig(**settings)  # type: ignore[arg-type]


def put(log: Log, key: str, value: str | None, ts: int = 1000, **producer: int) -> int:
    """Append one record; its offset."""
    data = build_batch([(key.encode(), None if value is None else value.encode())],
                       timestamp_ms=ts, **producer)
    return log.append_as_leader(data, 0)[0]


def records(log: Log) -> list[tuple[int, str, str | None]]:
    """(offset, key, value) of every record in the log, in order."""
    out = []
    for view in log.segment_views(open_files=False):
        seg = view.segment
        for header in seg.scan(0):
            raw = seg._pread(header.size, header.position)
            for offset, _, key, value, _ in decode_records(raw):
                out.append((offset, key.decode(), None if value is None else value.decode()))
    return out


def batches(log: Log) -> list:
    """Every batch header in the log, in order."""
    return list(log.iter_batch_headers())


def latest_per_key(recs: list[tuple[int, str, str | None]]) -> dict[str, tuple[int, str | None]]:
    out: dict[str, tuple[int, str | None]] = {}
    for offset, key, value in recs:
        out[key] = (offset, value)
    return out


class Setup:
    """A LogManager in tmp_path holding TP, a cleaner over it and a settable high watermark.

    `transactions` says where the cleaner learns the last stable offset and the aborted
    transactions: "state", from a ProducerStateManager kept in step with the appends made
    through `append`, `put` and `end_txn` (the broker's way, through transaction_snapshot);
    "log" (or None), no callback: the cleaner reads them from the log."""

    def __init__(self, tmp_path: Path, clock, config: LogConfig, backoff_ms: int = 15000,
                 transactions: str | None = None) -> None:
        self.manager = LogManager(tmp_path / "data", config, now_ms=clock)
        self.log = self.manager.get_or_create(TP, config)
        self.high_watermark: int | None = None  # None: the log end offset
        self.producers = ProducerStateManager()
        self.cleaner = LogCleaner(self.manager, self._hw, backoff_ms=backoff_ms, now_ms=clock,
                                  transaction_state=self.transaction_state if transactions == "state" else None)

    def _hw(self, tp: TopicPartition) -> int:
        return self.log.log_end_offset if self.high_watermark is None else self.high_watermark

    def transaction_state(self, tp: TopicPartition) -> tuple[int, list[AbortedTxn]]:
        return self.producers.transaction_snapshot(self._hw(tp))

    def append(self, data: bytes) -> int:
        """Append one batch as leader and keep the producer state in step; its first offset."""
        first, last = self.log.append_as_leader(data, 0)
        ((header, marker),) = iter_batches_with_markers(data)
        self.producers.update(header, first, last, marker)
        return first

    def put(self, key: str, value: str | None, ts: int = 1000, txn: bool = False, **producer: int) -> int:
        """One record (transactional with txn=True, which needs a producer id); its offset."""
        data = build_batch([(key.encode(), None if value is None else value.encode())],
                           timestamp_ms=ts, attributes=TRANSACTIONAL_FLAG if txn else 0, **producer)
        return self.append(data)

    def end_txn(self, producer_id: int, producer_epoch: int, commit: bool, ts: int = 1000) -> int:
        """The COMMIT or ABORT marker of the producer's transaction; its offset."""
        return self.append(build_control_batch(producer_id, producer_epoch, commit, 0, timestamp_ms=ts))


def first_batch(data: bytes):
    return next(iter_batches(data))
