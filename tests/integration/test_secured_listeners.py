"""Named listeners with TLS and SASL on a real two-broker cluster, as Kafka configures them:

    PLAINTEXT://{port}   (the cluster tooling's readiness checks)
    SECURE://{port+2}    SASL_SSL, the inter-broker listener: replication, the controller's
                         requests and transaction markers are authenticated and encrypted
    TLS://{port+4}       SSL with ssl.client.auth=required (mutual TLS)

confluent-kafka produces and consumes in a group over SASL_SSL and mutual TLS, Metadata answers
each client with its own listener's ports, and the refusals: a wrong password and an unknown user
alike, a PLAINTEXT client on the SASL listener, a request before authentication, a TLS client
without a certificate where one is required."""
from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
import uuid
from typing import Any, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from cluster_helpers import start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol import kio_util
from odradek.security.local_ca import create_local_certificates
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

BROKERS = 2
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
USERS = {"broker": "broker-secret", "alice": "alice-secret"}
REAUTH_MS = 1500


@pytest.fixture(scope="module")
def secured(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Any]]:
    data = tmp_path_factory.mktemp("secured")
    certs = create_local_certificates(data / "security")
    users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    cluster = start_cluster(
        zookeeper, data / "cluster", BROKERS, ports_per_broker=4,
        listeners=f"PLAINTEXT://127.0.0.1:{{port}},SECURE://127.0.0.1:{{port+{BROKERS}}},"
                  f"TLS://127.0.0.1:{{port+{2 * BROKERS}}},REAUTH://127.0.0.1:{{port+{3 * BROKERS}}}",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL,TLS:SSL,REAUTH:SASL_PLAINTEXT",
        inter_broker_listener_name="SECURE",
        sasl_mechanism_inter_broker_protocol="PLAIN",
        **{"listener.name.secure.plain.sasl.jaas.config":
           f'{PLAIN_MODULE} required username="broker" password="broker-secret" {users};',
           "listener.name.tls.ssl.client.auth": "required",
           "listener.name.reauth.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {users};",
           "listener.name.reauth.connections.max.reauth.ms": REAUTH_MS},
        **{k.replace(".", "_"): v for k, v in certs.listener_config("none").items()},
    )
    try:
        yield cluster, certs
    finally:
        cluster.down()


def _ports(cluster: LocalCluster, offset: int) -> list[int]:
    return [cluster.broker_port(b) + offset for b in cluster.broker_ids]


def _bootstrap(cluster: LocalCluster, offset: int) -> str:
    return ",".join(f"127.0.0.1:{port}" for port in _ports(cluster, offset))


def sasl_ssl(cluster: LocalCluster, certs: Any, user: str = "alice", password: str | None = None) -> dict[str, Any]:
    return {"bootstrap.servers": _bootstrap(cluster, BROKERS), "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS.get(user, "x") if password is None else password,
            "ssl.ca.location": str(certs.ca_file)}


def mutual_tls(cluster: LocalCluster, certs: Any) -> dict[str, Any]:
    return {"bootstrap.servers": _bootstrap(cluster, 2 * BROKERS), **certs.librdkafka_config()}


def _round_trip(conf: dict[str, Any], topic: str, count: int = 500) -> None:
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(topic, 2, BROKERS)]).values():
        future.result(30)
    producer = Producer({**conf, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(60) == 0
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.add(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == {b"v%d" % i for i in range(count)}


def test_sasl_ssl_produce_consume_in_a_group_and_metadata_names_the_listener(secured: tuple[LocalCluster, Any]) -> None:
    cluster, certs = secured
    conf = sasl_ssl(cluster, certs)
    _round_trip(conf, "secured-sasl-ssl")  # replicated (RF 2) over the SASL_SSL inter-broker listener
    brokers = AdminClient(conf).list_topics(timeout=30).brokers
    assert sorted(b.port for b in brokers.values()) == sorted(_ports(cluster, BROKERS))
    tls_brokers = AdminClient(mutual_tls(cluster, certs)).list_topics(timeout=30).brokers
    assert sorted(b.port for b in tls_brokers.values()) == sorted(_ports(cluster, 2 * BROKERS))


def test_mutual_tls_produce_consume_and_no_certificate_is_refused(secured: tuple[LocalCluster, Any]) -> None:
    cluster, certs = secured
    _round_trip(mutual_tls(cluster, certs), "secured-mtls")
    without = {k: v for k, v in mutual_tls(cluster, certs).items()
               if k not in ("ssl.certificate.location", "ssl.key.location")}
    # TLS 1.3: the client learns of the refusal only when the broker closes the connection
    assert _first_error(without) in (KafkaError._TRANSPORT, KafkaError._SSL, KafkaError._ALL_BROKERS_DOWN)


def _first_error(conf: dict[str, Any], timeout_s: float = 20) -> int:
    """The first error librdkafka reports for a client that asks for metadata."""
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append, "reconnect.backoff.max.ms": 1000})
    deadline = time.monotonic() + timeout_s
    while not errors and time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=1)
        except Exception:  # noqa: BLE001 - the error callback tells which
            pass
        producer.poll(0.1)
    assert errors, "the client connected where it should have been refused"
    return int(errors[0].code())


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("mallory", "alice-secret")])
def test_a_wrong_password_and_an_unknown_user_fail_alike(secured: tuple[LocalCluster, Any], user: str,
                                                           password: str) -> None:
    cluster, certs = secured
    errors: list[KafkaError] = []
    producer = Producer({**sasl_ssl(cluster, certs, user, password), "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    failures = [e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert failures and "Invalid username or password" in failures[0], errors


def test_a_plaintext_client_on_the_sasl_listener_gets_nothing(secured: tuple[LocalCluster, Any]) -> None:
    cluster, _ = secured
    assert _first_error({"bootstrap.servers": _bootstrap(cluster, BROKERS)}) in (KafkaError._TRANSPORT,
                                                                                 KafkaError._ALL_BROKERS_DOWN)


def test_nothing_but_api_versions_and_the_sasl_exchange_is_answered_before_authentication(
        secured: tuple[LocalCluster, Any]) -> None:
    cluster, certs = secured
    import ssl

    context = ssl.create_default_context(cafile=str(certs.ca_file))
    port = _ports(cluster, BROKERS)[0]
    for api_key, version, body in ((18, 3, {"client_software_name": "t", "client_software_version": "1"}),
                                   (3, 9, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_cluster_authorized_operations": False,
                                           "include_topic_authorized_operations": False})):
        with socket.create_connection(("127.0.0.1", port), 10) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(kio_util.encode_request(api_key, version, 7, "t", body))
            answer = _read_frame(sock)
        if api_key == 18:
            _, versions = kio_util.decode_response(18, 3, answer)
            assert {k.api_key for k in versions.api_keys} >= {17, 36}  # ApiVersions: answered, SASL offered
        else:
            assert answer == b"", "Metadata was answered before authentication"


def _read_frame(sock: socket.socket) -> bytes:
    """One response frame, or b"" when the broker closes the connection instead."""
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return b""
        head += chunk
    (size,) = struct.unpack(">i", head)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def test_every_listener_is_registered_with_its_security_protocol(secured: tuple[LocalCluster, Any]) -> None:
    """/brokers/ids/N names every listener and its security protocol, as Kafka registers them."""
    cluster, _ = secured
    zk = KazooClient(cluster.zookeeper_connect)
    zk.start(10)
    try:
        registration = json.loads(zk.get("/brokers/ids/1")[0])
    finally:
        zk.stop()
        zk.close()
    port = cluster.broker_port(1)
    assert registration["endpoints"] == [f"PLAINTEXT://127.0.0.1:{port}", f"SECURE://127.0.0.1:{port + BROKERS}",
                                         f"TLS://127.0.0.1:{port + 2 * BROKERS}",
                                         f"REAUTH://127.0.0.1:{port + 3 * BROKERS}"]
    assert registration["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SECURE": "SASL_SSL",
                                                              "TLS": "SSL", "REAUTH": "SASL_PLAINTEXT"}


def test_the_command_line_tools_take_a_command_config(secured: tuple[LocalCluster, Any], tmp_path: Any) -> None:
    """`--command-config FILE` as Kafka's tools take it: librdkafka's keys, and a wrong password
    is one line, not a traceback."""
    cluster, certs = secured
    conf = sasl_ssl(cluster, certs)
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("secured-cli", 1, BROKERS)])["secured-cli"].result(30)
    good, bad = tmp_path / "alice.properties", tmp_path / "wrong.properties"
    settings = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    good.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    bad.write_text("".join(f"{k}={v}\n" for k, v in {**settings, "sasl.password": "nope"}.items()))
    for command in (["topics", "list"], ["topics", "describe", "secured-cli"], ["groups", "list"]):
        run = subprocess.run([sys.executable, "-m", "odradek", *command, "--bootstrap-server", conf["bootstrap.servers"],
                              "--command-config", str(good)], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        if command[0] == "topics":
            assert "secured-cli" in run.stdout
    run = subprocess.run([sys.executable, "-m", "odradek", "topics", "describe", "secured-cli", "--bootstrap-server",
                          conf["bootstrap.servers"], "--command-config", str(bad), "--timeout-s", "5"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, \
        run.stderr


def test_librdkafka_re_authenticates_before_its_session_ends_and_keeps_its_connection(
        secured: tuple[LocalCluster, Any]) -> None:
    """KIP-368: the REAUTH listener gives sessions of connections.max.reauth.ms; librdkafka
    re-authenticates on the same connection before each ends, so a consumer reading for several
    lifetimes is never disconnected (a session left to expire would be: the broker closes it)."""
    cluster, certs = secured
    conf = {"bootstrap.servers": _bootstrap(cluster, 3 * BROKERS), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": USERS["alice"]}
    admin = AdminClient(sasl_ssl(cluster, certs))
    admin.create_topics([NewTopic("secured-reauth", 1, BROKERS)])["secured-reauth"].result(30)
    errors: list[KafkaError] = []
    logs: list[str] = []
    producer = Producer({**conf, "acks": "all", "error_cb": errors.append})
    consumer = Consumer({**conf, "group.id": "reauth", "auto.offset.reset": "earliest", "error_cb": errors.append,
                         "debug": "security", "logger": _Lines(logs)})
    consumer.subscribe(["secured-reauth"])
    got = 0
    deadline = time.monotonic() + 4 * REAUTH_MS / 1000 + 2
    sent = 0
    while time.monotonic() < deadline:
        producer.produce("secured-reauth", value=b"%d" % sent)
        sent += 1
        producer.poll(0)
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            got += 1
    assert producer.flush(30) == 0
    while got < sent:
        message = consumer.poll(5)
        assert message is not None, f"{got} of {sent} read"
        got += message.error() is None
    consumer.close()
    assert not errors, errors
    assert any("reauth" in line.lower() for line in logs), "librdkafka never re-authenticated"


class _Lines:
    """A logging.Logger stand-in for librdkafka's log lines."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def log(self, _level: int, fmt: str, *args: object) -> None:
        self.lines.append(fmt % args if args else fmt)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_scram_user_added_with_the_cli_produces_and_consumes(secured: tuple[LocalCluster, Any], mechanism: str,
                                                                 tmp_path: Any) -> None:
    """`odradek users add` (AlterUserScramCredentials, over SASL_SSL with --command-config) stores
    the credential in ZooKeeper; every broker's credential cache has it for the next login."""
    cluster, certs = secured
    conf = sasl_ssl(cluster, certs)
    admin_file = tmp_path / "admin.properties"
    admin_file.write_text("".join(f"{k}={v}\n" for k, v in conf.items() if k != "bootstrap.servers"))
    user = f"bob-{mechanism[-3:]}"
    run = subprocess.run([sys.executable, "-m", "odradek", "users", "add", user, "--password", "bob-secret",
                          "--mechanism", mechanism, "--bootstrap-server", conf["bootstrap.servers"],
                          "--command-config", str(admin_file)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    scram = {**conf, "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": "bob-secret"}
    deadline = time.monotonic() + 10
    while _login_fails(scram) and time.monotonic() < deadline:  # the other broker's cache: a notification away
        time.sleep(0.2)
    _round_trip(scram, f"secured-{mechanism.lower()}", 100)
    assert _login_fails({**scram, "sasl.password": "wrong"})


def _login_fails(conf: dict[str, Any]) -> bool:
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})
    try:
        producer.list_topics(timeout=5)
        return False
    except Exception:  # noqa: BLE001 - the error callback says whether it was the login
        producer.poll(0.5)
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)
