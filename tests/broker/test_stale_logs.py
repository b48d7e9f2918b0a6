"""A broker never serves a deleted topic's data: the topic id kept with each log is checked when
a LeaderAndIsr creates the partition, and StopReplica with delete removes a log that is only on
disk (a topic deleted while this broker was down). ReplicaManager alone, no ZooKeeper."""
from __future__ import annotations

import asyncio
from pathlib import Path

from odradek.broker.fetcher import ReplicaFetcherManager
from odradek.broker.replica_manager import ReplicaManager
from odradek.common.metadata import PartitionState, TopicAssignment, TopicPartition
from odradek.log.log import LogConfig
from odradek.log.log_manager import LogManager
from odradek.protocol.controller_api import LeaderAndIsrRequest, StopReplicaRequest
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch

TP = TopicPartition("t", 0)


def _broker(data_dir: Path, ids: dict[str, str]) -> ReplicaManager:
    async def configs(topics: list[str]) -> dict[str, dict[str, str]]:
        return {t: {} for t in topics}

    async def topic_ids(topics: list[str]) -> dict[str, str]:
        return {t: ids[t] for t in topics if t in ids}

    rm = ReplicaManager(1, data_dir, LogManager(data_dir, LogConfig()), LogConfig(), 1,
                        ReplicaFetcherManager(1, lambda leader: None), configs, None, 30000,  # type: ignore[arg-type]
                        lambda: {1})
    rm.load_topic_ids = topic_ids
    return rm


def _lead(rm: ReplicaManager, leader_epoch: int = 0, tp: TopicPartition = TP) -> int:
    state = PartitionState(tp, 1, 1, leader_epoch, (1,), 0, (1,), True)
    result = rm.become_leader_or_follower(LeaderAndIsrRequest(1, 1, -1, (state,), ()))
    if not hasattr(result, "partition_errors"):
        result = asyncio.run(result)  # type: ignore[arg-type]
    return result.partition_errors[tp]  # type: ignore[union-attr]


def test_a_log_of_another_topic_id_is_deleted_before_the_partition_is_created(tmp_path: Path) -> None:
    old = _broker(tmp_path, {"t": "old-id"})
    assert _lead(old) == ErrorCode.NONE
    old.get(TP).append_as_leader(build_batch([(None, b"old")] * 3))  # type: ignore[union-attr]
    old.log_manager.close()
    # the broker comes back; meanwhile "t" was deleted and created again
    new = _broker(tmp_path, {"t": "new-id"})
    assert _lead(new, leader_epoch=0) == ErrorCode.NONE
    partition = new.get(TP)
    assert partition is not None and partition.log.log_end_offset == 0
    assert new.log_manager.topic_id(TP) == "new-id"


def test_a_log_of_the_same_topic_id_is_kept(tmp_path: Path) -> None:
    first = _broker(tmp_path, {"t": "same"})
    _lead(first)
    first.get(TP).append_as_leader(build_batch([(None, b"kept")] * 2))  # type: ignore[union-attr]
    first.log_manager.close()
    again = _broker(tmp_path, {"t": "same"})
    assert _lead(again, leader_epoch=1) == ErrorCode.NONE
    assert again.get(TP).log.log_end_offset == 2  # type: ignore[union-attr]


def test_a_topic_gone_from_zookeeper_is_not_created_and_stop_replica_deletes_a_log_on_disk(tmp_path: Path) -> None:
    first = _broker(tmp_path, {"t": "id"})
    _lead(first)
    first.log_manager.close()
    gone = _broker(tmp_path, {})
    assert _lead(gone) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and gone.get(TP) is None
    assert (tmp_path / "t-0").is_dir()  # left for the controller's StopReplica
    answer = gone.stop_replicas(StopReplicaRequest(1, 1, -1, True, (TP,)))
    assert answer.partition_errors == {TP: 0}
    gone.log_manager.finish_removals()
    assert not (tmp_path / "t-0").exists() and not list(tmp_path.glob("*-delete"))


def _on_disk(rm: ReplicaManager, *tps: TopicPartition) -> None:
    for tp in tps:
        assert _lead(rm, tp=tp) == ErrorCode.NONE
    rm.log_manager.close()


def test_at_startup_a_stray_log_is_deleted_and_a_replica_being_moved_is_kept(tmp_path: Path) -> None:
    """A reassignment moved partition 0 away while the broker was down (its StopReplica went to
    nobody); partition 1 is being moved away right now (this broker is still among its
    replicas, as a removing one); partition 2's topic was created again under another id."""
    first = _broker(tmp_path, {"t": "id", "u": "old"})
    moved, moving, recreated = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
    _on_disk(first, moved, moving, recreated)
    assignments = {"t": TopicAssignment("t", "id", {0: (2, 3), 1: (2, 3, 1)}, removing_replicas={1: (1,)}),
                   "u": TopicAssignment("u", "new", {0: (1,)})}
    again = _broker(tmp_path, {"t": "id", "u": "new"})
    again.remove_stale_logs(lambda topics: {t: assignments[t] for t in topics})
    again.log_manager.finish_removals()
    assert not (tmp_path / "t-0").exists() and not (tmp_path / "u-0").exists()
    assert (tmp_path / "t-1").is_dir()
