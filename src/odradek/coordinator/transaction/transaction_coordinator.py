"""The transaction coordinator: Kafka's TransactionCoordinator (KIP-98, transaction version 1).

A transactional producer asks the coordinator of its transactional.id (FindCoordinator key
type 1) for its producer id and epoch (InitProducerId, which fences every older instance of it
and aborts what it left open), names each partition before writing to it (AddPartitionsToTxn,
AddOffsetsToTxn) and ends the transaction (EndTxn). The end is two-phase, each phase a record in
`__transaction_state` written before it acts: PrepareCommit or PrepareAbort (then the client is
answered), COMMIT or ABORT markers written by every partition's leader (WriteTxnMarkers,
through the broker's TxnMarkerWriter), then CompleteCommit or CompleteAbort. A coordinator that
takes over a partition finds the Prepare record and sends the markers again; leaders write a
marker twice harmlessly and refuse one from a deposed coordinator (its epoch is lower).

Two background checks, as Kafka's: transactions open longer than their timeout are aborted,
their producers fenced by an epoch bump (transaction.abort.timed.out.transaction.cleanup
.interval.ms); ids idle for transactional.id.expiration.ms are removed
(transaction.remove.expired.transaction.cleanup.interval.ms).

Every change is prepared on the id's metadata and its write started with no await between
(TransactionMetadata's pending state): a second request for the same id meanwhile gets
CONCURRENT_TRANSACTIONS, as Kafka's lock gives.
"""
from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

from odradek.common.clock import Clock
from odradek.common.metadata import TopicPartition
from odradek.coordinator.scheduler import BackgroundTasks, Scheduler, Timer
from odradek.coordinator.seams import CoordinatorPartition
from odradek.coordinator.transaction.transaction_metadata import (
    NEW_PRODUCER_ID_NEEDED,
    IllegalTransactionStateError,
    ProducerIdAndEpoch,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    prepare_init_producer_id,
)
from odradek.coordinator.transaction.transaction_state_manager import (
    TRANSACTION_STATE_TOPIC,
    CoordinatorEpochAndMetadata,
    TransactionListing,
    TransactionStateManager,
)
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.coordinator.transaction")

_S = TransactionState

#: marker answers after which this coordinator stops sending (a newer one took over, or the
#: producer moved on): Kafka's TransactionMarkerRequestCompletionHandler aborts sending on these
_MARKERS_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """The broker's transaction settings (Kafka's names and defaults)."""

    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    #: between rounds of WriteTxnMarkers to partitions that answered a retriable error
    marker_retry_backoff_ms: int = 100
    # how long an AddPartitionsToTxn (or AddOffsetsToTxn) that finds the producer's previous
    # transaction still completing waits for it before answering CONCURRENT_TRANSACTIONS
    add_partitions_wait_ms: int = 1_000


class TxnMarkerWriter(Protocol):
    """The broker's part of sending markers (Kafka's TransactionMarkerChannelManager): one
    WriteTxnMarkers per leader broker, answered per partition."""

    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: set[TopicPartition]) -> Awaitable[dict[TopicPartition, ErrorCode]]: ...

    def partitions_deleted(self, partitions: set[TopicPartition]) -> Awaitable[set[TopicPartition]]:
        """Those of ``partitions`` known to be gone (topic deleted, or partition removed), in
        one read: their markers are not needed. A partition this broker's metadata does not
        know yet (a broker just started) is not gone: asked of ZooKeeper, not the cache, since
        taking it for deleted would complete a commit without its markers."""
        ...


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One transactional id as DescribeTransactions answers it: a copy, taken at once, of
    what the coordinator holds (``state`` None with an error). ``partitions``: those of the
    open transaction; while it is being completed, those whose marker is not yet written."""

    transactional_id: str
    error: ErrorCode
    state: TransactionState | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    txn_timeout_ms: int = 0
    txn_start_timestamp: int = -1
    partitions: frozenset[TopicPartition] = frozenset()


class TransactionCoordinator:
    def __init__(self, manager: TransactionStateManager, config: TransactionConfig, clock: Clock,
                 scheduler: Scheduler, new_producer_id: Callable[[], Awaitable[int]],
                 markers: TxnMarkerWriter) -> None:
        self.manager = manager
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self._new_producer_id = new_producer_id
        self._markers = markers
        self._tasks = BackgroundTasks()
        self._timers: dict[str, Timer] = {}  # each background check's next run
        # transactions aborted, by why: "client" (EndTxn), "timeout", "fenced" (a new instance)
        self.aborts: collections.Counter[str] = collections.Counter()
        self.active = True
        # per transactional id, what add_partitions waits on while the previous transaction
        # completes: done when it completed, or this coordinator stopped being its
        self._ended: dict[str, asyncio.Future[None]] = {}

    # -- InitProducerId ------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, txn_timeout_ms: int,
                               expected: ProducerIdAndEpoch | None) -> InitProducerIdResult:
        """Kafka's handleInitProducerId for a transactional producer: a new id for a new
        transactional.id, else the next epoch of its id (fencing older instances; an open
        transaction of theirs is aborted first, and the caller told CONCURRENT_TRANSACTIONS
        to retry), or a new id once the epochs are used up."""
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        if not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        error = self.manager.owner_error(transactional_id)
        if error is not None:
            return InitProducerIdResult(error)
        held = self.manager.get(transactional_id)
        if held is None:
            producer_id = await self._new_producer_id()
            fresh = TransactionMetadata(transactional_id, producer_id, -1, txn_timeout_ms,
                                        now_ms=self.clock.milliseconds())
            held = self.manager.put_if_absent(fresh)
            if held is None:
                return InitProducerIdResult(self.manager.owner_error(transactional_id) or ErrorCode.NOT_COORDINATOR)
        txn = held.metadata
        outcome = prepare_init_producer_id(txn, txn_timeout_ms, expected, self.clock.milliseconds())
        if outcome is NEW_PRODUCER_ID_NEEDED:
            new_id = await self._new_producer_id()
            if not self.manager.is_current(transactional_id, txn):
                return InitProducerIdResult(ErrorCode.NOT_COORDINATOR)
            outcome = prepare_init_producer_id(txn, txn_timeout_ms, expected, self.clock.milliseconds(), new_id)
        if isinstance(outcome, ErrorCode):
            return InitProducerIdResult(outcome)
        assert isinstance(outcome, TxnTransitMetadata)
        if outcome.state is _S.PREPARE_EPOCH_FENCE:
            # an older instance left a transaction open: abort it under a bumped epoch (which
            # fences that instance), and have this one retry once the abort is under way
            self._end_fenced(txn, outcome)
            self.aborts["fenced"] += 1
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        error = await self._append(txn, outcome)
        if error != ErrorCode.NONE:
            return InitProducerIdResult(error)
        return InitProducerIdResult(ErrorCode.NONE, outcome.producer_id, outcome.producer_epoch)

    # -- AddPartitionsToTxn, AddOffsetsToTxn ---------------------------------------------------

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> ErrorCode:
        """Kafka's handleAddPartitionsToTransaction: the partitions join the producer's
        transaction (which this starts, if none is open); written before the client may write
        to them, so the coordinator knows every partition that needs a marker."""
        wanted = frozenset(partitions)
        error, txn = self._txn_of(transactional_id, producer_id, producer_epoch)
        if error is not None:
            return error
        assert txn is not None
        # the previous transaction's markers and Complete record are being written, or another
        # write for this id is (an AddOffsetsToTxn sent together with it): wait for them here,
        # up to add_partitions_wait_ms, rather than have the client retry (librdkafka retries
        # 20-25 ms later; at a commit every 100 ms that pause cost the producer several percent)
        deadline_ms = self.clock.milliseconds() + self.config.add_partitions_wait_ms
        while txn.pending_transition_in_progress or txn.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            left_ms = deadline_ms - self.clock.milliseconds()
            if left_ms <= 0:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            await self._wait_ended(transactional_id, left_ms)
            error, txn = self._txn_of(transactional_id, producer_id, producer_epoch)
            if error is not None:
                return error
            assert txn is not None
        if txn.state is _S.ONGOING and wanted <= txn.topic_partitions:
            return ErrorCode.NONE  # a retry: nothing new to write
        return await self._append(txn, txn.prepare_add_partitions(wanted, self.clock.milliseconds()))

    def verify_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         tp: TopicPartition) -> ErrorCode:
        """KIP-890 part 1's check, asked by a partition leader before it appends a
        transactional batch: NONE only if the producer's current transaction is open and
        names ``tp``. A late batch of a transaction already ended (KAFKA-17754) is refused,
        so it can never open a transaction that no marker would end."""
        error, txn = self._txn_of(transactional_id, producer_id, producer_epoch)
        if error is not None:
            return error
        assert txn is not None
        if txn.state is not _S.ONGOING or tp not in txn.topic_partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def _txn_of(self, transactional_id: str, producer_id: int,
                producer_epoch: int) -> tuple[ErrorCode | None, TransactionMetadata | None]:
        """The id's metadata if the producer may act on it (Kafka's checks, in its order)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        error = self.manager.owner_error(transactional_id)
        if error is not None:
            return error, None
        held = self.manager.get(transactional_id)
        if held is None or held.metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if held.metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED, None
        return None, held.metadata

    # -- ListTransactions, DescribeTransactions (KIP-664; read-only) -------------------------

    def list_transactions(self, producer_ids: AbstractSet[int] = frozenset(), state_names: Iterable[str] = (),
                          duration_ms: int = -1) -> TransactionListing:
        """Kafka's handleListTransactions: the ids this broker coordinates, filtered
        (TransactionStateManager.list_transactions); COORDINATOR_NOT_AVAILABLE once shut down."""
        if not self.active:
            return TransactionListing(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self.manager.list_transactions(producer_ids, state_names, duration_ms, self.clock.milliseconds())

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """Kafka's handleDescribeTransactions, for one id: COORDINATOR_NOT_AVAILABLE once shut
        down, INVALID_REQUEST for an empty id, NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
        as for the producer's requests, TRANSACTIONAL_ID_NOT_FOUND for an id this coordinator
        does not hold (or one being expired)."""
        if not self.active:
            return TransactionDescription(transactional_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not transactional_id:
            return TransactionDescription(transactional_id, ErrorCode.INVALID_REQUEST)
        error = self.manager.owner_error(transactional_id)
        if error is not None:
            return TransactionDescription(transactional_id, error)
        held = self.manager.get(transactional_id)
        if held is None or held.metadata.state is _S.DEAD:
            return TransactionDescription(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        txn = held.metadata
        return TransactionDescription(transactional_id, ErrorCode.NONE, txn.state, txn.producer_id,
                                      txn.producer_epoch, txn.txn_timeout_ms, txn.txn_start_timestamp,
                                      frozenset(txn.topic_partitions))

    # -- EndTxn --------------------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              commit: bool) -> ErrorCode:
        """Kafka's handleEndTransaction from a client: PrepareCommit or PrepareAbort written,
        the client answered, then the markers and the Complete record in the background. A
        retry of an end already done answers NONE; the other end of it INVALID_TXN_STATE."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        error = self.manager.owner_error(transactional_id)
        if error is not None:
            return error
        held = self.manager.get(transactional_id)
        if held is None or held.metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        txn = held.metadata
        if producer_epoch != txn.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = txn.state
        if state is _S.ONGOING:
            prepared = txn.prepare_abort_or_commit(_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT,
                                                   self.clock.milliseconds())
            error = await self._prepare_and_send(txn, prepared)
            if not commit and error == ErrorCode.NONE:
                self.aborts["client"] += 1
            return error
        if state is (_S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT):
            return ErrorCode.NONE
        if state is (_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return ErrorCode.INVALID_TXN_STATE  # Empty, or the other end of one under way or done

    def _end_fenced(self, txn: TransactionMetadata, fence: TxnTransitMetadata) -> None:
        """Abort ``txn``'s open transaction under the bumped epoch ``fence`` carries (an
        InitProducerId of a newer instance, or the transaction's timeout): PrepareAbort is
        started at once, its markers follow in the background."""
        aborting = txn.prepare_epoch_fence_abort(fence, self.clock.milliseconds())
        self._tasks.spawn(self._fenced_abort(txn, aborting), f"aborting {txn.transactional_id}")

    async def _fenced_abort(self, txn: TransactionMetadata, aborting: TxnTransitMetadata) -> None:
        error = await self._prepare_and_send(txn, aborting)
        if error != ErrorCode.NONE:
            txn.has_failed_epoch_fence = True
            log.info("transactional id %s: the fencing abort was not written (%s); tried again at the next "
                     "check", txn.transactional_id, error.name)

    async def _prepare_and_send(self, txn: TransactionMetadata, prepared: TxnTransitMetadata) -> ErrorCode:
        """Write PrepareCommit/PrepareAbort; once it is in the log, send the markers."""
        error = await self._append(txn, prepared)
        if error == ErrorCode.NONE:
            held = self.manager.get(txn.transactional_id)
            if held is not None and held.metadata is txn:
                self._send_markers(held)
        return error

    # -- markers -------------------------------------------------------------------------------

    def _send_markers(self, held: CoordinatorEpochAndMetadata) -> None:
        txn = held.metadata
        self._tasks.spawn(self._complete(held.coordinator_epoch, txn),
                          f"markers of {txn.transactional_id}")

    async def _complete(self, coordinator_epoch: int, txn: TransactionMetadata) -> None:
        """Markers to every partition of the transaction, then the Complete record (Kafka's
        TransactionMarkerChannelManager and its completion handler). Stops, leaving the work to
        whoever holds the id now, if this coordinator loses the partition or is fenced."""
        try:
            await self._markers_then_complete(coordinator_epoch, txn)
        finally:
            self._wake(txn.transactional_id)

    async def _markers_then_complete(self, coordinator_epoch: int, txn: TransactionMetadata) -> None:
        transactional_id = txn.transactional_id
        commit = txn.state is _S.PREPARE_COMMIT
        producer_id, producer_epoch = txn.producer_id, txn.producer_epoch
        pending = set(txn.topic_partitions)
        while pending:
            if not self.active or not self.manager.is_current(transactional_id, txn):
                return
            try:
                answers = await self._markers.write_markers(producer_id, producer_epoch, commit,
                                                            coordinator_epoch, set(pending))
            except Exception as exc:  # noqa: BLE001 - a transaction must never be left half completed
                log.warning("transactional id %s: sending markers failed (%r); trying again", transactional_id, exc)
                answers = {}
            deleted = await self._deleted({tp for tp, e in answers.items()
                                           if e == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
            for tp, error in answers.items():
                if error == ErrorCode.NONE or tp in deleted:
                    pending.discard(tp)
                    txn.remove_partition(tp)
                elif error in _MARKERS_FENCED:
                    log.warning("transactional id %s: %s marker for %s refused with %s: this coordinator "
                                "(epoch %d) is no longer the transaction's; stopping", transactional_id,
                                "COMMIT" if commit else "ABORT", tp, error.name, coordinator_epoch)
                    return
            if pending:
                await self._sleep(self.config.marker_retry_backoff_ms)
        await self._write_complete(txn)

    async def _deleted(self, unknown: set[TopicPartition]) -> set[TopicPartition]:
        """Of the partitions a round answered UNKNOWN_TOPIC_OR_PARTITION, those known gone."""
        if not unknown:
            return set()
        try:
            deleted = await self._markers.partitions_deleted(unknown)
        except Exception as exc:  # noqa: BLE001 - not known to be gone: asked again next round
            log.info("cannot tell whether %s are deleted (%r); their markers are sent again", sorted(unknown), exc)
            return set()
        if deleted:
            log.info("%s deleted: their transaction markers are not needed", sorted(deleted))
        return deleted

    async def _write_complete(self, txn: TransactionMetadata) -> None:
        """CompleteCommit/CompleteAbort, retried while this coordinator holds the id (a write
        that timed out is tried again; Kafka's TransactionMarkerChannelManager does the same)."""
        while self.active and self.manager.is_current(txn.transactional_id, txn):
            if txn.pending_transition_in_progress:
                await self._sleep(self.config.marker_retry_backoff_ms)
                continue
            complete = txn.prepare_complete(self.clock.milliseconds())
            error = await self._append(txn, complete)
            if error in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
                return
            log.info("transactional id %s: writing %s failed (%s); trying again", txn.transactional_id,
                     complete.state.kafka_name, error.name)
            await self._sleep(self.config.marker_retry_backoff_ms)

    async def _append(self, txn: TransactionMetadata, transit: TxnTransitMetadata) -> ErrorCode:
        """``manager.append``, then the id's waiters (``_wait_ended``) look again: a write
        they waited behind is done, whichever it was. Woken only by the end of a transaction,
        an AddPartitionsToTxn that arrived while the AddOffsetsToTxn sent with it was being
        written waited its whole second (the fault run's copier: 1,005 ms per transaction)."""
        try:
            return await self.manager.append(txn, transit)
        finally:
            self._wake(txn.transactional_id)

    async def _wait_ended(self, transactional_id: str, timeout_ms: float) -> None:
        """Until a write for the id ended (``_append``) or its transaction's completion did
        (or this coordinator stopped completing it), at most ``timeout_ms``."""
        ended = self._ended.get(transactional_id)
        if ended is None:
            ended = self._ended[transactional_id] = asyncio.get_running_loop().create_future()
        timer = self.scheduler.call_later(timeout_ms, lambda: self._wake(transactional_id, ended))
        try:
            await asyncio.shield(ended)
        finally:
            timer.cancel()

    def _wake(self, transactional_id: str, ended: asyncio.Future[None] | None = None) -> None:
        """The waiters on the id's transaction (``ended``: only if still that one)."""
        current = self._ended.get(transactional_id)
        if current is None or (ended is not None and current is not ended):
            return
        del self._ended[transactional_id]
        if not current.done():
            current.set_result(None)

    async def _sleep(self, ms: float) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not done.done():
                done.set_result(None)
        self.scheduler.call_later(ms, wake)
        await done

    # -- background checks ---------------------------------------------------------------------

    def start(self) -> None:
        """Schedule the timeout and expiry checks."""
        self._every(self.config.abort_timed_out_transaction_cleanup_interval_ms, self.abort_timed_out)
        self._every(self.config.remove_expired_transaction_cleanup_interval_ms, self.remove_expired)

    def _every(self, interval_ms: int, check: Callable[[], object]) -> None:
        name = getattr(check, "__name__", repr(check))

        def run() -> None:
            if self.active:
                check()
                self._timers[name] = self.scheduler.call_later(interval_ms, run)
        self._timers[name] = self.scheduler.call_later(interval_ms, run)

    def abort_timed_out(self) -> int:
        """Kafka's abortTimedOutTransactions: each transaction open past its timeout is aborted
        under a bumped epoch, so its producer is fenced (its next request gets
        PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH at a leader). How many were started."""
        now = self.clock.milliseconds()
        started = 0
        for held in self.manager.local_ids():
            txn = held.metadata
            if not txn.is_timed_out(now):
                continue
            try:
                fence = txn.prepare_fence_producer_epoch()
            except IllegalTransactionStateError as exc:
                log.warning("transactional id %s: cannot fence the timed-out transaction: %s", txn.transactional_id, exc)
                continue
            log.info("transactional id %s: transaction of producer %d open for %d ms, past its timeout of %d ms: "
                     "aborting it and fencing the producer", txn.transactional_id, txn.producer_id,
                     now - txn.txn_start_timestamp, txn.txn_timeout_ms)
            self._end_fenced(txn, fence)
            self.aborts["timeout"] += 1
            started += 1
        return started

    def open_transactions(self) -> int:
        """Transactions coordinated here that are open or being completed (for the metrics)."""
        return sum(held.metadata.has_pending_transaction for held in self.manager.local_ids())

    def remove_expired(self) -> int:
        """Kafka's removeExpiredTransactionalIds: ids idle for transactional.id.expiration.ms
        are removed (a tombstone each). How many removals were started."""
        now = self.clock.milliseconds()
        expired = [held.metadata for held in self.manager.local_ids()
                   if held.metadata.is_expired(now, self.config.transactional_id_expiration_ms)]
        for txn in expired:
            self._tasks.spawn(self.manager.remove(txn), f"expiring {txn.transactional_id}")
        return len(expired)

    # -- __transaction_state partitions coming and going ---------------------------------------

    def on_leadership_change(self, led: Iterable[CoordinatorPartition],
                             not_led: Iterable[CoordinatorPartition]) -> None:
        """Coordination moves with the leadership of the __transaction_state partitions."""
        for partition in led:
            if partition.tp.topic == TRANSACTION_STATE_TOPIC:
                self.on_election(partition.tp.partition, partition.leader_epoch)
        for partition in not_led:
            if partition.tp.topic == TRANSACTION_STATE_TOPIC:
                self.on_resignation(partition.tp.partition)

    def on_election(self, index: int, leader_epoch: int) -> None:
        self.manager.load(index, leader_epoch, self._on_loaded)

    def _on_loaded(self, ids: list[CoordinatorEpochAndMetadata]) -> None:
        """Finish what the previous coordinator left half done: a transaction found in
        PrepareCommit or PrepareAbort gets its markers (again) and its Complete record."""
        for held in ids:
            if held.metadata.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
                self._send_markers(held)

    def on_resignation(self, index: int) -> None:
        self.manager.unload(index)
        for transactional_id in list(self._ended):   # they answer NOT_COORDINATOR now
            self._wake(transactional_id)

    def shutdown(self) -> None:
        self.active = False
        for transactional_id in list(self._ended):
            self._wake(transactional_id)
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._tasks.cancel_all()
