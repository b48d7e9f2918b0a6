"""Per-partition idempotent-producer state (KIP-98): what lets a leader refuse a gap and answer a
retried batch with the offsets it got the first time, instead of writing it twice.

For each producer id the state holds the producer epoch and the sequence ranges and offsets of
the last five batches it wrote here (a producer has at most five requests in flight, so a retry
is always one of them). It is derived from the batch headers in the log and nothing else, so
every replica builds the same state (leaders as they append, followers as they replicate, any
replica by scanning its log on start-up or after truncation) and it survives leader changes and
restarts without a separate replication channel. Pure: no I/O, no clock.

Transactions (KIP-98, transaction version 1) are kept here too, as in Kafka's
ProducerStateManager: a producer's transactional batches open its transaction in this partition
at their first offset, and a transaction marker (a control batch the coordinator has the leader
write) closes it. From that follow the last stable offset (read_committed consumers read no
further than the first offset of a transaction still open, or closed by a marker not yet
replicated) and the aborted transactions a read_committed fetch returns with its records (Kafka
keeps those in a .txnindex file per segment; here they are kept with the rest).

The whole state at a log offset can be written out and read back (``to_snapshot``,
``from_snapshot``; the files are producer_state_snapshots.py's), so a replica opening its log
replays only the batches after its latest snapshot, as Kafka's ProducerStateManager does with
its `.snapshot` files.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Iterable, NamedTuple, Sequence

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import BatchHeader, ControlMarker

MAX_CACHED_BATCHES = 5  # Kafka's limit on in-flight requests per idempotent producer
MAX_SEQUENCE = 2**31 - 1  # sequences are int32 and wrap to 0 after this


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp; what producer-id expiry would be based on


def _batch_cache() -> deque[BatchMetadata]:
    return deque(maxlen=MAX_CACHED_BATCHES)


@dataclass
class ProducerEntry:
    """A producer's epoch and its latest batches here, oldest first: none when all it has here
    in this epoch is a transaction marker (its data gone, or never written to this partition).
    A new epoch gets a new deque rather than clearing the old, so a reader on another thread
    (last_offsets) never sees a deque emptied under it."""

    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=_batch_cache)
    coordinator_epoch: int = -1  # of the last marker: an older coordinator's markers are fenced
    txn_first_offset: int | None = None  # first offset of its transaction open here, if any


class CompletedTxn(NamedTuple):
    """A transaction a marker closed in this partition (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class AbortedTxn(NamedTuple):
    """An aborted transaction, as Kafka's transaction index holds it: read_committed fetches
    return (producer_id, first_offset) for those overlapping what they read, and the consumer
    drops that producer's records from first_offset up to the marker."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    # the LSO once the marker was written: where no open transaction overlaps this one any more
    # (lets a range query stop early, as Kafka's TransactionIndex.collectAbortedTxns does)
    last_stable_offset: int


class Duplicate(NamedTuple):
    """A retried batch already in the log: the offsets it was given the first time."""

    first_offset: int
    last_offset: int


class ProducerStateError(Exception):
    """An append refused by producer state; `error` is the Kafka error code to answer with."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


def last_sequence(header: BatchHeader) -> int:
    """The sequence of the batch's last record, wrapping past the int32 maximum to 0."""
    return (header.base_sequence + header.last_offset_delta) % (MAX_SEQUENCE + 1)


def _is_idempotent(header: BatchHeader) -> bool:
    # Control batches (transaction markers) carry a producer id but no sequence of their own
    # (base sequence -1); they neither advance nor break a producer's sequence.
    return header.producer_id >= 0 and not header.is_control


def _last_offset(txn: AbortedTxn | CompletedTxn) -> int:
    return txn.last_offset


class ProducerStateManager:
    """Sequence, epoch and transaction bookkeeping for one partition replica."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its open transaction. Transactions open in log order,
        # so insertion order is first-offset order and the first value is the earliest.
        self._ongoing: dict[int, int] = {}
        # transactions whose markers the high watermark has not passed yet (Kafka's
        # unreplicatedTxns): the LSO stays at their first offset until it does. Markers
        # ascending, and only those with a first offset below every later one's (a later marker
        # with a lower first offset holds the LSO back at least as long), so first offsets
        # ascend too and the first entry left after pruning is the one that counts.
        self._unreplicated: deque[CompletedTxn] = deque()
        self._aborted: list[AbortedTxn] = []  # in marker order
        self._log_start = 0  # the LSO never names an offset below it (Kafka clamps it there)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    @property
    def producers(self) -> dict[int, ProducerEntry]:
        """Every producer id's entry (read-only by convention; tests compare these)."""
        return self._producers

    def last_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its last batch (Kafka's lastRecordsOfActiveProducers:
        the batches the log cleaner keeps, as empty batches if need be). Safe from another
        thread: the dict is copied in one C call (dict.copy cannot see it change size), and
        an entry's last batch is one index into its deque. Producers with no batch here (only a
        marker) are left out, as Kafka leaves out those without a last data offset."""
        last = {}
        for pid, entry in self._producers.copy().items():
            batches = entry.batches  # one read: a new epoch replaces the deque, never empties it
            if batches:
                last[pid] = batches[-1].last_offset
        return last

    def validate(self, headers: Sequence[BatchHeader]) -> Duplicate | None:
        """Check a leader append before anything is written. Returns None to go ahead, or the
        Duplicate to answer with (write nothing); raises ProducerStateError to refuse it.

        Only the headers are read, so this costs one dict lookup per idempotent batch. Control
        batches are passed over: the caller refuses them from clients (markers come only
        through WriteTxnMarkers, checked by validate_marker).
        """
        idempotent = [h for h in headers if _is_idempotent(h)]
        if not idempotent:
            return None
        if len(headers) > 1:
            # Kafka refuses more than one batch per partition in any Produce v3+ request; doing
            # the same for idempotent batches spares us ordering batches within one append.
            raise ProducerStateError(ErrorCode.INVALID_RECORD,
                                     "an idempotent produce must hold one batch per partition")
        return self._validate_one(idempotent[0])

    def _validate_one(self, h: BatchHeader) -> Duplicate | None:
        if h.base_sequence < 0:
            raise ProducerStateError(ErrorCode.INVALID_RECORD,
                                     f"producer {h.producer_id} sent sequence {h.base_sequence}")
        entry = self._producers.get(h.producer_id)
        if entry is None:
            # An unknown producer may start at any sequence (KIP-360): its earlier batches may
            # have left the log through retention, or the producer may have reset its
            # sequences, so the leader has nothing to check a first sequence against.
            return None
        if h.producer_epoch < entry.epoch:
            raise ProducerStateError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                     f"producer {h.producer_id} epoch {h.producer_epoch} is older "
                                     f"than {entry.epoch}: fenced by a newer instance")
        if h.producer_epoch > entry.epoch:
            if h.base_sequence != 0:
                raise ProducerStateError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                         f"producer {h.producer_id} started epoch {h.producer_epoch} "
                                         f"at sequence {h.base_sequence}, not 0")
        elif entry.batches:
            # (with no batch, only a marker, in this epoch: any sequence, as for an unknown
            # producer, since a rebuild loses the batches retention removed before the marker)
            duplicate = _find_duplicate(entry, h)
            if duplicate is not None:
                return duplicate
            expected = (entry.batches[-1].last_seq + 1) % (MAX_SEQUENCE + 1)
            if h.base_sequence != expected:
                raise ProducerStateError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                         f"producer {h.producer_id} sent sequence {h.base_sequence}, "
                                         f"expected {expected}")
        _check_in_transaction(entry, h)
        return None

    def validate_coordinator_batch(self, h: BatchHeader) -> None:
        """Kafka's checks of a coordinator's own batch (AppendOrigin.COORDINATOR: a
        TxnOffsetCommit's offsets written under the producer's id and epoch): no sequence, but
        an older epoch is refused, and so is a non-transactional batch inside a transaction."""
        entry = self._producers.get(h.producer_id) if h.producer_id >= 0 else None
        if entry is None:
            return
        if h.producer_epoch < entry.epoch:
            raise ProducerStateError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                     f"producer {h.producer_id} epoch {h.producer_epoch} is older than {entry.epoch}")
        _check_in_transaction(entry, h)

    def validate_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Check a WriteTxnMarkers append (Kafka's appendEndTxnMarker checks, in its order): a
        marker from an older producer epoch, or from a coordinator older than the last one
        that wrote here (a zombie coordinator after a coordinator move), is refused. A producer
        unknown here is accepted: Kafka writes markers to every partition of the transaction."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise ProducerStateError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                     f"marker for producer {producer_id} has epoch {producer_epoch}, "
                                     f"older than {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                                     f"marker for producer {producer_id} from coordinator epoch "
                                     f"{coordinator_epoch}, older than {entry.coordinator_epoch}")

    def update(self, h: BatchHeader, first_offset: int, last_offset: int,
               marker: ControlMarker | None = None) -> CompletedTxn | None:
        """Record a batch now in the log at [first_offset, last_offset]; used for leader and
        follower appends alike, and for rebuilds. Follows the log without judging it: a new
        epoch (even a lower one a follower replicates) replaces the cached batches.

        A transactional data batch opens its producer's transaction here unless one is open; a
        control batch with its `marker` (records.control_marker) closes it, and the transaction
        it closed comes back (None if the producer had none open here: Kafka writes markers to
        every partition of a transaction, written to or not). A control batch without a marker
        (empty, or not commit/abort) changes nothing."""
        if h.producer_id < 0:
            return None
        if h.is_control:
            return None if marker is None else self._end_transaction(h, last_offset, marker)
        entry = self._producers.get(h.producer_id)
        if entry is None:
            entry = self._producers[h.producer_id] = ProducerEntry(h.producer_epoch)
        elif entry.epoch != h.producer_epoch:
            entry.epoch = h.producer_epoch  # an open transaction stays open, as in Kafka
            entry.batches = _batch_cache()
        entry.batches.append(BatchMetadata(h.base_sequence, last_sequence(h), first_offset,
                                           last_offset, h.max_timestamp))
        if h.is_transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = first_offset
            self._ongoing[h.producer_id] = first_offset
        return None

    def _end_transaction(self, h: BatchHeader, offset: int, marker: ControlMarker) -> CompletedTxn | None:
        """Kafka's appendEndTxnMarker followed by completeTxn, for a marker at `offset`."""
        pid = h.producer_id
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = ProducerEntry(h.producer_epoch)
        elif h.producer_epoch > entry.epoch:
            # a coordinator aborting a timed-out transaction bumps the epoch, fencing the producer
            entry.epoch = h.producer_epoch
            entry.batches = _batch_cache()
        entry.coordinator_epoch = marker.coordinator_epoch
        first = entry.txn_first_offset
        if first is None:
            return None
        entry.txn_first_offset = None
        completed = CompletedTxn(pid, first, offset, not marker.commit)
        if completed.aborted:
            self._aborted.append(AbortedTxn(pid, first, offset, self._stable_after(pid, offset)))
        del self._ongoing[pid]
        unreplicated = self._unreplicated
        while unreplicated and unreplicated[-1].first_offset >= first:
            unreplicated.pop()  # never holds the LSO back longer than this one does
        unreplicated.append(completed)
        return completed

    def _stable_after(self, producer_id: int, marker_offset: int) -> int:
        """Kafka's lastStableOffset(completedTxn): the first offset of the earliest transaction
        of another producer still open, else just past the marker."""
        for pid, first in self._ongoing.items():
            if pid != producer_id:
                return first
        return marker_offset + 1

    def last_stable_offset(self, high_watermark: int) -> int:
        """Where read_committed reads stop (Kafka's LSO): the high watermark, or the first offset
        of the earliest transaction still open or closed by a marker not yet below the high
        watermark, whichever is lower (never below the log start). Called on every fetch, so
        without transactions it is one check. The high watermark must not go back without a
        rebuild: the markers it has passed are forgotten here."""
        if not (self._ongoing or self._unreplicated):
            return high_watermark
        self._forget_replicated(high_watermark)
        first_unstable = high_watermark
        if self._ongoing:
            first_unstable = next(iter(self._ongoing.values()))
        if self._unreplicated:
            first_unstable = min(first_unstable, self._unreplicated[0].first_offset)
        return min(high_watermark, max(first_unstable, self._log_start))

    def _forget_replicated(self, offset: int) -> None:
        unreplicated = self._unreplicated
        while unreplicated and unreplicated[0].last_offset < offset:
            unreplicated.popleft()

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping offsets [start, end), in marker order: what a
        read_committed fetch of that range answers with. Stops, as Kafka's transaction index
        does, at the first whose LSO reaches `end`: no later one can start below it."""
        aborted = self._aborted
        if not aborted:
            return []
        found = []
        for txn in islice(aborted, bisect_left(aborted, start, key=_last_offset), None):
            if txn.first_offset < end:
                found.append(txn)
            if txn.last_stable_offset >= end:
                break
        return found

    def transaction_snapshot(self, high_watermark: int) -> tuple[int, list[AbortedTxn]]:
        """The last stable offset at `high_watermark` and every aborted transaction held here,
        in marker order: what the log cleaner needs (Kafka's cleaner reads the LSO and the
        transaction index). Changes nothing (last_stable_offset forgets replicated markers) and
        is safe from another thread as last_offsets is: each container is copied in one C call,
        open transactions first, then unreplicated ones, then aborted ones, so a transaction a
        marker closes meanwhile is seen at least once, and an aborted one seen open is in the
        aborted list. Read the high watermark before calling: an older one only lowers the LSO.
        Two reads can still miss: one landing between the `del self._ongoing` and the append of
        _end_transaction (a committed transaction not yet below the HW is left out), and one
        during a rebuild, which refills fresh containers (the state of a prefix of the log).
        The cleaner reads again before each swap, under the log's lock, which a rebuild holds
        while it replays, and aborts the clean if that read shows more than the first."""
        ongoing = self._ongoing.copy()
        unreplicated = tuple(self._unreplicated)
        aborted = self._aborted.copy()
        first_unstable = high_watermark
        if ongoing:
            first_unstable = min(ongoing.values())
        for txn in unreplicated:
            if txn.last_offset >= high_watermark:
                first_unstable = min(first_unstable, txn.first_offset)
        return min(high_watermark, max(first_unstable, self._log_start)), aborted

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each transaction open here (DescribeProducers'
        currentTxnStartOffset; what finds a hanging transaction)."""
        return dict(self._ongoing)

    def truncate_head(self, log_start_offset: int) -> None:
        """The log start moved up (retention, DeleteRecords; also call it after opening the
        log): aborted transactions whose markers are gone are dropped, as Kafka deletes a
        segment's transaction index with it, and the LSO is kept from naming a deleted offset.
        Open transactions stay, as in Kafka, until their markers come."""
        self._log_start = max(self._log_start, log_start_offset)
        aborted = self._aborted
        if aborted and aborted[0].last_offset < log_start_offset:
            del aborted[:bisect_left(aborted, log_start_offset, key=_last_offset)]
        self._forget_replicated(log_start_offset)

    def rebuild(self, batches: Iterable[tuple[BatchHeader, ControlMarker | None]],
                high_watermark: int | None = None, snapshot: dict[str, Any] | None = None) -> None:
        """Forget everything (but the log start) and replay the log's batches: each header,
        with its stored offsets, and its marker for a control batch (records.control_marker).
        With the high watermark, markers below it are not kept as unreplicated, so a log full
        of transactions does not hold them all until the next last_stable_offset call. With a
        ``snapshot`` (``to_snapshot``'s, at offset X), the replay starts from its state, and
        ``batches`` are those from X on.
        """
        # replayed into a fresh state, taken over at the end: the cleaner's thread, reading a
        # snapshot meanwhile, sees the old state or the new one, never half of the log
        fresh = ProducerStateManager() if snapshot is None else ProducerStateManager.from_snapshot(snapshot)
        fresh._log_start = self._log_start
        if high_watermark is not None:
            fresh._forget_replicated(high_watermark)
        for h, marker in batches:
            if fresh.update(h, h.base_offset, h.last_offset, marker) is not None and high_watermark is not None:
                fresh._forget_replicated(high_watermark)
        self._producers, self._ongoing = fresh._producers, fresh._ongoing
        self._unreplicated, self._aborted = fresh._unreplicated, fresh._aborted


    def to_snapshot(self) -> dict[str, Any]:
        """The whole state as plain data (JSON-ready): every producer with its epoch, cached
        batches, coordinator epoch and open transaction; the open transactions in their order;
        the closed ones not yet below the high watermark; the aborted ones."""
        return {
            "producers": [[pid, e.epoch, e.coordinator_epoch, e.txn_first_offset, [list(b) for b in e.batches]]
                          for pid, e in self._producers.items()],
            "ongoing": [[pid, first] for pid, first in self._ongoing.items()],
            "unreplicated": [list(t) for t in self._unreplicated],
            "aborted": [list(t) for t in self._aborted],
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> ProducerStateManager:
        """The state ``to_snapshot`` wrote (the log start is the caller's: truncate_head)."""
        state = cls()
        for pid, epoch, coordinator_epoch, txn_first, batches in data["producers"]:
            entry = state._producers[int(pid)] = ProducerEntry(int(epoch), _batch_cache(), int(coordinator_epoch),
                                                               None if txn_first is None else int(txn_first))
            entry.batches.extend(BatchMetadata(*map(int, b)) for b in batches)
        state._ongoing = {int(pid): int(first) for pid, first in data["ongoing"]}
        state._unreplicated = deque(CompletedTxn(int(p), int(f), int(last), bool(a))
                                    for p, f, last, a in data["unreplicated"])
        state._aborted = [AbortedTxn(*map(int, t)) for t in data["aborted"]]
        return state


def _check_in_transaction(entry: ProducerEntry, h: BatchHeader) -> None:
    """Kafka's ProducerAppendInfo: inside a transaction every write must belong to it."""
    if entry.txn_first_offset is not None and not h.is_transactional:
        raise ProducerStateError(ErrorCode.INVALID_TXN_STATE,
                                 f"producer {h.producer_id} sent a non-transactional batch while "
                                 f"its transaction from offset {entry.txn_first_offset} is open")


def _find_duplicate(entry: ProducerEntry, h: BatchHeader) -> Duplicate | None:
    last_seq = last_sequence(h)
    for cached in entry.batches:
        if cached.first_seq == h.base_sequence and cached.last_seq == last_seq:
            return Duplicate(cached.first_offset, cached.last_offset)
    return None
