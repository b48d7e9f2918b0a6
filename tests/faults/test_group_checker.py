"""The groups workload's checker (faults/group_checker.py) alone, on histories written by hand:
each anomaly it must find, and the ordinary histories of a rebalance it must accept."""
from __future__ import annotations

from pathlib import Path

from odradek.faults.group_checker import (
    Commit,
    GroupHistory,
    judge_group,
    read_history,
    rebalance_stats,
    stale_readings,
)

LOG = {0: [(0, b"0:a:1"), (1, b"0:a:2"), (2, b"0:a:3")], 1: [(0, b"1:b:1"), (1, b"1:b:2")]}
ACKED = [b"0:a:1", b"0:a:2", b"0:a:3", b"1:b:1", b"1:b:2"]


def _history(deliveries: list[tuple[int, int, int]], commits: list[Commit]) -> GroupHistory:
    """deliveries: (ns, partition, offset), the value taken from LOG."""
    at = {(p, o): v.decode() for p, entries in LOG.items() for o, v in entries}
    return GroupHistory(deliveries=sorted((ns, p, o, at[(p, o)]) for ns, p, o in deliveries), commits=commits)


def _every_record_by(ns: int) -> list[tuple[int, int, int]]:
    return [(ns, p, o) for p, entries in LOG.items() for o, _ in entries]


def test_a_rebalance_with_redeliveries_and_rising_commits_is_clean() -> None:
    deliveries = _every_record_by(10) + [(40, 0, 1), (41, 0, 2)]   # redelivered after a rebalance
    commits = [Commit(20, 25, {0: 2, 1: 2}, "m-0"), Commit(50, 55, {0: 3}, "m-1")]
    observed = [Commit(30, 35, {0: 2, 1: 2}, "observed"), Commit(60, 65, {0: 3, 1: 2}, "observed")]
    history = _history(deliveries, commits)
    anomalies = judge_group("g", history, LOG, ACKED)
    assert anomalies == {k: [] for k in anomalies}
    assert stale_readings("g", history, observed) == []


def test_a_value_never_delivered_is_found() -> None:
    deliveries = [d for d in _every_record_by(10) if d[1:] != (1, 1)]
    anomalies = judge_group("g", _history(deliveries, []), LOG, ACKED)
    assert anomalies["not_delivered"] == ["g: 1:b:2 never delivered"]


def test_a_commit_past_a_record_not_yet_delivered_is_found() -> None:
    # offset 1 of partition 0 handed over only after the commit of 3 was sent
    deliveries = [(10, 0, 0), (11, 0, 2), (30, 0, 1)]
    anomalies = judge_group("g", _history(deliveries, [Commit(20, 21, {0: 3}, "m-0")]), LOG, [])
    assert anomalies["commit_passed_undelivered"] == ["g: m-0 committed 0:3, but 0:1 was delivered later"]
    skipped = judge_group("g", _history([(10, 0, 0), (11, 0, 2)], [Commit(20, 21, {0: 3}, "m-0")]), LOG, [])
    assert skipped["commit_passed_undelivered"] == ["g: m-0 committed 0:3, but 0:1 was never delivered"]


def test_a_commit_up_to_what_was_delivered_passes_nothing() -> None:
    deliveries = [(10, 0, 0), (11, 0, 1)]
    anomalies = judge_group("g", _history(deliveries, [Commit(20, 21, {0: 2}, "m-0")]), LOG, [])
    assert anomalies["commit_passed_undelivered"] == []


def test_a_commit_lower_than_one_answered_before_it_was_sent_is_found() -> None:
    commits = [Commit(20, 25, {0: 3}, "m-0"), Commit(30, 35, {0: 1}, "m-1")]
    anomalies = judge_group("g", _history(_every_record_by(10), commits), LOG, [])
    assert anomalies["committed_backwards"] == ["g: partition 0 at 3 (m-0), then 1 (m-1)"]


def test_commits_that_overlap_may_be_answered_in_either_order() -> None:
    commits = [Commit(20, 25, {0: 3}, "m-0"), Commit(22, 24, {0: 1}, "m-1")]
    anomalies = judge_group("g", _history(_every_record_by(10), commits), LOG, [])
    assert anomalies["committed_backwards"] == []


def test_a_member_beginning_below_an_answered_commit_is_found(tmp_path: Path) -> None:
    (tmp_path / "m0.txt").write_text("A 10 0\nD 11 0 0 0:a:1\nD 12 0 1 0:a:2\nC 13 14 0:2\nV 20 0\n")
    # m-1 is assigned partition 0 after the commit of 2 was answered, yet begins at offset 0
    (tmp_path / "m1.txt").write_text("A 21 0\nD 22 0 0 0:a:1\nD 23 0 1 0:a:2\nD 24 0 2 0:a:3\n")
    history = read_history({"m-0": tmp_path / "m0.txt", "m-1": tmp_path / "m1.txt"})
    assert [(m, p, o) for _, m, p, o in history.starts] == [("m-0", 0, 0), ("m-1", 0, 0)]
    assert judge_group("g", history, LOG, [])["committed_backwards"] == [
        "g: partition 0 at 2 (m-0), then 0 (m-1 starting)"]


def test_a_reading_lower_than_an_answered_commit_is_counted_as_stale_not_judged() -> None:
    history = _history(_every_record_by(10), [Commit(20, 25, {0: 3}, "m-0")])
    assert judge_group("g", history, LOG, [])["committed_backwards"] == []
    # asked after the commit of 3 was answered: a deposed coordinator's answer
    assert stale_readings("g", history, [Commit(30, 35, {0: 1}, "observed")]) == [
        "g: partition 0 at 3 (m-0), then 1 (observed)"]
    # overlapping the commit: either answer is right
    assert stale_readings("g", history, [Commit(22, 24, {0: 1}, "observed")]) == []


def test_a_record_handed_over_that_is_not_the_logs_is_found() -> None:
    history = GroupHistory(deliveries=[(10, 0, 0, "0:a:9")])
    assert judge_group("g", history, LOG, [])["delivered_wrong_value"] == [
        "g: 0:0 delivered 0:a:9, the log has 0:a:1"]


def test_member_files_are_read_with_a_line_cut_by_kill_9_skipped(tmp_path: Path) -> None:
    member = tmp_path / "m.txt"
    # kafka-python and aiokafka revoke nothing before their first join: not a revocation
    member.write_text("V 90 \nA 100 0,1\nD 110 0 0 0:a:1\nC 120 130 0:1\nV 200 0,1\nF 210 CommitFailedError: gone\n"
                      "L 220 1\nA 300 0\nE 310 Broker: oops\nP 320 PROTOERR x\nD 330 0 1\nC 340\n"
                      "R 350 KafkaConnectionError: refused\n")
    history = read_history({"m-0": member, "m-1": tmp_path / "absent.txt"})
    assert history.deliveries == [(110, 0, 0, "0:a:1")]
    assert [(c.sent_ns, c.done_ns, c.offsets) for c in history.commits] == [(120, 130, {0: 1})]
    assert history.commit_failures == ["m-0: CommitFailedError: gone"]
    assert history.errors == ["m-0: Broker: oops"] and history.protocol_errors == ["m-0: PROTOERR x"]
    assert history.retriable_errors == ["m-0: KafkaConnectionError: refused"]
    assert rebalance_stats(history) == {"assignments": 2, "revocations": 1, "revoked_to_assigned_p50_s": 0.0,
                                        "revoked_to_assigned_max_s": 0.0}
    assert history.rebalance_events["m-1"] == []
