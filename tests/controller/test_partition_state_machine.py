"""Every legal and illegal partition transition of Kafka's PartitionStateMachine, driven through
the fakes."""
from __future__ import annotations

import json

import pytest
from controller_fakes import Rig, tp

from odradek.common.metadata import LeaderAndIsr
from odradek.controller.leader_and_isr_update import MAX_ATTEMPTS
from odradek.controller.leader_selectors import ElectionStrategy, StateChangeFailedError
from odradek.controller.partition_state_machine import (
    VALID_PREVIOUS,
    IllegalStateTransitionError,
    PartitionStatus,
)

P = PartitionStatus
T0 = tp("t", 0)


def rig_in_state(state: PartitionStatus, replicas=(1, 2, 3), stored=None) -> Rig:
    rig = Rig()
    rig.add_partition(T0, replicas, stored)
    rig.ctx.put_partition_state(T0, state)
    return rig


def test_nonexistent_partition_to_new_partition_transition() -> None:
    rig = rig_in_state(P.NON_EXISTENT)
    assert rig.psm.handle_state_changes([T0], P.NEW) == {}
    assert rig.ctx.partition_state(T0) is P.NEW
    assert rig.batch.is_empty()
    record = json.loads(rig.log_text().splitlines()[-1])
    assert (record["from"], record["to"], record["controller_epoch"]) == (
        "NonExistentPartition", "NewPartition", 5)


def test_new_partition_to_online_partition_transition() -> None:
    rig = rig_in_state(P.NEW)
    rig.ctx.remove_live_broker(1)
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert results[T0] == LeaderAndIsr(2, 0, (2, 3), 5, 0)
    assert rig.zk.states[T0] == LeaderAndIsr(2, 0, (2, 3), 5, 0)
    assert rig.ctx.partition_leadership(T0) == results[T0]
    assert rig.ctx.partition_state(T0) is P.ONLINE
    rig.send()
    lai = rig.channel.leader_and_isr()
    assert sorted(b for b, _ in lai) == [2, 3]
    assert all(r.partition_states[0].is_new for _, r in lai)
    assert sorted(b for b, _ in rig.channel.update_metadata()) == [2, 3]


def test_new_partition_to_online_partition_without_live_replica_fails() -> None:
    rig = rig_in_state(P.NEW, replicas=(7, 8))
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert isinstance(results[T0], StateChangeFailedError)
    assert rig.ctx.partition_state(T0) is P.NEW
    assert rig.zk.calls_named("create_partition_states") == []


def test_new_partitions_to_online_partition_use_one_create_call() -> None:
    rig = Rig()
    tps = [tp("t", i) for i in range(10)]
    for p in tps:
        rig.add_partition(p, (1, 2, 3))
        rig.ctx.put_partition_state(p, P.NEW)
    rig.psm.handle_state_changes(tps, P.ONLINE, ElectionStrategy.OFFLINE)
    creates = rig.zk.calls_named("create_partition_states")
    assert len(creates) == 1 and set(creates[0]) == set(tps)


def test_offline_partition_to_online_partition_transition() -> None:
    rig = rig_in_state(P.OFFLINE, stored=LeaderAndIsr(1, 3, (1, 2), 4, 9))
    rig.ctx.remove_live_broker(1)
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert results[T0] == LeaderAndIsr(2, 4, (2,), 5, 10)
    assert rig.ctx.partition_state(T0) is P.ONLINE
    rig.send()
    assert sorted(b for b, _ in rig.channel.leader_and_isr()) == [2, 3]
    assert not rig.channel.leader_and_isr()[0][1].partition_states[0].is_new


def test_online_partition_to_online_partition_transition() -> None:
    rig = rig_in_state(P.ONLINE, stored=LeaderAndIsr(2, 3, (1, 2, 3), 4, 0))
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.PREFERRED)
    assert results[T0] == LeaderAndIsr(1, 4, (1, 2, 3), 5, 1)


def test_offline_partition_to_online_partition_without_live_isr_stays_offline() -> None:
    rig = rig_in_state(P.OFFLINE, stored=LeaderAndIsr(1, 3, (1,), 4, 0))
    rig.ctx.remove_live_broker(1)
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert isinstance(results[T0], StateChangeFailedError)
    assert rig.ctx.partition_state(T0) is P.OFFLINE
    assert rig.zk.states[T0] == LeaderAndIsr(1, 3, (1,), 4, 0)


def test_offline_partition_to_online_partition_unclean_when_topic_enables_it() -> None:
    rig = rig_in_state(P.OFFLINE, stored=LeaderAndIsr(1, 3, (1,), 4, 0))
    rig.zk.configs["t"] = {"unclean.leader.election.enable": "true"}
    rig.ctx.remove_live_broker(1)
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert results[T0] == LeaderAndIsr(2, 4, (2,), 5, 1)


def test_election_retries_after_version_conflict() -> None:
    rig = rig_in_state(P.OFFLINE, stored=LeaderAndIsr(1, 3, (1, 2, 3), 4, 0))
    rig.ctx.remove_live_broker(1)
    rig.zk.leader_races[T0] = 2           # the leader's ISR write wins twice
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert results[T0] == LeaderAndIsr(2, 4, (2, 3), 5, 3)
    assert len(rig.zk.calls_named("update_leader_and_isr")) == 3
    # the first round decides on the cache, each retry re-reads
    assert len(rig.zk.calls_named("get_partition_states")) == 2


def test_election_on_a_fresh_cache_reads_nothing() -> None:
    rig = rig_in_state(P.OFFLINE, stored=LeaderAndIsr(1, 3, (1, 2, 3), 4, 0))
    rig.ctx.remove_live_broker(1)
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert results[T0] == LeaderAndIsr(2, 4, (2, 3), 5, 1)
    assert rig.zk.calls_named("get_partition_states") == []


def test_cache_that_cannot_elect_is_checked_against_zookeeper() -> None:
    """The controller last saw ISR (1,), but the leader added 2 before it died: a decision
    not to elect must not rest on the stale cache (no write would catch the mistake)."""
    rig = rig_in_state(P.OFFLINE, stored=LeaderAndIsr(1, 3, (1,), 4, 0))
    rig.zk.leader_isr_write(T0, (1, 2))
    rig.ctx.remove_live_broker(1)
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert results[T0] == LeaderAndIsr(2, 4, (2,), 5, 2)
    assert rig.zk.calls_named("get_partition_states") == [[T0]]


def test_unclean_election_reads_state_and_config_even_with_a_cache() -> None:
    rig = rig_in_state(P.OFFLINE, stored=LeaderAndIsr(1, 3, (1,), 4, 0))
    rig.ctx.put_topic_config("t", {"unclean.leader.election.enable": "true"})  # stale
    rig.ctx.remove_live_broker(1)
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert isinstance(results[T0], StateChangeFailedError)  # the stored config says false
    assert rig.zk.calls_named("get_partition_states") == [[T0]]
    assert rig.zk.states[T0] == LeaderAndIsr(1, 3, (1,), 4, 0)


def test_election_gives_up_after_bounded_conflicts() -> None:
    rig = rig_in_state(P.OFFLINE, stored=LeaderAndIsr(1, 3, (1, 2, 3), 4, 0))
    rig.ctx.remove_live_broker(1)
    rig.zk.leader_races[T0] = 100
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert isinstance(results[T0], StateChangeFailedError)
    assert len(rig.zk.calls_named("update_leader_and_isr")) == MAX_ATTEMPTS
    assert rig.ctx.partition_state(T0) is P.OFFLINE


def test_election_refuses_state_written_by_newer_controller() -> None:
    rig = rig_in_state(P.OFFLINE, stored=LeaderAndIsr(1, 3, (1, 2), 9, 0))
    rig.ctx.remove_live_broker(1)
    results = rig.psm.handle_state_changes([T0], P.ONLINE, ElectionStrategy.OFFLINE)
    assert isinstance(results[T0], StateChangeFailedError)
    assert rig.zk.calls_named("update_leader_and_isr") == []


@pytest.mark.parametrize("source", [P.NEW, P.ONLINE, P.OFFLINE])
def test_partition_to_offline_partition_transition(source: PartitionStatus) -> None:
    rig = rig_in_state(source)
    assert rig.psm.handle_state_changes([T0], P.OFFLINE) == {}
    assert rig.ctx.partition_state(T0) is P.OFFLINE
    assert rig.batch.is_empty() and rig.zk.calls == []


def test_offline_partition_to_nonexistent_partition_transition() -> None:
    rig = rig_in_state(P.OFFLINE)
    assert rig.psm.handle_state_changes([T0], P.NON_EXISTENT) == {}
    assert rig.ctx.partition_state(T0) is P.NON_EXISTENT


ILLEGAL = [(source, target) for target, sources in VALID_PREVIOUS.items()
           for source in P if source not in sources]


@pytest.mark.parametrize("source,target", ILLEGAL, ids=lambda s: s.value)
def test_illegal_partition_transition_is_rejected_and_logged(source, target) -> None:
    rig = rig_in_state(source, stored=LeaderAndIsr(1, 0, (1, 2, 3), 5, 0))
    results = rig.psm.handle_state_changes([T0], target, ElectionStrategy.OFFLINE)
    assert isinstance(results[T0], IllegalStateTransitionError)
    assert rig.ctx.partition_state(T0) is source
    assert rig.batch.is_empty() and rig.zk.calls == []
    assert json.loads(rig.log_text().splitlines()[-1])["kind"] == "failed"


def test_initial_states_from_stored_leadership() -> None:
    rig = Rig(brokers=(1, 2))
    rig.add_partition(tp("t", 0), (1, 2), LeaderAndIsr(1, 0, (1, 2), 1, 0))
    rig.add_partition(tp("t", 1), (3, 2), LeaderAndIsr(3, 0, (3, 2), 1, 0))
    rig.add_partition(tp("t", 2), (1, 2))
    rig.psm.initialize_partition_states()
    assert [rig.ctx.partition_state(tp("t", i)) for i in range(3)] == [P.ONLINE, P.OFFLINE, P.NEW]
