"""Kafka's ZooKeeper layout: znode paths and the JSON each znode holds.

The formats are Kafka's own (kafka/zk/ZkData.scala), written compactly as Jackson does, so a
Kafka tool pointed at our ZooKeeper reads the same cluster and vice versa. Decoders accept the
older versions Kafka still reads (topic assignments without a topic id, bare controller ids).
Pure functions only: no kazoo here, so the simulation's fake ZooKeeper can share the codecs.
"""
from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.common.metadata import (
    BrokerInfo,
    EndPoint,
    LeaderAndIsr,
    PartitionOrdering,
    TopicAssignment,
    TopicPartition,
)

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_TOPICS = "/config/topics"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "/isr_change_notification/isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CLUSTER_ID = "/cluster/id"
#: the key every broker makes an unknown SCRAM user's salt with (security/scram.py), the same on
#: all of them so the salt does not tell an unknown user from a known one; odradek's own
SCRAM_UNKNOWN_USER_KEY = "/odradek/scram_unknown_user_key"
#: KIP-253: a partition marked for deletion that its leader found empty is reported here
#: (persistent sequential children, read and removed by the controller)
ORDERED_PARTITION_REMOVALS = "/admin/ordered_partition_removals"
ORDERED_PARTITION_REMOVAL_PREFIX = "/admin/ordered_partition_removals/removal-"

# Kafka's ZkData.PersistentZkPaths (minus the old consumer tree): created at startup so that
# watches and child creates never hit a missing parent.
PERSISTENT_PATHS: tuple[str, ...] = (
    BROKER_IDS,
    BROKER_TOPICS,
    BROKER_SEQID,
    CONFIG_CHANGES,
    CONFIG_TOPICS,
    "/config/clients",
    "/config/users",
    "/config/brokers",
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    LOG_DIR_EVENT_NOTIFICATION,
    PRODUCER_ID_BLOCK,
    ORDERED_PARTITION_REMOVALS,
)

# Kafka's Uuid.ZERO_UUID: the "no topic id" value in protocol messages.
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(tp: TopicPartition) -> str:
    return f"{BROKER_TOPICS}/{tp.topic}/partitions/{tp.partition}"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{BROKER_TOPICS}/{tp.topic}/partitions/{tp.partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    """/admin/delete_topics/T: Kafka's admin marks a topic for deletion with an empty znode."""
    return f"{DELETE_TOPICS}/{topic}"


def new_topic_id() -> str:
    """A fresh topic id as Kafka's Uuid.randomUuid() makes it.

    Kafka renders a random (version 4) UUID as URL-safe base64 without padding (22 chars) and
    re-draws ids it reserves (zero) or that would start with '-' (they look like CLI flags).
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if text != ZERO_TOPIC_ID and not text.startswith("-"):
            return text


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    return json.loads(data.decode())


def _tp_list(tps: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(tps)]


def _tp_set(entries: Iterable[Mapping[str, Any]]) -> set[TopicPartition]:
    return {TopicPartition(e["topic"], int(e["partition"])) for e in entries}


# /brokers/ids/N ---------------------------------------------------------------------------


def encode_broker_info(info: BrokerInfo, timestamp_ms: int, metrics_url: str | None = None) -> bytes:
    """Kafka's version 4 registration, plus ``metrics_url`` when the broker serves Prometheus
    metrics: the full URL a scraper fetches, beside Kafka's own ``jmx_port`` (which names only a
    port and leaves protocol, host and path implied). A URL, not a port, because an HTTP
    endpoint needs all three to be found without guessing; the broker's other HTTP route
    (/state-change-log) is on the same server. Kafka's and other tools' decoders read the
    fields they know and ignore the rest, so the registration stays Kafka-compatible."""
    endpoints = info.endpoints or (EndPoint("PLAINTEXT", info.host, info.port, "PLAINTEXT"),)
    obj: dict[str, object] = {
        "version": 4,
        "host": info.host,
        "port": info.port,
        "endpoints": [f"{e.listener}://{_host_text(e.host)}:{e.port}" for e in endpoints],
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in endpoints},
        "jmx_port": -1,
        "timestamp": str(timestamp_ms),
        "rack": info.rack,
    }
    if metrics_url:
        obj["metrics_url"] = metrics_url
    return _dumps(obj)


def decode_broker_metrics_url(data: bytes) -> str | None:
    """The registration's ``metrics_url`` (encode_broker_info), None when it has none."""
    url = _loads(data).get("metrics_url")
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None


def decode_broker_info(broker_id: int, data: bytes, czxid: int, listener: str = "PLAINTEXT") -> BrokerInfo:
    """`czxid` of the registration znode is the broker epoch (Kafka's KIP-380). host and port
    are those of ``listener``, the reader's inter-broker listener (or the first endpoint when the
    broker has no such listener); every endpoint is kept."""
    obj = _loads(data)
    host, port = obj.get("host"), obj.get("port", -1)
    protocols = obj.get("listener_security_protocol_map") or {}
    endpoints = tuple(_endpoint(text, protocols) for text in obj.get("endpoints") or [])
    chosen = [e for e in endpoints if e.listener == listener] or list(endpoints)
    if chosen:  # versions 2+ may leave host/port empty when only endpoints are set
        host, port = chosen[0].host, chosen[0].port
    return BrokerInfo(broker_id, host, int(port), czxid, obj.get("rack"), endpoints)


def _endpoint(text: str, protocols: dict[str, str]) -> EndPoint:
    """NAME://HOST:PORT of a registration's endpoints ([HOST] for IPv6)."""
    name, _, address = text.partition("://")
    host, _, port_text = address.rpartition(":")
    return EndPoint(name, host.strip("[]"), int(port_text), protocols.get(name, name))


def _host_text(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# /brokers/topics/T ------------------------------------------------------------------------


def encode_topic_assignment(assignment: TopicAssignment) -> bytes:
    """Version 3 with the topic id and the replicas being added and removed by reassignments
    in progress (KIP-455; Kafka writes the two maps only for partitions being reassigned).

    ``initial_partition_count`` (KIP-253) is written with every assignment: the count the
    topic was created with, or, when the assignment does not know it, its current count (a
    new topic's is its count). Kafka's own decoder ignores fields it does not know."""
    initial = assignment.initial_partition_count
    return _dumps({
        "version": 3,
        "topic_id": assignment.topic_id,
        "partitions": {str(p): list(r) for p, r in sorted(assignment.partitions.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted(assignment.adding_replicas.items()) if r},
        "removing_replicas": {str(p): list(r) for p, r in sorted(assignment.removing_replicas.items()) if r},
        "initial_partition_count": len(assignment.partitions) if initial is None else initial,
        **({} if assignment.undeleted_partition_count is None
           else {"undeleted_partition_count": assignment.undeleted_partition_count}),
        **({} if not assignment.removed_leader_epochs
           else {"removed_partition_leader_epochs": {str(p): e for p, e in
                                                     sorted(assignment.removed_leader_epochs.items())}}),
    })


def decode_topic_assignment(topic: str, data: bytes) -> TopicAssignment:
    """Versions 1 and 2 carry no topic id: those come back with ZERO_TOPIC_ID, for the
    controller to assign one and rewrite the znode (as Kafka 2.8+ does on failover); a znode
    without initial_partition_count (written by Kafka, or before KIP-253's field) comes back
    with None, for the controller to backfill."""
    obj = _loads(data)
    partitions = {int(p): tuple(r) for p, r in obj.get("partitions", {}).items()}
    initial = obj.get("initial_partition_count")
    undeleted = obj.get("undeleted_partition_count")
    return TopicAssignment(topic, obj.get("topic_id") or ZERO_TOPIC_ID, partitions,
                           int(initial) if initial is not None else None,
                           _replica_lists(obj.get("adding_replicas")),
                           _replica_lists(obj.get("removing_replicas")),
                           int(undeleted) if undeleted is not None else None,
                           {int(p): int(e) for p, e in (obj.get("removed_partition_leader_epochs") or {}).items()})


def _replica_lists(obj: Mapping[str, Any] | None) -> dict[int, tuple[int, ...]]:
    """A partition -> replicas map, without the empty lists Kafka's tools may write."""
    return {int(p): tuple(r) for p, r in (obj or {}).items() if r}


# /brokers/topics/T/partitions/P/state -----------------------------------------------------


AFTER_CREATION = "leader_epoch_after_creation"
BEFORE_DELETION = "leader_epoch_before_deletion"


def encode_leader_and_isr(state: LeaderAndIsr) -> bytes:
    """KIP-253's two maps ({"<partition>": epoch}) are written only when present, so the state
    of a partition of a topic without ordered delivery is byte for byte Kafka's."""
    obj: dict[str, Any] = {
        "version": 1,
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
        "controller_epoch": state.controller_epoch,
    }
    ordering = state.ordering
    if ordering is not None:
        if ordering.after_creation:
            obj[AFTER_CREATION] = {str(p): e for p, e in ordering.after_creation}
        if ordering.before_deletion:
            obj[BEFORE_DELETION] = {str(p): e for p, e in ordering.before_deletion}
    return _dumps(obj)


def _partition_epochs(obj: Mapping[str, Any] | None) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((int(p), int(e)) for p, e in (obj or {}).items()))


def decode_leader_and_isr(data: bytes, zk_version: int) -> LeaderAndIsr:
    """`zk_version` is the znode's Stat.version: the next conditional write must name it."""
    obj = _loads(data)
    after, before = obj.get(AFTER_CREATION), obj.get(BEFORE_DELETION)
    ordering = (PartitionOrdering(_partition_epochs(after), _partition_epochs(before))
                if after or before else None)
    return LeaderAndIsr(
        obj["leader"], obj["leader_epoch"], tuple(obj["isr"]), obj["controller_epoch"], zk_version,
        ordering,
    )


# /controller and /controller_epoch --------------------------------------------------------


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller_id(data: bytes) -> int:
    """Very old Kafka wrote the bare broker id; KafkaController.parseControllerId still reads it."""
    obj = _loads(data)
    return obj if isinstance(obj, int) else int(obj["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# /config/topics/T -------------------------------------------------------------------------


def encode_topic_config(config: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(config)})


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {k: str(v) for k, v in _loads(data).get("config", {}).items()} if data else {}


# /isr_change_notification/isr_change_NNNNNNNNNN -------------------------------------------


def encode_isr_change(tps: Iterable[TopicPartition]) -> bytes:
    return _dumps({"version": 1, "partitions": _tp_list(tps)})


def decode_isr_change(data: bytes) -> set[TopicPartition]:
    return _tp_set(_loads(data)["partitions"])


# /latest_producer_id_block ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """A range of producer ids owned by one broker, both ends inclusive (Kafka's format)."""

    broker_id: int
    start: int
    end: int


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _dumps({
        "version": 1,
        "broker": block.broker_id,
        "block_start": str(block.start),
        "block_end": str(block.end),
    })


def decode_producer_id_block(data: bytes) -> ProducerIdBlock | None:
    """None for the empty znode that exists before the first allocation."""
    if not data:
        return None
    obj = _loads(data)
    return ProducerIdBlock(obj["broker"], int(obj["block_start"]), int(obj["block_end"]))


# /admin/reassign_partitions and /admin/preferred_replica_election -------------------------


def encode_reassignment(targets: Mapping[TopicPartition, Iterable[int]]) -> bytes:
    return _dumps({
        "version": 1,
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "replicas": list(targets[tp])}
            for tp in sorted(targets)
        ],
    })


def decode_reassignment(data: bytes) -> dict[TopicPartition, tuple[int, ...]]:
    return {
        TopicPartition(e["topic"], int(e["partition"])): tuple(e["replicas"])
        for e in _loads(data)["partitions"]
    }


def encode_preferred_election(tps: Iterable[TopicPartition]) -> bytes:
    return _dumps({"version": 1, "partitions": _tp_list(tps)})


def decode_preferred_election(data: bytes) -> set[TopicPartition]:
    return _tp_set(_loads(data)["partitions"])


# /cluster/id ------------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return _loads(data)["id"]


# /admin/ordered_partition_removals/removal-NNNNNNNNNN (KIP-253) ---------------------------


@dataclass(frozen=True, slots=True)
class PartitionRemovalReport:
    """A leader's word that a partition marked for deletion is empty (log start == log end)
    under ``leader_epoch``: the controller removes it only while that epoch is current, since
    a later leader may hold records the reporting one had deleted."""

    tp: TopicPartition
    leader_epoch: int


def encode_partition_removal(report: PartitionRemovalReport) -> bytes:
    return _dumps({"version": 1, "topic": report.tp.topic, "partition": report.tp.partition,
                   "leader_epoch": report.leader_epoch})


def decode_partition_removal(data: bytes) -> PartitionRemovalReport | None:
    """None for malformed contents (the controller removes such a znode)."""
    try:
        obj = _loads(data)
        return PartitionRemovalReport(TopicPartition(str(obj["topic"]), int(obj["partition"])),
                                      int(obj["leader_epoch"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
