"""Controlled shutdown with real processes: a SIGTERM'd broker first asks the controller to move
its leadership away (Kafka's KafkaController.shutdownBroker), so its partitions change leader
while it still answers, and producers with acks=all lose and duplicate nothing."""
from __future__ import annotations

import json
import signal
from collections.abc import Callable

import pytest
from clients import ContinuousProducer, check_exactly_once_in_order, create_topic
from cluster_state import controller_id, full_isr, leaders
from polling import wait_until

from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration


def shutdown_elections(c: LocalCluster, controller: int) -> dict[int, int]:
    """partition -> new leader, from the controller's state-change log's controlled-shutdown
    elections."""
    lines = (c.broker_dir(controller) / "data" / "state-change.log").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return {r["partition"]: r["leader"] for r in records
            if r.get("strategy") == "ControlledShutdownLeaderSelector"}


@pytest.mark.parametrize("victim_is_controller", [False, True], ids=["follower-broker", "controller"])
def test_sigterm_moves_leadership_before_the_broker_stops(
        cluster_factory: Callable[..., LocalCluster], victim_is_controller: bool) -> None:
    c = cluster_factory(min_insync_replicas=2)
    create_topic(c.bootstrap_servers, "cs", 6, 3)
    wait_until(lambda: full_isr(c, "cs", 3), 30, "full ISRs")
    controller = controller_id(c)
    victim = controller if victim_is_controller else next(b for b in c.broker_ids if b != controller)
    led = sorted(p for p, (leader, _) in leaders(c, "cs").items() if leader == victim)
    assert led  # each broker is the preferred replica of two partitions
    producer = ContinuousProducer(c.bootstrap_servers, "cs", 6).start()
    producer.wait_acked(2000)

    c.kill_broker(victim, signal.SIGTERM)  # returns once the process has exited

    assert "controlled shutdown succeeded" in (c.broker_dir(victim) / "broker.log").read_text()
    # the controller writes its state-change log once its event thread is idle
    wait_until(lambda: sorted(shutdown_elections(c, controller)) == led, 15,
               "the controlled-shutdown elections in the state-change log")
    moved = shutdown_elections(c, controller)
    assert victim not in moved.values()
    if victim_is_controller:
        wait_until(lambda: controller_id(c) not in (-1, victim), 30, "a new controller")
    producer.wait_acked(len(producer.acked) + 2000)
    producer.stop()
    assert not producer.errors
    check_exactly_once_in_order(c.bootstrap_servers, producer)

    # `down` stops the others one by one, the controller last: it alone leads everything then,
    # with no in-sync replica left to hand over to, so it stops at once instead of retrying
    last = controller_id(c)
    c.down()
    log = (c.broker_dir(last) / "broker.log").read_text()
    assert "no other live in-sync replica to lead them; stopping anyway" in log
    assert "controlled shutdown attempt" not in log
