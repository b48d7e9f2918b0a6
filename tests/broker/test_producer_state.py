"""Idempotent-producer state: the pure ProducerStateManager, and a Partition over a real Log
keeping it in step with leader appends, follower appends, truncation and reopening."""
from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.partition import Partition
from odradek.broker.producer_state import (
    MAX_SEQUENCE,
    Duplicate,
    ProducerStateError,
    ProducerStateManager,
    last_sequence,
)
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.log.log import Log, LogConfig
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import BatchHeader, build_batch, iter_batches

PID = 1000


def raw(seq: int, n: int = 1, pid: int = PID, epoch: int = 0, base_offset: int = 0) -> bytes:
    return build_batch([(None, b"v%d" % i) for i in range(n)], base_offset=base_offset, timestamp_ms=1000,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def header(seq: int, n: int = 1, pid: int = PID, epoch: int = 0, base_offset: int = 0) -> BatchHeader:
    (h,) = iter_batches(raw(seq, n, pid, epoch, base_offset))
    return h


class Leader:
    """A ProducerStateManager driven as a leader drives it, with a fake log end offset."""

    def __init__(self) -> None:
        self.state = ProducerStateManager()
        self.log: list[BatchHeader] = []
        self.end = 0

    def append(self, h: BatchHeader) -> Duplicate | tuple[int, int]:
        dup = self.state.validate([h])
        if dup is not None:
            return dup
        first, last = self.end, self.end + h.last_offset_delta
        self.state.update(h, first, last)
        self.log.append(h._replace(base_offset=first))
        self.end = last + 1
        return first, last


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
    rebuilt = ProducerStateManager()
    rebuilt.update(header(0, pid=99), 0, 0)  # stale state a rebuild must drop
    rebuilt.rebuild(leader.log)
    assert rebuilt.producers == leader.state.producers
    assert set(rebuilt.producers) == {7, 8, 9}
    assert len(rebuilt.producers[7].batches) == 5 and len(rebuilt.producers[8].batches) == 1


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
