"""Broker settings: command-line flags, an optional key=value file, and their defaults.

Names follow Kafka's server.properties where a Kafka operator would look for them.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from odradek.broker.listener_config import JAAS_FILE_KEY, Listeners, is_security_key, parse_listeners
from odradek.broker.topic_config_synonyms import check_static_value
from odradek.security.acl_authorizer import parse_super_users


@dataclass(slots=True)
class BrokerConfig:
    broker_id: int
    host: str
    port: int
    zookeeper: str  # HOST:PORT[,HOST:PORT...][/chroot]
    data_dir: Path
    # where clients and other brokers reach this one, registered in /brokers/ids, when that is
    # not the address it binds (a port forward or proxy in between); None: the bound address
    advertised_host: str | None = None
    advertised_port: int | None = None
    # zookeeper.session.timeout.ms: how long a dead broker keeps its registration (failover delay)
    # against how long a GC pause or network hiccup may last before the broker is declared dead.
    zookeeper_session_timeout_ms: int = 6000
    # the largest request every ZooKeeper server of the ensemble accepts (their -Djute.maxbuffer,
    # 1,048,575 by default; zk/request_size.py): topics and multis are sized to fit under it
    zookeeper_jute_maxbuffer: int = 0xFFFFF
    # ZooKeeper security (broker/zookeeper_security.py): Kafka's zookeeper.set.acl, and ZooKeeper
    # client settings Kafka takes from JVM system properties, as config keys of the same names;
    # the credentials are the Client section's of the JAAS file java.security.auth.login.config
    zookeeper_set_acl: bool = False
    zookeeper_sasl_client: bool = True
    zookeeper_sasl_clientconfig: str = "Client"
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
    # the other broker defaults of topic configs (Kafka's LogConfig takes every default from the
    # broker's KafkaConfig): a topic without its own cleanup.policy gets log.cleanup.policy ...
    log_cleanup_policy: str = "delete"
    log_roll_ms: int = 7 * 24 * 3600 * 1000
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_min_compaction_lag_ms: int = 0
    log_cleaner_max_compaction_lag_ms: int = 2**63 - 1
    log_cleaner_delete_retention_ms: int = 24 * 3600 * 1000
    log_message_timestamp_type: str = "CreateTime"
    unclean_leader_election_enable: bool = False
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
    # the client quotas' meters (broker/client_quotas.py): the same, Kafka's quota.window.*
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
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
    # its security on a secured cluster (broker/metrics_security.py): HTTPS with the inter-broker
    # listener's keystore, and HTTP Basic logins of the cluster's SCRAM users; None: from the
    # listeners (TLS when one uses SSL or SASL_SSL, basic when one uses SASL)
    metrics_ssl_enabled: bool | None = None
    metrics_authentication: str | None = None
    # Authorization (broker/acl_manager.py): authorizer.class.name names Kafka's ZooKeeper ACL
    # authorizer (ACL_AUTHORIZER_CLASSES) or is empty, the default: every request allowed and the
    # ACL APIs answer SECURITY_DISABLED. super.users ("User:admin;User:ops") may do anything;
    # allow.everyone.if.no.acl.found allows a resource no ACL names to everyone (Kafka's default: no).
    authorizer_class_name: str = ""
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
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
    # The transaction coordinator (Kafka's names and defaults): its internal __transaction_state
    # topic, the longest transaction.timeout.ms a producer may ask for, how often transactions
    # open past their timeout are aborted, and how long an idle transactional.id is kept.
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    transaction_max_timeout_ms: int = 900000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transactional_id_expiration_ms: int = 604800000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000
    # The listeners and their security as the config file gives them, key by key: listeners,
    # advertised.listeners, listener.security.protocol.map, inter.broker.listener.name, ssl.*,
    # sasl.*, listener.name.<listener>.* (broker/listener_config.py reads them). host and port
    # above are then the inter-broker listener's.
    security: dict[str, str] = field(default_factory=dict)

    def listeners(self) -> Listeners:
        """The named listeners (without a listeners key: one PLAINTEXT listener on host:port)."""
        return parse_listeners(self.security, self.host, self.port, self.advertised_host, self.advertised_port)

    @property
    def jaas_file(self) -> str | None:
        """The JAAS file of the KafkaServer login modules (PLAIN users, inter-broker credentials):
        Kafka's java.security.auth.login.config, a JVM system property there, a key here."""
        return self.security.get(JAAS_FILE_KEY)

    @classmethod
    def from_file(cls, path: Path, warn: Callable[[str], None] | None = None,
                  **overrides: object) -> "BrokerConfig":
        """Read a Kafka server.properties (or odradek's own `key.name=value` lines); flags given
        on the command line win. A bad value raises ValueError naming its line; unknown keys
        are ignored with one warning naming them all, as Kafka's AbstractConfig.logUnused
        does, so an operator's server.properties with thread-pool or SSL settings odradek has
        no use for still starts a broker."""
        values, unknown = parse_properties(path.read_text())
        ignored = f"settings odradek does not know: {', '.join(unknown)}"
        values.update({k: v for k, v in overrides.items() if v is not None})
        missing = [key for key, name in _REQUIRED if name not in values]
        if missing:  # the unknown keys in the same line: a misspelt broker.id is one of them
            raise ValueError(f"missing {', '.join(missing)}" + (f" (ignored {ignored})" if unknown else ""))
        if unknown:
            (warn or _warn_on_stderr)(f"{path}: ignoring {ignored} (as Kafka ignores unknown ones)")
        return cls(**values)  # type: ignore[arg-type]


#: Kafka's names of the BrokerConfig fields whose name is not Kafka's with '.' as '_' (the names
#: DescribeConfigs lists)
KAFKA_NAMES = {"zookeeper": "zookeeper.connect", "data_dir": "log.dirs", "host": "host.name"}
#: server.properties key -> field for those keys, and Kafka's single-directory log.dir; odradek's
#: own older spellings (zookeeper=, data.dir=) are the field names and still read (host.name is
#: one of the listener keys, read by _listener_address)
KAFKA_KEYS = {**{kafka: name for name, kafka in KAFKA_NAMES.items()}, "log.dir": "data_dir"}
#: coarser spellings of a .ms setting, with Kafka's precedence: log.retention.ms over
#: log.retention.minutes over log.retention.hours (KafkaConfig.logRetentionTimeMillis)
_COARSE_MS = {"log.retention.minutes": ("log_retention_ms", 60_000, 1),
              "log.retention.hours": ("log_retention_ms", 3_600_000, 2),
              "log.roll.hours": ("log_roll_ms", 3_600_000, 2)}
#: the listener keys: the address the broker binds, and the one it registers for clients
_LISTENER_KEYS = ("listeners", "advertised.listeners", "host.name", "host", "port", "advertised.host.name",
                  "advertised.port")
_REQUIRED = (("broker.id", "broker_id"), ("listeners", "host"), ("zookeeper.connect", "zookeeper"),
             ("log.dirs", "data_dir"))
_WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def _warn_on_stderr(message: str) -> None:
    print(f"odradek: warning: {message}", file=sys.stderr)


def parse_properties(text: str) -> tuple[dict[str, object], list[str]]:
    """The typed BrokerConfig fields a server.properties sets, and the keys it has that odradek
    does not know. ValueError, naming the line, for a value odradek cannot use."""
    known = {f.name: f for f in fields(BrokerConfig)}
    values: dict[str, object] = {}
    ranks: dict[str, int] = {}
    listener: dict[str, tuple[int, str]] = {}
    security: dict[str, str] = {}
    unknown: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise ValueError(f"line {lineno}: {line!r} is not key=value")
        if key in _LISTENER_KEYS:
            listener[key] = (lineno, value)
            if key not in ("listeners", "advertised.listeners"):
                continue
        if is_security_key(key):
            security[key] = value
            continue
        name, scale, rank = _COARSE_MS.get(key, (KAFKA_KEYS.get(key, key.replace(".", "_")), 1, 0))
        if name not in known:
            unknown.append(key)
            continue
        try:
            typed = _coerce(known[name].type, value, key)
        except ValueError as exc:
            raise ValueError(f"line {lineno}: {exc}") from None
        if scale != 1:  # a negative retention in any unit is Kafka's -1, unlimited
            typed = max(-1, int(typed) * scale)  # type: ignore[call-overload]
        if rank <= ranks.get(name, rank):  # a finer unit wins whatever the order of the lines
            values[name], ranks[name] = typed, rank
    if "listeners" in security:
        values.update(_named_listeners(security), security=security)
    else:
        values.update(_listener_address(listener))
        if security:
            values["security"] = security
    return values, unknown


def _named_listeners(security: dict[str, str]) -> dict[str, object]:
    """host and port of the inter-broker listener, and its advertised address where it differs."""
    inter = parse_listeners(security).inter_broker
    out: dict[str, object] = {"host": inter.host, "port": inter.port}
    if (inter.advertised_host, inter.advertised_port) != (inter.host, inter.port):
        out.update(advertised_host=inter.advertised_host, advertised_port=inter.advertised_port)
    return out


def _coerce(type_name: object, value: str, key: str) -> object:
    """`value` as the field's type; ValueError naming the key, and the broker value of a topic
    config checked by that topic config's rules (log.segment.bytes as segment.bytes)."""
    kind = str(type_name)
    if kind == "Path" and "," in value:
        raise ValueError(f"{key}={value}: odradek keeps every log in one directory; give only one")
    try:
        typed = _PARSERS.get(kind, str)(value)
    except ValueError:
        expected = {"int": "an integer", "float": "a number", "bool": "true or false",
                    "bool | None": "true or false"}[kind]
        raise ValueError(f"{key}={value}: {expected} is expected") from None
    check_static_value(key, value)
    _check_authorization_value(key, value)
    if key == "metrics.authentication":
        _check_metrics_authentication(value)
    return typed


def _bool(value: str) -> bool:
    """Kafka's boolean: true or false, in any case."""
    if value.lower() not in ("true", "false"):
        raise ValueError(value)
    return value.lower() == "true"


#: authorizer.class.name values naming Kafka's ZooKeeper-mode ACL authorizer: AclAuthorizer, and
#: SimpleAclAuthorizer, its name before Kafka 2.4 (broker/acl_manager.py keeps its ACLs)
ACL_AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")
_KRAFT_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def check_authorizer_class(value: str) -> bool:
    """Whether authorizer.class.name asks for the ACL authorizer (False: empty, no authorizer);
    ValueError, naming the key, for any other class."""
    name = value.strip()
    if not name:
        return False
    if name in ACL_AUTHORIZER_CLASSES:
        return True
    if name == _KRAFT_AUTHORIZER:
        raise ValueError(f"authorizer.class.name={name}: KRaft's StandardAuthorizer keeps ACLs in a KRaft "
                         f"metadata log, which a ZooKeeper cluster has not; use {ACL_AUTHORIZER_CLASSES[0]}")
    raise ValueError(f"authorizer.class.name={name}: odradek's authorizer is {ACL_AUTHORIZER_CLASSES[0]} "
                     f"(or leave it empty for none)")


def _check_authorization_value(key: str, value: str) -> None:
    """authorizer.class.name and super.users checked when read, so a mistake fails the broker's
    start as one line naming the key instead of leaving it unprotected or locked out."""
    if key == "authorizer.class.name":
        check_authorizer_class(value)
    elif key == "super.users":
        try:
            parse_super_users(value)
        except ValueError as exc:
            raise ValueError(f"{key}={value}: {exc}") from None


#: how a config file's value becomes each field type (by the type's name); any other is a str
_PARSERS: dict[str, Callable[[str], object]] = {"int": int, "float": float, "bool": _bool, "bool | None": _bool,
                                                "Path": Path}


#: metrics.authentication's values (broker/metrics_security.py)
METRICS_AUTHENTICATION_MODES = ("basic", "none")


def _check_metrics_authentication(value: str) -> None:
    if value.strip().lower() not in METRICS_AUTHENTICATION_MODES:
        raise ValueError(f"metrics.authentication={value}: one of {', '.join(METRICS_AUTHENTICATION_MODES)} "
                         f"is expected")


def _listener_address(found: dict[str, tuple[int, str]]) -> dict[str, object]:
    """host and port to bind, and the advertised address to register when it differs, from
    Kafka's listeners / advertised.listeners (or the older host.name, port,
    advertised.host.name, advertised.port). With listeners on a wildcard host (0.0.0.0) the
    broker binds the advertised host instead, on the listener's port: odradek binds one
    address, the one its broker-to-broker connections leave from too. An advertised port or
    host other than the listener's is registered as given (a port forward or a proxy in
    between, as with Kafka); the broker cannot check that it leads to the listener."""
    out: dict[str, object] = {}

    def where(key: str) -> str:
        return f"line {found[key][0]}: {key}={found[key][1]}"

    def old_style(host_keys: tuple[str, ...], port_key: str, default_port: int) -> tuple[str, int] | None:
        """Kafka's host.name and port, which listeners replaced (advertised.host.name defaults
        to host.name, advertised.port to port, port to 9092)."""
        hosts = [found[k][1] for k in host_keys if k in found]
        if not hosts and port_key not in found:
            return None
        try:
            return (hosts[0] if hosts else "", int(found[port_key][1]) if port_key in found else default_port)
        except ValueError:
            raise ValueError(f"{where(port_key)}: an integer is expected") from None

    bind = old_style(("host.name", "host"), "port", 9092)  # `listeners` is listener_config's
    advertised = (_parse_listener(where("advertised.listeners"), found["advertised.listeners"][1])
                  if "advertised.listeners" in found
                  else old_style(("advertised.host.name", "host.name", "host"), "advertised.port",
                                 bind[1] if bind else 9092))
    if bind is not None and advertised is not None and bind[0] in _WILDCARD_HOSTS:
        bind = (advertised[0], bind[1])
    for host, port in (a for a in (bind, advertised) if a is not None):
        if host in _WILDCARD_HOSTS:
            raise ValueError(f"listener host {host or '(empty)'!r}: odradek registers the address it binds, "
                             f"and clients cannot reach a wildcard: give a host name or address, or "
                             f"advertised.listeners")
        if not 0 < port < 65536:
            raise ValueError(f"listener port {port} is not a port number")
    chosen = bind or advertised
    if chosen is not None:
        out.update(host=chosen[0], port=chosen[1])
    if bind is not None and advertised is not None and advertised != bind:
        out.update(advertised_host=advertised[0], advertised_port=advertised[1])
    return out


def _parse_listener(where: str, value: str) -> tuple[str, int]:
    """(host, port) of advertised.listeners=PLAINTEXT://HOST:PORT given without listeners (beside
    the older host.name and port)."""
    listeners = [v.strip() for v in value.split(",") if v.strip()]
    if len(listeners) != 1:
        raise ValueError(f"{where}: without listeners, give exactly one PLAINTEXT://HOST:PORT")
    name, sep, address = listeners[0].partition("://")
    if not sep:
        raise ValueError(f"{where}: PLAINTEXT://HOST:PORT is expected")
    if name.upper() != "PLAINTEXT":
        raise ValueError(f"{where}: the {name} listener is not among the listeners (give listeners too)")
    host, _, port = address.rpartition(":")
    try:
        return host.strip("[]") if host.startswith("[") else host, int(port)
    except ValueError:
        raise ValueError(f"{where}: the port {port!r} is not a number") from None


#: What each setting does, by field, for DescribeConfigs' documentation and the config table of
#: docs/operations.md (`python -m odradek.broker.config_docs`); the settings that are a topic
#: config's broker default (log.retention.ms ...) are documented by that topic config instead.
FIELD_DOCS: dict[str, str] = {
    "broker_id": "This broker's id, unique in the cluster (flag --id)",
    "host": "The address clients and other brokers reach this broker on, bound and registered in "
            "/brokers/ids as given, so not 0.0.0.0 (flag --listen HOST:PORT; in a config file Kafka's "
            "listeners=PLAINTEXT://HOST:PORT, advertised.listeners, or the older host.name and port)",
    "port": "The Kafka port (flag --listen HOST:PORT; in a config file the port of listeners)",
    "advertised_host": "The address registered in /brokers/ids when clients and other brokers reach this "
                       "broker through a port forward or proxy (flag --advertise HOST:PORT; in a config file "
                       "advertised.listeners); by default the listener's",
    "advertised_port": "The port registered with advertised.host (flag --advertise HOST:PORT)",
    "zookeeper": "The ZooKeeper ensemble, HOST:PORT[,HOST:PORT...][/chroot]; the broker creates the "
                 "chroot if it is missing (flag --zookeeper)",
    "data_dir": "The one directory that holds this broker's partition logs and checkpoints (flag --data-dir; "
                "log.dir is read too; several comma-separated directories are refused)",
    "zookeeper_session_timeout_ms": "How long a dead broker keeps its registration (the floor of failover "
                                    "time) against how long a pause may last before a live broker is declared "
                                    "dead (flag --session-timeout-ms; Kafka's default is 18000)",
    "zookeeper_jute_maxbuffer": "The largest request every ZooKeeper server accepts (their -Djute.maxbuffer); "
                                "topics and multis are sized to fit under it",
    "zookeeper_set_acl": "Kafka's zookeeper.set.acl: every znode the broker creates gets ALL for its ZooKeeper "
                         "SASL user and READ for the world, none for the world under /config/users, "
                         "/config/brokers and /delegation_token/tokens; needs ZooKeeper credentials (the broker "
                         "refuses to start without them). Znodes created before keep their ACL",
    "zookeeper_sasl_client": "ZooKeeper's client system property: whether the broker logs in to ZooKeeper (SASL "
                             "DIGEST-MD5) with the username and password of the "
                             "org.apache.zookeeper.server.auth.DigestLoginModule in the Client section of the JAAS "
                             "file java.security.auth.login.config; false while that section exists is refused, as "
                             "Kafka refuses it",
    "zookeeper_sasl_clientconfig": "The JAAS section with the ZooKeeper credentials (ZooKeeper's client system "
                                   "property)",
    "default_replication_factor": "The replication factor of a topic created without one",
    "num_partitions": "The partition count of a topic created without one",
    "auto_create_topics_enable": "Whether a Metadata request for a topic that does not exist creates it with "
                                 "num.partitions and default.replication.factor (the client retries on "
                                 "LEADER_NOT_AVAILABLE meanwhile). Off by default, unlike Kafka: a typo in a "
                                 "producer's topic name would otherwise create a topic nobody reads",
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
    "quota_window_num": "Samples in the client quotas' rate window (a new client may use this many windows' "
                        "quota less one at once before it is throttled)",
    "quota_window_size_seconds": "Seconds per sample of the client quotas' rate window",
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
    "metrics_ssl_enabled": "Whether the metrics endpoint (/metrics, /state-change-log) is served over HTTPS, with "
                           "the keystore of the inter-broker listener (of the first TLS listener when that one has "
                           "no TLS); unset: true when any listener uses SSL or SASL_SSL",
    "metrics_authentication": "basic: the metrics endpoint asks for an HTTP Basic login of a SCRAM user of the "
                              "cluster, allowed DESCRIBE on the cluster when an authorizer is set (401 without a "
                              "valid login, 403 without the permission); none: no login. Unset: basic when any "
                              "listener uses SASL",
    "authorizer_class_name": "kafka.security.authorizer.AclAuthorizer (or its older name "
                             "kafka.security.auth.SimpleAclAuthorizer) authorizes every request by the ACLs "
                             "in ZooKeeper; empty: none, every request is allowed and the ACL APIs answer "
                             "SECURITY_DISABLED",
    "super_users": "Principals allowed everything whatever the ACLs say, separated by semicolons "
                   "(User:admin;User:ops)",
    "allow_everyone_if_no_acl_found": "Whether a resource that no ACL applies to is open to everyone (else "
                                      "only to super.users)",
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
    "transaction_state_log_num_partitions": "Partitions of __transaction_state, fixed when it is created",
    "transaction_state_log_replication_factor": "Replication factor of __transaction_state (lower if fewer "
                                                "brokers are alive when it is created)",
    "transaction_state_log_min_isr": "min.insync.replicas of __transaction_state (at most its replication "
                                     "factor)",
    "transaction_state_log_segment_bytes": "Segment size of __transaction_state",
    "transaction_max_timeout_ms": "The longest transaction.timeout.ms a transactional producer may ask for",
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": "How often transactions open past their "
                                                                   "timeout are aborted",
    "transactional_id_expiration_ms": "How long a transactional.id without a transaction is kept",
    "transaction_remove_expired_transaction_cleanup_interval_ms": "How often expired transactional.ids are "
                                                                  "removed",
}
