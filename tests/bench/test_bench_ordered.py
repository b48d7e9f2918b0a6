"""`odradek bench ordered`'s summary: what it prints from a result (the bench itself needs a
cluster and minutes; `odradek bench ordered` runs it)."""
from __future__ import annotations

from odradek.bench.ordered import format_result

RESULT = {
    "records": 300000, "size": 100, "keys": 10000, "produce_plain": 372412.4, "produce_ordered": 395220.6,
    "consume_plain": 142128.3, "consume_ordered": 143523.6, "produce_ratio": 1.041, "consume_ratio": 1.003,
    "produce_ratios": [1.041, 1.061, 0.909], "consume_ratios": [1.039, 0.996, 1.003], "expansions": 4,
    "rate": 2000, "new_partitions_blocked": 4, "blocked_s_p50": 0.022, "blocked_s_p99": 0.988,
    "open_after_barrier_s_p50": 0.326, "open_after_barrier_s_p99": 0.445, "heartbeat_interval_s": 0.5,
    "ack_p99_ms_near_expansions": 742.0, "ack_p99_ms_otherwise": 17.0, "ack_max_ms_near_expansions": 885.1,
    "machine": {"cores": 2, "memory_gib": 23.5, "cpu_model": "AMD EPYC", "date_utc": "2026-11-27 19:22",
                "loadavg_1m": 1.06},
}


def test_the_summary_gives_the_ratios_with_every_round_and_the_blocking_figures() -> None:
    text = format_result(RESULT)
    assert "ordered 395,221 rec/s, plain 372,412 rec/s (best of 3), ratio 1.04 (median of 1.04 / 1.06 / 0.91)" in text
    assert "ratio 1.00 (median of 1.04 / 1.00 / 1.00)" in text
    assert "p99 0.445 s" in text and "742.0 ms around expansions" in text
    assert "2 cores" in text
