"""`odradek bench ordered`'s summary: what it prints from a result (the bench itself needs a
cluster and minutes; `odradek bench ordered` runs it)."""
from __future__ import annotations

from types import SimpleNamespace

from odradek.bench.ordered import _expansion_figures, format_result

RESULT = {
    "records": 300000, "size": 100, "keys": 10000, "produce_plain": 372412.4, "produce_ordered": 395220.6,
    "consume_plain": 142128.3, "consume_ordered": 143523.6, "produce_ratio": 1.041, "consume_ratio": 1.003,
    "produce_ratios": [1.041, 1.061, 0.909], "consume_ratios": [1.039, 0.996, 1.003], "expansions": 4,
    "rate": 2000, "new_partitions_blocked": 4, "blocked_s_p50": 0.022, "blocked_s_p99": 0.988,
    "open_after_barrier_s_p50": 0.326, "open_after_barrier_s_p99": 0.445, "heartbeat_interval_s": 0.5,
    "gate_wait_s_p50": 0.012, "gate_wait_s_p99": 0.131, "rebalance_s_p50": 0.41, "rebalance_s_p99": 0.87,
    "parent_read_by_another_member": 1, "gate_wait_crossed_s_p50": 0.1, "gate_wait_crossed_s_p99": 0.131,
    "members": 3,
    "ack_p99_ms_near_expansions": 742.0, "ack_p99_ms_otherwise": 17.0, "ack_max_ms_near_expansions": 885.1,
    "machine": {"cores": 2, "memory_gib": 23.5, "cpu_model": "AMD EPYC", "date_utc": "2026-11-27 19:22",
                "loadavg_1m": 1.06},
}


def test_the_summary_gives_the_ratios_with_every_round_and_the_blocking_figures() -> None:
    text = format_result(RESULT)
    assert "ordered 395,221 rec/s, plain 372,412 rec/s (best of 3), ratio 1.04 (median of 1.04 / 1.06 / 0.91)" in text
    assert "ratio 1.00 (median of 1.04 / 1.00 / 1.00)" in text
    assert "p99 0.445 s" in text and "742.0 ms around expansions" in text
    assert "the gate (after both its assignment and the barrier's passing): p50 0.012 s, p99 0.131 s" in text
    assert "a group of 3" in text
    assert "where another member read the parent (1 of 4): p50 0.1 s, p99 0.131 s" in text and "p99 0.87 s" in text
    assert "2 cores" in text


def test_the_gate_is_timed_from_the_later_of_assignment_and_the_barriers_passing() -> None:
    # child 4 (parent 0, barrier 100): the parent passed at 10.2, before the rebalance gave the
    # child out at 10.7, open at once; child 5 (parent 1, barrier 50, read by the other member):
    # assigned at 14.6, the parent passed at 14.9, open at 15.0
    a = SimpleNamespace(assigned={4: 10.7}, opened={4: 10.71}, barriers={4: (0, 100)},
                        delivered=[(10.1, 0, 98), (10.2, 0, 99), (10.3, 0, 100)])
    b = SimpleNamespace(assigned={5: 14.6}, opened={5: 15.0}, barriers={5: (1, 50)}, delivered=[])
    a.delivered.append((14.9, 1, 49))
    figures = _expansion_figures([a, b], [], [10.0, 14.0])  # type: ignore[list-item]
    assert figures["new_partitions_blocked"] == 2
    assert figures["open_after_barrier_s_p99"] == 0.51    # 10.71 - 10.2: the rebalance in it
    # of two values, _pct's p50 is the upper one, as its p99
    assert figures["gate_wait_s_p99"] == 0.1 and figures["rebalance_s_p99"] == 0.7
    one = _expansion_figures([a], [], [10.0])  # type: ignore[list-item]
    assert one["gate_wait_s_p50"] == 0.01 and one["rebalance_s_p50"] == 0.7
    assert figures["parent_read_by_another_member"] == 1
    assert figures["gate_wait_crossed_s_p99"] == 0.1 and figures["members"] == 2  # child 5's, through the coordinator
