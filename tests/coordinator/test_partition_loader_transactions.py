"""PartitionLoader with transactions, over the broker's real Partition: a coordinator's
transactional batch (append_batch with a producer), and the two readers, read_transactional
holding a transaction's records until its marker and read_latest, the transaction
coordinator's, telling no transactions apart."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from odradek.broker.partition import Partition
from odradek.common.clock import VirtualClock
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.coordinator.partition_loader import (
    AppendResult,
    OwnedPartition,
    PartitionLoader,
    PendingRecord,
    ProducerIdAndEpoch,
)
from odradek.coordinator.scheduler import VirtualScheduler
from odradek.log.log import Log, LogConfig
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import iter_batches

TP = TopicPartition("__internal", 0)
PID = 9


def _loader(tmp_path: Path) -> tuple[PartitionLoader, Partition]:
    partition = Partition(TP, Log.open(tmp_path / "internal-0", LogConfig()), broker_id=0)
    partition.apply_state(PartitionState(TP, 1, 0, 0, (0,), 0, (0,)))
    loader = PartitionLoader(TP.topic, lambda tp: partition if tp == TP else None,
                             VirtualScheduler(VirtualClock.frozen(0)), 5_000, 1 << 20, logging.getLogger("test"), "test")
    return loader, partition


async def _owned(loader: PartitionLoader) -> None:
    async def nothing(owned: OwnedPartition) -> None:
        pass
    loader.load(0, 1, nothing)
    await asyncio.sleep(0)


def test_a_producers_batch_is_transactional_and_says_where_it_went(tmp_path: Path) -> None:
    async def main() -> None:
        loader, partition = _loader(tmp_path)
        await _owned(loader)
        assert await loader.append_batch(0, [(b"a", b"1")], durable=True) == AppendResult(ErrorCode.NONE, 0)
        assert await loader.append_batch(0, [(b"b", b"2")], True, ProducerIdAndEpoch(PID, 3)) == \
            AppendResult(ErrorCode.NONE, 1)
        h = list(iter_batches(partition.log.read(1, 1 << 20)))[0]
        assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (PID, 3, 0, True)
        # a fenced epoch: the partition's refusal, nothing written
        assert await loader.append(0, [(b"c", b"3")], True, ProducerIdAndEpoch(PID, 2)) == \
            ErrorCode.INVALID_PRODUCER_EPOCH
        assert partition.log_end_offset == 2
    asyncio.run(main())


def test_read_transactional_holds_a_transaction_until_its_marker(tmp_path: Path) -> None:
    async def main() -> None:
        loader, partition = _loader(tmp_path)
        await _owned(loader)
        await loader.append(0, [(b"k", b"plain")], True)
        await loader.append(0, [(b"k", b"aborted"), (b"j", b"aborted")], True, ProducerIdAndEpoch(PID, 0))
        partition.append_marker(PID, 0, commit=False, coordinator_epoch=0)
        await loader.append(0, [(b"k", b"committed")], True, ProducerIdAndEpoch(PID, 0))
        partition.append_marker(PID, 0, commit=True, coordinator_epoch=0)
        await loader.append(0, [(b"j", b"open"), (b"x", b"open")], True, ProducerIdAndEpoch(PID + 1, 0))
        await loader.append(0, [(b"x", None)], True, ProducerIdAndEpoch(PID + 1, 0))  # withdraws x
        read = await loader.read_transactional(0)
        assert read.latest == {b"k": b"committed"}
        assert read.positions == {b"k": 4}
        assert read.pending == {PID + 1: {b"j": PendingRecord(b"open", 6)}}
        assert read.records == 7
        # the transaction coordinator's reader: every record a plain one
        assert await loader.read_latest(0) == ({b"k": b"committed", b"j": b"open", b"x": None}, 7)
    asyncio.run(main())
