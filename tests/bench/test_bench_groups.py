"""Smoke run of `odradek bench groups` at a tiny size (3 members, 6 partitions, one round) with
faster settings than the real run (no initial rebalance delay, 0.5 s heartbeats, commits timed
for 0.5 s): it runs and reports every figure. No timing assertions: speed goals live in
docs/benchmarks.md."""
from __future__ import annotations

import pytest

from odradek.bench.groups import format_result, run_groups_bench


@pytest.mark.slow  # 28 s: make test-long (make test runs the group tests with real clients)
def test_bench_groups_small_run_reports_every_figure() -> None:
    result = run_groups_bench(3, 6, rounds=1, commit_seconds=0.5, initial_rebalance_delay_ms=0,
                              heartbeat_interval_ms=500, session_timeout_ms=10_000, timeout=60)
    for strategy in ("eager", "cooperative"):
        measured = result[strategy]
        assert measured["form"]["settled_s"] > 0
        assert measured["join_s"] > 0 and measured["leave_s"] > 0
        # the coordinator's log gives the steps in between: prepared, every member rejoined, stable
        assert measured["join_coordinator"]["rebalances"] >= 1
        assert measured["leave_coordinator"]["stable_s"] > 0
    commits = result["commits"]
    assert commits["sync_commits_per_s"] > 0 and commits["async_commits_per_s"] > 0
    failover = result["coordinator_failover"]
    assert failover["first_commit_s"] > 0 and failover["every_member_commit_s"] > 0
    assert failover["broker_death_seen_s"] > 0 and failover["group_loaded_s"] > 0
    assert failover["moved_back_longest_commit_gap_s"] > 0
    (round_,) = failover["rounds"]
    # DescribeGroups names the leader of the group's __consumer_offsets partition
    assert round_["coordinator"]["describe_groups"] == round_["coordinator"]["offsets_partition_leader"]
    assert result["settings"]["session_timeout_ms"] == 10_000
    assert result["machine"]["cores"] > 0
    assert result["broker_tracebacks"] == []
    text = format_result(result)
    assert "coordinator failover" in text and "cooperative (cooperative-sticky)" in text
