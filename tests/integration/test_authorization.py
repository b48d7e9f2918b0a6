"""Every API family authorized as Apache Kafka 3.x authorizes it, on two real brokers with
authorizer.class.name=kafka.security.authorizer.AclAuthorizer, and a principal per client:

    PLAINTEXT://{port}   the cluster tooling's readiness checks (User:ANONYMOUS, no ACLs)
    SASL://{port+2}      SASL_PLAINTEXT with PLAIN users, the inter-broker listener too
                         (User:broker, a super user: replication, the controller, markers)

The principals: admin (a super user), alice (ACLs on LITERAL lit-* and PREFIXED pre-* names,
and a PREFIXED DENY on pre-deny-*), bob (no ACL at all), ops (ALTER and DESCRIBE on the cluster),
dave (ALL on the cluster with DENY of ALTER and DESCRIBE). For each API the matrix: allowed by a
LITERAL ACL, denied without one, denied by DENY over ALLOW, allowed by a PREFIXED pattern, and a
super user allowed; the cluster's APIs have no PREFIXED case (the cluster has one name).

Raw requests (a SASL/PLAIN connection per request) read the exact error codes where a client
would turn them into exceptions; confluent-kafka produces, consumes in a group, runs a
transaction and is stopped by a revoked ACL. The revocation's bound is measured (the time from
DeleteAcls' answer to the consumer's first TOPIC_AUTHORIZATION_FAILED, for a consumer reading a
stream of records and for an idle one), printed and recorded as the test's ``acl_revocation_ms``
property.
"""
from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
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
from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch
from odradek.security.client_security import ClientSecurity, connect_blocking
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

BROKERS = 2
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
PASSWORDS = {name: f"{name}-secret" for name in ("broker", "admin", "alice", "bob", "ops", "dave")}
AUTHORIZATION_ERRORS = {ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
ALL, READ, ALTER, DESCRIBE = 2, 3, 7, 8
DENY, ALLOW = 2, 3
#: each topic one partition on both brokers; pre-deny-* exist so a denial is not their absence
TOPICS = ["lit-t", "pre-ok-t", "pre-deny-t", "sup-t", "lit-del", "pre-ok-del", "pre-deny-del", "sup-del", "rev-t"]


@pytest.fixture(scope="module")
def secured(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    users = " ".join(f'user_{name}="{password}"' for name, password in PASSWORDS.items())
    cluster = start_cluster(
        zookeeper, tmp_path_factory.mktemp("authorization"), BROKERS, ports_per_broker=2,
        listeners=f"PLAINTEXT://127.0.0.1:{{port}},SASL://127.0.0.1:{{port+{BROKERS}}}",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
        inter_broker_listener_name="SASL", sasl_mechanism_inter_broker_protocol="PLAIN",
        authorizer_class_name="kafka.security.authorizer.AclAuthorizer", super_users="User:broker;User:admin",
        **{"listener.name.sasl.plain.sasl.jaas.config":
           f'{PLAIN_MODULE} required username="broker" password="{PASSWORDS["broker"]}" {users};'})
    try:
        yield cluster
    finally:
        cluster.down()


def sasl_port(cluster: LocalCluster, broker_id: int) -> int:
    return cluster.broker_port(broker_id) + BROKERS


def conf(cluster: LocalCluster, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": ",".join(f"127.0.0.1:{sasl_port(cluster, b)}" for b in cluster.broker_ids),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": PASSWORDS[user]}


def raw(cluster: LocalCluster, user: str, api_key: int, version: int, body: dict[str, Any], broker: int = 1) -> Any:
    """One request as ``user`` on a SASL/PLAIN connection of its own to ``broker``; the response."""
    security = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", user, PASSWORDS[user])
    with connect_blocking("127.0.0.1", sasl_port(cluster, broker), security, 10, "authz-test") as sock:
        sock.sendall(kio_util.encode_request(api_key, version, 1, "authz-test", body))
        (size,) = struct.unpack(">i", _read(sock, 4))
        return kio_util.decode_response(api_key, version, _read(sock, size))[1]


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


def acl(resource_type: int, name: str, principal: str, operation: int = ALL, permission: int = ALLOW,
        pattern: int = LITERAL) -> dict[str, Any]:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": "*", "operation": operation, "permission_type": permission}


class World:
    """The cluster with its topics, ACLs, groups and where each lives."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        alice = "User:alice"
        creations = [acl(TOPIC, "lit-t", alice), acl(TOPIC, "lit-del", alice), acl(TOPIC, "lit-new", alice),
                     acl(TOPIC, "rev-t", alice, READ), acl(GROUP, "rev-g", alice, READ),
                     acl(CLUSTER, "kafka-cluster", "User:ops", ALTER), acl(CLUSTER, "kafka-cluster", "User:ops", DESCRIBE),
                     acl(CLUSTER, "kafka-cluster", "User:dave"),
                     acl(CLUSTER, "kafka-cluster", "User:dave", ALTER, DENY),
                     acl(CLUSTER, "kafka-cluster", "User:dave", DESCRIBE, DENY)]
        creations += [acl(GROUP, "lit-g", alice), acl(TXN, "lit-tx", alice)]
        for resource_type in (TOPIC, GROUP, TXN):
            creations += [acl(resource_type, "pre-", alice, pattern=PREFIXED),
                          acl(resource_type, "pre-deny-", alice, permission=DENY, pattern=PREFIXED)]
        answer = raw(cluster, "admin", 30, 3, {"creations": creations})
        assert [r.error_code for r in answer.results] == [ErrorCode.NONE] * len(creations)
        answer = raw(cluster, "admin", 19, 7, {"timeout": 30000, "validate_only": False, "topics": [
            {"name": t, "num_partitions": 1, "replication_factor": BROKERS, "assignments": [], "configs": []}
            for t in TOPICS]})
        assert [t.error_code for t in answer.topics] == [ErrorCode.NONE] * len(TOPICS), answer
        self.refresh()
        time.sleep(0.3)  # both brokers applied the ACLs (milliseconds, tests/integration/test_acls.py)

    def refresh(self) -> None:
        metadata = raw(self.cluster, "admin", 3, 9, {"topics": None, "allow_auto_topic_creation": False,
                                                      "include_cluster_authorized_operations": False,
                                                      "include_topic_authorized_operations": False})
        self.controller = metadata.controller_id
        self.leaders = {t.name: t.partitions[0].leader_id for t in metadata.topics if t.partitions}

    def coordinator(self, key: str, key_type: int = 0) -> int:
        answer = raw(self.cluster, "admin", 10, 4, {"key_type": key_type, "coordinator_keys": [key]})
        deadline = time.monotonic() + 20
        while answer.coordinators[0].error_code != ErrorCode.NONE:  # the internal topic is being created
            assert time.monotonic() < deadline, answer
            time.sleep(0.2)
            answer = raw(self.cluster, "admin", 10, 4, {"key_type": key_type, "coordinator_keys": [key]})
        return int(answer.coordinators[0].node_id)


@pytest.fixture(scope="module")
def world(secured: LocalCluster) -> World:
    return World(secured)


#: (case, principal, how the resource is named, allowed?)
CASES = [("allowed by a LITERAL ACL", "alice", "lit-{}", True), ("denied without an ACL", "bob", "lit-{}", False),
         ("denied by DENY over ALLOW", "alice", "pre-deny-{}", False),
         ("allowed by a PREFIXED ACL", "alice", "pre-ok-{}", True), ("a super user", "admin", "sup-{}", True)]


def partition_codes(answer: Any, topics: str, partitions: str, code: str = "error_code") -> list[int]:
    return [getattr(p, code) for t in getattr(answer, topics) for p in getattr(t, partitions)]


# -- the requests of the matrix: (user, resource name) -> the error codes the answer carries -------

def produce(w: World, user: str, name: str) -> list[int]:
    batch = build_batch([(b"k", b"v")])
    answer = raw(w.cluster, user, 0, 9, {"transactional_id": None, "acks": 1, "timeout": 10000, "topic_data": [
        {"name": name, "partition_data": [{"index": 0, "records": batch}]}]}, w.leaders[name])
    return partition_codes(answer, "responses", "partition_responses")


def fetch(w: World, user: str, name: str, replica_id: int = -1) -> list[int]:
    answer = raw(w.cluster, user, 1, 12, {"replica_id": replica_id, "max_wait": 0, "min_bytes": 1, "topics": [
        {"topic": name, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []}, w.leaders[name])
    return partition_codes(answer, "responses", "partitions")


def list_offsets(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}, w.leaders[name])
    return partition_codes(answer, "topics", "partitions")


def offset_for_leader_epoch(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 23, 4, {"topics": [{"topic": name, "partitions": [
        {"partition": 0, "leader_epoch": 0}]}]}, w.leaders[name])
    return partition_codes(answer, "topics", "partitions")


def metadata(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 3, 9, {"topics": [{"name": name}], "allow_auto_topic_creation": False,
                                          "include_cluster_authorized_operations": False,
                                          "include_topic_authorized_operations": False})
    return [t.error_code for t in answer.topics]


def describe_configs(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 32, 4, {"resources": [{"resource_type": TOPIC, "resource_name": name}]})
    return [r.error_code for r in answer.results]


def alter_configs(w: World, user: str, name: str) -> list[int]:
    legacy = raw(w.cluster, user, 33, 2, {"validate_only": True, "resources": [
        {"resource_type": TOPIC, "resource_name": name, "configs": [{"name": "retention.ms", "value": "600000"}]}]})
    incremental = raw(w.cluster, user, 44, 1, {"validate_only": True, "resources": [
        {"resource_type": TOPIC, "resource_name": name,
         "configs": [{"name": "retention.ms", "config_operation": 0, "value": "600000"}]}]})
    return [r.error_code for r in (*legacy.responses, *incremental.responses)]


def create_topics(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 19, 7, {"validate_only": True, "timeout": 10000, "topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}]})
    return [t.error_code for t in answer.topics]


def delete_topics(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 20, 5, {"topic_names": [name], "timeout": 20000})
    return [t.error_code for t in answer.responses]


def create_partitions(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 37, 3, {"validate_only": True, "timeout": 10000, "topics": [
        {"name": name, "count": 2, "assignments": None}]})
    return [r.error_code for r in answer.results]


def delete_records(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 21, 2, {"timeout": 10000, "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "offset": 0}]}]}, w.leaders[name])  # moves nothing
    return partition_codes(answer, "topics", "partitions")


def join_group(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 11, 5, {
        "group_id": name, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}, w.coordinator(name))
    return [answer.error_code]


def commit_offsets(w: World, user: str, name: str) -> list[int]:
    topic = name.replace("-g", "-t")
    answer = raw(w.cluster, user, 8, 8, {"group_id": name, "generation_id_or_member_epoch": -1, "member_id": "",
                                         "topics": [{"name": topic, "partitions": [
                                             {"partition_index": 0, "committed_offset": 0,
                                              "committed_metadata": ""}]}]}, w.coordinator(name))
    return partition_codes(answer, "topics", "partitions")


def fetch_offsets(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 9, 8, {"groups": [{"group_id": name, "topics": None}]}, w.coordinator(name))
    return [g.error_code for g in answer.groups]


def describe_groups(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 15, 5, {"groups": [name], "include_authorized_operations": True},
                 w.coordinator(name))
    return [g.error_code for g in answer.groups]


def find_coordinator(w: World, user: str, name: str) -> list[int]:
    groups = raw(w.cluster, user, 10, 4, {"key_type": 0, "coordinator_keys": [name.replace("-tx", "-g")]})
    transactions = raw(w.cluster, user, 10, 4, {"key_type": 1, "coordinator_keys": [name]})
    return [c.error_code for c in (*groups.coordinators, *transactions.coordinators)]


def init_producer_id(w: World, user: str, name: str) -> list[int]:
    answer = raw(w.cluster, user, 22, 4, {"transactional_id": name, "transaction_timeout": 60000},
                 w.coordinator(name, 1))
    return [answer.error_code]


TOPIC_APIS: dict[str, Callable[[World, str, str], list[int]]] = {
    "Produce": produce, "Fetch": fetch, "ListOffsets": list_offsets, "OffsetForLeaderEpoch": offset_for_leader_epoch,
    "Metadata": metadata, "DescribeConfigs": describe_configs, "AlterConfigs+IncrementalAlterConfigs": alter_configs,
    "CreatePartitions": create_partitions, "DeleteRecords": delete_records,
}
#: (API, what it names) for the APIs whose resources are named apart
OTHER_APIS: dict[str, tuple[Callable[[World, str, str], list[int]], str]] = {
    "CreateTopics": (create_topics, "new"), "DeleteTopics": (delete_topics, "del"),
    "JoinGroup": (join_group, "g"), "OffsetCommit": (commit_offsets, "g"), "OffsetFetch": (fetch_offsets, "g"),
    "DescribeGroups": (describe_groups, "g"), "FindCoordinator": (find_coordinator, "tx"),
    "InitProducerId": (init_producer_id, "tx"),
}
MATRIX = [(api, call, "t") for api, call in TOPIC_APIS.items()] + [(api, call, x) for api, (call, x) in OTHER_APIS.items()]


@pytest.mark.parametrize("api, call, kind", MATRIX, ids=[api for api, _, _ in MATRIX])
def test_the_authorization_matrix(world: World, api: str, call: Callable[[World, str, str], list[int]],
                                  kind: str) -> None:
    seen = {}
    for case, user, template, allowed in CASES:
        codes = call(world, user, template.format(kind))
        seen[case] = [ErrorCode(c).name for c in codes]
        refused = [c for c in codes if c in AUTHORIZATION_ERRORS]
        assert codes and (not refused if allowed else len(refused) == len(codes)), (api, case, seen[case])
    print(f"\n{api}: " + "; ".join(f"{case}: {','.join(codes)}" for case, codes in seen.items()))


def test_what_an_allowed_request_gets_is_the_apis_own_answer(world: World) -> None:
    """Allowed requests really run: a record is appended and read back, offsets committed and
    fetched, a producer id and a coordinator given, a topic deleted."""
    assert produce(world, "alice", "pre-ok-t") == [ErrorCode.NONE]
    assert fetch(world, "alice", "pre-ok-t") == [ErrorCode.NONE]
    assert commit_offsets(world, "alice", "lit-g") == [ErrorCode.NONE]
    assert join_group(world, "alice", "pre-ok-g") == [ErrorCode.MEMBER_ID_REQUIRED]
    assert init_producer_id(world, "alice", "pre-ok-tx") == [ErrorCode.NONE]
    # an allowed group committing a denied topic: the topic's partitions only
    answer = raw(world.cluster, "alice", 8, 8, {"group_id": "lit-g", "member_id": "", "topics": [
        {"name": "pre-deny-t", "partitions": [{"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}]},
        {"name": "lit-t", "partitions": [{"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}]}]},
        world.coordinator("lit-g"))
    assert {t.name: t.partitions[0].error_code for t in answer.topics} == {
        "pre-deny-t": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "lit-t": ErrorCode.NONE}
    # a consumer may not fetch as a follower: every partition refused without CLUSTER_ACTION
    assert fetch(world, "alice", "lit-t", replica_id=2) == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    # an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)
    idempotent = {"transactional_id": None, "transaction_timeout": 60000}
    assert raw(world.cluster, "alice", 22, 4, idempotent).error_code == ErrorCode.NONE
    assert raw(world.cluster, "bob", 22, 4, idempotent).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # deletions happened (alice's by LITERAL and PREFIXED ACLs, the super user's)
    world.refresh()
    assert not {"lit-del", "pre-ok-del", "sup-del"} & set(world.leaders)
    assert "pre-deny-del" in world.leaders


def test_metadata_hides_topics_and_reports_authorized_operations(world: World) -> None:
    def listed(user: str) -> dict[str, int]:
        answer = raw(world.cluster, user, 3, 10, {"topics": None, "allow_auto_topic_creation": False,
                                                   "include_cluster_authorized_operations": True,
                                                   "include_topic_authorized_operations": True})
        return {t.name: t.topic_authorized_operations for t in answer.topics}

    alice = listed("alice")
    assert {"lit-t", "pre-ok-t", "rev-t"} <= set(alice) and not {"pre-deny-t", "sup-t"} & set(alice)
    assert alice["rev-t"] == (1 << READ) | (1 << DESCRIBE)
    assert listed("bob") == {}
    assert set(TOPICS) - {"lit-del", "pre-ok-del", "sup-del"} <= set(listed("admin"))
    # a named topic the principal may not describe: refused whether it exists or not
    assert metadata(world, "bob", "no-such-topic") == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert metadata(world, "alice", "pre-ok-missing") == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    # DescribeCluster's cluster operations: the principal's bits, 0 without DESCRIBE
    operations = {user: raw(world.cluster, user, 60, 1, {"include_cluster_authorized_operations": True})
                  .cluster_authorized_operations for user in ("ops", "bob", "dave")}
    assert operations == {"ops": (1 << ALTER) | (1 << DESCRIBE), "bob": 0, "dave": 0}


def test_groups_are_listed_only_where_the_principal_may_describe_them(world: World) -> None:
    for group in ("lit-g", "pre-ok-g", "pre-deny-g", "sup-g"):
        raw(world.cluster, "admin", 8, 8, {"group_id": group, "member_id": "", "topics": [
            {"name": "sup-t", "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}]},
            world.coordinator(group))

    def listed(user: str) -> set[str]:
        return {g.group_id for b in world.cluster.broker_ids
                for g in raw(world.cluster, user, 16, 4, {"states_filter": []}, b).groups}

    assert {"lit-g", "pre-ok-g"} <= listed("alice") and not {"pre-deny-g", "sup-g"} & listed("alice")
    assert listed("bob") == set()
    assert {"lit-g", "pre-ok-g", "pre-deny-g", "sup-g"} <= listed("admin")


#: the cluster's APIs: (case, principal) (no PREFIXED case: the cluster has one name); ops may
#: ALTER and DESCRIBE the cluster, dave ALL but ALTER and DESCRIBE
CLUSTER_CASES = [("ALTER/DESCRIBE on the cluster", "ops"), ("denied without an ACL", "bob"),
                 ("denied by DENY over ALLOW", "dave"), ("a super user", "admin")]


def elect_leaders(w: World, user: str) -> list[int]:
    answer = raw(w.cluster, user, 43, 2, {"election_type": 0, "timeout": 10000,
                                          "topic_partitions": [{"topic": "lit-t", "partitions": [0]}]}, w.controller)
    return [answer.error_code, *partition_codes(answer, "replica_election_results", "partition_result")]


def test_the_clusters_apis(world: World) -> None:
    c = world.cluster
    requests: dict[str, Callable[[str], list[int]]] = {
        "ElectLeaders": lambda u: elect_leaders(world, u),
        "AlterPartitionReassignments": lambda u: [raw(c, u, 45, 0, {"timeout": 10000, "topics": [
            {"name": "lit-t", "partitions": [{"partition_index": 0, "replicas": None}]}]}, world.controller).error_code],
        "ListPartitionReassignments": lambda u: [raw(c, u, 46, 0, {"timeout": 10000, "topics": None},
                                                     world.controller).error_code],
        "DescribeAcls": lambda u: [raw(c, u, 29, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                                     "pattern_type_filter": 1, "principal_filter": None,
                                                     "host_filter": None, "operation": 1,
                                                     "permission_type": 1}).error_code],
        "CreateAcls+DeleteAcls": lambda u: [r.error_code for r in raw(c, u, 30, 3, {"creations": [
            acl(TOPIC, "acl-made", "User:nobody", READ)]}).results] + [r.error_code for r in raw(c, u, 31, 3, {
                "filters": [{"resource_type_filter": TOPIC, "resource_name_filter": "acl-made",
                             "pattern_type_filter": LITERAL, "principal_filter": None, "host_filter": None,
                             "operation": 1, "permission_type": 1}]}).filter_results],
        "DescribeLogDirs": lambda u: [raw(c, u, 35, 4, {"topics": None}).error_code],
        "AlterConfigs(broker)": lambda u: [r.error_code for r in raw(c, u, 44, 1, {"validate_only": True, "resources": [
            {"resource_type": 4, "resource_name": "", "configs": [
                {"name": "log.retention.ms", "config_operation": 0, "value": "600000"}]}]}).responses],
    }
    for api, call in requests.items():
        seen = {}
        for case, user in CLUSTER_CASES:
            codes = call(user)
            seen[case] = [ErrorCode(x).name for x in codes]
            # ALTER_CONFIGS on the cluster: dave's ALL grants it, ops has no such ACL
            allowed = user in (("admin", "dave") if api == "AlterConfigs(broker)" else ("admin", "ops"))
            refused = [x for x in codes if x == ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
            assert codes and (not refused if allowed else len(refused) == len(codes)), (api, case, seen[case])
        print(f"\n{api}: " + "; ".join(f"{case}: {','.join(codes)}" for case, codes in seen.items()))


def test_clients_produce_consume_and_transact_only_where_allowed(world: World) -> None:
    """confluent-kafka: bob's records refused with TOPIC_AUTHORIZATION_FAILED, alice's delivered
    and read back in a group; alice's transaction commits, bob's cannot begin."""
    outcomes: dict[str, Any] = {}
    for user in ("alice", "bob"):
        producer = Producer({**conf(world.cluster, user), "message.timeout.ms": 10000, "retries": 0})
        producer.produce("lit-t", b"from-" + user.encode(),
                         on_delivery=lambda err, _msg, user=user: outcomes.__setitem__(user, err))
        producer.flush(15)
    assert outcomes["alice"] is None
    assert outcomes["bob"] is not None and outcomes["bob"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    transactional = Producer({**conf(world.cluster, "alice"), "transactional.id": "lit-tx"})
    transactional.init_transactions(20)
    transactional.begin_transaction()
    transactional.produce("pre-ok-t", b"in-a-transaction")
    transactional.commit_transaction(20)
    refused = Producer({**conf(world.cluster, "bob"), "transactional.id": "lit-tx"})
    with pytest.raises(KafkaException) as info:
        refused.init_transactions(20)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    consumer = Consumer({**conf(world.cluster, "alice"), "group.id": "pre-ok-readers", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe(["pre-ok-t"])
    values = set()
    deadline = time.monotonic() + 20
    while b"in-a-transaction" not in values and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.add(message.value())
    consumer.close()
    assert b"in-a-transaction" in values


def test_a_revoked_acl_stops_a_consuming_client_within_a_bound(world: World, record_property: Any) -> None:
    """alice consumes rev-t (READ on it and on its group); admin deletes the topic READ ACL
    (DeleteAcls): how long until alice's consumer gets TOPIC_AUTHORIZATION_FAILED, while records
    keep coming (each fetch answered at once), then again with the READ granted back and the
    consumer idle (its fetch waiting out fetch.wait.max.ms when the ACL goes)."""
    producer = Producer(conf(world.cluster, "admin"))
    consumer = Consumer({**conf(world.cluster, "alice"), "group.id": "rev-g", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 500})
    consumer.subscribe(["rev-t"])
    admin = AdminClient(conf(world.cluster, "admin"))
    read = ("rev-t", "User:alice", AclOperation.READ, AclPermissionType.ALLOW)

    def consume(records: int, producing: bool = True) -> None:
        received, deadline = 0, time.monotonic() + 30
        while received < records:
            assert time.monotonic() < deadline, "alice's consumer does not read rev-t"
            if producing:
                producer.produce("rev-t", uuid.uuid4().bytes)
                producer.poll(0)
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                received += 1

    def revoke_and_time(producing: bool) -> float:
        revoke = AclBindingFilter(ResourceType.TOPIC, read[0], ResourcePatternType.LITERAL, read[1], None, read[2],
                                  read[3])
        deleted = [b for f in admin.delete_acls([revoke], request_timeout=10).values() for b in f.result(10)]
        assert len(deleted) == 1
        revoked_at = time.monotonic()
        while time.monotonic() - revoked_at < 30:
            if producing:
                producer.produce("rev-t", uuid.uuid4().bytes)
                producer.poll(0)
            message = consumer.poll(0.02)
            if message is not None and message.error() is not None \
                    and message.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                return (time.monotonic() - revoked_at) * 1000
            assert message is None or message.error() is not None or time.monotonic() - revoked_at < 0.6, \
                "records are still delivered well after the revocation"
        raise AssertionError("the consumer was never refused")

    try:
        consume(5)
        busy_ms = revoke_and_time(producing=True)
        # READ granted back: the consumer reads again; then it idles in its long poll
        granted = AclBinding(ResourceType.TOPIC, read[0], ResourcePatternType.LITERAL, read[1], "*", read[2], read[3])
        for future in admin.create_acls([granted], request_timeout=10).values():
            future.result(10)
        consume(1)
        producer.flush(10)
        time.sleep(1.0)
        while consumer.poll(0.1) is not None:  # drained: the next fetch waits for records that do not come
            pass
        idle_ms = revoke_and_time(producing=False)
        record_property("acl_revocation_ms", {"consuming": round(busy_ms, 1), "idle": round(idle_ms, 1)})
        print(f"\nREAD revoked (DeleteAcls answered) -> the consumer's first TOPIC_AUTHORIZATION_FAILED: "
              f"{busy_ms:.0f} ms while records come, {idle_ms:.0f} ms idle (fetch.wait.max.ms 500)")
        assert busy_ms < 10_000 and idle_ms < 10_000
    finally:
        consumer.close()
        producer.flush(10)
