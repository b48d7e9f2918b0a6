"""What the coordinator shows operators (KIP-664): ListTransactions' filters and
DescribeTransactions' answers, Kafka's errors included, on virtual time over a real log (the
rig of test_transaction_coordinator.py). They only read: nothing here changes a transaction."""
from __future__ import annotations

from pathlib import Path

from test_transaction_coordinator import START_MS, TIMEOUT_MS, A, B, Rig, on_virtual_time, settle

from odradek.coordinator.transaction.transaction_metadata import TransactionState
from odradek.protocol.errors import ErrorCode

S = TransactionState


def listed(rig: Rig, **filters: object) -> set[tuple[str, int, TransactionState]]:
    listing = rig.c.list_transactions(**filters)  # type: ignore[arg-type]
    assert listing.error == ErrorCode.NONE
    return {(t.transactional_id, t.producer_id, t.state) for t in listing.transactions}


def test_list_filters_by_state_and_producer_id_and_answers_unknown_states_back(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        committed, epoch = await rig.begin("committed")
        assert await rig.c.end_transaction("committed", committed, epoch, commit=True) == ErrorCode.NONE
        await settle()
        ongoing, _ = await rig.begin("ongoing")
        empty = (await rig.c.init_producer_id("empty", TIMEOUT_MS, None)).producer_id
        everything = {("committed", committed, S.COMPLETE_COMMIT), ("ongoing", ongoing, S.ONGOING),
                      ("empty", empty, S.EMPTY)}
        assert listed(rig) == everything
        assert listed(rig, state_names=["Ongoing", "Empty"]) == everything - {("committed", committed,
                                                                               S.COMPLETE_COMMIT)}
        assert listed(rig, producer_ids={committed, 99}) == {("committed", committed, S.COMPLETE_COMMIT)}
        assert listed(rig, producer_ids={ongoing}, state_names=["CompleteCommit"]) == set()
        # a state Kafka does not know matches nothing, and is answered back (once)
        odd = rig.c.list_transactions(state_names=["Bogus", "ongoing", "Bogus"])
        assert (odd.error, odd.unknown_state_filters, odd.transactions) == (ErrorCode.NONE, ("Bogus", "ongoing"), ())
    on_virtual_time(test, tmp_path)


def test_list_duration_filter_keeps_transactions_running_longer_than_it(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        old, _ = await rig.begin("old")
        rig.scheduler.advance(5_000)
        young, _ = await rig.begin("young")  # started 5 s after "old"
        rig.scheduler.advance(1_000)
        assert {t[0] for t in listed(rig, duration_ms=2_000)} == {"old"}
        assert {t[0] for t in listed(rig, duration_ms=0)} == {"old", "young"}
        assert {t[0] for t in listed(rig, duration_ms=6_000)} == set()  # not longer than 6 s
        assert {t[0] for t in listed(rig, duration_ms=-1)} == {"old", "young"}
        assert old != young
    on_virtual_time(test, tmp_path)


def test_describe_names_the_open_transaction_and_then_the_partitions_still_owed_a_marker(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        pid, epoch = await rig.begin()
        d = rig.c.describe_transaction("t")
        assert (d.error, d.state, d.producer_id, d.producer_epoch) == (ErrorCode.NONE, S.ONGOING, pid, epoch)
        assert (d.txn_timeout_ms, d.txn_start_timestamp, d.partitions) == (TIMEOUT_MS, START_MS, frozenset({A, B}))
        rig.markers.answers[B] = ErrorCode.NOT_LEADER_OR_FOLLOWER  # B's leader cannot take its marker yet
        assert await rig.c.end_transaction("t", pid, epoch, commit=False) == ErrorCode.NONE
        await settle()
        d = rig.c.describe_transaction("t")
        assert (d.state, d.partitions) == (S.PREPARE_ABORT, frozenset({B}))
        del rig.markers.answers[B]
        rig.scheduler.advance(100)
        await settle()
        d = rig.c.describe_transaction("t")
        assert (d.state, d.partitions, d.txn_start_timestamp) == (S.COMPLETE_ABORT, frozenset(), START_MS)
        fresh = await rig.c.init_producer_id("fresh", TIMEOUT_MS, None)
        d = rig.c.describe_transaction("fresh")
        assert (d.state, d.producer_id, d.txn_start_timestamp) == (S.EMPTY, fresh.producer_id, -1)
    on_virtual_time(test, tmp_path)


def test_describe_and_list_errors_are_kafkas(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.begin()
        assert rig.c.describe_transaction("unknown").error == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert rig.c.describe_transaction("").error == ErrorCode.INVALID_REQUEST
        # another coordinator, its partition still being read back, then not its own at all
        loading = rig.coordinator()
        loading.on_election(0, 1)
        assert loading.describe_transaction("t").error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert loading.list_transactions().error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        loading.on_resignation(0)
        assert loading.describe_transaction("t").error == ErrorCode.NOT_COORDINATOR
        nothing = loading.list_transactions()
        assert (nothing.error, nothing.transactions) == (ErrorCode.NONE, ())
        loading.shutdown()
        assert loading.describe_transaction("t").error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert loading.list_transactions().error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        # reading changed nothing
        assert rig.state() is S.ONGOING
    on_virtual_time(test, tmp_path)
