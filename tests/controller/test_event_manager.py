"""ControllerEventManager: ordered processing on one thread, preemption, error isolation."""
from __future__ import annotations

import io
import json
import threading
import time

from controller_fakes import FakeChannel, FakeZk, tp

from odradek.common.metadata import LeaderAndIsr
from odradek.controller.controller import Controller
from odradek.controller.event_manager import ControllerEventManager
from odradek.controller.events import (
    BrokerChange,
    ControlledShutdown,
    EventPreemptedError,
    Expire,
    Startup,
    TopicChange,
)
from odradek.controller.state_change_log import StateChangeLog


def test_events_are_processed_in_order_and_errors_are_not_fatal() -> None:
    seen: list[object] = []

    def process(event: object) -> None:
        seen.append(event)
        if isinstance(event, BrokerChange):
            raise RuntimeError("boom")

    manager = ControllerEventManager(process)
    manager.start()
    manager.put(BrokerChange())
    manager.put(TopicChange())
    manager.close(timeout=5)
    assert seen == [BrokerChange(), TopicChange()]


def test_clear_and_put_preempts_waiting_events() -> None:
    gate = threading.Event()
    seen: list[object] = []

    def process(event: object) -> None:
        gate.wait(5)
        seen.append(event)

    answers: list[object] = []
    manager = ControllerEventManager(process)
    manager.put(BrokerChange())
    manager.put(ControlledShutdown(1, 1, answers.append))
    manager.clear_and_put(Expire())
    assert isinstance(answers[0], EventPreemptedError)
    manager.start()
    gate.set()
    manager.close(timeout=5)
    assert seen == [Expire()]


def test_state_change_log_writes_one_json_line_per_record() -> None:
    sink = io.StringIO()
    log = StateChangeLog(sink)
    log.elections(1, 7, "OfflinePartitionLeaderSelector", [tp("t", 3), tp("u", 0)],
                  ["OfflinePartition", "NewPartition"],
                  [LeaderAndIsr(2, 4, (2, 3), 7, 1), LeaderAndIsr(3, 1, (3,), 7, 5)])
    log.partition_transitions(1, 7, [tp("t", 4)], ["OnlinePartition"], "OfflinePartition")
    assert log.pending == 5
    log.flush()
    records = [json.loads(line) for line in sink.getvalue().splitlines()]
    for record in records:
        assert abs(record.pop("time_ms") - time.time() * 1000) < 60_000
    common = {"controller_id": 1, "controller_epoch": 7}
    assert records == [
        {**common, "kind": "election", "topic": "t", "partition": 3, "from": None, "to": None,
         "leader": 2, "isr": [2, 3], "leader_epoch": 4,
         "strategy": "OfflinePartitionLeaderSelector"},
        {**common, "kind": "partition", "topic": "t", "partition": 3, "from": "OfflinePartition",
         "to": "OnlinePartition", "leader": 2, "isr": [2, 3], "leader_epoch": 4},
        {**common, "kind": "election", "topic": "u", "partition": 0, "from": None, "to": None,
         "leader": 3, "isr": [3], "leader_epoch": 1, "strategy": "OfflinePartitionLeaderSelector"},
        {**common, "kind": "partition", "topic": "u", "partition": 0, "from": "NewPartition",
         "to": "OnlinePartition", "leader": 3, "isr": [3], "leader_epoch": 1},
        {**common, "kind": "partition", "topic": "t", "partition": 4, "from": "OnlinePartition",
         "to": "OfflinePartition", "leader": None, "isr": None, "leader_epoch": None},
    ]


def test_idle_work_runs_once_the_queue_stays_empty_and_before_the_thread_stops() -> None:
    seen: list[str] = []
    idle = threading.Event()

    def on_idle() -> None:
        seen.append("idle")
        idle.set()

    manager = ControllerEventManager(lambda event: seen.append(type(event).__name__),
                                     on_idle=on_idle, idle_s=0.05)
    manager.start()
    manager.put(BrokerChange())
    manager.put(TopicChange())
    assert idle.wait(5)
    time.sleep(0.2)  # no event since: no second idle run
    assert seen == ["BrokerChange", "TopicChange", "idle"]
    manager.put(BrokerChange())
    manager.close(timeout=5)
    assert seen[3:] == ["BrokerChange", "idle"]


def test_a_controller_that_defers_its_state_change_log_writes_it_when_asked() -> None:
    zk = FakeZk()
    for b in (1, 2):
        zk.register_broker(b)
    zk.create_topic("t", {0: (1, 2)})
    sink = io.StringIO()
    controller = Controller(1, zk, FakeChannel(), StateChangeLog(sink),
                            defer_state_change_flush=True)
    controller.process(Startup(epoch=1, epoch_zk_version=0))
    assert sink.getvalue() == ""  # decided and sent, not yet written
    controller.flush_state_change_log()
    kinds = {json.loads(line)["kind"] for line in sink.getvalue().splitlines()}
    assert {"partition", "replica"} <= kinds
