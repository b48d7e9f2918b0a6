"""SCRAM users on real brokers and a real ZooKeeper: `odradek users add|list|delete` (KIP-554's
AlterUserScramCredentials and DescribeUserScramCredentials), the znodes as Apache Kafka 3.x
writes them, credentials that a SCRAM exchange verifies, every broker's credential cache
following the change (and loading it at startup), librdkafka's admin calls against the same
APIs, and bad input answered with Kafka's errors without any stored data changing.

A broker's credential cache is observed through its log: it logs each user whose credentials
change ("SCRAM credentials of user 'x' now: ..."), after the change is in the cache."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient

from odradek.admin.admin_client import send_request
from odradek.admin.errors import AdminError
from odradek.admin.user_scram_command import Upsertion, UserScramAdmin
from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol.errors import ErrorCode
from odradek.security.sasl import SCRAM_SHA_256, SCRAM_SHA_512, SaslAuthenticationError
from odradek.security.scram import (
    ScramSaslClient,
    ScramSaslServer,
    credential_from_string,
    new_salt,
    salted_password,
)

pytestmark = pytest.mark.integration

ODRADEK = str(Path(sys.executable).parent / "odradek")
ALTER, DESCRIBE = 51, 50
#: how long a change may take from the request's sending to every broker's cache: measured 20 to
#: 40 ms on an idle machine (the request and its multi, then on each broker a ZooKeeper watch and
#: one batched read); the bound leaves a loaded test host 75 times that
CACHE_BOUND_S = 3.0
CREDENTIAL = re.compile(r"salt=[A-Za-z0-9+/]+=*,stored_key=[A-Za-z0-9+/]+=*,server_key=[A-Za-z0-9+/]+=*,"
                        r"iterations=(\d+)")


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


def user_node(zk: KazooClient, znode_name: str) -> dict[str, Any] | None:
    """/config/users/<name> as JSON, None when there is no such node."""
    stat = zk.exists(f"/config/users/{znode_name}")
    return None if stat is None else json.loads(zk.get(f"/config/users/{znode_name}")[0])


def stored_data(zk: KazooClient) -> tuple[dict[str, bytes], list[str]]:
    """Every /config/users node's bytes and every change notification: what bad input must not touch."""
    users = {name: zk.get(f"/config/users/{name}")[0] for name in zk.get_children("/config/users")}
    return users, sorted(zk.get_children("/config/changes"))


def exchange(stored: str, mechanism: str, user: str, password: str) -> str | None:
    """A whole SCRAM exchange of ``password`` against the stored credential string: the
    authenticated user, or None when it is refused."""
    credential = credential_from_string(stored)
    server = ScramSaslServer(mechanism, lambda name: credential if name == user else None)
    client = ScramSaslClient(mechanism, user, password)
    try:
        client.evaluate(server.evaluate(client.evaluate(server.evaluate(client.evaluate(b"")))))
    except SaslAuthenticationError:
        return None
    assert client.complete and server.complete
    return server.authorization_id


def controller(zk: KazooClient) -> int:
    return int(json.loads(zk.get("/controller")[0])["brokerid"])


def address(cluster: LocalCluster, broker_id: int) -> str:
    return f"{cluster.host}:{cluster.broker_port(broker_id)}"


def log_size(cluster: LocalCluster, broker_id: int) -> int:
    return (cluster.broker_dir(broker_id) / "broker.log").stat().st_size


def wait_for_log(cluster: LocalCluster, broker_id: int, offset: int, line: str, bound_s: float,
                 since: float | None = None) -> float:
    """Seconds from ``since`` (time.monotonic(); default now) until broker ``broker_id`` logged
    ``line`` after ``offset``; fails past the bound."""
    started = time.monotonic() if since is None else since
    path = cluster.broker_dir(broker_id) / "broker.log"
    while True:
        with path.open("rb") as log:
            log.seek(offset)
            if line.encode() in log.read():
                return time.monotonic() - started
        elapsed = time.monotonic() - started
        assert elapsed < bound_s, f"broker {broker_id} did not log {line!r} within {bound_s} s"
        time.sleep(0.005)


def test_users_added_listed_and_deleted_through_the_cli_are_stored_as_kafka_stores_them(
        cluster: LocalCluster, zk: KazooClient) -> None:
    # a quota set on the user before (as kafka-configs.sh would), which credentials must not disturb
    zk.create("/config/users/alice", b'{"version":1,"config":{"producer_byte_rate":"1024"}}')
    done = odradek(cluster, "users", "add", "alice", "--password", "alice-256")
    assert done.returncode == 0 and done.stdout == "user alice: SCRAM-SHA-256 credential set (4096 iterations)\n"
    done = odradek(cluster, "users", "add", "alice", "--password", "alice-512", "--mechanism", "SCRAM-SHA-512",
                   "--iterations", "8192")
    assert done.returncode == 0, done.stderr
    bob = "CN=bob,O=x y*"
    assert odradek(cluster, "users", "add", bob, "--password", "bob-pw").returncode == 0

    node = user_node(zk, "alice")
    assert node is not None and set(node) == {"version", "config"} and node["version"] == 1
    assert set(node["config"]) == {"producer_byte_rate", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert node["config"]["producer_byte_rate"] == "1024"
    assert CREDENTIAL.fullmatch(node["config"]["SCRAM-SHA-256"])[1] == "4096"  # type: ignore[index]
    assert CREDENTIAL.fullmatch(node["config"]["SCRAM-SHA-512"])[1] == "8192"  # type: ignore[index]
    assert zk.get("/config/users/alice")[0] == json.dumps(node, separators=(",", ":")).encode()  # compact, as Kafka
    assert exchange(node["config"]["SCRAM-SHA-256"], SCRAM_SHA_256, "alice", "alice-256") == "alice"
    assert exchange(node["config"]["SCRAM-SHA-512"], SCRAM_SHA_512, "alice", "alice-512") == "alice"
    assert exchange(node["config"]["SCRAM-SHA-256"], SCRAM_SHA_256, "alice", "alice-512") is None
    bob_node = user_node(zk, "CN%3Dbob%2CO%3Dx%20y%2A")  # Kafka's Sanitizer
    assert bob_node is not None and exchange(bob_node["config"]["SCRAM-SHA-256"], SCRAM_SHA_256, bob, "bob-pw") == bob
    notifications = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": "users/alice"} in notifications
    assert {"version": 2, "entity_path": "users/CN%3Dbob%2CO%3Dx%20y%2A"} in notifications

    listed = odradek(cluster, "users", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {"user": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 4096} in rows
    assert {"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 8192} in rows
    assert {"user": bob, "mechanism": "SCRAM-SHA-256", "iterations": 4096} in rows
    listed = odradek(cluster, "users", "list", "alice")
    assert listed.stdout.split("\n")[0].split() == ["User", "Mechanism", "Iterations"]
    assert [line.split() for line in listed.stdout.strip().split("\n")[1:]] == [
        ["alice", "SCRAM-SHA-256", "4096"], ["alice", "SCRAM-SHA-512", "8192"]]
    missing = odradek(cluster, "users", "list", "alice", "nobody")
    assert missing.returncode == 1 and "alice" in missing.stdout
    assert missing.stderr == ("odradek: error: users list: nobody: RESOURCE_NOT_FOUND: Attempt to describe a user "
                              "credential that does not exist: nobody\n")

    deleted = odradek(cluster, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-256")
    assert deleted.returncode == 0 and deleted.stdout == "user alice: SCRAM-SHA-256 credential deleted\n"
    assert set(user_node(zk, "alice")["config"]) == {"producer_byte_rate", "SCRAM-SHA-512"}  # type: ignore[index]
    deleted = odradek(cluster, "users", "delete", bob)
    assert deleted.returncode == 0 and deleted.stdout == f"user {bob}: SCRAM-SHA-256 credential deleted\n"
    deleted = odradek(cluster, "users", "delete", "alice")
    assert deleted.returncode == 0 and deleted.stdout == "user alice: SCRAM-SHA-512 credential deleted\n"
    assert user_node(zk, "alice") == {"version": 1, "config": {"producer_byte_rate": "1024"}}
    again = odradek(cluster, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-512")
    assert again.returncode == 1 and again.stderr == (
        "odradek: error: cannot delete the SCRAM-SHA-512 credentials of user alice: RESOURCE_NOT_FOUND: Attempt to "
        "delete a user credential that does not exist\n")
    again = odradek(cluster, "users", "delete", "alice")
    assert again.returncode == 1 and "RESOURCE_NOT_FOUND" in again.stderr and again.stderr.count("\n") == 1
    assert "alice" not in [r["user"] for r in json.loads(odradek(cluster, "users", "list", "--json").stdout)]


def test_a_change_reaches_every_brokers_credential_cache(cluster: LocalCluster, zk: KazooClient) -> None:
    admin = UserScramAdmin(cluster.bootstrap_servers, 10.0)
    for iterations, expected in ((8192, "SCRAM-SHA-256 (8192 iterations)"), (16384, "SCRAM-SHA-256 (16384 iterations)"),
                                 (None, "none")):
        offsets = {b: log_size(cluster, b) for b in cluster.broker_ids}
        sent = time.monotonic()
        if iterations is None:
            admin.delete("carol")
        else:
            admin.add("carol", "carol-pw", SCRAM_SHA_256, iterations)
        answered = time.monotonic() - sent
        line = f"SCRAM credentials of user 'carol' now: {expected}"
        # from the request's sending to the cache: the controller stores it, every broker follows the notification
        waited = {b: wait_for_log(cluster, b, offsets[b], line, CACHE_BOUND_S, sent) for b in cluster.broker_ids}
        print(f"carol {expected}: in the caches of brokers {sorted(waited)} after "
              f"{', '.join(f'{w * 1000:.0f}' for w in waited.values())} ms (the request took {answered * 1000:.0f} ms)")


def test_a_restarted_broker_loads_the_credentials_stored_while_it_was_down(
        cluster: LocalCluster, zk: KazooClient) -> None:
    victim = next(b for b in cluster.broker_ids if b != controller(zk))
    admin = UserScramAdmin(cluster.bootstrap_servers, 10.0)
    cluster.kill_broker(victim)
    try:
        admin.add("dave", "dave-pw", SCRAM_SHA_512, 4096)
    finally:
        offset = log_size(cluster, victim)
        cluster.start_broker(victim)
        cluster.wait_ready(cluster.broker_ids, timeout=60)
    try:
        wait_for_log(cluster, victim, offset, "SCRAM credentials of user 'dave' now: SCRAM-SHA-512 (4096 iterations)",
                     5.0)
        with (cluster.broker_dir(victim) / "broker.log").open("rb") as log:
            log.seek(offset)
            text = log.read().decode()
        # at startup, before the change notifications are followed: the load of /config/users
        assert text.index("user 'dave' now") < text.index("/config/users: ")
    finally:
        admin.delete("dave")


def test_librdkafka_admin_calls_store_credentials_that_verify(cluster: LocalCluster, zk: KazooClient) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"erin-pw"),
        UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 10000), b"erin-pw5")])
    for future in futures.values():
        future.result(30)
    node = user_node(zk, "erin")
    assert node is not None
    assert exchange(node["config"]["SCRAM-SHA-256"], SCRAM_SHA_256, "erin", "erin-pw") == "erin"
    assert exchange(node["config"]["SCRAM-SHA-512"], SCRAM_SHA_512, "erin", "erin-pw5") == "erin"
    described = admin.describe_user_scram_credentials(["erin"])["erin"].result(30)
    assert sorted((str(i.mechanism), i.iterations) for i in described.scram_credential_infos) == [
        ("ScramMechanism.SCRAM_SHA_256", 4096), ("ScramMechanism.SCRAM_SHA_512", 10000)]
    everyone = admin.describe_user_scram_credentials().result(30)
    assert "erin" in everyone
    for future in admin.alter_user_scram_credentials([
            UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256),
            UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)]).values():
        future.result(30)
    assert user_node(zk, "erin") == {"version": 1, "config": {}}


def upsertion(name: str, mechanism: int = 1, iterations: int = 4096, password: str = "pw") -> dict[str, Any]:
    salt = new_salt()
    hashed = salted_password(SCRAM_SHA_512 if mechanism == 2 else SCRAM_SHA_256, password, salt, iterations)
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": hashed}


def alter(server: str, upsertions: list[dict[str, Any]], deletions: list[tuple[str, int]] = ()) -> dict[str, tuple]:
    response = send_request(server, ALTER, 0, {"upsertions": upsertions,
                                               "deletions": [{"name": n, "mechanism": m} for n, m in deletions]}, 10.0)
    return {r.user: (int(r.error_code), r.error_message) for r in response.results}


def test_bad_input_gets_kafkas_errors_and_changes_no_stored_data(cluster: LocalCluster, zk: KazooClient) -> None:
    admin = UserScramAdmin(cluster.bootstrap_servers, 10.0)
    admin.add("frank", "frank-pw", SCRAM_SHA_256, 4096)
    try:
        before = stored_data(zk)
        active = address(cluster, controller(zk))
        assert alter(active, [upsertion("gina", iterations=100)]) == {
            "gina": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")}
        assert alter(active, [upsertion("gina", iterations=20000)]) == {
            "gina": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")}
        assert alter(active, [upsertion("gina"), upsertion("gina", password="other")]) == {
            "gina": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")}
        assert alter(active, [upsertion("frank")], [("frank", 1)]) == {
            "frank": (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")}
        assert alter(active, [upsertion("gina", mechanism=3)]) == {
            "gina": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")}
        assert alter(active, [], [("gina", 1), ("frank", 2)]) == {
            "gina": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
            "frank": (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")}
        assert alter(active, [upsertion("")]) == {"": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")}
        not_controller = address(cluster, next(b for b in cluster.broker_ids if b != controller(zk)))
        assert alter(not_controller, [upsertion("gina"), upsertion("abe")]) == {
            user: (ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.")
            for user in ("abe", "gina")}
        assert admin.alter([Upsertion("gina", SCRAM_SHA_512, 20000, "pw")], [("abe", SCRAM_SHA_256)]) == {
            "gina": "UNACCEPTABLE_CREDENTIAL: Too many iterations",
            "abe": "RESOURCE_NOT_FOUND: Attempt to delete a user credential that does not exist"}
        with pytest.raises(AdminError, match="^cannot set the SCRAM-SHA-512 credential of user gina: "
                                             "UNACCEPTABLE_CREDENTIAL: Too few iterations$"):
            admin.add("gina", "pw", SCRAM_SHA_512, 100)
        described = send_request(active, DESCRIBE, 0, {"users": [{"name": "frank"}, {"name": "frank"},
                                                                  {"name": ""}, {"name": "gina"}]}, 10.0)
        assert [(r.user, int(r.error_code)) for r in described.results] == [
            ("frank", ErrorCode.DUPLICATE_RESOURCE), ("", ErrorCode.RESOURCE_NOT_FOUND),
            ("gina", ErrorCode.RESOURCE_NOT_FOUND)]
        assert stored_data(zk) == before

        # the CLI refuses what it can before sending, in one line
        for args, words in ((["add", "gina", "--password", "pw", "--iterations", "100"], "--iterations"),
                            (["add", "gina", "--password", "pw", "--mechanism", "SCRAM-SHA-1"], "--mechanism"),
                            (["add", "gina"], "no password"),
                            (["add", "gina", "--password", ""], "the password is empty"),
                            (["delete", "gina"], "RESOURCE_NOT_FOUND")):
            done = odradek(cluster, "users", *args)
            assert done.returncode in (1, 2) and done.stderr.count("\n") == 1 and words in done.stderr, (args, done)
            assert done.stderr.startswith("odradek: error: ") and "Traceback" not in done.stderr
        assert stored_data(zk) == before

        # a refused user does not stop the good one of the same request
        assert alter(active, [upsertion("gina", password="gina-pw"), upsertion("hal", iterations=1)]) == {
            "gina": (0, None), "hal": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")}
        assert user_node(zk, "hal") is None
        assert exchange(user_node(zk, "gina")["config"]["SCRAM-SHA-256"],  # type: ignore[index]
                        SCRAM_SHA_256, "gina", "gina-pw") == "gina"
    finally:
        for user in ("frank", "gina"):
            try:
                admin.delete(user)
            except AdminError:
                pass
