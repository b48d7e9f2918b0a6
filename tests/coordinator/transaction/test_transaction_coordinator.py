"""The TransactionCoordinator on its own, over a real `__transaction_state` log and on virtual
time: the calls a transactional producer makes, in its order, and the answers Kafka gives; the
markers go to a recording TxnMarkerWriter (the broker's seam), whose answers a test chooses."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from odradek.broker.partition import Partition
from odradek.common.clock import VirtualClock
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.coordinator.scheduler import VirtualScheduler
from odradek.coordinator.transaction.transaction_coordinator import TransactionConfig, TransactionCoordinator
from odradek.coordinator.transaction.transaction_metadata import ProducerIdAndEpoch, TransactionState
from odradek.coordinator.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC, TransactionStateManager
from odradek.log.log import Log, LogConfig
from odradek.protocol.errors import ErrorCode

START_MS = 1_700_000_000_000
STATE_TP = TopicPartition(TRANSACTION_STATE_TOPIC, 0)
A, B = TopicPartition("a", 0), TopicPartition("b", 3)
TIMEOUT_MS = 60_000
CONFIG = TransactionConfig(abort_timed_out_transaction_cleanup_interval_ms=10_000, marker_retry_backoff_ms=100)


class Markers:
    """Records every WriteTxnMarkers round; answers NONE unless told otherwise per partition."""

    def __init__(self) -> None:
        self.rounds: list[tuple[int, int, bool, int, frozenset[TopicPartition]]] = []
        self.answers: dict[TopicPartition, ErrorCode] = {}
        self.deleted: set[TopicPartition] = set()

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: set[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        self.rounds.append((producer_id, producer_epoch, commit, coordinator_epoch, frozenset(partitions)))
        return {tp: self.answers.get(tp, ErrorCode.NONE) for tp in partitions}

    async def partitions_deleted(self, partitions: set[TopicPartition]) -> set[TopicPartition]:
        return partitions & self.deleted


class Rig:
    def __init__(self, data_dir: Path) -> None:
        self.clock = VirtualClock.frozen(START_MS)
        self.scheduler = VirtualScheduler(self.clock)
        self.partition = Partition(STATE_TP, Log.open(data_dir / f"{TRANSACTION_STATE_TOPIC}-0", LogConfig()),
                                   broker_id=0)
        self.partition.apply_state(PartitionState(STATE_TP, 1, 0, 0, (0,), 0, (0,)))
        self.markers = Markers()
        self.ids = iter(range(1000, 2000))
        self.c = self.coordinator()

    def coordinator(self) -> TransactionCoordinator:
        manager = TransactionStateManager(lambda: 1, lambda tp: self.partition if tp == STATE_TP else None,
                                          5_000, 1 << 20, self.clock, self.scheduler)

        async def new_id() -> int:
            return next(self.ids)
        return TransactionCoordinator(manager, CONFIG, self.clock, self.scheduler, new_id, self.markers)

    async def load(self, coordinator: TransactionCoordinator | None = None, leader_epoch: int = 0) -> None:
        (coordinator or self.c).on_election(0, leader_epoch)
        await self.scheduler.run_tasks()
        await settle()

    def state(self, transactional_id: str = "t") -> TransactionState:
        held = self.c.manager.get(transactional_id)
        assert held is not None
        return held.metadata.state

    async def begin(self, transactional_id: str = "t") -> tuple[int, int]:
        """InitProducerId and one AddPartitionsToTxn: the producer's id and epoch."""
        init = await self.c.init_producer_id(transactional_id, TIMEOUT_MS, None)
        assert init.error == ErrorCode.NONE
        assert await self.c.add_partitions(transactional_id, init.producer_id, init.producer_epoch, [A, B]) \
            == ErrorCode.NONE
        return init.producer_id, init.producer_epoch


async def settle() -> None:
    """Let background tasks (markers, Complete records) run as far as they can without time."""
    for _ in range(50):
        await asyncio.sleep(0)


def on_virtual_time(test: Callable[[Rig], Awaitable[None]], tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig(tmp_path)
        await rig.load()
        try:
            await test(rig)
        finally:
            rig.c.shutdown()
    asyncio.run(main())


def test_a_new_id_gets_a_producer_id_and_each_new_instance_the_next_epoch(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        first = await rig.c.init_producer_id("t", TIMEOUT_MS, None)
        again = await rig.c.init_producer_id("t", TIMEOUT_MS, None)
        assert (first.error, first.producer_epoch) == (ErrorCode.NONE, 0)
        assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.NONE, first.producer_id, 1)
        other = await rig.c.init_producer_id("other", TIMEOUT_MS, None)
        assert other.producer_id != first.producer_id
        assert (await rig.c.init_producer_id("t", CONFIG.transaction_max_timeout_ms + 1, None)).error \
            == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await rig.c.init_producer_id("", TIMEOUT_MS, None)).error == ErrorCode.INVALID_REQUEST
    on_virtual_time(test, tmp_path)


def test_a_commit_is_prepared_marked_on_every_partition_then_complete(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        assert rig.state() is TransactionState.ONGOING and rig.c.open_transactions() == 1
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.NONE
        await settle()
        assert rig.markers.rounds == [(pid, epoch, True, 0, frozenset({A, B}))]
        assert rig.state() is TransactionState.COMPLETE_COMMIT
        # a retry of the commit is answered as done; an abort of it is refused
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.NONE
        assert await rig.c.end_transaction("t", pid, epoch, commit=False) == ErrorCode.INVALID_TXN_STATE
    on_virtual_time(test, tmp_path)


def test_markers_are_retried_until_every_leader_has_written_its_own(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        rig.markers.answers[B] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert await rig.c.end_transaction("t", pid, epoch, commit=False) == ErrorCode.NONE
        await settle()
        assert rig.state() is TransactionState.PREPARE_ABORT
        del rig.markers.answers[B]
        rig.scheduler.advance(CONFIG.marker_retry_backoff_ms)
        await settle()
        assert [r[4] for r in rig.markers.rounds] == [frozenset({A, B}), frozenset({B})]
        assert rig.state() is TransactionState.COMPLETE_ABORT
        assert rig.c.aborts == {"client": 1} and rig.c.open_transactions() == 0
    on_virtual_time(test, tmp_path)


def test_the_next_transactions_partitions_wait_for_the_previous_one_to_complete(tmp_path: Path) -> None:
    """AddPartitionsToTxn while the previous transaction's markers are being written is
    answered once it completed, not CONCURRENT_TRANSACTIONS at once (the client's retry pause
    cost throughput); after add_partitions_wait_ms it is CONCURRENT_TRANSACTIONS after all."""
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        rig.markers.answers[B] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.NONE
        await settle()
        waiting = asyncio.ensure_future(rig.c.add_partitions("t", pid, epoch, [A]))
        await settle()
        assert not waiting.done()
        del rig.markers.answers[B]
        rig.scheduler.advance(CONFIG.marker_retry_backoff_ms)   # the marker retried, then Complete
        await settle()
        assert waiting.done() and waiting.result() == ErrorCode.NONE
        assert rig.state() is TransactionState.ONGOING

        rig.markers.answers[A] = ErrorCode.NOT_LEADER_OR_FOLLOWER   # now one that does not complete
        assert await rig.c.end_transaction("t", pid, epoch, commit=False) == ErrorCode.NONE
        await settle()
        waiting = asyncio.ensure_future(rig.c.add_partitions("t", pid, epoch, [B]))
        await settle()
        rig.scheduler.advance(CONFIG.add_partitions_wait_ms)
        await settle()
        assert waiting.done() and waiting.result() == ErrorCode.CONCURRENT_TRANSACTIONS
        assert rig.state() is TransactionState.PREPARE_ABORT
    on_virtual_time(test, tmp_path)


def test_partitions_added_while_another_write_for_the_id_is_under_way_wait_only_for_it(tmp_path: Path) -> None:
    """librdkafka sends AddOffsetsToTxn and AddPartitionsToTxn together; the second finds the
    first's write under way. It goes on as soon as that write is done, not after the whole
    add_partitions_wait_ms (a fault run's copier lost 1,005 ms per transaction so)."""
    async def test(rig: Rig) -> None:
        init = await rig.c.init_producer_id("t", TIMEOUT_MS, None)
        # a follower in the ISR: each write waits until it fetched
        rig.partition.apply_state(PartitionState(STATE_TP, 1, 0, 0, (0, 1), 1, (0, 1)))
        offsets = TopicPartition("__consumer_offsets", 7)
        first = asyncio.ensure_future(rig.c.add_partitions("t", init.producer_id, init.producer_epoch, [offsets]))
        second = asyncio.ensure_future(rig.c.add_partitions("t", init.producer_id, init.producer_epoch, [A, B]))
        await settle()
        assert not first.done() and not second.done()
        for _ in range(2):   # the follower fetches each write; no virtual time passes
            rig.partition.update_follower_position(1, rig.partition.log_end_offset)
            await settle()
        assert first.done() and first.result() == ErrorCode.NONE
        assert second.done() and second.result() == ErrorCode.NONE
        held = rig.c.manager.get("t")
        assert held is not None and held.metadata.topic_partitions == {offsets, A, B}
    on_virtual_time(test, tmp_path)


def test_a_deleted_topic_needs_no_marker_and_a_fenced_coordinator_stops(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        rig.markers.answers[A] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        rig.markers.deleted.add(A)
        rig.markers.answers[B] = ErrorCode.TRANSACTION_COORDINATOR_FENCED
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.NONE
        await settle()
        rig.scheduler.advance(10 * CONFIG.marker_retry_backoff_ms)
        await settle()
        assert len(rig.markers.rounds) == 1  # fenced: no retry, and no Complete record
        assert rig.state() is TransactionState.PREPARE_COMMIT
    on_virtual_time(test, tmp_path)


def test_a_new_coordinator_finishes_a_commit_the_old_one_had_prepared(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        rig.markers.answers[A] = ErrorCode.NOT_LEADER_OR_FOLLOWER  # the old coordinator never finishes
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.NONE
        await settle()
        rig.c.on_resignation(0)
        rig.c.shutdown()
        rig.markers.answers.clear()
        rig.partition.apply_state(PartitionState(STATE_TP, 1, 0, 1, (0,), 0, (0,)))
        rig.c = rig.coordinator()
        await rig.load(leader_epoch=1)
        assert rig.markers.rounds[-1] == (pid, epoch, True, 1, frozenset({A, B}))  # the new epoch
        assert rig.state() is TransactionState.COMPLETE_COMMIT
    on_virtual_time(test, tmp_path)


def test_requests_of_a_fenced_or_unknown_producer_are_refused(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        newer = await rig.c.init_producer_id("t", TIMEOUT_MS, None)  # fences the open transaction's producer
        assert newer.error == ErrorCode.CONCURRENT_TRANSACTIONS
        await settle()
        assert rig.markers.rounds[-1][:3] == (pid, epoch + 1, False)  # aborted under a bumped epoch
        assert rig.c.aborts == {"fenced": 1}
        assert rig.state() is TransactionState.COMPLETE_ABORT
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.PRODUCER_FENCED
        assert await rig.c.add_partitions("t", pid, epoch, [A]) == ErrorCode.PRODUCER_FENCED
        assert await rig.c.add_partitions("t", pid + 1, epoch, [A]) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        retried = await rig.c.init_producer_id("t", TIMEOUT_MS, None)
        assert (retried.error, retried.producer_epoch) == (ErrorCode.NONE, epoch + 2)
        assert await rig.c.end_transaction("t", pid, retried.producer_epoch, commit=True) == ErrorCode.INVALID_TXN_STATE
        assert await rig.c.end_transaction("nobody", pid, 0, commit=True) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    on_virtual_time(test, tmp_path)


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        rig.c.start()
        pid, epoch = await rig.begin()
        rig.scheduler.advance(TIMEOUT_MS)  # at the timeout, not past it: left alone
        await settle()
        assert rig.state() is TransactionState.ONGOING
        rig.scheduler.advance(CONFIG.abort_timed_out_transaction_cleanup_interval_ms)
        await settle()
        assert rig.state() is TransactionState.COMPLETE_ABORT
        assert rig.markers.rounds == [(pid, epoch + 1, False, 0, frozenset({A, B}))]
        assert rig.c.aborts == {"timeout": 1}
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.PRODUCER_FENCED
    on_virtual_time(test, tmp_path)


def test_a_leader_may_append_only_for_a_partition_of_the_open_transaction(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        assert rig.c.verify_partition("t", pid, epoch, A) == ErrorCode.NONE
        assert rig.c.verify_partition("t", pid, epoch, TopicPartition("c", 0)) == ErrorCode.INVALID_TXN_STATE
        assert rig.c.verify_partition("t", pid, epoch - 1, A) == ErrorCode.PRODUCER_FENCED
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.NONE
        await settle()
        assert rig.c.verify_partition("t", pid, epoch, A) == ErrorCode.INVALID_TXN_STATE  # a late batch (KAFKA-17754)
    on_virtual_time(test, tmp_path)


def test_an_id_idle_past_its_expiration_is_removed_and_stays_removed_after_a_reload(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.c.init_producer_id("t", TIMEOUT_MS, None)
        rig.scheduler.advance(CONFIG.transactional_id_expiration_ms + 1)
        assert rig.c.remove_expired() == 1
        await settle()
        assert rig.c.manager.get("t") is None
        rig.c.on_resignation(0)
        rig.c = rig.coordinator()
        await rig.load(leader_epoch=1)
        assert rig.c.manager.get("t") is None
    on_virtual_time(test, tmp_path)


def test_requests_for_an_id_of_a_partition_not_led_here_get_not_coordinator(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        rig.c.on_resignation(0)
        assert (await rig.c.init_producer_id("t", TIMEOUT_MS, None)).error == ErrorCode.NOT_COORDINATOR
        assert await rig.c.end_transaction("t", 1, 0, commit=True) == ErrorCode.NOT_COORDINATOR
        unused = ProducerIdAndEpoch(1, 0)
        assert (await rig.c.init_producer_id("t", TIMEOUT_MS, unused)).error == ErrorCode.NOT_COORDINATOR
    on_virtual_time(test, tmp_path)


def test_a_partition_the_broker_does_not_know_yet_is_not_taken_for_deleted(tmp_path: Path) -> None:
    """A coordinator just restarted may not have the data partitions in its metadata yet; its
    WriteTxnMarkers round answers UNKNOWN_TOPIC_OR_PARTITION for them. Only a partition known
    to be gone may go without its marker: the commit waits (a fault run completed a commit
    without markers, and a later abort took its records)."""
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        rig.markers.answers[A] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.NONE
        for _ in range(3):
            rig.scheduler.advance(CONFIG.marker_retry_backoff_ms)
            await settle()
        assert rig.state() is TransactionState.PREPARE_COMMIT  # still waiting for A's marker
        assert [r[4] for r in rig.markers.rounds][-1] == frozenset({A})
        del rig.markers.answers[A]  # the metadata arrived
        rig.scheduler.advance(CONFIG.marker_retry_backoff_ms)
        await settle()
        assert rig.state() is TransactionState.COMPLETE_COMMIT
    on_virtual_time(test, tmp_path)


def test_a_failing_marker_round_is_tried_again_not_abandoned(tmp_path: Path) -> None:
    """An exception from the broker's marker channel (a leader killed mid-request) must not end
    the task that completes the transaction."""
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        failures = [ConnectionResetError("killed")]
        write = rig.markers.write_markers

        async def flaky(*args: object) -> dict[TopicPartition, ErrorCode]:
            if failures:
                raise failures.pop()
            return await write(*args)  # type: ignore[arg-type]
        rig.markers.write_markers = flaky  # type: ignore[method-assign]
        assert await rig.c.end_transaction("t", pid, epoch, commit=True) == ErrorCode.NONE
        await settle()
        assert rig.state() is TransactionState.PREPARE_COMMIT
        rig.scheduler.advance(CONFIG.marker_retry_backoff_ms)
        await settle()
        assert rig.state() is TransactionState.COMPLETE_COMMIT
    on_virtual_time(test, tmp_path)
