"""A partition replica's durable log: a directory of segments plus three checkpoints."""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from odradek.log.checkpoint import read_offset, write_offset
from odradek.log.errors import CorruptRecordError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from odradek.log.fd_cache import FdCache
from odradek.log.leader_epoch import CHECKPOINT_NAME, LeaderEpochCache
from odradek.log.segment import MAX_RELATIVE_OFFSET, NO_TIMESTAMP, Segment
from odradek.protocol.records import (
    BatchHeader, Buffer, set_base_offset, set_partition_leader_epoch, validate_batches)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_NEVER = 2**63 - 1


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-log settings, with Kafka's broker defaults."""

    segment_bytes: int = 1 << 30
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: unlimited
    flush_messages: int = _NEVER
    flush_ms: int = _NEVER
    index_interval_bytes: int = 4096

    _TOPIC_KEYS = {
        "segment.bytes": "segment_bytes",
        "retention.ms": "retention_ms",
        "retention.bytes": "retention_bytes",
        "flush.messages": "flush_messages",
        "flush.ms": "flush_ms",
        "index.interval.bytes": "index_interval_bytes",
    }

    @classmethod
    def from_topic_config(cls, config: dict[str, str], default: "LogConfig") -> "LogConfig":
        """default overridden by the Kafka-named keys of a topic config; other keys ignored."""
        overrides = {field: int(config[key]) for key, field in cls._TOPIC_KEYS.items()
                     if key in config}
        return dataclasses.replace(default, **overrides)


class Log:
    """Offsets are assigned here (leader) or checked here (follower); batches stay opaque.

    Durability: data is fsynced by flush() (driven by flush_messages / flush_ms or called
    explicitly), after which the recovery point moves to the log end offset; on open only
    segments at or past the recovery point are CRC-checked and a torn tail is cut off.
    """

    def __init__(self, directory: Path, config: LogConfig, fds: FdCache,
                 now_ms: Callable[[], int]) -> None:
        self.dir = directory
        self.config = config
        self._fds = fds
        self._now_ms = now_ms
        self._lock = threading.RLock()
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms()
        self._dir_dirty = False
        self.leader_epoch_cache = LeaderEpochCache(directory / CHECKPOINT_NAME,
                                                   lambda: self.log_end_offset)

    @classmethod
    def open(cls, dir: Path, config: LogConfig, *, fds: FdCache | None = None,
             now_ms: Callable[[], int] = wall_clock_ms) -> "Log":
        """Open or create the log in dir, recovering everything past the recovery point."""
        dir.mkdir(parents=True, exist_ok=True)
        log = cls(dir, config, FdCache(64) if fds is None else fds, now_ms)
        log._load()
        return log

    def _load(self) -> None:
        bases = sorted(int(m.group(1)) for name in os.listdir(self.dir)
                       if (m := _SEGMENT_FILE.match(name)))
        recovery_point = read_offset(self.dir / RECOVERY_POINT_FILE) or 0
        interval = self.config.index_interval_bytes
        for i, base in enumerate(bases):
            seg = Segment(self.dir, base, self._fds, interval)
            self._add_segment(seg)
            if seg.recover(recovery_point):
                for later in bases[i + 1:]:
                    Segment(self.dir, later, self._fds, interval).delete()
                break
        start = read_offset(self.dir / LOG_START_FILE) or 0
        if not self._segments:
            self._add_segment(Segment.create(self.dir, start, self._fds, interval))
        self.log_start_offset = max(start, self._segments[0].base_offset)
        self.log_end_offset = self._segments[-1].next_offset
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    def _add_segment(self, seg: Segment) -> None:
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    # ---- appends -------------------------------------------------------------------------

    def append_as_leader(self, batches: Buffer, leader_epoch: int) -> tuple[int, int]:
        """Assign offsets from the log end offset and stamp leader_epoch into a copy of
        batches, then append it. Returns (first offset, last offset). Raises
        CorruptRecordError, having written nothing, if any batch is malformed."""
        headers = validate_batches(batches)
        for h in headers:  # a producer's batch numbers its records 0..count-1 (Kafka's LogValidator)
            if h.last_offset_delta + 1 != h.record_count:
                raise CorruptRecordError(f"batch at {h.position} has {h.record_count} records but "
                                         f"lastOffsetDelta {h.last_offset_delta}")
        data = bytearray(batches)
        with self._lock:
            first = offset = self.log_end_offset
            for i, h in enumerate(headers):
                set_base_offset(data, h.position, offset)
                set_partition_leader_epoch(data, h.position, leader_epoch)
                headers[i] = h._replace(base_offset=offset, partition_leader_epoch=leader_epoch)
                offset += h.last_offset_delta + 1
            latest = self.leader_epoch_cache.latest_epoch()
            if latest is None or leader_epoch > latest:
                self.leader_epoch_cache.assign(leader_epoch, first)
            self._append(data, headers)
            return first, offset - 1

    def append_as_follower(self, batches: Buffer) -> None:
        """Append batches whose offsets the leader assigned; they must start at the log end
        offset and increase. Epoch starts are learned from each batch's partitionLeaderEpoch."""
        headers = validate_batches(batches)
        with self._lock:
            expected = self.log_end_offset
            for h in headers:
                if h.base_offset < expected or (h is headers[0] and h.base_offset != expected):
                    raise UnexpectedAppendOffsetError(
                        f"batch at offset {h.base_offset}, expected {expected}")
                expected = h.next_offset
            cache = self.leader_epoch_cache
            for h in headers:
                latest = cache.latest_epoch()
                if h.partition_leader_epoch >= 0 and (latest is None
                                                     or h.partition_leader_epoch > latest):
                    cache.assign(h.partition_leader_epoch, h.base_offset)
            self._append(batches, headers)

    def _append(self, data: Buffer, headers: list[BatchHeader]) -> None:
        last_offset = headers[-1].last_offset
        active = self._segments[-1]
        if active.size and (active.size + len(data) > self.config.segment_bytes
                            or last_offset - active.base_offset > MAX_RELATIVE_OFFSET):
            active = self._roll()
        active.append(data, headers)
        self.log_end_offset = last_offset + 1
        self._unflushed_messages += sum(h.record_count for h in headers)
        if (self._unflushed_messages >= self.config.flush_messages
                or self._now_ms() - self._last_flush_ms >= self.config.flush_ms):
            self.flush()

    def _roll(self) -> Segment:
        """Start a new active segment at the log end offset; the old one stops holding an fd."""
        old = self._segments[-1]
        old.persist_indexes(fsync=False)
        old.close()
        seg = Segment.create(self.dir, self.log_end_offset, self._fds,
                             self.config.index_interval_bytes)
        self._add_segment(seg)
        self._dir_dirty = True
        return seg

    # ---- reads ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one containing offset: at least one batch even if it is
        larger than max_bytes, none starting at or past max_offset, all from one segment."""
        with self._lock:
            if offset < self.log_start_offset or offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} not in [{self.log_start_offset}, {self.log_end_offset}]")
            if offset == self.log_end_offset or (max_offset is not None and offset >= max_offset):
                return b""
            for seg in self._segments[max(bisect_right(self._bases, offset) - 1, 0):]:
                header = seg.find(offset)
                if header is None:
                    continue
                if max_offset is not None and header.base_offset >= max_offset:
                    return b""
                return seg.read(header, max_bytes, max_offset)
            return b""

    def offset_for_timestamp(self, ts_ms: int) -> int | None:
        """Base offset of the first batch whose max timestamp >= ts_ms (ListOffsets)."""
        with self._lock:
            for seg in self._segments:
                if seg.max_timestamp < ts_ms:
                    continue
                for header in seg.scan(seg.start_position_for_timestamp(ts_ms)):
                    if header.max_timestamp >= ts_ms:
                        return max(header.base_offset, self.log_start_offset)
            return None

    def iter_batch_headers(self, from_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the batches holding offsets >= from_offset (default: the log start), in
        offset order, with the offsets the log stored; positions are within their segment.
        For rebuilding state kept beside the log (producer sequences), so only headers are
        parsed. Iterate on the thread that appends and truncates: segments are not locked."""
        with self._lock:
            start = self.log_start_offset if from_offset is None else max(from_offset, self.log_start_offset)
            segments = self._segments[max(bisect_right(self._bases, start) - 1, 0):]
        for seg in segments:
            first = seg.find(start)
            if first is None:
                continue
            yield from seg.scan(first.position)

    # ---- truncation, retention -----------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= offset (a batch straddling offset goes too,
        as in Kafka), so the log end offset becomes <= offset."""
        with self._lock:
            if offset >= self.log_end_offset:
                return
            if offset < self.log_start_offset:
                self._truncate_fully(offset)
                return
            keep = bisect_right(self._bases, offset) - 1
            if keep > 0 and self._segments[keep].base_offset == offset:
                keep -= 1
            for seg in self._segments[keep + 1:]:
                seg.delete()
            del self._segments[keep + 1:], self._bases[keep + 1:]
            active = self._segments[-1]
            active.truncate_to(offset)
            self.log_end_offset = active.next_offset
            self._after_truncation()

    def _truncate_fully(self, offset: int) -> None:
        for seg in self._segments:
            seg.delete()
        self._segments.clear()
        self._bases.clear()
        self._add_segment(Segment.create(self.dir, offset, self._fds,
                                         self.config.index_interval_bytes))
        self.log_start_offset = self.log_end_offset = offset
        self._dir_dirty = True
        write_offset(self.dir / LOG_START_FILE, offset)
        self.leader_epoch_cache.clear()
        self._after_truncation()

    def _after_truncation(self) -> None:
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self._unflushed_messages = 0
        if self.recovery_point > self.log_end_offset:
            self.recovery_point = self.log_end_offset
            write_offset(self.dir / RECOVERY_POINT_FILE, self.recovery_point)

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest closed segments that are older than retention_ms (by their largest
        timestamp) or that keep the log above retention_bytes. Returns how many went."""
        with self._lock:
            closed = self._segments[:-1]
            count = 0
            if self.config.retention_ms >= 0:
                while count < len(closed) and (
                        now_ms - self._largest_timestamp(closed[count])
                        > self.config.retention_ms):
                    count += 1
            if self.config.retention_bytes >= 0:
                excess = sum(s.size for s in self._segments[count:]) - self.config.retention_bytes
                while count < len(closed) and excess - closed[count].size >= 0:
                    excess -= closed[count].size
                    count += 1
            if count:
                self._delete_oldest(count)
            return count

    @staticmethod
    def _largest_timestamp(seg: Segment) -> int:
        """Kafka falls back to the file's modification time for batches without timestamps."""
        if seg.max_timestamp != NO_TIMESTAMP:
            return seg.max_timestamp
        return seg.path.stat().st_mtime_ns // 1_000_000

    def _delete_oldest(self, count: int) -> None:
        for seg in self._segments[:count]:
            seg.delete()
        del self._segments[:count], self._bases[:count]
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        write_offset(self.dir / LOG_START_FILE, self.log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    # ---- durability, lifecycle -------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment written since the recovery point, then checkpoint it."""
        with self._lock:
            self._last_flush_ms = self._now_ms()
            if self.recovery_point == self.log_end_offset and not self._dir_dirty:
                return
            first = max(bisect_right(self._bases, self.recovery_point) - 1, 0)
            for seg in self._segments[first:]:
                seg.flush()
            if self._dir_dirty:
                dir_fd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
                self._dir_dirty = False
            self.recovery_point = self.log_end_offset
            self._unflushed_messages = 0
            write_offset(self.dir / RECOVERY_POINT_FILE, self.recovery_point)

    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(seg.size for seg in self._segments)

    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._bases)

    def close(self) -> None:
        """Flush and release every descriptor; the Log must not be used afterwards."""
        with self._lock:
            self.flush()
            for seg in self._segments:
                seg.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory (StopReplica with delete)."""
        with self._lock:
            for seg in self._segments:
                seg.close()
            self._segments.clear()
            self._bases.clear()
            shutil.rmtree(self.dir, ignore_errors=True)
