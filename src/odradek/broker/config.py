"""Broker settings: command-line flags, an optional key=value file, and their defaults.

Names follow Kafka's server.properties where a Kafka operator would look for them.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(slots=True)
class BrokerConfig:
    broker_id: int
    host: str
    port: int
    zookeeper: str  # HOST:PORT[,HOST:PORT...][/chroot]
    data_dir: Path
    # zookeeper.session.timeout.ms: how long a dead broker keeps its registration (failover delay)
    # against how long a GC pause or network hiccup may last before the broker is declared dead.
    zookeeper_session_timeout_ms: int = 6000
    # the largest request every ZooKeeper server of the ensemble accepts (their -Djute.maxbuffer,
    # 1,048,575 by default; zk/request_size.py): topics and multis are sized to fit under it
    zookeeper_jute_maxbuffer: int = 0xFFFFF
    default_replication_factor: int = 1
    num_partitions: int = 1
    min_insync_replicas: int = 1
    auto_create_topics_enable: bool = False
    # Kafka's delete.topic.enable: false refuses DeleteTopics (TOPIC_DELETION_DISABLED) and
    # the controller only removes /admin/delete_topics markers (controller/topic_deletion.py)
    delete_topic_enable: bool = True
    log_segment_bytes: int = 128 * 1024 * 1024
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 60000  # how often segments past retention are deleted
    # compaction of cleanup.policy=compact topics (log/log_cleaner.py): one cleaner thread that
    # looks for a log to clean every log.cleaner.backoff.ms while none needs it; its key map
    # is bounded by log.cleaner.dedupe.buffer.size (about 128 bytes a key in Python)
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15000
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_flush_interval_messages: int = 2**63 - 1
    log_flush_interval_ms: int = 2**63 - 1
    replica_lag_time_max_ms: int = 30000
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    # broker.rack: registered in /brokers/ids/N and answered in Metadata, so rack-aware replica
    # placement (`odradek reassign --generate`) keeps a partition's replicas on different racks
    broker_rack: str | None = None
    # the replication throttles' meter (broker/replication_quota.py): a rate over this many
    # samples of this many seconds each (Kafka's replication.quota.window.*)
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    message_max_bytes: int = 1024 * 1024 + 12
    socket_request_max_bytes: int = 100 * 1024 * 1024
    max_open_files: int = 1000
    # Kafka's leader rebalance: every leader.imbalance.check.interval.seconds the controller
    # moves leadership back to preferred replicas on any broker leading less than
    # (100 - leader.imbalance.per.broker.percentage)% of the partitions it is preferred for.
    # Before stopping, ask the controller to move leadership away (Kafka's controlled shutdown):
    # up to controlled.shutdown.max.retries attempts, controlled.shutdown.retry.backoff.ms apart.
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # Prometheus metrics (broker/metrics.py) served on this port of the listener's host; 0: none.
    # Kafka exposes JMX and leaves Prometheus to an exporter; the names here are the exporter's.
    metrics_port: int = 0
    # The group coordinator (Kafka's names and defaults): session timeouts a member may ask for,
    # how long a new group waits for more members before its first rebalance completes, and the
    # internal __consumer_offsets topic that stores groups and their committed offsets.
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600000
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096

    @classmethod
    def from_file(cls, path: Path, **overrides: object) -> "BrokerConfig":
        """Read Kafka-style `key.name=value` lines; flags given on the command line win."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, object] = {}
        for lineno, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            name = key.strip().replace(".", "_")
            if not sep or name not in known:
                raise ValueError(f"{path}:{lineno}: unknown setting {key.strip()!r}")
            values[name] = value.strip()
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**{k: _coerce(known[k].type, v) for k, v in values.items()})  # type: ignore[arg-type]


def _coerce(type_name: object, value: object) -> object:
    if not isinstance(value, str):
        return value
    match str(type_name):
        case "int":
            return int(value)
        case "bool":
            return value.lower() in ("1", "true", "yes")
        case "Path":
            return Path(value)
    return value


#: What each setting does, by field, for DescribeConfigs' documentation and the config table of
#: docs/operations.md (`python -m odradek.broker.config_docs`); the settings that are a topic
#: config's broker default (log.retention.ms ...) are documented by that topic config instead.
FIELD_DOCS: dict[str, str] = {
    "broker_id": "This broker's id, unique in the cluster (flag --id)",
    "host": "The address clients and other brokers reach this broker on; it is registered in "
            "/brokers/ids as given, so not 0.0.0.0 (flag --listen HOST:PORT)",
    "port": "The Kafka port (flag --listen HOST:PORT)",
    "zookeeper": "The ZooKeeper ensemble, HOST:PORT[,HOST:PORT...][/chroot]; the broker creates the "
                 "chroot if it is missing (flag --zookeeper)",
    "data_dir": "The one directory that holds this broker's partition logs and checkpoints (flag --data-dir)",
    "zookeeper_session_timeout_ms": "How long a dead broker keeps its registration (the floor of failover "
                                    "time) against how long a pause may last before a live broker is declared "
                                    "dead (flag --session-timeout-ms; Kafka's default is 18000)",
    "zookeeper_jute_maxbuffer": "The largest request every ZooKeeper server accepts (their -Djute.maxbuffer); "
                                "topics and multis are sized to fit under it",
    "default_replication_factor": "The replication factor of a topic created without one",
    "num_partitions": "The partition count of a topic created without one",
    "auto_create_topics_enable": "Accepted, not acted on: odradek never creates a topic because a client "
                                 "asked for its metadata (Kafka's default is true)",
    "delete_topic_enable": "false refuses DeleteTopics (TOPIC_DELETION_DISABLED)",
    "log_retention_check_interval_ms": "How often segments past retention are deleted",
    "log_cleaner_enable": "Whether the log cleaner compacts cleanup.policy=compact topics",
    "log_cleaner_backoff_ms": "How long the cleaner sleeps when no log needs cleaning",
    "log_cleaner_dedupe_buffer_size": "The memory bound of the cleaner's key map (about 128 bytes a key)",
    "replica_lag_time_max_ms": "How long a follower may go without catching up to the leader's log end "
                               "before the leader takes it out of the ISR",
    "replica_fetch_max_bytes": "The most bytes a follower asks for per partition in one fetch",
    "replica_fetch_wait_max_ms": "How long a follower's fetch waits at the leader for new data",
    "broker_rack": "This broker's rack, registered and answered in Metadata; `odradek reassign --generate` "
                   "keeps a partition's replicas on different racks",
    "replication_quota_window_num": "Samples in the replication throttles' rate window",
    "replication_quota_window_size_seconds": "Seconds per sample of the replication throttles' rate window",
    "socket_request_max_bytes": "The largest request frame a client may send; a larger one closes the connection",
    "max_open_files": "Open segment files kept at most (least recently used ones are closed)",
    "controlled_shutdown_enable": "On SIGTERM, ask the controller to move this broker's leadership away "
                                  "before stopping (controlled shutdown)",
    "controlled_shutdown_max_retries": "ControlledShutdown attempts before the broker stops anyway",
    "controlled_shutdown_retry_backoff_ms": "The pause between ControlledShutdown attempts",
    "auto_leader_rebalance_enable": "Whether the controller moves leadership back to preferred replicas "
                                    "by itself",
    "leader_imbalance_check_interval_seconds": "How often the controller checks the leader imbalance",
    "leader_imbalance_per_broker_percentage": "The share (%) of a broker's preferred partitions it may "
                                              "not lead before the controller moves them back",
    "metrics_port": "The port of the Prometheus endpoint (/metrics) on the listener's host; 0: none",
    "group_min_session_timeout_ms": "The shortest session.timeout.ms a group member may ask for",
    "group_max_session_timeout_ms": "The longest session.timeout.ms a group member may ask for",
    "group_initial_rebalance_delay_ms": "How long a new group waits for more members before its first "
                                        "rebalance completes (KIP-134)",
    "offsets_topic_num_partitions": "Partitions of __consumer_offsets, fixed when it is created",
    "offsets_topic_replication_factor": "Replication factor of __consumer_offsets (lower if fewer brokers "
                                        "are alive when it is created)",
    "offsets_topic_segment_bytes": "Segment size of __consumer_offsets",
    "offsets_retention_minutes": "How long the committed offsets of a group without members are kept",
    "offsets_retention_check_interval_ms": "How often expired offsets are removed",
    "offsets_commit_timeout_ms": "How long an offset commit waits for the offsets partition's ISR",
    "offset_metadata_max_bytes": "The longest metadata string an offset commit may carry",
}
