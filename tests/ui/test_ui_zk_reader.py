"""The dashboard's ZooKeeper reads against a real ZooKeeper (odradek/ui/poller.py ZkReader): a
poll reads each partition state znode once and then only those whose data watch fired, while a
broker's registration going away still shows its partitions offline at the next poll."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from odradek.admin.zookeeper import connect_zk
from odradek.common.metadata import BrokerInfo, LeaderAndIsr, TopicAssignment, TopicPartition
from odradek.ui import model
from odradek.ui.poller import ZkReader
from odradek.zk import paths

PARTITIONS = 40


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:
    server, _, chroot = zk_connect.partition("/")
    root = connect_zk(server, 10.0)
    root.ensure_path("/" + chroot)
    root.stop()
    root.close()
    client = connect_zk(zk_connect, 10.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _state(leader: int, epoch: int = 0) -> bytes:
    return paths.encode_leader_and_isr(LeaderAndIsr(leader, epoch, (1, 2), 1))


def _rows(state: dict) -> dict[int, dict]:
    return {p["partition"]: p for p in state["topics"][0]["partitions"]}


def test_poll_reads_only_changed_state_znodes(zk: KazooClient) -> None:
    for b in (1, 2):
        zk.create(paths.broker_path(b), paths.encode_broker_info(BrokerInfo(b, "h", 9000 + b), 0,
                                                                 f"http://h:{9100 + b}/metrics"),
                  ephemeral=True, makepath=True)
    zk.create(paths.CONTROLLER, paths.encode_controller(1, 0), makepath=True)
    assignment = TopicAssignment("t", paths.new_topic_id(), {p: (1 + p % 2, 2 - p % 2) for p in range(PARTITIONS)})
    zk.create(paths.topic_path("t"), paths.encode_topic_assignment(assignment), makepath=True)
    for p in range(PARTITIONS):
        zk.create(paths.partition_state_path(TopicPartition("t", p)), _state(1 + p % 2), makepath=True)

    reader = ZkReader(zk)
    first = model.cluster_state(reader.read(5.0))
    assert reader.states.reads == PARTITIONS and first["summary"]["offline"] == 0
    assert {b["id"]: b["metrics_url"] for b in first["brokers"]} == {1: "http://h:9101/metrics",
                                                                     2: "http://h:9102/metrics"}
    requests = reader.requests
    model.cluster_state(reader.read(5.0))
    assert reader.states.reads == PARTITIONS and reader.topics.reads == 1  # nothing changed, nothing re-read
    assert reader.requests - requests < 10  # brokers, controller, children: not one per partition

    zk.set(paths.partition_state_path(TopicPartition("t", 3)), _state(1, epoch=1))
    deadline = time.monotonic() + 10  # the watch's notification is delivered on kazoo's thread
    while (changed := _rows(model.cluster_state(reader.read(5.0))))[3]["leader_epoch"] == 0:
        assert time.monotonic() < deadline, "the changed state znode was never read again"
        time.sleep(0.05)
    assert reader.states.reads == PARTITIONS + 1
    assert (changed[3]["leader"], changed[3]["leader_epoch"]) == (1, 1)

    zk.delete(paths.broker_path(2))  # broker 2's session ended: what it leads is offline at once
    rows = _rows(model.cluster_state(reader.read(5.0)))
    assert reader.states.reads == PARTITIONS + 1
    assert {p for p, r in rows.items() if r["status"] == model.OFFLINE} == {p for p in range(PARTITIONS) if p % 2} - {3}

    zk.delete(paths.topic_path("t"), recursive=True)  # the topic is gone: so are its cached states
    assert model.cluster_state(reader.read(5.0))["topics"] == []
