"""SASL DIGEST-MD5 logins and Kafka's secure ACLs (zookeeper.set.acl) against real ZooKeeper
servers started with users: KafkaZkClient (kazoo and its raw session) logs in, every znode it
creates gets the ACL of Kafka's ZkData.defaultAcls, a wrong password or a missing login is
ZooKeeperAuthError, and other clients get NoAuth where the ACLs keep them out."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, SessionClosedRequireSaslError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id

from odradek.common.metadata import BrokerInfo, LeaderAndIsr, TopicAssignment, TopicPartition
from odradek.common.netutil import free_port
from odradek.security.jaas import parse_jaas, user_passwords
from odradek.zk import paths
from odradek.zk.client import KafkaZkClient
from odradek.zk.errors import ZooKeeperAuthError
from odradek.zk.raw_session import OP_CREATE, RawSession, RawSessionAuthError
from odradek.zk.sasl import ZkSaslCredentials
from odradek.zk.server import ZooKeeperServer, check_installed
from odradek.zk.zk_acls import default_acls

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(check_installed() is not None, reason=str(check_installed()))]

USERS = {"kafka": "kafka-secret", "mallory": "mallory-secret"}
KAFKA = ZkSaslCredentials("kafka", USERS["kafka"])
MALLORY = ZkSaslCredentials("mallory", USERS["mallory"])
ALL_FOR_KAFKA = ACL(31, Id("sasl", "kafka"))
WORLD_READ = ACL(1, Id("world", "anyone"))


def _server(tmp_path_factory: pytest.TempPathFactory, enforce: bool) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper-sasl"), free_port(), sasl_users=USERS,
                             enforce_sasl=enforce)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def enforcing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """Serves only clients that logged in (enforce.auth.enabled)."""
    yield from _server(tmp_path_factory, enforce=True)


@pytest.fixture(scope="module")
def lenient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """Checks logins, but serves anonymous clients too (only the ACLs keep them out)."""
    yield from _server(tmp_path_factory, enforce=False)


def kazoo(connect: str, credentials: ZkSaslCredentials | None = None) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10,
                         sasl_options=credentials.kazoo_sasl_options() if credentials else None)
    client.start(10)
    return client


def stop(client: KazooClient) -> None:
    client.stop()
    client.close()


def chroot() -> str:
    return f"/odradek-sasl-{uuid.uuid4().hex[:12]}"


def secure_client(connect: str) -> KafkaZkClient:
    zk = KafkaZkClient(connect, sasl=KAFKA, set_acl=True)
    zk.start()
    return zk


def test_server_files(enforcing: ZooKeeperServer) -> None:
    cfg = (enforcing.data_dir / "zoo.cfg").read_text()
    assert "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider" in cfg
    assert "enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n" in cfg
    assert enforcing.jaas_file.stat().st_mode & 0o777 == 0o600
    jaas = parse_jaas(enforcing.jaas_file.read_text())
    assert user_passwords(jaas.module_options("Server", "DigestLoginModule")) == USERS


def test_every_znode_created_gets_kafkas_secure_acl(enforcing: ZooKeeperServer) -> None:
    root = chroot()
    zk = secure_client(enforcing.connect_string + root)
    admin = kazoo(enforcing.connect_string, KAFKA)
    try:
        tp = TopicPartition("t", 0)
        zk.register_broker(BrokerInfo(1, "127.0.0.1", 9092))
        assert zk.try_become_controller(1) is not None
        zk.get_or_create_cluster_id()
        zk.create_topic(TopicAssignment("t", paths.new_topic_id(), {0: (1,)}), {"retention.ms": "1000"})
        zk.epoch_zk_version = zk.get_controller_epoch()[1]
        # the partition znodes go through the raw session's fenced multis
        created = zk.create_partition_states({tp: LeaderAndIsr(1, 0, (1,), 1, 0)})
        assert not isinstance(created[tp], Exception)
        zk.propagate_isr_changes([tp])
        zk.mark_topics_for_deletion(["t"])
        zk.change_entity_configs({("users", "alice"): {"SCRAM-SHA-256": "salt=..."},
                                  ("brokers", "<default>"): {"log.retention.ms": "5"}})
        zk.report_partition_removal(paths.PartitionRemovalReport(tp, 0))
        found: dict[str, list[ACL]] = {}

        def walk(path: str) -> None:
            found[path] = admin.get_acls(root + path if path != "/" else root)[0]
            for child in admin.get_children(root + path if path != "/" else root):
                walk(f"{path.rstrip('/')}/{child}")

        walk("/")
        assert root.count("/") == 1 and admin.get_acls(root)[0] == [ALL_FOR_KAFKA, WORLD_READ]  # the chroot
        expected_sensitive = {"/config/users", "/config/users/alice", "/config/brokers", "/config/brokers/<default>"}
        for path, acl in found.items():
            if path in expected_sensitive:
                assert acl == [ALL_FOR_KAFKA], path
            elif path != "/":
                assert acl == [ALL_FOR_KAFKA, WORLD_READ], path
            assert acl == default_acls(path, True, "kafka") or path == "/", path
        assert {"/brokers/ids/1", "/controller", "/controller_epoch", "/cluster/id", "/config/topics/t",
                "/brokers/topics/t", "/brokers/topics/t/partitions/0/state", "/admin/delete_topics/t",
                "/isr_change_notification", *expected_sensitive} <= set(found)
        for prefix in ("/isr_change_notification/isr_change_", "/config/changes/config_change_",
                       "/admin/ordered_partition_removals/removal-"):
            assert any(p.startswith(prefix) for p in found), prefix
    finally:
        stop(admin)
        zk.close()


def test_other_users_and_anonymous_clients_are_kept_out(lenient: ZooKeeperServer) -> None:
    root = chroot()
    connect = lenient.connect_string + root
    zk = secure_client(connect)
    zk.register_broker(BrokerInfo(1, "127.0.0.1", 9092))
    assert zk.try_become_controller(1) is not None
    zk.change_entity_configs({("users", "alice"): {"SCRAM-SHA-256": "salt=...,stored_key=..."}})
    clients = [kazoo(connect), kazoo(connect, MALLORY)]
    try:
        for client in clients:
            assert client.get("/brokers/ids/1")[0]  # world READ
            assert "ids" in client.get_children("/brokers")
            with pytest.raises(NoAuthError):
                client.get("/config/users/alice")
            with pytest.raises(NoAuthError):
                client.get_children("/config/users")
            with pytest.raises(NoAuthError):
                client.set("/brokers/ids/1", b"{}")
            with pytest.raises(NoAuthError):
                client.delete("/controller")
            with pytest.raises(NoAuthError):
                client.create("/brokers/ids/2", b"{}")
            with pytest.raises(NoAuthError):
                client.set("/controller_epoch", b"99")
        # the broker's own user may do all of it
        assert zk.kazoo.get("/config/users/alice")[0]
    finally:
        for client in clients:
            stop(client)
        zk.close()


def test_open_acls_without_set_acl(lenient: ZooKeeperServer) -> None:
    """Logged in but zookeeper.set.acl=false: znodes stay open to all, as before."""
    connect = lenient.connect_string + chroot()
    zk = KafkaZkClient(connect, sasl=KAFKA)
    zk.start()
    anonymous = kazoo(connect)
    try:
        zk.change_entity_configs({("users", "bob"): {"a": "b"}})
        assert anonymous.get_acls("/config/users/bob")[0] == OPEN_ACL_UNSAFE
        assert anonymous.get_acls("/brokers/ids")[0] == OPEN_ACL_UNSAFE
        anonymous.set("/config/users/bob", b"{}")
    finally:
        stop(anonymous)
        zk.close()


@pytest.mark.parametrize("credentials", [ZkSaslCredentials("kafka", "wrong"), ZkSaslCredentials("nobody", "x")])
def test_a_wrong_password_is_refused(enforcing: ZooKeeperServer, lenient: ZooKeeperServer,
                                     credentials: ZkSaslCredentials) -> None:
    for server in (enforcing, lenient):
        zk = KafkaZkClient(server.connect_string + chroot(), sasl=credentials, set_acl=True)
        with pytest.raises(ZooKeeperAuthError, match=f"refused the SASL DIGEST-MD5 login of user "
                                                     f"'{credentials.username}'"):
            zk.start(5)
        raw = RawSession(server.connect_string, sasl=credentials)
        with pytest.raises(RawSessionAuthError):
            raw.open()
        raw.close()


def test_no_login_at_an_enforcing_server(enforcing: ZooKeeperServer) -> None:
    zk = KafkaZkClient(enforcing.connect_string + chroot())
    with pytest.raises(ZooKeeperAuthError, match="requires a SASL login, and no credentials are configured"):
        zk.start(5)
    anonymous = kazoo(enforcing.connect_string)  # the session opens; its first request closes it
    try:
        with pytest.raises(SessionClosedRequireSaslError):
            anonymous.get("/")
    finally:
        stop(anonymous)


def test_raw_session_logs_in_and_sets_acls(enforcing: ZooKeeperServer) -> None:
    root = chroot()
    admin = kazoo(enforcing.connect_string, KAFKA)
    admin.create(root, b"", acl=default_acls(root, True, "kafka"))
    admin.create(root + "/controller_epoch", b"1", acl=default_acls("/controller_epoch", True, "kafka"))
    raw = RawSession(enforcing.connect_string + root, sasl=KAFKA,
                     acl_for=lambda path: default_acls(path, True, "kafka"))
    try:
        raw.open()
        (result,) = raw.fenced_multis("/controller_epoch", 0, [[(OP_CREATE, "/config", b"", -1),
                                                                 (OP_CREATE, "/config/users", b"", -1),
                                                                 (OP_CREATE, "/config/users/u", b"x", -1)]])
        assert result == [True, "/config", "/config/users", "/config/users/u"]
        assert admin.get_acls(root + "/config")[0] == [ALL_FOR_KAFKA, WORLD_READ]
        assert admin.get_acls(root + "/config/users/u")[0] == [ALL_FOR_KAFKA]
        got = raw.get_data_many(["/config/users/u"] * 8)
        assert [data for data, _ in got] == [b"x"] * 8
    finally:
        raw.close()
        stop(admin)
