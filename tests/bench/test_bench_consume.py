"""Smoke run of `odradek bench consume` with 20,000 records: the three readers (raw Fetch, one
consumer, three in a group) each count exactly the records produced. No timing goals:
docs/benchmarks.md."""
from __future__ import annotations

import json

import pytest

from odradek.bench.consume import format_result
from odradek.cli.main import main


@pytest.mark.slow  # 17 s of a private cluster: make test-long
def test_bench_consume_small_run_counts_every_record_three_ways(capsys) -> None:
    assert main(["bench", "consume", "--records", "20000", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["records"] == 20_000 and result["log_end_offsets"] == 20_000
    for key in ("raw_fetch", "one_consumer", "three_consumers"):
        run = result[key]
        assert run["records"] == 20_000, key
        assert run["seconds"] > 0 and run["records_per_s"] > 0 and run["mb_per_s"] > 0, key
    assert 1 <= result["raw_fetch"]["connections"] <= 3
    assert result["one_consumer"]["value_bytes"] == 20_000 * 100
    members = result["three_consumers"]["per_member"]
    assert len(members) == 3 and all(m > 0 for m in members)   # each member read its two partitions
    assert "3 consumers, one group" in format_result(result)
