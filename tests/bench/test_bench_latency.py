"""Smoke run of `odradek bench latency` on a private cluster at a low rate: the command works,
every record arrives, and the latencies are plausible. No timing goals: docs/benchmarks.md."""
from __future__ import annotations

import json

import pytest

from odradek.bench.latency import format_result, summarize
from odradek.cli.main import main


def test_summarize_takes_nearest_rank_percentiles() -> None:
    got = summarize([float(x) for x in range(1000, 0, -1)])
    assert got == {"p50_ms": 501.0, "p99_ms": 991.0, "p999_ms": 1000.0, "max_ms": 1000.0}


@pytest.mark.slow  # 8 s of a private cluster: make test-long
def test_bench_latency_small_run_measures_every_record(capsys) -> None:
    assert main(["bench", "latency", "--rate", "200", "--seconds", "2", "--warmup", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["producer"]["linger.ms"] == 0 and result["producer"]["acks"] == "all"
    assert result["consumer"]["fetch.wait.max.ms"] == 10
    (run,) = result["runs"]
    assert run["rate"] == 200 and run["sent"] == 600 and run["received"] == 600
    assert run["measured"] == 400   # the warm-up's 200 are received, not measured
    assert 150 < run["achieved_rate"] < 250
    assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["p999_ms"] <= run["max_ms"] < 10_000
    text = format_result(result)
    assert "p99.9 ms" in text and "600/600" in text
