"""Client quotas on real brokers and a real ZooKeeper: `odradek quotas alter|describe` (KIP-546's
AlterClientQuotas and DescribeClientQuotas), the znodes as Apache Kafka 3.x writes them, a SCRAM
credential of the same user kept, every broker following a change, Kafka's errors for bad input,
and a confluent-kafka producer trying ten times its producer_byte_rate held near the quota, its
responses saying it is throttled, the metrics under Kafka's names.

No Python client here speaks these APIs (confluent-kafka 2.x's AdminClient has no client quota
calls, nor has librdkafka; neither has kafka-python), so they are driven through the CLI and raw
requests.

The cluster runs with quota.window.num=2 (Kafka's default is 11): Kafka's rate lets a fresh
client use num_samples - 1 windows' quota at once and only then holds it to the quota, so with
11 one-second windows a client at ten times its quota gets its first 10 s worth in the first
second and then settles after about 11 s (tests/broker/test_client_quota_manager.py follows it
for minutes on a fake clock); with 2 the burst is one window and a 6 s run shows the hold.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from cluster_helpers import SESSION_TIMEOUT_MS
from odradek.admin.admin_client import send_request
from odradek.admin.client_quota_command import ClientQuotaAdmin
from odradek.admin.errors import AdminError
from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port_block
from odradek.protocol.errors import ErrorCode
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

ODRADEK = str(Path(sys.executable).parent / "odradek")
QUOTA = 100 * 1024  # producer_byte_rate of the throttled client: 100 KiB/s
OFFERED = 10 * QUOTA  # what it tries
RUN_S = 6.0
MEASURED_FROM_S = 2.0  # the hold, after the first window's burst
#: how long a change takes from the request to every broker's quotas: a multi, then on each
#: broker a watch and one read (tens of ms); the bound leaves a loaded host a hundred times that
FOLLOW_BOUND_S = 5.0
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("quotas") / "cluster", 2, base_port=free_port_block(2),
                     zookeeper=f"{zookeeper.connect_string}/odradek-quotas-{uuid.uuid4().hex[:8]}",
                     broker_args={"zookeeper_session_timeout_ms": SESSION_TIMEOUT_MS, "quota_window_num": 2},
                     metrics_base_port=free_port_block(2))
    try:
        c.up(timeout=60)
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module")
def zk(cluster: LocalCluster) -> Iterator[KazooClient]:
    client = connect_zk(cluster.zookeeper_connect)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def odradek(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ODRADEK, *args, "--bootstrap-server", cluster.bootstrap_servers],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def node(zk: KazooClient, path: str) -> Any:
    return json.loads(zk.get(path)[0]) if zk.exists(path) is not None else None


def notifications(zk: KazooClient) -> list[str]:
    return [json.loads(zk.get(f"/config/changes/{c}")[0])["entity_path"]
            for c in sorted(zk.get_children("/config/changes"))]


def address(cluster: LocalCluster, broker_id: int) -> str:
    return f"{cluster.host}:{cluster.broker_port(broker_id)}"


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return samples


def wait_for_log(cluster: LocalCluster, broker_id: int, offset: int, line: str, bound_s: float,
                 since: float | None = None) -> float:
    """Seconds from ``since`` (default now) until the broker logged ``line`` after ``offset``."""
    started = time.monotonic() if since is None else since
    path = cluster.broker_dir(broker_id) / "broker.log"
    while True:
        with path.open("rb") as log:
            log.seek(offset)
            if line.encode() in log.read():
                return time.monotonic() - started
        assert time.monotonic() - started < bound_s, f"broker {broker_id} did not log {line!r} within {bound_s} s"
        time.sleep(0.01)


def test_quotas_set_and_described_through_the_cli_are_stored_as_kafka_stores_them(
        cluster: LocalCluster, zk: KazooClient) -> None:
    added = odradek(cluster, "users", "add", "alice", "--password", "alice-pw")
    assert added.returncode == 0, added.stderr
    scram = node(zk, "/config/users/alice")["config"]["SCRAM-SHA-256"]
    for args, line in (
            (["--user", "alice", "--client-id", "app", "--add-config",
              "producer_byte_rate=1048576,request_percentage=200"],
             "altered quotas of user alice, client-id app: producer_byte_rate=1048576, request_percentage=200.0"),
            (["--user", "alice", "--add-config", "consumer_byte_rate=2097152"],
             "altered quotas of user alice: consumer_byte_rate=2097152"),
            (["--user-default", "--add-config", "producer_byte_rate=5242880"],
             "altered quotas of user <default>: producer_byte_rate=5242880"),
            (["--user-default", "--client-default", "--add-config", "request_percentage=50"],
             "altered quotas of user <default>, client-id <default>: request_percentage=50.0"),
            (["--client-id", "CN=etl job", "--add-config", "consumer_byte_rate=1000", "--add-config",
              "controller_mutation_rate=10"],
             "altered quotas of client-id CN=etl job: consumer_byte_rate=1000, controller_mutation_rate=10.0")):
        done = odradek(cluster, "quotas", "alter", *args)
        assert done.returncode == 0 and done.stdout == line + "\n", done

    # Kafka's znodes and notifications; the user's SCRAM credential is still there
    assert node(zk, "/config/users/alice") == {"version": 1, "config": {"SCRAM-SHA-256": scram,
                                                                        "consumer_byte_rate": "2097152"}}
    assert node(zk, "/config/users/alice/clients/app") == {
        "version": 1, "config": {"producer_byte_rate": "1048576", "request_percentage": "200.0"}}
    assert node(zk, "/config/users/<default>") == {"version": 1, "config": {"producer_byte_rate": "5242880"}}
    assert node(zk, "/config/users/<default>/clients/<default>") == {
        "version": 1, "config": {"request_percentage": "50.0"}}
    assert node(zk, "/config/clients/CN%3Detl%20job") == {
        "version": 1, "config": {"consumer_byte_rate": "1000", "controller_mutation_rate": "10.0"}}
    assert {"users/alice/clients/app", "users/alice", "users/<default>", "users/<default>/clients/<default>",
            "clients/CN%3Detl%20job"} <= set(notifications(zk))
    listed = odradek(cluster, "users", "list", "alice", "--json")
    assert json.loads(listed.stdout) == [{"user": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 4096}]

    shown = odradek(cluster, "quotas", "describe")
    assert shown.returncode == 0 and shown.stdout.splitlines() == [
        "User       Client-Id   Quotas",
        "alice                  consumer_byte_rate=2097152",
        "alice      app         producer_byte_rate=1048576, request_percentage=200.0",
        "<default>              producer_byte_rate=5242880",
        "<default>  <default>   request_percentage=50.0",
        "           CN=etl job  consumer_byte_rate=1000, controller_mutation_rate=10.0"], shown.stdout
    rows = json.loads(odradek(cluster, "quotas", "describe", "--json").stdout)
    assert {"entity": {"user": "alice", "client-id": "app"},
            "quotas": {"producer_byte_rate": 1048576.0, "request_percentage": 200.0}} in rows
    assert {"entity": {"user": None}, "quotas": {"producer_byte_rate": 5242880.0}} in rows
    assert {"entity": {"client-id": "CN=etl job"},
            "quotas": {"consumer_byte_rate": 1000.0, "controller_mutation_rate": 10.0}} in rows
    assert len(rows) == 5
    just_alice = json.loads(odradek(cluster, "quotas", "describe", "--user", "alice", "--json").stdout)
    assert just_alice == [{"entity": {"user": "alice"}, "quotas": {"consumer_byte_rate": 2097152.0}}]
    alices_clients = json.loads(odradek(cluster, "quotas", "describe", "--user", "alice", "--client-id",
                                         "--json").stdout)
    assert [r["entity"] for r in alices_clients] == [{"user": "alice", "client-id": "app"}]
    defaults = json.loads(odradek(cluster, "quotas", "describe", "--user-default", "--client-default",
                                  "--json").stdout)
    assert defaults == [{"entity": {"user": None, "client-id": None}, "quotas": {"request_percentage": 50.0}}]

    # removing a quota keeps the rest, and the credential
    done = odradek(cluster, "quotas", "alter", "--user", "alice", "--delete-config", "consumer_byte_rate")
    assert done.returncode == 0 and done.stdout == "altered quotas of user alice: -consumer_byte_rate\n"
    assert node(zk, "/config/users/alice") == {"version": 1, "config": {"SCRAM-SHA-256": scram}}
    for args in (["--user", "alice", "--client-id", "app", "--delete-config", "producer_byte_rate,request_percentage"],
                 ["--user-default", "--delete-config", "producer_byte_rate"],
                 ["--user-default", "--client-default", "--delete-config", "request_percentage"],
                 ["--client-id", "CN=etl job", "--delete-config", "consumer_byte_rate",
                  "--delete-config", "controller_mutation_rate"]):
        assert odradek(cluster, "quotas", "alter", *args).returncode == 0, args
    assert json.loads(odradek(cluster, "quotas", "describe", "--json").stdout) == []
    assert odradek(cluster, "quotas", "describe").stdout == "no client quotas\n"
    assert odradek(cluster, "users", "delete", "alice").returncode == 0


def test_bad_input_gets_kafkas_errors_and_changes_nothing(cluster: LocalCluster, zk: KazooClient) -> None:
    before = (sorted(zk.get_children("/config/users")), sorted(zk.get_children("/config/clients")),
              notifications(zk))
    for args, words in ((["--user", "x", "--add-config", "producer_bytes_rate=1"], "unknown quota"),
                        (["--user", "x", "--add-config", "producer_byte_rate=1.5"], "whole bytes per second"),
                        (["--user", "x", "--add-config", "producer_byte_rate=-1"], "a number >= 0"),
                        (["--user", "x", "--add-config", "producer_byte_rate=1", "--delete-config",
                          "producer_byte_rate"], "given more than once"),
                        (["--add-config", "producer_byte_rate=1"], "name the entity"),
                        (["--user", "x"], "nothing to change"),
                        (["--user", "", "--add-config", "producer_byte_rate=1"], "the user is empty"),
                        (["--user", "x", "--user-default", "--add-config", "producer_byte_rate=1"], "not allowed")):
        done = odradek(cluster, "quotas", "alter", *args)
        assert done.returncode in (1, 2) and done.stderr.count("\n") == 1 and words in done.stderr, (args, done)
        assert done.stderr.startswith("odradek: error: ") and "Traceback" not in done.stderr

    admin = ClientQuotaAdmin(cluster.bootstrap_servers, 10.0)
    with pytest.raises(AdminError, match="^cannot alter the quotas of user x: INVALID_REQUEST: Quota "
                                         "producer_byte_rate must not be negative, got -1.0$"):
        admin.alter("x", None, {"producer_byte_rate": -1}, [])
    with pytest.raises(AdminError, match="^cannot alter the quotas of client-id c: INVALID_REQUEST: Invalid "
                                         "configuration key SCRAM-SHA-256$"):
        admin.alter(None, "c", {}, ["SCRAM-SHA-256"])
    admin.alter("x", "c", {"producer_byte_rate": 1}, [], validate_only=True)
    server = address(cluster, cluster.broker_ids[0])
    response = send_request(server, 49, 1, {"validate_only": False, "entries": [
        {"entity": [{"entity_type": "user", "entity_name": "x"}],
         "ops": [{"key": "consumer_byte_rate", "value": 2.5, "remove": False}]},
        {"entity": [{"entity_type": "ip", "entity_name": "10.0.0.1"}],
         "ops": [{"key": "connection_creation_rate", "value": 2, "remove": False}]},
        {"entity": [], "ops": []}]}, 10.0)
    assert [(int(e.error_code), e.error_message) for e in response.entries] == [
        (ErrorCode.INVALID_REQUEST, "Configuration consumer_byte_rate must be a LONG value"),
        (ErrorCode.INVALID_REQUEST, "IP quotas (connection_creation_rate, KIP-612) are not supported by this broker"),
        (ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")]
    response = send_request(server, 48, 0, {"strict": False, "components": [
        {"entity_type": "group", "match_type": 2, "match": None}]}, 10.0)
    assert (int(response.error_code), response.error_message, response.entries) == (
        ErrorCode.UNSUPPORTED_VERSION, "Custom entity type 'group' not supported", None)
    assert (sorted(zk.get_children("/config/users")), sorted(zk.get_children("/config/clients")),
            notifications(zk)) == before


def test_a_change_reaches_every_broker(cluster: LocalCluster, zk: KazooClient) -> None:
    offsets = {b: (cluster.broker_dir(b) / "broker.log").stat().st_size for b in cluster.broker_ids}
    first, second = cluster.broker_ids[:2]
    admin = ClientQuotaAdmin(address(cluster, first), 10.0)
    sent = time.monotonic()
    admin.alter("carol", "reporting", {"consumer_byte_rate": 4096}, [])
    # described by another broker at once: the answer is read from ZooKeeper
    assert ClientQuotaAdmin(address(cluster, second), 10.0).describe("carol", "reporting") == [
        {"entity": {"user": "carol", "client-id": "reporting"}, "quotas": {"consumer_byte_rate": 4096.0}}]
    line = "Changing consumer_byte_rate quota for user carol client-id reporting to 4096.0"
    waited = {b: wait_for_log(cluster, b, offsets[b], line, FOLLOW_BOUND_S, sent) for b in cluster.broker_ids}
    print("quota of carol/reporting applied by " + ", ".join(f"broker {b} {w * 1000:.0f} ms"
                                                             for b, w in waited.items()) + " after the request")
    admin.alter("carol", "reporting", {}, ["consumer_byte_rate"])
    for b in cluster.broker_ids:
        wait_for_log(cluster, b, offsets[b], "Removing consumer_byte_rate quota for user carol client-id reporting",
                     FOLLOW_BOUND_S)


def test_a_client_over_its_request_percentage_waits_between_requests(cluster: LocalCluster) -> None:
    """request_percentage (KIP-124): a client whose requests take more of the broker's time than
    its share has its connection muted after each answer, up to one quota window (1 s here)."""
    admin = ClientQuotaAdmin(cluster.bootstrap_servers, 10.0)
    admin.alter(None, "busy-admin", {"request_percentage": 0.0001}, [])
    time.sleep(1.0)  # every broker has followed the change
    try:
        timings = {}
        for client_id in ("busy-admin", "idle-admin"):
            client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "client.id": client_id})
            client.list_topics(timeout=30)  # connected, metadata known
            started = time.monotonic()
            for _ in range(4):
                client.list_topics(timeout=30)
            timings[client_id] = time.monotonic() - started
        print(f"4 Metadata requests: {timings['busy-admin']:.2f} s over the request quota, "
              f"{timings['idle-admin']:.2f} s without one")
        assert timings["busy-admin"] >= 2.0 and timings["idle-admin"] < 1.0, timings
        throttled = [scrape(url).get('kafka_server_request_throttle_time{client_id="busy-admin",user=""}', 0.0)
                     for b in cluster.broker_ids if (url := cluster.metrics_url(b)) is not None]
        assert max(throttled) > 0
    finally:
        admin.alter(None, "busy-admin", {}, ["request_percentage"])


# -- a producer at ten times its quota ------------------------------------------------------

HOT_CLIENT, HOT_TOPIC = "hot-producer", "quota-hot"


@pytest.fixture(scope="module")
def hot_run(cluster: LocalCluster) -> dict[str, Any]:
    """One producer run at OFFERED bytes/s for RUN_S against a producer_byte_rate of QUOTA:
    the bytes acknowledged per second, and the throttle events librdkafka reported."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for future in admin.create_topics([NewTopic(HOT_TOPIC, 1, 1)]).values():
        future.result(30)
    ClientQuotaAdmin(cluster.bootstrap_servers, 10.0).alter(None, HOT_CLIENT, {"producer_byte_rate": QUOTA}, [])
    time.sleep(1.0)  # every broker has followed the change (tens of ms; see test_a_change_reaches_every_broker)
    acked: list[tuple[float, int]] = []
    throttles: list[float] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": HOT_CLIENT, "linger.ms": 5,
                         "batch.size": 16384, "message.timeout.ms": 120000,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    value = b"q" * 1000

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    producer.produce(HOT_TOPIC, b"warm-up", on_delivery=delivered)  # metadata and connections first
    assert producer.flush(30) == 0
    acked.clear()
    started = time.monotonic()
    offered = 0
    while (elapsed := time.monotonic() - started) < RUN_S:
        while offered < OFFERED * elapsed:
            producer.produce(HOT_TOPIC, value, on_delivery=delivered)
            offered += len(value)
        producer.poll(0.001)
    producer.poll(0.2)
    ended = time.monotonic()
    per_second = [sum(n for t, n in acked if started + s <= t < started + s + 1) for s in range(int(RUN_S))]
    held = sum(n for t, n in acked if started + MEASURED_FROM_S <= t < ended) / (ended - started - MEASURED_FROM_S)
    print(f"producer at {OFFERED / 1024:.0f} KiB/s against a quota of {QUOTA / 1024:.0f} KiB/s: acknowledged "
          f"{[round(b / 1024) for b in per_second]} KiB in each second; {held / 1024:.1f} KiB/s "
          f"({held / QUOTA:.2f} x the quota) from {MEASURED_FROM_S:.0f} s on; {len(throttles)} throttled "
          f"responses reported, the longest {max(throttles, default=0) * 1000:.0f} ms")
    producer.purge()
    producer.flush(10)
    return {"per_second": per_second, "held": held, "throttles": throttles}


def test_a_producer_at_ten_times_its_quota_is_held_near_the_quota(hot_run: dict[str, Any]) -> None:
    assert 0.7 * QUOTA <= hot_run["held"] <= 1.3 * QUOTA, hot_run
    assert hot_run["per_second"][0] <= 3 * QUOTA  # the burst a fresh meter allows: about a window's worth


def test_a_throttled_producer_is_told_so(hot_run: dict[str, Any]) -> None:
    assert len(hot_run["throttles"]) > 0 and max(hot_run["throttles"]) > 0


def test_the_quota_metrics_carry_kafkas_names(cluster: LocalCluster, hot_run: dict[str, Any]) -> None:
    rates = {}
    throttled = {}
    for broker_id in cluster.broker_ids:
        url = cluster.metrics_url(broker_id)
        assert url is not None
        samples = scrape(url)
        key = f'{{client_id="{HOT_CLIENT}",user=""}}'
        rates[broker_id] = samples.get(f"kafka_server_produce_byte_rate{key}")
        throttled[broker_id] = samples.get(f"kafka_server_produce_throttle_time{key}")
    leader = next(b for b, rate in rates.items() if rate is not None and rate > 0)
    assert throttled[leader] is not None and throttled[leader] > 0, (rates, throttled)
    print(f"broker {leader}: kafka_server_produce_byte_rate {rates[leader]:.0f} B/s, "
          f"kafka_server_produce_throttle_time {throttled[leader]:.0f} ms")


def test_a_consumer_over_its_consumer_byte_rate_is_held_near_it_and_told_so(cluster: LocalCluster,
                                                                            hot_run: dict[str, Any]) -> None:
    """The hot run's records (about QUOTA x RUN_S bytes) read back by a client whose
    consumer_byte_rate is half the producer's quota: its fetches are capped and throttled, so it
    reads at about that rate, and its responses carry throttle_time_ms."""
    client, rate = "quota-cold-reader", QUOTA // 2
    ClientQuotaAdmin(cluster.bootstrap_servers, 10.0).alter(None, client, {"consumer_byte_rate": rate}, [])
    time.sleep(1.0)
    throttles: list[float] = []
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": client, "group.id": client,
                         "auto.offset.reset": "earliest", "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    consumer.subscribe([HOT_TOPIC])
    read: list[tuple[float, int]] = []
    started = time.monotonic()
    while time.monotonic() - started < RUN_S:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            read.append((time.monotonic(), len(message.value() or b"")))
    consumer.close()
    held = sum(n for t, n in read if t >= started + MEASURED_FROM_S) / (RUN_S - MEASURED_FROM_S)
    print(f"consumer with a quota of {rate / 1024:.0f} KiB/s read {held / 1024:.1f} KiB/s from "
          f"{MEASURED_FROM_S:.0f} s on ({held / rate:.2f} x); {len(throttles)} throttled responses")
    assert throttles and max(throttles) > 0
    assert held <= 1.5 * rate
