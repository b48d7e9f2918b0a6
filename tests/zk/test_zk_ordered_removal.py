"""KIP-253's removal znodes against a real ZooKeeper: leaders' reports of drained partitions
(persistent sequential children of /admin/ordered_partition_removals) and the controller's one
fenced multi that removes partitions from the top of a topic."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.common.metadata import LeaderAndIsr, PartitionOrdering, TopicAssignment, TopicPartition
from odradek.controller.seams import ControllerMovedError
from odradek.zk import paths
from odradek.zk.client import KafkaZkClient
from odradek.zk.paths import PartitionRemovalReport

pytestmark = pytest.mark.integration

TOPIC = "ordrm"


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KafkaZkClient]:
    """Broker 1 as elected controller; TOPIC with 4 partitions, states for all, 2 undeleted."""
    client = KafkaZkClient(zk_connect, 6.0)
    client.start()
    _epoch, client.epoch_zk_version = client.try_become_controller(1)
    client.create_topic(TopicAssignment(TOPIC, paths.new_topic_id(), {p: (1, 2) for p in range(4)}, 2,
                                        undeleted_partition_count=2), {"enable.ordered.delivery": "true"})
    ordering = PartitionOrdering(before_deletion=((0, 3), (1, 3)))
    client.create_partition_states({
        **{TopicPartition(TOPIC, p): LeaderAndIsr(1, 4, (1, 2), 1) for p in range(2)},
        # partition 1 created late names 3, which goes
        TopicPartition(TOPIC, 1): LeaderAndIsr(1, 4, (1, 2), 1, ordering=PartitionOrdering(((0, 3), (3, 0)))),
        **{TopicPartition(TOPIC, p): LeaderAndIsr(2, 1, (1, 2), 1, ordering=ordering) for p in (2, 3)}})
    yield client
    client.close()


def test_reports_are_sequential_persistent_and_read_back(zk: KafkaZkClient) -> None:
    first = zk.report_partition_removal(PartitionRemovalReport(TopicPartition(TOPIC, 3), 1))
    second = zk.report_partition_removal(PartitionRemovalReport(TopicPartition(TOPIC, 3), 1))
    assert first != second and first.startswith(paths.ORDERED_PARTITION_REMOVAL_PREFIX)
    zk.kazoo.create(f"{paths.ORDERED_PARTITION_REMOVALS}/removal-bad", b"{not json")
    found = zk.get_partition_removals()
    assert found == {first.rsplit("/", 1)[1]: PartitionRemovalReport(TopicPartition(TOPIC, 3), 1),
                     second.rsplit("/", 1)[1]: PartitionRemovalReport(TopicPartition(TOPIC, 3), 1),
                     "removal-bad": None}
    assert zk.kazoo.exists(first).ephemeralOwner == 0  # survives the reporter's session
    zk.delete_partition_removals(["removal-bad", "removal-bad"])
    assert "removal-bad" not in zk.get_partition_removals()


def test_remove_partitions_is_one_multi_and_conditional(zk: KafkaZkClient) -> None:
    report = zk.report_partition_removal(PartitionRemovalReport(TopicPartition(TOPIC, 3), 1)).rsplit("/", 1)[1]
    one = TopicPartition(TOPIC, 1)
    stored = zk.get_partition_states([one])[one]
    rewrite = {one: stored._replace(ordering=PartitionOrdering(((0, 3),)))}

    # a stale version of partition 1's state: nothing at all is written
    stale = {one: rewrite[one]._replace(zk_version=stored.zk_version + 5)}
    assert zk.remove_partitions(TOPIC, [3], [report], stale) is None
    assert sorted(zk.get_topic_assignments([TOPIC])[TOPIC].partitions) == [0, 1, 2, 3]
    assert TopicPartition(TOPIC, 3) in zk.get_partition_states([TopicPartition(TOPIC, 3)])
    assert report in zk.get_partition_removals()

    after = zk.remove_partitions(TOPIC, [3], [report], rewrite)
    assert after is not None and sorted(after.partitions) == [0, 1, 2]
    stored_topic = zk.get_topic_assignments([TOPIC])[TOPIC]
    assert sorted(stored_topic.partitions) == [0, 1, 2] and stored_topic.undeleted_partition_count == 2
    assert stored_topic.initial_partition_count == 2
    # partition 3 was at leader epoch 1: a partition 3 created again starts above it
    assert stored_topic.removed_leader_epochs == {3: 1} == after.removed_leader_epochs
    assert not zk.kazoo.exists(paths.partition_path(TopicPartition(TOPIC, 3)))
    assert zk.get_partition_removals() == {}
    assert zk.get_partition_states([one])[one].ordering == PartitionOrdering(((0, 3),))

    # a deposed controller writes nothing
    zk.kazoo.set(paths.CONTROLLER_EPOCH, b"99")
    with pytest.raises(ControllerMovedError):
        zk.remove_partitions(TOPIC, [2], [])
    assert sorted(zk.get_topic_assignments([TOPIC])[TOPIC].partitions) == [0, 1, 2]
