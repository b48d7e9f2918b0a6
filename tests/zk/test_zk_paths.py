"""Codecs of Kafka's ZooKeeper layout: round trips and the older versions Kafka still reads."""
from __future__ import annotations

import base64
import json

from odradek.common.metadata import BrokerInfo, LeaderAndIsr, TopicAssignment, TopicPartition
from odradek.zk import paths

TP0 = TopicPartition("t", 0)


def test_paths_follow_kafka_layout() -> None:
    assert paths.broker_path(3) == "/brokers/ids/3"
    assert paths.partition_state_path(TP0) == "/brokers/topics/t/partitions/0/state"
    assert paths.topic_config_path("t") == "/config/topics/t"
    assert paths.delete_topic_path("t") == "/admin/delete_topics/t"


def test_topic_id_is_22_char_urlsafe_base64_of_16_bytes() -> None:
    ids = {paths.new_topic_id() for _ in range(200)}
    assert len(ids) == 200
    for topic_id in ids:
        assert len(topic_id) == 22 and "=" not in topic_id and not topic_id.startswith("-")
        assert len(base64.urlsafe_b64decode(topic_id + "==")) == 16


def test_topic_assignment_round_trip_writes_version_3() -> None:
    assignment = TopicAssignment("t", paths.new_topic_id(), {0: (1, 2), 1: (2, 3)}, 1)
    data = paths.encode_topic_assignment(assignment)
    assert json.loads(data)["version"] == 3
    assert paths.decode_topic_assignment("t", data) == assignment


def test_topic_assignment_carries_its_initial_partition_count() -> None:
    """KIP-253: a new topic's znode says how many partitions it was created with."""
    new = TopicAssignment("t", paths.new_topic_id(), {0: (1,), 1: (1,), 2: (1,)})
    assert json.loads(paths.encode_topic_assignment(new))["initial_partition_count"] == 3
    kafka_written = b'{"version":3,"topic_id":"x","partitions":{"0":[1]}}'
    assert paths.decode_topic_assignment("t", kafka_written).initial_partition_count is None


def test_topic_assignment_without_id_decodes_to_zero_id() -> None:
    v1 = b'{"version":1,"partitions":{"0":[1,2]}}'
    v2 = b'{"version":2,"partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{}}'
    assert paths.decode_topic_assignment("t", v1) == TopicAssignment("t", paths.ZERO_TOPIC_ID, {0: (1, 2)})
    assert paths.decode_topic_assignment("t", v2).topic_id == paths.ZERO_TOPIC_ID


def test_leader_and_isr_takes_zk_version_from_the_stat() -> None:
    state = LeaderAndIsr(1, 4, (1, 2), 7)
    data = paths.encode_leader_and_isr(state)
    assert json.loads(data) == {"version": 1, "leader": 1, "leader_epoch": 4, "isr": [1, 2], "controller_epoch": 7}
    assert paths.decode_leader_and_isr(data, 12) == LeaderAndIsr(1, 4, (1, 2), 7, 12)


def test_broker_registration_decodes_endpoint_and_rack() -> None:
    info = BrokerInfo(2, "localhost", 9093, rack="r1")
    decoded = paths.decode_broker_info(2, paths.encode_broker_info(info, 1), czxid=55)
    assert decoded == BrokerInfo(2, "localhost", 9093, 55, "r1")
    ipv6 = b'{"version":4,"host":null,"port":-1,"endpoints":["PLAINTEXT://[::1]:9092"]}'
    assert paths.decode_broker_info(1, ipv6, 9) == BrokerInfo(1, "::1", 9092, 9)


def test_controller_formats() -> None:
    assert paths.decode_controller_id(paths.encode_controller(5, 123)) == 5
    assert paths.decode_controller_id(b"5") == 5  # pre-0.8.2 bare id
    assert paths.decode_controller_epoch(paths.encode_controller_epoch(17)) == 17


def test_notifications_and_admin_formats_round_trip() -> None:
    tps = {TP0, TopicPartition("u", 3)}
    assert paths.decode_isr_change(paths.encode_isr_change(tps)) == tps
    assert paths.decode_preferred_election(paths.encode_preferred_election(tps)) == tps
    targets = {TP0: (1, 2, 3)}
    assert paths.decode_reassignment(paths.encode_reassignment(targets)) == targets
    config = {"retention.ms": "1000"}
    assert paths.decode_topic_config(paths.encode_topic_config(config)) == config


def test_producer_id_block_uses_kafka_string_bounds() -> None:
    block = paths.ProducerIdBlock(1, 1000, 1999)
    data = paths.encode_producer_id_block(block)
    assert json.loads(data)["block_start"] == "1000"
    assert paths.decode_producer_id_block(data) == block
    assert paths.decode_producer_id_block(b"") is None


def test_kip253_fields_round_trip_and_are_absent_for_plain_topics() -> None:
    from odradek.common.metadata import PartitionOrdering

    plain = TopicAssignment("t", paths.new_topic_id(), {0: (1,), 1: (2,)}, 2)
    assert "undeleted_partition_count" not in json.loads(paths.encode_topic_assignment(plain))
    counted = TopicAssignment("t", plain.topic_id, {0: (1,), 1: (2,), 2: (1,)}, 2,
                              undeleted_partition_count=2)
    assert paths.decode_topic_assignment("t", paths.encode_topic_assignment(counted)) == counted
    assert paths.decode_topic_assignment("t", paths.encode_topic_assignment(plain)) == plain
    assert "removed_partition_leader_epochs" not in json.loads(paths.encode_topic_assignment(counted))
    shrunk = TopicAssignment("t", plain.topic_id, {0: (1,), 1: (2,)}, 2, removed_leader_epochs={2: 17, 3: 4})
    assert json.loads(paths.encode_topic_assignment(shrunk))["removed_partition_leader_epochs"] == {"2": 17, "3": 4}
    assert paths.decode_topic_assignment("t", paths.encode_topic_assignment(shrunk)) == shrunk

    state = LeaderAndIsr(1, 3, (1, 2), 4, 7)
    assert set(json.loads(paths.encode_leader_and_isr(state))) == {
        "version", "leader", "leader_epoch", "isr", "controller_epoch"}
    ordered = state._replace(ordering=PartitionOrdering(((0, 2), (1, 5)), ((0, 9),)))
    obj = json.loads(paths.encode_leader_and_isr(ordered))
    assert obj["leader_epoch_after_creation"] == {"0": 2, "1": 5}
    assert obj["leader_epoch_before_deletion"] == {"0": 9}
    assert paths.decode_leader_and_isr(paths.encode_leader_and_isr(ordered), 7) == ordered
    # an election keeps the maps (new_leader), so no rewrite of the znode loses them
    assert state.new_leader(2, (2,), 5).ordering is None
    assert ordered.new_leader(2, (2,), 5).ordering == ordered.ordering


def test_removed_leader_epochs_only_rise() -> None:
    from odradek.common.metadata import raised_leader_epochs

    assert raised_leader_epochs({}, {3: 5}) == {3: 5}
    assert raised_leader_epochs({3: 5, 4: 2}, {3: 2, 5: 0}) == {3: 5, 4: 2, 5: 0}
    assert raised_leader_epochs({3: 5}, {3: 9}) == {3: 9}
