"""Kafka's LogConfig.TopicConfigSynonyms: the topic configs, each with the broker config that is
its default (retention.ms from log.retention.ms), its ConfigEntry type and what it does; and
the rule that a broker default obeys its topic config's checks (log.segment.bytes as
segment.bytes), both for a config file (config.py) and for a dynamic change
(dynamic_broker_config.py)."""
from __future__ import annotations

from odradek.broker.replication_quota import FOLLOWER_REPLICAS, LEADER_REPLICAS
from odradek.broker.topic_admin import TOPIC_CONFIG_DEFAULTS, TopicError, validate_configs

# Kafka's ConfigEntry.ConfigType numbers
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST, PASSWORD = 1, 2, 3, 5, 6, 7, 9

#: topic config -> (its broker synonym, Kafka's type, documentation)
TOPIC_CONFIGS: dict[str, tuple[str | None, int, str]] = {
    "cleanup.policy": ("log.cleanup.policy", LIST,
                       "delete (drop old segments by retention), compact (keep each key's latest record) or both"),
    "retention.ms": ("log.retention.ms", LONG, "How long a closed segment is kept before deletion; -1 forever"),
    "retention.bytes": ("log.retention.bytes", LONG,
                        "The size a partition's log is cut back to by deleting old segments; -1 unlimited"),
    "segment.bytes": ("log.segment.bytes", INT, "The size at which a log rolls a new segment"),
    "segment.ms": ("log.roll.ms", LONG, "The age at which a non-empty active segment is rolled"),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio", DOUBLE,
                                  "The dirty share of a compacted log at which the cleaner cleans it"),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms", LONG,
                              "How long a record stays uncompacted at least"),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms", LONG,
                              "How long a record may stay uncompacted at most"),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms", LONG,
                            "How long a tombstone is kept after its first clean"),
    "flush.messages": ("log.flush.interval.messages", LONG, "Records appended between fsyncs"),
    "flush.ms": ("log.flush.interval.ms", LONG, "Time between fsyncs"),
    "min.insync.replicas": ("min.insync.replicas", INT,
                            "The in-sync replicas an acks=all produce needs, else NOT_ENOUGH_REPLICAS"),
    "unclean.leader.election.enable": ("unclean.leader.election.enable", BOOLEAN,
                                       "Whether a replica outside the ISR may become leader (data loss)"),
    "max.message.bytes": ("message.max.bytes", INT, "The largest record batch a produce may append"),
    "message.timestamp.type": ("log.message.timestamp.type", STRING, "CreateTime or LogAppendTime"),
    "enable.ordered.delivery": (None, BOOLEAN, "odradek only (KIP-253, under construction): the controller records "
                                               "expansions and deletions with leader epochs; no ordered client yet"),
    LEADER_REPLICAS: (None, LIST, "Replicas whose replication is throttled on the leader side, as "
                                  "[PartitionId]:[BrokerId],... or '*' for all replicas of the topic"),
    FOLLOWER_REPLICAS: (None, LIST, "Replicas whose replication is throttled on the follower side, as "
                                    "[PartitionId]:[BrokerId],... or '*' for all replicas of the topic"),
}
assert set(TOPIC_CONFIGS) == set(TOPIC_CONFIG_DEFAULTS)
#: broker config -> the topic config it is the default of
TOPIC_OF_SYNONYM = {syn: topic for topic, (syn, _t, _d) in TOPIC_CONFIGS.items() if syn}


def check_synonym_value(name: str, value: str) -> None:
    """A TopicError(INVALID_CONFIG) unless `value` suits the topic config `name` is the broker
    default of (log.segment.bytes by segment.bytes' rules)."""
    topic = TOPIC_OF_SYNONYM[name]
    try:
        validate_configs({topic: value})
    except TopicError as exc:
        reason = str(exc).replace(topic, name)
        raise TopicError(exc.code, reason if reason.startswith("Invalid value")
                         else f"Invalid value {value} for config {name}: {reason}") from None


def check_static_value(name: str, value: str) -> None:
    """For a config file: ValueError if `name` is a topic config's broker default and `value`
    breaks that topic config's rules (a broker must not start with log.segment.bytes=1)."""
    if name in TOPIC_OF_SYNONYM:
        try:
            check_synonym_value(name, value)
        except TopicError as exc:
            raise ValueError(str(exc)) from None
