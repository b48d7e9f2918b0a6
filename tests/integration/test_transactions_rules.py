"""Transactions' rules at the edges, on a real cluster: a producer stopped past its
transaction's timeout cannot commit when it wakes (its transaction was aborted and its epoch
fenced), requests out of turn get the error codes Kafka gives, a late batch of a transaction
already committed is refused (KIP-890 part 1 against KAFKA-17754), and read_committed is honoured
by every reader (kcat and aiokafka besides librdkafka), while read_uncommitted shows what was
aborted."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from clients import create_topic
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from polling import wait_until
from test_transactions import read_all, transactional

from odradek.admin.admin_client import send_request
from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol.records import TRANSACTIONAL_FLAG, build_batch

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 10, 22, 24, 26


def test_a_producer_stopped_past_its_timeout_cannot_commit_when_it_wakes(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "txn-sleeper", 1, 3)
    script = textwrap.dedent(f"""
        import sys
        from confluent_kafka import KafkaException, Producer
        p = Producer({{"bootstrap.servers": "{bootstrap}", "transactional.id": "txn-sleeper",
                      "transaction.timeout.ms": 2000}})
        p.init_transactions(60)
        p.begin_transaction()
        p.produce("txn-sleeper", b"late")
        p.flush(30)
        print("produced", flush=True)
        sys.stdin.readline()  # stopped here by the test, then woken
        try:
            p.commit_transaction(30)
            print("committed", flush=True)
        except KafkaException as exc:
            print("refused", exc.args[0].code(), flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "produced"
        os.kill(proc.pid, signal.SIGSTOP)
        # aborted by the coordinator: read_committed moves past the record, which stays invisible
        after = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        after.produce("txn-sleeper", b"after")
        assert after.flush(30) == 0
        wait_until(lambda: read_all(bootstrap, "txn-sleeper", 1, "read_committed", timeout_s=2) == [b"after"], 30,
                   "the stopped producer's transaction to be aborted")
        os.kill(proc.pid, signal.SIGCONT)
        proc.stdin.write("\n")
        proc.stdin.flush()
        outcome = proc.stdout.readline().strip()
        assert outcome.startswith("refused"), outcome
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert read_all(bootstrap, "txn-sleeper", 1, "read_committed") == [b"after"]


def coordinator_address(c: LocalCluster, transactional_id: str) -> str:
    answer = send_request(c.bootstrap_servers.split(",")[0], FIND_COORDINATOR, 3,
                          {"key": transactional_id, "key_type": 1}, 10)
    assert answer.error_code == 0, answer
    return f"{answer.host}:{answer.port}"


def test_requests_out_of_turn_get_kafkas_error_codes(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "txn-rules", 1, 3)
    producer = transactional(cluster.bootstrap_servers, "txn-rules-producer")  # makes the id exist
    producer.flush(1)
    wait_until(lambda: send_request(cluster.bootstrap_servers.split(",")[0], FIND_COORDINATOR, 3,
                                    {"key": "txn-rules-producer", "key_type": 1}, 10).error_code == 0, 30,
               "a coordinator")
    address = coordinator_address(cluster, "txn-rules-producer")
    init = send_request(address, INIT_PRODUCER_ID, 4, {"transactional_id": "txn-rules-producer",
                                                       "transaction_timeout": 60000, "producer_id": -1,
                                                       "producer_epoch": -1}, 10)
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch
    # EndTxn with no transaction open
    end = send_request(address, END_TXN, 3, {"transactional_id": "txn-rules-producer", "producer_id": pid,
                                             "producer_epoch": epoch, "committed": True}, 10)
    assert end.error_code == 48  # INVALID_TXN_STATE
    # AddPartitionsToTxn with an older epoch: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before
    for version, expected in ((3, 90), (1, 47)):
        add = send_request(address, ADD_PARTITIONS_TO_TXN, version, {
            "v3_and_below_transactional_id": "txn-rules-producer", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch - 1,
            "v3_and_below_topics": [{"name": "txn-rules", "partitions": [0]}]}, 10)
        errors = [p.partition_error_code for t in add.results_by_topic_v3_and_below for p in t.results_by_partition]
        assert errors == [expected], (version, errors)
    # an unknown topic: UNKNOWN_TOPIC_OR_PARTITION for it, OPERATION_NOT_ATTEMPTED for the rest
    add = send_request(address, ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": "txn-rules-producer", "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "txn-rules", "partitions": [0]}, {"name": "no-such-topic", "partitions": [0]}]}, 10)
    errors = {t.name: [p.partition_error_code for p in t.results_by_partition] for t in add.results_by_topic_v3_and_below}
    assert errors == {"txn-rules": [55], "no-such-topic": [3]}
    # an id asked of a broker that is not its coordinator
    other = next(f"{cluster.host}:{cluster.broker_port(b)}" for b in cluster.broker_ids
                 if f"{cluster.host}:{cluster.broker_port(b)}" != address)
    wrong = send_request(other, END_TXN, 3, {"transactional_id": "txn-rules-producer", "producer_id": pid,
                                             "producer_epoch": epoch, "committed": True}, 10)
    assert wrong.error_code == 16  # NOT_COORDINATOR


def test_kcat_and_aiokafka_read_committed_skip_an_aborted_transaction(cluster: LocalCluster) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "txn-readers", 1, 3)
    producer = transactional(bootstrap, "txn-readers-producer")
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce("txn-readers", f"{outcome}-{i}".encode())
        producer.flush(30)
        producer.commit_transaction(30) if outcome == "commit" else producer.abort_transaction(30)

    def kcat(isolation: str) -> list[str]:
        run = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", "txn-readers", "-o", "beginning", "-e", "-q",
                              "-X", f"isolation.level={isolation}"], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return run.stdout.split()
    assert kcat("read_committed") == ["commit-0", "commit-1", "commit-2"] * 2
    assert kcat("read_uncommitted").count("abort-0") == 1

    async def aiokafka(isolation: str) -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition("txn-readers", 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            # to the end of the log (past the last marker: its last stable offset under
            # read_committed): every record either reader is ever given is read by then
            end = (await consumer.end_offsets([tp]))[tp]
            values: list[bytes] = []
            deadline = time.monotonic() + 30
            while await consumer.position(tp) < end and time.monotonic() < deadline:
                batch = await consumer.getmany(tp, timeout_ms=500)
                values.extend(m.value for m in batch.get(tp, []))
            return values
        finally:
            await consumer.stop()
    assert asyncio.run(aiokafka("read_committed")) == [b"commit-0", b"commit-1", b"commit-2"] * 2
    assert b"abort-1" in asyncio.run(aiokafka("read_uncommitted"))


def test_a_late_batch_of_a_committed_transaction_is_refused_and_opens_nothing(cluster: LocalCluster) -> None:
    """KAFKA-17754's late message, sent by hand: a transactional batch of a transaction that
    has already committed (a retry held up in the network) reaches its leader. KIP-890's check
    with the coordinator refuses it: nothing is appended, no transaction is left open, and the
    partition's last stable offset stays at its high watermark."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "txn-late", 1, 3)
    tid = "txn-late-producer"
    transactional(bootstrap, tid).flush(1)   # the id exists, its coordinator is loaded
    address = coordinator_address(cluster, tid)
    init = send_request(address, INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                                       "producer_id": -1, "producer_epoch": -1}, 10)
    pid, epoch = init.producer_id, init.producer_epoch
    leader = next(p.leader for p in AdminClient({"bootstrap.servers": bootstrap}).list_topics(
        "txn-late", timeout=10).topics["txn-late"].partitions.values())
    leader_address = f"{cluster.host}:{cluster.broker_port(leader)}"

    def produce(seq: int, value: bytes) -> int:
        records = build_batch([(None, value)], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                              attributes=TRANSACTIONAL_FLAG)
        resp = send_request(leader_address, 0, 9, {"acks": -1, "timeout": 10_000, "transactional_id": tid,
                                                   "topic_data": [{"name": "txn-late", "partition_data": [
                                                       {"index": 0, "records": records}]}]}, 10)
        return int(resp.responses[0].partition_responses[0].error_code)

    add = send_request(address, ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "txn-late", "partitions": [0]}]}, 10)
    assert [p.partition_error_code for t in add.results_by_topic_v3_and_below for p in t.results_by_partition] == [0]
    assert produce(0, b"in-time") == 0
    end = send_request(address, END_TXN, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                             "committed": True}, 10)
    assert end.error_code == 0
    wait_until(lambda: read_all(bootstrap, "txn-late", 1, "read_committed", timeout_s=2) == [b"in-time"], 30,
               "the commit marker")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-late-offsets"})
    try:
        high = consumer.get_watermark_offsets(TopicPartition("txn-late", 0), timeout=10)[1]
        assert produce(1, b"late") == 48   # INVALID_TXN_STATE: its transaction is over
        assert consumer.get_watermark_offsets(TopicPartition("txn-late", 0), timeout=10)[1] == high
    finally:
        consumer.close()
    assert read_all(bootstrap, "txn-late", 1, "read_uncommitted", timeout_s=3) == [b"in-time"]
    assert read_all(bootstrap, "txn-late", 1, "read_committed", timeout_s=3) == [b"in-time"]
