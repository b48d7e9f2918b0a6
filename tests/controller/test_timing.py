"""EventTimer: the per-event timing line the failover benchmark reads."""
from __future__ import annotations

from typing import Any

from odradek.controller.timing import EventTimer, TimedZk
from odradek.protocol.controller_api import ControllerResponse


def test_the_record_is_emitted_once_when_the_last_response_arrives() -> None:
    emitted: list[dict[str, Any]] = []
    timer = EventTimer("BrokerChange", 1, 7, fired=100.0, sink=emitted.append)
    lai = timer.track(is_lai=True, partitions=3)
    um = timer.track(is_lai=False)
    timer.mark("zk_done")
    timer.seal()
    assert emitted == []  # two requests still out
    lai(ControllerResponse(0, {}))
    assert emitted == []
    um(ConnectionError("gone"))
    assert len(emitted) == 1
    record = emitted[0]
    assert record["event"] == "BrokerChange" and record["fired"] == 100.0
    assert record["requests"] == 2 and record["lai_partitions"] == 3 and record["errors"] == 1
    assert record["dequeued"] <= record["zk_done"] <= record["sent"] <= record["lai_acked"] \
        <= record["acked"]
    assert record["event_cpu_s"] >= 0 and record["process_cpu_s"] >= 0


def test_an_event_that_sent_nothing_is_emitted_when_sealed() -> None:
    emitted: list[dict[str, Any]] = []
    timer = EventTimer("TopicChange", 1, 7, sink=emitted.append)
    timer.seal()
    assert len(emitted) == 1 and "lai_acked" not in emitted[0]


def test_timed_zk_counts_reads_and_writes_of_the_current_event() -> None:
    class Zk:
        def get_partition_states(self, tps: list[int]) -> dict[int, int]:
            return {tp: 0 for tp in tps}

        def update_leader_and_isr(self, states: dict[int, int]) -> dict[int, int]:
            return states

        version = 3

    timer = EventTimer("Startup", 1, 7, sink=lambda r: None)
    zk = TimedZk(Zk(), lambda: timer)
    zk.get_partition_states([1, 2, 3])
    zk.update_leader_and_isr({1: 0})
    assert zk.version == 3
    assert (timer.record["zk_reads"], timer.record["zk_read_items"]) == (1, 3)
    assert (timer.record["zk_writes"], timer.record["zk_write_items"]) == (1, 1)
