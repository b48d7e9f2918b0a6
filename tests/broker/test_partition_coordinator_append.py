"""Partition.append_as_coordinator (Kafka's AppendOrigin.COORDINATOR) on a real log: a
coordinator's transactional batch keeps the producer's state, opening its transaction for the
marker to close, without the sequence checks a client's batch gets; a fenced epoch, a
non-transactional write inside an open transaction and a control batch are refused, having
written nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.partition import Partition
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.coordinator.seams import CoordinatorAppendRefused
from odradek.log.log import Log, LogConfig
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import TRANSACTIONAL_FLAG, build_batch, build_control_batch

TP = TopicPartition("__consumer_offsets", 0)
PID = 7


def leader(tmp_path: Path) -> Partition:
    p = Partition(TP, Log.open(tmp_path / "o-0", LogConfig()), broker_id=1)
    p.apply_state(PartitionState(TP, 1, 1, 1, (1,), 0, (1,)))
    return p


def txn_batch(epoch: int = 0, transactional: bool = True, producer_id: int = PID) -> bytes:
    """As the group coordinator writes a TxnOffsetCommit: base sequence 0 every time."""
    return build_batch([(b"k", b"v")], producer_id=producer_id, producer_epoch=epoch, base_sequence=0,
                       attributes=TRANSACTIONAL_FLAG if transactional else 0)


def test_the_same_sequence_twice_is_two_batches_not_a_duplicate(tmp_path: Path) -> None:
    p = leader(tmp_path)
    assert p.append_as_coordinator(txn_batch()) == (0, 0)
    assert p.append_as_coordinator(txn_batch()) == (1, 1)
    assert p.log_end_offset == 2
    assert p.append_as_leader(txn_batch()) == (0, 0)  # a client's would be a retry: answered, not written
    assert p.log_end_offset == 2


def test_a_transactional_batch_opens_the_producers_transaction_until_its_marker(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_as_coordinator(build_batch([(b"plain", b"v")]))
    p.append_as_coordinator(txn_batch())
    assert (p.high_watermark, p.last_stable_offset) == (2, 1)
    assert p.producers.ongoing_transactions() == {PID: 1}
    p.append_marker(PID, 0, commit=True, coordinator_epoch=0)
    assert p.last_stable_offset == p.high_watermark == 3


@pytest.mark.parametrize("batch,error", [
    (txn_batch(epoch=1), ErrorCode.INVALID_PRODUCER_EPOCH),
    (txn_batch(epoch=2, transactional=False), ErrorCode.INVALID_TXN_STATE),
    (build_control_batch(PID, 2, True, 0), ErrorCode.INVALID_RECORD),
], ids=["an-older-epoch", "not-transactional-inside-a-transaction", "a-marker-from-a-producer"])
def test_what_the_producer_state_forbids_is_refused_and_not_written(tmp_path: Path, batch: bytes,
                                                                    error: ErrorCode) -> None:
    p = leader(tmp_path)
    p.append_as_coordinator(txn_batch(epoch=2))
    with pytest.raises(CoordinatorAppendRefused) as refused:
        p.append_as_coordinator(batch)
    assert refused.value.error == error
    assert p.log_end_offset == 1


def test_a_newer_epoch_is_taken_at_any_sequence(tmp_path: Path) -> None:
    p = leader(tmp_path)
    p.append_as_coordinator(txn_batch(epoch=0))
    p.append_marker(PID, 0, commit=False, coordinator_epoch=0)
    assert p.append_as_coordinator(build_batch([(b"k", b"v")], producer_id=PID, producer_epoch=1, base_sequence=9,
                                               attributes=TRANSACTIONAL_FLAG)) == (2, 2)
    entry = p.producers.entry(PID)
    assert entry is not None and (entry.epoch, entry.txn_first_offset) == (1, 2)
