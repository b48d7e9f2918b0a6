"""ControllerBrokerRequestBatch: one request of each kind per broker, in Kafka's order."""
from __future__ import annotations

import pytest
from controller_fakes import Rig, tp

from odradek.common.metadata import LeaderAndIsr
from odradek.controller.request_batch import IllegalBatchStateError
from odradek.protocol.controller_api import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)

LAI = LeaderAndIsr(1, 3, (1, 2), 5, 2)


def test_new_batch_raises_if_previous_not_sent() -> None:
    rig = Rig()
    rig.batch.add_stop_replicas([(tp("t", 0), 1)], delete=False)
    with pytest.raises(IllegalBatchStateError):
        rig.batch.new_batch()
    rig.send()
    rig.batch.new_batch()


def test_send_merges_per_broker_in_kafka_order() -> None:
    rig = Rig()
    for p in range(3):
        rig.add_partition(tp("t", p), (1, 2), LAI)
        rig.batch.add_leader_and_isr([1, 2], tp("t", p), LAI, (1, 2), is_new=False)
    rig.batch.add_stop_replicas([(tp("t", 9), 3)], delete=False)
    rig.send()
    kinds = [(b, type(r)) for b, r in rig.channel.sent]
    assert kinds == [(1, LeaderAndIsrRequest), (2, LeaderAndIsrRequest),
                     (1, UpdateMetadataRequest), (2, UpdateMetadataRequest),
                     (3, UpdateMetadataRequest), (3, StopReplicaRequest)]
    request = rig.channel.sent[0][1]
    assert request == LeaderAndIsrRequest(
        controller_id=0, controller_epoch=5, broker_epoch=101,
        partition_states=request.partition_states, live_leaders=(rig.ctx.broker_info(1),))
    assert [s.tp for s in request.partition_states] == [tp("t", 0), tp("t", 1), tp("t", 2)]
    assert rig.batch.is_empty()


def test_is_new_sticks_and_dead_brokers_are_skipped() -> None:
    rig = Rig(brokers=(1, 2))
    rig.add_partition(tp("t", 0), (1, 2, 3), LAI)
    rig.batch.add_leader_and_isr([1, 3], tp("t", 0), LAI, (1, 2, 3), is_new=True)
    rig.batch.add_leader_and_isr([1], tp("t", 0), LAI, (1, 2, 3), is_new=False)
    rig.send()
    [(broker, request)] = rig.channel.leader_and_isr()
    assert broker == 1
    state = request.partition_states[0]
    assert state.is_new and state.offline_replicas == (3,)


def test_the_same_leadership_again_only_adds_new_receivers_and_a_newer_one_replaces_it() -> None:
    """A controller failover re-sends every live replica's state after its elections queued
    most of them: the batch keeps the queued entry and adds only receivers that lack one."""
    rig = Rig()
    rig.add_partition(tp("t", 0), (1, 2, 3), LAI)
    rig.batch.add_leader_and_isr([1], tp("t", 0), LAI, (1, 2, 3), is_new=False)
    rig.batch.add_leader_and_isr([1, 2], tp("t", 0), LAI, (1, 2, 3), is_new=False)
    newer = LAI.new_leader(2, (1, 2), 5)
    rig.batch.add_leader_and_isr([3], tp("t", 0), newer, (1, 2, 3), is_new=False)
    rig.send()
    sent = {b: r.partition_states[0] for b, r in rig.channel.leader_and_isr()}
    assert sorted(sent) == [1, 2, 3]
    assert sent[1] == sent[2]
    assert (sent[1].leader, sent[1].leader_epoch) == (1, 3)
    assert (sent[3].leader, sent[3].leader_epoch) == (2, 4)


def test_stop_replica_is_split_by_delete_flag_and_delete_wins() -> None:
    rig = Rig()
    rig.batch.add_stop_replicas([(tp("t", 0), 1)], delete=False)
    rig.batch.add_stop_replicas([(tp("t", 0), 1)], delete=True)
    rig.batch.add_stop_replicas([(tp("t", 1), 1)], delete=False)
    rig.send()
    stops = [r for _, r in rig.channel.stop_replica()]
    assert [(s.delete_partitions, s.partitions) for s in stops] == [
        (True, (tp("t", 0),)), (False, (tp("t", 1),))]


def test_update_metadata_uses_latest_leadership_at_send_time() -> None:
    rig = Rig()
    rig.add_partition(tp("t", 0), (1, 2), LAI)
    rig.batch.add_update_metadata([2], [tp("t", 0)])
    rig.ctx.put_partition_leadership(tp("t", 0), LeaderAndIsr(2, 4, (2,), 5, 3))
    rig.send()
    [(_, request)] = rig.channel.update_metadata()
    assert request.partition_states[0].leader == 2
    assert [b.id for b in request.live_brokers] == [1, 2, 3]


def test_a_receiver_told_an_older_state_earlier_in_the_event_gets_the_latest() -> None:
    """An epoch bump told to both replicas, then an ISR shrink told to the leader only (the
    other broker handled as dead), then the same leadership re-sent to both (that broker
    back, as a bounce does in one event): the returning broker must get the shrink's state,
    not keep the bump's."""
    rig = Rig()
    t0 = tp("t", 0)
    bumped = LeaderAndIsr(1, 4, (1, 2), 5, 3)
    shrunk = LeaderAndIsr(1, 5, (1,), 5, 4)
    rig.add_partition(t0, (1, 2), shrunk)
    rig.batch.add_leader_and_isr([1, 2], t0, bumped, (1, 2), is_new=False)
    rig.batch.add_leader_and_isr([1], t0, shrunk, (1, 2), is_new=False)
    rig.batch.add_leader_and_isr([1, 2], t0, shrunk, (1, 2), is_new=False)
    rig.send()
    told = {b: r.partition_states[0] for b, r in rig.channel.leader_and_isr()}
    assert {b: (s.leader_epoch, s.zk_version) for b, s in told.items()} == {1: (5, 4), 2: (5, 4)}


def test_counts_of_ordered_topics_only_are_sent() -> None:
    """KIP-253: LeaderAndIsr and UpdateMetadata name the undeleted_partition_count of the
    ordered topics among their partitions, and nothing for the others."""
    rig = Rig()
    rig.ctx.put_topic_config("o", {"enable.ordered.delivery": "true"})
    rig.ctx.put_topic_config("plain", {})
    for topic in ("o", "plain"):
        rig.add_partition(tp(topic, 0), (1, 2), LAI)
        rig.add_partition(tp(topic, 1), (1, 2), LAI)
    rig.ctx.set_applied_partition_count("o", 2, 2)
    rig.batch.add_leader_and_isr([1, 2], tp("o", 0), LAI, (1, 2), is_new=False)
    rig.batch.add_leader_and_isr([3], tp("plain", 0), LAI, (1, 2), is_new=False)
    rig.send()
    lai = {b: r.partition_counts for b, r in rig.channel.leader_and_isr()}
    assert lai == {1: (("o", 2, 2),), 2: (("o", 2, 2),), 3: ()}
    um = {b: r.partition_counts for b, r in rig.channel.update_metadata()}
    assert um == {1: (("o", 2, 2),), 2: (("o", 2, 2),), 3: (("o", 2, 2),)}
