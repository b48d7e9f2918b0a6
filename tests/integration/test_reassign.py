"""`odradek reassign` (Kafka's kafka-reassign-partitions.sh) and DescribeLogDirs on a real 3-broker
cluster: plans the cluster cannot carry out are refused with one line and change nothing; a
generated plan is balanced; a partition moved from brokers [1,2] to [2,3] ends on [2,3] with its
records, as --verify reports; --cancel. The CLI runs in-process (odradek.cli.main) to save the
interpreter start of each call.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from clients import produce_acks_all
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from wire import RawConnection

import odradek.cli.main as cli
from client_helpers import produce
from odradek.admin import reassign_client
from odradek.admin.admin_client import describe_topics, metadata_request
from odradek.admin.config_command import BROKER, TOPIC, describe
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True

DESCRIBE_LOG_DIRS, API_VERSIONS, ALTER_PARTITION_REASSIGNMENTS = 35, 18, 45


def create_assigned(bootstrap: str, name: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment)])[name]
    future.result(30)
    deadline = time.monotonic() + 30
    for server in bootstrap.split(","):  # every broker knows every leader
        while not _known(server, name, len(assignment)):
            assert time.monotonic() < deadline, f"{server} does not know the leaders of {name}"
            time.sleep(0.1)


def _known(server: str, name: str, partitions: int) -> bool:
    [topic] = metadata_request(server, [name], 10).topics
    return topic.error_code == 0 and len(topic.partitions) == partitions and all(
        p.leader_id >= 0 for p in topic.partitions)


def assignment(bootstrap: str, name: str) -> dict[int, list[int]]:
    return {p["partition"]: p["replicas"] for p in describe_topics(bootstrap, [name])[0]["partitions"]}


def run(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    status = cli.main(["reassign", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, out, err


def log_dirs(cluster: LocalCluster, broker: int, version: int, topics: Any) -> Any:
    conn = RawConnection("127.0.0.1", cluster.broker_port(broker))
    try:
        return conn.request(DESCRIBE_LOG_DIRS, version, {"topics": topics})
    finally:
        conn.close()


def test_describe_log_dirs_reports_each_replicas_log_size(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_assigned(bootstrap, "logdirs", [[1, 2], [2, 3]])
    produce_acks_all(bootstrap, "logdirs", 50)
    for version in (1, 2, 3, 4):
        sizes: dict[tuple[int, int], int] = {}
        for broker in cluster.broker_ids:
            response = log_dirs(cluster, broker, version,
                                [{"topic": "logdirs", "partitions": [0, 1, 7]}, {"topic": "nosuch", "partitions": [0]}])
            [result] = response.results
            assert result.error_code == 0
            assert Path(result.log_dir).is_absolute() and Path(result.log_dir).is_dir()
            if version >= 4:
                assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
            assert [t.name for t in result.topics] == ["logdirs"]
            for t in result.topics:
                for p in t.partitions:
                    assert p.is_future_key is False and p.offset_lag == 0
                    sizes[(int(p.partition_index), broker)] = int(p.partition_size)
        # each broker reports the replicas it hosts, and only those; acks=all: followers hold every byte
        assert set(sizes) == {(0, 1), (0, 2), (1, 2), (1, 3)}
        assert sizes[(0, 1)] == sizes[(0, 2)] and sizes[(1, 2)] == sizes[(1, 3)]
        assert sizes[(0, 1)] + sizes[(1, 2)] > 50 * 10
    # a real client: kafka-python's admin client, which picks its version from ApiVersions
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answers = {a["broker"]: a["log_dirs"] for a in admin.describe_log_dirs({"logdirs": [0, 1]})}
    finally:
        admin.close()
    assert set(answers) == {1, 2, 3}
    reported = {(int(p["partition_index"]), broker): int(p["partition_size"])
                for broker, dirs in answers.items() for d in dirs for t in d["topics"] for p in t["partitions"]}
    assert reported == sizes
    everything = log_dirs(cluster, 2, 1, None).results[0]
    assert {(t.name, int(p.partition_index)) for t in everything.topics for p in t.partitions} >= {
        ("logdirs", 0), ("logdirs", 1)}


def test_generate_proposes_a_balanced_plan(cluster: LocalCluster, capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap_servers
    create_assigned(bootstrap, "gen", [[1, 2], [2, 1], [1, 2], [2, 1], [1, 2], [2, 1]])
    out_file = tmp_path / "plan.json"
    status, out, err = run(capsys, "--generate", "--topics", "gen", "--brokers", "1,2,3",
                           "--bootstrap-server", bootstrap, "--output", out_file)
    assert status == 0, err
    lines = out.splitlines()
    current = json.loads(lines[lines.index("Current partition replica assignment") + 1])
    proposed = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    assert {(p["partition"], tuple(p["replicas"])) for p in current["partitions"]} == {
        (i, (1, 2) if i % 2 == 0 else (2, 1)) for i in range(6)}
    assert json.loads(out_file.read_text()) == proposed
    assert json.loads((tmp_path / "plan.json.rollback.json").read_text()) == current
    replicas = [b for p in proposed["partitions"] for b in p["replicas"]]
    leaders = [p["replicas"][0] for p in proposed["partitions"]]
    assert sorted(replicas.count(b) for b in (1, 2, 3)) == [4, 4, 4]
    assert sorted(leaders.count(b) for b in (1, 2, 3)) == [2, 2, 2]
    assert assignment(bootstrap, "gen") == {i: [1, 2] if i % 2 == 0 else [2, 1] for i in range(6)}

    status, _, err = run(capsys, "--generate", "--topics", "gen", "--brokers", "1,2,9", "--bootstrap-server", bootstrap)
    assert (status, err) == (1, "odradek: error: reassign: broker 9 is not registered (registered brokers: 1,2,3)\n")
    status, _, err = run(capsys, "--generate", "--topics", "gen,nosuch", "--brokers", "1,2",
                         "--bootstrap-server", bootstrap)
    assert (status, err) == (1, "odradek: error: reassign: topic 'nosuch' does not exist\n")


def _plan(*entries: tuple[str, int, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries]})


BAD_PLANS = [
    ("{not json", "the plan is not valid JSON"),
    (_plan(("bad", 0, [2, 9])), "bad-0: broker 9 is not registered (registered brokers: 1,2,3)"),
    (_plan(("bad", 0, [2, 3, 2])), "bad-0: broker 2 appears twice in replicas [2, 3, 2]"),
    (_plan(("bad", 5, [2, 3])), "partition bad-5 does not exist (topic bad has 2 partitions)"),
    (_plan(("nosuch", 0, [2, 3])), "topic 'nosuch' does not exist"),
    (_plan(("bad", 0, [])), "bad-0: empty replica list"),
    (_plan(("bad", 0, [1, 2, 3])), "bad-0: the plan changes the replication factor from 2 to 3 "
                                   "(add --allow-replication-factor-change to do that)"),
    (_plan(("bad", 1, [3, 1]), ("bad", 0, [3])), "bad-0: the plan changes the replication factor from 2 to 1"),
]


@pytest.mark.parametrize("text, message", BAD_PLANS)
def test_bad_plans_are_refused_and_change_nothing(cluster: LocalCluster, capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path, text: str, message: str) -> None:
    bootstrap = cluster.bootstrap_servers
    if "bad" not in [t["name"] for t in describe_topics(bootstrap)]:
        create_assigned(bootstrap, "bad", [[1, 2], [2, 3]])
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    status, out, err = run(capsys, "--execute", "--plan", plan, "--throttle", 1000, "--bootstrap-server", bootstrap)
    assert status == 1
    assert err.startswith(f"odradek: error: reassign: {message}") and err.count("\n") == 1, err
    assert out == ""
    assert assignment(bootstrap, "bad") == {0: [1, 2], 1: [2, 3]}


def test_cli_argument_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for argv, message in [(["--verify"], "need --plan FILE"),
                          (["--generate", "--topics", "t"], "--generate needs --topics and --brokers"),
                          (["--verify", "--plan", tmp_path / "missing.json"], "cannot read --plan"),
                          (["--generate", "--topics", "t", "--brokers", "1,x"], "expected broker ids")]:
        status, _, err = run(capsys, *argv)
        assert status == 1 and err.startswith("odradek: error: reassign: ") and message in err, err
        assert err.count("\n") == 1


def _speaks_reassignment_apis(cluster: LocalCluster) -> bool:
    conn = RawConnection("127.0.0.1", cluster.broker_port(1))
    try:
        keys = {int(k.api_key) for k in conn.request(API_VERSIONS, 3, {"client_software_name": "t",
                                                                       "client_software_version": "1"}).api_keys}
    finally:
        conn.close()
    return ALTER_PARTITION_REASSIGNMENTS in keys


def _verify_until_done(capsys: pytest.CaptureFixture[str], plan: Path, bootstrap: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        status, out, err = run(capsys, "--verify", "--plan", plan, "--bootstrap-server", bootstrap)
        if status == 0:
            return out
        assert "still being reassigned" in err, err
        assert time.monotonic() < deadline, f"not done in time: {out}"
        time.sleep(0.3)


def test_execute_moves_a_partition_and_verify_reports_it_done(cluster: LocalCluster,
                                                              capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    if not _speaks_reassignment_apis(cluster):
        pytest.skip("the brokers do not speak AlterPartitionReassignments yet")
    bootstrap = cluster.bootstrap_servers
    create_assigned(bootstrap, "move", [[1, 2], [2, 3]])
    records = produce_acks_all(bootstrap, "move", 200)
    leader_size = log_dirs(cluster, 1, 1, [{"topic": "move", "partitions": [0]}]).results[0].topics[0].partitions[0]
    plan = tmp_path / "plan.json"
    plan.write_text(_plan(("move", 0, [2, 3])))
    status, out, err = run(capsys, "--execute", "--plan", plan, "--throttle", 10_000_000, "--bootstrap-server", bootstrap)
    assert status == 0, err
    assert '{"version":1,"partitions":[{"topic":"move","partition":0,"replicas":[1,2]}]}' in out
    assert "Successfully started partition reassignment for move-0" in out

    out = _verify_until_done(capsys, plan, bootstrap)
    assert assignment(bootstrap, "move") == {0: [2, 3], 1: [2, 3]}
    row = [line.split() for line in out.splitlines() if line.startswith("move ")][0]
    assert row[:5] == ["move", "0", "done", "2,3", "2,3"]
    assert int(row[5]) == int(row[6]) >= int(leader_size.partition_size) > 0
    assert "Removed throttle: topic move" in out
    # the new replica holds the partition's records: broker 3 reports the leader's size
    sizes = {b: log_dirs(cluster, b, 1, [{"topic": "move", "partitions": [0]}]).results[0].topics
             for b in cluster.broker_ids}
    assert sizes[1] == ()  # broker 1 no longer hosts it
    assert sizes[2][0].partitions[0].partition_size == sizes[3][0].partitions[0].partition_size
    assert len([r for r in records if r[0] == 0]) > 0

    status, out, err = run(capsys, "--verify", "--json", "--plan", plan, "--bootstrap-server", bootstrap)
    assert status == 0 and json.loads(out.splitlines()[0])[0]["state"] == "done"
    # --watch stops redrawing once every partition is done
    status, out, err = run(capsys, "--verify", "--watch", "0.3", "--plan", plan, "--bootstrap-server", bootstrap)
    assert status == 0 and "every 0.3 s" in out and "The partition is reassigned" in out, err


def test_cancel_stops_a_reassignment_in_progress(cluster: LocalCluster, capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reassignment throttled to 1 kB/s cannot finish 1.5 MB within the test: --cancel puts the
    partition back on its replicas and removes the throttles."""
    if not _speaks_reassignment_apis(cluster):
        pytest.skip("the brokers do not speak AlterPartitionReassignments yet")
    bootstrap = cluster.bootstrap_servers
    create_assigned(bootstrap, "cancelme", [[1, 2]])
    plan = tmp_path / "plan.json"
    plan.write_text(_plan(("cancelme", 0, [3, 2])))
    status, out, err = run(capsys, "--cancel", "--plan", plan, "--bootstrap-server", bootstrap)
    assert (status, err) == (0, "") and "Not in progress: cancelme-0" in out

    # more than one fetch takes (replica.fetch.max.bytes, 1 MiB: the first fetch is never held
    # back, as in Kafka), so the rest waits for the throttle
    produce(bootstrap, "cancelme", [(None, b"x" * 10_000, None)] * 150)
    status, out, err = run(capsys, "--execute", "--plan", plan, "--throttle", 1000, "--bootstrap-server", bootstrap)
    assert status == 0, err
    status, out, err = run(capsys, "--verify", "--plan", plan, "--bootstrap-server", bootstrap)
    assert status == 1 and "1 of 1 partitions still being reassigned" in err, out + err
    assert assignment(bootstrap, "cancelme") == {0: [3, 2, 1]}  # target + original replicas while moving

    status, out, err = run(capsys, "--cancel", "--plan", plan, "--bootstrap-server", bootstrap)
    assert (status, err) == (0, "")
    assert "Successfully cancelled partition reassignments for: cancelme-0" in out
    assert "Removed throttle: topic cancelme: leader.replication.throttled.replicas, " \
           "follower.replication.throttled.replicas" in out
    # back on the original replicas, in the order Kafka's cancellation leaves them: the replica
    # list less the adding replicas ([3, 2, 1] less [3]; the rollback plan restores [1, 2])
    deadline = time.monotonic() + 30
    while assignment(bootstrap, "cancelme") != {0: [2, 1]}:
        assert time.monotonic() < deadline, assignment(bootstrap, "cancelme")
        time.sleep(0.1)
    assert not any(e["source"] == "DYNAMIC_TOPIC_CONFIG" for e in describe(bootstrap, TOPIC, "cancelme"))
    for broker in cluster.broker_ids:
        assert not any(e["source"] == "DYNAMIC_BROKER_CONFIG" and "throttled" in e["name"]
                       for e in describe(bootstrap, BROKER, str(broker)))
    monkeypatch.setattr(reassign_client, "VERIFY_READS", 1)  # the state is settled: no reading again
    status, out, err = run(capsys, "--verify", "--plan", plan, "--bootstrap-server", bootstrap)
    assert status == 1 and "reassignment of cancelme-0 failed: replicas [2, 1], not [3, 2]" in err
