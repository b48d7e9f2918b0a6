"""What an operator reaches for at a terminal, against a real 3-broker cluster: finding the
cluster from its data dir or the environment, per-partition offsets and min-ISR filters,
reading one partition from an offset in kcat's format, following a topic, producing to a
partition with headers, --watch, and a dead broker named by `status`.

Commands run in-process through cli.main where they end by themselves, as subprocesses where
the test must interrupt them (--follow, --watch). The broker killed in the last test is the
module's own cluster's.
"""
from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import odradek.cli.main as cli
from cluster_helpers import SHORT_SESSION_TIMEOUT_MS, start_cluster
from odradek.admin.admin_client import ZooKeeperProgress
from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.metadata import BrokerInfo
from odradek.zk import paths
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration
ODRADEK = str(Path(sys.executable).with_name("odradek"))


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's 3 brokers, on the shortest ZooKeeper session ZooKeeper grants: the last test
    kills one and waits for its session to expire."""
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("cluster"),
                      zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    try:
        yield c
    finally:
        c.down()


def odradek(capsys: pytest.CaptureFixture[str], *argv: str, stdin: bytes = b"",
            monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    """cli.main in-process: (exit status, stdout, stderr)."""
    if monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    try:
        status = cli.main(list(argv))
    except SystemExit as exc:  # `status` exits 3 for an unhealthy cluster
        status = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return status, out, err


def test_data_dir_and_environment_find_the_cluster(cluster: LocalCluster, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    dd = str(cluster.data_dir)
    assert odradek(capsys, "topics", "create", "found", "--partitions", "1", "--replication-factor", "3",
                   "--data-dir", dd)[:2] == (0, "created topic found (1 partition, replication factor 3)\n")
    assert "found" in odradek(capsys, "topics", "list", "--data-dir", dd)[1].split()
    # broker 1 is given first but closed: librdkafka and the raw requests go on to the others
    monkeypatch.setenv(cli.BOOTSTRAP_ENV, f"127.0.0.1:1,{cluster.bootstrap_servers}")
    assert "found" in odradek(capsys, "topics", "list")[1].split()
    assert "found" in odradek(capsys, "topics", "describe", "found")[1]


def test_produce_to_a_partition_with_headers_and_consume_it_in_kcat_format(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bs = cluster.bootstrap_servers
    odradek(capsys, "topics", "create", "fmt", "--partitions", "3", "--replication-factor", "3",
            "--bootstrap-server", bs)
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(5))
    status, _, err = odradek(capsys, "produce", "fmt", "--partition", "1", "--key-separator", ":", "--header",
                             "app=cli", "--header", "n=1", "--bootstrap-server", bs, stdin=lines,
                             monkeypatch=monkeypatch)
    assert status == 0 and "produced 5 records" in err
    status, out, err = odradek(capsys, "consume", "fmt", "--partition", "1", "--offset", "2", "--max-messages", "3",
                               "--format", r"%t/%p@%o %k=%v [%h]\n", "--timeout-s", "15", "--bootstrap-server", bs)
    assert status == 0, err
    assert out.splitlines() == [f"fmt/1@{i} k{i}=v{i} [app=cli,n=1]" for i in (2, 3, 4)]
    # -N: the last N records of each partition read; partition 0 is empty
    status, out, _ = odradek(capsys, "consume", "fmt", "--partition", "0", "--partition", "1", "--offset", "-2",
                             "--max-messages", "2", "--timeout-s", "15", "--bootstrap-server", bs)
    assert status == 0 and out.splitlines() == ["v3", "v4"]
    status, _, err = odradek(capsys, "produce", "fmt", "--partition", "7", "--bootstrap-server", bs,
                             stdin=b"x\n", monkeypatch=monkeypatch)
    assert status == 1 and "no partition 7" in err


def test_the_broker_decides_how_large_a_record_may_be(cluster: LocalCluster, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    bs = cluster.bootstrap_servers
    odradek(capsys, "topics", "create", "big", "--partitions", "1", "--replication-factor", "1",
            "--bootstrap-server", bs)
    status, _, err = odradek(capsys, "produce", "big", "--bootstrap-server", bs,
                             stdin=b"small\n" + b"x" * (1 << 20) + b"\n", monkeypatch=monkeypatch)
    assert status == 1 and err.count("\n") == 1
    assert err.startswith("odradek: error: 1 of 2 records not delivered to big: MESSAGE_TOO_LARGE")
    assert "record 2, 1,048,576 bytes, is over topic big's max.message.bytes" in err
    odradek(capsys, "topics", "alter", "big", "--config", "max.message.bytes=3000000", "--bootstrap-server", bs)
    large = b"y" * 2_500_000  # over librdkafka's default message.max.bytes and max.partition.fetch.bytes
    assert odradek(capsys, "produce", "big", "--bootstrap-server", bs, stdin=large + b"\n",
                   monkeypatch=monkeypatch)[0] == 0
    status, out, _ = odradek(capsys, "consume", "big", "--from-beginning", "--max-messages", "2",
                             "--bootstrap-server", bs)
    assert status == 0 and out.encode() == b"small\n" + large + b"\n"


def test_progress_counts_what_advances_and_reaches_the_total_only_when_done(cluster: LocalCluster) -> None:
    """Leaders elected in ZooKeeper as the controller writes them, topics whose deletion
    completed; the total only once the command's work is done."""
    from odradek.admin.admin_client import create_topic
    from odradek.admin.topic_command import delete_topics

    bs, zk = cluster.bootstrap_servers, cluster.zookeeper_connect
    created: list[tuple[int, int]] = []
    create_topic(bs, "bar", 1000, 1, progress=lambda done, total: created.append((done, total)), zookeeper=zk)
    assert created[-1] == (1000, 1000) and all(done < 1000 for done, _ in created[:-1])
    for name in ("gone1", "gone2", "gone3"):
        create_topic(bs, name, 1, 1)
    deleted: list[tuple[int, int]] = []
    delete_topics(bs, ["bar", "gone1", "gone2", "gone3"], progress=lambda done, total: deleted.append((done, total)),
                  zookeeper=zk)
    assert deleted[-1] == (4, 4) and all(done < 4 for done, _ in deleted[:-1])
    assert [done for done, _ in deleted] == sorted(done for done, _ in deleted)
    zk_progress = ZooKeeperProgress(zk)
    try:
        assert zk_progress.deleted(["bar", "gone1", "gone2", "gone3"]) == 4 and zk_progress.elected("bar", 3) == 0
    finally:
        zk_progress.close()


def test_bench_produce_on_a_data_dir_deletes_its_topic_unless_kept(cluster: LocalCluster,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    dd = str(cluster.data_dir)
    run = ["bench", "produce", "--data-dir", dd, "--messages", "100", "--partitions", "1", "--replication-factor",
           "1", "--json"]
    status, out, _ = odradek(capsys, *run)
    assert status == 0 and json.loads(out)["messages"] == 100
    assert not [t for t in odradek(capsys, "topics", "list", "--data-dir", dd)[1].split() if t.startswith("bench-")]
    assert odradek(capsys, *run, "--keep")[0] == 0
    kept = [t for t in odradek(capsys, "topics", "list", "--data-dir", dd)[1].split() if t.startswith("bench-")]
    assert len(kept) == 1 and kept[0].startswith("bench-rf1-acksall-")


def test_describe_offsets_and_min_isr_filters(cluster: LocalCluster, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    bs = cluster.bootstrap_servers
    odradek(capsys, "topics", "create", "strict", "--partitions", "2", "--replication-factor", "3",
            "--config", "min.insync.replicas=3", "--bootstrap-server", bs)
    odradek(capsys, "topics", "create", "lax", "--partitions", "2", "--replication-factor", "3",
            "--bootstrap-server", bs)
    odradek(capsys, "produce", "strict", "--partition", "0", "--bootstrap-server", bs, stdin=b"a\nb\nc\n",
            monkeypatch=monkeypatch)
    odradek(capsys, "topics", "delete-records", "strict", "--partition", "0", "--before", "1",
            "--bootstrap-server", bs)
    [topic] = json.loads(odradek(capsys, "topics", "describe", "strict", "--offsets", "--json",
                               "--bootstrap-server", bs)[1])
    assert topic["min_insync_replicas"] == 3 and topic["configs"] == {"min.insync.replicas": "3"}
    assert [(p["log_start_offset"], p["high_watermark"]) for p in topic["partitions"]] == [(1, 3), (0, 0)]
    table = odradek(capsys, "topics", "describe", "strict", "--offsets", "--bootstrap-server", bs)[1].splitlines()
    assert table[0].split()[-2:] == ["LogStartOffset", "HighWatermark"] and table[1].split()[-2:] == ["1", "3"]
    # a full ISR of 3: at min ISR for min.insync.replicas=3, neither for the default 1
    at_min = json.loads(odradek(capsys, "topics", "describe", "--at-min-isr", "--json", "--bootstrap-server", bs)[1])
    assert {t["name"] for t in at_min} >= {"strict"} and "lax" not in {t["name"] for t in at_min}
    under = json.loads(odradek(capsys, "topics", "describe", "--under-min-isr", "--json", "--bootstrap-server", bs)[1])
    assert not {"strict", "lax"} & {t["name"] for t in under}


def test_consume_follow_waits_past_the_idle_timeout(cluster: LocalCluster, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bs = cluster.bootstrap_servers
    odradek(capsys, "topics", "create", "tail", "--partitions", "1", "--replication-factor", "3",
            "--bootstrap-server", bs)
    follower = subprocess.Popen([ODRADEK, "consume", "tail", "-f", "--timeout-s", "1", "--bootstrap-server", bs],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # past --timeout-s: without --follow it would have exited
        assert follower.poll() is None
        odradek(capsys, "produce", "tail", "--bootstrap-server", bs, stdin=b"late\n", monkeypatch=monkeypatch)
        assert follower.stdout.readline() == "late\n"  # flushed per record
    finally:
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=30)
    assert "Traceback" not in err


def test_status_watch_redraws_until_ctrl_c(cluster: LocalCluster) -> None:
    watcher = subprocess.Popen([ODRADEK, "status", "--data-dir", str(cluster.data_dir), "--watch", "0.5"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    frames = 0
    try:
        for line in watcher.stdout:
            frames += line.startswith("every 0.5 s:")
            if frames == 2:
                break
    finally:
        watcher.send_signal(signal.SIGINT)
        _, err = watcher.communicate(timeout=30)
    assert frames == 2 and watcher.returncode == 0 and "Traceback" not in err


def test_status_from_zookeeper_alone_reads_registrations_and_refuses_a_wrong_chroot(
        zookeeper: ZooKeeperServer, capsys: pytest.CaptureFixture[str]) -> None:
    """A registration written as a broker writes it (zk.paths.encode_broker_info), in a chroot
    of its own: the module's cluster serves no metrics."""
    zk = f"{zookeeper.connect_string}/status-{uuid.uuid4().hex[:8]}"
    client = connect_zk(zk)
    try:
        client.ensure_path("/")
        client.create("/brokers/ids/7", paths.encode_broker_info(BrokerInfo(7, "127.0.0.1", 1), 0,
                                                                "http://127.0.0.1:2/metrics"), makepath=True)
        # no cluster.json here: the metrics URL comes from the registration
        state = json.loads(odradek(capsys, "status", "--zookeeper", zk, "--json")[1])
        assert [(b["id"], b["metrics_url"]) for b in state["brokers"]] == [(7, "http://127.0.0.1:2/metrics")]
    finally:
        client.stop()
        client.close()
    status, out, err = odradek(capsys, "status", "--zookeeper", zk + "/nochroot")
    assert status == 1 and out == "" and err.count("\n") == 1
    assert f"no odradek/Kafka cluster under ZooKeeper {zk}/nochroot (wrong chroot?)" in err


def test_a_dead_broker_is_named_and_its_offline_partition_fails_consume_and_produce(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Last in the module: it kills broker 3 (and starts it again)."""
    bs, dd = cluster.bootstrap_servers, str(cluster.data_dir)
    odradek(capsys, "topics", "create", "lonely", "--partitions", "1", "--replication-factor", "1",
            "--bootstrap-server", bs)
    odradek(capsys, "topics", "create", "needs3", "--partitions", "1", "--replication-factor", "3",
            "--config", "min.insync.replicas=3", "--bootstrap-server", bs)
    [leader] = json.loads(odradek(capsys, "topics", "describe", "lonely", "--json", "--bootstrap-server", bs)[1])
    victim = leader["partitions"][0]["leader"]
    cluster.kill_broker(victim)
    try:
        deadline = time.monotonic() + 30
        while True:
            code, out, _ = odradek(capsys, "status", "--data-dir", dd, "--json")
            state = json.loads(out)
            # dead at once (its pid is gone); offline once ZooKeeper expired its session
            if state["dead_brokers"] == [victim] and not state["brokers"][victim - 1]["registered"]:
                assert code == 3 and not state["healthy"]
                break
            assert time.monotonic() < deadline, state
            time.sleep(0.5)
        assert {b["id"]: b["live"] for b in state["brokers"]} == {1: True, 2: True, 3: True, victim: False}
        dead = next(b for b in state["brokers"] if b["id"] == victim)
        assert dead["port"] == cluster.broker_port(victim) and "metrics_url" in dead
        assert f"dead brokers:       {victim} (" in odradek(capsys, "status", "--data-dir", dd)[1]
        status, _, err = odradek(capsys, "consume", "lonely", "--from-beginning", "--timeout-s", "1",
                                 "--data-dir", dd)
        assert status == 1 and "partition 0 offline (no leader): its records were not read" in err
        assert err.count("\n") == 1
        # the broker answers NOT_ENOUGH_REPLICAS, which librdkafka retries until the timeout
        status, _, err = odradek(capsys, "produce", "needs3", "--timeout-s", "2", "--data-dir", dd, stdin=b"z\n",
                                 monkeypatch=monkeypatch)
        assert status == 1 and err.count("\n") == 1
        assert ("1 of 1 record not delivered to needs3: _MSG_TIMED_OUT: Local: Message timed out; partition 0 "
                "has 2 in-sync replicas, min.insync.replicas is 3: start the stopped brokers, or produce with "
                "--acks 1") in err
    finally:
        cluster.start_broker(victim)
        cluster.wait_ready(cluster.broker_ids, timeout=60)
