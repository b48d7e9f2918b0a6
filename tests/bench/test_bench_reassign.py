"""Smoke run of `odradek bench reassign` on a tiny load: the command works, reports its keys, and
the partitions really moved (their logs on disk are where the bench says). No timing assertions:
speed goals live in docs/benchmarks.md."""
from __future__ import annotations

import io
import json
import re

import pytest

from odradek.admin import reassign_client
from odradek.bench import reassign as bench_reassign
from odradek.cli.main import main
from odradek.cli.output import Progress


def _logs(broker_dir, topic_re: str) -> set[str]:
    """Partition log directories of a broker whose name matches topic_re-N (not ones being deleted)."""
    return {d.name for d in (broker_dir / "data").iterdir() if re.fullmatch(rf"{topic_re}-\d+", d.name)}


@pytest.mark.slow  # 10 s: make test-long
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


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_data_move_bar_counts_the_new_replicas_bytes_only_on_a_terminal(monkeypatch) -> None:
    """The bar of the throttled move: the adding replicas' log sizes (DescribeLogDirs) averaged
    over the new brokers, against one copy of the data; no request at all without a terminal."""
    asked: list[dict[int, set]] = []
    MiB = 1024 ** 2

    def log_sizes(_view, wanted, _timeout):
        asked.append(wanted)
        return {(tp, b): 3 * MiB for b, tps in wanted.items() for tp in tps}

    monkeypatch.setattr(reassign_client, "log_sizes", log_sizes)
    before = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 1]}
    after = {("t", 0): [4, 5, 6], ("t", 1): [5, 6, 4]}
    tty = _Tty()
    now = [0.0]
    bar = Progress(12, "MiB copied per new broker", stream=tty, clock=lambda: now[0])
    now[0] = 1.0
    bench_reassign._copied_meter(None, before, after, bar)(2)
    assert asked == [{4: set(before), 5: set(before), 6: set(before)}]
    assert "MiB copied per new broker [" in tty.getvalue() and " 6/12 " in tty.getvalue()
    asked.clear()
    bench_reassign._copied_meter(None, before, after, Progress(12, "MiB", stream=io.StringIO()))(2)
    assert asked == []
