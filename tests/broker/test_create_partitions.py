"""CreatePartitions' rules (ZkAdminManager.createPartitions) and Kafka's continued assignment."""
from __future__ import annotations

import pytest

from odradek.broker.create_partitions import plan_partitions
from odradek.broker.topic_admin import TopicError, assign_replicas
from odradek.common.metadata import TopicAssignment
from odradek.protocol.errors import ErrorCode

CURRENT = TopicAssignment("t", "id", {0: (2, 3), 1: (3, 1), 2: (1, 2)}, None)


def test_generated_assignment_continues_round_robin_and_keeps_id_and_initial_count() -> None:
    grown = plan_partitions(CURRENT, 6, None, [1, 2, 3])
    assert grown.topic_id == "id" and grown.initial_partition_count == 3
    assert {p: grown.partitions[p] for p in range(3)} == CURRENT.partitions
    leaders = [grown.partitions[p][0] for p in range(3, 6)]
    assert sorted(leaders) == [1, 2, 3]  # one new leader per broker
    assert all(len(set(r)) == 2 for r in grown.partitions.values())


def test_kafka_assignment_from_a_fixed_start() -> None:
    # AdminUtils.assignReplicasToBrokers(brokers 0..4, 5 partitions, rf 3, start index 0,
    # start partition id 0), as Kafka's AdminRackAwareTest expects it
    assert assign_replicas([0, 1, 2, 3, 4], 5, 3, fixed_start_index=0, start_partition_id=0) == {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1)}
    # continuing from partition 5: the replica shift moves on once per round of brokers
    assert assign_replicas([0, 1, 2, 3, 4], 2, 3, fixed_start_index=0, start_partition_id=5) == {
        5: (0, 2, 3), 6: (1, 3, 4)}


def test_given_assignment_is_used() -> None:
    grown = plan_partitions(CURRENT, 5, [[1, 2], [3, 2]], [1, 2, 3])
    assert grown.partitions[3] == (1, 2) and grown.partitions[4] == (3, 2)


@pytest.mark.parametrize("count,assignments,code", [
    (2, None, ErrorCode.INVALID_PARTITIONS),  # fewer
    (3, None, ErrorCode.INVALID_PARTITIONS),  # the same
    (5, [[1, 2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # too few lists
    (4, [[1, 1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # a broker twice
    (4, [[1, 9]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # an unknown broker
    (4, [[1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),  # another replication factor
    (4, [[]], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    (2**31 - 1, None, ErrorCode.INVALID_PARTITIONS),  # could never fit in ZooKeeper
    (2**31 - 1, [[1, 2]], ErrorCode.INVALID_PARTITIONS),
])
def test_bad_requests_are_refused(count, assignments, code) -> None:
    with pytest.raises(TopicError) as refused:
        plan_partitions(CURRENT, count, assignments, [1, 2, 3])
    assert refused.value.code == code
