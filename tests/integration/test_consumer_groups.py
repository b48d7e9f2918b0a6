"""Consumer groups with real clients on a real cluster: three-member groups of kafka-python,
confluent-kafka, aiokafka and kcat -G each read every record exactly once and commit; members
join and leave under the eager and the cooperative-sticky protocols; a static member restarts
without a rebalance; and the coordinator's broker dies (kill -9) mid-run without losing a
committed offset."""
from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from clients import create_topic, produce_acks_all
from cluster_state import full_isr, known_everywhere
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from polling import wait_until
from wire import RawConnection, coordinator_connection

from cli_helpers import ODRADEK
from cluster_helpers import SHORT_SESSION_TIMEOUT_MS, start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, partition_for
from odradek.protocol.errors import ErrorCode
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

PARTITIONS = 6
RECORDS = 300
#: a short initial rebalance delay keeps the tests quick; the behaviour is Kafka's at any value
BROKER_ARGS = {"group_initial_rebalance_delay_ms": 100, "min_insync_replicas": 2}


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("groups"), 3, **BROKER_ARGS)
    try:
        yield c
    finally:
        c.down()


def new_topic(c: LocalCluster, prefix: str) -> str:
    """A new topic every broker knows: CreateTopics answers once the broker that took it knows
    the leaders, and a coordinator on another broker answers UNKNOWN_TOPIC_OR_PARTITION for a
    topic its metadata does not have yet."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap_servers, name, PARTITIONS, 3)
    wait_until(lambda: known_everywhere(c, name), 30, f"every broker to know {name}")
    return name


def describe(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(15)


def assignment_of(bootstrap: str, group: str) -> list[tuple[str, int]] | None:
    """Every member's assigned partitions, if the group is Stable; else None."""
    try:
        d = describe(bootstrap, group)
    except Exception:  # noqa: BLE001 - the coordinator may be moving
        return None
    if d.state != ConsumerGroupState.STABLE:
        return None
    return [(tp.topic, tp.partition) for m in d.members for tp in m.assignment.topic_partitions]


def wait_stable(bootstrap: str, group: str, members: int, topic: str, timeout_s: float = 60) -> None:
    """Until the group is Stable with `members` members that own every partition exactly once."""
    def settled() -> bool:
        try:
            d = describe(bootstrap, group)
        except Exception:  # noqa: BLE001
            return False
        owned = [(tp.topic, tp.partition) for m in d.members for tp in m.assignment.topic_partitions]
        return (d.state == ConsumerGroupState.STABLE and len(d.members) == members
                and sorted(owned) == [(topic, p) for p in range(PARTITIONS)])
    wait_until(settled, timeout_s, f"group {group} stable with {members} members")


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.offset
                for tp in consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=15)}
    finally:
        consumer.close()


def log_ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "log-ends"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


# -- three members of each client --------------------------------------------------------------

class Tally:
    """What every member of a group received, as (partition, offset) per member."""

    def __init__(self, members: int) -> None:
        self.lock = threading.Lock()
        self.seen: list[list[tuple[int, int]]] = [[] for _ in range(members)]
        self.errors: list[str] = []

    def add(self, member: int, partition: int, offset: int) -> None:
        with self.lock:
            self.seen[member].append((partition, offset))

    def total(self) -> int:
        with self.lock:
            return sum(len(s) for s in self.seen)


def confluent_member(bootstrap: str, group: str, topic: str, i: int, tally: Tally, stop: threading.Event) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "client.id": f"confluent-{i}"})
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                tally.errors.append(str(msg.error()))
                continue
            tally.add(i, msg.partition(), msg.offset())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def kafka_python_member(bootstrap: str, group: str, topic: str, i: int, tally: Tally, stop: threading.Event) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group, client_id=f"kp-{i}",
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    tally.add(i, r.partition, r.offset)
        consumer.commit()
    finally:
        consumer.close()


def aiokafka_member(bootstrap: str, group: str, topic: str, i: int, tally: Tally, stop: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer

    async def run() -> None:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=f"aio-{i}",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            while not stop.is_set():
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    for r in records:
                        tally.add(i, r.partition, r.offset)
            await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(run())


def kcat_member(bootstrap: str, group: str, topic: str, i: int, tally: Tally, stop: threading.Event) -> None:
    """kcat's balanced consumer (-G): librdkafka's auto commit, and a final commit when it closes
    on SIGTERM."""
    proc = subprocess.Popen(["kcat", "-b", bootstrap, "-G", group, "-o", "beginning", "-f", "%p %o\\n",
                             "-X", f"client.id=kcat-{i}", "-q", "-u", topic], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            partition, offset = line.split()
            tally.add(i, int(partition), int(offset))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        stop.wait()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


MEMBERS: dict[str, Callable[..., None]] = {"confluent-kafka": confluent_member, "kafka-python": kafka_python_member,
                                           "aiokafka": aiokafka_member, "kcat": kcat_member}


@pytest.mark.parametrize("client", sorted(MEMBERS))
def test_three_members_read_every_record_exactly_once_and_commit(cluster: LocalCluster, client: str) -> None:
    boot, topic, group = cluster.bootstrap_servers, new_topic(cluster, "grp"), f"g-{uuid.uuid4().hex[:8]}"
    tally, stop = Tally(3), threading.Event()
    threads = [threading.Thread(target=MEMBERS[client], args=(boot, group, topic, i, tally, stop)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        wait_stable(boot, group, 3, topic)
        produced = produce_acks_all(boot, topic, RECORDS)
        wait_until(lambda: tally.total() >= RECORDS, 60, f"{RECORDS} records across the group")
        time.sleep(0.5)  # a duplicate would arrive now
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    seen = [r for member in tally.seen for r in member]
    assert sorted(seen) == sorted((p, o) for p, o, _, _ in produced), "every record exactly once"
    assert all(tally.seen), f"every member received records: {[len(s) for s in tally.seen]}"
    assert not tally.errors
    assert committed(boot, group, topic) == log_ends(boot, topic)


# -- members joining and leaving ---------------------------------------------------------------

class CommittingMember:
    """A confluent-kafka member that commits each record synchronously before the next poll, so
    a rebalance can never hand a read but uncommitted record to another member."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, tally: Tally, index: int,
                 strategy: str, instance_id: str | None = None) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "client.id": name, "partition.assignment.strategy": strategy,
                "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
        if instance_id is not None:
            conf["group.instance.id"] = instance_id
        self.consumer = Consumer(conf)
        self.assignments: list[list[int]] = []
        self.tally, self.index = tally, index
        self.stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._assigned)
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assignments.append(sorted(tp.partition for tp in partitions))

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                self.tally.errors.append(str(msg.error()))
                continue
            self.tally.add(self.index, msg.partition(), msg.offset())
            try:
                self.consumer.commit(msg, asynchronous=False)
            except KafkaException as exc:  # kept: a rebalance test must fail on it, not hang
                self.tally.errors.append(f"commit: {exc}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.consumer.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_members_joining_and_leaving_keep_every_record_once(cluster: LocalCluster, strategy: str) -> None:
    boot, topic, group = cluster.bootstrap_servers, new_topic(cluster, "churn"), f"g-{uuid.uuid4().hex[:8]}"
    tally = Tally(3)
    members = [CommittingMember(boot, group, topic, f"m{i}", tally, i, strategy) for i in range(2)]
    produced = []
    try:
        wait_stable(boot, group, 2, topic)
        produced += produce_acks_all(boot, topic, 100, "a")
        wait_until(lambda: tally.total() >= len(produced), 60, "the first records")

        members.append(CommittingMember(boot, group, topic, "m2", tally, 2, strategy))  # one joins
        wait_stable(boot, group, 3, topic)
        produced += produce_acks_all(boot, topic, 100, "b")
        wait_until(lambda: tally.total() >= len(produced), 60, "records after the join")
        assert tally.seen[2], "the member that joined got records"

        members.pop(0).close()  # one leaves
        wait_stable(boot, group, 2, topic)
        produced += produce_acks_all(boot, topic, 100, "c")
        wait_until(lambda: tally.total() >= len(produced), 60, "records after the leave")
        time.sleep(0.5)
    finally:
        for m in members:
            m.close()
    seen = [r for member in tally.seen for r in member]
    assert sorted(seen) == sorted((p, o) for p, o, _, _ in produced), "every record exactly once"
    assert not tally.errors
    assert committed(boot, group, topic) == log_ends(boot, topic)


def test_a_static_member_restarts_without_a_rebalance(cluster: LocalCluster) -> None:
    """KIP-345: a member with group.instance.id leaves no LeaveGroup when it closes and, back
    within its session timeout, takes its old partitions without the others noticing."""
    boot, topic, group = cluster.bootstrap_servers, new_topic(cluster, "static"), f"g-{uuid.uuid4().hex[:8]}"
    tally = Tally(3)
    a = CommittingMember(boot, group, topic, "a", tally, 0, "range", instance_id="a")
    b = CommittingMember(boot, group, topic, "b", tally, 1, "range", instance_id="b")
    try:
        wait_stable(boot, group, 2, topic)
        wait_until(lambda: a.assignments and b.assignments, 30, "both members assigned")
        before = a.assignments[-1]
        a.close()
        a = CommittingMember(boot, group, topic, "a", tally, 2, "range", instance_id="a")
        wait_until(lambda: a.assignments, 30, "the restarted member assigned")
        produced = produce_acks_all(boot, topic, 100)
        wait_until(lambda: tally.total() >= len(produced), 60, "records after the restart")
        assert a.assignments == [before], "the restarted member got its old partitions back"
        assert len(b.assignments) == 1, f"the other member was not rebalanced: {b.assignments}"
        assert tally.seen[2], "the restarted member consumed"
    finally:
        a.close()
        b.close()


# -- the coordinator dies ----------------------------------------------------------------------

def coordinator_of(c: LocalCluster, group: str) -> int:
    from odradek.admin.admin_client import describe_topics

    partition = partition_for(group, 50)
    parts = describe_topics(c.bootstrap_servers, [OFFSETS_TOPIC])[0]["partitions"]
    return next(p["leader"] for p in parts if p["partition"] == partition)


def test_coordinator_killed_mid_run_keeps_committed_offsets(cluster_factory: Any) -> None:
    c = cluster_factory(3, **BROKER_ARGS, zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    boot, topic, group = c.bootstrap_servers, new_topic(c, "coord"), f"g-{uuid.uuid4().hex[:8]}"
    tally = Tally(3)
    members = [CommittingMember(boot, group, topic, f"m{i}", tally, i, "range") for i in range(3)]
    try:
        wait_stable(boot, group, 3, topic)
        produced = produce_acks_all(boot, topic, 600, "before")
        wait_until(lambda: tally.total() >= 200, 60, "members consuming")
        before = committed(boot, group, topic)
        coordinator = coordinator_of(c, group)
        c.kill_broker(coordinator)  # mid-run: about 400 records still to read
        # the operator's describe while the coordinator moves: its answer or a one-line error,
        # never a crash (librdkafka's admin calls abort or crash here: its issues #5040, #4605)
        described = describe_with_the_cli(boot, group)
        assert {o["topic"] for o in described["offsets"]} == {topic}, described

        # the group goes on with the new coordinator: every record read, committed there
        produced += produce_acks_all(boot, topic, 300, "after")
        expected = {(p, o) for p, o, _, _ in produced}
        deadline = time.monotonic() + 90
        while (missing := expected - {r for m in tally.seen for r in m}) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not missing, (f"{len(missing)} acknowledged records never consumed, in partitions "
                             f"{sorted({p for p, _ in missing})}; members' assignments "
                             f"{[m.assignments for m in members]}, counts {[len(s) for s in tally.seen]}")
        assert coordinator_of(c, group) not in (coordinator, -1)
        ends = log_ends(boot, topic)
        wait_until(lambda: committed(boot, group, topic) == ends, 30, "every record's commit")
        assert all(ends[p] >= before[p] for p in range(PARTITIONS))
    finally:
        for m in members:
            m.close()
    c.start_broker(coordinator)
    wait_until(lambda: full_isr(c, topic, 3), 60, "the restarted broker in every ISR")

    # a member resuming from the commits receives nothing before them
    extra = produce_acks_all(boot, topic, 30, "resumed")
    resumed = Tally(1)
    member = CommittingMember(boot, group, topic, "resumed", resumed, 0, "range")
    try:
        wait_until(lambda: resumed.total() >= len(extra), 60, "the records produced after the run")
        time.sleep(0.5)
    finally:
        member.close()
    assert sorted(resumed.seen[0]) == sorted((p, o) for p, o, _, _ in extra)
    assert all(o >= ends[p] for p, o in resumed.seen[0])


def describe_with_the_cli(bootstrap: str, group: str) -> dict[str, Any]:
    """`odradek groups describe --json`, asked again after a one-line error until it answers."""
    deadline = time.monotonic() + 60
    while True:
        proc = subprocess.run([ODRADEK, "groups", "describe", group, "--json", "--bootstrap-server", bootstrap,
                               "--timeout-s", "5"], capture_output=True, text=True, timeout=120)
        if proc.returncode == 0:
            [described] = json.loads(proc.stdout)
            return described
        assert proc.returncode == 1, f"odradek groups describe exited {proc.returncode}: {proc.stderr[-2000:]}"
        assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("odradek: error: "), proc.stderr
        assert time.monotonic() < deadline, proc.stderr
        time.sleep(0.5)


# -- bad input over the wire -------------------------------------------------------------------

def raw_join(conn: RawConnection, group: str, member_id: str = "", protocol_type: str = "consumer") -> Any:
    return conn.request(11, 5, {"group_id": group, "session_timeout": 10_000, "rebalance_timeout": 5_000,
                                "member_id": member_id, "group_instance_id": None, "protocol_type": protocol_type,
                                "protocols": [{"name": "range", "metadata": b""}]})


def test_bad_group_requests_get_the_errors_clients_expect(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "bad")
    group = f"g-{uuid.uuid4().hex[:8]}"
    conn, _ = coordinator_connection(cluster.host, cluster.broker_port(cluster.broker_ids[0]), group)
    try:
        commit = conn.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": 5, "member_id": "m",
                                     "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                         {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                          "committed_metadata": None}]}]})
        assert commit.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
        assert raw_join(conn, group, protocol_type="").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        first = raw_join(conn, group)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        joined = raw_join(conn, group, first.member_id)
        assert joined.error_code == ErrorCode.NONE and joined.generation_id == 1
        assert raw_join(conn, group, protocol_type="connect").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        beat = conn.request(12, 4, {"group_id": group, "generation_id": 99, "member_id": first.member_id,
                                    "group_instance_id": None})
        assert beat.error_code == ErrorCode.ILLEGAL_GENERATION
        sync = conn.request(14, 5, {"group_id": group, "generation_id": 1, "member_id": "stranger",
                                    "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                                    "assignments": []})
        assert sync.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    finally:
        conn.close()


def test_a_ten_thousand_character_group_id_is_a_group_id_like_any_other(cluster: LocalCluster) -> None:
    """Kafka sets no limit below the protocol's 32,767 bytes: a group with a 10,000-character id
    commits and reads its commit back, and its coordinator answers a first JoinGroup as any
    group's (MEMBER_ID_REQUIRED)."""
    topic = new_topic(cluster, "long-id")
    long_group = "g" * 10_000
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": long_group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        assert consumer.committed([TopicPartition(topic, 0)], timeout=15)[0].offset == 0
    finally:
        consumer.close()
    conn, _ = coordinator_connection(cluster.host, cluster.broker_port(cluster.broker_ids[0]), long_group)
    try:
        assert raw_join(conn, long_group).error_code == ErrorCode.MEMBER_ID_REQUIRED
    finally:
        conn.close()
