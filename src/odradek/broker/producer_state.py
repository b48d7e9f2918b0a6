"""Per-partition idempotent-producer state (KIP-98): what lets a leader refuse a gap and answer a
retried batch with the offsets it got the first time, instead of writing it twice.

For each producer id the state holds the producer epoch and the sequence ranges and offsets of
the last five batches it wrote here (a producer has at most five requests in flight, so a retry
is always one of them). It is derived from the batch headers in the log and nothing else, so
every replica builds the same state (leaders as they append, followers as they replicate, any
replica by scanning its log on start-up or after truncation) and it survives leader changes and
restarts without a separate replication channel. Pure: no I/O, no clock.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Sequence

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import BatchHeader

MAX_CACHED_BATCHES = 5  # Kafka's limit on in-flight requests per idempotent producer
MAX_SEQUENCE = 2**31 - 1  # sequences are int32 and wrap to 0 after this


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's max timestamp; what producer-id expiry would be based on


@dataclass
class ProducerEntry:
    """A producer's epoch and its latest batches here, oldest first; never without a batch."""

    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))


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
    # Control batches carry a producer id but no sequence of their own (transaction markers,
    # which odradek never writes); they neither advance nor break a producer's sequence.
    return header.producer_id >= 0 and not header.is_control


class ProducerStateManager:
    """Sequence and epoch bookkeeping for one partition replica."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

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
        an entry's last batch is one index into its deque."""
        return {pid: entry.batches[-1].last_offset for pid, entry in self._producers.copy().items()}

    def validate(self, headers: Sequence[BatchHeader]) -> Duplicate | None:
        """Check a leader append before anything is written. Returns None to go ahead, or the
        Duplicate to answer with (write nothing); raises ProducerStateError to refuse it.

        Only the headers are read, so this costs one dict lookup per idempotent batch.
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
            return None
        last_seq = last_sequence(h)
        for cached in entry.batches:
            if cached.first_seq == h.base_sequence and cached.last_seq == last_seq:
                return Duplicate(cached.first_offset, cached.last_offset)
        expected = (entry.batches[-1].last_seq + 1) % (MAX_SEQUENCE + 1)
        if h.base_sequence != expected:
            raise ProducerStateError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"producer {h.producer_id} sent sequence {h.base_sequence}, "
                                     f"expected {expected}")
        return None

    def update(self, h: BatchHeader, first_offset: int, last_offset: int) -> None:
        """Record a batch now in the log at [first_offset, last_offset]; used for leader and
        follower appends alike, and for rebuilds. Follows the log without judging it: a new
        epoch (even a lower one a follower replicates) replaces the cached batches."""
        if not _is_idempotent(h):
            return
        entry = self._producers.get(h.producer_id)
        if entry is None or entry.epoch != h.producer_epoch:
            entry = self._producers[h.producer_id] = ProducerEntry(h.producer_epoch)
        entry.batches.append(BatchMetadata(h.base_sequence, last_sequence(h), first_offset,
                                           last_offset, h.max_timestamp))

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Forget everything and replay the log's batch headers (with their stored offsets).

        Replays the whole log; Kafka bounds this with periodic snapshots of the state at an
        offset, replaying only the tail, which is the optimisation to add when start-up over
        large logs matters.
        """
        self._producers = {}
        for h in headers:
            self.update(h, h.base_offset, h.last_offset)
