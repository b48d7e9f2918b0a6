"""Partition reassignment (KafkaController.onPartitionReassignment) driven through the
simulation's world: real controller core, in-memory ZooKeeper, simulated brokers.

The example in Kafka's KafkaController.onPartitionReassignment doc comment is the yardstick
(its table is in controller/reassignment.py's docstring): ORS {1,2,3} -> TRS {4,5,6} (OAR and
RAR below) takes the topic znode's replica set RS and the partition's leader/ISR through exactly
RS {1,2,3} 1/{1,2,3}, RS {1..6} 1/{1,2,3} (U1), 1/{1..6} (the leader adds the caught-up
replicas), 4/{1..6} (B3), 4/{4,5,6} (B4), RS {4,5,6} 4/{4,5,6} (B6); and a controller that
dies at any write of it leaves a state the next controller completes along the same sequence."""
from __future__ import annotations

from typing import Any

import pytest
from controller_simulation import World

from odradek.common.metadata import TopicPartition
from odradek.controller.events import (
    AlterPartitionReassignments,
    InvalidReplicaAssignmentError,
    ListPartitionReassignments,
    NoReassignmentInProgressError,
    PartitionReassignment,
    TopicDeletion,
    UnknownPartitionError,
)
from odradek.controller.seams import ControllerMovedError

TP = TopicPartition("t", 0)
OAR, RAR = (1, 2, 3), (4, 5, 6)
EXAMPLE = [
    ((1, 2, 3), 1, (1, 2, 3)),              # initial state
    ((1, 2, 3, 4, 5, 6), 1, (1, 2, 3)),     # U1: RS = ORS + TRS
    ((1, 2, 3, 4, 5, 6), 1, (1, 2, 3, 4, 5, 6)),  # the new replicas caught up: phase B
    ((1, 2, 3, 4, 5, 6), 4, (1, 2, 3, 4, 5, 6)),  # B3: the leader moves into TRS
    ((1, 2, 3, 4, 5, 6), 4, (4, 5, 6)),     # B4: RR out of the ISR
    ((4, 5, 6), 4, (4, 5, 6)),              # B6: RS = TRS
]
WRITES = ("set_replica_assignments", "update_leader_and_isr", "set_partition_reassignments")


class Recorder:
    """Every (AR, leader, ISR) the topic znode and the state znode show after each write,
    and optionally a controller deposed just before its n-th write."""

    def __init__(self, world: World, depose_at: int | None = None) -> None:
        self.world = world
        self.seen: list[tuple[tuple[int, ...], int, tuple[int, ...]]] = []
        self.writes = 0
        self.depose_at = depose_at
        self.deposed = False
        zk = world.zk
        for name in WRITES + ("leader_isr_write",):
            setattr(zk, name, self._wrap(getattr(zk, name), name in WRITES))
        self.snap()

    def _wrap(self, write: Any, controller_write: bool) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if controller_write:
                self.writes += 1
                if self.writes == self.depose_at:
                    self.deposed = True
                    self.world.epoch += 1  # another controller won: this one's fence fails
                    raise ControllerMovedError("deposed for the test")
            result = write(*args, **kwargs)
            self.snap()
            return result
        return wrapped

    def snap(self) -> None:
        zk = self.world.zk
        lai = zk.states.get(TP)
        if lai is None:
            return
        entry = (tuple(sorted(zk.topics["t"].partitions[0])), lai.leader, tuple(sorted(lai.isr)))
        if not self.seen or self.seen[-1] != entry:
            self.seen.append(entry)


def _world() -> World:
    world = World(seed=11, brokers=(1, 2, 3, 4, 5, 6), topics={"t": (1, 3)})
    world.elect()
    assert world.zk.topics["t"].partitions[0] == OAR
    return world


def _catch_up(world: World) -> None:
    """The leader sees every live assigned replica caught up and adds it to the ISR."""
    lai = world.zk.states[TP]
    assigned = world.zk.topics["t"].partitions[0]
    isr = tuple(r for r in assigned if r in world.live)
    if set(isr) != set(lai.isr):
        world.leader_changes_isr(TP, isr)


def _assert_done(world: World) -> None:
    zk = world.zk
    assert zk.topics["t"].partitions[0] == RAR
    assert not zk.topics["t"].adding_replicas and not zk.topics["t"].removing_replicas
    lai = zk.states[TP]
    assert lai.leader in RAR and set(lai.isr) == set(RAR)
    assert zk.reassignments is None
    for broker in OAR:
        assert TP not in world.live[broker].roles and TP in world.live[broker].deleted
    for broker in RAR:
        role = world.live[broker].roles[TP]
        assert (role.leader, role.leader_epoch, role.replicas) == (lai.leader, lai.leader_epoch, RAR)
    assert not world.active.context.is_being_reassigned(TP)
    assert world.active.context.partition_replica_assignment(TP) == RAR


def test_znode_reassignment_goes_through_the_designs_example_sequence() -> None:
    world = _world()
    recorder = Recorder(world)
    world.zk.reassignments = {TP: RAR}
    world.process(PartitionReassignment())
    # U1-A2: RS = ORS + TRS, every replica told, the new ones started; the znode waits
    assert world.zk.topics["t"].adding_replicas == {0: RAR}
    assert world.zk.topics["t"].removing_replicas == {0: OAR}
    assert world.zk.reassignments == {TP: RAR}
    for broker in RAR:
        assert world.live[broker].roles[TP].replicas == RAR + OAR
    _catch_up(world)
    assert recorder.seen == EXAMPLE
    _assert_done(world)


def test_api_reassignment_is_listed_while_in_progress_and_cancellation_goes_back() -> None:
    world = _world()
    answers: list[Any] = []
    world.process(AlterPartitionReassignments({TP: (2, 3, 4)}, answers.append))
    assert answers == [{TP: None}]
    world.process(ListPartitionReassignments(None, answers.append))
    listed = answers[-1][TP]
    assert (listed.replicas, listed.adding, listed.removing) == ((2, 3, 4, 1), (4,), (1,))
    # cancelled before broker 4 caught up: back to {1,2,3}, broker 4's new replica deleted
    world.process(AlterPartitionReassignments({TP: None}, answers.append))
    assert answers[-1] == {TP: None}
    # (the original replicas come back as a set: as in Kafka, where the topic znode keeps
    # RAR first during a move, the original order is not kept)
    assert set(world.zk.topics["t"].partitions[0]) == set(OAR)
    assert not world.zk.topics["t"].adding_replicas
    assert TP in world.live[4].deleted and TP not in world.live[4].roles
    world.process(ListPartitionReassignments(None, answers.append))
    assert answers[-1] == {}
    # nothing left to cancel
    world.process(AlterPartitionReassignments({TP: None}, answers.append))
    assert isinstance(answers[-1][TP], NoReassignmentInProgressError)


def test_bad_reassignments_are_refused_and_change_nothing() -> None:
    world = _world()
    world.kill(6) if world.active.broker_id != 6 else world.kill(5)
    dead = 6 if 6 not in world.live else 5
    before = (dict(world.zk.topics), dict(world.zk.states))
    answers: list[Any] = []
    world.process(AlterPartitionReassignments({
        TP: (4, 4, 5), TopicPartition("t", 7): (1, 2, 3), TopicPartition("nope", 0): (1,),
        TopicPartition("t", 1): None}, answers.append))
    results = answers[0]
    assert isinstance(results[TP], InvalidReplicaAssignmentError)
    assert isinstance(results[TopicPartition("t", 7)], UnknownPartitionError)
    assert isinstance(results[TopicPartition("nope", 0)], UnknownPartitionError)
    assert isinstance(results[TopicPartition("t", 1)], UnknownPartitionError)
    world.process(AlterPartitionReassignments({TP: (1, 2, dead)}, answers.append))
    assert isinstance(answers[-1][TP], InvalidReplicaAssignmentError)
    assert "not alive" in str(answers[-1][TP])
    world.process(AlterPartitionReassignments({TP: ()}, answers.append))
    assert isinstance(answers[-1][TP], InvalidReplicaAssignmentError)
    assert (world.zk.topics, world.zk.states) == before
    # the znode's refused entries are removed from it, the valid ones started
    world.zk.reassignments = {TP: (1, 2, dead)}
    world.process(PartitionReassignment())
    assert world.zk.reassignments is None and world.zk.topics == before[0]


def test_deleting_a_topic_ends_its_reassignment_and_deletes_old_and_new_replicas() -> None:
    world = _world()
    world.zk.reassignments = {TP: RAR}
    world.process(PartitionReassignment())
    world.zk.deletions.add("t")
    world.process(TopicDeletion())
    assert "t" not in world.zk.topics and not world.zk.deletions
    assert world.zk.reassignments is None
    for broker in range(1, 7):
        assert TP not in world.live[broker].roles and TP in world.live[broker].deleted


@pytest.mark.parametrize("depose_at", range(1, 7))
def test_a_controller_deposed_at_any_write_leaves_a_reassignment_the_next_completes(
        depose_at: int) -> None:
    world = _world()
    recorder = Recorder(world, depose_at)

    def recover() -> None:
        if not world.active.is_active:  # it resigned on its failed fence: a new one is elected
            world.elect()

    world.zk.reassignments = {TP: RAR}
    world.process(PartitionReassignment())
    recover()
    _catch_up(world)
    recover()
    _catch_up(world)
    assert recorder.deposed, f"the reassignment made only {recorder.writes} writes"
    assert recorder.seen == EXAMPLE, f"deposed at write {depose_at}"
    _assert_done(world)
