"""ControllerEventManager: ordered processing on one thread, preemption, error isolation."""
from __future__ import annotations

import json
import io
import threading

from odradek.controller.event_manager import ControllerEventManager
from odradek.controller.events import (
    BrokerChange,
    ControlledShutdown,
    EventPreemptedError,
    Expire,
    TopicChange,
)
from odradek.controller.state_change_log import StateChangeLog
from odradek.metadata import LeaderAndIsr
from test_controller_fakes import tp


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
    log.leader_election(1, 7, tp("t", 3), "OfflinePartitionLeaderSelector",
                        LeaderAndIsr(2, 4, (2, 3), 7, 1))
    log.flush()
    [line] = sink.getvalue().splitlines()
    assert json.loads(line) == {
        "kind": "election", "controller_id": 1, "controller_epoch": 7, "topic": "t",
        "partition": 3, "from": None, "to": None, "leader": 2, "isr": [2, 3],
        "leader_epoch": 4, "strategy": "OfflinePartitionLeaderSelector"}
