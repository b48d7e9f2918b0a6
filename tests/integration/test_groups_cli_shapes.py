"""`odradek groups` in kafka-consumer-groups.sh's shapes, run as an operator runs it against a
real 3-broker cluster with real confluent-kafka consumers: several groups in one describe or
delete (each group's outcome reported, a partial failure exits 1), --all-groups, the --members
and --state views, delete-offsets (OffsetDelete, KIP-496: GROUP_SUBSCRIBED_TO_TOPIC while the
group consumes the topic), and reset-offsets --all-topics, --to-current, --by-duration,
--from-file and --export, each checked through confluent-kafka's committed().

As in test_consumer_groups_cli.py, the brokers wait 100 ms instead of 3 s before a new group's
first rebalance and `__consumer_offsets` has 6 partitions, so groups form in well under a second.
"""
from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import create_topic, produce_acks_all
from cluster_state import known_everywhere
from confluent_kafka import Consumer, TopicPartition
from polling import wait_until

from cli_helpers import assert_one_line_error, run
from cluster_helpers import start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), 3, group_initial_rebalance_delay_ms=100,
                      offsets_topic_num_partitions=6)
    try:
        yield c
    finally:
        c.down()


def groups(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return run("groups", *args, "--bootstrap-server", cluster.bootstrap_servers, timeout=120)


def ok(cluster: LocalCluster, *args: str) -> str:
    proc = groups(cluster, *args)
    assert proc.returncode == 0, f"odradek groups {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def topic_with_records(cluster: LocalCluster, topic: str, partitions: int, records: int) -> dict[int, int]:
    """A new RF 3 topic every broker knows, with ``records`` acks=all records; its log end offsets."""
    create_topic(cluster.bootstrap_servers, topic, partitions, 3)
    wait_until(lambda: known_everywhere(cluster, topic), 30, f"every broker's Metadata to have {topic}")
    ends = dict.fromkeys(range(partitions), 0)
    for partition, offset, _, _ in produce_acks_all(cluster.bootstrap_servers, topic, records, prefix=topic):
        ends[partition] = max(ends[partition], offset + 1)
    return ends


def consumer(cluster: LocalCluster, group: str, **conf: object) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", **conf})


def commit(cluster: LocalCluster, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commits ``offsets`` for ``group`` as a consumer that assigns itself partitions does
    (OffsetCommit without joining: the group stays without members)."""
    c = consumer(cluster, group)
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def committed(cluster: LocalCluster, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """What confluent-kafka's committed() reads for ``group`` (OffsetFetch); -1001 where none is."""
    c = consumer(cluster, group)
    try:
        return {(tp.topic, tp.partition): tp.offset
                for tp in c.committed([TopicPartition(t, p) for t, p in partitions], timeout=30)}
    finally:
        c.close()


def test_describe_and_delete_several_groups_report_each_one(cluster: LocalCluster) -> None:
    ends = topic_with_records(cluster, "several", 3, 30)
    commit(cluster, "several-a", {("several", 0): 1, ("several", 1): 2, ("several", 2): 3})
    commit(cluster, "several-b", {("several", 0): ends[0]})

    proc = groups(cluster, "describe", "several-a", "no-such-group", "--group", "several-b", "--json")
    assert_one_line_error(proc, 1, "consumer group 'no-such-group' does not exist")
    a, missing, b = json.loads(proc.stdout)  # every group's outcome: the arguments, then --group
    assert [(o["partition"], o["committed"], o["lag"]) for o in a["offsets"]] == [
        (p, p + 1, ends[p] - p - 1) for p in range(3)]
    assert a["members"] == [] and a["state"] == "Empty"
    assert [(o["partition"], o["lag"]) for o in b["offsets"]] == [(0, 0)]
    assert missing == {"group": "no-such-group", "error": "consumer group 'no-such-group' does not exist"}

    text = ok(cluster, "describe", "--group", "several-a", "--group", "several-b")
    assert [line for line in text.splitlines() if line.startswith("group ")] == [
        "group several-a: Empty, 0 members, assignor -, coordinator " + str(a["coordinator"]),
        "group several-b: Empty, 0 members, assignor -, coordinator " + str(b["coordinator"])]

    everyone = json.loads(ok(cluster, "describe", "--all-groups", "--state", "--json"))
    assert {"several-a", "several-b"} <= {d["group"] for d in everyone}
    assert all("offsets" not in d for d in everyone)  # --state sends no OffsetFetch

    proc = groups(cluster, "delete", "several-a", "no-such-group")
    assert_one_line_error(proc, 1, "'no-such-group'", "GROUP_ID_NOT_FOUND")
    assert proc.stdout == "deleted consumer group several-a\n"  # the one refused did not stop the other
    offsets = committed(cluster, "several-a", [("several", p) for p in range(3)])
    assert set(offsets.values()) == {-1001}  # OFFSET_INVALID: nothing committed any more
    assert committed(cluster, "several-b", [("several", 0)]) == {("several", 0): ends[0]}
    assert_one_line_error(groups(cluster, "delete-offsets", "several-a", "--topic", "several"), 1,
                          "GROUP_ID_NOT_FOUND (the group does not exist)")
    assert json.loads(ok(cluster, "delete", "--group", "several-b", "--json")) == [
        {"group": "several-b", "deleted": True}]
    assert "several-b" not in ok(cluster, "list").split()


def test_members_state_and_delete_offsets_of_a_consuming_group(cluster: LocalCluster) -> None:
    ends = topic_with_records(cluster, "watched", 3, 30)
    other = topic_with_records(cluster, "unwatched", 1, 5)
    member = consumer(cluster, "watchers", **{"client.id": "watcher-client"})
    member.subscribe(["watched"])
    read = 0

    def assigned_and_read() -> bool:
        nonlocal read
        msg = member.poll(0.2)
        if msg is not None and msg.error() is None:
            read += 1
        return read == 30

    try:
        wait_until(assigned_and_read, 60, "the member to read every record of watched")
        member.commit(asynchronous=False)
        # a member may commit offsets of a topic the group does not subscribe to
        member.commit(offsets=[TopicPartition("unwatched", 0, other[0])], asynchronous=False)

        lines = ok(cluster, "describe", "watchers", "--members", "--verbose").splitlines()
        assert lines[0].split() == ["Group", "MemberId", "ClientId", "Host", "Partitions", "Assignment"]
        [row] = [line.split() for line in lines[1:]]
        assert row[0] == "watchers" and row[2] == "watcher-client" and row[4:] == ["3", "watched(0,1,2)"]
        assert "Assignment" not in ok(cluster, "describe", "watchers", "--members")

        lines = ok(cluster, "describe", "watchers", "--state").splitlines()
        assert lines[0].split() == ["Group", "Coordinator", "AssignmentStrategy", "State", "Members"]
        [state] = json.loads(ok(cluster, "describe", "watchers", "--state", "--json"))
        assert lines[1].split() == ["watchers", state["coordinator_address"], f"({state['coordinator']})",
                                    state["assignor"], "Stable", "1"]
        assert state["assignor"] and state["coordinator"] in (1, 2, 3)

        # KIP-496: refused per partition for the topic the group consumes, done for the other
        proc = groups(cluster, "delete-offsets", "--group", "watchers", "--topic", "watched", "--topic", "unwatched")
        assert_one_line_error(proc, 1, "3 of 4 partitions", "GROUP_SUBSCRIBED_TO_TOPIC")
        rows = [line.split() for line in proc.stdout.splitlines()]
        assert rows == [["Topic", "Partition", "Status"], ["unwatched", "0", "deleted"]] + [
            ["watched", str(p), "GROUP_SUBSCRIBED_TO_TOPIC"] for p in range(3)]
        assert committed(cluster, "watchers", [("watched", p) for p in range(3)] + [("unwatched", 0)]) == {
            **{("watched", p): ends[p] for p in range(3)}, ("unwatched", 0): -1001}
    finally:
        member.close()  # leaves the group: it is Empty, and its offsets may go

    wait_until(lambda: json.loads(ok(cluster, "describe", "watchers", "--state", "--json"))[0]["state"] == "Empty",
               30, "the group to be Empty once its member left")
    assert ok(cluster, "describe", "watchers", "--members") == "consumer group watchers has no active members\n"
    result = json.loads(ok(cluster, "delete-offsets", "watchers", "--topic", "watched:0,2", "--json"))
    assert result == {"group": "watchers", "partitions": [
        {"topic": "watched", "partition": 0, "error": None}, {"topic": "watched", "partition": 2, "error": None}]}
    assert committed(cluster, "watchers", [("watched", p) for p in range(3)]) == {
        ("watched", 0): -1001, ("watched", 1): ends[1], ("watched", 2): -1001}


def test_reset_offsets_all_topics_to_current_by_duration_and_from_file(cluster: LocalCluster, tmp_path: Path) -> None:
    a = topic_with_records(cluster, "reset-a", 2, 20)
    b = topic_with_records(cluster, "reset-b", 1, 4)
    c = topic_with_records(cluster, "reset-c", 1, 3)
    partitions = [("reset-a", 0), ("reset-a", 1), ("reset-b", 0)]
    commit(cluster, "resetters", {("reset-a", 0): 1, ("reset-a", 1): 2, ("reset-b", 0): 3})

    # --all-topics: every partition with a committed offset, and only those (reset-c has none)
    plan = json.loads(ok(cluster, "reset-offsets", "resetters", "--all-topics", "--to-latest", "--execute", "--json"))
    assert [(r["topic"], r["partition"]) for r in plan["offsets"]] == partitions and plan["executed"] is True
    latest = {("reset-a", 0): a[0], ("reset-a", 1): a[1], ("reset-b", 0): b[0]}
    assert committed(cluster, "resetters", partitions) == latest

    # --by-duration: an hour back is before every record (the log start); an hour ahead has none (the log end)
    ok(cluster, "reset-offsets", "--group", "resetters", "--topic", "reset-a", "--by-duration", "PT1H", "--execute")
    assert committed(cluster, "resetters", partitions) == {**latest, ("reset-a", 0): 0, ("reset-a", 1): 0}
    plan = json.loads(ok(cluster, "reset-offsets", "resetters", "--topic", "reset-a", "--by-duration=-PT1H",
                         "--json"))
    assert [r["new"] for r in plan["offsets"]] == [a[0], a[1]]

    # --to-current keeps what is committed and starts a partition without one at its log end
    ok(cluster, "reset-offsets", "resetters", "--topic", "reset-a", "--topic", "reset-c", "--to-current", "--execute")
    assert committed(cluster, "resetters", partitions + [("reset-c", 0)]) == {
        **latest, ("reset-a", 0): 0, ("reset-a", 1): 0, ("reset-c", 0): c[0]}

    # --export writes what --from-file reads back (a dry run: nothing committed)
    proc = groups(cluster, "reset-offsets", "resetters", "--all-topics", "--to-earliest", "--export")
    assert proc.returncode == 0 and "dry run" in proc.stderr, proc.stderr
    assert proc.stdout.splitlines() == ["reset-a,0,0", "reset-a,1,0", "reset-b,0,0", "reset-c,0,0"]
    saved = tmp_path / "before.csv"
    saved.write_text(ok(cluster, "reset-offsets", "resetters", "--all-topics", "--to-current", "--export"))
    ok(cluster, "reset-offsets", "resetters", "--all-topics", "--to-latest", "--execute")
    ok(cluster, "reset-offsets", "resetters", "--from-file", str(saved), "--execute")
    assert committed(cluster, "resetters", partitions + [("reset-c", 0)]) == {
        **latest, ("reset-a", 0): 0, ("reset-a", 1): 0, ("reset-c", 0): c[0]}

    # a file of several groups' rows (group,topic,partition,offset): this group's only, clamped
    several = tmp_path / "groups.csv"
    several.write_text("resetters,reset-a,0,5\nothers,reset-a,1,7\nresetters,reset-b,0,999\nresetters,reset-c,0,1\n")
    ok(cluster, "reset-offsets", "resetters", "--from-file", str(several), "--execute")
    assert committed(cluster, "resetters", partitions + [("reset-c", 0)]) == {
        ("reset-a", 0): 5, ("reset-a", 1): 0, ("reset-b", 0): b[0], ("reset-c", 0): 1}

    assert_one_line_error(groups(cluster, "reset-offsets", "idle", "--all-topics", "--to-earliest"), 1,
                          "has no committed offsets")
    bad = tmp_path / "bad.csv"
    bad.write_text("reset-a,zero,1\n")
    assert_one_line_error(groups(cluster, "reset-offsets", "resetters", "--from-file", str(bad)), 1,
                          "line 1", "topic,partition,offset")

