"""Valid requests to mutate: several per API, encoded at every version the broker advertises
(broker/api_keys.py) and for the controller APIs at the version it speaks (protocol/controller_api.py).

They name the fuzzing topology's topics: Produce writes only to the sink topic, reads go to the
guarded topic, whose data must never change, and controller requests carry a stale controller
epoch (fenced: the broker must refuse them) or the current one with states the broker already
holds (accepted, but nothing changes). A mutation can still make a request that legitimately
writes (a higher epoch, another partition): the run loop tells those apart (oracle.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from odradek.broker import api_keys
from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition
from odradek.protocol import controller_api, kio_util
from odradek.protocol.records import build_batch

#: every batch gets this timestamp, so templates (and so the whole run) are the same each time
BATCH_TIMESTAMP_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Topology:
    """What the fuzzed broker hosts, as the templates name it."""

    broker_id: int
    host: str
    port: int
    controller_epoch: int
    broker_epoch: int
    guarded: str = "fuzz-guarded"
    guarded_partitions: int = 3
    sink: str = "sink"
    sink_partitions: int = 2
    #: another broker, leader of the last guarded partition (in-process only: over TCP the
    #: sample runs against one real broker)
    other: BrokerInfo | None = None
    #: whether controller templates may carry the current controller epoch; over TCP they may
    #: not, since an accepted UpdateMetadata would replace a live broker's view of the cluster
    current_epoch_controller_requests: bool = True
    strings: tuple[str, ...] = field(default=("fuzz-guarded", "sink", "fuzz-new-topic", "fuzzer"))

    @property
    def follower_partition(self) -> int | None:
        """The guarded partition this broker follows (led by ``other``), if any."""
        return self.guarded_partitions - 1 if self.other is not None else None

    def partition_states(self) -> tuple[PartitionState, ...]:
        """The states the controller gave: this broker leads every partition but the follower one."""
        me = self.broker_id
        states = []
        for p in range(self.guarded_partitions):
            if p == self.follower_partition:
                assert self.other is not None
                states.append(PartitionState(TopicPartition(self.guarded, p), self.controller_epoch, self.other.id,
                                             3, (self.other.id, me), 5, (self.other.id, me)))
            elif p == 1 and self.other is not None:  # a replicated partition whose ISR has the follower
                states.append(PartitionState(TopicPartition(self.guarded, p), self.controller_epoch, me, 3,
                                             (me, self.other.id), 5, (me, self.other.id)))
            else:
                states.append(PartitionState(TopicPartition(self.guarded, p), self.controller_epoch, me, 3,
                                             (me,), 5, (me,)))
        for p in range(self.sink_partitions):
            replicas = (me, self.other.id) if self.other is not None and p == 1 else (me,)
            states.append(PartitionState(TopicPartition(self.sink, p), self.controller_epoch, me, 2,
                                         (me,), 4, replicas))
        return tuple(states)

    def live_brokers(self) -> tuple[BrokerInfo, ...]:
        me = BrokerInfo(self.broker_id, self.host, self.port)
        return (me,) if self.other is None else (me, self.other)


@dataclass(frozen=True)
class Template:
    """One valid request: its payload (the frame without the size prefix) and what it is."""

    name: str
    api_key: int
    version: int
    payload: bytes


def batch(n: int = 1, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    return build_batch([(f"k{i}".encode(), f"value-{i}".encode()) for i in range(n)],
                       timestamp_ms=BATCH_TIMESTAMP_MS, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence)


def _bodies(t: Topology) -> list[tuple[str, int, dict[str, Any]]]:
    g, s = t.guarded, t.sink

    def produce(acks: int, topic: str, partition: int, records: bytes | None, timeout: int = 1000) -> dict[str, Any]:
        return {"transactional_id": None, "acks": acks, "timeout": timeout,
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]}

    def fetch(topics: list[tuple[str, list[tuple[int, int]]]], replica_id: int = -1, max_wait: int = 0,
              min_bytes: int = 1, session_id: int = 0, session_epoch: int = -1,
              forgotten: list[tuple[str, list[int]]] | None = None) -> dict[str, Any]:
        return {"replica_id": replica_id, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": session_id, "session_epoch": session_epoch,
                "topics": [{"topic": name, "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 64 * 1024} for p, o in parts]}
                    for name, parts in topics],
                "forgotten_topics_data": [{"topic": n, "partitions": ps} for n, ps in (forgotten or [])],
                "rack_id": ""}

    def list_offsets(topic: str, partition: int, timestamp: int, epoch: int = -1) -> dict[str, Any]:
        return {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "current_leader_epoch": epoch, "timestamp": timestamp}]}]}

    def create(name: str, partitions: int = 1, rf: int = 1, validate_only: bool = True,
               assignments: list[tuple[int, list[int]]] | None = None,
               configs: dict[str, str | None] | None = None) -> dict[str, Any]:
        return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                            "assignments": [{"partition_index": p, "broker_ids": b} for p, b in (assignments or [])],
                            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                "timeout": 1000, "validate_only": validate_only}

    follower = t.other.id if t.other is not None else t.broker_id
    return [
        ("produce-acks1", api_keys.PRODUCE, produce(1, s, 0, batch(2))),
        ("produce-acks-all", api_keys.PRODUCE, produce(-1, s, t.sink_partitions - 1, batch(1) + batch(3))),
        ("produce-acks0", api_keys.PRODUCE, produce(0, s, 0, batch(1))),
        ("produce-idempotent", api_keys.PRODUCE, produce(1, s, 0, batch(2, producer_id=4242, producer_epoch=0,
                                                                    base_sequence=0))),
        ("produce-null-records", api_keys.PRODUCE, produce(1, s, 0, None)),
        ("produce-unknown-topic", api_keys.PRODUCE, produce(1, "fuzz-new-topic", 0, batch(1))),
        ("fetch-consumer", api_keys.FETCH, fetch([(g, [(0, 0), (1, 1)])])),
        ("fetch-long-poll", api_keys.FETCH, fetch([(g, [(0, 1_000)])], max_wait=200, min_bytes=1 << 20)),
        ("fetch-session-new", api_keys.FETCH, fetch([(g, [(0, 0)]), (s, [(0, 0)])], session_epoch=0)),
        ("fetch-session-next", api_keys.FETCH, fetch([(g, [(1, 2)])], session_id=1, session_epoch=1,
                                                 forgotten=[(s, [0])])),
        ("fetch-follower", api_keys.FETCH, fetch([(g, [(1, 0)])], replica_id=follower)),
        ("fetch-not-leader", api_keys.FETCH, fetch([(g, [(t.guarded_partitions - 1, 0)]), ("fuzz-new-topic", [(0, 0)])])),
        ("list-offsets-latest", api_keys.LIST_OFFSETS, list_offsets(g, 0, -1)),
        ("list-offsets-earliest", api_keys.LIST_OFFSETS, list_offsets(g, 1, -2, epoch=3)),
        ("list-offsets-time", api_keys.LIST_OFFSETS, list_offsets(g, 0, BATCH_TIMESTAMP_MS)),
        ("metadata-all", api_keys.METADATA, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_cluster_authorized_operations": False,
                                         "include_topic_authorized_operations": False}),
        ("metadata-some", api_keys.METADATA, {"topics": [{"name": g, "topic_id": None}, {"name": "fuzz-new-topic",
                                                                                   "topic_id": None}],
                                          "allow_auto_topic_creation": False,
                                          "include_cluster_authorized_operations": False,
                                          "include_topic_authorized_operations": True}),
        ("api-versions", api_keys.API_VERSIONS, {"client_software_name": "fuzzer", "client_software_version": "1.0"}),
        ("create-topics", api_keys.CREATE_TOPICS, create("fuzz-new-topic", 2, 1, configs={"retention.ms": "1000"})),
        ("create-topics-assigned", api_keys.CREATE_TOPICS, create("fuzz-new-topic", -1, -1,
                                                               assignments=[(0, [t.broker_id])])),
        ("create-topics-existing", api_keys.CREATE_TOPICS, create(g)),
        ("init-producer-id", api_keys.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60000,
                                                     "producer_id": -1, "producer_epoch": -1}),
        ("init-producer-id-bump", api_keys.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": 60000,
                                                          "producer_id": 4242, "producer_epoch": 3}),
        ("offset-for-leader-epoch", api_keys.OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [
            {"topic": g, "partitions": [{"partition": 0, "current_leader_epoch": 3, "leader_epoch": 3},
                                        {"partition": 1, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
        ("describe-configs", api_keys.DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": g, "configuration_keys": None},
            {"resource_type": 4, "resource_name": str(t.broker_id), "configuration_keys": ["broker.id"]}],
            "include_synonyms": False, "include_documentation": False}),
        ("elect-leaders", api_keys.ELECT_LEADERS, {"election_type": 0, "timeout": 1000, "topic_partitions": [
            {"topic": g, "partitions": [0, 1]}]}),
        ("elect-leaders-all", api_keys.ELECT_LEADERS, {"election_type": 1, "timeout": 1000, "topic_partitions": None}),
        ("describe-cluster", api_keys.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                     "endpoint_type": 1}),
        ("describe-log-dirs", api_keys.DESCRIBE_LOG_DIRS, {"topics": [{"topic": g, "partitions": [0, 1, 9]},
                                                                  {"topic": "fuzz-new-topic", "partitions": [0]}]}),
        ("describe-log-dirs-all", api_keys.DESCRIBE_LOG_DIRS, {"topics": None}),
        # this broker coordinates no group: NOT_COORDINATOR
        ("txn-offset-commit", api_keys.TXN_OFFSET_COMMIT, {
            "transactional_id": "fuzzer", "group_id": "fuzzer", "producer_id": 4242, "producer_epoch": 0,
            "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                {"name": s, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                            "committed_leader_epoch": -1, "committed_metadata": ""}]}]}),
        # the operators' transaction APIs only read: producers of led, followed, unknown and
        # illegally named partitions; this broker coordinates no transactional id
        ("describe-producers", api_keys.DESCRIBE_PRODUCERS, {"topics": [
            {"name": g, "partition_indexes": [0, 1, t.guarded_partitions - 1, 9]},
            {"name": s, "partition_indexes": [0]}, {"name": "fuzz-new-topic", "partition_indexes": [0]},
            {"name": "..", "partition_indexes": [0]}]}),
        ("list-transactions", api_keys.LIST_TRANSACTIONS, {"state_filters": [], "producer_id_filters": []}),
        ("list-transactions-filtered", api_keys.LIST_TRANSACTIONS, {
            "state_filters": ["Ongoing", "NoSuchState"], "producer_id_filters": [4242], "duration_filter": 1000}),
        ("describe-transactions", api_keys.DESCRIBE_TRANSACTIONS, {"transactional_ids": ["fuzzer", ""]}),
        # markers are appends: only to the sink (and a topic that does not exist)
        ("write-txn-markers", api_keys.WRITE_TXN_MARKERS, {"markers": [
            {"producer_id": 4242, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
             "topics": [{"name": s, "partition_indexes": [0]},
                        {"name": "fuzz-new-topic", "partition_indexes": [0]}]}]}),
    ]


def _controller_requests(t: Topology) -> list[tuple[str, controller_api.ControllerRequest]]:
    states = t.partition_states()
    stale = t.controller_epoch - 1
    not_mine = PartitionState(TopicPartition("fuzz-new-topic", 0), t.controller_epoch, 77, 1, (77,), 0, (77,))
    out: list[tuple[str, controller_api.ControllerRequest]] = [
        ("leader-and-isr-stale", controller_api.LeaderAndIsrRequest(
            t.broker_id + 1, stale, t.broker_epoch, states, t.live_brokers())),
        ("update-metadata-stale", controller_api.UpdateMetadataRequest(
            t.broker_id + 1, stale, t.broker_epoch, states + (not_mine,), t.live_brokers())),
        ("stop-replica-stale", controller_api.StopReplicaRequest(
            t.broker_id + 1, stale, t.broker_epoch, True, (TopicPartition(t.guarded, 0),))),
        ("controlled-shutdown", controller_api.ControlledShutdownRequest(t.broker_id + 1, 12345)),
    ]
    if t.current_epoch_controller_requests:
        out += [
            # accepted, but every partition is already at that leader epoch: nothing changes
            ("leader-and-isr-same", controller_api.LeaderAndIsrRequest(
                t.broker_id + 1, t.controller_epoch, t.broker_epoch, states + (not_mine,), t.live_brokers())),
            ("update-metadata-same", controller_api.UpdateMetadataRequest(
                t.broker_id + 1, t.controller_epoch, t.broker_epoch, states, t.live_brokers())),
            ("stop-replica-unknown", controller_api.StopReplicaRequest(
                t.broker_id + 1, t.controller_epoch, -1, True, (TopicPartition("fuzz-new-topic", 3),))),
        ]
    return out


def controller_updates(t: Topology) -> list[bytes]:
    """The frames (with size prefix) a controller sends to make the broker host the topology."""
    states, brokers = t.partition_states(), t.live_brokers()
    return [controller_api.encode_request(controller_api.UpdateMetadataRequest(
                t.broker_id + 1, t.controller_epoch, t.broker_epoch, states, brokers), 1, "controller"),
            controller_api.encode_request(controller_api.LeaderAndIsrRequest(
                t.broker_id + 1, t.controller_epoch, t.broker_epoch, states, brokers), 2, "controller")]


def build(t: Topology) -> list[Template]:
    """Every template at every version: kio encodes each body for the version (dropping the
    fields a version lacks), and ApiVersions also at versions the broker does not speak."""
    out = []
    for name, api_key, body in _bodies(t):
        lo, hi = api_keys.VERSIONS[api_key]
        for version in range(lo, hi + 1):
            if api_key == api_keys.METADATA and version == 0 and body["topics"] is None:
                body = {**body, "topics": []}  # v0 has no null: an empty list means every topic
            frame = kio_util.encode_request(api_key, version, 1, "fuzzer", body)
            out.append(Template(name, api_key, version, frame[4:]))
    frame = kio_util.encode_request(api_keys.API_VERSIONS, 3, 1, "fuzzer", {"client_software_name": "fuzzer",
                                                                         "client_software_version": "1.0"})
    newer = bytearray(frame[4:])
    newer[2:4] = (api_keys.VERSIONS[api_keys.API_VERSIONS][1] + 1).to_bytes(2, "big")  # a version from the future
    out.append(Template("api-versions-newer", api_keys.API_VERSIONS, int.from_bytes(newer[2:4], "big"), bytes(newer)))
    for name, req in _controller_requests(t):
        key = controller_api.api_key_of(req)
        out.append(Template(name, key, controller_api.VERSIONS[key],
                            controller_api.encode_request(req, 1, "fuzzer")[4:]))
    return out
