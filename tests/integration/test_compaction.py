"""A compacted RF-3 topic on a real cluster, written and read by confluent-kafka: the latest value
of each key survives segment rolls, cleaning, a leader change and a broker restart (whose
fetch offset falls in a gap of the new leader's compacted log), and tombstones go once
delete.retention.ms has passed since their first clean."""
from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path
from typing import Callable

import pytest
from clients import create_topic
from cluster_state import full_isr
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from polling import wait_until

from client_helpers import produce
from odradek.cluster.local_cluster import LocalCluster
from odradek.log.log import Log, LogConfig
from odradek.protocol.records import decode_records

pytestmark = pytest.mark.integration

TOPIC = "compacted"
KEYS = 30
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01",
          "delete.retention.ms": "2000"}
# one record per batch and no producer id: whole batches become removable, so gaps appear
SINGLE_RECORD_BATCHES = {"enable.idempotence": False, "linger.ms": 0, "batch.num.messages": 1}


def write(bootstrap: str, round_: int, tombstones: frozenset[int] = frozenset(),
          skip: frozenset[int] = frozenset()) -> dict[bytes, bytes | None]:
    records = [(b"k%d" % k, None if k in tombstones else b"round-%d-key-%d" % (round_, k), None)
               for k in range(KEYS) if k not in skip]
    produce(bootstrap, TOPIC, records, **SINGLE_RECORD_BATCHES)  # type: ignore[arg-type]
    return {key: value for key, value, _ in records}


def read(bootstrap: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from the log start to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        out: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append((msg.offset(), msg.key(), msg.value()))
        assert out and out[-1][0] == high - 1, "the consumer did not reach the high watermark"
        return out
    finally:
        consumer.close()


def latest(records: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    return {key: value for _, key, value in records}


def leader_of(bootstrap: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    return md.topics[TOPIC].partitions[0].leader


def replica_latest(c: LocalCluster, broker_id: int, scratch: Path) -> dict[bytes, bytes | None]:
    """The latest value per key in one broker's own replica (a copy of its files, opened)."""
    copy = scratch / f"replica-{broker_id}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(c.broker_dir(broker_id) / "data" / f"{TOPIC}-0", copy)
    log = Log.open(copy, LogConfig())
    out: dict[bytes, bytes | None] = {}
    for header in log.iter_batch_headers():
        data = log.read(header.base_offset, 1)[:header.size]
        out.update((key, value) for _, _, key, value, _ in decode_records(data))
    log.close()
    return out


def test_compacted_topic_through_cleaning_leader_change_restart_and_tombstone_expiry(
        cluster_factory: Callable[..., LocalCluster], tmp_path: Path) -> None:
    c = cluster_factory(3, log_cleaner_backoff_ms=200)
    bootstrap = c.bootstrap_servers
    create_topic(bootstrap, TOPIC, 1, 3, CONFIG)
    expected: dict[bytes, bytes | None] = {}
    for round_ in range(6):
        expected.update(write(bootstrap, round_))
    written = 6 * KEYS
    wait_until(lambda: len(read(bootstrap)) < written - KEYS, 30, "the leader's cleaner")
    assert latest(read(bootstrap)) == expected

    # a leader change and a restart: the old leader stops (controlled shutdown), the new one
    # takes writes and cleans them, then the old one comes back behind a compacted gap
    old_leader = leader_of(bootstrap)
    c.kill_broker(old_leader, signal.SIGTERM)
    wait_until(lambda: leader_of(bootstrap) not in (-1, old_leader), 30, "a new leader")
    for round_ in range(6, 8):
        expected.update(write(bootstrap, round_))
    tombstoned_at = time.monotonic()
    expected.update(write(bootstrap, 8, tombstones=frozenset({3, 4})))
    wait_until(lambda: len(read(bootstrap)) < 2 * KEYS + 6, 30, "the new leader's cleaner")
    c.start_broker(old_leader)
    wait_until(lambda: full_isr(c, TOPIC, 3), 30, "the restarted broker back in the ISR")
    records = read(bootstrap)
    assert latest(records) == expected  # tombstones still there: read as keys with no value
    assert [o for o, _, _ in records] == sorted({o for o, _, _ in records})
    values = {k: v for k, v in expected.items() if v is not None}
    for broker_id in c.broker_ids:  # each replica cleans on its own: a tombstone may be gone
        replica = replica_latest(c, broker_id, tmp_path)
        assert {k: v for k, v in replica.items() if v is not None} == values, broker_id

    # tombstones go at the first clean past their delete horizon (first clean + 2 s); later
    # rounds leave k3 and k4 alone and keep the log dirty so that cleans go on
    del expected[b"k3"], expected[b"k4"]

    def tombstones_gone() -> bool:
        expected.update(write(bootstrap, round_, skip=frozenset({3, 4})))
        time.sleep(0.5)
        return not {b"k3", b"k4"} & latest(read(bootstrap)).keys()

    for round_ in range(9, 60):
        if tombstones_gone():
            break
    assert time.monotonic() - tombstoned_at >= 2.0, "a tombstone went before delete.retention.ms"
    assert latest(read(bootstrap)) == expected
