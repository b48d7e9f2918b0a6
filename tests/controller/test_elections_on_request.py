"""Leader elections on request (KafkaController.onPreferredReplicaElection, Kafka 2.4's
ReplicaLeaderElection) and the automatic leader rebalance, over the recording fakes."""
from __future__ import annotations

import io

import pytest
from controller_fakes import FakeChannel, FakeZk, new_controller, tp

from odradek.common.metadata import LeaderAndIsr
from odradek.controller.controller import Controller
from odradek.controller.events import (
    AutoLeaderRebalance,
    ElectionNotNeededError,
    ElectionTrigger,
    ElectionType,
    NotControllerError,
    ReplicaLeaderElection,
    Startup,
    UnknownPartitionError,
)
from odradek.controller.leader_selectors import StateChangeFailedError
from odradek.controller.state_change_log import StateChangeLog


def piled_up_cluster(brokers=(1, 2, 3)) -> FakeZk:
    """t-0..t-5 with preferred replicas 1,2,3,1,2,3, all led by broker 2 (after 1 and 3
    came back from failures)."""
    zk = FakeZk()
    for b in brokers:
        zk.register_broker(b)
    zk.create_topic("t", {p: tuple((p + i) % 3 + 1 for i in range(3)) for p in range(6)})
    for p in range(6):
        zk.states[tp("t", p)] = LeaderAndIsr(2, 5, (1, 2, 3), 1, 7)
    return zk


def started(zk: FakeZk):
    controller, channel, sink = new_controller(zk)
    controller.process(Startup(epoch=2, epoch_zk_version=1))
    channel.sent.clear()
    zk.calls.clear()
    return controller, channel, sink


def elect(controller, partitions, election_type=ElectionType.PREFERRED):
    answers: list[object] = []
    controller.process(ReplicaLeaderElection(frozenset(partitions), election_type,
                                             ElectionTrigger.ADMIN, answers.append))
    assert len(answers) == 1
    return answers[0]


def test_admin_preferred_election_answers_per_partition_in_one_write() -> None:
    zk = piled_up_cluster()
    controller, channel, _ = started(zk)
    results = elect(controller, [tp("t", p) for p in range(6)] + [tp("t", 9), tp("gone", 0)])

    assert {p: results[tp("t", p)].leader for p in (0, 2, 3, 5)} == {0: 1, 2: 3, 3: 1, 5: 3}
    assert isinstance(results[tp("t", 1)], ElectionNotNeededError)  # 2 is its preferred replica
    assert isinstance(results[tp("t", 4)], ElectionNotNeededError)
    assert isinstance(results[tp("t", 9)], UnknownPartitionError)
    assert isinstance(results[tp("gone", 0)], UnknownPartitionError)
    assert len(zk.calls_named("update_leader_and_isr")) == 1
    assert zk.states[tp("t", 0)] == LeaderAndIsr(1, 6, (1, 2, 3), 2, 8)  # ISR kept, epoch bumped
    assert zk.states[tp("t", 1)] == LeaderAndIsr(2, 5, (1, 2, 3), 1, 7)  # untouched
    lai = channel.leader_and_isr()
    assert sorted(b for b, _ in lai) == [1, 2, 3]  # one request per broker, all assigned replicas
    assert all(sorted(s.tp.partition for s in r.partition_states) == [0, 2, 3, 5] for _, r in lai)


def test_preferred_replica_dead_or_out_of_sync_fails_without_a_write() -> None:
    zk = piled_up_cluster(brokers=(2, 3))  # broker 1 is dead
    zk.states[tp("t", 2)] = LeaderAndIsr(2, 5, (1, 2), 1, 7)  # preferred 3 is out of sync
    controller, channel, _ = started(zk)
    results = elect(controller, [tp("t", 0), tp("t", 2)])

    assert all(isinstance(r, StateChangeFailedError) for r in results.values())
    assert zk.calls_named("update_leader_and_isr") == []
    assert channel.leader_and_isr() == []


def test_unclean_election_only_for_leaderless_partitions() -> None:
    zk = FakeZk()
    for b in (2, 3):
        zk.register_broker(b)
    zk.create_topic("t", {0: (1, 2, 3), 1: (2, 3, 1)})
    zk.states[tp("t", 0)] = LeaderAndIsr(1, 3, (1,), 1, 4)      # leader dead, ISR only 1
    zk.states[tp("t", 1)] = LeaderAndIsr(2, 3, (2, 3), 1, 4)    # has a live leader
    controller, _, _ = started(zk)  # unclean.leader.election.enable is false: t-0 stays offline
    assert zk.states[tp("t", 0)].leader == -1 and zk.states[tp("t", 0)].isr == (1,)

    preferred = elect(controller, [tp("t", 0)])
    assert isinstance(preferred[tp("t", 0)], StateChangeFailedError)
    results = elect(controller, [tp("t", 0), tp("t", 1)], ElectionType.UNCLEAN)
    assert results[tp("t", 0)] == zk.states[tp("t", 0)]
    assert zk.states[tp("t", 0)].leader == 2 and zk.states[tp("t", 0)].isr == (2,)
    assert isinstance(results[tp("t", 1)], ElectionNotNeededError)


def test_znode_election_runs_then_deletes_the_znode() -> None:
    zk = piled_up_cluster()
    controller, _, _ = started(zk)
    zk.preferred_election = {tp("t", 0), tp("t", 1), tp("t", 7)}
    controller.process(ReplicaLeaderElection(trigger=ElectionTrigger.ZOOKEEPER))

    assert zk.states[tp("t", 0)].leader == 1
    assert zk.states[tp("t", 3)].leader == 2  # not asked for
    assert zk.preferred_election is None
    zk.calls.clear()
    controller.process(ReplicaLeaderElection(trigger=ElectionTrigger.ZOOKEEPER))  # znode gone
    assert zk.calls_named("update_leader_and_isr") == []
    assert zk.calls_named("delete_preferred_replica_election") == []


def test_controller_failover_resumes_a_pending_znode_election() -> None:
    zk = piled_up_cluster()
    zk.preferred_election = {tp("t", 3)}
    controller, _, _ = new_controller(zk)
    controller.process(Startup(epoch=2, epoch_zk_version=1))

    assert zk.states[tp("t", 3)].leader == 1
    assert zk.states[tp("t", 0)].leader == 2
    assert zk.preferred_election is None


def test_auto_rebalance_moves_back_only_past_the_imbalance_threshold() -> None:
    zk = FakeZk()
    for b in (1, 2, 3):
        zk.register_broker(b)
    # 20 partitions preferred by each broker; broker 1 lost 2 of its 20 (10%: allowed),
    # broker 3 lost 3 (15%), one of which it is not in sync for
    assignment = {p: tuple((p + i) % 3 + 1 for i in range(3)) for p in range(60)}
    zk.create_topic("t", assignment)
    for p, replicas in assignment.items():
        zk.states[tp("t", p)] = LeaderAndIsr(replicas[0], 1, (1, 2, 3), 1, 1)
    for p in (0, 3):
        zk.states[tp("t", p)] = LeaderAndIsr(2, 2, (1, 2, 3), 1, 2)
    for p in (2, 5):
        zk.states[tp("t", p)] = LeaderAndIsr(1, 2, (1, 2, 3), 1, 2)
    zk.states[tp("t", 8)] = LeaderAndIsr(1, 2, (1, 2), 1, 2)
    controller, _, _ = started(zk)
    controller.process(AutoLeaderRebalance())

    assert [zk.states[tp("t", p)].leader for p in (0, 3)] == [2, 2]  # broker 1 within 10%
    assert [zk.states[tp("t", p)].leader for p in (2, 5, 8)] == [3, 3, 1]  # 3 not in t-8's ISR


def test_auto_rebalance_threshold_is_configurable() -> None:
    zk = piled_up_cluster()
    controller = Controller(1, zk, FakeChannel(), StateChangeLog(io.StringIO()),
                            leader_imbalance_per_broker_percentage=100)
    controller.process(Startup(epoch=2, epoch_zk_version=1))
    controller.process(AutoLeaderRebalance())
    assert all(zk.states[tp("t", p)].leader == 2 for p in range(6))


def test_inactive_or_deposed_controller_answers_not_controller() -> None:
    zk = piled_up_cluster()
    controller, _, _ = new_controller(zk)
    assert isinstance(elect(controller, [tp("t", 0)]), NotControllerError)
    controller.process(Startup(epoch=2, epoch_zk_version=1))
    zk.fenced = True
    assert isinstance(elect(controller, [tp("t", 0)]), NotControllerError)
    assert not controller.is_active
    assert zk.states[tp("t", 0)].leader == 2


def test_an_unexpected_error_is_answered_too() -> None:
    zk = piled_up_cluster()
    controller, _, _ = started(zk)

    def broken(states: object) -> None:
        raise ConnectionError("ZooKeeper went away")

    zk.update_leader_and_isr = broken  # type: ignore[method-assign]
    answers: list[object] = []
    with pytest.raises(ConnectionError):
        controller.process(ReplicaLeaderElection(frozenset([tp("t", 0)]), callback=answers.append))
    assert len(answers) == 1 and isinstance(answers[0], ConnectionError)
