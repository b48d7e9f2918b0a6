"""KIP-253 on a partition's leader: emptying and reporting partitions marked for deletion.

A partition of an ordered topic at or past the topic's undeleted_partition_count (which this
broker learns from the controller's LeaderAndIsr and UpdateMetadata) takes no new record: the
produce fence refuses them. What it holds goes in one of two ways:
- retention: the leader rolls the partition's active segment once (per leader epoch), since
  time and size retention only ever delete closed segments; the topic's retention.ms /
  retention.bytes then empty it like any other log;
- DeleteRecords to its end (`odradek delete-records`, or an admin client's delete_records),
  once every group that reads it has passed its end.

Every few seconds (``CHECK_INTERVAL_S``) the leader looks at each such partition it leads.
Empty (log start == log end == high watermark) at two checks in a row, it reports it to the
controller once per leader epoch with a persistent sequential znode /admin/ordered_partition_removals/removal-N
naming that epoch (the controller removes the partition, controller/partition_removal.py).
Not empty, it says so in its log once per leader epoch, with the records left, the offset a
DeleteRecords must reach and the retention that applies: a partition that never empties
(retention.ms=-1, a group that never reads it) blocks its removal, and the reason is there to
read (and in `topics describe`).

Why two checks: a partition marked while already empty (nothing was ever written to it) would
otherwise vanish within moments of the marking, before clients (and `topics describe`) had a
chance to see that it was marked; one check interval later costs nothing.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Iterable

from odradek.broker.partition import Partition
from odradek.common.metadata import TopicPartition
from odradek.zk.paths import PartitionRemovalReport

log = logging.getLogger(__name__)

#: seconds between two checks of the marked partitions a broker leads
CHECK_INTERVAL_S = 2.0


class MarkedPartitions:
    """The periodic check (``check``, run by the broker's periodic tasks on its event loop)."""

    def __init__(self, partitions: Callable[[], Iterable[Partition]],
                 ordered_partition_counts: Callable[[str], tuple[int, int] | None],
                 report: Callable[[PartitionRemovalReport], object]) -> None:
        """``partitions``: the hosted partitions; ``ordered_partition_counts``: a topic's
        (initial, undeleted) counts, None unless ordered (MetadataCache's); ``report``: the
        blocking ZooKeeper write (KafkaZkClient.report_partition_removal), run off the loop."""
        self._partitions = partitions
        self._counts = ordered_partition_counts
        self._report = report
        #: (partition, leader epoch) rolled, reported, and told about in the log
        self._rolled: set[tuple[TopicPartition, int]] = set()
        self._reported: set[tuple[TopicPartition, int]] = set()
        self._told: set[tuple[TopicPartition, int]] = set()
        #: found empty at the last check (reported at the next one if still empty)
        self._empty: set[tuple[TopicPartition, int]] = set()

    def marked_led(self) -> list[Partition]:
        """The partitions marked for deletion that this broker leads."""
        out = []
        for partition in self._partitions():
            if not partition.is_leader:
                continue
            counts = self._counts(partition.tp.topic)
            if counts is not None and partition.tp.partition >= counts[1]:
                out.append(partition)
        return out

    async def check(self) -> None:
        marked = self.marked_led()
        keys = {(p.tp, p.leader_epoch) for p in marked}
        # forget partitions no longer led or marked (a new epoch is a new key)
        self._rolled &= keys
        self._reported &= keys
        self._told &= keys
        empty_before, self._empty = self._empty & keys, set()
        for partition in marked:
            key = (partition.tp, partition.leader_epoch)
            plog = partition.log
            if key not in self._rolled:
                if plog.roll():
                    log.info("%s is marked for deletion: its active segment rolled, so that "
                             "retention can delete all of it", partition.tp)
                self._rolled.add(key)
            start, end = plog.log_start_offset, plog.log_end_offset
            if start == end and partition.high_watermark == end:
                self._empty.add(key)
                if key in empty_before and key not in self._reported:
                    report = PartitionRemovalReport(partition.tp, partition.leader_epoch)
                    await asyncio.to_thread(self._report, report)
                    self._reported.add(key)
                    log.info("%s is marked for deletion and empty (offset %d): reported to "
                             "the controller for removal (leader epoch %d)", partition.tp, end,
                             partition.leader_epoch)
            elif key not in self._told:
                self._told.add(key)
                log.info("%s is marked for deletion and holds records from offset %d to %d; "
                         "it is removed once empty: when retention deletes its segments, or "
                         "after DeleteRecords to offset %d", partition.tp, start, end, end)
