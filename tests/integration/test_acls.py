"""ACLs on real brokers: two brokers with authorizer.class.name=kafka.security.authorizer.AclAuthorizer
and allow.everyone.if.no.acl.found=true, ACLs created, listed and removed with `odradek acls` and
with confluent-kafka's AdminClient, stored in ZooKeeper as Kafka stores them, and applied by the
other broker through the change notifications (how fast is printed and recorded as the test's
``acl_propagation_ms`` property); a restarted broker loads them all; a broker without an
authorizer answers SECURITY_DISABLED; bad bindings are refused with INVALID_REQUEST and store
nothing.

No authentication exists on these listeners, so every client is User:ANONYMOUS: the first ACL
created allows it everything on the cluster, which the ACL requests need once the cluster
resource has ACLs of its own.
"""
from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from cluster_helpers import start_cluster
from odradek.admin.admin_client import send_request
from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration
#: the `cluster` fixture is the shared cluster (no authorizer): only ACL requests, all refused, go to it
SHARE_CLUSTER = True

ODRADEK = str(Path(sys.executable).parent / "odradek")
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
INVALID_REQUEST, SECURITY_DISABLED, TOPIC_AUTHORIZATION_FAILED = 42, 54, 29
TOPIC, GROUP, CLUSTER, ANY = 2, 3, 4, 1
LITERAL, PREFIXED, MATCH = 3, 4, 2
READ, WRITE, ALL, ANY_OP = 3, 4, 2, 1
ALLOW, DENY, ANY_PERMISSION = 3, 2, 1


@pytest.fixture(scope="module")
def acl_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = start_cluster(zookeeper, tmp_path_factory.mktemp("acl-cluster"), 2,
                            authorizer_class_name=ACL_AUTHORIZER, allow_everyone_if_no_acl_found=True)
    try:
        assert odradek(cluster, "acls", "add", "--cluster", "--allow-principal", "User:ANONYMOUS").returncode == 0
        yield cluster
    finally:
        cluster.down()


def odradek(cluster: LocalCluster, *args: str, bootstrap: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ODRADEK, *args, "--bootstrap-server", bootstrap or cluster.bootstrap_servers],
                          capture_output=True, text=True, timeout=60)


def address(cluster: LocalCluster, broker_id: int) -> str:
    return f"{cluster.host}:{cluster.broker_port(broker_id)}"


def acl_filter(name: str | None = None, resource_type: int = ANY, pattern: int = 1, principal: str | None = None,
               operation: int = ANY_OP, permission: int = ANY_PERMISSION) -> dict[str, Any]:
    return {"resource_type_filter": resource_type, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": principal, "host_filter": None, "operation": operation, "permission_type": permission}


def describe_raw(server: str, version: int = 3, **filter_: Any) -> Any:
    return send_request(server, DESCRIBE_ACLS, version, acl_filter(**filter_), 10)


def acls_on(server: str, **filter_: Any) -> set[tuple[int, str, int, str, str, int, int]]:
    response = describe_raw(server, **filter_)
    assert int(response.error_code) == 0, response
    return {(int(r.resource_type), r.resource_name, int(r.pattern_type), a.principal, a.host, int(a.operation),
             int(a.permission_type)) for r in response.resources for a in r.acls}


def creation(name: str, resource_type: int = TOPIC, pattern: int = LITERAL, principal: str = "User:alice",
             operation: int = READ, permission: int = ALLOW) -> dict[str, Any]:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": "*", "operation": operation, "permission_type": permission}


def create_raw(server: str, *creations: dict[str, Any], version: int = 3) -> list[tuple[int, str | None]]:
    response = send_request(server, CREATE_ACLS, version, {"creations": list(creations)}, 10)
    return [(int(r.error_code), r.error_message) for r in response.results]


def znode(cluster: LocalCluster, path: str) -> Any:
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        data, _ = zk.get(path)
        return data
    finally:
        zk.stop()
        zk.close()


def children(cluster: LocalCluster, path: str) -> list[str]:
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        return sorted(zk.get_children(path))
    finally:
        zk.stop()
        zk.close()


def test_the_cli_adds_lists_and_removes_acls_stored_as_kafka_stores_them(acl_cluster: LocalCluster) -> None:
    added = odradek(acl_cluster, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                    "--operation", "Write", "--topic", "cli-orders")
    assert added.returncode == 0, added.stderr
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=cli-orders, patternType=LITERAL)`:" \
        in added.stdout
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in added.stdout
    assert json.loads(znode(acl_cluster, "/kafka-acl/Topic/cli-orders")) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}]}
    notes = [znode(acl_cluster, f"/kafka-acl-changes/{c}") for c in children(acl_cluster, "/kafka-acl-changes")]
    assert b"TOPIC:cli-orders" in notes and b"CLUSTER:kafka-cluster" in notes

    added = odradek(acl_cluster, "acls", "add", "--deny-principal", "User:bob", "--deny-host", "10.9.9.9",
                    "--topic", "cli-fin-", "--resource-pattern-type", "prefixed", "--operation", "Write")
    assert added.returncode == 0, added.stderr
    assert json.loads(znode(acl_cluster, "/kafka-acl-extended/prefixed/Topic/cli-fin-")) == {"version": 1, "acls": [
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "10.9.9.9"}]}
    notes = [json.loads(znode(acl_cluster, f"/kafka-acl-extended-changes/{c}"))
             for c in children(acl_cluster, "/kafka-acl-extended-changes")]
    assert {"version": 1, "resourceType": "TOPIC", "name": "cli-fin-", "patternType": "PREFIXED"} in notes

    producer = odradek(acl_cluster, "acls", "add", "--producer", "--topic", "cli-orders", "--transactional-id",
                       "cli-tx", "--allow-principal", "User:carol", "--json")
    assert producer.returncode == 0, producer.stderr
    assert {(a["resource_type"], a["operation"]) for a in json.loads(producer.stdout)["added"]} == {
        ("TOPIC", "WRITE"), ("TOPIC", "DESCRIBE"), ("TOPIC", "CREATE"), ("TRANSACTIONAL_ID", "WRITE"),
        ("TRANSACTIONAL_ID", "DESCRIBE")}

    # list: literal, prefixed, match (what applies to cli-fin-1), by principal
    listed = json.loads(odradek(acl_cluster, "acls", "list", "--topic", "cli-orders", "--json").stdout)
    assert {(a["principal"], a["operation"]) for a in listed} == {
        ("User:alice", "READ"), ("User:alice", "WRITE"), ("User:carol", "WRITE"), ("User:carol", "DESCRIBE"),
        ("User:carol", "CREATE")}
    matched = json.loads(odradek(acl_cluster, "acls", "list", "--topic", "cli-fin-1", "--resource-pattern-type",
                                 "match", "--json").stdout)
    assert [(a["name"], a["pattern_type"], a["permission_type"]) for a in matched] == [("cli-fin-", "PREFIXED", "DENY")]
    prefixed = odradek(acl_cluster, "acls", "list", "--topic", "cli-fin-", "--resource-pattern-type", "prefixed")
    assert "patternType=PREFIXED" in prefixed.stdout and "User:bob" in prefixed.stdout
    by_principal = odradek(acl_cluster, "acls", "list", "--principal", "User:carol")
    assert by_principal.stdout.startswith("ACLs for principal `User:carol`") and "User:alice" not in by_principal.stdout

    # remove one entry, then without a principal every ACL of the resource
    removed = odradek(acl_cluster, "acls", "remove", "--allow-principal", "User:alice", "--operation", "Write",
                      "--topic", "cli-orders", "--force", "--json")
    assert removed.returncode == 0, removed.stderr
    assert [(a["principal"], a["operation"]) for a in json.loads(removed.stdout)["removed"]] == [("User:alice", "WRITE")]
    refused = odradek(acl_cluster, "acls", "remove", "--topic", "cli-orders")  # no terminal: --force is the answer
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "--force" in refused.stderr
    removed = odradek(acl_cluster, "acls", "remove", "--topic", "cli-orders", "--transactional-id", "cli-tx",
                      "--force")
    assert removed.returncode == 0, removed.stderr
    assert "Removed ACLs for resource" in removed.stdout
    assert children(acl_cluster, "/kafka-acl/Topic").count("cli-orders") == 0
    assert children(acl_cluster, "/kafka-acl/TransactionalId") == []
    assert odradek(acl_cluster, "acls", "remove", "--topic", "cli-fin-", "--resource-pattern-type", "prefixed",
                   "--force").returncode == 0
    assert json.loads(odradek(acl_cluster, "acls", "list", "--topic", "cli-orders", "--json").stdout) == []


def test_cli_errors_are_one_line(acl_cluster: LocalCluster, cluster: LocalCluster) -> None:
    cases = [
        (acl_cluster, ("acls", "add", "--topic", "t", "--allow-principal", "alice"), "Type:name"),
        (acl_cluster, ("acls", "add", "--topic", "t"), "--allow-principal"),
        (acl_cluster, ("acls", "add", "--allow-principal", "User:a"), "at least one resource"),
        (acl_cluster, ("acls", "add", "--group", "g", "--allow-principal", "User:a", "--operation", "Write"),
         "does not take operation Write"),
        (acl_cluster, ("acls", "add", "--topic", "t", "--allow-principal", "User:a", "--operation", "Fly"),
         "unknown operation"),
        (acl_cluster, ("acls", "add", "--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type",
                       "match"), "not valid when adding"),
        (acl_cluster, ("acls", "add", "--consumer", "--topic", "t", "--allow-principal", "User:a"), "--group"),
        (cluster, ("acls", "list"), "no authorizer (SECURITY_DISABLED"),
        (cluster, ("acls", "add", "--topic", "t", "--allow-principal", "User:a"), "no authorizer (SECURITY_DISABLED"),
    ]
    for target, args, words in cases:
        result = odradek(target, *args)
        assert result.returncode in (1, 2), (args, result)
        last = result.stderr.strip().splitlines()[-1]
        assert words in last and "Traceback" not in result.stderr, (args, result.stderr)
        assert result.returncode == 2 or len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_admin_client_creates_describes_and_deletes_with_filters(acl_cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": acl_cluster.bootstrap_servers})
    bindings = [
        AclBinding(ResourceType.TOPIC, "ac-orders", ResourcePatternType.LITERAL, "User:dave", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "ac-", ResourcePatternType.PREFIXED, "User:dave", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:erin", "*",
                   AclOperation.DESCRIBE, AclPermissionType.DENY),
        AclBinding(ResourceType.GROUP, "ac-group", ResourcePatternType.LITERAL, "User:dave", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ]
    for future in admin.create_acls(bindings, request_timeout=10).values():
        assert future.result(30) is None

    def described(name: str | None, pattern: ResourcePatternType, rtype: ResourceType = ResourceType.TOPIC,
                  principal: str | None = None) -> set[tuple[str, str]]:
        found = admin.describe_acls(AclBindingFilter(rtype, name, pattern, principal, None, AclOperation.ANY,
                                                     AclPermissionType.ANY)).result(30)
        return {(b.name, b.resource_pattern_type.name) for b in found}

    assert described("ac-orders", ResourcePatternType.LITERAL) == {("ac-orders", "LITERAL")}
    assert described("ac-", ResourcePatternType.PREFIXED) == {("ac-", "PREFIXED")}
    assert described("ac-orders", ResourcePatternType.MATCH) == {("ac-orders", "LITERAL"), ("ac-", "PREFIXED"),
                                                                 ("*", "LITERAL")}
    assert described(None, ResourcePatternType.ANY, ResourceType.ANY, "User:dave") == {
        ("ac-orders", "LITERAL"), ("ac-", "PREFIXED"), ("ac-group", "LITERAL")}

    # a MATCH filter deletes what applies to ac-orders for dave: the literal and the prefixed ACL
    deleted = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "ac-orders", ResourcePatternType.MATCH,
                                                  "User:dave", None, AclOperation.ANY, AclPermissionType.ANY)],
                                request_timeout=10)
    assert {(b.name, b.operation.name) for f in deleted.values() for b in f.result(30)} == {
        ("ac-orders", "READ"), ("ac-", "WRITE")}
    assert described(None, ResourcePatternType.ANY, ResourceType.ANY, "User:dave") == {("ac-group", "LITERAL")}
    deleted = admin.delete_acls([AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:dave", None,
                                                  AclOperation.ANY, AclPermissionType.ANY),
                                 AclBindingFilter(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, None, None,
                                                  AclOperation.ANY, AclPermissionType.ANY)], request_timeout=10)
    assert sorted(b.name for f in deleted.values() for b in f.result(30)) == ["*", "ac-group"]
    assert children(acl_cluster, "/kafka-acl/Group") == []


def test_the_other_broker_applies_a_change_within_a_bound(acl_cluster: LocalCluster,
                                                          record_property: Any) -> None:
    """CreateAcls and DeleteAcls answered by broker 1, DescribeAcls polled on broker 2 until it
    shows the change: the time from broker 1's answer to broker 2's first answer with it."""
    one, two = address(acl_cluster, 1), address(acl_cluster, 2)
    delays = []
    for i in range(10):
        name = f"prop-{i}"
        pattern = PREFIXED if i % 2 else LITERAL
        assert create_raw(one, creation(name, pattern=pattern)) == [(0, None)]
        started = time.monotonic()
        while not acls_on(two, name=name, resource_type=TOPIC, pattern=pattern):
            assert time.monotonic() - started < 10, f"broker 2 did not apply {name} in 10 s"
            time.sleep(0.002)
        delays.append(time.monotonic() - started)
        response = send_request(one, DELETE_ACLS, 3, {"filters": [acl_filter(name, TOPIC, pattern)]}, 10)
        assert len(response.filter_results[0].matching_acls) == 1
        started = time.monotonic()
        while acls_on(two, name=name, resource_type=TOPIC, pattern=pattern):
            assert time.monotonic() - started < 10, f"broker 2 did not remove {name} in 10 s"
            time.sleep(0.002)
        delays.append(time.monotonic() - started)
    median_ms, max_ms = statistics.median(delays) * 1000, max(delays) * 1000
    record_property("acl_propagation_ms", {"median": round(median_ms, 1), "max": round(max_ms, 1), "n": len(delays)})
    print(f"\nACL propagation broker 1 -> broker 2 (CreateAcls / DeleteAcls answered until DescribeAcls "
          f"shows it): median {median_ms:.1f} ms, max {max_ms:.1f} ms over {len(delays)} changes")
    assert max_ms < 1000


def test_a_restarted_broker_loads_every_acl(acl_cluster: LocalCluster) -> None:
    one, two = address(acl_cluster, 1), address(acl_cluster, 2)
    made = [creation(f"restart-{i}", pattern=PREFIXED if i % 3 == 0 else LITERAL) for i in range(20)]
    assert create_raw(one, *made) == [(0, None)] * 20
    expected = acls_on(one)
    acl_cluster.kill_broker(2, signal.SIGTERM)
    # changed while broker 2 is down: it must read it at startup, not from a notification
    assert create_raw(one, creation("restart-while-down")) == [(0, None)]
    acl_cluster.start_broker(2)
    acl_cluster.wait_ready([1, 2], 60, [2])
    assert acls_on(two) == acls_on(one) and len(acls_on(two)) == len(expected) + 1
    names = [c["resource_name"] for c in made] + ["restart-while-down"]
    response = send_request(one, DELETE_ACLS, 3, {"filters": [acl_filter(n, TOPIC, ANY) for n in names]}, 10)
    assert sum(len(r.matching_acls) for r in response.filter_results) == 21


def test_a_broker_without_an_authorizer_answers_security_disabled(cluster: LocalCluster) -> None:
    server = cluster.bootstrap_servers.split(",")[0]
    for version in (1, 2, 3):
        response = describe_raw(server, version)
        assert (int(response.error_code), response.resources) == (SECURITY_DISABLED, ())
        assert create_raw(server, creation("x"), version=version) == [(SECURITY_DISABLED, "No Authorizer is configured.")]
        response = send_request(server, DELETE_ACLS, version, {"filters": [acl_filter()]}, 10)
        assert [int(r.error_code) for r in response.filter_results] == [SECURITY_DISABLED]
    # (librdkafka's describe_acls drops DescribeAcls' top-level error and answers []: CreateAcls shows it)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    future = admin.create_acls([AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:x", "*",
                                           AclOperation.READ, AclPermissionType.ALLOW)], request_timeout=10)
    with pytest.raises(KafkaException) as info:
        list(future.values())[0].result(30)
    assert info.value.args[0].code() == SECURITY_DISABLED


def test_bad_bindings_are_refused_with_invalid_request_and_nothing_is_stored(acl_cluster: LocalCluster) -> None:
    one = address(acl_cluster, 1)
    before = acls_on(one)
    tree = {path: children(acl_cluster, path) for path in ("/kafka-acl/Topic", "/kafka-acl/Cluster",
                                                           "/kafka-acl-extended/prefixed/Topic")}
    changes = len(children(acl_cluster, "/kafka-acl-changes"))
    bad = [creation("bad", resource_type=ANY), creation("bad", pattern=MATCH), creation("bad", operation=ANY_OP),
           creation("bad", permission=ANY_PERMISSION), creation("bad", principal="alice"),
           creation("my-cluster", resource_type=CLUSTER), creation(""), creation("a/b")]
    for version in (1, 2, 3):
        results = create_raw(one, *bad, version=version)
        assert [code for code, _ in results] == [INVALID_REQUEST] * len(bad), results
        # unknown codes refuse the whole request, the good binding in it too
        assert [c for c, _ in create_raw(one, creation("good-but-not-stored"), creation("bad", operation=0),
                                         version=version)] == [INVALID_REQUEST] * 2
    assert acls_on(one) == before
    assert {path: children(acl_cluster, path) for path in tree} == tree
    assert len(children(acl_cluster, "/kafka-acl-changes")) == changes
    admin = AdminClient({"bootstrap.servers": acl_cluster.bootstrap_servers})
    # confluent-kafka names code 4 (CLUSTER in ACLs) BROKER
    future = admin.create_acls([AclBinding(ResourceType.BROKER, "not-kafka-cluster", ResourcePatternType.LITERAL,
                                           "User:x", "*", AclOperation.ALTER, AclPermissionType.ALLOW)],
                               request_timeout=10)
    with pytest.raises(KafkaException) as info:
        list(future.values())[0].result(30)
    assert info.value.args[0].code() == INVALID_REQUEST


def test_a_deny_acl_refuses_produce(acl_cluster: LocalCluster) -> None:
    """A DENY of WRITE on the topic wins over the ALLOW ALL on the cluster and over
    allow.everyone.if.no.acl.found: the producer's records are refused with
    TOPIC_AUTHORIZATION_FAILED (broker/request_authorization.py)."""
    topic = "denied-topic"
    admin = AdminClient({"bootstrap.servers": acl_cluster.bootstrap_servers})
    from confluent_kafka.admin import NewTopic
    admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(30)
    assert odradek(acl_cluster, "acls", "add", "--deny-principal", "User:ANONYMOUS", "--operation", "Write",
                   "--topic", topic).returncode == 0
    time.sleep(0.5)  # both brokers have it (well under the propagation bound)
    producer = Producer({"bootstrap.servers": acl_cluster.bootstrap_servers, "retries": 0,
                         "message.timeout.ms": 10000, "enable.idempotence": False})
    errors: list[Any] = []
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == TOPIC_AUTHORIZATION_FAILED
