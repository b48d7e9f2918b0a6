"""Smoke run of `odradek bench failover` on a small private cluster: the command works and
reports its keys. No timing assertions: speed goals live in docs/benchmarks.md."""
from __future__ import annotations

import json

import pytest

from odradek.cli import main


def test_bench_failover_small_run_reports_its_keys(capsys) -> None:
    assert main(["bench", "failover", "--partitions", "200", "--brokers", "3", "--json",
                 "--timeout-s", "120", "--rounds", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("partitions", "broker_failover_s", "controller_failover_s", "zk_multi_floor_s"):
        assert key in result
    assert result["partitions"] == 200
    assert result["broker_failover"]["leaders_moved"] > 0
    assert result["controller_failover"]["leaders_moved"] > 0
    assert result["broker_failover_s"] > 0 and result["controller_failover_s"] > 0
    # two rounds: a floor before each of the four failovers, each failover's median reported
    floors = sorted(result["zk_multi_floor_runs_s"])
    assert len(floors) == 4
    assert result["zk_multi_floor_s"] == pytest.approx((floors[1] + floors[2]) / 2, abs=0.001)
    for key in ("broker_failover", "controller_failover"):
        runs = result[f"{key}_runs_s"]
        assert len(runs) == 2 and result[f"{key}_s"] == pytest.approx(sum(runs) / 2, abs=0.001)
