"""The mechanism by which a coordinator owns the partitions of its internal topic (Kafka's
GroupMetadataManager and TransactionStateManager alike): loading, unloading and fencing, driven
through the CoordinatorPartition seam with a fake partition over a real log."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from odradek.common.clock import VirtualClock
from odradek.common.metadata import TopicPartition
from odradek.coordinator.partition_loader import OwnedPartition, PartitionLoader
from odradek.coordinator.scheduler import VirtualScheduler
from odradek.log.log import Log, LogConfig
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch

TOPIC = "__internal"


@dataclass
class FakePartition:
    """Just what the seam asks for; the high watermark follows every append (a lone replica)."""

    log: Log
    tp: TopicPartition = TopicPartition(TOPIC, 0)
    leader_epoch: int = 0
    is_leader: bool = True
    isr: frozenset[int] = field(default_factory=lambda: frozenset({0}))
    min_insync_replicas: int = 1

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def append_as_leader(self, batches: bytes) -> tuple[int, int]:
        return self.log.append_as_leader(batches, self.leader_epoch)

    def wait_for_high_watermark(self, offset: int) -> asyncio.Future[None]:
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        written.set_result(None)
        return written


def _loader(tmp_path: Path) -> tuple[PartitionLoader, FakePartition, VirtualScheduler]:
    partition = FakePartition(Log.open(tmp_path / f"{TOPIC}-0", LogConfig()))
    scheduler = VirtualScheduler(VirtualClock.frozen(0))
    loader = PartitionLoader(TOPIC, lambda tp: partition if tp == partition.tp else None, scheduler, 5_000,
                             1 << 20, logging.getLogger("test"), "test")
    return loader, partition, scheduler


async def _nothing(owned: OwnedPartition) -> None:
    pass


def test_an_append_to_a_partition_not_owned_is_not_leader_or_follower(tmp_path: Path) -> None:
    async def main() -> None:
        loader, partition, _ = _loader(tmp_path)
        assert await loader.append(0, [(b"k", b"v")], durable=True) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert partition.log_end_offset == 0
    asyncio.run(main())


def test_an_append_to_an_owned_partition_led_elsewhere_now_is_not_leader_or_follower(tmp_path: Path) -> None:
    async def main() -> None:
        loader, partition, scheduler = _loader(tmp_path)
        loader.load(0, 0, _nothing)
        await scheduler.run_tasks()
        partition.is_leader = False
        assert await loader.append(0, [(b"k", b"v")], durable=True) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    asyncio.run(main())


def test_an_append_to_an_owned_partition_is_written(tmp_path: Path) -> None:
    async def main() -> None:
        loader, partition, scheduler = _loader(tmp_path)
        loader.load(0, 0, _nothing)
        await scheduler.run_tasks()
        assert await loader.append(0, [(b"k", b"v")], durable=True) == ErrorCode.NONE
        assert partition.log_end_offset == 1
    asyncio.run(main())


def test_a_partition_is_loading_until_its_read_returns(tmp_path: Path) -> None:
    async def main() -> None:
        loader, _, scheduler = _loader(tmp_path)
        release = asyncio.Event()

        async def read(owned: OwnedPartition) -> None:
            await release.wait()

        loader.load(0, 0, read)
        await asyncio.sleep(0)
        assert loader.owned(0) is not None and loader.owned(0).is_loading  # type: ignore[union-attr]
        release.set()
        await scheduler.run_tasks()
        assert not loader.any_loading()
    asyncio.run(main())


def test_unloading_cancels_a_load_still_running(tmp_path: Path) -> None:
    async def main() -> None:
        loader, _, _ = _loader(tmp_path)
        never = asyncio.Event()

        async def read(owned: OwnedPartition) -> None:
            await never.wait()

        loader.load(0, 0, read)
        task = loader.owned(0).loading  # type: ignore[union-attr]
        assert loader.unload(0) and loader.owned(0) is None
        await asyncio.sleep(0)
        assert task is not None and task.cancelled()
    asyncio.run(main())


def test_a_new_leader_epoch_of_an_owned_partition_reads_nothing_again(tmp_path: Path) -> None:
    """Kafka's addLoadingPartition: the controller changed the ISR; the leader is the same."""
    async def main() -> None:
        loader, _, scheduler = _loader(tmp_path)
        reads = []

        async def read(owned: OwnedPartition) -> None:
            reads.append(owned.leader_epoch)

        loader.load(0, 3, read)
        await scheduler.run_tasks()
        loader.load(0, 4, read)
        await scheduler.run_tasks()
        assert reads == [3] and loader.owned(0).leader_epoch == 4  # type: ignore[union-attr]
    asyncio.run(main())


def test_reading_back_keeps_each_keys_newest_value(tmp_path: Path) -> None:
    async def main() -> None:
        loader, partition, _ = _loader(tmp_path)
        for batch in ([(b"a", b"1"), (b"b", b"1")], [(b"a", b"2")], [(b"b", None)]):
            partition.append_as_leader(build_batch(batch))
        assert await loader.read_latest(0) == ({b"a": b"2", b"b": None}, 4)
    asyncio.run(main())
