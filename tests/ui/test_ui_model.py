"""The dashboard's state model from znode bytes alone: what the grid, the broker list and the
progress bars show (odradek/ui/model.py)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from odradek.admin.reassign_partitions_command import Ongoing
from odradek.common.metadata import BrokerInfo, LeaderAndIsr, TopicAssignment
from odradek.ui import model
from odradek.zk import paths


def _view(states: dict[int, LeaderAndIsr | None], live: tuple[int, ...] = (1, 2, 3), controller: int = 1,
          adding: dict[int, tuple[int, ...]] | None = None, deleting: tuple[str, ...] = ()) -> model.ZkView:
    assignment = TopicAssignment("t", paths.new_topic_id(), {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2), 3: (1, 2, 3, 4)},
                                 adding_replicas=adding or {})
    return model.ZkView(
        controller=paths.encode_controller(controller, 0), controller_epoch=paths.encode_controller_epoch(7),
        brokers={b: paths.encode_broker_info(BrokerInfo(b, "h", 9000 + b, 0), 0) for b in live},
        topics={"t": paths.encode_topic_assignment(assignment)},
        states={("t", p): None if s is None else paths.encode_leader_and_isr(s) for p, s in states.items()},
        deleting=deleting)


def _rows(state: dict) -> dict[int, dict]:
    return {p["partition"]: p for p in state["topics"][0]["partitions"]}


def test_dead_leader_makes_offline_and_short_isr_under_replicated() -> None:
    state = model.cluster_state(_view({
        0: LeaderAndIsr(1, 0, (1, 2, 3), 1),   # healthy
        1: LeaderAndIsr(2, 3, (2, 3), 1),      # ISR short of the replicas
        2: LeaderAndIsr(4, 1, (4,), 1),        # led by a broker that is not registered
        3: None,                               # no state znode yet
    }), expected_brokers=(1, 2, 3, 5))
    rows = _rows(state)
    assert [rows[p]["status"] for p in range(4)] == [model.OK, model.UNDER_REPLICATED, model.OFFLINE, model.OFFLINE]
    assert rows[1]["leader"] == 2 and rows[1]["isr"] == [2, 3] and rows[1]["leader_epoch"] == 3
    assert rows[3]["leader"] == -1 and rows[3]["isr"] == []
    brokers = {b["id"]: b for b in state["brokers"]}
    # 4 is named by an assignment, 5 by cluster.json: both dead; 1 is the controller
    assert {b: v["live"] for b, v in brokers.items()} == {1: True, 2: True, 3: True, 4: False, 5: False}
    assert brokers[1]["controller"] and not brokers[2]["controller"]
    assert brokers[1]["leaders"] == 1 and brokers[2]["leaders"] == 1 and brokers[4]["leaders"] == 0
    assert (state["controller"], state["controller_epoch"]) == (1, 7)
    assert state["summary"] == {"brokers": 5, "live_brokers": 3, "topics": 1, "partitions": 4, "offline": 2,
                                "under_replicated": 1}


def test_replicas_being_added_do_not_make_a_partition_under_replicated() -> None:
    # KIP-455: partition 3 is moving onto broker 4; its ISR holds the three original replicas
    state = model.cluster_state(_view({p: LeaderAndIsr(1, 0, (1, 2, 3), 1) for p in range(4)},
                                      live=(1, 2, 3, 4), adding={3: (4,)}))
    rows = _rows(state)
    assert rows[3]["status"] == model.OK and rows[3]["adding"] == [4]
    assert state["topics"][0]["reassigning"]


def test_the_grid_follows_a_new_leader_after_a_broker_dies() -> None:
    before = model.cluster_state(_view({0: LeaderAndIsr(1, 0, (1, 2, 3), 1)}))
    after = model.cluster_state(_view({0: LeaderAndIsr(2, 1, (2, 3), 2)}, live=(2, 3), controller=2))
    assert _rows(before)[0]["leader"] == 1 and _rows(after)[0]["leader"] == 2
    assert _rows(after)[0]["status"] == model.UNDER_REPLICATED
    assert {b["id"]: b["live"] for b in after["brokers"]} == {1: False, 2: True, 3: True, 4: False}
    assert after["controller"] == 2


def test_garbled_znodes_are_shown_as_missing() -> None:
    view = model.ZkView(controller=b"{not json", controller_epoch=b"x", topics={"bad": b"[]"},
                        brokers={1: b"{}"})
    state = model.cluster_state(view)
    assert state["controller"] is None and state["controller_epoch"] is None and state["topics"] == []


def test_deletion_progress_counts_logs_gone_and_names_dead_brokers() -> None:
    state = model.cluster_state(_view({p: LeaderAndIsr(1, 0, (1, 2), 1) for p in range(4)}, live=(1, 2, 3),
                                      deleting=("t", "gone")))
    # 13 replicas (3 partitions x 3 + one of 4); broker 4 is dead; two logs still on live brokers
    logs = {(("t", 0), 1): 100, (("t", 1), 3): 0}
    [t, gone] = model.deletion_progress(state, logs)
    assert t == {"topic": "t", "replicas": 13, "deleted": 10, "progress": 10 / 13, "waiting_for_brokers": [4]}
    assert gone["topic"] == "gone" and gone["progress"] == 1.0


def test_reassignment_plan_is_the_replicas_less_those_being_removed() -> None:
    ongoing = {("t", 0): Ongoing(replicas=(1, 2, 3, 4), adding=(4,), removing=(1,))}
    assert model.reassignment_plan(ongoing) == {("t", 0): [2, 3, 4]}
    assert model.progress(50, 200) == 0.25 and model.progress(None, 10) is None and model.progress(0, 0) == 1.0


def test_state_change_logs_merge_newest_first_across_controllers() -> None:
    old = model.parse_state_changes(['{"kind": "partition", "time_ms": 10, "controller_epoch": 1}', "garbage",
                                     '{"kind": "election", "time_ms": 30, "controller_epoch": 1}'], 1)
    new = model.parse_state_changes(['{"kind": "partition", "time_ms": 20, "controller_epoch": 2}'], 2)
    merged = model.merge_timeline({1: old, 2: new}, limit=2)
    assert [(r["time_ms"], r["log_broker"]) for r in merged] == [(30, 1), (20, 2)]


def _scrape() -> str:
    """A scrape in the exposition format prometheus_client writes, as the brokers serve it."""
    class Collector:
        def collect(self):  # type: ignore[no-untyped-def]
            messages = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin", "", labels=["topic"])
            messages.add_metric(["a"], 100)
            messages.add_metric(["b"], 50)
            yield messages
            yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions", "", value=2)

    registry = CollectorRegistry()
    registry.register(Collector())
    requests = Counter("kafka_network_requestmetrics_requests", "", ["request"], registry=registry)
    requests.labels("Produce").inc(30)
    return generate_latest(registry).decode()


def test_metric_samples_become_rates_and_gauges() -> None:
    first = model.metric_sample(_scrape())
    assert first["messages_in"] == 150 and first["requests"] == 30 and first["under_replicated"] == 2
    second = dict(first, messages_in=250.0, requests=10.0)  # requests went down: the broker restarted
    point = model.chart_point((100.0, first), 102.0, second)
    assert point["messages_in"] == 50 and point["requests"] is None and point["under_replicated"] == 2
    assert model.chart_point(None, 100.0, first)["messages_in"] is None


def test_log_tail_takes_complete_new_lines_and_jumps_to_the_tail_when_far_behind(tmp_path) -> None:
    from odradek.broker.state_change_log_reader import read_log_chunk
    from odradek.ui.poller import TAIL_START_BYTES, LogTail

    log = tmp_path / "state-change.log"
    log.write_text("a" * 20 + "\nold\n")
    tail = LogTail()

    def read_new() -> list[str]:
        return tail.took(read_log_chunk(log, tail.offset, 8))

    assert read_new() == ["old"]  # starts inside the first line: that cut line is skipped
    with open(log, "a") as f:
        f.write("new\npart")
    assert read_new() == ["new"]
    with open(log, "a") as f:
        f.write("ial\n")
    assert read_new() == ["partial"] and read_new() == []
    log.write_text("fresh\n")  # a new, shorter log
    assert read_new() == ["fresh"]
    with open(log, "a") as f:
        f.write("x\n" * TAIL_START_BYTES)
    read_new()
    assert tail.offset is None  # far behind: the next read is the tail, not the backlog
