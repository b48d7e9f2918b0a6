"""DeleteRecords (KIP-107) right after an ordered topic is shrunk: marking partitions for
deletion (KIP-253) rewrites their state znodes without a new leader epoch, so every replica gets
a LeaderAndIsr at the leader epoch it already has (a new zk version only). A follower must keep
fetching through it and keep reporting its log start offset, else the leader's low watermark
never reaches the DeleteRecords offset and the request times out (REQUEST_TIMED_OUT) instead of
answering at once as on a topic that was not shrunk."""
from __future__ import annotations

import time

import pytest
from clients import create_topic
from cluster_state import full_isr, metadata
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from polling import wait_until

from odradek.cluster.local_cluster import LocalCluster
from odradek.log.checkpoint import read_offset
from odradek.log.log import LOG_START_FILE

pytestmark = pytest.mark.integration

TOPIC = "shrunk-then-deleted"
RECORDS = 5  # per partition
# the broker's wait for every ISR member's log start; unfixed, the request waits all of it
DELETE_TIMEOUT_S = 5.0


def log_start(cluster: LocalCluster, broker: int, partition: int) -> int | None:
    """The replica's checkpointed log start offset (written as soon as it moves)."""
    return read_offset(cluster.broker_dir(broker) / "data" / f"{TOPIC}-{partition}" / LOG_START_FILE)


def test_delete_records_right_after_a_shrink_answers(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    # created with 2 (an ordered topic never goes below its initial count) and grown to 4
    create_topic(bootstrap, TOPIC, 2, 3, {"enable.ordered.delivery": "true"})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(TOPIC, 4)], operation_timeout=10)[TOPIC].result(20)
    wait_until(lambda: full_isr(cluster, TOPIC, 3) and len(metadata(bootstrap, TOPIC)) == 4, 20,
               "a full ISR of 4 partitions")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    failed: list[object] = []
    for p in range(4):
        for i in range(RECORDS):
            producer.produce(TOPIC, b"v%d" % i, partition=p,
                             on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(20) == 0 and not failed, failed

    admin.create_partitions([NewPartitions(TOPIC, 2)], operation_timeout=10)[TOPIC].result(20)
    time.sleep(0.02)  # the marked partitions' same-epoch LeaderAndIsr is on its way or applied
    started = time.monotonic()
    futures = admin.delete_records([TopicPartition(TOPIC, p, -1) for p in (2, 3)],
                                   request_timeout=DELETE_TIMEOUT_S + 10, operation_timeout=DELETE_TIMEOUT_S)
    lows = {tp.partition: f.result(DELETE_TIMEOUT_S + 15).low_watermark for tp, f in futures.items()}
    took = time.monotonic() - started
    assert lows == {2: RECORDS, 3: RECORDS}, lows
    assert took < DELETE_TIMEOUT_S - 1, f"DeleteRecords answered only after {took:.1f} s"

    # the low watermark is every ISR member's log start, and RF 3 on 3 brokers puts a replica on
    # each: every follower's own checkpoint shows the end (read before the drained partitions'
    # removal, which waits for two of their leaders' checks 2 s apart, deletes them)
    starts: dict[str, int | None] = {}

    def every_replica_at_end() -> bool:
        starts.update({f"broker {b} partition {p}": log_start(cluster, b, p)
                       for b in cluster.broker_ids for p in (2, 3)})
        return set(starts.values()) == {RECORDS}

    try:
        wait_until(every_replica_at_end, 1, "every replica's log start at the end")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {starts}") from None
