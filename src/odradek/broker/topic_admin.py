"""Rules for creating a topic: legal names, known configs, and the replica assignment.

The assignment is Kafka's rack-unaware one (AdminUtils.assignReplicasToBrokers): leaders go
round-robin from a random start, followers are shifted by a per-round increment, so leadership
and replicas spread evenly and no broker holds two replicas of one partition.

A topic's whole replica assignment is one znode (/brokers/topics/T), written in one ZooKeeper
request, so its JSON must fit in jute.maxbuffer (zk/request_size.py): at replication factor 3 on
three brokers that is about 64,000 partitions. Kafka 2.x let such a CreateTopics reach ZooKeeper,
lost the connection and answered UNKNOWN_SERVER_ERROR; we refuse it first with
POLICY_VIOLATION, the code KRaft's controller gives an excessively large partition count.
"""
from __future__ import annotations

import random
import re
from typing import Callable, Iterable

from odradek.broker.replication_quota import FOLLOWER_REPLICAS, LEADER_REPLICAS, check_throttled_replicas
from odradek.common.internal_topics import is_internal
from odradek.common.metadata import TopicAssignment
from odradek.protocol.errors import ErrorCode
from odradek.zk import paths
from odradek.zk.request_size import JUTE_MAXBUFFER, payload_budget

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")

# Topic configs we honour, with their defaults as strings (Kafka's names and meanings).
TOPIC_CONFIG_DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "retention.ms": str(7 * 24 * 3600 * 1000),
    "retention.bytes": "-1",
    "segment.bytes": str(1024 * 1024 * 1024),
    "segment.ms": str(7 * 24 * 3600 * 1000),
    # compaction (log/log_cleaner.py)
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": str(2**63 - 1),
    "delete.retention.ms": str(24 * 3600 * 1000),
    "flush.messages": str(2**63 - 1),
    "flush.ms": str(2**63 - 1),
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "max.message.bytes": str(1024 * 1024 + 12),
    "message.timestamp.type": "CreateTime",
    "enable.ordered.delivery": "false",
    # replication throttles (KIP-73, broker/replication_quota.py): partition:brokerId lists or '*'
    LEADER_REPLICAS: "",
    FOLLOWER_REPLICAS: "",
}
_INT_CONFIGS = {"retention.ms", "retention.bytes", "segment.bytes", "flush.messages", "flush.ms",
                "min.insync.replicas", "max.message.bytes", "segment.ms", "min.compaction.lag.ms",
                "max.compaction.lag.ms", "delete.retention.ms"}
_MIN_INT = {"min.insync.replicas": 1, "segment.bytes": 14, "segment.ms": 1, "min.compaction.lag.ms": 0,
            "max.compaction.lag.ms": 1, "delete.retention.ms": 0}  # Kafka's LogConfig bounds
_CHOICES = {"cleanup.policy": {"delete", "compact", "compact,delete", "delete,compact"},
            "unclean.leader.election.enable": {"true", "false"},
            "enable.ordered.delivery": {"true", "false"},
            "message.timestamp.type": {"CreateTime", "LogAppendTime"}}


class TopicError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL.match(name):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name {name!r} contains characters other than ASCII alphanumerics, '.', '_' and '-'")


def is_legal_topic_name(name: str | None) -> bool:
    """Whether a name may become a ZooKeeper path or a directory name ("../x" may not)."""
    try:
        validate_topic_name(name or "")
    except TopicError:
        return False
    return True


#: the prefix kept for odradek's own topics; the ones odradek's clients create for themselves
#: (the Spark sink's commit marker topic, spark/options.py MARKER_TOPIC) are let through
RESERVED_PREFIX = "__odradek"
CLIENT_CREATED_INTERNAL = frozenset({"__odradek_spark_commits"})


def unify_collision_chars(name: str) -> str:
    """Kafka's Topic.unifyCollisionChars: '.' and '_' become one character in metric names,
    so two topics differing only there would share their metrics."""
    return name.replace(".", "_")


def validate_new_topic_name(name: str, existing: Iterable[str] | Callable[[], Iterable[str]]) -> None:
    """The rules CreateTopics adds to validate_topic_name (Kafka's
    AdminZkClient.validateTopicCreate): no internal or reserved name, and no name that equals an
    existing one once '.' and '_' are unified. ``existing`` may be a function, called only for a
    name that has '.' or '_' (Kafka reads every topic name from ZooKeeper then, and only then)."""
    validate_topic_name(name)
    if is_internal(name):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic '{name}' is an internal topic: the brokers create it, clients may not")
    if name.startswith(RESERVED_PREFIX) and name not in CLIENT_CREATED_INTERNAL:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic '{name}': names starting with '{RESERVED_PREFIX}' are reserved for "
                         f"odradek's internal topics")
    if "." not in name and "_" not in name:
        return
    unified = unify_collision_chars(name)
    colliding = sorted(t for t in (existing() if callable(existing) else existing)
                       if t != name and unify_collision_chars(t) == unified)
    if colliding:
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic '{name}' collides with existing topics: {', '.join(colliding)}")


def validate_configs(configs: dict[str, str | None]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in configs.items():
        if key not in TOPIC_CONFIG_DEFAULTS:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
        if value is None:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"Null value for topic config {key}")
        if key in _INT_CONFIGS:
            try:
                number = int(value)
            except ValueError:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for config {key}") from None
            if number < _MIN_INT.get(key, number):
                raise TopicError(ErrorCode.INVALID_CONFIG, f"{key} must be at least {_MIN_INT[key]}")
        if key == "min.cleanable.dirty.ratio":
            try:
                ratio = float(value)
            except ValueError:
                ratio = -1.0
            if not 0.0 <= ratio <= 1.0:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for config {key}")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for config {key}")
        if key in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
            try:
                check_throttled_replicas(key, value)
            except ValueError as exc:
                raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        out[key] = value
    return out


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int,
                    rng: random.Random | None = None, *, fixed_start_index: int = -1,
                    start_partition_id: int = -1) -> dict[int, tuple[int, ...]]:
    """Kafka's rack-unaware assignment of `partitions` x `replication_factor` replicas
    (AdminUtils.assignReplicasToBrokers): a random start index and replica shift, or both
    ``fixed_start_index``, and partition ids from ``start_partition_id`` (CreatePartitions
    continues from the existing partitions with these)."""
    if partitions <= 0:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    rng = rng or random.Random()
    ids = sorted(brokers)
    n = len(ids)
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    first_id = max(0, start_partition_id)
    out: dict[int, tuple[int, ...]] = {}
    for p in range(first_id, first_id + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = tuple(replicas)
    return out


def validate_assignment(assignment: dict[int, list[int]], live: set[int]) -> dict[int, tuple[int, ...]]:
    """A client-given assignment: partitions 0..n-1, same length, distinct live brokers."""
    if sorted(assignment) != list(range(len(assignment))):
        raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions must be numbered 0..n-1")
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions need the same, non-zero replica count")
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Duplicate brokers in partition {p}")
        if not set(replicas) <= live:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown brokers in partition {p}")
    return {p: tuple(r) for p, r in assignment.items()}


def check_partition_count_fits(name: str, count: int, rf: int, jute_maxbuffer: int = JUTE_MAXBUFFER,
                               code: ErrorCode = ErrorCode.POLICY_VIOLATION) -> None:
    """Refuse at once a partition count whose assignment cannot fit in ZooKeeper whatever the
    broker ids: an entry `"P":[R,R,R]` takes at least 5 + 2 x rf bytes. Assigning the replicas
    first and measuring after (check_fits_in_zookeeper) would hold the event loop for seconds
    at millions of partitions and grow a broker to 24 GB at 2^31.
    ``code``: CreateTopics answers POLICY_VIOLATION, CreatePartitions INVALID_PARTITIONS."""
    at_least = count * (5 + 2 * max(rf, 1))
    budget = payload_budget(jute_maxbuffer)
    if at_least > budget:
        raise TopicError(
            code,
            f"Topic '{name}' is too large for ZooKeeper: the replica assignment of its {count:,} "
            f"partitions would take at least {at_least:,} bytes of JSON in one znode, over the "
            f"{budget:,} bytes one ZooKeeper request may carry (jute.maxbuffer {jute_maxbuffer:,}). "
            f"Spread the partitions over several topics, or raise -Djute.maxbuffer on every "
            f"ZooKeeper server and client and the brokers' zookeeper.jute.maxbuffer.")


def check_fits_in_zookeeper(assignment: TopicAssignment, configs: dict[str, str],
                            jute_maxbuffer: int = JUTE_MAXBUFFER) -> None:
    """Refuse a topic whose creation would not fit in one ZooKeeper request: the assignment and
    config JSON exactly as they would be written (zk/paths.py), against jute.maxbuffer less the
    margin for the rest of the request (request_size.REQUEST_MARGIN says what it covers).

    The largest partition count suggested is the requested count scaled down by the budget:
    an entry's size only grows with its partition number's digits, so a prefix of the
    assignment has a mean entry size no larger than the whole's, and the suggestion fits."""
    size = len(paths.encode_topic_assignment(assignment))
    config_size = len(paths.encode_topic_config(configs))
    budget = payload_budget(jute_maxbuffer) - config_size
    if size <= budget:
        return
    count = len(assignment.partitions)
    fitting = max(0, count * budget // size)
    rounded = fitting // 1000 * 1000 if fitting >= 1000 else fitting
    rf = len(next(iter(assignment.partitions.values())))
    raise TopicError(
        ErrorCode.POLICY_VIOLATION,
        f"Topic '{assignment.name}' is too large for ZooKeeper: the replica assignment of its "
        f"{count:,} partitions (replication factor {rf}) is {size:,} bytes of JSON in one znode, "
        f"over the {budget:,} bytes one ZooKeeper request may carry (jute.maxbuffer "
        f"{jute_maxbuffer:,} less {jute_maxbuffer - budget:,} for the rest of the request). "
        f"Create at most {rounded:,} partitions per topic, spread them over several topics, or "
        f"raise -Djute.maxbuffer on every ZooKeeper server and client and the brokers' "
        f"zookeeper.jute.maxbuffer.")
