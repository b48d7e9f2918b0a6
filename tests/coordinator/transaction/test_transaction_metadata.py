"""Kafka's TransactionMetadata: every legal and illegal state change, the prepare/complete
protocol, whole commit and abort rounds, the epoch fence, KIP-360's epoch bumps and the
rotation of an exhausted producer id (as Kafka's TransactionMetadataTest, and more)."""
from __future__ import annotations

import dataclasses
import itertools

import pytest

from odradek.common.metadata import TopicPartition
from odradek.coordinator.transaction.transaction_metadata import (
    MAX_PRODUCER_EPOCH,
    NEW_PRODUCER_ID_NEEDED,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    VALID_PREVIOUS,
    IllegalTransactionStateError,
    ProducerIdAndEpoch,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    accepts_expected_producer,
    is_epoch_exhausted,
    prepare_init_producer_id,
)
from odradek.protocol.errors import ErrorCode

T = TransactionState
PID = 23423
TIMEOUT = 30_000
TP0, TP1, TP2 = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("audit", 0)

#: (from, to): Kafka 3.x's TransactionState.validPreviousStates, written out
LEGAL = {
    (T.EMPTY, T.EMPTY), (T.COMPLETE_COMMIT, T.EMPTY), (T.COMPLETE_ABORT, T.EMPTY),
    (T.ONGOING, T.ONGOING), (T.EMPTY, T.ONGOING), (T.COMPLETE_COMMIT, T.ONGOING), (T.COMPLETE_ABORT, T.ONGOING),
    (T.ONGOING, T.PREPARE_COMMIT),
    (T.ONGOING, T.PREPARE_ABORT), (T.PREPARE_EPOCH_FENCE, T.PREPARE_ABORT),
    (T.PREPARE_COMMIT, T.COMPLETE_COMMIT),
    (T.PREPARE_ABORT, T.COMPLETE_ABORT),
    (T.EMPTY, T.DEAD), (T.COMPLETE_ABORT, T.DEAD), (T.COMPLETE_COMMIT, T.DEAD),
    (T.ONGOING, T.PREPARE_EPOCH_FENCE),
}
ALL = list(itertools.product(TransactionState, TransactionState))


def _txn(state: TransactionState = T.EMPTY, epoch: int = 5, *, partitions: tuple[TopicPartition, ...] = (),
         start: int = -1, now_ms: int = 1000, last_epoch: int = NO_PRODUCER_EPOCH,
         producer_id: int = PID, last_producer_id: int = NO_PRODUCER_ID) -> TransactionMetadata:
    return TransactionMetadata("txn", producer_id, epoch, TIMEOUT, state, now_ms=now_ms, topic_partitions=partitions,
                               txn_start_timestamp=start, last_producer_epoch=last_epoch,
                               last_producer_id=last_producer_id)


def _transit(result: object) -> TxnTransitMetadata:
    assert isinstance(result, TxnTransitMetadata), result
    return result


# -- the states ----------------------------------------------------------------------------------


def test_the_table_is_kafkas() -> None:
    assert {(before, after) for after, befores in VALID_PREVIOUS.items() for before in befores} == LEGAL


def test_the_state_ids_and_names_are_kafkas() -> None:
    assert [(s.value, s.kafka_name) for s in TransactionState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    for state in TransactionState:
        assert TransactionState.from_id(state.value) is state
        assert TransactionState.from_name(state.kafka_name) is state
    assert TransactionState.from_name("EMPTY") is None
    with pytest.raises(IllegalTransactionStateError):
        TransactionState.from_id(8)


def test_only_idle_states_may_expire() -> None:
    assert {s for s in TransactionState if s.is_expiration_allowed} == {T.EMPTY, T.COMPLETE_COMMIT, T.COMPLETE_ABORT}


@pytest.mark.parametrize(("before", "after"), sorted(LEGAL, key=str), ids=lambda s: s.kafka_name)
def test_a_legal_change_is_prepared_and_pending(before: TransactionState, after: TransactionState) -> None:
    """prepare_abort_or_commit takes any target state, as Kafka's prepareAbortOrCommit: the
    table alone decides."""
    txn = _txn(before)
    transit = txn.prepare_abort_or_commit(after, now_ms=2000)
    assert (txn.state, txn.pending_state, transit.state) == (before, after, after)
    assert transit.txn_last_update_timestamp == 2000 and txn.txn_last_update_timestamp == 1000


@pytest.mark.parametrize(("before", "after"), sorted(set(ALL) - LEGAL, key=str), ids=lambda s: s.kafka_name)
def test_an_illegal_change_raises_and_nothing_is_pending(before: TransactionState, after: TransactionState) -> None:
    txn = _txn(before)
    with pytest.raises(IllegalTransactionStateError):
        txn.prepare_abort_or_commit(after, now_ms=2000)
    assert (txn.state, txn.pending_state) == (before, None)


# -- each legal edge through the method Kafka takes it by ----------------------------------------


@pytest.mark.parametrize("before", [T.EMPTY, T.COMPLETE_COMMIT, T.COMPLETE_ABORT], ids=lambda s: s.kafka_name)
def test_init_producer_id_bumps_the_epoch_into_empty(before: TransactionState) -> None:
    txn = _txn(before, start=700)
    txn.complete_transition(_transit(txn.prepare_increment_producer_epoch(60_000, None, now_ms=2000)))
    assert (txn.state, txn.producer_epoch, txn.last_producer_epoch, txn.txn_timeout_ms) == (T.EMPTY, 6, -1, 60_000)
    assert (txn.producer_id, txn.last_producer_id) == (PID, PID)
    # as Kafka: the start of the last transaction stays until the next one starts
    assert (txn.txn_start_timestamp, txn.txn_last_update_timestamp, txn.pending_state) == (700, 2000, None)


@pytest.mark.parametrize("before", [T.EMPTY, T.COMPLETE_COMMIT, T.COMPLETE_ABORT], ids=lambda s: s.kafka_name)
def test_the_first_partition_starts_a_transaction(before: TransactionState) -> None:
    txn = _txn(before, start=700)
    transit = txn.prepare_add_partitions([TP0], now_ms=2000)
    assert transit.txn_start_timestamp == 2000
    txn.complete_transition(transit)
    assert (txn.state, txn.topic_partitions, txn.txn_start_timestamp, txn.txn_last_update_timestamp) == (
        T.ONGOING, {TP0}, 2000, 2000)


def test_more_partitions_keep_the_start_of_an_ongoing_transaction() -> None:
    txn = _txn(T.ONGOING, partitions=(TP0,), start=700)
    txn.complete_transition(txn.prepare_add_partitions([TP1, TP0], now_ms=1999))  # a clock may step back
    assert (txn.state, txn.topic_partitions, txn.txn_start_timestamp, txn.txn_last_update_timestamp) == (
        T.ONGOING, {TP0, TP1}, 700, 1999)


@pytest.mark.parametrize("target", [T.PREPARE_COMMIT, T.PREPARE_ABORT], ids=lambda s: s.kafka_name)
def test_end_txn_prepares_and_keeps_everything_but_the_update_time(target: TransactionState) -> None:
    txn = _txn(T.ONGOING, partitions=(TP0, TP2), start=700)
    txn.complete_transition(txn.prepare_abort_or_commit(target, now_ms=2000))
    assert (txn.state, txn.topic_partitions, txn.txn_start_timestamp, txn.txn_last_update_timestamp) == (
        target, {TP0, TP2}, 700, 2000)
    assert (txn.producer_id, txn.producer_epoch) == (PID, 5)


@pytest.mark.parametrize(("before", "after"), [(T.PREPARE_COMMIT, T.COMPLETE_COMMIT),
                                               (T.PREPARE_ABORT, T.COMPLETE_ABORT)], ids=lambda s: s.kafka_name)
def test_written_markers_complete_the_transaction(before: TransactionState, after: TransactionState) -> None:
    txn = _txn(before, partitions=(TP0,), start=700)
    transit = txn.prepare_complete(now_ms=2000)
    assert (transit.state, transit.topic_partitions) == (after, frozenset())
    txn.complete_transition(transit)
    assert (txn.state, txn.topic_partitions, txn.txn_start_timestamp, txn.txn_last_update_timestamp) == (
        after, set(), 700, 2000)


def test_the_table_lets_an_epoch_fence_become_an_abort() -> None:
    """PrepareEpochFence is never a current state in practice (prepare_epoch_fence_abort turns
    the pending fence into the abort); the table's edge holds all the same."""
    txn = _txn(T.PREPARE_EPOCH_FENCE, partitions=(TP0,), start=700)
    txn.complete_transition(txn.prepare_abort_or_commit(T.PREPARE_ABORT, now_ms=2000))
    assert txn.state is T.PREPARE_ABORT


@pytest.mark.parametrize("before", [T.EMPTY, T.COMPLETE_COMMIT, T.COMPLETE_ABORT], ids=lambda s: s.kafka_name)
def test_an_expired_id_is_prepared_dead_but_never_completed(before: TransactionState) -> None:
    txn = _txn(before, start=700)
    transit = txn.prepare_dead()
    assert (transit.state, transit.txn_last_update_timestamp, txn.pending_state) == (T.DEAD, 1000, T.DEAD)
    with pytest.raises(IllegalTransactionStateError):
        txn.complete_transition(transit)
    assert (txn.state, txn.pending_state) == (before, T.DEAD)
    txn.cancel_transition()  # the tombstone's write failed
    assert txn.pending_state is None


def test_a_new_id_may_die_without_an_epoch() -> None:
    txn = _txn(T.EMPTY, epoch=NO_PRODUCER_EPOCH)
    assert txn.prepare_dead().producer_epoch == NO_PRODUCER_EPOCH


def test_the_ongoing_transaction_is_fenced_under_the_next_epoch() -> None:
    txn = _txn(T.ONGOING, partitions=(TP0,), start=700, last_epoch=4)
    transit = txn.prepare_fence_producer_epoch()
    assert (transit.state, transit.producer_epoch, transit.last_producer_epoch) == (T.PREPARE_EPOCH_FENCE, 6, -1)
    assert (transit.topic_partitions, transit.txn_start_timestamp, transit.txn_last_update_timestamp) == (
        frozenset({TP0}), 700, 1000)
    assert (txn.state, txn.pending_state, txn.producer_epoch) == (T.ONGOING, T.PREPARE_EPOCH_FENCE, 5)
    with pytest.raises(IllegalTransactionStateError):
        txn.complete_transition(transit)  # never written, so never completed


# -- the prepare / complete protocol --------------------------------------------------------------


def test_one_change_at_a_time() -> None:
    txn = _txn(T.EMPTY)
    txn.prepare_add_partitions([TP0], now_ms=2000)
    with pytest.raises(IllegalTransactionStateError):
        txn.prepare_add_partitions([TP1], now_ms=2001)
    with pytest.raises(IllegalTransactionStateError):
        txn.prepare_dead()
    assert txn.pending_state is T.ONGOING


def test_completing_needs_a_pending_change_of_the_same_state() -> None:
    txn = _txn(T.EMPTY)
    with pytest.raises(IllegalTransactionStateError):
        txn.complete_transition(txn.prepare_no_transit())  # prepares nothing
    other = _txn(T.EMPTY).prepare_dead()
    txn.prepare_add_partitions([TP0], now_ms=2000)
    with pytest.raises(IllegalTransactionStateError):
        txn.complete_transition(other)
    assert (txn.state, txn.pending_state) == (T.EMPTY, T.ONGOING)


def test_a_failed_write_is_cancelled_and_may_be_retried() -> None:
    txn = _txn(T.EMPTY)
    txn.prepare_add_partitions([TP0], now_ms=2000)
    txn.cancel_transition()
    assert (txn.state, txn.pending_state, txn.topic_partitions) == (T.EMPTY, None, set())
    txn.complete_transition(txn.prepare_add_partitions([TP0], now_ms=3000))
    assert (txn.state, txn.txn_start_timestamp) == (T.ONGOING, 3000)


@pytest.mark.parametrize("change", [
    {"producer_epoch": 6}, {"producer_id": PID + 1}, {"txn_timeout_ms": 1},
    {"topic_partitions": frozenset({TP1})},  # drops TP0
])
def test_an_inconsistent_add_is_refused_and_changes_nothing(change: dict[str, object]) -> None:
    txn = _txn(T.ONGOING, partitions=(TP0,), start=700)
    transit = dataclasses.replace(txn.prepare_add_partitions([TP1], now_ms=2000), **change)  # type: ignore[arg-type]
    with pytest.raises(IllegalTransactionStateError):
        txn.complete_transition(transit)
    assert (txn.state, txn.topic_partitions, txn.txn_last_update_timestamp) == (T.ONGOING, {TP0}, 1000)


@pytest.mark.parametrize("change", [
    {"producer_epoch": 4}, {"topic_partitions": frozenset({TP0, TP1})}, {"txn_start_timestamp": 701},
    {"txn_timeout_ms": 1},
])
def test_an_inconsistent_end_txn_is_refused(change: dict[str, object]) -> None:
    txn = _txn(T.ONGOING, partitions=(TP0,), start=700)
    transit = dataclasses.replace(txn.prepare_abort_or_commit(T.PREPARE_COMMIT, 2000), **change)  # type: ignore[arg-type]
    with pytest.raises(IllegalTransactionStateError):
        txn.complete_transition(transit)
    assert txn.state is T.ONGOING


@pytest.mark.parametrize("change", [{"producer_epoch": 7}, {"topic_partitions": frozenset({TP0})},
                                    {"txn_start_timestamp": 3}])
def test_an_epoch_bump_may_only_bump_by_one_into_an_empty_transaction(change: dict[str, object]) -> None:
    txn = _txn(T.COMPLETE_COMMIT, start=700)
    transit = dataclasses.replace(_transit(txn.prepare_increment_producer_epoch(TIMEOUT, None, 2000)),
                                  **change)  # type: ignore[arg-type]
    with pytest.raises(IllegalTransactionStateError):
        txn.complete_transition(transit)
    assert (txn.state, txn.producer_epoch) == (T.COMPLETE_COMMIT, 5)


def test_a_completion_without_a_start_is_refused() -> None:
    txn = _txn(T.PREPARE_COMMIT, partitions=(TP0,), start=700)
    transit = dataclasses.replace(txn.prepare_complete(2000), txn_start_timestamp=-1)
    with pytest.raises(IllegalTransactionStateError):
        txn.complete_transition(transit)


def test_new_producer_ids_and_epochs_must_be_valid() -> None:
    with pytest.raises(ValueError):
        _txn(T.EMPTY).prepare_producer_id_rotation(-1, TIMEOUT, 2000, record_last_epoch=False)
    with pytest.raises(ValueError):
        _txn(T.EMPTY, epoch=NO_PRODUCER_EPOCH).prepare_add_partitions([TP0], 2000)


def test_partitions_leave_only_while_markers_go_out() -> None:
    txn = _txn(T.ONGOING, partitions=(TP0, TP1), start=700)
    with pytest.raises(IllegalTransactionStateError):
        txn.remove_partition(TP0)
    txn.complete_transition(txn.prepare_abort_or_commit(T.PREPARE_ABORT, 2000))
    txn.remove_partition(TP0)
    assert txn.topic_partitions == {TP1}


# -- whole rounds ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("prepare", "complete"), [(T.PREPARE_COMMIT, T.COMPLETE_COMMIT),
                                                   (T.PREPARE_ABORT, T.COMPLETE_ABORT)], ids=["commit", "abort"])
def test_a_whole_transaction(prepare: TransactionState, complete: TransactionState) -> None:
    txn = TransactionMetadata("txn", PID, NO_PRODUCER_EPOCH, TIMEOUT, now_ms=100)  # InitProducerId: created
    init = _transit(prepare_init_producer_id(txn, TIMEOUT, None, now_ms=100))
    assert (init.state, init.producer_epoch, init.last_producer_epoch) == (T.EMPTY, 0, -1)
    txn.complete_transition(init)
    assert (txn.state, txn.producer_epoch, txn.txn_start_timestamp) == (T.EMPTY, 0, -1)

    txn.complete_transition(txn.prepare_add_partitions([TP0], now_ms=200))
    txn.complete_transition(txn.prepare_add_partitions([TP1, TP2], now_ms=250))
    assert (txn.state, txn.topic_partitions, txn.txn_start_timestamp) == (T.ONGOING, {TP0, TP1, TP2}, 200)

    txn.complete_transition(txn.prepare_abort_or_commit(prepare, now_ms=300))
    assert (txn.state, txn.txn_last_update_timestamp) == (prepare, 300)
    for tp in (TP0, TP1, TP2):  # each marker written
        txn.remove_partition(tp)
    txn.complete_transition(txn.prepare_complete(now_ms=400))
    assert (txn.state, txn.topic_partitions, txn.txn_start_timestamp, txn.txn_last_update_timestamp) == (
        complete, set(), 200, 400)
    assert (txn.producer_id, txn.producer_epoch, txn.pending_state) == (PID, 0, None)

    txn.complete_transition(txn.prepare_add_partitions([TP2], now_ms=500))  # the next transaction
    assert (txn.state, txn.topic_partitions, txn.txn_start_timestamp) == (T.ONGOING, {TP2}, 500)


def test_timeouts_and_expiry() -> None:
    txn = _txn(T.ONGOING, partitions=(TP0,), start=1000)
    assert not txn.is_timed_out(1000 + TIMEOUT) and txn.is_timed_out(1001 + TIMEOUT)
    assert not txn.is_expired(10**9, 1)  # an open transaction never expires
    txn.prepare_abort_or_commit(T.PREPARE_ABORT, 2000)
    assert not txn.is_timed_out(10**9)  # already being ended
    idle = _txn(T.COMPLETE_COMMIT, now_ms=1000)
    assert idle.is_expired(1500, 500) and not idle.is_expired(1499, 500)
    idle.prepare_add_partitions([TP0], 1500)
    assert not idle.is_expired(10**9, 500)


# -- fencing ---------------------------------------------------------------------------------------


def test_init_producer_id_during_a_transaction_aborts_it_under_a_fenced_epoch() -> None:
    txn = _txn(T.ONGOING, partitions=(TP0,), start=700, last_epoch=4)
    fence = _transit(prepare_init_producer_id(txn, TIMEOUT, None, now_ms=2000))
    assert (fence.state, fence.producer_epoch) == (T.PREPARE_EPOCH_FENCE, 6)
    assert prepare_init_producer_id(txn, TIMEOUT, None, 2001) == ErrorCode.CONCURRENT_TRANSACTIONS

    abort = txn.prepare_epoch_fence_abort(fence, now_ms=2000)
    # the fenced epoch holds in memory before the write: the old producer is refused at once
    assert (txn.producer_epoch, txn.last_producer_epoch, txn.state, txn.pending_state) == (
        6, -1, T.ONGOING, T.PREPARE_ABORT)
    assert (abort.state, abort.producer_epoch, abort.last_producer_epoch, abort.topic_partitions) == (
        T.PREPARE_ABORT, 6, -1, frozenset({TP0}))
    txn.complete_transition(abort)
    assert prepare_init_producer_id(txn, TIMEOUT, None, 2001) == ErrorCode.CONCURRENT_TRANSACTIONS
    txn.remove_partition(TP0)
    txn.complete_transition(txn.prepare_complete(now_ms=3000))
    assert txn.state is T.COMPLETE_ABORT

    retry = _transit(prepare_init_producer_id(txn, TIMEOUT, None, now_ms=4000))  # the client retries
    txn.complete_transition(retry)
    assert (txn.state, txn.producer_epoch) == (T.EMPTY, 7)


def test_a_failed_fence_is_not_bumped_again_and_the_flag_clears_on_completion() -> None:
    txn = _txn(T.ONGOING, partitions=(TP0,), start=700)
    txn.prepare_epoch_fence_abort(txn.prepare_fence_producer_epoch(), now_ms=2000)
    txn.cancel_transition()  # the PrepareAbort was not written
    txn.has_failed_epoch_fence = True
    assert (txn.state, txn.producer_epoch) == (T.ONGOING, 6)
    fence = txn.prepare_fence_producer_epoch()
    assert fence.producer_epoch == 6
    txn.complete_transition(txn.prepare_epoch_fence_abort(fence, now_ms=2100))
    txn.prepare_complete(now_ms=2200)
    assert not txn.has_failed_epoch_fence


def test_an_epoch_fence_abort_needs_the_pending_fence() -> None:
    txn = _txn(T.ONGOING, partitions=(TP0,), start=700)
    stale = _txn(T.ONGOING).prepare_fence_producer_epoch()
    with pytest.raises(IllegalTransactionStateError):
        txn.prepare_epoch_fence_abort(stale, now_ms=2000)  # no fence pending here
    fence = txn.prepare_fence_producer_epoch()
    with pytest.raises(IllegalTransactionStateError):
        txn.prepare_epoch_fence_abort(dataclasses.replace(fence, producer_id=PID + 1), now_ms=2000)
    assert (txn.producer_epoch, txn.pending_state) == (5, T.PREPARE_EPOCH_FENCE)


def test_the_last_epoch_can_still_be_fenced_but_not_past_it() -> None:
    assert _txn(T.ONGOING, epoch=MAX_PRODUCER_EPOCH - 1).prepare_fence_producer_epoch().producer_epoch == 32767
    with pytest.raises(IllegalTransactionStateError):
        _txn(T.ONGOING, epoch=MAX_PRODUCER_EPOCH).prepare_fence_producer_epoch()


# -- KIP-360: InitProducerId with the producer's id and epoch ----------------------------------------


@pytest.mark.parametrize(("epoch", "last_epoch", "expected", "result"), [
    (735, -1, None, (736, -1)),  # an old or new producer: bump, forget the last
    (735, 700, None, (736, -1)),
    (735, -1, 735, (736, 735)),  # carrying on after an error: bump, remember
    (-1, -1, 735, (0, -1)),  # the id was just created: any epoch starts it at 0
    (735, 734, 734, (735, 734)),  # the retry of a bump that succeeded: the same again
    (735, 734, 733, ErrorCode.PRODUCER_FENCED),
    (735, -1, 734, ErrorCode.PRODUCER_FENCED),
])
def test_an_epoch_bump(epoch: int, last_epoch: int, expected: int | None,
                       result: tuple[int, int] | ErrorCode) -> None:
    txn = _txn(T.EMPTY, epoch=epoch, last_epoch=last_epoch)
    outcome = txn.prepare_increment_producer_epoch(TIMEOUT, expected, now_ms=2000)
    if isinstance(result, ErrorCode):
        assert outcome == result and txn.pending_state is None
        return
    txn.complete_transition(_transit(outcome))
    assert (txn.producer_epoch, txn.last_producer_epoch, txn.producer_id) == (*result, PID)


@pytest.mark.parametrize(("expected", "accepted"), [
    (ProducerIdAndEpoch(PID, 5), True),
    (ProducerIdAndEpoch(PID + 1, 5), False),
    (ProducerIdAndEpoch(100, MAX_PRODUCER_EPOCH - 1), True),  # the previous id, epochs used up
    (ProducerIdAndEpoch(100, MAX_PRODUCER_EPOCH - 2), False),
    (ProducerIdAndEpoch(101, MAX_PRODUCER_EPOCH - 1), False),
])
def test_which_producers_init_producer_id_accepts(expected: ProducerIdAndEpoch, accepted: bool) -> None:
    txn = _txn(T.EMPTY, epoch=5, last_producer_id=100)
    assert accepts_expected_producer(txn, expected) is accepted
    if not accepted:  # an accepted one's epoch is checked next, by the bump
        assert prepare_init_producer_id(txn, TIMEOUT, expected, now_ms=2000) == ErrorCode.PRODUCER_FENCED
        assert txn.pending_state is None


def test_a_just_created_id_accepts_any_producer() -> None:
    assert accepts_expected_producer(_txn(T.EMPTY, epoch=NO_PRODUCER_EPOCH), ProducerIdAndEpoch(1, 2))


@pytest.mark.parametrize("state", [T.PREPARE_COMMIT, T.PREPARE_ABORT])
def test_init_producer_id_waits_for_a_transaction_being_completed(state: TransactionState) -> None:
    assert prepare_init_producer_id(_txn(state), TIMEOUT, None, 2000) == ErrorCode.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("state", [T.DEAD, T.PREPARE_EPOCH_FENCE])
def test_init_producer_id_on_an_impossible_state_raises(state: TransactionState) -> None:
    with pytest.raises(IllegalTransactionStateError):
        prepare_init_producer_id(_txn(state), TIMEOUT, None, 2000)


# -- exhausted epochs: a new producer id --------------------------------------------------------------


def test_which_epochs_are_exhausted() -> None:
    assert [is_epoch_exhausted(e) for e in (-1, 0, 32765, 32766, 32767)] == [False, False, False, True, True]
    assert _txn(epoch=32766).is_producer_epoch_exhausted and not _txn(epoch=32765).is_producer_epoch_exhausted


def test_an_exhausted_epoch_is_never_bumped() -> None:
    txn = _txn(T.EMPTY, epoch=MAX_PRODUCER_EPOCH - 1)
    with pytest.raises(IllegalTransactionStateError):
        txn.prepare_increment_producer_epoch(TIMEOUT, None, 2000)


@pytest.mark.parametrize("expected", [None, ProducerIdAndEpoch(PID, MAX_PRODUCER_EPOCH - 1)], ids=["old", "kip360"])
def test_exhausted_epochs_rotate_the_producer_id(expected: ProducerIdAndEpoch | None) -> None:
    txn = _txn(T.COMPLETE_COMMIT, epoch=MAX_PRODUCER_EPOCH - 1, start=700)
    assert txn.needs_producer_id_rotation(None if expected is None else expected.epoch)
    assert prepare_init_producer_id(txn, TIMEOUT, expected, now_ms=2000) is NEW_PRODUCER_ID_NEEDED
    assert txn.pending_state is None  # nothing prepared while the caller gets an id
    rotation = _transit(prepare_init_producer_id(txn, 60_000, expected, now_ms=2000, new_producer_id=9893))
    assert (rotation.state, rotation.producer_id, rotation.producer_epoch, rotation.last_producer_id) == (
        T.EMPTY, 9893, 0, PID)
    txn.complete_transition(rotation)
    last_epoch = NO_PRODUCER_EPOCH if expected is None else MAX_PRODUCER_EPOCH - 1
    assert (txn.producer_id, txn.producer_epoch, txn.last_producer_id, txn.last_producer_epoch) == (
        9893, 0, PID, last_epoch)
    assert (txn.txn_timeout_ms, txn.txn_start_timestamp, txn.state) == (60_000, 700, T.EMPTY)


def test_the_retry_of_a_rotation_gets_the_same_new_producer_id() -> None:
    """KIP-360: the producer lost the answer and sends its old id and exhausted epoch again."""
    txn = _txn(T.EMPTY, epoch=MAX_PRODUCER_EPOCH - 1)
    old = ProducerIdAndEpoch(PID, MAX_PRODUCER_EPOCH - 1)
    txn.complete_transition(_transit(prepare_init_producer_id(txn, TIMEOUT, old, 2000, new_producer_id=9893)))
    retry = _transit(prepare_init_producer_id(txn, TIMEOUT, old, now_ms=2100))
    assert (retry.producer_id, retry.producer_epoch, retry.last_producer_epoch) == (9893, 0, MAX_PRODUCER_EPOCH - 1)


def test_an_id_given_when_none_is_needed_any_more_is_left_unused() -> None:
    txn = _txn(T.EMPTY, epoch=3)
    transit = _transit(prepare_init_producer_id(txn, TIMEOUT, None, 2000, new_producer_id=9893))
    assert (transit.producer_id, transit.producer_epoch) == (PID, 4)


@pytest.mark.parametrize("state", [T.ONGOING, T.PREPARE_COMMIT, T.PREPARE_ABORT])
def test_no_rotation_under_an_open_transaction(state: TransactionState) -> None:
    with pytest.raises(IllegalTransactionStateError):
        _txn(state, epoch=MAX_PRODUCER_EPOCH - 1).prepare_producer_id_rotation(9893, TIMEOUT, 2000, True)


def test_fencing_at_the_last_epoch_leads_to_a_rotation() -> None:
    """The fence uses the last epoch up; the client's retry gets a new producer id."""
    txn = _txn(T.ONGOING, epoch=MAX_PRODUCER_EPOCH - 2, partitions=(TP0,), start=700)
    txn.complete_transition(txn.prepare_epoch_fence_abort(txn.prepare_fence_producer_epoch(), 2000))
    txn.remove_partition(TP0)
    txn.complete_transition(txn.prepare_complete(2100))
    assert txn.producer_epoch == MAX_PRODUCER_EPOCH - 1
    assert prepare_init_producer_id(txn, TIMEOUT, None, 2200) is NEW_PRODUCER_ID_NEEDED
