"""The transactional workload's checker on hand-made histories: a clean one passes, and each
anomaly Jepsen's Kafka tests define, planted, is reported (and only it)."""
from __future__ import annotations

from odradek.common.graphs import strongly_connected
from odradek.coordinator.partitioning import partition_for
from odradek.faults.txn_checker import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    Read,
    Txn,
    TxnRecord,
    decode_record,
    encode_record,
    judge_copy,
    judge_reads,
    judge_transactions,
)
from odradek.faults.txn_workload import coordinator_broker


def _txn(producer: int, number: int, outcome: str, *records: tuple[int, int | None]) -> Txn:
    """records: (partition, acknowledged offset) in index order."""
    return Txn(producer, number, outcome, [TxnRecord(i, p, o) for i, (p, o) in enumerate(records)])


def _read(partition: int, offset: int, producer: int, number: int, index: int) -> Read:
    return partition, offset, encode_record(producer, number, index)


def _clean_history() -> tuple[list[Txn], list[Read], list[Read]]:
    """Producer 1 commits 1 (two records on partitions 0 and 1), aborts 2 (partition 0), commits 3
    (partition 0); producer 2 commits 1 (partition 1). Markers take offsets 2, 4 and 6 of
    partition 0 and 1, 3 of partition 1."""
    txns = [_txn(1, 1, COMMITTED, (0, 0), (1, 0)),
            _txn(1, 2, ABORTED, (0, 1)),
            _txn(1, 3, COMMITTED, (0, 3), (0, 5)),
            _txn(2, 1, COMMITTED, (1, 2))]
    committed = [_read(0, 0, 1, 1, 0), _read(1, 0, 1, 1, 1), _read(0, 3, 1, 3, 0), _read(0, 5, 1, 3, 1),
                 _read(1, 2, 2, 1, 0)]
    uncommitted = [*committed, _read(0, 1, 1, 2, 0)]
    return txns, committed, uncommitted


def _found(anomalies: dict[str, list[str]]) -> dict[str, int]:
    return {k: len(v) for k, v in anomalies.items() if v}


def test_values_round_trip_and_foreign_values_are_none() -> None:
    assert decode_record(encode_record(2, 17, 9)) == (2, 17, 9)
    assert decode_record(b"0:p0-k1:3") is None and decode_record(b"\xff") is None


def test_a_clean_history_has_no_anomaly() -> None:
    anomalies, stats = judge_transactions(*_clean_history())
    assert _found(anomalies) == {}
    assert stats["committed"] == 3 and stats["aborted"] == 1 and stats["unknown"] == 0
    assert stats["records_committed"] == 5 and stats["aborted_records_seen_by_control"] == 1


def test_an_aborted_record_delivered_at_read_committed_is_an_aborted_read() -> None:
    txns, committed, uncommitted = _clean_history()
    committed.append(_read(0, 1, 1, 2, 0))
    anomalies, _ = judge_transactions(txns, committed, uncommitted)
    assert _found(anomalies) == {"aborted_read": 1}
    assert anomalies["aborted_read"][0].startswith("1:2:0 of aborted transaction 1:2")


def test_a_committed_record_never_delivered_is_a_lost_write() -> None:
    txns, committed, uncommitted = _clean_history()
    committed.remove(_read(1, 0, 1, 1, 1))      # half of a committed transaction
    uncommitted.remove(_read(1, 0, 1, 1, 1))
    anomalies, _ = judge_transactions(txns, committed, uncommitted)
    assert _found(anomalies) == {"lost_write": 1}
    assert "(1/2 delivered)" in anomalies["lost_write"][0]


def test_a_record_at_two_offsets_is_a_duplicate_and_breaks_the_order_no_more() -> None:
    txns, committed, uncommitted = _clean_history()
    again = _read(0, 7, 1, 3, 1)                  # 1:3:1 written again after the marker at 6
    committed.append(again)
    uncommitted.append(again)
    anomalies, _ = judge_transactions(txns, committed, uncommitted)
    # delivered elsewhere than its acknowledgement said, too
    assert _found(anomalies) == {"duplicate": 1, "inconsistent_offsets": 1}
    assert anomalies["duplicate"] == ["1:3:1 (committed) delivered from [(0, 5), (0, 7)]"]


def test_an_unknown_outcome_is_fine_all_or_nothing_and_torn_in_between() -> None:
    txns, committed, uncommitted = _clean_history()
    txns += [_txn(2, 2, UNKNOWN, (0, 8), (1, 5)),    # all delivered: it committed
             _txn(2, 3, UNKNOWN, (0, 9)),            # none: it aborted (or never got far)
             _txn(2, 4, UNKNOWN, (0, 11), (1, 7))]   # one of two: torn
    for read in (_read(0, 8, 2, 2, 0), _read(1, 5, 2, 2, 1), _read(0, 11, 2, 4, 0)):
        committed.append(read)
        uncommitted.append(read)
    uncommitted += [_read(0, 9, 2, 3, 0), _read(1, 7, 2, 4, 1)]
    anomalies, stats = judge_transactions(txns, committed, uncommitted)
    assert _found(anomalies) == {"torn_transaction": 1}
    assert anomalies["torn_transaction"][0].startswith("transaction 2:4 of unknown outcome: 1 of 2")
    assert stats["unknown_all_delivered"] == 1 and stats["unknown_none_delivered"] == 1


def test_a_producers_transactions_out_of_commit_order_in_a_partition_are_an_order_anomaly() -> None:
    txns = [_txn(1, 1, COMMITTED, (0, None)), _txn(1, 2, COMMITTED, (0, None), (0, None)),
            _txn(2, 1, COMMITTED, (0, None))]
    # 1:2 before 1:1 in partition 0; producer 2's record between them is no concern of producer 1's
    committed = [_read(0, 0, 1, 2, 0), _read(0, 1, 1, 2, 1), _read(0, 3, 2, 1, 0), _read(0, 5, 1, 1, 0)]
    anomalies, _ = judge_transactions(txns, committed, list(committed))
    assert _found(anomalies) == {"order": 1}
    assert anomalies["order"][0] == "partition 0, producer 1: 1 out of order, first 1:1:0 at 5 after 1:2:1 at 1"


def test_records_of_one_transaction_out_of_produce_order_are_an_order_anomaly() -> None:
    txns = [_txn(1, 1, COMMITTED, (0, None), (0, None))]
    committed = [_read(0, 0, 1, 1, 1), _read(0, 1, 1, 1, 0)]
    anomalies, _ = judge_transactions(txns, committed, list(committed))
    assert _found(anomalies) == {"order": 1}


def test_two_records_at_one_offset_across_readers_are_inconsistent_offsets() -> None:
    txns, committed, uncommitted = _clean_history()
    uncommitted.remove(_read(0, 1, 1, 2, 0))
    uncommitted.append(_read(0, 3, 1, 2, 0))   # the control read 1:2:0 where read_committed read 1:3:0
    anomalies, _ = judge_transactions(txns, committed, uncommitted)
    found = _found(anomalies)
    assert found["inconsistent_offsets"] == 2   # offset 3 holds two records; 1:2:0 not where acknowledged
    assert "(0, 3): " in anomalies["inconsistent_offsets"][0]


def test_a_value_no_transaction_wrote_is_unexpected() -> None:
    txns, committed, uncommitted = _clean_history()
    committed.append((1, 9, b"garbage"))
    uncommitted.append((1, 9, b"garbage"))
    anomalies, _ = judge_transactions(txns, committed, uncommitted)
    assert _found(anomalies) == {"unexpected_records": 2}


def test_a_control_that_saw_no_aborted_record_is_reported_blind() -> None:
    txns, committed, _ = _clean_history()
    anomalies, stats = judge_transactions(txns, committed, list(committed))
    assert _found(anomalies) == {"control_blind": 1}
    assert stats["aborted_records_seen_by_control"] == 0
    # an aborted transaction whose records were never acknowledged (purged before they were
    # sent) need not be in the log: nothing to see
    txns[1].records[0].offset = None
    anomalies, _ = judge_transactions(txns, committed, list(committed))
    assert _found(anomalies) == {}


def test_a_record_the_control_missed_is_reported_blind() -> None:
    txns, committed, uncommitted = _clean_history()
    uncommitted.remove(_read(1, 2, 2, 1, 0))
    anomalies, _ = judge_transactions(txns, committed, uncommitted)
    assert anomalies["control_blind"] == ["2:1:0 delivered at read_committed, never at read_uncommitted"]


# -- the consume-transform-produce copier ------------------------------------------------------------

def _source() -> dict[int, list[tuple[int, bytes]]]:
    return {0: [(0, b"a"), (1, b"b"), (2, b"c")], 1: [(0, b"d")]}


def test_reads_of_earlier_committed_transactions_are_clean() -> None:
    txns, committed, uncommitted = _clean_history()
    txns[2].reads = [(1, 1, 0), (2, 1, 0)]   # 1:3 read 1:1 and 2:1
    txns[3].reads = [(1, 1, 1)]              # 2:1 read 1:1
    anomalies, stats = judge_transactions(txns, committed, uncommitted)
    assert _found(anomalies) == {} and stats["reads_in_transactions"] == 3


def test_a_transaction_reading_its_own_or_a_later_record_is_a_precommitted_read() -> None:
    txns = [_txn(1, 1, COMMITTED, (0, 0)), _txn(1, 2, COMMITTED, (0, 2))]
    txns[1].reads = [(1, 2, 0)]
    txns[0].reads = [(1, 2, 0)]
    found = judge_reads(txns)
    assert len(found["precommitted_read"]) == 2
    assert "(its own)" in found["precommitted_read"][1] and "later" in found["precommitted_read"][0]
    assert found["g1c"] == [] and found["g1c_process"] == []


def test_two_transactions_reading_each_other_are_a_g1c_cycle() -> None:
    txns = [_txn(1, 1, COMMITTED, (0, 0)), _txn(2, 1, COMMITTED, (1, 0)), _txn(3, 1, COMMITTED, (2, 0))]
    txns[0].reads = [(2, 1, 0)]
    txns[1].reads = [(3, 1, 0)]
    txns[2].reads = [(1, 1, 0)]
    found = judge_reads(txns)
    assert len(found["g1c"]) == 1 and found["g1c_process"] == []
    assert found["g1c"][0] == "3 transactions, e.g. 1:1 -> 3:1 -> 2:1 -> 1:1"   # writer -> reader


def test_a_read_of_a_transaction_begun_after_the_reader_ended_is_a_g1c_process_cycle() -> None:
    """1:1 read 2:2, but 2:2 began after 2:1, which read 1:2, which began after 1:1 ended."""
    txns = [_txn(1, 1, COMMITTED, (0, 0)), _txn(1, 2, COMMITTED, (0, 2)),
            _txn(2, 1, COMMITTED, (1, 0)), _txn(2, 2, COMMITTED, (1, 2))]
    txns[0].reads = [(2, 2, 0)]
    txns[2].reads = [(1, 2, 0)]
    found = judge_reads(txns)
    assert found["g1c"] == [] and len(found["g1c_process"]) == 1
    assert found["g1c_process"][0].startswith("4 transactions, e.g. 1:1 -> 1:2 -> 2:1 -> 2:2 -> 1:1")


def test_strongly_connected_handles_a_long_chain_without_recursion() -> None:
    chain = {(1, n): {(1, n + 1)} for n in range(20_000)}
    chain[(1, 20_000)] = {(1, 0)}
    assert [len(c) for c in strongly_connected(chain)] == [20_001]


def test_an_exact_copy_in_order_is_clean() -> None:
    # the output has markers between the copier's transactions: offsets skip
    copied = [(0, 0, b"a"), (0, 1, b"b"), (0, 3, b"c"), (1, 0, b"d")]
    anomalies, stats = judge_copy({b"a", b"b", b"c", b"d"}, _source(), copied)
    assert _found(anomalies) == {}
    assert stats == {"source_records": 4, "copied_records": 4}


def test_a_record_copied_twice_missing_elsewhere_or_late_is_reported() -> None:
    copied = [(0, 0, b"a"), (0, 1, b"c"), (0, 3, b"b"), (0, 5, b"b"), (1, 0, b"x")]
    anomalies, _ = judge_copy({b"a", b"b", b"c", b"d", b"e"}, _source(), copied)
    assert anomalies["source_lost"] == ["e"]                          # acknowledged, not in the source
    assert anomalies["copy_lost"] == ["d (1 in the source, 0 copied)"]
    assert anomalies["copy_duplicated"] == ["b (1 in the source, 2 copied)"]
    assert anomalies["copy_unexpected"] == ["x at (1, 0)"]
    assert anomalies["copy_order"] == ["partition 0: output offset 3 holds source offset 1, after 2"]


def test_a_record_twice_in_the_source_may_be_copied_twice() -> None:
    source = {0: [(0, b"a"), (1, b"a")]}
    anomalies, _ = judge_copy({b"a"}, source, [(0, 0, b"a"), (0, 1, b"a")])
    assert _found(anomalies) == {}


def test_the_coordinator_is_the_broker_leading_most_of_the_ids_partitions() -> None:
    ids = [f"faults-txn-{i}" for i in range(3)]
    partitions = [partition_for(t, 50) for t in ids]
    leaders = {p: 1 for p in range(50)}
    leaders[partitions[0]] = 3
    leaders[partitions[1]] = 3
    # broker 3 leads the partitions of the first two (and of the third, should it share one)
    assert coordinator_broker(leaders, ids) == (3, sum(1 for p in partitions if leaders[p] == 3))
    assert coordinator_broker({}, ids) == (None, 0)
