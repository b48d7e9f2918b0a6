"""The fault run's checker on planted histories: each anomaly it must report, it does."""
from __future__ import annotations

from odradek.faults.checker import judge
from odradek.faults.workload import encode_value


def _log(*entries: tuple[int, int, int, str, int]) -> dict[int, list[tuple[int, bytes]]]:
    out: dict[int, list[tuple[int, bytes]]] = {}
    for partition, offset, producer, key, seq in entries:
        out.setdefault(partition, []).append((offset, encode_value(producer, key, seq)))
    return out


def test_a_clean_history_has_no_anomaly() -> None:
    log = _log((0, 0, 1, "k", 1), (0, 1, 1, "k", 2), (1, 0, 1, "j", 1))
    acked = {(1, "k", 1): (0, 0), (1, "k", 2): (0, 1), (1, "j", 1): (1, 0)}
    assert all(v == [] for v in judge(log, acked).values())


def test_unacknowledged_values_in_the_log_and_gaps_in_sequence_are_allowed() -> None:
    log = _log((0, 0, 1, "k", 1), (0, 1, 1, "k", 3))  # seq 2 failed before it was written
    assert all(v == [] for v in judge(log, {(1, "k", 3): (0, 1)}).values())


def test_an_acknowledgement_without_offset_only_needs_the_value_present() -> None:
    log = _log((0, 0, 1, "k", 1))
    assert all(v == [] for v in judge(log, {(1, "k", 1): (0, None)}).values())
    assert len(judge(log, {(1, "k", 2): (0, None)})["lost"]) == 1


def test_each_planted_anomaly_is_reported() -> None:
    log = _log((0, 0, 1, "k", 1), (0, 1, 1, "k", 3), (0, 2, 1, "k", 2), (0, 3, 1, "k", 3), (1, 0, 2, "j", 1))
    acked = {(1, "k", 1): (0, 0),      # fine
             (1, "k", 9): (0, 7),      # lost
             (2, "j", 1): (1, 5)}      # read at another offset than acknowledged
    found = judge(log, acked)
    assert len(found["lost"]) == 1
    assert len(found["inconsistent_offsets"]) == 1
    assert len(found["duplicates"]) == 1   # (1, k, 3) twice
    assert len(found["reordered"]) == 1    # 3 before 2
