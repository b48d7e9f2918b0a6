"""The fault runs' reports as one Markdown table, a column a seed."""
from __future__ import annotations

from odradek.faults.report import table


def test_one_column_a_seed_with_every_kind_and_anomaly() -> None:
    reports = [{"seed": 2, "faults": {"kill": 2}, "faults_total": 2, "writes_acknowledged": 1500,
                "duration_s": 9.6, "anomalies": {"lost": 0, "duplicates": 1}},
               {"seed": 1, "faults": {"pause": 1}, "faults_total": 1, "writes_acknowledged": 20,
                "duration_s": 3.0, "anomalies": {"lost": 0, "duplicates": 0},
                "machine_stalls": ["the run's process did not run for 55 s from 11:17:54"]}]
    lines = table(reports).splitlines()
    assert lines[0] == "| seed | 1 | 2 |"
    assert "| &nbsp;&nbsp;kill | 0 | 2 |" in lines and "| &nbsp;&nbsp;pause | 1 | 0 |" in lines
    assert "| writes acknowledged | 20 | 1,500 |" in lines
    assert "| machine stalls over 5 s (not anomalies) | 1 | 0 |" in lines   # (a report from before has none)
    assert lines[-1] == "| duplicates | 0 | 1 |"


def test_runs_of_older_code_show_a_dash_for_rows_they_lack() -> None:
    """Seeds run on different days: an older run without the producer profiles or a newer
    anomaly row still makes a table, the missing anomaly a dash rather than a false 0."""
    reports = [{"seed": 1, "faults": {}, "faults_total": 0, "writes_acknowledged": 30, "duration_s": 1.0,
                "anomalies": {"lost": 0}},
               {"seed": 2, "faults": {}, "faults_total": 0, "writes_acknowledged": 30, "duration_s": 1.0,
                "writes_acknowledged_by_profile": {"aiokafka": 10, "kafka-python": 20},
                "anomalies": {"lost": 0, "librdkafka_4953_duplicates": 2}}]
    lines = table(reports).splitlines()
    assert "| &nbsp;&nbsp;by aiokafka | 0 | 10 |" in lines and "| &nbsp;&nbsp;by kafka-python | 0 | 20 |" in lines
    assert lines[-2:] == ["| lost | 0 | 0 |", "| librdkafka 4953 duplicates | - | 2 |"]
