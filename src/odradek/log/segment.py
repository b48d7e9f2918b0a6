"""One log segment: NNNNNNNNNNNNNNNNNNNN.log (named by base offset) plus its sparse indexes."""
from __future__ import annotations

import os
from bisect import bisect_left
from pathlib import Path
from typing import Callable, Iterator

from odradek.log.fd_cache import FdCache
from odradek.log.index import SparseIndex
from odradek.protocol.records import LOG_OVERHEAD, BatchHeader, Buffer, CorruptRecordError, check_crc, iter_batches

_CHUNK = 1 << 20  # bytes read at a time when scanning a segment
_OFFSET_INDEX = ">ii"  # relative offset, position
_TIME_INDEX = ">qi"  # timestamp, relative offset
MAX_RELATIVE_OFFSET = 2**31 - 1
NO_TIMESTAMP = -1


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def read_batches(pread: Callable[[int, int], bytes], start: int,
                 end: int) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The complete batches between file positions start and end, each with its bytes
    (header positions absolute), read about a megabyte at a time; stops at a partial tail."""
    pos, want = start, _CHUNK
    while pos < end:
        n = min(want, end - pos)
        buf = pread(n, pos)
        view = memoryview(buf)
        consumed = 0
        for header in iter_batches(view):
            yield (header._replace(position=pos + header.position),
                   view[header.position:header.position + header.size])
            consumed = header.position + header.size
        if consumed:
            pos, want = pos + consumed, _CHUNK
        elif len(buf) == n < end - pos and n >= LOG_OVERHEAD:  # a batch larger than the chunk
            want = LOG_OVERHEAD + int.from_bytes(buf[8:12], "big", signed=True)
        else:
            return  # partial batch at the end of the file (or the file shrank under a reader)


class Segment:
    """Batches appended at the end of one file; positions found through a sparse offset index.

    The file descriptor comes from a shared FdCache, so an idle segment costs no descriptor.
    Not thread-safe: the owning Log serialises access.
    """

    def __init__(self, directory: Path, base_offset: int, fds: FdCache,
                 index_interval_bytes: int, suffix: str = "") -> None:
        """suffix: "" for a segment of the log, ".cleaned" or ".swap" while the log cleaner
        writes or swaps one in (Kafka's CleanedFileSuffix, SwapFileSuffix)."""
        stem = directory / segment_name(base_offset)
        self.base_offset = base_offset
        self.path = Path(f"{stem}.log{suffix}")
        self.offset_index = SparseIndex(Path(f"{stem}.index{suffix}"), _OFFSET_INDEX)
        self.time_index = SparseIndex(Path(f"{stem}.timeindex{suffix}"), _TIME_INDEX)
        self.size = 0
        self.next_offset = base_offset  # one past the last offset stored here
        self.max_timestamp = NO_TIMESTAMP
        self._max_timestamp_offset = base_offset
        self._fds = fds
        self._interval = index_interval_bytes
        self._bytes_since_entry = 0

    @classmethod
    def create(cls, directory: Path, base_offset: int, fds: FdCache,
               index_interval_bytes: int, suffix: str = "") -> "Segment":
        """A new empty segment; leftovers of an older segment with this base are emptied."""
        seg = cls(directory, base_offset, fds, index_interval_bytes, suffix)
        with fds.use(seg.path) as fd:
            os.ftruncate(fd, 0)
        seg.offset_index.clear()
        seg.time_index.clear()
        return seg

    def recover(self, recovery_point: int) -> bool:
        """Load an existing segment. Data wholly below recovery_point was fsynced, so its
        indexes are trusted; anything else is CRC-checked and the file is cut at the first bad
        or partial batch. Returns True when bytes were cut."""
        self.size = self.path.stat().st_size
        if self.base_offset < recovery_point and self._load_indexes():
            end = self.offset_index.values[-1] if len(self.offset_index) else 0
            try:
                for header in self.scan(end):
                    self.next_offset = header.next_offset
                    end = header.position + header.size
            except CorruptRecordError:
                end = -1
            if end == self.size and self.next_offset <= recovery_point:
                return False
        return self._rebuild()

    def _load_indexes(self) -> bool:
        offsets = SparseIndex.load(self.offset_index.path, _OFFSET_INDEX, self.size)
        times = SparseIndex.load(self.time_index.path, _TIME_INDEX, MAX_RELATIVE_OFFSET)
        if offsets is None or times is None or (self.size and not len(times)):
            return False
        self.offset_index, self.time_index = offsets, times
        if len(times):
            self.max_timestamp = times.keys[-1]
            self._max_timestamp_offset = self.base_offset + times.values[-1]
        return True

    def _rebuild(self) -> bool:
        """Re-derive indexes, next offset and max timestamp from the data, cutting the file at
        the first incomplete, malformed or CRC-failing batch. Returns True when bytes were cut."""
        self.offset_index.clear()
        self.time_index.clear()
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._bytes_since_entry = 0
        valid_end = 0
        try:
            for header in self.scan(0, verify=True):
                self._track(header)
                valid_end = header.position + header.size
        except CorruptRecordError:
            pass
        if valid_end == self.size:
            return False
        with self._fds.use(self.path) as fd:
            os.ftruncate(fd, valid_end)
        self.size = valid_end
        return True

    def scan(self, start: int, verify: bool = False) -> Iterator[BatchHeader]:
        """Headers of the complete batches from file position start (positions are absolute).
        Stops at a partial tail; with verify, a CRC mismatch raises CorruptRecordError."""
        for header, data in self.scan_batches(start):
            if verify and not check_crc(data):
                raise CorruptRecordError(f"CRC mismatch at {header.position}")
            yield header

    def scan_batches(self, start: int) -> Iterator[tuple[BatchHeader, memoryview]]:
        """The complete batches from file position start, each with its bytes (valid until the
        next one is taken: they are a view of the chunk read)."""
        return read_batches(self._pread, start, self.size)

    def _pread(self, n: int, pos: int) -> bytes:
        with self._fds.use(self.path) as fd:
            return os.pread(fd, n, pos)

    def _track(self, header: BatchHeader) -> None:
        """Account for a batch now stored at header.position: sparse index entry, max ts."""
        if self._bytes_since_entry > self._interval:
            self.offset_index.append(header.base_offset - self.base_offset, header.position)
            self._add_time_entry()
            self._bytes_since_entry = 0
        self._bytes_since_entry += header.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self._max_timestamp_offset = header.base_offset
        self.next_offset = header.next_offset

    def _add_time_entry(self) -> None:
        """Record (largest timestamp so far, offset of its batch) if it grew since the last."""
        keys = self.time_index.keys
        if self.max_timestamp != NO_TIMESTAMP and (not keys or self.max_timestamp > keys[-1]):
            self.time_index.append(self.max_timestamp,
                                   self._max_timestamp_offset - self.base_offset)

    def append(self, data: Buffer, headers: list[BatchHeader]) -> None:
        """Write data (whose batch positions are relative to its start) at the end."""
        with self._fds.use(self.path) as fd:
            written = os.pwrite(fd, data, self.size)
        if written != len(data):
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        start = self.size
        for header in headers:
            self._track(header._replace(position=start + header.position))
        self.size = start + len(data)

    def find(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset >= offset, or None if there is none here."""
        i = self.offset_index.floor(offset - self.base_offset)
        start = self.offset_index.values[i] if i >= 0 else 0
        for header in self.scan(start):
            if header.last_offset >= offset:
                return header
        return None

    def start_position_for_timestamp(self, ts_ms: int) -> int:
        """A position before every batch with max timestamp >= ts_ms (via the time index)."""
        i = bisect_left(self.time_index.keys, ts_ms) - 1
        if i < 0:
            return 0
        j = self.offset_index.floor(self.time_index.values[i])
        return self.offset_index.values[j] if j >= 0 else 0

    def read(self, first: BatchHeader, max_bytes: int, max_offset: int | None) -> bytes:
        """Whole batches from first on: at least first, then more while they fit in max_bytes
        and start below max_offset."""
        n = min(max(max_bytes, first.size), self.size - first.position)
        buf = self._pread(n, first.position)
        end = 0
        for header in iter_batches(buf):
            if end and (header.position + header.size > max_bytes
                        or (max_offset is not None and header.base_offset >= max_offset)):
                break
            end = header.position + header.size
        return buf if end == len(buf) else buf[:end]

    def truncate_to(self, offset: int) -> None:
        """Drop the batch containing offset and everything after it. Offsets below `offset`
        that compaction removed stay used: the next offset is then `offset` itself (Kafka's
        truncateTo sets the log end to the target), so no replica reuses them."""
        header = self.find(offset)
        if header is None:
            self.next_offset = max(self.next_offset, offset)
            return
        with self._fds.use(self.path) as fd:
            os.ftruncate(fd, header.position)
        self.size = header.position
        rel = header.base_offset - self.base_offset
        self.offset_index.truncate(bisect_left(self.offset_index.keys, rel))
        self.time_index.truncate(bisect_left(self.time_index.values, rel))
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        for remaining in self.scan(0):
            self.next_offset = remaining.next_offset
            if remaining.max_timestamp > self.max_timestamp:
                self.max_timestamp = remaining.max_timestamp
                self._max_timestamp_offset = remaining.base_offset
        self._bytes_since_entry = self.size - (self.offset_index.values[-1]
                                               if len(self.offset_index) else 0)
        self.next_offset = max(self.next_offset, min(offset, header.base_offset))

    def flush(self) -> None:
        """fsync the data, then persist the index entries that describe it."""
        with self._fds.use(self.path) as fd:
            os.fsync(fd)
        self.persist_indexes(fsync=True)

    def persist_indexes(self, fsync: bool) -> None:
        """Write pending index entries, ending the time index with the segment's largest
        timestamp so retention can read it after a restart without scanning the data."""
        self._add_time_entry()
        self.offset_index.flush(fsync)
        self.time_index.flush(fsync)

    def close(self) -> None:
        self._fds.close(self.path)

    def change_file_suffixes(self, old: str, new: str) -> None:
        """Rename this segment's files from suffix `old` to `new` (Kafka's
        LogSegment.changeFileSuffixes); index files not written yet are only renamed in memory."""
        self.close()
        for holder in (self, self.offset_index, self.time_index):
            path = holder.path
            renamed = path.with_name(path.name.removesuffix(old) + new)
            if path.exists():
                os.replace(path, renamed)
            holder.path = renamed

    def delete(self) -> None:
        self.close()
        for path in (self.path, self.offset_index.path, self.time_index.path):
            path.unlink(missing_ok=True)
