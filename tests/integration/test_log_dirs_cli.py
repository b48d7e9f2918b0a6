"""`odradek log-dirs describe` (kafka-log-dirs.sh) against a real 3-broker cluster: each broker's
log dir with the size on disk of every replica it hosts, in text and in Kafka's JSON, filtered
by broker and topic; an empty answer says so and unknown brokers or topics are mistakes."""
from __future__ import annotations

import json

import pytest
from clients import create_topic, produce_acks_all
from cluster_state import full_isr
from polling import wait_until

from cli_helpers import assert_one_line_error, run
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True


def test_sizes_of_a_topic_with_records_on_every_replica(cluster: LocalCluster) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, "sized", 2, 3)
    wait_until(lambda: full_isr(cluster, "sized", 3), 30, "full ISRs")
    produce_acks_all(bs, "sized", 50)

    def described() -> dict:
        proc = run("log-dirs", "describe", "--topic-list", "sized", "--json", "--bootstrap-server", bs)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def sizes(answer: dict) -> dict[tuple[int, str], int]:
        return {(b["broker"], p["partition"]): p["size"] for b in answer["brokers"] for d in b["logDirs"]
                for p in d["partitions"]}

    # acks=all: every replica of the full ISR has appended the records before the producer's answer
    wait_until(lambda: all(s > 0 for s in sizes(described()).values()), 30, "every replica's size > 0")
    answer = described()
    assert answer["version"] == 1 and [b["broker"] for b in answer["brokers"]] == [1, 2, 3]
    assert set(sizes(answer)) == {(b, f"sized-{p}") for b in (1, 2, 3) for p in (0, 1)}
    for b in answer["brokers"]:
        [log_dir] = b["logDirs"]
        assert log_dir["error"] is None and log_dir["logDir"] == str((cluster.broker_dir(b["broker"]) / "data")
                                                                      .resolve())
        assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])
        assert log_dir["totalBytes"] >= log_dir["usableBytes"] > 0
    # the same replica holds the same records on every broker
    assert len({s for (_, p), s in sizes(answer).items() if p == "sized-0"}) == 1

    proc = run("log-dirs", "describe", "--broker-list", "2", "--topic-list", "sized", "--bootstrap-server", bs)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["Broker", "LogDir", "Partition", "Size", "OffsetLag"]
    rows = [line.split() for line in lines[1:3]]
    assert [(r[0], r[2]) for r in rows] == [("2", "sized-0"), ("2", "sized-1")]
    assert [int(r[3]) for r in rows] == [sizes(answer)[(2, "sized-0")], sizes(answer)[(2, "sized-1")]]
    total = sizes(answer)[(2, "sized-0")] + sizes(answer)[(2, "sized-1")]
    assert lines[3].startswith(f"broker 2: 2 partition replicas, {total:,} bytes in ")


def test_nothing_found_says_so_and_unknown_names_are_mistakes(cluster: LocalCluster) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, "only-on-one", 1, 1)
    wait_until(lambda: full_isr(cluster, "only-on-one", 1), 30, "the topic's leader")
    elsewhere = next(str(b) for b in cluster.broker_ids
                     if not (cluster.broker_dir(b) / "data" / "only-on-one-0").exists())
    proc = run("log-dirs", "describe", "--broker-list", elsewhere, "--topic-list", "only-on-one",
               "--bootstrap-server", bs)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"no partition replicas on broker {elsewhere} for 1 topic only-on-one"
    assert_one_line_error(run("log-dirs", "describe", "--broker-list", "1,99", "--bootstrap-server", bs), 1,
                          "broker 99 of --broker-list is not a live broker of the cluster (live: 1,2,3)")
    assert_one_line_error(run("log-dirs", "describe", "--topic-list", "sized-nosuch", "--bootstrap-server", bs), 1,
                          "UNKNOWN_TOPIC_OR_PARTITION", "does not exist: sized-nosuch")
    assert_one_line_error(run("log-dirs", "describe", "--broker-list", "1,x"), 2, "--broker-list", "1,2")
    assert run("log-dirs", "describe", "--help").stdout.startswith("usage: odradek log-dirs describe")
