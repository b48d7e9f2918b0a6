"""Helpers for the log cleaner tests: keyed batches and what a log holds, record by record."""
from __future__ import annotations

from pathlib import Path

from odradek.common.metadata import TopicPartition
from odradek.log.log import Log, LogConfig
from odradek.log.log_cleaner import LogCleaner
from odradek.log.log_manager import LogManager
from odradek.protocol.records import build_batch, decode_records, iter_batches

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
    """A LogManager in tmp_path holding TP, a cleaner over it and a settable high watermark."""

    def __init__(self, tmp_path: Path, clock, config: LogConfig, backoff_ms: int = 15000) -> None:
        self.manager = LogManager(tmp_path / "data", config, now_ms=clock)
        self.log = self.manager.get_or_create(TP, config)
        self.high_watermark: int | None = None  # None: the log end offset
        self.cleaner = LogCleaner(self.manager, self._hw, backoff_ms=backoff_ms, now_ms=clock)

    def _hw(self, tp: TopicPartition) -> int:
        return self.log.log_end_offset if self.high_watermark is None else self.high_watermark


def first_batch(data: bytes):
    return next(iter_batches(data))
