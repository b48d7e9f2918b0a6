"""ControllerElector (Kafka's ZookeeperLeaderElector) against a real ZooKeeper."""
from __future__ import annotations

import queue

import pytest
from zk_helpers import expire_session, wait_until

from odradek.controller.election import ControllerElector
from odradek.zk.client import KafkaZkClient

pytestmark = pytest.mark.integration


class _Broker:
    """A broker's client plus an elector whose callbacks only enqueue, as they must."""

    def __init__(self, connect: str, broker_id: int) -> None:
        self.zk = KafkaZkClient(connect, session_timeout_s=2.0)
        self.zk.start()
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.elector = ControllerElector(
            self.zk, broker_id, lambda e, v: self.events.put(("become", e)), lambda: self.events.put(("resign",))
        )
        self.elector.start()

    def next_event(self) -> tuple:
        return self.events.get(timeout=20)

    def close(self) -> None:
        self.elector.stop()
        self.zk.close()


def test_one_controller_then_failover_on_close(zk_connect: str) -> None:
    first = _Broker(zk_connect, 1)
    assert first.next_event() == ("become", 1)
    second = _Broker(zk_connect, 2)
    try:
        first.close()
        assert first.next_event() == ("resign",)
        assert second.next_event() == ("become", 2)
        assert second.zk.get_controller_epoch()[0] == 2
    finally:
        second.close()


def test_expired_session_resigns_and_reelects(zk_connect: str) -> None:
    broker = _Broker(zk_connect, 1)
    try:
        assert broker.next_event() == ("become", 1)
        expire_session(broker.zk)
        assert broker.next_event() == ("resign",)
        assert broker.next_event() == ("become", 2)  # new session, same broker, next epoch
        wait_until(lambda: broker.elector.is_controller)
    finally:
        broker.close()
    assert broker.next_event() == ("resign",)
