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

A failure names its seed and step: the same seed replays the same schedule.
"""
from __future__ import annotations

import os
from collections import Counter

from controller_simulation import World

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
