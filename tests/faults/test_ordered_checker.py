"""The ordered workload's checker on planted histories: judged in the group's delivery order
(every member's deliveries merged by time), each anomaly it must report, it does, and a
redelivery after a member's kill is counted, not reported."""
from __future__ import annotations

from pathlib import Path

from odradek.faults.checker import Delivery, judge_ordered, read_deliveries, undelivered


def _acked(*entries: tuple[str, int, int, int]) -> dict[tuple[str, int], tuple[int, int | None]]:
    return {(key, seq): (partition, offset) for key, seq, partition, offset in entries}


def test_a_key_moving_to_a_new_partition_in_order_is_clean() -> None:
    # k's 1 and 2 in partition 0, then 3 in partition 4 (an expansion moved it), delivered after
    deliveries: list[Delivery] = [(10, "k", 1, 0, 0), (20, "k", 2, 0, 1), (30, "k", 3, 4, 0)]
    anomalies, stats = judge_ordered(deliveries, _acked(("k", 1, 0, 0), ("k", 2, 0, 1), ("k", 3, 4, 0)))
    assert anomalies == {"lost": [], "inconsistent_offsets": [], "written_twice": [], "reordered": []}
    assert stats["values_delivered"] == 3 and stats["redeliveries"] == 0


def test_a_new_partitions_owner_delivering_before_the_parents_owner_is_a_reordering() -> None:
    # the member reading partition 4 delivers k's 3 before the member reading 0 delivered 2
    deliveries: list[Delivery] = [(10, "k", 1, 0, 0), (15, "k", 3, 4, 0), (20, "k", 2, 0, 1), (25, "j", 1, 1, 0)]
    anomalies, _ = judge_ordered(deliveries, _acked(("k", 1, 0, 0), ("k", 2, 0, 1), ("k", 3, 4, 0),
                                                    ("j", 1, 1, 0)))
    assert anomalies["reordered"] == ["k: 1 first delivered before an earlier one (3 before 2)"]
    assert anomalies["lost"] == anomalies["written_twice"] == []


def test_a_redelivery_after_a_kill_is_counted_and_not_an_anomaly() -> None:
    # a killed member delivered 1 and 2 without committing; the next owner delivers them again
    deliveries: list[Delivery] = [(10, "k", 1, 0, 0), (20, "k", 2, 0, 1), (30, "k", 1, 0, 0), (40, "k", 2, 0, 1),
                                  (50, "k", 3, 0, 2)]
    anomalies, stats = judge_ordered(deliveries, _acked(("k", 1, 0, 0), ("k", 2, 0, 1), ("k", 3, 0, 2)))
    assert all(v == [] for v in anomalies.values())
    assert stats["redeliveries"] == 2


def test_lost_written_twice_and_misplaced_values_are_reported() -> None:
    deliveries: list[Delivery] = [(10, "k", 1, 0, 0), (20, "k", 2, 0, 1), (30, "k", 2, 0, 5), (40, "k", 3, 1, 0)]
    anomalies, _ = judge_ordered(deliveries, _acked(("k", 1, 0, 0), ("k", 2, 0, 1), ("k", 3, 0, 2),
                                                    ("k", 4, 0, 3)))
    assert anomalies["lost"] == ["k:4 acknowledged at (0, 3)"]
    assert anomalies["written_twice"] == ["k:2 delivered from [(0, 1), (0, 5)], acknowledged at (0, 1)"]
    assert len(anomalies["inconsistent_offsets"]) == 1   # k:3 acknowledged at (0, 2), delivered from (1, 0)
    # a value never acknowledged (its producer stopped first) is no gap; one acknowledged is
    assert anomalies["reordered"] == []


def test_an_unacknowledged_value_does_not_make_later_ones_late() -> None:
    deliveries: list[Delivery] = [(10, "k", 1, 0, 0), (20, "k", 3, 0, 1)]
    anomalies, _ = judge_ordered(deliveries, _acked(("k", 1, 0, 0), ("k", 3, 0, 1)))  # 2 failed, unwritten
    assert all(v == [] for v in anomalies.values())


def test_member_files_merge_by_time_and_cut_lines_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "deliveries-0.txt").write_text("D 30 k 3 4 0\nD 10 k 1 0 0\nD 40 k 4")   # killed mid-line
    (tmp_path / "deliveries-1.txt").write_text("D 20 k 2 0 1\nE 25 Broker: Unknown topic or partition\n")
    deliveries, errors = read_deliveries([tmp_path / "deliveries-0.txt", tmp_path / "deliveries-1.txt",
                                          tmp_path / "deliveries-2.txt"])
    assert [d[2] for d in deliveries] == [1, 2, 3]
    assert errors == ["deliveries-1: Broker: Unknown topic or partition"]
    assert undelivered(deliveries, [("k", 1), ("k", 4)]) == 1
