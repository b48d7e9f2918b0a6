"""A same-leader leader-epoch bump (KIP-253's ordered expansion bumps every existing partition's
epoch, leader and ISR unchanged) must not stop a follower's replication: the follower carries
on fetching at the new epoch (Kafka's Partition.makeFollower / ReplicaManager.makeFollowers
restart the fetcher at the new epoch), so acks=all produces to the bumped partitions are
acknowledged at once. replica.lag.time.max.ms is set far above the wait here: a stalled
follower stays in the ISR and the ack never comes, rather than coming when the leader drops
it from the ISR."""
from __future__ import annotations

import json
import time
from typing import Any

import pytest
from clients import create_topic
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from polling import wait_until

from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

TOPIC = "bumped"


@pytest.fixture(scope="module")
def patient_cluster(cluster: LocalCluster) -> LocalCluster:
    """The package's cluster (ordered/conftest.py), whose replica.lag.time.max.ms is 600 s."""
    return cluster


def test_followers_keep_replicating_across_same_leader_epoch_bumps(patient_cluster: LocalCluster) -> None:
    bootstrap = patient_cluster.bootstrap_servers
    # RF 3 on 3 brokers: every broker follows from both others, so each bump races a
    # LeaderAndIsr against six fetchers' in-flight fetches. The plain topic keeps each fetcher
    # busy with a partition that is not bumped: a fetcher whose every partition rests after
    # FENCED_LEADER_EPOCH sends nothing while it waits for its own LeaderAndIsr
    create_topic(bootstrap, "steady", 3, 3)
    create_topic(bootstrap, TOPIC, 3, 3, {"enable.ordered.delivery": "true"})
    zk = connect_zk(patient_cluster.zookeeper_connect)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "topic.metadata.refresh.interval.ms": 200})

    def states(count: int) -> dict[int, dict[str, Any]]:
        out = {}
        for p in range(count):
            path = f"/brokers/topics/{TOPIC}/partitions/{p}/state"
            if zk.exists(path):
                out[p] = json.loads(zk.get(path)[0])
        return out

    def produce_to_all(count: int, round_: int) -> None:
        acked: dict[int, KafkaError | None] = {}

        def done(err: KafkaError | None, msg: Message) -> None:
            partition = msg.partition()
            assert partition is not None
            acked[partition] = err

        for p in range(count):
            producer.produce(TOPIC, value=f"{round_}".encode(), partition=p, on_delivery=done)

        def all_acked() -> bool:
            producer.poll(0.1)
            return len(acked) == count

        wait_until(all_acked, 20, f"acks=all of round {round_} on every partition, acked {sorted(acked)}")
        assert all(err is None for err in acked.values()), acked

    try:
        wait_until(lambda: len(states(3)) == 3, 30, "the topic's partition states")
        produce_to_all(3, 0)
        count = 3
        for round_ in range(1, 5):
            before = states(count)
            count += 1
            admin.create_partitions([NewPartitions(TOPIC, count)], operation_timeout=10)[TOPIC].result(30)
            wait_until(lambda: len(states(count)) == count and all(
                s["leader_epoch"] > before[p]["leader_epoch"] for p, s in states(count).items() if p in before),
                30, f"expansion to {count} and the old partitions' epoch bumps")
            wait_until(lambda: len(producer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions) == count,
                       30, f"the producer sees {count} partitions")
            started = time.monotonic()
            produce_to_all(count, round_)
            after = states(count)
            # the ISR never shrank: nothing here waited for the lag timeout
            assert all(len(s["isr"]) == 3 for s in after.values()), (round_, after, time.monotonic() - started)
    finally:
        producer.flush(5)
        zk.stop()
        zk.close()
