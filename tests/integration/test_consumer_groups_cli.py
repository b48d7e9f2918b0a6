"""`odradek consume --group` and `odradek groups ...` (Kafka's ConsumerGroupCommand) against a
real 3-broker cluster, run as an operator runs them: subprocesses, stdout, one-line errors.

The brokers wait 100 ms instead of group.initial.rebalance.delay.ms's 3 s before a new group's
first rebalance, and `__consumer_offsets` has 6 partitions instead of 50, so that each group
joins in well under a second.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import create_topic, produce_acks_all

from cluster_helpers import start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration
ODRADEK = str(Path(sys.executable).with_name("odradek"))
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), 3, group_initial_rebalance_delay_ms=100,
                      offsets_topic_num_partitions=6)
    try:
        yield c
    finally:
        c.down()


def odradek(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ODRADEK, *args, "--bootstrap-server", cluster.bootstrap_servers],
                          capture_output=True, text=True, timeout=120)


def ok(cluster: LocalCluster, *args: str) -> str:
    proc = odradek(cluster, *args)
    assert proc.returncode == 0, f"odradek {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def one_line_error(proc: subprocess.CompletedProcess[str], status: int, fragment: str) -> None:
    assert proc.returncode == status, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("odradek: error: "), proc.stderr
    assert fragment in proc.stderr and "Traceback" not in proc.stderr


def describe(cluster: LocalCluster, group: str) -> dict:
    [described] = json.loads(ok(cluster, "groups", "describe", group, "--json"))  # a list, one per group named
    return described


def committed(cluster: LocalCluster, group: str) -> dict[int, int | None]:
    return {o["partition"]: o["committed"] for o in describe(cluster, group)["offsets"]}


def consume(cluster: LocalCluster, topic: str, group: str, *args: str) -> list[str]:
    return ok(cluster, "consume", topic, "--group", group, "--from-beginning", "--timeout-s", "2", *args).splitlines()


def topic_read_by(cluster: LocalCluster, topic: str, group: str, records: int = 30) -> list[str]:
    """A new topic with `records` keyed records over its partitions, all read by `group`."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic, PARTITIONS, 3)
    values = [v.decode() for _, _, _, v in produce_acks_all(bootstrap, topic, records)]
    assert sorted(consume(cluster, topic, group, "--max-messages", str(records))) == sorted(values)
    return values


def test_consume_group_reads_each_record_once(cluster: LocalCluster) -> None:
    topic_read_by(cluster, "once", "readers")
    assert consume(cluster, "once", "readers") == []  # a second run: the offsets were committed
    more = produce_acks_all(cluster.bootstrap_servers, "once", 5, prefix="more")
    lines = consume(cluster, "once", "readers", "--print-key")
    assert sorted(lines) == sorted(f"{k.decode()}\t{v.decode()}" for _, _, k, v in more)


def test_list_and_describe_show_committed_offsets_and_lag(cluster: LocalCluster) -> None:
    topic_read_by(cluster, "lagging", "laggards")
    listed = json.loads(ok(cluster, "groups", "list", "--json"))
    assert {"group": "laggards", "state": "Empty", "protocol_type": "consumer"} in listed
    assert "laggards" in ok(cluster, "groups", "list").split()

    group = describe(cluster, "laggards")
    assert group["group"] == "laggards" and group["state"] == "Empty" and group["members"] == []
    assert sum(o["committed"] for o in group["offsets"]) == 30
    for o in group["offsets"]:
        assert o["topic"] == "lagging" and o["log_end"] == o["committed"] and o["lag"] == 0

    produce_acks_all(cluster.bootstrap_servers, "lagging", 10, prefix="late")
    after = describe(cluster, "laggards")["offsets"]
    assert sum(o["lag"] for o in after) == 10
    assert all(o["lag"] == o["log_end"] - o["committed"] for o in after)
    table = ok(cluster, "groups", "describe", "laggards").splitlines()
    assert table[0].startswith("group laggards: Empty, 0 members")
    assert table[2].split() == ["Topic", "Partition", "Committed", "LogEnd", "Lag", "MemberId"]


def test_reset_offsets_dry_run_then_execute(cluster: LocalCluster) -> None:
    topic_read_by(cluster, "replayed", "replayers")
    before = committed(cluster, "replayers")
    plan = json.loads(ok(cluster, "groups", "reset-offsets", "replayers", "--topic", "replayed",
                         "--to-earliest", "--json"))
    assert plan["executed"] is False
    assert {(r["partition"], r["current"], r["new"]) for r in plan["offsets"]} == {
        (p, before[p], 0) for p in range(PARTITIONS)}
    assert committed(cluster, "replayers") == before  # a dry run commits nothing

    # clamped into [log start, log end] as Kafka's tool does
    plan = json.loads(ok(cluster, "groups", "reset-offsets", "replayers", "--topic", "replayed:0",
                         "--to-offset", "1000000", "--json"))
    assert [(r["partition"], r["new"]) for r in plan["offsets"]] == [(0, before[0])]
    later = json.loads(ok(cluster, "groups", "reset-offsets", "replayers", "--topic", "replayed",
                          "--to-datetime", "2999-01-01T00:00:00Z", "--json"))
    assert {r["partition"]: r["new"] for r in later["offsets"]} == before  # no record that late: log end
    earlier = json.loads(ok(cluster, "groups", "reset-offsets", "replayers", "--topic", "replayed",
                            "--to-datetime", "2000-01-01T00:00:00", "--json"))
    assert {r["partition"]: r["new"] for r in earlier["offsets"]} == dict.fromkeys(range(PARTITIONS), 0)

    ok(cluster, "groups", "reset-offsets", "replayers", "--topic", "replayed", "--to-earliest", "--execute")
    assert committed(cluster, "replayers") == dict.fromkeys(range(PARTITIONS), 0)
    ok(cluster, "groups", "reset-offsets", "replayers", "--topic", "replayed:1", "--shift-by", "2", "--execute")
    assert committed(cluster, "replayers")[1] == min(2, before[1])
    assert len(consume(cluster, "replayed", "replayers")) == 30 - min(2, before[1])  # read again


def test_a_group_with_a_member_is_described_and_protected(cluster: LocalCluster) -> None:
    topic_read_by(cluster, "watched", "watchers")
    member = subprocess.Popen([ODRADEK, "consume", "watched", "--group", "watchers", "--timeout-s", "60",
                               "--bootstrap-server", cluster.bootstrap_servers],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while (group := describe(cluster, "watchers"))["state"] != "Stable":
            assert time.monotonic() < deadline, group
            time.sleep(0.2)
        [m] = group["members"]
        assert m["member_id"] and m["client_id"] and m["host"]
        assert sorted((a["topic"], a["partition"]) for a in m["assignment"]) == [
            ("watched", p) for p in range(PARTITIONS)]
        assert {o["member_id"] for o in group["offsets"]} == {m["member_id"]}

        one_line_error(odradek(cluster, "groups", "reset-offsets", "watchers", "--topic", "watched",
                               "--to-earliest", "--execute"), 1, "is Stable")
        one_line_error(odradek(cluster, "groups", "delete", "watchers"), 1, "NON_EMPTY_GROUP")
        assert sum(v for v in committed(cluster, "watchers").values()) == 30  # nothing was reset
    finally:
        member.send_signal(signal.SIGINT)  # ^C: the consumer commits and leaves the group
        out, err = member.communicate(timeout=30)
    assert member.returncode == 130 and out == "" and "Traceback" not in err, err
    assert describe(cluster, "watchers")["state"] == "Empty"


def test_delete_groups(cluster: LocalCluster) -> None:
    topic_read_by(cluster, "deleted", "leavers", records=3)
    assert ok(cluster, "groups", "delete", "leavers") == "deleted consumer group leavers\n"
    assert "leavers" not in [g["group"] for g in json.loads(ok(cluster, "groups", "list", "--json"))]
    one_line_error(odradek(cluster, "groups", "describe", "leavers"), 1, "does not exist")
    one_line_error(odradek(cluster, "groups", "delete", "leavers"), 1, "GROUP_ID_NOT_FOUND")
    assert consume(cluster, "deleted", "leavers") != []  # its offsets went with it


@pytest.fixture(scope="module")
def checked(cluster: LocalCluster) -> str:
    """A topic for the bad-input cases to name."""
    create_topic(cluster.bootstrap_servers, "checked", PARTITIONS, 3)
    return "checked"


@pytest.mark.parametrize("args, status, fragment", [
    (["reset-offsets", "g", "--topic", "no-such-topic", "--to-latest"], 1, "topic 'no-such-topic' does not exist"),
    (["reset-offsets", "g", "--topic", "checked:7", "--to-latest"], 1, "no partition 7"),
    (["reset-offsets", "g", "--topic", "checked", "--to-offset", "-1"], 2, "--to-offset"),
    (["reset-offsets", "g", "--topic", "checked", "--to-datetime", "soon"], 2, "ISO 8601"),
    (["reset-offsets", "g", "--topic", "checked", "--shift-by", "1"], 1, "no committed offset"),
    (["describe", "no-such-group"], 1, "consumer group 'no-such-group' does not exist"),
])
def test_bad_input_is_one_line(cluster: LocalCluster, checked: str, args: list[str], status: int,
                               fragment: str) -> None:
    one_line_error(odradek(cluster, "groups", *args), status, fragment)
    assert "g" not in [g["group"] for g in json.loads(ok(cluster, "groups", "list", "--json"))]
