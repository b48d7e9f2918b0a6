"""Smoke run of `odradek bench shutdown` on a small private cluster: the command works and
reports its keys. No timing assertions: speed goals live in docs/benchmarks.md."""
from __future__ import annotations

import json

from odradek.cli.main import main


def test_bench_shutdown_small_run_reports_its_keys(capsys) -> None:
    assert main(["bench", "shutdown", "--partitions", "30", "--json", "--timeout-s", "120",
                 "--rounds", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("partitions", "leaders_moved_s", "leaders_acked_s", "exit_s", "leaders_moved_runs_s",
                "exit_runs_s", "round_nearest_median"):
        assert key in result
    assert result["partitions"] == 30 and result["rounds"] == 1
    shutdown = result["round_nearest_median"]
    assert shutdown["led_by_victim"] == 10   # balanced: a third of the partitions
    assert shutdown["victim"] != shutdown["controller"]
    assert shutdown["leaders_not_moved"] == 0 and shutdown["controlled_shutdown_events"] >= 1
    assert 0 < result["leaders_moved_s"] < result["exit_s"]
