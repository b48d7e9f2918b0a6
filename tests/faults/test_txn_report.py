"""The transactional workload's reports in the Markdown table: the transactions' outcomes, the
readers' deliveries and the errors the producers handled are rows of their own."""
from __future__ import annotations

from datetime import datetime

from odradek.faults.librdkafka_bugs import librdkafka_5476, send_offsets_stalls, sequences_reused_after_abort
from odradek.faults.report import table


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


def test_a_send_offsets_stall_is_a_call_whose_txn_offset_commit_is_not_answered_in_time() -> None:
    """Two copiers' runs: in seed 4 AddOffsetsToTxn was answered at 04:45:03 and its
    TxnOffsetCommit sent 138 s later (librdkafka #5511); in seed 1 the TxnOffsetCommit was sent,
    its connection broke and it was never sent again (#5456). An ordinary call has its answer
    within milliseconds."""
    c = "[faults-txn-copier#producer-12]"

    def line(t: str, text: str) -> str:
        return f"2026-11-28 {t} txn-copier-log X {c} [thrd:main]: {text}\n"
    ordinary = [line("04:44:56,376", "Transactional API called: send_offsets_to_transaction (in txn state ...)"),
                line("04:44:56,379", "AddOffsetsToTxn response from TxnCoordinator/3: NO_ERROR ()"),
                line("04:44:56,379", "127.0.3.1:9092/3: Sent TxnOffsetCommitRequest (v3, 221 bytes @ 0, CorrId 101)"),
                line("04:44:56,380", "127.0.3.1:9092/3: Received TxnOffsetCommitResponse (v3, 46 bytes, CorrId 101)"),
                line("04:44:56,381", "Transactional API send_offsets_to_transaction return at ...: Success")]
    late = [line("04:45:03,167", "Transactional API called: send_offsets_to_transaction (in txn state ...)"),
            line("04:45:03,192", "AddOffsetsToTxn response from TxnCoordinator/2: NO_ERROR ()"),
            "2026-11-28 04:46:00,000 other-thread X [faults-txn-producer-0#producer-4] unrelated\n",
            line("04:47:21,788", "127.0.1.1:9092/1: Sent TxnOffsetCommitRequest (v3, 221 bytes @ 0, CorrId 13)"),
            line("04:47:21,790", "127.0.1.1:9092/1: Received TxnOffsetCommitResponse (v3, 46 bytes, CorrId 13)")]
    assert send_offsets_stalls(ordinary, "faults-txn-copier#producer", 30.0) == []
    found = send_offsets_stalls(ordinary + late, "faults-txn-copier#producer", 30.0)
    assert found == ["AddOffsetsToTxn succeeded at 04:45:03, TxnOffsetCommit not answered for 139 s "
                     "(the call's timeout: 30 s)"]
    assert send_offsets_stalls(ordinary + late[:2], "faults-txn-copier#producer", 30.0) == []  # log ends at once
    lost = [line("12:47:20,860", "Transactional API called: send_offsets_to_transaction (in txn state ...)"),
            line("12:47:21,380", "AddOffsetsToTxn response from TxnCoordinator/1: NO_ERROR ()"),
            line("12:47:21,992", "127.0.2.1:9092/2: Sent TxnOffsetCommitRequest (v3, 221 bytes @ 0, CorrId 203)"),
            line("12:47:22,015", "127.0.2.1:9092/2: Disconnected: connection closed by peer"),
            line("12:51:59,313", "TxnCoordinator/1: Transaction coordinator is now down")]
    assert send_offsets_stalls(lost, "faults-txn-copier#producer", 30.0) == [
        "AddOffsetsToTxn succeeded at 12:47:21, TxnOffsetCommit never answered (278 s later)"]
    # a stalled copier may log nothing more until the run ends: the run's own clock decides
    # (a make test run on 2026-11-28 logged its last line 8 ms after AddOffsetsToTxn's answer)
    silent = lost[:3]
    assert send_offsets_stalls(silent, "faults-txn-copier#producer", 30.0) == []
    assert send_offsets_stalls(silent, "faults-txn-copier#producer", 30.0, datetime(2026, 11, 28, 12, 51, 30)) == [
        "AddOffsetsToTxn succeeded at 12:47:21, TxnOffsetCommit never answered (249 s later)"]


def test_sequences_reused_after_abort_need_the_purge_the_fatal_error_and_the_leaders_word() -> None:
    """A seed-4 run's writer 2: abort_transaction purged two queued messages of txn-faults [4]
    (written by the leader before the ISR shrank), its next batch reused sequence 576, and the
    leader, holding 576-577, expected 578."""
    c = "[faults-txn-producer-2#producer-8] [thrd:127.0.2.1:9092/2]"
    purge = (f"2026-11-28 11:47:30,737 txn-producer-2 ADVBASE {c}: txn-faults [4] advancing epoch base msgid "
             f"to 3 due to 2 message(s) in aborted transaction\n")
    fatal = (f"2026-11-28 11:47:37,030 txn-producer-2 FATAL {c}: Fatal error: Broker: Broker received an out of "
             f"order sequence number: ProduceRequest for txn-faults [4] with 1 message(s) failed due to sequence "
             f"desynchronization with broker 2 (PID{{Id:0,Epoch:0}}, base seq 576, idemp state change 239613ms "
             f"ago, last partition error NOT_ENOUGH_REPLICAS (actions Retry,MsgNotPersisted, base seq 576..577)\n")
    leader = ("2026-11-28 11:47:37,029 INFO odradek.broker.kafka_apis: txn-faults-4: rejected produce: producer 0 "
              "sent sequence 576, expected 578\n")
    found = sequences_reused_after_abort([purge, fatal], [leader])
    assert list(found) == ["faults-txn-producer-2"] and "sent sequence 576 again" in found["faults-txn-producer-2"]
    assert sequences_reused_after_abort([fatal], [leader]) == {}            # no purge before it: another cause
    assert sequences_reused_after_abort([purge, fatal], []) == {}            # the leader did not say it held them
    behind = leader.replace("expected 578", "expected 570")                 # a gap, not a reuse
    assert sequences_reused_after_abort([purge, fatal], [behind]) == {}
    other = purge.replace("txn-faults [4]", "txn-faults [3]")              # another partition's purge
    assert sequences_reused_after_abort([other, fatal], [leader]) == {}
