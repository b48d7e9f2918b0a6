"""Brokers on a ZooKeeper that requires SASL, with zookeeper.set.acl=true, as Kafka 3.x runs in
ZooKeeper mode: they log in (DIGEST-MD5, the JAAS file's Client section), register, elect a
controller, create a topic and serve a produce/consume round trip; every znode they create has
Kafka's secure ACL, so another ZooKeeper user cannot read /config/users/<user> nor change
/brokers or /controller; a broker with a wrong password, or with zookeeper.set.acl and no
credentials, refuses to start with one line."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import consume_all, create_topic, produce_acks_all
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, SessionClosedRequireSaslError
from kazoo.security import ACL, Id

from cluster_helpers import SESSION_TIMEOUT_MS
from odradek.admin.admin_client import metadata_request
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port, free_port_block
from odradek.security.scram import (
    ScramSaslClient,
    ScramSaslServer,
    credential_from_string,
    credential_to_string,
    generate_credential,
)
from odradek.zk import paths
from odradek.zk.client import KafkaZkClient
from odradek.zk.sasl import ZkSaslCredentials
from odradek.zk.server import ZooKeeperServer, check_installed

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(check_installed() is not None, reason=str(check_installed()))]

USERS = {"kafka": "kafka-secret", "mallory": "mallory-secret"}
KAFKA = ZkSaslCredentials("kafka", USERS["kafka"])
MALLORY = ZkSaslCredentials("mallory", USERS["mallory"])
ALL_FOR_KAFKA = ACL(31, Id("sasl", "kafka"))
WORLD_READ = ACL(1, Id("world", "anyone"))
BROKERS = [1, 2]


def jaas(path: Path, password: str) -> Path:
    path.write_text("// the brokers' ZooKeeper login\n"
                    "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
                    f'  username="kafka" password="{password}";\n}};\n')
    return path


def kazoo(connect: str, credentials: ZkSaslCredentials | None = None) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10,
                         sasl_options=credentials.kazoo_sasl_options() if credentials else None)
    client.start(10)
    return client


def stop(client: KazooClient) -> None:
    client.stop()
    client.close()


@pytest.fixture(scope="module")
def zookeeper_sasl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """Only clients that log in as one of USERS are served (enforce.auth.enabled)."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper-sasl"), free_port(), sasl_users=USERS)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def wait_ready(cluster: LocalCluster, zk: KazooClient, timeout_s: float = 60) -> None:
    """LocalCluster.wait_ready's checks, through a client that has logged in (its own
    ZooKeeper session would not be served)."""
    deadline = time.monotonic() + timeout_s
    root = cluster.zookeeper_connect.partition("/")[2]
    while True:
        for broker_id in BROKERS:
            if cluster.broker_pid(broker_id) is None:
                log = cluster.broker_dir(broker_id) / "broker.log"
                pytest.fail(f"broker {broker_id} exited:\n{log.read_text()[-3000:]}")
        registered = all(zk.exists(f"/{root}{paths.broker_path(b)}") for b in BROKERS)
        if registered and zk.exists(f"/{root}{paths.CONTROLLER}"):
            answers = [metadata_request(f"{cluster.host}:{cluster.broker_port(b)}", [], 2.0) for b in BROKERS]
            if all(md.controller_id >= 0 and {b.node_id for b in md.brokers} == set(BROKERS) for md in answers):
                return
        assert time.monotonic() < deadline, "the brokers did not register and elect a controller"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def secure_cluster(zookeeper_sasl: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[LocalCluster]:
    data_dir = tmp_path_factory.mktemp("secure-cluster")
    cluster = LocalCluster(data_dir, len(BROKERS), base_port=free_port_block(len(BROKERS)),
                           zookeeper=f"{zookeeper_sasl.connect_string}/odradek-sasl-{uuid.uuid4().hex[:12]}",
                           broker_args={"zookeeper_session_timeout_ms": SESSION_TIMEOUT_MS,
                                        "zookeeper_set_acl": True,
                                        "java_security_auth_login_config": str(jaas(data_dir / "jaas.conf",
                                                                                    USERS["kafka"])),
                                        "offsets_topic_replication_factor": 2,
                                        "transaction_state_log_replication_factor": 2})
    admin = kazoo(zookeeper_sasl.connect_string, KAFKA)
    try:
        for broker_id in BROKERS:
            cluster.start_broker(broker_id)
        wait_ready(cluster, admin)
        yield cluster
    finally:
        stop(admin)
        # not cluster.down(): it asks ZooKeeper for the controller without logging in
        for broker_id in BROKERS:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if cluster.broker_pid(broker_id) is not None:
                    cluster.kill_broker(broker_id, sig)


def test_round_trip_on_a_secured_zookeeper(secure_cluster: LocalCluster) -> None:
    bootstrap = secure_cluster.bootstrap_servers
    create_topic(bootstrap, "sasl-rt", 3, 2)
    acked = produce_acks_all(bootstrap, "sasl-rt", 500)
    assert len(acked) == 500
    assert sorted(consume_all(bootstrap, "sasl-rt", 3, 500)) == sorted(acked)


def test_znodes_have_kafkas_acls(secure_cluster: LocalCluster, zookeeper_sasl: ZooKeeperServer) -> None:
    create_topic(secure_cluster.bootstrap_servers, "sasl-acls", 2, 2)
    root = "/" + secure_cluster.zookeeper_connect.partition("/")[2]
    zk = kazoo(zookeeper_sasl.connect_string, KAFKA)
    try:
        assert zk.get_acls(root)[0] == [ALL_FOR_KAFKA, WORLD_READ]  # the chroot the first broker made
        acls: dict[str, list[ACL]] = {}
        pending = [""]
        while pending:
            path = pending.pop()
            for child in zk.get_children(root + path):
                acls[f"{path}/{child}"] = zk.get_acls(f"{root}{path}/{child}")[0]
                pending.append(f"{path}/{child}")
        sensitive = {"/config/users", "/config/brokers"}
        for path, acl in acls.items():
            assert acl == ([ALL_FOR_KAFKA] if path in sensitive else [ALL_FOR_KAFKA, WORLD_READ]), path
        assert {"/brokers/ids/1", "/brokers/ids/2", "/controller", "/controller_epoch", "/cluster/id",
                "/brokers/topics/sasl-acls", "/config/topics/sasl-acls",
                "/brokers/topics/sasl-acls/partitions/1/state", "/latest_producer_id_block"} <= set(acls)
    finally:
        stop(zk)


def test_other_users_cannot_read_credentials_nor_change_the_cluster(
        secure_cluster: LocalCluster, zookeeper_sasl: ZooKeeperServer) -> None:
    connect = secure_cluster.zookeeper_connect
    # a user's SCRAM credentials, written as the brokers write entity configs (with their user)
    writer = KafkaZkClient(connect, sasl=KAFKA, set_acl=True)
    writer.start()
    try:
        credential = credential_to_string(generate_credential("SCRAM-SHA-256", "alice-secret"))
        writer.change_entity_configs({("users", "alice"): {"SCRAM-SHA-256": credential}})
        assert writer.kazoo.get_acls("/config/users/alice")[0] == [ALL_FOR_KAFKA]
    finally:
        writer.close()
    mallory = kazoo(connect, MALLORY)
    try:
        assert mallory.get(paths.broker_path(1))[0]  # world READ
        with pytest.raises(NoAuthError):
            mallory.get("/config/users/alice")
        with pytest.raises(NoAuthError):
            mallory.get_children("/config/users")
        with pytest.raises(NoAuthError):
            mallory.set(paths.broker_path(1), b"{}")
        with pytest.raises(NoAuthError):
            mallory.create(paths.broker_path(3), b"{}", ephemeral=True)
        with pytest.raises(NoAuthError):
            mallory.delete(paths.CONTROLLER)
        with pytest.raises(NoAuthError):
            mallory.set(paths.CONTROLLER_EPOCH, b"1000")
        with pytest.raises(NoAuthError):
            mallory.create(f"{paths.DELETE_TOPICS}/sasl-rt", b"")
    finally:
        stop(mallory)
    anonymous = kazoo(zookeeper_sasl.connect_string)  # not logged in: no request is served at all
    try:
        with pytest.raises(SessionClosedRequireSaslError):
            anonymous.get("/" + connect.partition("/")[2] + paths.broker_path(1))
    finally:
        stop(anonymous)


def run_broker(zookeeper: str, tmp_path: Path, props: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "server.properties"
    config.write_text(f"broker.id=7\nlisteners=PLAINTEXT://127.0.0.1:{free_port()}\nzookeeper.connect={zookeeper}\n"
                      f"log.dirs={tmp_path / 'data'}\n{props}")
    return subprocess.run([sys.executable, "-m", "odradek", "broker", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)


def test_a_wrong_password_refuses_to_start(zookeeper_sasl: ZooKeeperServer, tmp_path: Path) -> None:
    result = run_broker(f"{zookeeper_sasl.connect_string}/odradek-sasl-wrong", tmp_path,
                        f"java.security.auth.login.config={jaas(tmp_path / 'jaas.conf', 'guess')}\n")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert "refused the SASL DIGEST-MD5 login of user 'kafka'" in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


def test_set_acl_without_credentials_refuses_to_start(zookeeper_sasl: ZooKeeperServer, tmp_path: Path) -> None:
    result = run_broker(f"{zookeeper_sasl.connect_string}/odradek-sasl-none", tmp_path, "zookeeper.set.acl=true\n")
    assert result.returncode != 0
    assert ("zookeeper.set.acl is true, but the verification of the JAAS login file failed"
            in result.stderr.strip().splitlines()[-1]), result.stderr
    assert "Traceback" not in result.stderr


def test_users_add_writes_the_inter_broker_user_to_zookeeper_before_any_broker_runs(
        zookeeper_sasl: ZooKeeperServer, tmp_path: Path) -> None:
    """`odradek users add NAME --zookeeper CONN --zookeeper-jaas FILE`, kafka-configs.sh
    --zookeeper's way: the credential in Kafka's format at /config/users/NAME with its change
    notification, the znode readable by the brokers' ZooKeeper user only; a second mechanism
    keeps the first."""
    chroot = f"/users-{uuid.uuid4().hex[:8]}"
    connect = zookeeper_sasl.connect_string + chroot
    client_jaas = jaas(tmp_path / "jaas.conf", USERS["kafka"])
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        run = subprocess.run([sys.executable, "-m", "odradek", "users", "add", "broker", "--password", "b-secret",
                              "--mechanism", mechanism, "--zookeeper", connect, "--zookeeper-jaas", str(client_jaas)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
    kafka = kazoo(zookeeper_sasl.connect_string, KAFKA)
    try:
        data, _ = kafka.get(f"{chroot}/config/users/broker")
        acl, _ = kafka.get_acls(f"{chroot}/config/users/broker")
        assert kafka.get_children(f"{chroot}/config/changes")
    finally:
        stop(kafka)
    stored = json.loads(data)["config"]
    assert set(stored) == {"SCRAM-SHA-512", "SCRAM-SHA-256"}
    credential = credential_from_string(stored["SCRAM-SHA-512"])
    server = ScramSaslServer("SCRAM-SHA-512", lambda user: credential if user == "broker" else None)
    client = ScramSaslClient("SCRAM-SHA-512", "broker", "b-secret")
    client.evaluate(server.evaluate(client.evaluate(server.evaluate(client.evaluate(b"")))))
    assert server.complete and client.complete
    assert acl == [ALL_FOR_KAFKA]  # sensitive: no world read
    mallory = kazoo(zookeeper_sasl.connect_string, MALLORY)
    try:
        with pytest.raises(NoAuthError):
            mallory.get(f"{chroot}/config/users/broker")
    finally:
        stop(mallory)
    wrong = subprocess.run([sys.executable, "-m", "odradek", "users", "add", "x", "--password", "p", "--zookeeper",
                            connect, "--zookeeper-jaas", str(jaas(tmp_path / "wrong.conf", "guess"))],
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr and len(wrong.stderr.splitlines()) == 1, \
        wrong.stderr
