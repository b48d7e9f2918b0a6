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
