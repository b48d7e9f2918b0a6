"""KIP-253's whole promise under faults, on a real cluster: three OrderedProducers write 20 keys
with per-key sequence numbers continuously while the topic goes 4 -> 5 -> 8 -> 6 partitions, a
three-member OrderedConsumer group (each member its own process) reads it, and in the middle a
partition leader, the controller and one member are killed with kill -9. In the group's delivery
order (every member's deliveries merged by time) each key's records arrive in sequence: no
record of a key is delivered for the first time before all of the key's earlier records were,
and none is missing. Members redeliver after a kill (at least once); only first deliveries count.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from clients import create_topic, ordered_counts
from cluster_state import controller_id, leaders
from confluent_kafka.admin import AdminClient, NewPartitions
from polling import wait_until

from odradek.client.ordered_producer import OrderedProducer
from odradek.cluster.local_cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "faulted"
KEYS = [f"key-{i}".encode() for i in range(20)]
#: parents of new partitions (0 -> 4, 1 -> 5) and the partitions the shrink marks (6, 7): slow,
#: so the members reading their children and heirs would run ahead without the barriers
SLOW = "0,1,6,7"
MEMBER = Path(__file__).with_name("ordered_member.py")


def _counts(bootstrap: str) -> tuple[int, ...]:
    """The topic's undeleted and partition count."""
    return ordered_counts(bootstrap, TOPIC)[1:]


def _first_deliveries(files: list[Path]) -> dict[bytes, list[int]]:
    lines = []
    for path in files:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 5:  # a killed member's last line may be cut
                lines.append((int(parts[0]), parts[1].encode(), int(parts[2])))
    lines.sort()
    order: dict[bytes, dict[int, None]] = {k: {} for k in KEYS}
    for _, key, seq in lines:
        order[key].setdefault(seq, None)
    return {k: list(v) for k, v in order.items()}


def _restart(cluster: LocalCluster, broker_id: int) -> None:
    cluster.start_broker(broker_id)
    cluster.wait_ready([broker_id], 60)


def test_keys_stay_in_order_through_growth_shrink_and_kill_9s(cluster: LocalCluster, tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, TOPIC, 4, 3, {"enable.ordered.delivery": "true"})
    wait_until(lambda: _counts(bootstrap) == (4, 4), 30, "the topic's counts")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    files = [tmp_path / f"m{i}.log" for i in range(3)]
    logs = [tmp_path / f"m{i}.stderr" for i in range(3)]
    members = [subprocess.Popen([sys.executable, str(MEMBER), bootstrap, "faulted-readers", TOPIC, f"m{i}",
                                 str(files[i]), SLOW, "0.02"], env=env, stderr=logs[i].open("w"))
               for i in range(3)]
    stop = threading.Event()
    errors: list[Any] = []
    sent: dict[bytes, int] = {k: 0 for k in KEYS}

    def produce(keys: list[bytes]) -> None:
        producer = OrderedProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        try:
            while not stop.is_set():
                for key in keys:
                    producer.produce(TOPIC, str(sent[key]).encode(), key=key,
                                     on_delivery=lambda e, m: errors.append(e) if e else None)
                    sent[key] += 1
                producer.poll(0)
                time.sleep(0.1)
            left = producer.flush(120)
            if left:
                errors.append(f"{left} records never acknowledged")
        except BaseException as exc:  # the test fails on it
            errors.append(exc)

    writers = [threading.Thread(target=produce, args=(KEYS[i::3],)) for i in range(3)]
    for w in writers:
        w.start()
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def alter(total: int) -> None:
        admin.create_partitions([NewPartitions(TOPIC, total)], operation_timeout=10)[TOPIC].result(60)

    try:
        time.sleep(2)
        alter(5)
        time.sleep(2)
        victim = next(leader for p, (leader, _) in sorted(leaders(cluster, TOPIC).items())
                      if leader != controller_id(cluster))
        cluster.kill_broker(victim)  # a partition leader, not the controller
        time.sleep(1)
        _restart(cluster, victim)
        alter(8)
        time.sleep(2)
        controller = controller_id(cluster)
        cluster.kill_broker(controller)
        time.sleep(1)
        _restart(cluster, controller)
        members[2].send_signal(signal.SIGKILL)  # a group member, mid-run
        members[2].wait(10)
        time.sleep(2)
        wait_until(lambda: _counts(bootstrap) == (8, 8), 60, "the count 8 after the controller's failover")
        alter(6)
        time.sleep(3)
    finally:
        stop.set()
        for w in writers:
            w.join(150)
    total = sum(sent.values())

    def delivered() -> int:
        return sum(len(v) for v in _first_deliveries(files).values())

    try:
        try:
            wait_until(lambda: delivered() >= total, 120, f"all {total} records delivered by the group")
        except AssertionError:
            for m in members:
                if m.poll() is None:
                    m.send_signal(signal.SIGUSR1)  # every thread's stack into its log
            time.sleep(2)
            raise AssertionError(f"not all {total} records delivered; members' logs: "
                                 f"{[log.read_text()[-6000:] for log in logs]}") from None
    finally:
        for m in members:
            if m.poll() is None:
                m.send_signal(signal.SIGTERM)
        for m in members:
            try:
                m.wait(30)
            except subprocess.TimeoutExpired:
                m.kill()
    assert errors == []
    order = _first_deliveries(files)
    bad = {k.decode(): [s for i, s in enumerate(seqs) if s != i][:5] for k, seqs in order.items()
           if seqs != list(range(sent[k]))}
    assert bad == {}, f"out of order or missing (key: first late sequence numbers): {bad}"
    for member, log in zip(members[:2], logs):  # the survivors closed cleanly on SIGTERM
        assert member.returncode == 0, log.read_text()[-3000:]
