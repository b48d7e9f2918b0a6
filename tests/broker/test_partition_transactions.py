"""A partition's transactions on a real log (KIP-98's log side): the last stable offset that
read_committed consumers stop at, the aborted transactions they are told of, the markers only a
current coordinator can write, and all of it read back when the log is opened again."""
from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.partition import Partition
from odradek.broker.producer_state import ProducerStateError
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.log.log import Log, LogConfig
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import TRANSACTIONAL_FLAG, build_batch, build_control_batch

TP = TopicPartition("t", 0)


def leader(tmp_path: Path) -> Partition:
    """A leader whose ISR is itself, so the high watermark follows every append."""
    p = Partition(TP, Log.open(tmp_path / "t-0", LogConfig()), broker_id=1)
    p.apply_state(PartitionState(TP, 1, 1, 1, (1,), 0, (1,)))
    return p


def txn_batch(producer_id: int, sequence: int, count: int = 2, epoch: int = 0) -> bytes:
    return build_batch([(b"k", b"v")] * count, producer_id=producer_id, producer_epoch=epoch,
                       base_sequence=sequence, attributes=TRANSACTIONAL_FLAG)


def test_read_committed_stops_at_an_open_transaction_until_its_marker(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_as_leader(txn_batch(7, 0))                   # offsets 0-1, producer 7's transaction
    p.append_as_leader(build_batch([(b"k", b"plain")]))   # offset 2
    p.append_as_leader(txn_batch(8, 0))                   # offsets 3-4, producer 8's
    assert (p.high_watermark, p.last_stable_offset) == (5, 0)
    assert p.append_marker(7, 0, commit=False, coordinator_epoch=3) == 5
    assert (p.high_watermark, p.last_stable_offset) == (6, 3)  # stable up to 8's first offset
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in p.producers.aborted_transactions(0, 6)] == [
        (7, 0, 5)]
    assert p.append_marker(8, 0, commit=True, coordinator_epoch=3) == 6
    assert p.last_stable_offset == p.high_watermark == 7
    assert p.producers.aborted_transactions(6, 7) == []  # nothing aborted from offset 6 on


def test_a_marker_from_a_deposed_coordinator_or_an_old_epoch_writes_nothing(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_as_leader(txn_batch(7, 0, epoch=2))
    p.append_marker(7, 2, commit=True, coordinator_epoch=5)
    p.append_as_leader(txn_batch(7, 2, epoch=2))
    end = p.log_end_offset
    with pytest.raises(ProducerStateError) as stale_coordinator:
        p.append_marker(7, 2, commit=False, coordinator_epoch=4)
    assert stale_coordinator.value.error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    with pytest.raises(ProducerStateError) as old_epoch:
        p.append_marker(7, 1, commit=False, coordinator_epoch=5)
    assert old_epoch.value.error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert p.log_end_offset == end and p.last_stable_offset == 3  # still open, at offset 3


def test_a_client_cannot_write_a_control_batch(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_as_leader(txn_batch(7, 0))
    with pytest.raises(ProducerStateError) as refused:
        p.append_as_leader(build_control_batch(7, 0, commit=True, coordinator_epoch=0))
    assert refused.value.error == ErrorCode.INVALID_RECORD
    assert p.log_end_offset == 2 and p.last_stable_offset == 0


def test_transactions_are_read_back_when_the_log_is_opened_again(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_as_leader(txn_batch(7, 0))
    p.append_marker(7, 0, commit=False, coordinator_epoch=1)
    p.append_as_leader(txn_batch(9, 0))                    # left open: offsets 3-4
    p.log.flush()
    p.close()
    p.log.close()
    again = Partition(TP, Log.open(tmp_path / "t-0", LogConfig()), broker_id=1, high_watermark=5)
    again.apply_state(PartitionState(TP, 1, 1, 2, (1,), 0, (1,)))
    assert again.last_stable_offset == 3
    assert again.producers.ongoing_transactions() == {9: 3}
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in again.producers.aborted_transactions(0, 5)] == [
        (7, 0, 2)]
    with pytest.raises(ProducerStateError):  # the coordinator epoch was read back too
        again.append_marker(7, 0, commit=True, coordinator_epoch=0)


def test_deleting_records_drops_the_aborted_transactions_below_the_log_start(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_as_leader(txn_batch(7, 0))
    p.append_marker(7, 0, commit=False, coordinator_epoch=1)  # offset 2
    p.append_as_leader(build_batch([(b"k", b"v")]))           # offset 3
    p.delete_records_on_leader(3)
    assert p.producers.aborted_transactions(0, 4) == []


def test_checks_under_way_together_share_their_guard_until_a_marker_voids_it(tmp_path: Path) -> None:
    """KIP-890's guard: a producer's pipelined requests to one partition are checked at the
    same time, and neither check may void the other's; a marker voids both."""
    p = leader(tmp_path)
    first, second = p.verifications.start(7), p.verifications.start(7)
    assert p.verifications.holds(7, first) and p.verifications.holds(7, second)
    p.append_marker(7, 0, commit=False, coordinator_epoch=0)
    assert not p.verifications.holds(7, first) and not p.verifications.holds(7, second)
    assert p.verifications.holds(7, p.verifications.start(7))  # a check begun after the marker
