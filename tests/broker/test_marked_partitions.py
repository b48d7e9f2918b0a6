"""A leader's side of KIP-253's removal (broker/marked_partitions.py) on real Partitions and
Logs: a marked partition it leads has its active segment rolled once, so retention can empty it;
once empty at two checks in a row it is reported once per leader epoch; undeleted partitions,
followers and plain topics are left alone."""
from __future__ import annotations

import asyncio
from pathlib import Path

from odradek.broker.marked_partitions import MarkedPartitions
from odradek.broker.partition import Partition
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.log.log import Log, LogConfig
from odradek.protocol.records import build_batch
from odradek.zk.paths import PartitionRemovalReport


def partition(tmp_path: Path, tp: TopicPartition, leader: int, epoch: int, records: int) -> Partition:
    p = Partition(tp, Log.open(tmp_path / f"{tp.topic}-{tp.partition}", LogConfig()), broker_id=1)
    p.apply_state(PartitionState(tp, 1, leader, epoch, (1,), 0, (1,)))
    if records and leader == 1:
        p.append_as_leader(build_batch([(None, b"v")] * records, base_offset=0, timestamp_ms=1))
    return p


def test_a_marked_partition_is_rolled_then_reported_once_empty(tmp_path: Path) -> None:
    marked = partition(tmp_path, TopicPartition("o", 3), 1, 7, 5)
    undeleted = partition(tmp_path, TopicPartition("o", 1), 1, 7, 0)
    followed = partition(tmp_path, TopicPartition("o", 2), 2, 7, 0)
    plain = partition(tmp_path, TopicPartition("p", 3), 1, 7, 0)
    reports: list[PartitionRemovalReport] = []
    counts = {"o": (2, 2)}
    check = MarkedPartitions(lambda: [marked, undeleted, followed, plain], counts.get, reports.append)

    asyncio.run(check.check())
    assert len(marked.log.segment_base_offsets()) == 2, "rolled: retention may delete every record"
    assert reports == []  # 5 records left
    asyncio.run(check.check())
    assert len(marked.log.segment_base_offsets()) == 2, "rolled once"

    marked.delete_records_on_leader(-1)  # DeleteRecords to the end (the high watermark)
    asyncio.run(check.check())
    assert reports == [], "empty at one check only"
    asyncio.run(check.check())
    asyncio.run(check.check())
    assert reports == [PartitionRemovalReport(TopicPartition("o", 3), 7)], "once per epoch"

    # a new leader epoch (a failover) is reported again, after two checks
    marked.apply_state(PartitionState(TopicPartition("o", 3), 1, 1, 8, (1,), 1, (1,)))
    asyncio.run(check.check())
    asyncio.run(check.check())
    assert reports[1:] == [PartitionRemovalReport(TopicPartition("o", 3), 8)]
