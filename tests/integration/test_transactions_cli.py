"""`odradek transactions` (kafka-transactions.sh, KIP-664) on a real cluster: list and describe
show a committed and an ongoing transaction as their coordinators hold them; find-hanging
finds a genuinely hanging transaction and abort ends it, so read_committed consumers move on.

A transaction cannot be made to hang by a client here: every partition's leader asks the
coordinator before a transaction's first batch (KIP-890), so every partition written to is owed
a marker. It hangs when the coordinator loses what it held, as after a lost replica of
__transaction_state: this module's cluster keeps one replica of each partition of it, and a test
kills the coordinator of a transaction whose producer is gone and deletes that partition's log
before starting the broker again.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from clients import create_topic
from confluent_kafka import Producer
from polling import wait_until

from cli_helpers import assert_one_line_error, run
from cluster_helpers import start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.coordinator.partitioning import partition_for
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

STATE_PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three brokers; __transaction_state has one replica per partition (see the docstring)."""
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), transaction_state_log_replication_factor=1,
                      transaction_state_log_num_partitions=STATE_PARTITIONS)
    try:
        yield c
    finally:
        c.down()


def transactional(bootstrap: str, transactional_id: str, **config: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **config})
    producer.init_transactions(60)
    return producer


def odradek_json(*args: str) -> object:
    proc = run(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_list_and_describe_show_a_committed_and_an_ongoing_transaction(cluster: LocalCluster) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, "tx-cli", 3, 3)
    committed = transactional(bs, "cli-committed")
    committed.begin_transaction()
    committed.produce("tx-cli", b"done", partition=0)
    committed.commit_transaction(30)
    ongoing = transactional(bs, "cli-ongoing", **{"transaction.timeout.ms": 120_000})
    ongoing.begin_transaction()
    ongoing.produce("tx-cli", b"open", partition=1)
    ongoing.produce("tx-cli", b"open", partition=2)
    assert ongoing.flush(30) == 0
    try:
        def listing() -> dict[str, dict]:
            return {t["transactional_id"]: t for t in odradek_json("transactions", "list", "--bootstrap-server", bs)}

        # the commit is answered once PrepareCommit is written; Complete follows the markers
        wait_until(lambda: listing()["cli-committed"]["state"] == "CompleteCommit", 10, "the commit to complete")
        listed = listing()
        assert listed["cli-ongoing"]["state"] == "Ongoing"
        assert {t["coordinator"] for t in listed.values()} <= set(cluster.broker_ids)
        text = run("transactions", "list", "--bootstrap-server", bs).stdout.splitlines()
        assert text[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        assert any(line.split()[0] == "cli-ongoing" and line.split()[3] == "Ongoing" for line in text[1:])
        only_open = odradek_json("transactions", "list", "--state", "Ongoing", "--bootstrap-server", bs)
        assert "cli-ongoing" in {t["transactional_id"] for t in only_open}  # type: ignore[union-attr]
        assert "cli-committed" not in {t["transactional_id"] for t in only_open}  # type: ignore[union-attr]
        by_producer = odradek_json("transactions", "list", "--producer-id",
                                   str(listed["cli-committed"]["producer_id"]), "--bootstrap-server", bs)
        assert [t["transactional_id"] for t in by_producer] == ["cli-committed"]  # type: ignore[union-attr]

        open_one = odradek_json("transactions", "describe", "cli-ongoing", "--bootstrap-server", bs)
        assert isinstance(open_one, dict)
        assert (open_one["state"], open_one["producer_id"], open_one["coordinator"], open_one["timeout_ms"]) == (
            "Ongoing", listed["cli-ongoing"]["producer_id"], listed["cli-ongoing"]["coordinator"], 120_000)
        assert open_one["partitions"] == [{"topic": "tx-cli", "partition": 1}, {"topic": "tx-cli", "partition": 2}]
        assert open_one["start_time_ms"] > 0 and 0 <= open_one["duration_ms"] < 60_000
        done = odradek_json("transactions", "describe", "--transactional-id", "cli-committed",
                            "--bootstrap-server", bs)
        assert isinstance(done, dict) and (done["state"], done["partitions"]) == ("CompleteCommit", [])
        text = run("transactions", "describe", "cli-ongoing", "--bootstrap-server", bs).stdout.splitlines()
        assert text[0].split()[:5] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                                       "TransactionState"]
        assert text[1].split()[-1] == "tx-cli-1,tx-cli-2"

        # an open transaction its coordinator still names is not hanging, however old
        assert run("transactions", "find-hanging", "--topic", "tx-cli", "--max-transaction-timeout", "0",
                   "--bootstrap-server", bs).stdout.strip() == "no hanging transactions"
        assert odradek_json("transactions", "find-hanging", "--max-transaction-timeout", "0",
                            "--bootstrap-server", bs) == []
    finally:
        ongoing.abort_transaction(30)


def test_mistakes_are_one_line_each(cluster: LocalCluster) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, "tx-mistakes", 1, 3)
    assert_one_line_error(run("transactions", "describe", "no-such-id", "--bootstrap-server", bs), 1,
                          "no-such-id", "TRANSACTIONAL_ID_NOT_FOUND")
    assert_one_line_error(run("transactions", "find-hanging", "--topic", "tx-nosuch", "--bootstrap-server", bs), 1,
                          "tx-nosuch", "does not exist")
    assert_one_line_error(run("transactions", "find-hanging", "--topic", "tx-mistakes", "--partition", "4",
                              "--bootstrap-server", bs), 1, "no partition 4")
    assert_one_line_error(run("transactions", "find-hanging", "--broker-id", "99", "--bootstrap-server", bs), 1,
                          "broker 99", "not a live broker")
    assert_one_line_error(run("transactions", "find-hanging", "--partition", "0", "--bootstrap-server", bs), 2,
                          "--partition needs --topic")
    assert_one_line_error(run("transactions", "abort", "--topic", "tx-nosuch", "--partition", "0", "--start-offset",
                              "0", "--bootstrap-server", bs), 1, "tx-nosuch", "does not exist")
    assert_one_line_error(run("transactions", "abort", "--topic", "tx-mistakes", "--partition", "0",
                              "--start-offset", "0", "--bootstrap-server", bs), 1,
                          "no open transaction starts at offset 0", "none is open")
    assert_one_line_error(run("transactions", "abort", "--topic", "tx-mistakes", "--partition", "0",
                              "--producer-id", "5", "--producer-epoch", "0", "--bootstrap-server", bs), 2,
                          "--coordinator-epoch")
    assert_one_line_error(run("transactions", "abort", "--topic", "tx-mistakes", "--partition", "0",
                              "--start-offset", "0", "--producer-id", "5", "--bootstrap-server", bs), 2,
                          "--start-offset")
    assert_one_line_error(run("transactions", "list", "--state", "Open", "--bootstrap-server", bs), 2, "Open")
    assert_one_line_error(run("consume", "tx-mistakes", "--isolation-level", "dirty", "--bootstrap-server", bs), 2,
                          "dirty")


def consumed(bs: str, topic: str, count: int | None, *args: str) -> list[str]:
    """`odradek consume` from the beginning: ``count`` records (failing if fewer come within
    10 s), or (None) whatever comes before a second passes with nothing."""
    limit = ["--timeout-s", "1"] if count is None else ["--max-messages", str(count), "--timeout-s", "10"]
    proc = run("consume", topic, "--from-beginning", *limit, *args, "--bootstrap-server", bs)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.slow  # a broker killed and its log deleted: make test-long (make test keeps the 15-minute budget)
def test_find_hanging_finds_what_a_lost_coordinator_left_open_and_abort_ends_it(cluster: LocalCluster) -> None:
    bs = cluster.bootstrap_servers
    create_topic(bs, "tx-hang", 2, 3)
    script = textwrap.dedent(f"""
        import os, signal
        from confluent_kafka import Producer
        p = Producer({{"bootstrap.servers": "{bs}", "transactional.id": "cli-hanging",
                      "transaction.timeout.ms": 900000}})
        p.init_transactions(60)
        p.begin_transaction()
        p.produce("tx-hang", b"stuck-0", partition=0)
        p.produce("tx-hang", b"stuck-1", partition=1)
        p.flush(30)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    after = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    for p in (0, 1):
        after.produce("tx-hang", b"after-%d" % p, partition=p)
    assert after.flush(30) == 0
    assert sorted(consumed(bs, "tx-hang", 4, "--isolation-level", "read_uncommitted")) == [
        "after-0", "after-1", "stuck-0", "stuck-1"]
    assert consumed(bs, "tx-hang", None) == []  # read_committed (the default) stops at the open transaction
    open_one = odradek_json("transactions", "describe", "cli-hanging", "--bootstrap-server", bs)
    assert isinstance(open_one, dict) and open_one["state"] == "Ongoing"
    assert run("transactions", "find-hanging", "--topic", "tx-hang", "--max-transaction-timeout", "0",
               "--bootstrap-server", bs).stdout.strip() == "no hanging transactions"

    # the coordinator loses the id: its one replica of the id's __transaction_state partition is gone
    coordinator = open_one["coordinator"]
    cluster.kill_broker(coordinator)
    shutil.rmtree(cluster.broker_dir(coordinator) / "data"
                  / f"__transaction_state-{partition_for('cli-hanging', STATE_PARTITIONS)}")
    cluster.start_broker(coordinator)
    cluster.wait_ready(cluster.broker_ids, 30)
    wait_until(lambda: "TRANSACTIONAL_ID_NOT_FOUND" in run("transactions", "describe", "cli-hanging",
                                                           "--bootstrap-server", bs).stderr,
               30, "the restarted coordinator to have no record of cli-hanging")

    hanging = odradek_json("transactions", "find-hanging", "--topic", "tx-hang", "--max-transaction-timeout", "0",
                           "--bootstrap-server", bs)
    assert isinstance(hanging, list)
    assert [(h["topic"], h["partition"], h["producer_id"], h["start_offset"]) for h in hanging] == [
        ("tx-hang", 0, open_one["producer_id"], 0), ("tx-hang", 1, open_one["producer_id"], 0)]
    # younger than the largest transaction timeout (15 minutes by default): not yet hanging
    assert odradek_json("transactions", "find-hanging", "--topic", "tx-hang", "--bootstrap-server", bs) == []
    # a broker's own replicas, followers too, see the same
    follower = next(b for b in cluster.broker_ids if b != coordinator)
    by_broker = odradek_json("transactions", "find-hanging", "--broker-id", str(follower),
                             "--max-transaction-timeout", "0", "--bootstrap-server", bs)
    assert {(h["topic"], h["partition"]) for h in by_broker} == {("tx-hang", 0), ("tx-hang", 1)}  # type: ignore[union-attr]
    text = run("transactions", "find-hanging", "--topic", "tx-hang", "--partition", "1", "--max-transaction-timeout",
               "0", "--bootstrap-server", bs).stdout.splitlines()
    assert text[0].split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                               "LastTimestamp", "Duration(min)"]
    assert text[1].split()[:2] == ["tx-hang", "1"] and len(text) == 2

    # abort partition 0 by its start offset, partition 1 by the producer find-hanging showed
    assert_one_line_error(run("transactions", "abort", "--topic", "tx-hang", "--partition", "0", "--start-offset",
                              "1", "--bootstrap-server", bs), 1, "no open transaction starts at offset 1",
                          "open ones start at 0")
    aborted = odradek_json("transactions", "abort", "--topic", "tx-hang", "--partition", "0", "--start-offset", "0",
                           "--bootstrap-server", bs)
    assert aborted == {"topic": "tx-hang", "partition": 0, "producer_id": open_one["producer_id"],
                       "producer_epoch": open_one["producer_epoch"], "coordinator_epoch": 0}
    one = hanging[1]
    proc = run("transactions", "abort", "--topic", "tx-hang", "--partition", "1", "--producer-id",
               str(one["producer_id"]), "--producer-epoch", str(one["producer_epoch"]), "--coordinator-epoch",
               str(one["coordinator_epoch"]), "--bootstrap-server", bs)
    assert proc.returncode == 0 and "aborted the transaction of producer" in proc.stdout, proc.stderr
    # the markers are in the ISR when abort answers: the last stable offset is past them already
    assert sorted(consumed(bs, "tx-hang", 2, "--isolation-level", "read_committed")) == ["after-0", "after-1"]
    assert odradek_json("transactions", "find-hanging", "--topic", "tx-hang", "--max-transaction-timeout", "0",
                        "--bootstrap-server", bs) == []
