"""`odradek bench transactions`' summary: what it prints from a result (the bench itself needs
a cluster and minutes; `odradek bench transactions` runs it)."""
from __future__ import annotations

from odradek.bench.transactions import format_result

RESULT = {
    "seconds": 5, "size": 1024, "rounds": {"10": 3, "100": 3, "1000": 3},
    **{f"idempotent_{i}ms": 50000.0 + i for i in (10, 100, 1000)},
    "transactional_10ms": 31000.4, "transactional_100ms": 48500.6, "transactional_1000ms": 49900.2,
    "ratios_10ms": [0.61, 0.63, 0.6], "ratio_10ms": 0.61, "ratios_100ms": [0.97, 0.96, 0.98], "ratio_100ms": 0.97,
    "ratios_1000ms": [0.99, 1.0, 1.01], "ratio_1000ms": 1.0,
    "latency_rate": 1000, "latency_received": 10000, "latency_expected": 10000,
    "latency_ms_p50": 56.2, "latency_ms_p99": 104.9, "latency_ms_max": 130.3,
    "machine": {"cores": 2, "memory_gib": 23.5, "cpu_model": "AMD EPYC", "date_utc": "2026-11-27 23:00",
                "loadavg_1m": 1.06},
}


def test_the_summary_gives_each_intervals_ratio_with_its_rounds_and_the_latency() -> None:
    text = format_result(RESULT)
    assert "commit every  100 ms: transactional 48,501 rec/s, idempotent 50,100 rec/s (best of each), " \
           "ratio 0.97 (median of 0.97 / 0.96 / 0.98)" in text
    assert "commit every   10 ms" in text and "ratio 0.61" in text
    assert "p50 56.2 ms, p99 104.9 ms, max 130.3 ms (10,000 of 10,000 received)" in text
    assert "3/3/3 rounds alternating at 10/100/1000 ms" in text
    assert "2 cores" in text


SCRAPE = """# TYPE kafka_network_requestmetrics_totaltimems histogram
kafka_network_requestmetrics_totaltimems_bucket{le="1.0",request="EndTxn"} 3.0
kafka_network_requestmetrics_totaltimems_count{request="EndTxn"} 4.0
kafka_network_requestmetrics_totaltimems_sum{request="EndTxn"} 6.0
kafka_network_requestmetrics_totaltimems_count{request="Produce"} 10.0
kafka_network_requestmetrics_totaltimems_sum{request="Produce"} 300.0
kafka_network_requestmetrics_totaltimems_count{request="Fetch"} 99.0
kafka_network_requestmetrics_totaltimems_sum{request="Fetch"} 999.0
"""


def test_the_breakdown_gives_each_apis_requests_per_commit_and_mean_time_between_two_scrapes() -> None:
    from odradek.bench.transactions import Run, breakdown, request_totals

    before = request_totals(SCRAPE)
    assert before == {"EndTxn count": 4.0, "EndTxn sum": 6.0, "Produce count": 10.0, "Produce sum": 300.0}
    after = {"EndTxn count": 8.0, "EndTxn sum": 14.0, "Produce count": 30.0, "Produce sum": 700.0}
    runs = [Run(1000.0, 2, 0.25, 1.0), Run(1200.0, 2, 0.15, 1.0)]
    got = breakdown(runs, before, after)
    assert got == {"commit_ms": 100.0, "commit_share": 0.2, "commits": 4,
                   "EndTxn": {"per_commit": 1.0, "mean_ms": 2.0}, "Produce": {"per_commit": 5.0, "mean_ms": 20.0}}
    text = format_result({**RESULT, "breakdown_100ms": got})
    assert "at 100 ms, a commit: 100 ms in commit_transaction (20% of the time); per commit, broker-side: " \
           "EndTxn 1 x 2 ms, Produce 5 x 20 ms" in text
    assert breakdown([Run(1000.0)], before, after) == {}   # no commit: nothing to say
