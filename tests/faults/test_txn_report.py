"""The transactional workload's reports in the Markdown table: the transactions' outcomes, the
readers' deliveries and the errors the producers handled are rows of their own."""
from __future__ import annotations

from odradek.faults.report import table
from odradek.faults.txn_run import librdkafka_5476


def test_transactional_reports_show_outcomes_and_deliveries() -> None:
    report = {"workload": "transactions", "seed": 1, "faults": {"kill-transaction-coordinator": 2},
              "faults_total": 2, "writes_acknowledged": 1500, "duration_s": 9.6,
              "transactions": {"transactions": 300, "committed": 220, "aborted": 78, "unknown": 2},
              "records": {"records_committed": 1210, "aborted_records_seen_by_control": 400},
              "abortable_errors": 3, "retriable_errors": {"commit_transaction": 4, "abort_transaction": 1},
              "anomalies": {"aborted_read": 0, "lost_write": 1}}
    lines = table([report]).splitlines()
    assert "| transactions | 300 |" in lines and "| transactions committed | 220 |" in lines
    assert "| records committed | 1,210 |" in lines and "| aborted records seen by control | 400 |" in lines
    assert "| retriable errors (not anomalies) | 5 |" in lines
    assert lines.index("| writes acknowledged | 1,500 |") < lines.index("| transactions | 300 |")
    assert lines[-1] == "| lost write | 1 |"


def test_librdkafka_5476_is_told_by_both_sides_of_its_lock_inversion() -> None:
    main = ("#7  rd_kafka_toppar_handle_OffsetForLeaderEpoch ()\n#5  rd_kafka_metadata_refresh_topics ()\n")
    for ender in ("#5  rd_kafka_toppar_forget_leader ()", "#5  rd_kafka_toppar_undelegate ()"):
        assert librdkafka_5476(main + f"{ender}\n#6  rd_kafka_broker_fail ()\n")
    assert not librdkafka_5476(main)   # no broker thread ending its broker: another hang
    assert not librdkafka_5476("#5  rd_kafka_toppar_undelegate ()\n#6  rd_kafka_broker_fail ()\n")
