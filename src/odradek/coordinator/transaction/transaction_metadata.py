"""One transactional id as its coordinator holds it: Kafka's TransactionMetadata (Kafka 3.x,
transaction version 1, the TransactionMetadata.scala of 3.0 to 3.9).

Pure state, no I/O and no clock of its own (times are passed in, in ms since the epoch): the
coordinator decides when things happen, this module keeps each change legal.

A change is made in two steps, because it must be in the __transaction_state log before anyone
may see it: a ``prepare_*`` method checks the change, records it as the pending state (which
blocks any other change meanwhile) and returns the target as an immutable TxnTransitMetadata;
the coordinator writes that to the log and, once the ISR has it, ``complete_transition`` applies
it (or, if the write failed, ``cancel_transition`` forgets it). The states and their legal
predecessors are Kafka's (VALID_PREVIOUS):

    Empty --AddPartitions/AddOffsets--> Ongoing --EndTxn--> PrepareCommit / PrepareAbort
    PrepareCommit / PrepareAbort --markers written--> CompleteCommit / CompleteAbort
    Empty, CompleteCommit, CompleteAbort --InitProducerId--> Empty (the epoch bumped)
    Empty, CompleteCommit, CompleteAbort --AddPartitions--> Ongoing (the next transaction)
    Ongoing --InitProducerId or timeout--> PrepareEpochFence (never written) --> PrepareAbort
    Empty, CompleteCommit, CompleteAbort --transactional.id.expiration.ms--> Dead (a tombstone)
"""
from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, NoReturn, TypeAlias

from odradek.common.metadata import TopicPartition
from odradek.protocol.errors import ErrorCode

#: Kafka's RecordBatch.NO_PRODUCER_ID and NO_PRODUCER_EPOCH
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: an epoch is a Java short
MAX_PRODUCER_EPOCH = (1 << 15) - 1
#: txn_start_timestamp while no transaction has been started since the last InitProducerId
NO_TIMESTAMP = -1


class TransactionState(enum.Enum):
    """A transaction's state; the value is the id the log stores (TransactionLogValue's
    TransactionStatus), ``kafka_name`` the name DescribeTransactions and ListTransactions use.

    Empty: no transaction open (a new id, or one just given an epoch by InitProducerId).
    Ongoing: partitions (or a group's offsets) were added; the producer writes to them.
    PrepareCommit, PrepareAbort: EndTxn was written; the markers go out to every partition.
    CompleteCommit, CompleteAbort: every partition has its marker; the id is idle again.
    Dead: the id expired; its tombstone is being written, then it leaves the cache.
    PrepareEpochFence: only ever a pending state, never a current one: an Ongoing transaction
        is aborted under a bumped epoch (InitProducerId from a new producer instance, or the
        transaction timed out), which the coordinator turns into a PrepareAbort at once.
    """

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return _KAFKA_NAMES[self]

    @property
    def is_expiration_allowed(self) -> bool:
        """Whether an idle id in this state may expire (Kafka's isExpirationAllowed): never
        while a transaction is open or being completed."""
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        """The state a log record names; IllegalTransactionStateError for an unknown id (Kafka's
        fromId throws)."""
        try:
            return cls(state_id)
        except ValueError:
            raise IllegalTransactionStateError(f"unknown transaction state id {state_id}") from None

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state of a Kafka name (ListTransactions' state filters); None if unknown."""
        return _BY_KAFKA_NAME.get(name)


_KAFKA_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_KAFKA_NAME = {name: state for state, name in _KAFKA_NAMES.items()}

_S = TransactionState

#: each state with the states a transaction may enter it from (Kafka's validPreviousStates)
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


class IllegalTransactionStateError(Exception):
    """A change the transaction's state does not allow, or a completion that is not the pending
    change: a bug in the coordinator, as Kafka's IllegalStateException is."""


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka's isEpochExhausted: one epoch is kept in reserve so that fencing (which bumps the
    epoch once more) can still happen at the last usable one."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """What a producer says it has, in InitProducerId v3+ (KIP-360)."""

    producer_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The target of a change, as it is written to the log (Kafka's TxnTransitMetadata).
    ``last_producer_id`` is always the producer id the transaction had when it was prepared."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


class TransactionMetadata:
    """Kafka's TransactionMetadata. The fields are public, as in Kafka, for the coordinator to
    read; they change only through ``complete_transition`` (and the epoch fence, below)."""

    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int, txn_timeout_ms: int,
                 state: TransactionState = TransactionState.EMPTY, *, now_ms: int,
                 last_producer_id: int = NO_PRODUCER_ID, last_producer_epoch: int = NO_PRODUCER_EPOCH,
                 topic_partitions: Iterable[TopicPartition] = (), txn_start_timestamp: int = NO_TIMESTAMP) -> None:
        """A new id (InitProducerId: ``producer_epoch`` NO_PRODUCER_EPOCH, state Empty) or one
        read back from the log; ``now_ms`` is its last update."""
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = last_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self._state = state
        self.topic_partitions: set[TopicPartition] = set(topic_partitions)
        self.txn_start_timestamp = txn_start_timestamp  # when the first partition was added
        self.txn_last_update_timestamp = now_ms  # any change; what expiry of the id counts from
        self._pending_state: TransactionState | None = None
        # a fencing abort's write failed: the epoch in memory was already bumped, and is not
        # bumped again by the next fence (it was never handed to a client, so reusing it is safe)
        self.has_failed_epoch_fence = False

    def __repr__(self) -> str:
        pending = f" -> {self._pending_state.kafka_name}" if self._pending_state is not None else ""
        return (f"TransactionMetadata({self.transactional_id!r}, {self._state.kafka_name}{pending}, "
                f"producer {self.producer_id} epoch {self.producer_epoch}, {len(self.topic_partitions)} partitions)")

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> TransactionState:
        """Read-only: a state changes only through ``complete_transition``."""
        return self._state

    @property
    def pending_state(self) -> TransactionState | None:
        """The state of the change being written to the log, if one is."""
        return self._pending_state

    @property
    def pending_transition_in_progress(self) -> bool:
        return self._pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        """A transaction is open or being completed: the producer id must not change under it."""
        return self._state in (_S.ONGOING, _S.PREPARE_ABORT, _S.PREPARE_COMMIT)

    def is_timed_out(self, now_ms: int) -> bool:
        """Kafka's timedOutTransactions filter: an Ongoing transaction open longer than its
        timeout, with no change under way, is to be aborted (by fencing its producer)."""
        return (self._pending_state is None and self._state is _S.ONGOING
                and self.txn_start_timestamp + self.txn_timeout_ms < now_ms)

    def is_expired(self, now_ms: int, transactional_id_expiration_ms: int) -> bool:
        """Kafka's removeExpiredTransactionalIds test: an idle id untouched for
        transactional.id.expiration.ms, with no change under way, is to be removed."""
        return (self._pending_state is None and self._state.is_expiration_allowed
                and self.txn_last_update_timestamp <= now_ms - transactional_id_expiration_ms)

    def remove_partition(self, tp: TopicPartition) -> None:
        """The marker of a transaction being completed reached ``tp`` (Kafka's removePartition):
        the transaction is complete once no partition is left."""
        if self._state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id}: removing {tp} whose marker was sent in state "
                f"{self._state.kafka_name} (pending {self._pending_kafka_name()})")
        self.topic_partitions.discard(tp)

    # -- preparing a change --------------------------------------------------------------------

    def prepare_no_transit(self) -> TxnTransitMetadata:
        """The metadata as it is, with no pending state set (Kafka uses it in tests)."""
        return TxnTransitMetadata(self.producer_id, self.last_producer_id, self.producer_epoch,
                                  self.last_producer_epoch, self.txn_timeout_ms, self._state,
                                  frozenset(self.topic_partitions), self.txn_start_timestamp,
                                  self.txn_last_update_timestamp)

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Abort the Ongoing transaction under a bumped epoch, which fences its producer: a new
        instance of it called InitProducerId, or the transaction timed out. The transit
        (PrepareEpochFence, never written) is handed to ``prepare_epoch_fence_abort``. Its epoch
        is not returned to any client, so the client's retry bumps once more; the epoch is not
        bumped again after a failed fence (``has_failed_epoch_fence``)."""
        if self.producer_epoch == MAX_PRODUCER_EPOCH:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id}: cannot fence epoch {MAX_PRODUCER_EPOCH}, it would overflow")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare_transition_to(_S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH,
                                           self.txn_timeout_ms, frozenset(self.topic_partitions),
                                           self.txn_start_timestamp, self.txn_last_update_timestamp)

    def prepare_epoch_fence_abort(self, fence: TxnTransitMetadata, now_ms: int) -> TxnTransitMetadata:
        """Turn the pending epoch fence into the abort it stands for (what Kafka's endTransaction
        does for an abort not from the client): the fenced epoch takes effect in memory now,
        before the write, so the old producer is refused at once; then PrepareAbort is prepared
        under it. If that write fails, the coordinator sets ``has_failed_epoch_fence``."""
        if self._pending_state is not _S.PREPARE_EPOCH_FENCE or fence.state is not _S.PREPARE_EPOCH_FENCE:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id}: no epoch fence pending to abort under "
                f"(pending {self._pending_kafka_name()}, given {fence.state.kafka_name})")
        if fence.producer_id != self.producer_id or fence.producer_epoch < self.producer_epoch:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id}: fence {fence} is not of producer "
                f"{self.producer_id} epoch {self.producer_epoch}")
        self._pending_state = None
        self.producer_epoch = fence.producer_epoch
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        return self.prepare_abort_or_commit(_S.PREPARE_ABORT, now_ms)

    def prepare_increment_producer_epoch(self, new_txn_timeout_ms: int, expected_epoch: int | None,
                                         now_ms: int) -> TxnTransitMetadata | Literal[ErrorCode.PRODUCER_FENCED]:
        """InitProducerId on an idle id: the next epoch, into Empty (Kafka's
        prepareIncrementProducerEpoch). ``expected_epoch`` is the epoch the producer says it has
        (KIP-360, InitProducerId v3+), None from an older or new producer:

        - None: bump; the last epoch is forgotten (a new producer instance: no retry of the
          previous call can be told apart any more);
        - the current epoch, or any when there is no epoch yet: bump and remember the current
          as the last (a producer carrying on after an error);
        - the last epoch: a retry of a bump that succeeded; the same epochs again;
        - anything else: PRODUCER_FENCED.

        An exhausted epoch raises: the caller must rotate the producer id instead
        (``needs_producer_id_rotation``)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id}: no producer epoch left for producer {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        return self._prepare_transition_to(_S.EMPTY, self.producer_id, epoch, last_epoch, new_txn_timeout_ms,
                                           frozenset(), NO_TIMESTAMP, now_ms)

    def needs_producer_id_rotation(self, expected_epoch: int | None) -> bool:
        """InitProducerId on an idle id whose epochs are used up gets a new producer id, if the
        producer (if it says) has the current epoch (Kafka's prepareInitProducerIdTransit)."""
        return self.is_producer_epoch_exhausted and (expected_epoch is None or expected_epoch == self.producer_epoch)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        """A new producer id at epoch 0, into Empty (Kafka's prepareProducerIdRotation). With
        ``record_last_epoch`` (the producer sent its id and epoch) the old epoch is kept as the
        last, with the old id as ``last_producer_id``, so a retry of this call is recognised."""
        if self.has_pending_transaction:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id}: cannot rotate the producer id while a transaction "
                f"is {self._state.kafka_name}")
        last_epoch = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare_transition_to(_S.EMPTY, new_producer_id, 0, last_epoch, new_txn_timeout_ms,
                                           frozenset(), NO_TIMESTAMP, now_ms)

    def prepare_add_partitions(self, partitions: Iterable[TopicPartition], now_ms: int) -> TxnTransitMetadata:
        """AddPartitionsToTxn (and AddOffsetsToTxn's offsets partition): into Ongoing with these
        partitions too. The first add of a transaction starts it: its start time is now."""
        start = now_ms if self._state in (_S.EMPTY, _S.COMPLETE_ABORT, _S.COMPLETE_COMMIT) else self.txn_start_timestamp
        return self._prepare_transition_to(_S.ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                                           self.txn_timeout_ms, frozenset(self.topic_partitions).union(partitions),
                                           start, now_ms)

    def prepare_abort_or_commit(self, new_state: TransactionState, now_ms: int) -> TxnTransitMetadata:
        """EndTxn: into PrepareCommit or PrepareAbort, every field kept but the update time."""
        return self._prepare_transition_to(new_state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                                           self.txn_timeout_ms, frozenset(self.topic_partitions),
                                           self.txn_start_timestamp, now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """Every marker is written: CompleteCommit after PrepareCommit, else CompleteAbort, with
        no partitions. A fence that reached this far was written, so the failed-fence flag goes
        (as Kafka clears it here, at prepare)."""
        new_state = _S.COMPLETE_COMMIT if self._state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        return self._prepare_transition_to(new_state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                                           self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, now_ms)

    def prepare_dead(self) -> TxnTransitMetadata:
        """The id expired: its tombstone is written and, once it is, the id leaves the cache
        (a Dead transition is never completed)."""
        return self._prepare_transition_to(_S.DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                                           self.txn_timeout_ms, frozenset(), self.txn_start_timestamp,
                                           self.txn_last_update_timestamp)

    def _prepare_transition_to(self, new_state: TransactionState, producer_id: int, epoch: int, last_epoch: int,
                               txn_timeout_ms: int, partitions: frozenset[TopicPartition], txn_start_timestamp: int,
                               now_ms: int) -> TxnTransitMetadata:
        if self._pending_state is not None:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id}: preparing {new_state.kafka_name} while "
                f"{self._pending_state.kafka_name} is pending")
        if producer_id < 0:
            raise ValueError(f"illegal new producer id {producer_id}")
        # a new id has no epoch (NO_PRODUCER_EPOCH) and may keep none until it dies
        if new_state is not _S.DEAD and epoch < 0:
            raise ValueError(f"illegal new producer epoch {epoch}")
        if self._state not in VALID_PREVIOUS[new_state]:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id} must be in one of "
                f"{sorted(s.kafka_name for s in VALID_PREVIOUS[new_state])} to move to {new_state.kafka_name}, "
                f"but is in {self._state.kafka_name}")
        self._pending_state = new_state
        return TxnTransitMetadata(producer_id, self.producer_id, epoch, last_epoch, txn_timeout_ms, new_state,
                                  partitions, txn_start_timestamp, now_ms)

    # -- completing a change -------------------------------------------------------------------

    def cancel_transition(self) -> None:
        """The pending change was not written (its append failed, or a tombstone's): forget it,
        as Kafka resets the pending state, so the client may retry."""
        self._pending_state = None

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """The log has ``transit``: apply it (Kafka's completeTransitionTo). It must be the
        pending change and consistent with the metadata: the epoch the same, or (into Empty) a
        bump by one or a new producer id at 0; partitions only added while Ongoing and
        unchanged into Prepare*; the timeout changed only by InitProducerId. Anything else is
        IllegalTransactionStateError, the metadata unchanged."""
        to_state = self._pending_state
        if to_state is None:
            raise IllegalTransactionStateError(
                f"transactional id {self.transactional_id}: completing {transit.state.kafka_name} with no change pending")
        if to_state is not transit.state:
            self._illegal(transit)
        if to_state is _S.EMPTY:  # InitProducerId
            if ((self.producer_epoch != transit.producer_epoch and not self._valid_producer_epoch_bump(transit))
                    or transit.topic_partitions or transit.txn_start_timestamp != NO_TIMESTAMP):
                self._illegal(transit)
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif to_state is _S.ONGOING:  # AddPartitionsToTxn
            if (not self._valid_producer_epoch(transit) or not self.topic_partitions <= transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms):
                self._illegal(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions |= transit.topic_partitions
        elif to_state in (_S.PREPARE_ABORT, _S.PREPARE_COMMIT):  # EndTxn
            if (not self._valid_producer_epoch(transit) or self.topic_partitions != transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or self.txn_start_timestamp != transit.txn_start_timestamp):
                self._illegal(transit)
        elif to_state in (_S.COMPLETE_ABORT, _S.COMPLETE_COMMIT):  # the markers are written
            if (not self._valid_producer_epoch(transit) or self.txn_timeout_ms != transit.txn_timeout_ms
                    or transit.txn_start_timestamp == NO_TIMESTAMP):
                self._illegal(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions.clear()
        else:
            # PrepareEpochFence is replaced by PrepareAbort before any write
            # (prepare_epoch_fence_abort); Dead ends in removal from the cache, not in a state
            self._illegal(transit)
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self._pending_state = None
        self._state = to_state

    def _valid_producer_epoch(self, transit: TxnTransitMetadata) -> bool:
        return transit.producer_epoch == self.producer_epoch and transit.producer_id == self.producer_id

    def _valid_producer_epoch_bump(self, transit: TxnTransitMetadata) -> bool:
        return (transit.producer_epoch == self.producer_epoch + 1
                or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))

    def _illegal(self, transit: TxnTransitMetadata) -> NoReturn:
        raise IllegalTransactionStateError(
            f"{self!r}: cannot complete the transition to {transit}")

    def _pending_kafka_name(self) -> str:
        return "none" if self._pending_state is None else self._pending_state.kafka_name


class _NewProducerIdNeeded(enum.Enum):
    """InitProducerId needs a new producer id before it can go on (``prepare_init_producer_id``)."""

    NEW_PRODUCER_ID_NEEDED = "new producer id needed"


NEW_PRODUCER_ID_NEEDED = _NewProducerIdNeeded.NEW_PRODUCER_ID_NEEDED

InitProducerIdOutcome: TypeAlias = TxnTransitMetadata | ErrorCode | Literal[_NewProducerIdNeeded.NEW_PRODUCER_ID_NEEDED]


def accepts_expected_producer(txn: TransactionMetadata, expected: ProducerIdAndEpoch) -> bool:
    """Kafka's isValidProducerId (KIP-360): a producer that names its id and epoch is fenced
    unless the id was just created (no epoch yet: it recovers from UNKNOWN_PRODUCER_ID), it
    names the current producer id (its epoch is checked by the bump), or it names the previous
    id with an exhausted epoch (a retry of the rotation whose answer it lost)."""
    return (txn.producer_epoch == NO_PRODUCER_EPOCH or expected.producer_id == txn.producer_id
            or (expected.producer_id == txn.last_producer_id and is_epoch_exhausted(expected.epoch)))


def prepare_init_producer_id(txn: TransactionMetadata, txn_timeout_ms: int, expected: ProducerIdAndEpoch | None,
                             now_ms: int, new_producer_id: int | None = None) -> InitProducerIdOutcome:
    """InitProducerId of a transactional producer (Kafka's prepareInitProducerIdTransit), once
    the id's metadata exists: the change to write, or the error to answer with, or
    NEW_PRODUCER_ID_NEEDED: the epochs are used up; the caller gets an id and calls again with
    it (this checks everything again, as the metadata may have changed meanwhile).

    A PrepareEpochFence transit means an Ongoing transaction must first be aborted under the
    fenced epoch (``prepare_epoch_fence_abort``); the client is then told CONCURRENT_TRANSACTIONS
    and retries, which bumps again (or rotates the producer id if that fence used up the epochs)."""
    if txn.pending_transition_in_progress:
        return ErrorCode.CONCURRENT_TRANSACTIONS
    if expected is not None and not accepts_expected_producer(txn, expected):
        return ErrorCode.PRODUCER_FENCED
    state = txn.state
    if state in (_S.PREPARE_ABORT, _S.PREPARE_COMMIT):
        return ErrorCode.CONCURRENT_TRANSACTIONS
    if state in (_S.COMPLETE_ABORT, _S.COMPLETE_COMMIT, _S.EMPTY):
        expected_epoch = None if expected is None else expected.epoch
        if txn.needs_producer_id_rotation(expected_epoch):
            if new_producer_id is None:
                return NEW_PRODUCER_ID_NEEDED
            return txn.prepare_producer_id_rotation(new_producer_id, txn_timeout_ms, now_ms, expected is not None)
        return txn.prepare_increment_producer_epoch(txn_timeout_ms, expected_epoch, now_ms)
    if state is _S.ONGOING:
        return txn.prepare_fence_producer_epoch()
    raise IllegalTransactionStateError(
        f"transactional id {txn.transactional_id} found in state {state.kafka_name}, which it never should be in")
