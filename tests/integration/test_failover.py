"""Failover with real processes: kill -9 of a leader and of the controller, a controller frozen
past its session timeout, and a killed broker catching up. Every acknowledged write must survive,
exactly once and in per-partition send order, and replicas must end byte-identical."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from clients import ContinuousProducer, check_exactly_once_in_order, create_topic, wait_identical_replicas
from cluster_state import controller_of, full_isr, live_leaders, metadata, zk
from confluent_kafka.admin import AdminClient
from polling import wait_until

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.admin.admin_client import metadata_request
from odradek.admin.errors import AdminError
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

#: every test here waits for ZooKeeper to expire a killed or frozen broker's session: the least
#: session timeout ZooKeeper grants keeps those waits short
SESSION = {"zookeeper_session_timeout_ms": SHORT_SESSION_TIMEOUT_MS}
SESSION_TIMEOUT_S = SHORT_SESSION_TIMEOUT_MS / 1000


def describe_cli(bootstrap: str, *flags: str) -> dict[str, list[int]]:
    """`odradek topics describe --json FLAGS`, as topic -> partition numbers."""
    out = subprocess.run([sys.executable, "-m", "odradek", "topics", "describe", "--json", "--bootstrap-server",
                          bootstrap, *flags], capture_output=True, text=True, check=True, timeout=60).stdout
    return {t["name"]: [p["partition"] for p in t["partitions"]] for t in json.loads(out)}


def test_kill_leader_during_acks_all_production_loses_nothing(cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(min_insync_replicas=2, **SESSION)
    create_topic(c.bootstrap_servers, "fo", 6, 3)
    producer = ContinuousProducer(c.bootstrap_servers, "fo", 6).start()
    producer.wait_acked(2000)
    victim = metadata(c.bootstrap_servers, "fo")[0][0]
    c.kill_broker(victim)
    elapsed = wait_until(lambda: live_leaders(c, "fo", {victim}), SESSION_TIMEOUT_S + 15, "new leaders")
    assert elapsed < SESSION_TIMEOUT_S + 15
    acked_at_recovery = len(producer.acked)
    producer.wait_acked(acked_at_recovery + 3000)  # producers carry on with the new leaders
    producer.stop()
    assert producer.errors == []
    check_exactly_once_in_order(c.bootstrap_servers, producer)

    c.up(timeout=60)  # restart the killed broker: it truncates its divergent tail and catches up
    wait_until(lambda: full_isr(c, "fo", 3), 60, "the restarted broker to rejoin every ISR")
    wait_identical_replicas(c, "fo", 6)


def test_kill_controller_elects_a_new_one_that_creates_topics(cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(**SESSION)
    create_topic(c.bootstrap_servers, "before", 3, 3)
    client = zk(c)
    try:
        old, epoch = controller_of(client)
        c.kill_broker(old)
        wait_until(lambda: controller_of(client)[0] not in (-1, old),
                   SESSION_TIMEOUT_S + 15, "a new controller")
        new, new_epoch = controller_of(client)
        assert new != old and new_epoch == epoch + 1
    finally:
        client.stop()
        client.close()
    survivors = [b for b in c.broker_ids if b != old]
    bootstrap = ",".join(f"{c.host}:{c.broker_port(b)}" for b in survivors)
    # librdkafka sends CreateTopics to the controller a broker's Metadata names, and one that
    # asked before the new controller's UpdateMetadata reached the brokers waits for the dead
    # one until its request times out (as against Kafka's ZooKeeper-era brokers)
    wait_until(lambda: all(_controller_known_to(f"{c.host}:{c.broker_port(b)}") == new for b in survivors),
               30, "the survivors to know the new controller")
    create_topic(bootstrap, "after", 4, 2)

    wait_until(lambda: live_leaders(c, "after", {old}), 30, "the new topic's leaders")
    wait_until(lambda: live_leaders(c, "before", {old}), 30, "the old topic's leaders")


def _controller_known_to(address: str) -> int:
    """The controller id in one broker's Metadata answer (-2 while it does not answer)."""
    try:
        return metadata_request(address, [], 2.0).controller_id
    except AdminError:
        return -2


def test_frozen_controller_is_fenced_after_it_wakes(cluster_factory: Callable[..., LocalCluster]) -> None:
    """SIGSTOP the controller past its session timeout, let another take over, SIGCONT it: it
    changes nothing in ZooKeeper, no broker acts on it, and no acknowledged write is lost."""
    c = cluster_factory(min_insync_replicas=2, **SESSION)
    create_topic(c.bootstrap_servers, "frozen", 6, 3)
    client = zk(c)
    try:
        old, epoch = controller_of(client)
        producer = ContinuousProducer(",".join(f"{c.host}:{c.broker_port(b)}" for b in c.broker_ids if b != old),
                                      "frozen", 6).start()
        producer.wait_acked(1000)
        pid = c.broker_pid(old)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(lambda: controller_of(client)[0] not in (-1, old),
                       SESSION_TIMEOUT_S + 20, "another controller")
            new, new_epoch = controller_of(client)
            wait_until(lambda: live_leaders(c, "frozen", {old}), 30, "leaders away from the frozen broker")
            producer.wait_acked(len(producer.acked) + 1000)
            log_path = c.broker_dir(old) / "data" / "state-change.log"
        finally:
            woke_ms = time.time() * 1000
            os.kill(pid, signal.SIGCONT)
        # it wakes with an expired session: give it time to notice, resign and re-register
        wait_until(lambda: client.exists(f"/brokers/ids/{old}") is not None, 30, "the woken broker to re-register")
        time.sleep(2)
        assert controller_of(client) == (new, new_epoch)
        # lines are written when the controller is idle, so some decided before the freeze may
        # appear only now: what counts is when each record was made
        records = [json.loads(line) for line in log_path.read_text().splitlines()] \
            if log_path.exists() else []
        by_old = [r for r in records if r["controller_epoch"] == epoch and r["kind"] != "failed"
                  and r["time_ms"] >= woke_ms]
        assert by_old == [], "the deposed controller made state changes after waking"
        producer.wait_acked(len(producer.acked) + 1000)
        producer.stop()
    finally:
        client.stop()
        client.close()
    assert producer.errors == []
    check_exactly_once_in_order(c.bootstrap_servers, producer)
    wait_until(lambda: full_isr(c, "frozen", 3), 60, "the woken broker to rejoin every ISR")
    wait_identical_replicas(c, "frozen", 6)


def test_killed_follower_catches_up_and_rejoins_the_isr(cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(**SESSION)
    create_topic(c.bootstrap_servers, "catchup", 3, 3)
    # CreateTopics answers once the topic is in ZooKeeper; the broker asked next may not have
    # its UpdateMetadata yet
    wait_until(lambda: live_leaders(c, "catchup", set()), 30, "leaders")
    leader = metadata(c.bootstrap_servers, "catchup")[0][0]
    follower = next(b for b in c.broker_ids if b != leader)
    c.kill_broker(follower)
    wait_until(lambda: all(follower not in isr for _, isr in metadata(c.bootstrap_servers, "catchup").values()),
               SESSION_TIMEOUT_S + 15, "the dead follower to leave the ISRs")
    producer = ContinuousProducer(c.bootstrap_servers, "catchup", 3).start()
    producer.wait_acked(5000)
    producer.stop()
    c.up(timeout=60)
    wait_until(lambda: full_isr(c, "catchup", 3), 60, "the follower to rejoin every ISR")
    wait_identical_replicas(c, "catchup", 3)
    check_exactly_once_in_order(c.bootstrap_servers, producer)


def test_unclean_leader_election_only_where_the_topic_allows_it(
        cluster_factory: Callable[..., LocalCluster]) -> None:
    """Both replicas of two topics die, the ISR member last. When only the out-of-sync replica
    comes back, the topic with unclean.leader.election.enable=true gets it as leader (possible
    loss, logged); the other stays offline until its ISR member returns."""
    from confluent_kafka.admin import NewTopic

    c = cluster_factory(**SESSION)
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    topics = [NewTopic("clean", num_partitions=1, replica_assignment=[[1, 2]]),
              NewTopic("unclean", num_partitions=1, replica_assignment=[[1, 2]], config={"unclean.leader.election.enable": "true"})]
    for future in admin.create_topics(topics).values():
        future.result(30)
    wait_until(lambda: live_leaders(c, "clean", set()) and live_leaders(c, "unclean", set()), 30, "leaders")
    c.kill_broker(2)
    wait_until(lambda: metadata(c.bootstrap_servers, "clean")[0][1] == [1]
               and metadata(c.bootstrap_servers, "unclean")[0][1] == [1], SESSION_TIMEOUT_S + 15, "ISR {1}")
    c.kill_broker(1)
    c.start_broker(2)
    c.wait_ready([2, 3], 60)
    third = f"{c.host}:{c.broker_port(3)}"
    wait_until(lambda: metadata(third, "unclean")[0][0] == 2, SESSION_TIMEOUT_S + 15, "the unclean election")
    assert metadata(third, "clean")[0][0] == -1  # offline: its only ISR member is dead
    assert describe_cli(third, "--offline") == {"clean": [0]}
    assert describe_cli(third, "--under-replicated") == {"unclean": [0]}
    c.start_broker(1)
    c.wait_ready([1, 2, 3], 60)
    wait_until(lambda: metadata(third, "clean")[0][0] == 1, SESSION_TIMEOUT_S + 15, "the clean partition's return")
