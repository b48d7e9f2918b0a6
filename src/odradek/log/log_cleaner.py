"""Log compaction: Kafka's LogCleaner, LogCleanerManager, Cleaner and SkimpyOffsetMap.

A log with cleanup.policy=compact is split at its first dirty offset (the cleaner checkpoint,
`cleaner-offset-checkpoint` in the data directory) into a clean head, already compacted, and a
dirty tail. One cleaner thread per broker picks the log with the largest dirty ratio (dirty
bytes / all bytes of its closed segments) over its min.cleanable.dirty.ratio, maps every key of
the dirty section to its last offset, then rewrites every segment from the log start to the end
of that section keeping only the last record of each key, and moves the checkpoint up.

What is never cleaned (Kafka's `cleanableOffsets` / firstUncleanableDirtyOffset): the active
segment, the segment holding the last stable offset (the high watermark, or the first offset of
a transaction still open or whose marker is not yet below the high watermark) and everything
after it, and segments with a record younger than min.compaction.lag.ms. A consumer therefore
never loses a record it could not yet read, and an open transaction's records are never
touched. max.compaction.lag.ms makes a log cleanable whatever its ratio once a dirty segment is
older than that (measured on the segment's newest timestamp, so up to one segment's time span
later than Kafka, which reads the first batch's).

How batches are rewritten (Kafka's MemoryRecords.filterTo): a batch whose records all stay is
copied byte for byte; otherwise it is rebuilt with the same base and last offset, producer id,
epoch and base sequence, leader epoch, attributes and codec (gzip; a batch in a codec this
process lacks is kept whole and logged once). A batch left without records is dropped, except
the last batch of each idempotent producer in the log and the batch just before the first
uncleanable offset, which stay as empty batches as in Kafka: the producer's epoch and last
sequence survive for producer_state.py, and a follower or restart finds the same offsets.
Tombstones (null values) stay until delete.retention.ms after their batch was first cleaned
(KIP-534: the cleaner stores that delete horizon in the batch's base timestamp and sets
attribute bit 6); a later clean past the horizon removes them.

Transactions (Kafka's CleanedTransactionMetadata). Everything cleaned is below the last stable
offset, so every transaction there is decided. The aborted ones, (producer id, first offset,
offset of the ABORT marker) from the partition's producer state, are not mapped, so an aborted
value never shadows the committed value of its key (on `__consumer_offsets` that would lose a
committed offset), and their batches go whole (as empty batches when one is its producer's last
or lies just below the first uncleanable offset, as above). Committed transactional records are
compacted like any others. A transaction marker (control batch) stays while any batch of its
transaction is left in the log, an empty one kept for its producer included (so a rebuild of
producer state never takes that batch for an open transaction); once a clean finds none left
(every record superseded, or aborted), the marker gets a delete horizon, delete.retention.ms
ahead, as a tombstone does, and the first clean past it removes the marker (Kafka's rule): a
consumer that read the transaction's records before they were cleaned away still finds the
marker that decides them, and a compacted topic written by transactions (Kafka Streams'
exactly-once changelogs) does not keep an 80-byte batch per transaction for ever. The clean
pass reads the log from its start, so it has seen every batch of a transaction before its
marker.

Threading. The broker's appends, reads, truncations, retention and deletions run on its event
loop's thread under each Log's lock; the cleaner thread takes that lock only to snapshot the
segment list (opening descriptors of its own, so a segment deleted meanwhile stays readable and
no other thread closes them under it) and to swap cleaned segments in (`Log.replace_segments`,
renames and unlinks: milliseconds). Everything else, reading, mapping, filtering, writing and
fsyncing the `.cleaned` files, holds no lock. Kafka's LogCleanerManager makes truncation and
deletion wait for a running clean (abortAndPauseCleaning); here they never wait: the swap finds
the segments it read truncated, deleted or replaced and the clean is aborted instead. The
partition's transactions come through the `transaction_state` callback (the broker's producer
state, read off its thread as producer_state.py's transaction_snapshot explains): once before
the clean, and again under the log's lock before each swap, which aborts the clean if the last
stable offset fell below what was cleaned or an aborted transaction in that range was not known
at first (the first read took a producer state half rebuilt or half updated). Without the
callback (tests, tools) the cleaner derives the same from the log's batches.

Crash safety is Kafka's swap protocol: a cleaned segment is written as `.cleaned` files and
fsynced, renamed to `.swap` (the commit point), the old segments are deleted, and the `.swap`
files renamed to the final name. `Log.open` deletes leftover `.cleaned` files and completes a
`.swap` (`Log._complete_swaps`); tests/log/test_log_cleaner_crash.py kills a cleaner process at
every step of that sequence.

Where odradek differs from Kafka: keyless records are kept (Kafka refuses them at produce time
on a compacted topic and its cleaner drops any it meets; odradek's produce path keeps batches
opaque and does not check); the offset map is a Python dict keyed by each key's MD5, about 128
bytes an entry, so log.cleaner.dedupe.buffer.size buys about a sixth of the keys it buys Kafka
(24-byte entries); no I/O throttling; one thread.

Cleaning is Python parsing varints and hashing keys (its speed: docs/benchmarks-history.md,
"Log cleaner"). The thread holds the GIL while it does, so a broker cleaning a large log shares
a core with its event loop for that long (CPython switches every 5 ms); Kafka's cleaner threads
run beside the request threads.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple, Protocol, Sequence

from odradek.common.metadata import TopicPartition
from odradek.log import log as log_module
from odradek.log.checkpoint import read_offsets, write_offsets
from odradek.log.log import Log, LogCleaningAbortedError, SegmentView, wall_clock_ms
from odradek.log.log_manager import LogManager
from odradek.log.segment import MAX_RELATIVE_OFFSET, read_batches
from odradek.protocol.records import (
    BatchHeader,
    CorruptRecordError,
    UnsupportedCompressionError,
    build_filtered_batch,
    control_marker,
    iter_batches,
    iter_records,
    records_section,
)

logger = logging.getLogger("odradek.log.cleaner")

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size (Kafka's default)
BYTES_PER_ENTRY = 128  # a dict entry of a 16-byte digest and an int offset, as tracemalloc counts it
LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
_WRITE_CHUNK = 1 << 20

HighWatermark = Callable[[TopicPartition], "int | None"]
#: producer id -> last offset of its last batch in the partition's log, from the partition's
#: producer state (ProducerStateManager.last_offsets); None when the partition has none here
ProducerLastOffsets = Callable[[TopicPartition], "dict[int, int] | None"]


class AbortedRange(Protocol):
    """An aborted transaction in a partition (producer_state.AbortedTxn has these fields)."""

    @property
    def producer_id(self) -> int: ...
    @property
    def first_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...  # the ABORT marker's offset


#: the partition's last stable offset and its aborted transactions, from its producer state
#: (ProducerStateManager.transaction_snapshot, read off the event loop's thread); None when the
#: partition is not hosted here
TransactionState = Callable[[TopicPartition], "tuple[int, Sequence[AbortedRange]] | None"]


class _Aborted(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int


class AbortedTransactions:
    """Which data batches belong to an aborted transaction (what Kafka's
    CleanedTransactionMetadata answers while it walks the log; here a lookup, since the cleaner
    reads the log twice, for the map and for the rewrite). A producer has one transaction open
    at a time, so its transactional batch at offset o is aborted when an aborted transaction of
    that producer has first offset <= o <= its marker's offset."""

    def __init__(self, txns: Iterable[AbortedRange]) -> None:
        self.ranges = frozenset(_Aborted(t.producer_id, t.first_offset, t.last_offset) for t in txns)
        by_producer: dict[int, tuple[list[int], list[int]]] = {}
        for txn in sorted(self.ranges, key=lambda t: t.first_offset):
            firsts, lasts = by_producer.setdefault(txn.producer_id, ([], []))
            firsts.append(txn.first_offset)
            lasts.append(txn.last_offset)
        self._by_producer = by_producer

    def contains(self, header: BatchHeader) -> bool:
        if header.is_control or not header.is_transactional:
            return False
        found = self._by_producer.get(header.producer_id)
        if found is None:
            return False
        firsts, lasts = found
        i = bisect_right(firsts, header.base_offset) - 1
        return i >= 0 and header.base_offset <= lasts[i]


def _overlapping(txns: Iterable[AbortedRange], start: int, end: int) -> list[AbortedRange]:
    """The transactions with a record in [start, end)."""
    return [t for t in txns if t.first_offset < end and t.last_offset >= start]


class SkimpyOffsetMap:
    """key -> last offset seen, keyed by the key's MD5 as Kafka's SkimpyOffsetMap (a long key
    costs no more than a short one; two keys with one digest would lose the older one's value,
    as in Kafka). Holds at most `slots` keys: memory // BYTES_PER_ENTRY."""

    def __init__(self, memory: int) -> None:
        self.slots = max(2, memory // BYTES_PER_ENTRY)
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[hashlib.md5(key).digest()] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The offset mapped to key, or -1."""
        return self._offsets.get(hashlib.md5(key).digest(), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots


@dataclass
class LogToClean:
    """A compacted log's cleaning state (Kafka's LogToClean): bytes before the first dirty
    offset (clean) and from it to the first uncleanable segment (cleanable)."""

    tp: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment's base offset
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool = False
    checkpoint_reset: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_offsets(tp: TopicPartition, log_: Log, views: list[SegmentView],
                      last_clean: int | None, last_stable_offset: int, now_ms: int) -> LogToClean:
    """Kafka's LogCleanerManager.cleanableOffsets and calculateCleanableBytes over a snapshot
    of the log's segments (the active one last); `last_stable_offset` is at most the high
    watermark."""
    config = log_.config
    log_start = log_.log_start_offset
    first_dirty = log_start if last_clean is None else last_clean
    reset = not log_start <= first_dirty <= log_.log_end_offset
    if reset:  # truncated or deleted under the checkpoint: assume it all needs cleaning
        first_dirty = log_start
    closed = views[:-1]
    limits = [last_stable_offset, views[-1].base_offset]
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        limits += [v.base_offset for v in closed
                   if v.next_offset > first_dirty and v.max_timestamp > now_ms - lag][:1]
    uncleanable = max(first_dirty, min(limits))
    # the cleanable range ends where the segment holding the first uncleanable offset starts
    boundary = max((v.base_offset for v in views if v.base_offset <= uncleanable),
                   default=views[0].base_offset)
    clean = sum(v.size for v in closed if v.base_offset < first_dirty and v.next_offset <= first_dirty)
    cleanable = sum(v.size for v in closed
                    if v.next_offset > first_dirty and v.base_offset < boundary)
    max_lag = max(config.max_compaction_lag_ms, 0)
    overdue = any(v.next_offset > first_dirty and 0 <= v.max_timestamp < now_ms - max_lag
                  for v in closed)
    return LogToClean(tp, log_, first_dirty, boundary, clean, cleanable, overdue, reset)


def group_segments_by_size(views: list[SegmentView], max_size: int,
                           first_uncleanable: int) -> list[list[SegmentView]]:
    """Kafka's Cleaner.groupSegmentsBySize: consecutive segments cleaned into one while their
    sizes add up to at most segment.bytes and their offsets fit in one segment's relative
    offsets, so cleaning does not leave a trail of small segments."""
    groups: list[list[SegmentView]] = []
    i = 0
    while i < len(views):
        group = [views[i]]
        size = views[i].size
        i += 1
        while i < len(views) and size + views[i].size <= max_size:
            last = views[i + 1].base_offset - 1 if i + 1 < len(views) else first_uncleanable - 1
            if views[i].size and last - group[0].base_offset > MAX_RELATIVE_OFFSET:
                break
            group.append(views[i])
            size += views[i].size
            i += 1
        groups.append(group)
    return groups


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    started: float = field(default_factory=time.monotonic)


class Cleaner:
    """One clean of one log (Kafka's Cleaner.doClean): map the dirty section, then rewrite the
    segments up to its end, group by group, each swapped in as soon as it is written."""

    def __init__(self, offset_map: SkimpyOffsetMap, check_done: Callable[[Log], None]) -> None:
        self.offset_map = offset_map
        self._check_done = check_done
        self._warned_codecs: set[TopicPartition] = set()

    def clean(self, ltc: LogToClean, high_watermark: Callable[[], int | None],
              now_ms: int, producer_last_offsets: ProducerLastOffsets | None = None,
              transaction_state: TransactionState | None = None) -> tuple[int, CleanerStats]:
        """Returns the new first dirty offset (the cleaner checkpoint) and what was done.
        The high watermark is read after the segments: a truncation after that aborts the
        swap, so the bound holds for the log the clean read. The producers' last batches and
        the transactions come from ``producer_last_offsets`` and ``transaction_state`` (the
        partition's producer state, as Kafka's cleaner asks the producer state manager and
        reads the transaction index); only without them is the whole log read for them."""
        log_ = ltc.log
        stats = CleanerStats()
        views = log_.segment_views(open_files=True)
        try:
            hw = high_watermark()
            if not views or hw is None:
                raise LogCleaningAbortedError(f"{log_.dir.name} was deleted or is not hosted")
            if transaction_state is not None:
                state = transaction_state(ltc.tp)
                if state is None:
                    raise LogCleaningAbortedError(f"{log_.dir.name} is not hosted")
                stable, txns = min(hw, state[0]), state[1]
            else:
                stable, txns = self._transactions_from_log(log_, views, hw)
            # bounds again, on the segments this clean reads (the log moved since it was picked)
            bounds = cleanable_offsets(ltc.tp, log_, views, ltc.first_dirty_offset, stable, now_ms)
            upper = bounds.first_uncleanable_offset
            start = views[0].base_offset
            aborted = AbortedTransactions(_overlapping(txns, start, upper))
            last_of_producer = producer_last_offsets(ltc.tp) if producer_last_offsets else None
            if last_of_producer is None:
                last_of_producer = self._last_batches_of_producers(log_, views)
            self._build_offset_map(ltc.tp, log_, views, bounds.first_dirty_offset, upper, aborted, stats)
            end_offset = self.offset_map.latest_offset + 1
            if end_offset <= bounds.first_dirty_offset:
                return bounds.first_dirty_offset, stats
            check = None
            if transaction_state is not None:
                def check() -> None:
                    _check_transactions(ltc.tp, log_, transaction_state, start, upper, aborted)
            cleanable = [v for v in views[:-1] if v.base_offset < end_offset]
            transactions = _TransactionsKept()   # across the groups: a transaction may span them
            for group in group_segments_by_size(cleanable, log_.config.segment_bytes, upper):
                self._clean_segments(ltc.tp, log_, group, upper, aborted, last_of_producer, now_ms,
                                     stats, check, transactions)
            return end_offset, stats
        finally:
            for view in views:
                os.close(view.fd)

    def _last_batches_of_producers(self, log_: Log, views: list[SegmentView]) -> dict[int, int]:
        """producer id -> last offset of its last batch in the log (Kafka reads this from the
        producer state manager, lastRecordsOfActiveProducers; the log layer reads headers)."""
        last: dict[int, int] = {}
        for view in views:
            for header, _ in read_batches(view.pread, 0, view.size):
                self._check_done(log_)
                if header.producer_id >= 0 and not header.is_control:
                    last[header.producer_id] = header.last_offset
        return last

    def _transactions_from_log(self, log_: Log, views: list[SegmentView],
                               high_watermark: int) -> tuple[int, list[AbortedRange]]:
        """The last stable offset and the aborted transactions, read from the log's batches by
        producer_state.py's rules (a transactional data batch opens its producer's transaction,
        a COMMIT or ABORT marker closes it; a transaction open, or closed at or past the high
        watermark, holds the LSO at its first offset, never below the log start)."""
        open_txns: dict[int, int] = {}
        aborted: list[AbortedRange] = []
        first_unstable = high_watermark
        for view in views:
            for header, data in read_batches(view.pread, 0, view.size):
                self._check_done(log_)
                pid = header.producer_id
                if pid < 0 or not header.is_transactional:
                    continue
                if not header.is_control:
                    open_txns.setdefault(pid, header.base_offset)
                    continue
                try:
                    marker = control_marker(data, header)
                except CorruptRecordError:
                    marker = None  # as the partition's rebuild takes it: no marker
                first = open_txns.pop(pid, None) if marker is not None else None
                if marker is None or first is None:
                    continue
                if header.base_offset >= high_watermark:
                    first_unstable = min(first_unstable, first)
                if not marker.commit:
                    aborted.append(_Aborted(pid, first, header.base_offset))
        first_unstable = min([first_unstable, *open_txns.values()])
        return min(high_watermark, max(first_unstable, log_.log_start_offset)), aborted

    def _build_offset_map(self, tp: TopicPartition, log_: Log, views: list[SegmentView],
                          start: int, end: int, aborted: AbortedTransactions,
                          stats: CleanerStats) -> None:
        """Kafka's Cleaner.buildOffsetMap: every key of [start, end) -> its last offset, until
        the map is LOAD_FACTOR full; latest_offset then says how far it got. Control batches
        and aborted transactions' batches map no key: an aborted value never hides the
        committed one."""
        offset_map = self.offset_map
        offset_map.clear()
        dirty = [v for v in views if v.next_offset > start and v.base_offset < end]
        room = int(offset_map.slots * LOAD_FACTOR)
        for i, view in enumerate(dirty):
            for header, data in read_batches(view.pread, 0, view.size):
                self._check_done(log_)
                if header.last_offset < start:
                    continue
                section = None
                if not header.is_control and not aborted.contains(header):
                    section = self._records(tp, header, data)
                if section is not None:
                    for record in iter_records(section, header.record_count):
                        offset = header.base_offset + record.offset_delta
                        if record.key is not None and offset >= start:
                            if len(offset_map) >= room:
                                return  # full: the clean ends at the last key mapped
                            offset_map.put(record.key, offset)
                offset_map.update_latest_offset(header.last_offset)
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            offset_map.update_latest_offset(next_start - 1)

    def _records(self, tp: TopicPartition, header: BatchHeader, data: memoryview) -> bytes | memoryview | None:
        """The batch's records section, or None (logged once per partition) for a codec this
        process cannot decompress: such a batch is neither mapped nor filtered, only kept."""
        try:
            return records_section(data, header)
        except UnsupportedCompressionError as exc:
            if tp not in self._warned_codecs:
                self._warned_codecs.add(tp)
                logger.warning("%s: batches left uncleaned: %s", tp, exc)
            return None

    def _clean_segments(self, tp: TopicPartition, log_: Log, group: list[SegmentView], upper: int,
                        aborted: AbortedTransactions, last_of_producer: dict[int, int], now_ms: int,
                        stats: CleanerStats, check: Callable[[], None] | None,
                        transactions: _TransactionsKept) -> None:
        """Kafka's Cleaner.cleanSegments: the group's retained batches into one `.cleaned`
        segment, fsynced, then swapped in for the group (``check`` first, under the log's
        lock)."""
        cleaned = log_.new_cleaned_segment(group[0].base_offset)
        try:
            out = bytearray()
            for view in group:
                for header, data in read_batches(view.pread, 0, view.size):
                    self._check_done(log_)
                    stats.bytes_read += header.size
                    stats.records_read += header.record_count
                    if header.is_control:
                        kept = self._marker(tp, log_, header, data, upper, now_ms, transactions)
                    else:
                        kept = self._filter(tp, log_, header, data, upper, aborted, last_of_producer,
                                            now_ms)
                        if header.is_transactional and header.producer_id >= 0:
                            transactions.data_batch(header.producer_id, kept is not None)
                    if kept is None:
                        continue
                    stats.records_kept += _record_count(kept)
                    out += kept
                    if len(out) >= _WRITE_CHUNK:
                        cleaned.append(out, list(iter_batches(out)))
                        stats.bytes_written += len(out)
                        out = bytearray()
            if out:
                cleaned.append(out, list(iter_batches(out)))
                stats.bytes_written += len(out)
            cleaned.flush()
            log_module.swap_step_hook("cleaned")
            log_.replace_segments(cleaned, group, check)
        except BaseException:
            cleaned.delete()
            raise

    def _filter(self, tp: TopicPartition, log_: Log, header: BatchHeader, data: memoryview,
                upper: int, aborted: AbortedTransactions, last_of_producer: dict[int, int],
                now_ms: int) -> bytes | memoryview | None:
        """The batch as it stays in the cleaned log, or None when it goes (Kafka's
        checkBatchRetention and shouldRetainRecord)."""
        if aborted.contains(header):  # every record goes, whatever the map says
            return _emptied(data, header, upper, last_of_producer)
        section = self._records(tp, header, data)
        if section is None:
            return data
        offset_map = self.offset_map
        horizon = header.delete_horizon_ms
        kept = []
        dropped = tombstones = False
        for record in iter_records(section, header.record_count):
            offset = header.base_offset + record.offset_delta
            if (offset > offset_map.latest_offset or record.key is None
                    or (offset >= offset_map.get(record.key)
                        and (record.has_value or horizon is None or now_ms < horizon))):
                kept.append(record)
                tombstones = tombstones or not record.has_value
            else:
                dropped = True
        if kept:
            new_horizon = horizon
            if tombstones and horizon is None:
                new_horizon = now_ms + log_.config.delete_retention_ms
            if not dropped and new_horizon == horizon:
                return data
            return build_filtered_batch(data, header, section, kept, new_horizon)
        return _emptied(data, header, upper, last_of_producer)


    def _marker(self, tp: TopicPartition, log_: Log, header: BatchHeader, data: memoryview, upper: int,
                now_ms: int, transactions: _TransactionsKept) -> bytes | memoryview | None:
        """A transaction marker as it stays, or None once its transaction left nothing in the
        log and its delete horizon passed (the module docstring gives the rule)."""
        if transactions.ends(header.producer_id) or header.next_offset >= upper:
            return data   # a batch of its transaction stays; or it ends the cleaned section
        horizon = header.delete_horizon_ms
        if horizon is not None:
            return None if now_ms >= horizon else data
        section = self._records(tp, header, data)
        if section is None:
            return data
        return build_filtered_batch(data, header, section, list(iter_records(section, header.record_count)),
                                    now_ms + log_.config.delete_retention_ms)


class _TransactionsKept:
    """Per producer, whether a clean kept any batch (an empty one included) of its transaction
    under way in the pass, the one its next marker ends."""

    def __init__(self) -> None:
        self._kept: dict[int, bool] = {}

    def data_batch(self, producer_id: int, kept: bool) -> None:
        self._kept[producer_id] = self._kept.get(producer_id, False) or kept

    def ends(self, producer_id: int) -> bool:
        """A marker of the producer: whether its transaction has a batch left (then forgotten:
        the producer's next batch begins its next transaction)."""
        return self._kept.pop(producer_id, False)


def _emptied(data: memoryview, header: BatchHeader, upper: int,
             last_of_producer: dict[int, int]) -> bytes | None:
    """A data batch left without records: dropped, or kept empty when it is its idempotent
    producer's last batch (its epoch and last sequence must survive) or ends just below the
    first uncleanable offset (Kafka's RETAIN_EMPTY)."""
    if ((header.producer_id >= 0 and last_of_producer.get(header.producer_id) == header.last_offset)
            or header.next_offset == upper):
        return build_filtered_batch(data, header, b"", [], None)
    return None


def _check_transactions(tp: TopicPartition, log_: Log, transaction_state: TransactionState,
                        start: int, upper: int, aborted: AbortedTransactions) -> None:
    """Before a swap, under the log's lock: the transactions the clean was planned on must
    still hold over [start, upper). The last stable offset only falls with a truncation (which
    aborts the swap anyway), and a transaction aborted after the first read began at or past
    that read's LSO, so either change means the first read was of a state half rebuilt or
    half updated: the clean is aborted and the next round starts over."""
    state = transaction_state(tp)
    if state is None:
        raise LogCleaningAbortedError(f"{log_.dir.name} is not hosted")
    stable, txns = state
    unknown = [t for t in _overlapping(txns, start, upper)
               if _Aborted(t.producer_id, t.first_offset, t.last_offset) not in aborted.ranges]
    if stable < upper or unknown:
        raise LogCleaningAbortedError(
            f"{log_.dir.name}: its transactions changed while cleaned (last stable offset {stable}, "
            f"cleaned below {upper}; aborted transactions not seen before: {unknown[:3]})")


def _record_count(batch: bytes | memoryview) -> int:
    return int.from_bytes(batch[57:61], "big")


class LogCleaner:
    """The broker's cleaner thread (Kafka's LogCleaner with one CleanerThread, and the
    LogCleanerManager's choice of the filthiest log and its checkpoint file)."""

    def __init__(self, log_manager: LogManager, high_watermark: HighWatermark,
                 backoff_ms: int = 15000, dedupe_buffer_size: int = DEDUPE_BUFFER_SIZE,
                 now_ms: Callable[[], int] = wall_clock_ms,
                 producer_last_offsets: ProducerLastOffsets | None = None,
                 transaction_state: TransactionState | None = None) -> None:
        self.log_manager = log_manager
        self._high_watermark = high_watermark
        self._producer_last_offsets = producer_last_offsets
        self._transaction_state = transaction_state
        self.backoff_s = backoff_ms / 1000
        self._now_ms = now_ms
        self._checkpoint_path = log_manager.data_dir / CHECKPOINT_FILE
        self._checkpoints = {TopicPartition(t, p): o
                             for (t, p), o in read_offsets(self._checkpoint_path).items()}
        self._uncleanable: set[TopicPartition] = set()  # failed with an unexpected error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cleaner = Cleaner(SkimpyOffsetMap(dedupe_buffer_size), self._check_done)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="log-cleaner", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the thread; a clean under way is aborted at its next batch (its `.cleaned`
        files deleted) or, if already swapping, finishes the swap first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.clean_once():
                self._stop.wait(self.backoff_s)

    def _check_done(self, log_: Log) -> None:
        if self._stop.is_set():
            raise LogCleaningAbortedError("the cleaner is shutting down")
        if log_.deleted:
            raise LogCleaningAbortedError(f"{log_.dir.name} was deleted")

    def checkpoints(self) -> dict[TopicPartition, int]:
        return dict(self._checkpoints)

    def grab_filthiest_compacted_log(self, now_ms: int) -> LogToClean | None:
        """The compacted log most in need of cleaning, or None."""
        best: LogToClean | None = None
        for tp, log_ in self.log_manager.logs():
            if not log_.config.compact or log_.deleted or tp in self._uncleanable:
                continue
            truncated = log_.take_truncation_point()
            if truncated is not None and self._checkpoints.get(tp, -1) > truncated:
                self._checkpoints[tp] = truncated  # Kafka's maybeTruncateCheckpoint
            high_watermark = self._high_watermark(tp)
            if high_watermark is None:
                continue
            stable = high_watermark  # without the callback the clean finds the LSO in the log
            if self._transaction_state is not None:
                state = self._transaction_state(tp)
                if state is None:
                    continue
                stable = min(high_watermark, state[0])
            views = log_.segment_views(open_files=False)
            if not views:
                continue  # deleted meanwhile
            ltc = cleanable_offsets(tp, log_, views, self._checkpoints.get(tp), stable, now_ms)
            if ltc.checkpoint_reset:
                self._checkpoints[tp] = ltc.first_dirty_offset
            if ltc.total_bytes <= 0 or not (
                    (ltc.needs_compaction_now and ltc.cleanable_bytes > 0)
                    or ltc.cleanable_ratio > log_.config.min_cleanable_dirty_ratio):
                continue
            if best is None or ltc.cleanable_ratio > best.cleanable_ratio:
                best = ltc
        return best

    def clean_once(self) -> bool:
        """Clean the filthiest log, if one qualifies; True when one was cleaned (False too when
        the one picked had nothing below its first uncleanable offset after all)."""
        now_ms = self._now_ms()
        try:
            ltc = self.grab_filthiest_compacted_log(now_ms)
        except Exception:  # noqa: BLE001 - a log closed under us; the next round looks again
            logger.exception("choosing a log to clean failed")
            return False
        if ltc is None:
            return False
        try:
            end_offset, stats = self.cleaner.clean(ltc, lambda: self._high_watermark(ltc.tp), now_ms,
                                                   self._producer_last_offsets, self._transaction_state)
        except Exception as exc:  # noqa: BLE001 - Kafka marks the partition uncleanable and goes on
            if isinstance(exc, LogCleaningAbortedError) or ltc.log.deleted:
                logger.info("%s: cleaning aborted: %s", ltc.tp, exc)
                if ltc.log.deleted:  # its files may have gone as they were written
                    _remove_if_empty(ltc.log)
            else:
                logger.exception("%s: cleaning failed; the log is not cleaned again", ltc.tp)
                self._uncleanable.add(ltc.tp)
            return False
        if end_offset <= ltc.first_dirty_offset:
            return False  # e.g. the last stable offset, read from the log, was lower than the HW
        self._checkpoints[ltc.tp] = end_offset
        self._write_checkpoints()
        elapsed = time.monotonic() - stats.started
        logger.info("%s: cleaned up to offset %d in %.2f s: %d of %d records kept, %d of %d "
                    "bytes written, %d keys mapped (%.0f%% of the map)", ltc.tp, end_offset,
                    elapsed, stats.records_kept, stats.records_read, stats.bytes_written,
                    stats.bytes_read, len(self.cleaner.offset_map),
                    100 * self.cleaner.offset_map.utilization)
        return True

    def _write_checkpoints(self) -> None:
        present = set(self.log_manager.partitions())  # on disk, opened yet or not
        self._checkpoints = {tp: o for tp, o in self._checkpoints.items() if tp in present}
        write_offsets(self._checkpoint_path,
                      {(tp.topic, tp.partition): o for tp, o in self._checkpoints.items()})


def _remove_if_empty(log_: Log) -> None:
    """A log deleted while cleaned: its directory may have been recreated by the `.cleaned`
    file being written as it was removed; the file is gone now, so is the directory."""
    try:
        os.rmdir(log_.dir)
    except OSError:
        pass
