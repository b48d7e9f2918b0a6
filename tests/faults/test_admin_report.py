"""The admin workload's reports in the Markdown table: each kind of operation by its outcome,
the controller kills and the scratch topics' re-creations are rows of their own, after the
writes."""
from __future__ import annotations

from odradek.faults.report import table


def test_admin_reports_show_operations_by_outcome() -> None:
    report = {"workload": "admin", "seed": 2, "faults": {"reassign-partitions": 3}, "faults_total": 3,
              "writes_acknowledged": 26346, "duration_s": 140.5, "controller_kills": 2,
              "operations": {"reassign-partitions": {"completed": 2, "completed_late": 1},
                             "create-partitions": {"refused": 1, "not_settled": 1}},
              "refusals": {"NOT_CONTROLLER": 2, "INVALID_PARTITIONS": 1},
              "scratch": {"incarnations": {"scratch-0": 2, "scratch-1": 1}},
              "anomalies": {"lost": 0, "zookeeper_leftovers": 1}}
    lines = table([report]).splitlines()
    assert "| reassign-partitions: completed / refused / other | 3 / 0 / 0 |" in lines
    assert "| create-partitions: completed / refused / other | 0 / 1 / 1 |" in lines
    assert "| controller kills in operations | 2 |" in lines and "| refusals (not anomalies) | 3 |" in lines
    assert "| scratch topics re-created | 3 |" in lines
    assert lines.index("| writes acknowledged | 26,346 |") < lines.index("| controller kills in operations | 2 |")
    assert lines[-1] == "| zookeeper leftovers | 1 |"
