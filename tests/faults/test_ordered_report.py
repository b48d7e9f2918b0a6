"""The ordered workload's reports in the Markdown table: its topic changes, member kills and
the group's deliveries are rows of their own, after the writes."""
from __future__ import annotations

from odradek.faults.report import table


def test_ordered_reports_show_topic_changes_and_deliveries() -> None:
    report = {"workload": "ordered", "seed": 1, "faults": {"expand-topic": 2}, "faults_total": 2,
              "writes_acknowledged": 1500, "duration_s": 9.6, "deliveries": 1700, "redeliveries": 200,
              "member_poll_errors": 0,
              "topic_changes": {"expanded": 2, "shrunk": 0, "member_kills": 1},
              "anomalies": {"lost": 0, "reordered": 3}}
    lines = table([report]).splitlines()
    assert "| topic: expanded | 2 |" in lines and "| member kills | 1 |" in lines
    assert "| deliveries to the group | 1,700 |" in lines
    assert lines.index("| writes acknowledged | 1,500 |") < lines.index("| topic: expanded | 2 |")
    assert lines[-1] == "| reordered | 3 |"
