"""Random schedules of the controller core's deterministic simulation (controller_simulation.py,
TigerBeetle's simulator in miniature) keep failover safe.

Each seed is one reproducible schedule of random steps on the in-memory seams: brokers die and
come back (or bounce before the controller notices), controllers fail over (and the deposed one keeps acting), leaders shrink and expand
their ISRs, brokers shut down cleanly, admins ask for elections, create topics, delete them (and
create them again under the same name) and add partitions. Simulated brokers
apply the controller's requests as real ones do (fenced by controller and broker epoch, newer
leader epochs only). After every step the properties that make failover safe are checked:

- every stored ISR is non-empty and assigned, and a leader is in its ISR;
- leader epochs never go back, and a leader change always moves the epoch;
- a new leader comes from the ISR stored before the step, unless the topic or an admin's
  request allows an unclean election and no ISR member is alive;
- after a broker change, a failover or a topic creation, a partition with a live ISR member
  has a live leader, and a partition with a live replica has a state;
- every live replica has applied its partition's current leader and leader epoch;
- the active controller's cached leaderships are what ZooKeeper holds;
- a deposed controller changes nothing in ZooKeeper, and brokers ignore what it sends;
- a topic whose deletion completed is gone from ZooKeeper and no live broker still hosts it;
  a topic is deleted only once every replica's broker deleted its copy;
- at the end, with every broker back, every deletion asked for has completed.

With an ordered topic (KIP-253) also World.check_ordered's and World.check_removals'
properties: the maps of marked and new partitions, no gap in a topic's partition numbers, a
removed partition without state znode and with every replica deleted, removed only after a
report with its current leader epoch; and at the end every drained partition removed.

A failure names its seed and step: the same seed replays the same schedule.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Callable

from controller_simulation import ORDERED_TOPIC, World

from odradek.common.metadata import TopicPartition

#: seeds per test run; ODRADEK_SIM_SEEDS=100000 for a long search (about 2 s per 100 seeds)
SEEDS = int(os.environ.get("ODRADEK_SIM_SEEDS", "150"))
STEPS = 40


def test_random_schedules_keep_failover_safe() -> None:
    done: Counter[str] = Counter()
    fenced = 0
    for seed in range(SEEDS):
        world = World(seed)
        world.elect()
        world.check({}, "controller failover")
        for number in range(STEPS):
            before = dict(world.zk.states)
            try:
                world.check(before, world.step())
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, step {number}: {exc}") from None
        try:
            world.heal()
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, healing: {exc}") from None
        done += world.done
        fenced += world.fenced_requests
    # the schedules really did all of it, so a step that silently does nothing shows up here
    assert set(done) >= {"kill", "restart", "shrink", "expand", "controlled_shutdown", "resign",
                         "preferred", "unclean", "deposed", "race", "create", "bounce",
                         "delete", "add_partitions", "reassign"}, done
    assert fenced > 0, "no request of a deposed controller ever reached a broker"


#: seeds of the schedules with an ordered topic (KIP-253)
ORDERED_SEEDS = int(os.environ.get("ODRADEK_SIM_ORDERED_SEEDS", "60"))


def _run(world: World, seed: int, steps: int) -> None:
    world.elect()
    world.note_births()
    world.check({}, "controller failover")
    for number in range(steps):
        before = dict(world.zk.states)
        try:
            world.check(before, world.step())
        except AssertionError as exc:
            raise AssertionError(f"ordered seed {seed}, step {number}: {exc}") from None


def test_random_schedules_with_an_ordered_topic_keep_its_maps_and_epochs() -> None:
    """KIP-253's invariants (World.check_ordered, World.check_removals) hold through random
    schedules in which the ordered topic grows, has partitions marked for deletion and its
    leaders report drained ones (with a stale epoch now and then) and removed numbers come back
    (above their old leader epochs), with the controller often
    deposed before one of the event's ZooKeeper writes and a new one finishing the work; at
    the end every marked partition, reported drained, is removed."""
    done: Counter[str] = Counter()
    deposed = 0
    removed = 0
    recreated = 0
    for seed in range(ORDERED_SEEDS):
        world = World(seed, ordered=True)
        _run(world, seed, STEPS)
        try:
            world.heal()
        except AssertionError as exc:
            raise AssertionError(f"ordered seed {seed}, healing: {exc}") from None
        done += world.done
        deposed += world.deposed_mid_event
        removed += world.removed
        recreated += world.recreated
    assert set(done) >= {"ordered_expand", "ordered_mark", "ordered_refused",
                         "ordered_drain"}, done
    assert removed > 0, "no drained partition was ever removed"
    assert recreated > 0, "no removed partition number was ever created again"
    assert deposed > 0, "no controller was ever deposed in the middle of an ordered step"


def _deposed_before_each_write(step: Callable[[World, int], str]) -> int:
    """Runs ``step`` on fresh worlds with the controller deposed before its first, second,
    ... write until one runs to the end undisturbed; every outcome must pass the checks."""
    for writes in range(50):
        world = World(7, ordered=True)
        world.elect()
        world.note_births()
        before = dict(world.zk.states)
        action = step(world, writes)
        world.note_births()
        world.check(before, action)
        if "deposed" not in action:
            assert writes > 0, "the step made no ZooKeeper write"
            return writes
    raise AssertionError("still deposed after 50 writes")


def test_ordered_expansion_is_finished_by_the_next_controller_whatever_write_it_stopped_at(
) -> None:
    def expand(world: World, writes: int) -> str:
        return world.ordered_expand(3, writes)

    assert _deposed_before_each_write(expand) >= 3  # the count, the bumps, the creations


def test_deletion_marking_is_finished_by_the_next_controller_whatever_write_it_stopped_at(
) -> None:
    def grow_then_mark(world: World, writes: int) -> str:
        world.ordered_expand(3, None)
        world.note_births()
        return world.ordered_mark(4, writes)

    assert _deposed_before_each_write(grow_then_mark) >= 1


def _marked_world() -> World:
    """The ordered topic grown from 3 to 6 partitions, then 3, 4 and 5 marked for deletion."""
    world = World(7, ordered=True)
    world.elect()
    world.note_births()
    world.ordered_expand(3, None)
    world.note_births()
    world.ordered_mark(3, None)
    world.note_births()
    return world


def test_removal_of_a_drained_partition_is_finished_by_the_next_controller_whatever_write_it_stopped_at(
) -> None:
    """The highest marked partition reported drained goes (state znode, replicas, report,
    assignment), whichever ZooKeeper write of the removal its controller was deposed before."""
    for writes in range(50):
        world = _marked_world()
        top = TopicPartition(ORDERED_TOPIC, 5)
        before = dict(world.zk.states)
        action = world.ordered_drain(top, False, writes)
        world.note_births()
        world.check(before, action)
        assert sorted(world.zk.topics[ORDERED_TOPIC].partitions) == [0, 1, 2, 3, 4], action
        assert top not in world.zk.states and not world.zk.removal_reports, action
        assert world.removed == 1, action
        if "deposed" not in action:
            assert writes > 0, "the removal made no ZooKeeper write"
            return
    raise AssertionError("still deposed after 50 writes")


def test_a_lower_drained_partition_waits_for_those_above_and_a_stale_report_is_dropped() -> None:
    world = _marked_world()
    low, high = TopicPartition(ORDERED_TOPIC, 4), TopicPartition(ORDERED_TOPIC, 5)
    before = dict(world.zk.states)
    world.ordered_drain(low, False, None)
    world.check(before, "lower drained")
    assert len(world.zk.topics[ORDERED_TOPIC].partitions) == 6
    assert [r.tp for r in world.zk.removal_reports.values() if r] == [low], "its report waits"
    world.ordered_drain(high, True, None)  # an older leader epoch: dropped, nothing removed
    world.check(before, "stale report")
    assert len(world.zk.topics[ORDERED_TOPIC].partitions) == 6
    assert [r.tp for r in world.zk.removal_reports.values() if r] == [low]
    before = dict(world.zk.states)
    world.ordered_drain(high, False, None)
    world.check(before, "higher drained")
    assert sorted(world.zk.topics[ORDERED_TOPIC].partitions) == [0, 1, 2, 3], \
        "both drained partitions go in one step"
    assert not world.zk.removal_reports and world.removed == 2
    # the deletion is not complete (3 is marked, not drained); once it is, the topic can grow
    before = dict(world.zk.states)
    world.ordered_drain(TopicPartition(ORDERED_TOPIC, 3), False, None)
    world.check(before, "last drained")
    assert sorted(world.zk.topics[ORDERED_TOPIC].partitions) == [0, 1, 2]
    before = dict(world.zk.states)
    world.note_births()
    action = world.ordered_expand(2, None)
    world.note_births()
    world.check(before, action)
    stored = world.zk.topics[ORDERED_TOPIC]
    assert stored.undeleted_partition_count == 5 and len(stored.partitions) == 5
    for p in (3, 4):
        lai = world.zk.states[TopicPartition(ORDERED_TOPIC, p)]
        assert lai.ordering is not None and lai.ordering.after_creation, lai
