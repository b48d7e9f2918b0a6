"""Idempotent-producer and transaction state: the pure ProducerStateManager, and a Partition over
a real Log keeping it in step with leader appends, follower appends, truncation and reopening."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from odradek.broker.partition import Partition
from odradek.broker.producer_state import (
    MAX_SEQUENCE,
    AbortedTxn,
    CompletedTxn,
    Duplicate,
    ProducerStateError,
    ProducerStateManager,
    last_sequence,
)
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.log.log import Log, LogConfig
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    TRANSACTIONAL_FLAG,
    BatchHeader,
    ControlMarker,
    build_batch,
    build_control_batch,
    control_marker,
    iter_batches,
)

PID = 1000


def raw(seq: int, n: int = 1, pid: int = PID, epoch: int = 0, base_offset: int = 0,
        txn: bool = False) -> bytes:
    return build_batch([(None, b"v%d" % i) for i in range(n)], base_offset=base_offset, timestamp_ms=1000,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       attributes=TRANSACTIONAL_FLAG if txn else 0)


def header(seq: int, n: int = 1, pid: int = PID, epoch: int = 0, base_offset: int = 0,
           txn: bool = False) -> BatchHeader:
    (h,) = iter_batches(raw(seq, n, pid, epoch, base_offset, txn))
    return h


def marker_batch(pid: int = PID, epoch: int = 0, commit: bool = True,
                 coordinator_epoch: int = 0) -> tuple[BatchHeader, ControlMarker | None]:
    data = build_control_batch(pid, epoch, commit, coordinator_epoch, timestamp_ms=1000)
    (h,) = iter_batches(data)
    return h, control_marker(data, h)


class Leader:
    """A ProducerStateManager driven as a leader drives it, with a fake log end offset; `log`
    holds what rebuild takes."""

    def __init__(self) -> None:
        self.state = ProducerStateManager()
        self.log: list[tuple[BatchHeader, ControlMarker | None]] = []
        self.end = 0

    def append(self, h: BatchHeader) -> Duplicate | tuple[int, int]:
        dup = self.state.validate([h])
        if dup is not None:
            return dup
        first, last = self.end, self.end + h.last_offset_delta
        self.state.update(h, first, last)
        self.log.append((h._replace(base_offset=first), None))
        self.end = last + 1
        return first, last

    def txn(self, seq: int, n: int = 1, pid: int = PID, epoch: int = 0) -> tuple[int, int]:
        offsets = self.append(header(seq, n, pid, epoch, txn=True))
        assert not isinstance(offsets, Duplicate)
        return offsets

    def end_txn(self, pid: int = PID, commit: bool = True, epoch: int = 0,
                coordinator_epoch: int = 0) -> CompletedTxn | None:
        """A WriteTxnMarkers append: checked, then written at the log end."""
        self.state.validate_marker(pid, epoch, coordinator_epoch)
        h, marker = marker_batch(pid, epoch, commit, coordinator_epoch)
        h = h._replace(base_offset=self.end)
        self.log.append((h, marker))
        self.end += 1
        return self.state.update(h, h.base_offset, h.last_offset, marker)


def refused(leader: Leader, h: BatchHeader) -> ErrorCode:
    with pytest.raises(ProducerStateError) as info:
        leader.append(h)
    return info.value.error


def test_batches_without_producer_id_are_never_checked() -> None:
    leader = Leader()
    plain = next(iter_batches(build_batch([(None, b"x")])))
    assert leader.append(plain) == (0, 0)
    assert leader.append(plain) == (1, 1)
    assert leader.state.producers == {}


def test_each_of_the_last_five_batches_is_a_duplicate_and_the_sixth_oldest_is_not() -> None:
    leader = Leader()
    seq = 0
    for _ in range(6):
        leader.append(header(seq, n=3))
        seq += 3
    end = leader.end
    # batches 1..5 (sequences 3..17) are cached, each answered with its original offsets
    for i in range(1, 6):
        assert leader.append(header(3 * i, n=3)) == Duplicate(3 * i, 3 * i + 2)
    assert leader.end == end
    # batch 0 fell out of the cache: no longer recognised, and out of sequence
    assert refused(leader, header(0, n=3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leader.end == end


def test_a_batch_overlapping_a_cached_one_is_not_a_duplicate() -> None:
    leader = Leader()
    leader.append(header(0, n=5))
    assert refused(leader, header(0, n=4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_gap_is_out_of_order() -> None:
    leader = Leader()
    leader.append(header(0, n=2))
    assert refused(leader, header(3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leader.append(header(2)) == (2, 2)


def test_an_unknown_producer_may_start_at_any_sequence() -> None:
    leader = Leader()
    assert leader.append(header(42, n=2)) == (0, 1)
    assert leader.append(header(44)) == (2, 2)


def test_a_new_epoch_must_start_at_zero_and_fences_the_old_one() -> None:
    leader = Leader()
    leader.append(header(0, n=2, epoch=0))
    assert refused(leader, header(2, epoch=1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leader.append(header(0, epoch=1)) == (2, 2)
    assert refused(leader, header(2, epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    # a retry from the old epoch is fenced too, not answered as a duplicate
    assert refused(leader, header(0, n=2, epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    # the new epoch's own batch is still recognised
    assert leader.append(header(0, epoch=1)) == Duplicate(2, 2)


def test_sequences_wrap_from_int32_max_to_zero() -> None:
    leader = Leader()
    leader.append(header(MAX_SEQUENCE - 1, n=1))
    wrapping = header(MAX_SEQUENCE, n=3)  # records MAX, 0, 1
    assert last_sequence(wrapping) == 1
    assert leader.append(wrapping) == (1, 3)
    assert leader.append(header(MAX_SEQUENCE, n=3)) == Duplicate(1, 3)
    assert refused(leader, header(3)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leader.append(header(2)) == (4, 4)


def test_producers_are_independent() -> None:
    leader = Leader()
    leader.append(header(0, pid=1))
    leader.append(header(0, pid=2))
    assert leader.append(header(0, pid=1)) == Duplicate(0, 0)
    assert leader.append(header(1, pid=2)) == (2, 2)


def test_a_negative_sequence_with_a_producer_id_is_invalid() -> None:
    assert refused(Leader(), header(-1)) == ErrorCode.INVALID_RECORD


def test_more_than_one_idempotent_batch_per_append_is_invalid() -> None:
    state = ProducerStateManager()
    with pytest.raises(ProducerStateError) as info:
        state.validate([header(0), header(1)])
    assert info.value.error == ErrorCode.INVALID_RECORD


def test_rebuild_from_the_log_equals_the_incremental_state() -> None:
    leader = Leader()
    for pid in (7, 8, 9):
        for seq in range(0, 24, 3):
            leader.append(header(seq, n=3, pid=pid))
    leader.append(header(0, n=2, pid=8, epoch=1))
    leader.append(next(iter_batches(build_batch([(None, b"plain")]))))
    assert all(marker is None for _, marker in leader.log)
    rebuilt = ProducerStateManager()
    rebuilt.update(header(0, pid=99), 0, 0)  # stale state a rebuild must drop
    rebuilt.rebuild(leader.log)
    assert rebuilt.producers == leader.state.producers
    assert set(rebuilt.producers) == {7, 8, 9}
    assert len(rebuilt.producers[7].batches) == 5 and len(rebuilt.producers[8].batches) == 1


# -- transactions --------------------------------------------------------------------------------


def test_a_committed_transaction_opens_at_its_first_batch_and_closes_at_its_marker() -> None:
    leader = Leader()
    assert leader.txn(0, n=3) == (0, 2)
    assert leader.state.ongoing_transactions() == {PID: 0}
    assert leader.txn(3, n=2) == (3, 4)  # continues the same transaction
    assert leader.state.ongoing_transactions() == {PID: 0}
    assert leader.state.last_stable_offset(5) == 0
    assert leader.end_txn(commit=True, coordinator_epoch=4) == CompletedTxn(PID, 0, 5, aborted=False)
    entry = leader.state.entry(PID)
    assert entry is not None
    assert (entry.txn_first_offset, entry.coordinator_epoch, entry.epoch) == (None, 4, 0)
    assert leader.state.ongoing_transactions() == {}
    assert leader.state.aborted_transactions(0, 100) == []
    # the marker is not a sequenced batch: the producer's sequence goes on from its data
    assert [b.last_offset for b in entry.batches] == [2, 4]
    assert leader.txn(5) == (6, 6)
    assert leader.state.ongoing_transactions() == {PID: 6}


def test_an_aborted_transaction_is_listed_with_its_last_stable_offset() -> None:
    leader = Leader()
    leader.txn(0, n=2)
    assert leader.end_txn(commit=False) == CompletedTxn(PID, 0, 2, aborted=True)
    assert leader.state.aborted_transactions(0, 3) == [AbortedTxn(PID, 0, 2, 3)]


def test_an_abort_with_another_transaction_open_is_stable_only_from_that_ones_start() -> None:
    leader = Leader()
    leader.txn(0, pid=1)  # 0
    leader.txn(0, pid=2)  # 1
    leader.txn(0, pid=3)  # 2
    leader.txn(1, pid=1)  # 3
    leader.end_txn(pid=1, commit=False)  # 4: producers 2 and 3 are still open, 2 first
    leader.end_txn(pid=3, commit=False)  # 5: producer 2 still open
    leader.end_txn(pid=2, commit=False)  # 6: nothing open
    assert leader.state.aborted_transactions(0, 7) == [
        AbortedTxn(1, 0, 4, 1), AbortedTxn(3, 2, 5, 1), AbortedTxn(2, 1, 6, 7)]


def test_last_stable_offset_with_two_interleaved_transactions() -> None:
    leader = Leader()
    state = leader.state
    assert state.last_stable_offset(0) == 0
    leader.append(header(0, pid=9))  # 0: idempotent, not transactional
    assert state.last_stable_offset(1) == 1
    leader.txn(0, pid=1)  # 1
    leader.txn(0, pid=2)  # 2
    leader.txn(1, pid=1)  # 3
    assert state.last_stable_offset(1) == 1  # never above the high watermark
    assert state.last_stable_offset(4) == 1
    leader.end_txn(pid=1)  # 4
    leader.txn(1, pid=2)  # 5
    leader.end_txn(pid=2, commit=False)  # 6
    assert state.ongoing_transactions() == {}
    # both closed, but the LSO passes neither until the high watermark passes its marker
    assert state.last_stable_offset(4) == 1
    assert state.last_stable_offset(5) == 2
    assert state.last_stable_offset(6) == 2
    assert state.last_stable_offset(7) == 7
    assert state.last_stable_offset(9) == 9


def test_an_earlier_transaction_closing_later_holds_the_lso_back_until_its_marker() -> None:
    leader = Leader()
    state = leader.state
    leader.txn(0, pid=1)  # 0
    leader.txn(0, pid=2)  # 1
    leader.end_txn(pid=2)  # 2
    leader.end_txn(pid=1)  # 3
    assert [state.last_stable_offset(hw) for hw in (2, 3, 4)] == [0, 0, 4]


def test_last_stable_offset_and_aborted_ranges_match_their_definitions() -> None:
    """Random interleavings against the definitions, read back at a rising high watermark."""
    rng = random.Random(7)
    for _ in range(60):
        leader = Leader()
        seqs = {pid: 0 for pid in range(1, 5)}
        open_at: dict[int, int] = {}
        closed: list[CompletedTxn] = []
        for _ in range(rng.randrange(1, 40)):
            pid = rng.randrange(1, 5)
            if pid in open_at and rng.random() < 0.4:
                completed = leader.end_txn(pid=pid, commit=rng.random() < 0.5)
                assert completed is not None and completed.first_offset == open_at.pop(pid)
                closed.append(completed)
            else:
                n = rng.randrange(1, 3)
                first, _ = leader.txn(seqs[pid], n=n, pid=pid)
                seqs[pid] += n
                open_at.setdefault(pid, first)
        state = leader.state
        assert state.ongoing_transactions() == open_at
        for hw in range(leader.end + 1):
            unstable = [*open_at.values(), *(t.first_offset for t in closed if t.last_offset >= hw)]
            assert state.last_stable_offset(hw) == min([hw, *unstable])
        aborted = [t for t in closed if t.aborted]
        for start in range(leader.end + 1):
            for end in range(start, leader.end + 2):
                got = [(t.producer_id, t.first_offset, t.last_offset)
                       for t in state.aborted_transactions(start, end)]
                assert got == [t[:3] for t in aborted if t.last_offset >= start and t.first_offset < end]


def test_aborted_transactions_range_queries() -> None:
    leader = Leader()
    leader.txn(0, n=3, pid=1)  # 0..2
    leader.end_txn(pid=1, commit=False)  # 3
    leader.txn(0, n=2, pid=2)  # 4..5
    leader.end_txn(pid=2, commit=True)  # 6
    leader.txn(3, n=2, pid=1)  # 7..8
    leader.end_txn(pid=1, commit=False)  # 9
    state = leader.state
    first, second = AbortedTxn(1, 0, 3, 4), AbortedTxn(1, 7, 9, 10)
    assert state.aborted_transactions(0, 10) == [first, second]
    assert state.aborted_transactions(0, 1) == [first]
    assert state.aborted_transactions(3, 7) == [first]
    assert state.aborted_transactions(4, 7) == []
    assert state.aborted_transactions(4, 8) == [second]
    assert state.aborted_transactions(9, 50) == [second]
    assert state.aborted_transactions(10, 50) == []


def test_a_non_transactional_batch_inside_an_open_transaction_is_invalid_txn_state() -> None:
    leader = Leader()
    leader.txn(0, n=2)
    assert refused(leader, header(2)) == ErrorCode.INVALID_TXN_STATE
    assert leader.append(header(0, n=2, txn=True)) == Duplicate(0, 1)  # a retry still answers
    assert leader.txn(2) == (2, 2)
    leader.end_txn()
    assert leader.append(header(3)) == (4, 4)  # outside a transaction again


def test_validate_passes_over_control_batches() -> None:
    leader = Leader()
    leader.txn(0)
    control, _ = marker_batch()
    assert leader.state.validate([control]) is None
    assert leader.state.validate([control, control]) is None


def test_a_marker_for_a_producer_with_nothing_open_completes_nothing() -> None:
    leader = Leader()
    assert leader.end_txn(pid=5, commit=False, epoch=3, coordinator_epoch=2) is None
    entry = leader.state.entry(5)
    assert entry is not None and (entry.epoch, entry.coordinator_epoch, len(entry.batches)) == (3, 2, 0)
    assert leader.state.aborted_transactions(0, 10) == []
    assert leader.state.last_stable_offset(1) == 1
    assert leader.state.last_offsets() == {}  # no data batch for the cleaner to keep
    assert leader.txn(0, pid=5, epoch=3) == (1, 1)  # its own marker does not open a transaction


def test_a_marker_with_a_higher_epoch_fences_the_producer() -> None:
    leader = Leader()
    leader.txn(0, n=2, epoch=0)
    # the coordinator aborts the timed-out transaction and bumps the epoch
    assert leader.end_txn(commit=False, epoch=1) == CompletedTxn(PID, 0, 2, aborted=True)
    entry = leader.state.entry(PID)
    assert entry is not None and (entry.epoch, len(entry.batches)) == (1, 0)
    assert refused(leader, header(2, epoch=0, txn=True)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert leader.state.last_offsets() == {}


def test_validate_marker_fences_old_coordinators_and_producer_epochs() -> None:
    leader = Leader()
    state = leader.state
    state.validate_marker(PID, 0, 0)  # an unknown producer: accepted
    leader.txn(0, epoch=2)
    leader.end_txn(epoch=2, coordinator_epoch=5)
    with pytest.raises(ProducerStateError) as info:
        state.validate_marker(PID, 2, 4)
    assert info.value.error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    with pytest.raises(ProducerStateError) as info:
        state.validate_marker(PID, 1, 5)
    assert info.value.error == ErrorCode.INVALID_PRODUCER_EPOCH
    state.validate_marker(PID, 2, 5)
    state.validate_marker(PID, 3, 6)
    state.validate_marker(PID + 1, 0, 0)


def test_rebuild_with_transactions_equals_the_incremental_state() -> None:
    leader = Leader()
    leader.txn(0, n=2, pid=1)  # 0..1
    leader.txn(0, pid=2)  # 2
    leader.end_txn(pid=1, commit=False, coordinator_epoch=3)  # 3
    leader.append(header(0, pid=3))  # 4
    leader.txn(1, pid=2)  # 5
    leader.end_txn(pid=2, commit=True, coordinator_epoch=3)  # 6
    leader.txn(2, pid=1)  # 7: open
    leader.end_txn(pid=4, commit=False, epoch=1, coordinator_epoch=1)  # 8: nothing open
    rebuilt = ProducerStateManager()
    rebuilt.update(*marker_batch(pid=99, commit=False)[:1], 0, 0)  # stale state a rebuild must drop
    rebuilt.update(header(0, pid=98, txn=True), 0, 0)
    rebuilt.rebuild(leader.log)
    assert rebuilt.producers == leader.state.producers
    assert rebuilt.ongoing_transactions() == leader.state.ongoing_transactions() == {1: 7}
    assert rebuilt.aborted_transactions(0, 9) == leader.state.aborted_transactions(0, 9) == [
        AbortedTxn(1, 0, 3, 2)]
    for hw in range(10):
        assert rebuilt.last_stable_offset(hw) == leader.state.last_stable_offset(hw)


def test_rebuild_given_the_high_watermark_keeps_only_markers_above_it() -> None:
    leader = Leader()
    for seq in range(10):
        leader.txn(seq)  # at 2 * seq, its marker just after
        leader.end_txn()
    rebuilt = ProducerStateManager()
    rebuilt.rebuild(leader.log, high_watermark=17)
    assert len(rebuilt._unreplicated) == 2  # markers at 17 and 19
    assert rebuilt.last_stable_offset(17) == 16
    assert rebuilt.last_stable_offset(20) == 20


def test_truncate_head_drops_aborted_transactions_below_the_log_start() -> None:
    leader = Leader()
    for pid in (1, 2, 3):
        leader.txn(0, pid=pid)
        leader.end_txn(pid=pid, commit=False)  # markers at 1, 3, 5
    leader.txn(1, pid=1)  # 6: open
    state = leader.state
    state.truncate_head(3)
    assert [t.producer_id for t in state.aborted_transactions(0, 10)] == [2, 3]
    state.truncate_head(2)  # the log start never goes back
    assert [t.producer_id for t in state.aborted_transactions(0, 10)] == [2, 3]
    state.truncate_head(6)
    assert state.aborted_transactions(0, 10) == []
    assert state.ongoing_transactions() == {1: 6}  # open transactions stay
    assert state.last_stable_offset(7) == 6
    state.truncate_head(7)  # even past an open transaction's start, the LSO names no deleted offset
    assert state.last_stable_offset(7) == 7
    assert state.ongoing_transactions() == {1: 6}


# -- Partition over a real Log -------------------------------------------------------------------

TP = TopicPartition("t", 0)


def leader_partition(log: Log) -> Partition:
    p = Partition(TP, log, broker_id=1)
    p.apply_state(PartitionState(TP, 1, leader=1, leader_epoch=0, isr=(1,), zk_version=0, replicas=(1,)))
    return p


def test_partition_answers_a_retry_with_its_first_offsets_and_writes_it_once(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    p = leader_partition(log)
    assert p.append_as_leader(raw(0, n=2)) == (0, 1)
    assert p.append_as_leader(raw(2, n=3)) == (2, 4)
    assert p.append_as_leader(raw(0, n=2)) == (0, 1)
    assert p.log_end_offset == 5
    with pytest.raises(ProducerStateError):
        p.append_as_leader(raw(9))
    assert p.log_end_offset == 5


def test_state_survives_reopening_and_truncation(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200))  # several segments
    p = leader_partition(log)
    for seq in range(0, 20, 2):
        p.append_as_leader(raw(seq, n=2))
    log.close()
    reopened = leader_partition(Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200)))
    assert len(reopened.log.segment_base_offsets()) > 1
    assert reopened.producers.producers == p.producers.producers
    assert reopened.append_as_leader(raw(16, n=2)) == (16, 17)
    reopened.truncate_to(14)  # drops sequences 14..19
    assert reopened.append_as_leader(raw(12, n=2)) == (12, 13)  # still a duplicate
    with pytest.raises(ProducerStateError):
        reopened.append_as_leader(raw(16, n=2))  # would skip 14..15
    assert reopened.append_as_leader(raw(14, n=2)) == (14, 15)
    assert reopened.log_end_offset == 16


def test_a_follower_learns_the_state_it_needs_as_the_next_leader(tmp_path: Path) -> None:
    leader = leader_partition(Log.open(tmp_path / "a", LogConfig()))
    follower = Partition(TP, Log.open(tmp_path / "b", LogConfig()), broker_id=2)
    for seq in range(0, 6, 2):
        leader.append_as_leader(raw(seq, n=2))
        follower.append_as_follower(leader.log.read(follower.log_end_offset, 1 << 20), leader.high_watermark)
    assert follower.producers.producers == leader.producers.producers
    follower.apply_state(PartitionState(TP, 1, leader=2, leader_epoch=1, isr=(2,), zk_version=1, replicas=(1, 2)))
    assert follower.append_as_leader(raw(4, n=2)) == (4, 5)
    assert follower.log_end_offset == 6


def test_log_iterates_stored_batch_headers_across_segments_from_an_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=200))
    for seq in range(0, 20, 2):
        log.append_as_leader(raw(seq, n=2), leader_epoch=0)
    assert len(log.segment_base_offsets()) > 1
    assert [h.base_offset for h in log.iter_batch_headers()] == list(range(0, 20, 2))
    assert [h.base_offset for h in log.iter_batch_headers(from_offset=7)] == list(range(6, 20, 2))
    assert [h.base_sequence for h in log.iter_batch_headers(from_offset=19)] == [18]
    assert list(log.iter_batch_headers(from_offset=20)) == []
