"""A partition replica's durable log: a directory of segments plus three checkpoints.

With cleanup.policy=compact the log cleaner (log_cleaner.py) rewrites closed segments off the
event loop's thread and swaps them in with `replace_segments` under the log's lock, so a
compacted log has gaps in its offsets: reads, ListOffsets and follower appends step over them.
"""
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

from odradek.log.checkpoint import fsync_dir, read_offset, write_offset
from odradek.log.errors import CorruptRecordError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from odradek.log.fd_cache import FdCache
from odradek.log.leader_epoch import CHECKPOINT_NAME, LeaderEpochCache
from odradek.log.segment import MAX_RELATIVE_OFFSET, NO_TIMESTAMP, Segment
from odradek.protocol.records import BatchHeader, Buffer, set_base_offset, set_partition_leader_epoch, validate_batches

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_SWAP_FILE = re.compile(r"^(\d{20})\.log\.swap$")
CLEANED_SUFFIX = ".cleaned"  # Kafka's Log.CleanedFileSuffix: a cleaned segment being written
SWAP_SUFFIX = ".swap"  # Kafka's Log.SwapFileSuffix: a cleaned segment committed to replace others
_NEVER = 2**63 - 1


def _no_crash(step: str) -> None:
    pass


# Called after each file operation of a segment swap; the crash tests replace it with one that
# exits the process at a chosen step.
swap_step_hook: Callable[[str], None] = _no_crash


class LogCleaningAbortedError(Exception):
    """The segments a clean read were truncated, deleted or replaced meanwhile."""


@dataclass(frozen=True, slots=True)
class SegmentView:
    """A closed segment as the cleaner reads it, off the log's lock. fd is the cleaner's own
    read-only descriptor, opened under the lock: a segment deleted meanwhile stays readable
    through it, and no other thread can close it (the shared FdCache closes descriptors that
    another thread is reading when a segment is deleted)."""

    segment: Segment
    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int
    fd: int
    truncations: int  # the log's truncation count when the view was taken

    def pread(self, n: int, pos: int) -> bytes:
        return os.pread(self.fd, n, pos)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-log settings, with Kafka's broker defaults."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000  # roll a non-empty active segment this old
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1  # -1: unlimited
    flush_messages: int = _NEVER
    flush_ms: int = _NEVER
    index_interval_bytes: int = 4096
    # compaction (log_cleaner.py); time and size retention apply only with "delete" in the policy
    cleanup_policy: str = "delete"  # delete | compact | compact,delete
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _NEVER
    delete_retention_ms: int = 24 * 3600 * 1000  # tombstones live this long after first cleaned
    max_message_bytes: int = 1024 * 1024 + 12  # the largest batch a produce may append (Kafka's maxMessageSize)

    _TOPIC_KEYS = {
        "segment.bytes": ("segment_bytes", int),
        "segment.ms": ("segment_ms", int),
        "retention.ms": ("retention_ms", int),
        "retention.bytes": ("retention_bytes", int),
        "flush.messages": ("flush_messages", int),
        "flush.ms": ("flush_ms", int),
        "index.interval.bytes": ("index_interval_bytes", int),
        "cleanup.policy": ("cleanup_policy", str),
        "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float),
        "min.compaction.lag.ms": ("min_compaction_lag_ms", int),
        "max.compaction.lag.ms": ("max_compaction_lag_ms", int),
        "delete.retention.ms": ("delete_retention_ms", int),
        "max.message.bytes": ("max_message_bytes", int),
    }

    @classmethod
    def from_topic_config(cls, config: dict[str, str], default: "LogConfig") -> "LogConfig":
        """default overridden by the Kafka-named keys of a topic config; other keys ignored."""
        overrides = {field: kind(config[key]) for key, (field, kind) in cls._TOPIC_KEYS.items()
                     if key in config}
        return dataclasses.replace(default, **overrides)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")


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
        self._active_since_ms = now_ms()  # segment.ms counts from here (Kafka: the roll time)
        # lowest offset truncated to since the cleaner last asked (Kafka's
        # maybeTruncateCheckpoint): its checkpoint must not claim offsets rewritten since
        self._truncated_to: int | None = None
        self._truncations = 0  # a clean whose offset map predates one is aborted
        self.deleted = False
        self.leader_epoch_cache = LeaderEpochCache(directory / CHECKPOINT_NAME)

    @classmethod
    def open(cls, dir: Path, config: LogConfig, *, fds: FdCache | None = None,
             now_ms: Callable[[], int] = wall_clock_ms) -> "Log":
        """Open or create the log in dir, recovering everything past the recovery point."""
        dir.mkdir(parents=True, exist_ok=True)
        log = cls(dir, config, FdCache(64) if fds is None else fds, now_ms)
        log._load()
        return log

    def _load(self) -> None:
        self._complete_swaps()
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

    def _complete_swaps(self) -> None:
        """Finish or roll back a segment swap a crash interrupted (Kafka's
        Log.loadSegmentFiles and completeSwapOperations). `.cleaned` files were never
        committed: deleted, the old segments stay. A `.log.swap` file was complete and fsynced
        before its rename, which is the commit: the old segments in its offset range go, it
        takes its final name and its indexes are rebuilt (swap index files are dropped)."""
        names = [n for n in os.listdir(self.dir) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]
        for name in names:
            if not _SWAP_FILE.match(name):
                (self.dir / name).unlink()
        interval = self.config.index_interval_bytes
        for base in sorted(int(m.group(1)) for name in names if (m := _SWAP_FILE.match(name))):
            swap = Segment(self.dir, base, self._fds, interval, SWAP_SUFFIX)
            swap.size = swap.path.stat().st_size
            for header in swap.scan(0):
                swap.next_offset = header.next_offset
            for name in os.listdir(self.dir):
                m = _SEGMENT_FILE.match(name)
                if m and base <= int(m.group(1)) < max(swap.next_offset, base + 1):
                    Segment(self.dir, int(m.group(1)), self._fds, interval).delete()
            swap.change_file_suffixes(SWAP_SUFFIX, "")
            swap.offset_index.path.unlink(missing_ok=True)
            swap.time_index.path.unlink(missing_ok=True)
        if names:
            fsync_dir(self.dir)

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
        """Append batches whose offsets the leader assigned; they must start at or past the log
        end offset and increase. Past it is a gap the leader's cleaner made (Kafka's append
        refuses only a first offset below the log end). Epoch starts are learned from each
        batch's partitionLeaderEpoch."""
        headers = validate_batches(batches)
        with self._lock:
            expected = self.log_end_offset
            for h in headers:
                if h.base_offset < expected:
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
                            or last_offset - active.base_offset > MAX_RELATIVE_OFFSET
                            or self._now_ms() - self._active_since_ms >= self.config.segment_ms):
            active = self._roll(headers[0].base_offset)
        active.append(data, headers)
        self.log_end_offset = last_offset + 1
        self._unflushed_messages += sum(h.record_count for h in headers)
        if (self._unflushed_messages >= self.config.flush_messages
                or self._now_ms() - self._last_flush_ms >= self.config.flush_ms):
            self.flush()

    def roll(self) -> bool:
        """Close the active segment, if it holds anything, and start an empty one at the log
        end offset; True if it rolled. Retention only deletes closed segments, so a log that
        takes no more records (a partition marked for deletion, KIP-253) is rolled once for
        time and size retention to be able to empty it."""
        with self._lock:
            if not self._segments[-1].size:
                return False
            self._roll(self.log_end_offset)
            return True

    def _roll(self, base_offset: int) -> Segment:
        """Start a new active segment at base_offset (the log end offset, or past it when a
        follower steps over a compacted gap); the old one stops holding an fd."""
        old = self._segments[-1]
        old.persist_indexes(fsync=False)
        old.close()
        seg = Segment.create(self.dir, base_offset, self._fds, self.config.index_interval_bytes)
        self._add_segment(seg)
        self._dir_dirty = True
        self._active_since_ms = self._now_ms()
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

    def end_offset_for(self, leader_epoch: int) -> tuple[int, int]:
        """(largest known epoch <= leader_epoch, where it ends) from the leader epoch cache, the
        latest epoch ending at this log's end (Kafka's endOffsetForEpoch, OffsetsForLeaderEpoch)."""
        return self.leader_epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)

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
        parsed. The log's lock is held until the iteration ends (the cleaner must not swap
        segments under it), so run it to the end on the thread that appends and truncates."""
        for header, _data in self.iter_batches(from_offset):
            yield header

    def iter_batches(self, from_offset: int | None = None) -> Iterator[tuple[BatchHeader, memoryview]]:
        """``iter_batch_headers`` with each batch's bytes, valid until the next batch is taken
        (a transaction marker is read from them: reading each control batch again through
        ``read`` cost 90 us a marker, 0.35 s for a partition of 3,900 transactions, on the
        event loop of a broker opening its partitions)."""
        with self._lock:
            start = self.log_start_offset if from_offset is None else max(from_offset, self.log_start_offset)
            segments = self._segments[max(bisect_right(self._bases, start) - 1, 0):]
            for seg in segments:
                first = seg.find(start)
                if first is None:
                    continue
                yield from seg.scan_batches(first.position)

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

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and start empty at offset (Kafka's truncateFullyAndStartAt): a
        follower whose log ends below the leader's log start (DeleteRecords or retention ran
        while it was away) cannot fetch what it lacks, which is gone."""
        with self._lock:
            self._truncate_fully(offset)

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
        self._truncations += 1
        if self._truncated_to is None or self.log_end_offset < self._truncated_to:
            self._truncated_to = self.log_end_offset
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self._unflushed_messages = 0
        if self.recovery_point > self.log_end_offset:
            self.recovery_point = self.log_end_offset
            write_offset(self.dir / RECOVERY_POINT_FILE, self.recovery_point)

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest closed segments that are older than retention_ms (by their largest
        timestamp) or that keep the log above retention_bytes. Returns how many went.
        Only with "delete" in cleanup.policy: a compact-only log keeps every segment."""
        if not self.config.delete:
            return 0
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

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start up to offset (Kafka's maybeIncrementLogStartOffset: DeleteRecords
        on the leader, the leader's log start on a follower) and delete the segments wholly
        below it; the segment holding offset stays, its records below offset unreadable. The
        checkpoint is written at once, so a restart keeps the deletion. False if the log
        already starts there or later."""
        with self._lock:
            if offset <= self.log_start_offset:
                return False
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"log start {offset} past the log end offset {self.log_end_offset}")
            self.log_start_offset = offset
            count = bisect_right(self._bases, offset) - 1  # segments before the one holding offset
            if count > 0:
                self._delete_oldest(count)
            else:
                self.recovery_point = max(self.recovery_point, offset)
                write_offset(self.dir / LOG_START_FILE, offset)
                self.leader_epoch_cache.truncate_from_start(offset)
            return True

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
                fsync_dir(self.dir)
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

    # ---- compaction (log_cleaner.py) --------------------------------------------------------

    def segment_views(self, open_files: bool) -> list[SegmentView]:
        """Every segment, the active one last; with open_files each with a descriptor of the
        caller's own (close them with os.close), else fd -1. Taken under the lock, so each fd
        reads the file its view names."""
        with self._lock:
            views = []
            try:
                for seg in self._segments:
                    fd = os.open(seg.path, os.O_RDONLY) if open_files else -1
                    views.append(SegmentView(seg, seg.base_offset, seg.next_offset, seg.size,
                                             self._largest_timestamp(seg), fd, self._truncations))
            except OSError:
                for view in views:
                    if view.fd >= 0:
                        os.close(view.fd)
                raise
            return views

    def take_truncation_point(self) -> int | None:
        """The lowest log end offset a truncation left since the last call, then forgotten."""
        with self._lock:
            offset, self._truncated_to = self._truncated_to, None
            return offset

    def new_cleaned_segment(self, base_offset: int) -> Segment:
        """An empty `.cleaned` segment for the cleaner to fill (Kafka's createNewCleanedSegment)."""
        return Segment.create(self.dir, base_offset, self._fds, self.config.index_interval_bytes,
                              CLEANED_SUFFIX)

    def replace_segments(self, cleaned: Segment, old: list[SegmentView],
                         check: Callable[[], None] | None = None) -> None:
        """Swap the fsynced `.cleaned` segment in for the old ones (Kafka's
        Log.replaceSegments): rename it `.swap` (the commit point: from here a crash completes
        the swap on open), delete the old segments, newest first, then rename `.swap` to the
        final name (the first old segment's, as the cleaned segment keeps its base offset).
        Under the lock, so no read, append or truncation sees a half-done swap; raises
        LogCleaningAbortedError, having changed nothing, when the log was truncated since the
        cleaner looked at it (its offset map may name records that are gone: a record it
        superseded must stay) or the old segments were deleted or replaced. `check` runs
        first, under the lock, and may raise LogCleaningAbortedError itself (the cleaner checks
        the partition's transactions there: a rebuild of producer state reads the log under
        this lock, so it is never half done while the check runs)."""
        with self._lock:
            if check is not None:
                check()
            i = bisect_right(self._bases, old[0].base_offset) - 1
            current = self._segments[i:i + len(old)]
            if (i < 0 or len(current) != len(old) or i + len(old) >= len(self._segments)
                    or old[0].truncations != self._truncations
                    or any(seg is not view.segment or seg.size != view.size
                           for seg, view in zip(current, old))):
                raise LogCleaningAbortedError(f"{self.dir.name}: segments changed while cleaned")
            cleaned.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)  # the log file first
            fsync_dir(self.dir)
            swap_step_hook("swap")
            for seg in reversed(current):
                seg.delete()
                swap_step_hook("delete")
            cleaned.change_file_suffixes(SWAP_SUFFIX, "")
            swap_step_hook("rename")
            fsync_dir(self.dir)
            self._segments[i:i + len(old)] = [cleaned]
            self._bases[i:i + len(old)] = [cleaned.base_offset]

    def close(self) -> None:
        """Flush and release every descriptor; the Log must not be used afterwards."""
        with self._lock:
            self.flush()
            for seg in self._segments:
                seg.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory (StopReplica with delete)."""
        with self._lock:
            self.deleted = True
            for seg in self._segments:
                seg.close()
            self._segments.clear()
            self._bases.clear()
            shutil.rmtree(self.dir, ignore_errors=True)
