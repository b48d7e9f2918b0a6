"""Smoke run of `odradek bench failover` on a small private cluster: the command works and
reports its keys. No timing assertions: speed goals live in docs/benchmarks.md."""
from __future__ import annotations

import json

import pytest

from odradek.cli.main import main


@pytest.mark.slow  # 24 s of two ZooKeeper session expiries; failover itself is in make test (test_failover.py)
def test_bench_failover_small_run_reports_its_keys(capsys) -> None:
    assert main(["bench", "failover", "--partitions", "200", "--brokers", "3", "--json",
                 "--timeout-s", "120", "--rounds", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("partitions", "broker_failover_s", "controller_failover_s", "zk_multi_floor_s"):
        assert key in result
    assert result["partitions"] == 200
    assert result["broker_failover"]["leaders_moved"] > 0
    assert result["controller_failover"]["leaders_moved"] > 0
    assert result["broker_failover_s"] > 0 and result["controller_failover_s"] > 0
    # a life per broker and per kill (two kills: the victims' first lives end when killed)
    lives = [gc for broker in result["gc_pauses"].values() for gc in broker]
    assert sorted(result["gc_pauses"]) == ["1", "2", "3"] and len(lives) == 4
    assert sorted(gc["until"] for gc in lives) == ["end", "end", "killed", "killed"]
    assert all(set(gc["longest_s"]) == {"0", "1", "2"} for gc in lives)
    # one round: a floor before each of the two failovers, their median reported (one round
    # keeps this smoke run short; the benchmark's default is three)
    floors = sorted(result["zk_multi_floor_runs_s"])
    assert len(floors) == 2
    assert result["zk_multi_floor_s"] == pytest.approx((floors[0] + floors[1]) / 2, abs=0.001)
    for key in ("broker_failover", "controller_failover"):
        runs = result[f"{key}_runs_s"]
        assert len(runs) == 1 and result[f"{key}_s"] == pytest.approx(runs[0], abs=0.001)


def test_partitions_are_spread_over_topics_that_fit_in_zookeeper() -> None:
    """Above 50,000 partitions the bench uses several topics, each small enough for one znode
    (a topic of 100,000 would be refused); up to it, the one topic of the earlier runs."""
    from odradek.bench.failover import MAX_PARTITIONS_PER_TOPIC, bench_topics
    from odradek.broker.topic_admin import assign_replicas, check_fits_in_zookeeper
    from odradek.common.metadata import TopicAssignment
    from odradek.zk import paths

    assert bench_topics(10_000) == {"failover-bench": 10_000}
    assert bench_topics(50_000) == {"failover-bench": 50_000}
    assert bench_topics(100_000) == {"failover-bench-0": 50_000, "failover-bench-1": 50_000}
    spread = bench_topics(120_001)
    assert sorted(spread.values()) == [40_000, 40_000, 40_001] and sum(spread.values()) == 120_001
    # the largest bench topic fits, at RF 3 on the bench's brokers (ids 1-3) and on ten brokers
    for brokers in ([1, 2, 3], list(range(1, 11))):
        largest = TopicAssignment("failover-bench-0", paths.new_topic_id(),
                                  assign_replicas(brokers, MAX_PARTITIONS_PER_TOPIC, 3))
        check_fits_in_zookeeper(largest, {})


def test_the_text_report_names_the_topics_and_reads_older_results() -> None:
    from odradek.bench.failover import TOPIC_RULE, bench_topics, format_result

    failover = {"leaders_moved": 33_333, "detection_s": 6.8, "phases_s": {"fired->dequeued": 0.1}}
    result = {"partitions": 100_000, "brokers": 3, "replication_factor": 3, "topic_create_s": 76.1,
              "idle_cpu_per_broker": {"1": 0.01}, "loadavg_1m_before_failovers": 3.7,
              "loadavg_1m_after_failovers": 4.9, "cpu_probe_s": 0.13, "zk_multi_floor_s": 2.7,
              "zk_multi_floor_runs_s": [2.7], "broker_failover_s": 8.3, "broker_failover_vs_floor": 3.0,
              "broker_failover_runs_s": [8.3], "broker_failover": failover, "controller_failover_s": 12.0,
              "controller_failover_vs_floor": 4.4, "controller_failover_runs_s": [12.0],
              "controller_failover": failover}
    older = format_result(result)  # a result of the single-topic bench, without the new keys
    assert older.startswith("partitions 100,000 in 1 topic (one topic)")
    text = format_result({**result, "topics": bench_topics(100_000), "topic_rule": TOPIC_RULE})
    assert text.startswith(f"partitions 100,000 in 2 topics ({TOPIC_RULE})")
    assert "broker failover: 8.300 s" in text and "controller failover: 12.000 s" in text
    gc = {"longest_s": {"0": 0.004, "1": 0.01, "2": 0.06}, "longest_cpu_s": {"0": 0.003, "1": 0.009, "2": 0.05},
          "over_100ms": {"0": 0, "1": 0, "2": 0}, "allocated_blocks": 12_000_000}
    text = format_result({**result, "gc_pauses": {"1": [{"until": "killed", **gc}, {"until": "end", **gc}],
                                                  "2": [{"until": "end"}]}})
    assert ("broker 1 garbage collection (until killed): longest pause by generation {'0': 0.004, '1': 0.01, "
            "'2': 0.06} s ({'0': 0.003, '1': 0.009, '2': 0.05} s of CPU), over 100 ms {'0': 0, '1': 0, '2': 0}, "
            "12,000,000 allocated blocks") in text
    assert "broker 1 garbage collection (until end)" in text
    assert "broker 2 garbage collection" not in text  # a broker that did not answer


def test_gc_pauses_reads_a_brokers_collector(tmp_path) -> None:
    """What the bench reports of a broker's garbage collections is what GcCollector exports."""
    import gc

    from odradek.bench.failover import gc_pauses
    from odradek.broker.metrics import BrokerMetrics, GcCollector
    from odradek.common.gc_policy import PAUSE_BUCKETS_S, GcPauseWatch
    from odradek.common.netutil import free_port

    watch = GcPauseWatch()
    watch.install()
    try:
        gc.collect()
    finally:
        watch.uninstall()
    metrics = BrokerMetrics()
    metrics.add_collector(GcCollector(watch, allocated_blocks=lambda: 1234))
    port = free_port()
    server = metrics.serve("127.0.0.1", port)
    try:
        read = gc_pauses(f"http://127.0.0.1:{port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert read["longest_s"]["2"] == round(watch.longest_s[2], 3)
    assert read["longest_cpu_s"]["2"] == round(watch.longest_cpu_s[2], 3)
    over = PAUSE_BUCKETS_S.index(0.1) + 1  # the first bucket above 100 ms
    assert read["over_100ms"] == {g: sum(watch.buckets[int(g)][over:]) for g in ("0", "1", "2")}
    assert read["allocated_blocks"] == 1234
    assert gc_pauses(None) == {}
    assert gc_pauses(f"http://127.0.0.1:{free_port()}/metrics") == {}  # nobody there
