"""Where transactional ids live: Kafka's TransactionStateManager.

A transactional id belongs to one partition of the internal topic `__transaction_state` (Java's
String.hashCode, coordinator/partitioning.py, so the mapping is Apache Kafka's), and the broker
leading that partition is the id's transaction coordinator. This module keeps the ids of the
partitions this broker leads, reads a partition back when the broker becomes its leader, drops
its ids when it stops leading (the mechanism the group coordinator shares:
coordinator/partition_loader.py), and writes each change of an id as one record acknowledged
only once the whole ISR has it (acks=all), before anything is done on its strength: a
PrepareCommit is in the log before any marker is sent, so a coordinator that takes over replays
it and sends the markers itself.

The coordinator epoch that markers carry is the partition's leader epoch here: a coordinator
elected later has a higher one, so leaders refuse the markers of a deposed coordinator
(producer_state.validate_marker).
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from odradek.common.clock import Clock
from odradek.common.internal_topics import TRANSACTION_STATE_TOPIC_NAME
from odradek.common.metadata import TopicPartition
from odradek.coordinator.partition_loader import OwnedPartition, PartitionLoader
from odradek.coordinator.partitioning import partition_for
from odradek.coordinator.scheduler import Scheduler
from odradek.coordinator.seams import CoordinatorPartition
from odradek.coordinator.transaction import transaction_log
from odradek.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.coordinator.transaction.manager")

TRANSACTION_STATE_TOPIC = TRANSACTION_STATE_TOPIC_NAME

#: a failed write of an id's change as the transaction APIs report it (Kafka's
#: TransactionStateManager.appendTransactionToLog): retriable for the client either way
TXN_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


@dataclass(frozen=True, slots=True)
class CoordinatorEpochAndMetadata:
    """An id's metadata and the epoch of the coordinator holding it (what markers carry)."""

    coordinator_epoch: int
    metadata: TransactionMetadata


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    """One transactional id as ListTransactions answers it."""

    transactional_id: str
    producer_id: int
    state: TransactionState


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """ListTransactions' answer from this coordinator: the error, the state names it does
    not know (which match nothing), and the ids that pass the filters."""

    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[ListedTransaction, ...] = ()


class TransactionStateManager:
    def __init__(self, partition_count: Callable[[], int],
                 get_partition: Callable[[TopicPartition], CoordinatorPartition | None],
                 commit_timeout_ms: int, max_batch_bytes: int, clock: Clock, scheduler: Scheduler) -> None:
        """``partition_count``: how many partitions __transaction_state has (the topic's own
        count once known, so the id -> partition mapping is the one FindCoordinator answers)."""
        self._partition_count = partition_count
        self._clock = clock
        self._partitions = PartitionLoader(TRANSACTION_STATE_TOPIC, get_partition, scheduler, commit_timeout_ms,
                                           max_batch_bytes, log, "transaction")
        # partition index -> transactional id -> metadata, for the partitions this broker leads
        self._ids: dict[int, dict[str, TransactionMetadata]] = {}

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self._partition_count())

    # -- which ids are ours --------------------------------------------------------------------

    def owner_error(self, transactional_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR unless this broker leads the id's partition, then
        COORDINATOR_LOAD_IN_PROGRESS until it has read it back; None when it can answer."""
        owned = self._partitions.owned(self.partition_for(transactional_id))
        if owned is None:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if owned.is_loading else None

    def get(self, transactional_id: str) -> CoordinatorEpochAndMetadata | None:
        """The id's metadata and coordinator epoch, None if it has none (check owner_error first)."""
        index = self.partition_for(transactional_id)
        owned = self._partitions.owned(index)
        txn = self._ids.get(index, {}).get(transactional_id)
        if owned is None or txn is None:
            return None
        return CoordinatorEpochAndMetadata(owned.leader_epoch, txn)

    def put_if_absent(self, txn: TransactionMetadata) -> CoordinatorEpochAndMetadata | None:
        """Add a new id's metadata, or get the one already there; None if the partition is not
        (or no longer) ours."""
        index = self.partition_for(txn.transactional_id)
        owned = self._partitions.owned(index)
        if owned is None or owned.is_loading:
            return None
        kept = self._ids.setdefault(index, {}).setdefault(txn.transactional_id, txn)
        return CoordinatorEpochAndMetadata(owned.leader_epoch, kept)

    def local_ids(self) -> list[CoordinatorEpochAndMetadata]:
        """Every id of every loaded partition (the timeout and expiry checks walk them)."""
        out: list[CoordinatorEpochAndMetadata] = []
        for index, ids in self._ids.items():
            owned = self._partitions.owned(index)
            if owned is not None and not owned.is_loading:
                out.extend(CoordinatorEpochAndMetadata(owned.leader_epoch, txn) for txn in ids.values())
        return out

    def is_current(self, transactional_id: str, txn: TransactionMetadata) -> bool:
        """Whether ``txn`` is still the id's metadata here: the partition was not lost (and
        perhaps loaded again as new objects) meanwhile."""
        current = self.get(transactional_id)
        return current is not None and current.metadata is txn

    # -- what operators see (ListTransactions; read-only) ---------------------------------------

    def list_transactions(self, producer_ids: AbstractSet[int], state_names: Iterable[str], duration_ms: int,
                          now_ms: int) -> TransactionListing:
        """Kafka's listTransactionStates: every id of the partitions this broker coordinates,
        kept to those of ``producer_ids`` and in one of ``state_names`` where these are not
        empty, and (``duration_ms`` 0 or more, ListTransactions v1) to those whose transaction
        started more than ``duration_ms`` before ``now_ms``. A state name Kafka does not know is
        answered back as unknown and matches nothing; a Dead id (being expired) is never listed.
        COORDINATOR_LOAD_IN_PROGRESS while any partition is still being read back."""
        if self._partitions.any_loading():
            return TransactionListing(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        names = list(dict.fromkeys(state_names))  # Kafka takes the filters as a set
        states = {state for state in map(TransactionState.from_name, names) if state is not None}
        unknown = tuple(name for name in names if TransactionState.from_name(name) is None)

        def wanted(txn: TransactionMetadata) -> bool:
            return (txn.state is not TransactionState.DEAD
                    and (not producer_ids or txn.producer_id in producer_ids)
                    and (not names or txn.state in states)
                    and (duration_ms < 0 or now_ms - txn.txn_start_timestamp > duration_ms))

        listed = tuple(ListedTransaction(held.metadata.transactional_id, held.metadata.producer_id,
                                         held.metadata.state)
                       for held in self.local_ids() if wanted(held.metadata))
        return TransactionListing(ErrorCode.NONE, unknown, listed)

    # -- leadership of __transaction_state partitions ------------------------------------------

    def load(self, index: int, leader_epoch: int,
             on_loaded: Callable[[list[CoordinatorEpochAndMetadata]], None]) -> None:
        """Became leader of partition ``index``: read its ids back (Kafka's
        loadTransactionsForTxnTopicPartition); ``on_loaded`` gets them, to finish what each was
        in the middle of (markers of a PrepareCommit or PrepareAbort)."""
        self._partitions.load(index, leader_epoch, functools.partial(self._load_ids, on_loaded=on_loaded))

    def unload(self, index: int) -> list[TransactionMetadata]:
        """No longer leader of partition ``index``: its ids, now dropped (Kafka's
        removeTransactionsForTxnTopicPartition). Markers being sent for them stop at their next
        step (is_current), and the new coordinator sends them again."""
        if not self._partitions.unload(index):
            return []
        gone = list(self._ids.pop(index, {}).values())
        if gone:
            log.info("%s partition %d: unloaded %d transactional ids", TRANSACTION_STATE_TOPIC, index, len(gone))
        return gone

    async def _load_ids(self, owned: OwnedPartition,
                        on_loaded: Callable[[list[CoordinatorEpochAndMetadata]], None]) -> None:
        started = self._clock.monotonic()
        latest, records = await self._partitions.read_latest(owned.index)
        ids = _read_ids(latest)
        self._ids[owned.index] = ids
        log.log(logging.INFO if records else logging.DEBUG,
                "%s partition %d (leader epoch %d): loaded %d transactional ids from %d records in %.0f ms",
                TRANSACTION_STATE_TOPIC, owned.index, owned.leader_epoch, len(ids), records,
                (self._clock.monotonic() - started) * 1000)
        on_loaded([CoordinatorEpochAndMetadata(owned.leader_epoch, txn) for txn in ids.values()])

    # -- writes --------------------------------------------------------------------------------

    async def append(self, txn: TransactionMetadata, transit: TxnTransitMetadata) -> ErrorCode:
        """Write ``transit`` (prepared on ``txn``, with no await since) and wait for the ISR;
        then complete the transition in memory (Kafka's appendTransactionToLog). On a failed
        write the pending change is cancelled and the mapped error returned; NOT_COORDINATOR if
        the partition changed hands meanwhile (the metadata now in memory, if any, is another
        coordinator's reading and is left alone)."""
        index = self.partition_for(txn.transactional_id)
        owned = self._partitions.owned(index)
        record = (transaction_log.key_bytes(txn.transactional_id), transaction_log.value_bytes(transit))
        error = await self._partitions.append(index, [record], durable=True)
        if self._partitions.owned(index) is not owned or not self.is_current(txn.transactional_id, txn):
            return ErrorCode.NOT_COORDINATOR
        if error != ErrorCode.NONE:
            txn.cancel_transition()
            return TXN_WRITE_ERRORS.get(error, error)
        txn.complete_transition(transit)
        return ErrorCode.NONE

    async def remove(self, txn: TransactionMetadata) -> ErrorCode:
        """Expire an idle id (Kafka's removeExpiredTransactionalIds): its tombstone is written,
        then it leaves the cache if nothing happened to it meanwhile."""
        transit = txn.prepare_dead()
        index = self.partition_for(txn.transactional_id)
        error = await self._partitions.append(index, [transaction_log.tombstone(txn.transactional_id)], durable=True)
        if not self.is_current(txn.transactional_id, txn):
            return ErrorCode.NOT_COORDINATOR
        if error != ErrorCode.NONE or txn.pending_state is not TransactionState.DEAD \
                or txn.producer_epoch != transit.producer_epoch:
            txn.cancel_transition()
            return TXN_WRITE_ERRORS.get(error, error)
        del self._ids[index][txn.transactional_id]
        return ErrorCode.NONE


def _read_ids(latest: dict[bytes, bytes | None]) -> dict[str, TransactionMetadata]:
    """The ids of a partition read back: the newest record of each (a tombstone: expired)."""
    ids: dict[str, TransactionMetadata] = {}
    for key, value in latest.items():
        try:
            transactional_id = transaction_log.read_key(key)
            stored = transaction_log.read_value(value)
        except transaction_log.UnknownRecordError as exc:
            log.warning("skipping an unreadable %s record: %s", TRANSACTION_STATE_TOPIC, exc)
            continue
        if stored is not None:
            ids[transactional_id] = transaction_log.metadata_from_log(transactional_id, stored)
    return ids

