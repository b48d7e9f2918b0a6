"""Transactional offset commits (KIP-98, KIP-447) through the GroupCoordinator, over a real log
and on virtual time: TxnOffsetCommit leaves offsets pending in the producer's transaction,
its marker (written here as WriteTxnMarkers would, then handle_txn_completion) commits or
drops them, and a coordinator reading the partition back finds each transaction as the log
left it."""
from __future__ import annotations

import asyncio
from pathlib import Path

from group_rig import COMMIT_TIMEOUT_MS, TP, Rig, on_virtual_time

from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import iter_batches

PID, EPOCH = 4000, 2
TP1 = TopicPartition("t", 1)


async def txn_commit(rig: Rig, offsets: dict[TopicPartition, int], group: str = "g", producer_id: int = PID,
                     epoch: int = EPOCH, **member: object) -> dict[TopicPartition, ErrorCode]:
    return await rig.c.commit_txn_offsets(group, producer_id, epoch,
                                          {tp: OffsetAndMetadata(o) for tp, o in offsets.items()},
                                          **member)  # type: ignore[arg-type]


async def plain_commit(rig: Rig, offsets: dict[TopicPartition, int], group: str = "g") -> None:
    committed = await rig.c.commit_offsets(group, "", None, -1, {tp: OffsetAndMetadata(o) for tp, o in offsets.items()})
    assert set(committed.values()) == {ErrorCode.NONE}


def marker(rig: Rig, commit: bool, producer_id: int = PID, epoch: int = EPOCH) -> int:
    """The transaction coordinator's marker on the offsets partition, then what WriteTxnMarkers
    does once the ISR has it; how many groups it settled."""
    rig.partition.append_marker(producer_id, epoch, commit, coordinator_epoch=0)
    return rig.c.handle_txn_completion(producer_id, {0}, commit)


def fetched(rig: Rig, group: str = "g", stable: bool = False, tp: TopicPartition = TP) -> object:
    error, offsets = rig.c.fetch_offsets(group, [tp], require_stable=stable)
    assert error == ErrorCode.NONE
    found = offsets[tp]
    return found.offset if isinstance(found, OffsetAndMetadata) else found


def test_txn_offsets_are_invisible_until_the_commit_marker(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        assert await txn_commit(rig, {TP: 42}) == {TP: ErrorCode.NONE}
        assert fetched(rig) is None
        assert marker(rig, commit=True) == 1
        assert fetched(rig) == 42
        assert fetched(rig, stable=True) == 42
    on_virtual_time(test, tmp_path)


def test_an_abort_marker_drops_them_and_the_older_offset_stays(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await plain_commit(rig, {TP: 5})
        await txn_commit(rig, {TP: 42, TP1: 9})
        assert (fetched(rig), fetched(rig, tp=TP1)) == (5, None)
        marker(rig, commit=False)
        assert (fetched(rig), fetched(rig, tp=TP1)) == (5, None)
        assert fetched(rig, stable=True) == 5
        assert not rig.group().pending_txn_offsets
    on_virtual_time(test, tmp_path)


def test_a_stable_fetch_of_a_partition_with_a_pending_txn_commit_is_unstable_offset_commit(tmp_path: Path) -> None:
    """KIP-447: a consumer asking for stable offsets waits for the transaction; one that does
    not gets the committed (older) offset."""
    async def test(rig: Rig) -> None:
        await plain_commit(rig, {TP: 5, TP1: 6})
        await txn_commit(rig, {TP: 42})
        assert fetched(rig, stable=True) == ErrorCode.UNSTABLE_OFFSET_COMMIT
        assert fetched(rig, stable=True, tp=TP1) == 6  # only the transaction's partitions
        assert fetched(rig) == 5
        marker(rig, commit=True)
        assert fetched(rig, stable=True) == 42
    on_virtual_time(test, tmp_path)


def test_markers_sent_again_settle_nothing_more(tmp_path: Path) -> None:
    """The coordinator sends a marker until it is acknowledged: a second completion finds
    nothing pending and leaves a commit made since alone."""
    async def test(rig: Rig) -> None:
        await txn_commit(rig, {TP: 42})
        assert marker(rig, commit=True) == 1
        await plain_commit(rig, {TP: 50})
        assert marker(rig, commit=True) == 0
        assert marker(rig, commit=False) == 0
        assert fetched(rig) == 50
    on_virtual_time(test, tmp_path)


def test_a_completion_settles_only_its_producer_on_its_partitions(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await txn_commit(rig, {TP: 42})
        await txn_commit(rig, {TP1: 7}, producer_id=PID + 1)
        assert rig.c.handle_txn_completion(PID, {3}, True) == 0  # another offsets partition's groups
        assert fetched(rig) is None
        assert marker(rig, commit=True) == 1
        assert (fetched(rig), fetched(rig, tp=TP1)) == (42, None)
        assert list(rig.group().pending_txn_offsets) == [PID + 1]
    on_virtual_time(test, tmp_path)


def test_the_offsets_are_a_transactional_batch_of_the_producer(tmp_path: Path) -> None:
    """Kafka's GroupMetadataManager writes them under the producer's id and epoch, which opens
    its transaction on the offsets partition until the marker."""
    async def test(rig: Rig) -> None:
        await txn_commit(rig, {TP: 42})
        (h,) = list(iter_batches(rig.partition.log.read(0, 1 << 20)))
        assert (h.producer_id, h.producer_epoch, h.is_transactional, h.is_control) == (PID, EPOCH, True, False)
        assert rig.partition.producers.ongoing_transactions() == {PID: 0}
        marker(rig, commit=True)
        assert rig.partition.producers.ongoing_transactions() == {}
    on_virtual_time(test, tmp_path)


def test_a_second_commit_in_the_same_transaction_needs_no_sequence(tmp_path: Path) -> None:
    """The coordinator's batches carry base sequence 0 each time (AppendOrigin.COORDINATOR
    checks none); a client's would be a duplicate."""
    async def test(rig: Rig) -> None:
        assert await txn_commit(rig, {TP: 1}) == {TP: ErrorCode.NONE}
        assert await txn_commit(rig, {TP: 2}) == {TP: ErrorCode.NONE}
        marker(rig, commit=True)
        assert fetched(rig) == 2
    on_virtual_time(test, tmp_path)


def test_a_fenced_producer_epoch_is_invalid_producer_epoch(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        assert await txn_commit(rig, {TP: 1}, epoch=EPOCH + 1) == {TP: ErrorCode.NONE}
        assert await txn_commit(rig, {TP1: 1}, epoch=EPOCH) == {TP1: ErrorCode.INVALID_PRODUCER_EPOCH}
        assert TP1 not in rig.group().pending_txn_offsets[PID]
    on_virtual_time(test, tmp_path)


def test_a_commit_written_after_the_transactions_record_wins_over_its_commit(tmp_path: Path) -> None:
    """Kafka orders committed offsets by where they were written: a transaction's offset becomes
    committed only over an older one."""
    async def test(rig: Rig) -> None:
        await txn_commit(rig, {TP: 42})
        await plain_commit(rig, {TP: 50})
        marker(rig, commit=True)
        assert fetched(rig) == 50
    on_virtual_time(test, tmp_path)


def test_a_commit_written_before_the_transactions_record_loses_to_its_commit(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await plain_commit(rig, {TP: 50})
        await txn_commit(rig, {TP: 42})
        marker(rig, commit=True)
        assert fetched(rig) == 42
    on_virtual_time(test, tmp_path)


def test_a_group_that_never_used_transactions_keeps_no_commit_positions(tmp_path: Path) -> None:
    """Where each commit was written matters only against a transaction's: the many groups
    without one do not pay a position per offset."""
    async def test(rig: Rig) -> None:
        await plain_commit(rig, {TP: 1, TP1: 1})
        await plain_commit(rig, {TP: 2})
        assert rig.group().offset_positions == {}
        await txn_commit(rig, {TP: 3})
        await plain_commit(rig, {TP1: 4})
        assert rig.group().offset_positions == {TP1: 4}  # the plain batch's offset in the log
    on_virtual_time(test, tmp_path)


def test_a_failed_write_withdraws_the_pending_offsets(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        committing = asyncio.ensure_future(txn_commit(rig, {TP: 42}))
        await asyncio.sleep(0)
        assert fetched(rig, stable=True) == ErrorCode.UNSTABLE_OFFSET_COMMIT
        rig.advance(COMMIT_TIMEOUT_MS)
        assert await committing == {TP: ErrorCode.REQUEST_TIMED_OUT}
        assert fetched(rig, stable=True) is None
        assert not rig.group().pending_txn_offsets
    on_virtual_time(test, tmp_path, isr=(0, 1))


# -- who may commit (Kafka's validateOffsetCommit with isTransactional, KIP-447) ---------------

def test_a_group_that_does_not_exist_is_created_empty(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        assert await txn_commit(rig, {TP: 1}, group="new") == {TP: ErrorCode.NONE}
        assert rig.group("new").is_state(GroupState.EMPTY)
    on_virtual_time(test, tmp_path)


def test_a_commit_without_member_or_generation_goes_to_a_group_with_members(tmp_path: Path) -> None:
    """TxnOffsetCommit before v3 names neither; an OffsetCommit so would be UNKNOWN_MEMBER_ID."""
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        assert await txn_commit(rig, {TP: 1}) == {TP: ErrorCode.NONE}
    on_virtual_time(test, tmp_path)


def test_the_current_member_and_generation_may_commit(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        assert await txn_commit(rig, {TP: 1}, member_id=m, generation_id=1) == {TP: ErrorCode.NONE}
    on_virtual_time(test, tmp_path)


def test_another_generation_is_illegal_generation(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        assert await txn_commit(rig, {TP: 1}, member_id=m, generation_id=2) == {TP: ErrorCode.ILLEGAL_GENERATION}
        assert not rig.group().pending_txn_offsets
    on_virtual_time(test, tmp_path)


def test_a_member_the_group_does_not_know_is_unknown_member_id(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        assert await txn_commit(rig, {TP: 1}, member_id="zombie", generation_id=1) == \
            {TP: ErrorCode.UNKNOWN_MEMBER_ID}
    on_virtual_time(test, tmp_path)


def test_a_replaced_static_member_is_fenced_instance_id(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        old = await rig.stable_member(instance="i")
        rejoined = await rig.join(instance="i")  # restarted: a new member id takes the place
        assert rejoined.member_id != old
        assert await txn_commit(rig, {TP: 1}, member_id=old, group_instance_id="i", generation_id=1) == \
            {TP: ErrorCode.FENCED_INSTANCE_ID}
    on_virtual_time(test, tmp_path)


def test_a_commit_without_a_producer_id_is_invalid_producer_id_mapping(tmp_path: Path) -> None:
    """No transaction has producer id -1 (Kafka would store such a commit as a plain one)."""
    async def test(rig: Rig) -> None:
        assert await txn_commit(rig, {TP: 1}, producer_id=-1) == {TP: ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        assert rig.manager.get("g") is None
    on_virtual_time(test, tmp_path)


def test_an_empty_group_id_is_invalid_group_id(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        assert await txn_commit(rig, {TP: 1}, group="") == {TP: ErrorCode.INVALID_GROUP_ID}
    on_virtual_time(test, tmp_path)


def test_a_group_this_broker_does_not_coordinate_is_not_coordinator(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        rig.c.on_resignation(0)
        assert await txn_commit(rig, {TP: 1}) == {TP: ErrorCode.NOT_COORDINATOR}
    on_virtual_time(test, tmp_path)


def test_a_group_being_loaded_is_coordinator_load_in_progress(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        rig.c.on_resignation(0)
        rig.c.on_election(0, 1)  # the load has not run yet
        assert await txn_commit(rig, {TP: 1}) == {TP: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    on_virtual_time(test, tmp_path)


# -- the group's other offset rules, with transactions -----------------------------------------

def test_an_empty_group_with_only_pending_offsets_is_not_buried_by_expiry(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await txn_commit(rig, {TP: 1}, group="simple")
        rig.advance(10 * 60_000)
        rig.c.expire_offsets()
        assert rig.manager.get("simple") is not None
        marker(rig, commit=True)
        assert fetched(rig, group="simple") == 1
    on_virtual_time(test, tmp_path, offsets_retention_ms=60_000)


def test_deleting_a_partitions_offsets_drops_those_pending_too(tmp_path: Path) -> None:
    """Kafka's removeOffsets (OffsetDelete, deleted topics)."""
    async def test(rig: Rig) -> None:
        await txn_commit(rig, {TP: 1, TP1: 2}, group="simple")
        assert rig.c.handle_deleted_partitions([TP]) == 0  # none committed yet
        marker(rig, commit=True)
        assert (fetched(rig, group="simple"), fetched(rig, group="simple", tp=TP1)) == (None, 2)
    on_virtual_time(test, tmp_path)


# -- reading the offsets partition back (Kafka's loadGroupsAndOffsets) ------------------------

async def reload(rig: Rig) -> None:
    rig.c.on_resignation(0)
    await rig.load(leader_epoch=1)


def test_a_reload_finds_committed_aborted_and_open_transactions_as_the_log_left_them(tmp_path: Path) -> None:
    tp2 = TopicPartition("t", 2)

    async def test(rig: Rig) -> None:
        await plain_commit(rig, {TP: 1, TP1: 1, tp2: 1})
        await txn_commit(rig, {TP: 10}, producer_id=1)
        marker(rig, commit=True, producer_id=1)
        await txn_commit(rig, {TP1: 20}, producer_id=2)
        marker(rig, commit=False, producer_id=2)
        await txn_commit(rig, {tp2: 30}, producer_id=3)  # no marker yet
        await reload(rig)
        assert [fetched(rig, tp=tp) for tp in (TP, TP1, tp2)] == [10, 1, 1]
        assert fetched(rig, stable=True, tp=tp2) == ErrorCode.UNSTABLE_OFFSET_COMMIT
        assert marker(rig, commit=True, producer_id=3) == 1  # the open one, settled after the reload
        assert fetched(rig, stable=True, tp=tp2) == 30
    on_virtual_time(test, tmp_path)


def test_a_reload_orders_a_transactions_offsets_by_where_they_were_written(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await txn_commit(rig, {TP: 10})          # the transaction's record first...
        await plain_commit(rig, {TP: 50, TP1: 50})
        await txn_commit(rig, {TP1: 20})         # ...and here after the plain commit
        marker(rig, commit=True)
        assert (fetched(rig), fetched(rig, tp=TP1)) == (50, 20)
        await reload(rig)
        assert (fetched(rig), fetched(rig, tp=TP1)) == (50, 20)
    on_virtual_time(test, tmp_path)


def test_a_group_with_only_an_open_transactions_offsets_is_loaded_empty(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await txn_commit(rig, {TP: 7}, group="txn-only")
        await reload(rig)
        assert rig.group("txn-only").is_state(GroupState.EMPTY)
        assert fetched(rig, group="txn-only", stable=True) == ErrorCode.UNSTABLE_OFFSET_COMMIT
        marker(rig, commit=True)
        assert fetched(rig, group="txn-only") == 7
    on_virtual_time(test, tmp_path)


def test_a_marker_written_while_the_partition_loads_is_seen_by_the_load(tmp_path: Path) -> None:
    """The completion finds no group (not loaded yet): the load, past the log end it began
    with, must read the marker."""
    async def test(rig: Rig) -> None:
        await txn_commit(rig, {TP: 7})
        rig.c.on_resignation(0)
        rig.c.on_election(0, 1)
        await asyncio.sleep(0)  # the load has read the log as it was and yields
        assert marker(rig, commit=True) == 0
        await rig.scheduler.run_tasks()
        assert fetched(rig, stable=True) == 7
    on_virtual_time(test, tmp_path)
