"""Smoke run of `odradek bench reassign` on a tiny load: the command works, reports its keys, and
the partitions really moved (their logs on disk are where the bench says). No timing assertions:
speed goals live in docs/benchmarks.md."""
from __future__ import annotations

import json
import re

from odradek.cli import main


def _logs(broker_dir, topic_re: str) -> set[str]:
    """Partition log directories of a broker whose name matches topic_re-N (not ones being deleted)."""
    return {d.name for d in (broker_dir / "data").iterdir() if re.fullmatch(rf"{topic_re}-\d+", d.name)}


def test_bench_reassign_small_run_moves_every_partition(capsys, tmp_path) -> None:
    assert main(["bench", "reassign", "--partitions", "20", "--data-mb", "4", "--throttle-mb-per-s", "2",
                 "--json", "--timeout-s", "120", "--keep-dir", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("partitions", "answered_s", "completed_s", "data_bytes", "throttle_bytes_per_s", "moved_s",
                "ideal_s", "ratio", "unthrottled_moved_s", "machine", "controller_events"):
        assert key in result, key
    assert result["partitions"] == result["partitions_moved"] == 20
    assert 0 < result["answered_s"] <= result["completed_s"]
    assert result["throttle_bytes_per_s"] == 2 * 1024 * 1024
    assert result["data_bytes"] >= 4 * 1024 * 1024   # the leaders' logs: the values and their framing
    assert result["ideal_s"] == round(result["data_bytes"] / result["throttle_bytes_per_s"], 3)
    assert result["moved_s"] > 0 and result["machine"]["cores"] >= 1
    assert result["controller_events"]["alter_phases_s"]      # the controller logged the request
    # the empty topic went to 4-6 with leaders spread; the data topic went there and came back
    assert result["replicas_after"] == {"empty": [4, 5, 6], "data": [1, 2, 3]}
    assert result["leaders_after"]["empty"] == {"4": 7, "5": 7, "6": 6}
    assert any(line.startswith("topic reassign-bench-data:") for line in result["throttles_removed"])
    for broker in range(1, 7):
        here = tmp_path / f"broker-{broker}"
        assert len(_logs(here, "reassign-bench")) == (0 if broker <= 3 else 20), broker
        assert len(_logs(here, "reassign-bench-data")) == (6 if broker <= 3 else 0), broker
