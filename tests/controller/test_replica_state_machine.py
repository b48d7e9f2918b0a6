"""Every legal and illegal replica transition of Kafka's ReplicaStateMachine (as of 2.4),
through the fakes."""
from __future__ import annotations

import pytest
from controller_fakes import Rig, tp

from odradek.common.metadata import NO_LEADER, LeaderAndIsr
from odradek.controller.leader_selectors import StateChangeFailedError
from odradek.controller.replica_state_machine import (
    VALID_PREVIOUS,
    IllegalReplicaStateTransitionError,
    PartitionReplica,
    ReplicaStatus,
)

R = ReplicaStatus
T0 = tp("t", 0)
STORED = LeaderAndIsr(1, 2, (1, 2, 3), 5, 4)


def rig_with_replica(state: ReplicaStatus, replica: int = 2, stored=STORED,
                     replicas=(1, 2, 3)) -> tuple[Rig, PartitionReplica]:
    rig = Rig()
    rig.add_partition(T0, replicas, stored)
    pr = PartitionReplica(T0, replica)
    rig.ctx.put_replica_state(pr, state)
    return rig, pr


def test_nonexistent_replica_to_new_replica_transition() -> None:
    rig, pr = rig_with_replica(R.NON_EXISTENT)
    assert rig.rsm.handle_state_changes([pr], R.NEW) == {}
    assert rig.ctx.replica_state(pr) is R.NEW
    rig.send()
    [(broker, request)] = rig.channel.leader_and_isr()
    assert broker == 2 and request.partition_states[0].is_new
    assert sorted(b for b, _ in rig.channel.update_metadata()) == [1, 2, 3]


def test_nonexistent_replica_to_new_replica_before_any_leader_sends_nothing() -> None:
    rig, pr = rig_with_replica(R.NON_EXISTENT, stored=None)
    assert rig.rsm.handle_state_changes([pr], R.NEW) == {}
    assert rig.batch.is_empty()


def test_new_replica_for_the_leader_fails() -> None:
    rig, pr = rig_with_replica(R.NON_EXISTENT, replica=1)
    errors = rig.rsm.handle_state_changes([pr], R.NEW)
    assert isinstance(errors[pr], StateChangeFailedError)
    assert rig.ctx.replica_state(pr) is R.NON_EXISTENT


def test_new_replica_to_online_replica_transition_adds_to_assignment() -> None:
    rig, pr = rig_with_replica(R.NEW, replica=4)
    assert rig.rsm.handle_state_changes([pr], R.ONLINE) == {}
    assert rig.ctx.partition_replica_assignment(T0) == (1, 2, 3, 4)
    assert rig.ctx.replica_state(pr) is R.ONLINE
    assert rig.batch.is_empty()


@pytest.mark.parametrize("source", [R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE])
def test_replica_to_online_replica_transition_resends_leader_and_isr(source) -> None:
    rig, pr = rig_with_replica(source)
    assert rig.rsm.handle_state_changes([pr], R.ONLINE) == {}
    assert rig.ctx.replica_state(pr) is R.ONLINE
    rig.send()
    [(broker, request)] = rig.channel.leader_and_isr()
    assert broker == 2 and request.partition_states[0].leader == 1


@pytest.mark.parametrize("source", [R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE])
def test_replica_to_offline_replica_transition(source) -> None:
    rig, pr = rig_with_replica(source)
    rig.ctx.remove_live_broker(2)
    assert rig.rsm.handle_state_changes([pr], R.OFFLINE) == {}
    assert rig.ctx.replica_state(pr) is R.OFFLINE
    assert rig.zk.states[T0] == LeaderAndIsr(1, 3, (1, 3), 5, 5)
    assert len(rig.zk.calls_named("update_leader_and_isr")) == 1
    rig.send()
    assert sorted(b for b, _ in rig.channel.leader_and_isr()) == [1, 3]


def test_offline_replicas_shrink_isrs_in_one_batched_write() -> None:
    rig = Rig()
    tps = [tp("t", i) for i in range(5)]
    for p in tps:
        rig.add_partition(p, (1, 2, 3), LeaderAndIsr(1, 0, (1, 2, 3), 5, 0))
        rig.ctx.put_replica_state(PartitionReplica(p, 3), R.ONLINE)
    rig.ctx.remove_live_broker(3)
    rig.rsm.handle_state_changes([PartitionReplica(p, 3) for p in tps], R.OFFLINE)
    [write] = rig.zk.calls_named("update_leader_and_isr")
    assert set(write) == set(tps)  # type: ignore[arg-type]
    assert all(rig.zk.states[p].isr == (1, 2) for p in tps)


def test_offline_replica_stops_it_without_delete_when_broker_still_live() -> None:
    rig, pr = rig_with_replica(R.ONLINE)
    rig.rsm.handle_state_changes([pr], R.OFFLINE)
    rig.send()
    [(broker, stop)] = rig.channel.stop_replica()
    assert broker == 2 and not stop.delete_partitions and stop.partitions == (T0,)


def test_offline_replica_keeps_last_isr_member_and_clears_dead_leader() -> None:
    rig, pr = rig_with_replica(R.ONLINE, replica=1, stored=LeaderAndIsr(1, 2, (1,), 5, 0))
    rig.rsm.handle_state_changes([pr], R.OFFLINE)
    assert rig.zk.states[T0] == LeaderAndIsr(NO_LEADER, 3, (1,), 5, 1)


def test_offline_replica_retries_isr_shrink_after_version_conflict() -> None:
    rig, pr = rig_with_replica(R.ONLINE)
    rig.zk.leader_races[T0] = 1
    assert rig.rsm.handle_state_changes([pr], R.OFFLINE) == {}
    assert rig.zk.states[T0].isr == (1, 3)
    assert len(rig.zk.calls_named("update_leader_and_isr")) == 2


def test_offline_replica_shrinks_on_the_cache_without_reading() -> None:
    rig, pr = rig_with_replica(R.ONLINE)
    assert rig.rsm.handle_state_changes([pr], R.OFFLINE) == {}
    assert rig.zk.states[T0] == LeaderAndIsr(1, 3, (1, 3), 5, 5)
    assert rig.zk.calls_named("get_partition_states") == []


def test_offline_replica_missing_from_a_stale_cached_isr_is_checked_in_zookeeper() -> None:
    """The cache says 2 already left the ISR, but the leader has since added it back: only
    a read can tell, because deciding not to write is never checked by a znode version."""
    rig, pr = rig_with_replica(R.ONLINE, stored=LeaderAndIsr(1, 2, (1, 3), 5, 4))
    rig.zk.leader_isr_write(T0, (1, 2, 3))
    assert rig.rsm.handle_state_changes([pr], R.OFFLINE) == {}
    assert rig.zk.states[T0].isr == (1, 3)
    assert rig.zk.calls_named("get_partition_states") == [[T0]]


def test_offline_replica_without_leadership_sends_update_metadata() -> None:
    rig, pr = rig_with_replica(R.NEW, stored=None)
    rig.rsm.handle_state_changes([pr], R.OFFLINE)
    assert rig.ctx.replica_state(pr) is R.OFFLINE
    assert rig.zk.calls_named("update_leader_and_isr") == []


def test_offline_replica_to_replica_deletion_started_transition() -> None:
    rig, pr = rig_with_replica(R.OFFLINE)
    assert rig.rsm.handle_state_changes([pr], R.DELETION_STARTED) == {}
    rig.send()
    [(broker, stop)] = rig.channel.stop_replica()
    assert broker == 2 and stop.delete_partitions


@pytest.mark.parametrize("source,target", [
    (R.DELETION_STARTED, R.DELETION_SUCCESSFUL),
    (R.DELETION_STARTED, R.DELETION_INELIGIBLE),
    (R.OFFLINE, R.DELETION_INELIGIBLE),
])
def test_replica_deletion_bookkeeping_transitions(source, target) -> None:
    rig, pr = rig_with_replica(source)
    assert rig.rsm.handle_state_changes([pr], target) == {}
    assert rig.ctx.replica_state(pr) is target
    assert rig.batch.is_empty()


def test_replica_deletion_successful_to_nonexistent_replica_transition() -> None:
    rig, pr = rig_with_replica(R.DELETION_SUCCESSFUL)
    assert rig.rsm.handle_state_changes([pr], R.NON_EXISTENT) == {}
    assert rig.ctx.partition_replica_assignment(T0) == (1, 3)
    assert rig.ctx.replica_state(pr) is R.NON_EXISTENT


ILLEGAL = [(source, target) for target, sources in VALID_PREVIOUS.items()
           for source in R if source not in sources]


@pytest.mark.parametrize("source,target", ILLEGAL, ids=lambda s: s.value)
def test_illegal_replica_transition_is_rejected(source, target) -> None:
    rig, pr = rig_with_replica(source)
    errors = rig.rsm.handle_state_changes([pr], target)
    assert isinstance(errors[pr], IllegalReplicaStateTransitionError)
    assert rig.ctx.replica_state(pr) is source
    assert rig.batch.is_empty() and rig.zk.calls == []
