"""The broker process: wiring only.

Start order matters: the Kafka listener opens before the broker registers in ZooKeeper, so that
the controller's first LeaderAndIsr (sent as soon as the registration appears) finds it listening;
the controller election starts last. Shutdown goes the other way.
"""
from __future__ import annotations

import asyncio
import faulthandler
import logging
import signal
import ssl
import time
from typing import Any

from kazoo.client import KazooState

from odradek.broker import broker_metadata_checkpoint, producer_state_snapshots
from odradek.broker.acl_manager import AclManager, authorizer_from_config
from odradek.broker.broker_metadata_checkpoint import BrokerMetadata
from odradek.broker.client_quotas import ClientQuotas
from odradek.broker.config import BrokerConfig
from odradek.broker.connection import Handler, KafkaConnection
from odradek.broker.context import BrokerContext
from odradek.broker.controlled_shutdown import controlled_shutdown
from odradek.broker.controller_apis import ControllerApis
from odradek.broker.credential_cache import CredentialCache
from odradek.broker.dynamic_broker_config import DynamicBrokerConfig
from odradek.broker.dynamic_config_manager import DynamicConfigManager
from odradek.broker.fetcher import ReplicaFetcher, ReplicaFetcherManager
from odradek.broker.kafka_apis import KafkaApis
from odradek.broker.listener_security import ListenerSecurity, inter_broker_client, listener_security
from odradek.broker.marked_partitions import CHECK_INTERVAL_S, MarkedPartitions
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.metrics import (
    BrokerCollector,
    BrokerMetrics,
    ClientQuotaCollector,
    EventLoopCollector,
    GcCollector,
    LogMetrics,
    TransactionsCollector,
    controller_view,
)
from odradek.broker.metrics_security import BASIC, BasicAuthenticator, MetricsSecurity, metrics_security
from odradek.broker.partition import Partition
from odradek.broker.producer_id_manager import ProducerIdManager
from odradek.broker.producer_state import AbortedTxn
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.replication_quota import ReplicationQuotas
from odradek.broker.sasl_server_authenticator import SaslServerAuthenticator
from odradek.broker.txn_marker_channel import TxnMarkerChannel
from odradek.broker.txn_verification import TransactionVerifier
from odradek.broker.zookeeper_security import zookeeper_credentials
from odradek.common.clock import SystemClock
from odradek.common.errors import StartupRefusedError
from odradek.common.gc_policy import FREEZE_EVERY_S, GcPauseWatch, GcPolicy
from odradek.common.loop_watchdog import LoopWatchdog
from odradek.common.metadata import BrokerInfo, TopicPartition
from odradek.common.netutil import bind_outgoing_to
from odradek.controller.controller_service import ControllerService
from odradek.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from odradek.coordinator.scheduler import AsyncioScheduler
from odradek.coordinator.transaction.transaction_coordinator import TransactionConfig, TransactionCoordinator
from odradek.coordinator.transaction.transaction_state_manager import (
    TRANSACTION_STATE_TOPIC,
    TransactionStateManager,
)
from odradek.log.log_cleaner import LogCleaner
from odradek.log.log_dir_lock import LogDirLock
from odradek.log.log_manager import LogManager
from odradek.security import ssl_factory
from odradek.security.scram import ScramCredential
from odradek.security.ssl_factory import SslConfigError
from odradek.security.ssl_principal_mapper import principal_for
from odradek.zk import admin_zk_client
from odradek.zk.client import KafkaZkClient
from odradek.zk.errors import BrokerIdInUseError

log = logging.getLogger("odradek.broker")

HW_CHECKPOINT_INTERVAL_S = 5.0
#: how often the listeners' keystore and truststore files are checked for a replacement (a
#: stat() of each; the files are read only when one changed)
KEYSTORE_CHECK_INTERVAL_S = 5.0


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # First of all: the data dir is ours alone, and its data is this broker's (else nothing
        # of it is read or changed: a broker started on another's dir refuses here)
        self._dir_lock = LogDirLock(config.data_dir)
        self._dir_lock.acquire()
        self._stored_identity = broker_metadata_checkpoint.read(config.data_dir)
        broker_metadata_checkpoint.check_broker_id(config.data_dir, self._stored_identity, config.broker_id)
        self.zk = KafkaZkClient(config.zookeeper, config.zookeeper_session_timeout_ms / 1000,
                                config.zookeeper_jute_maxbuffer, sasl=zookeeper_credentials(config),
                                set_acl=config.zookeeper_set_acl)
        # the named listeners, each secured as it is configured, and how this broker reaches the
        # others' inter-broker listener (broker/listener_security.py)
        self.listeners = config.listeners()
        self.zk.inter_broker_listener = self.listeners.inter_broker.name
        self.inter_broker_security = inter_broker_client(self.listeners, config.security, config.jaas_file)
        self.listener_securities = [
            listener_security(listener, config.security, self._scram_credential, config.jaas_file,
                              inter_broker=listener is self.listeners.inter_broker)
            for listener in self.listeners.listeners]
        self.metadata = MetadataCache()
        # every topic config's broker default (log.segment.bytes, log.cleanup.policy, ...), as
        # Kafka's LogConfig takes them from KafkaConfig; the dynamic layers follow at startup
        broker_config = DynamicBrokerConfig(config)
        default_log = broker_config.log_config()
        self.log_manager = LogManager(config.data_dir, default_log, max_open_files=config.max_open_files)
        self.log_cleaner = LogCleaner(self.log_manager,
                                      lambda tp: None if (p := self.replica_manager.get(tp)) is None else p.high_watermark,
                                      config.log_cleaner_backoff_ms, config.log_cleaner_dedupe_buffer_size,
                                      producer_last_offsets=self._producer_last_offsets,
                                      transaction_state=self._transaction_state)
        self.fetchers = ReplicaFetcherManager(config.broker_id, self._new_fetcher)
        self.replica_manager = ReplicaManager(config.broker_id, config.data_dir, self.log_manager, default_log,
                                              config.min_insync_replicas, self.fetchers, self._load_topic_configs,
                                              self.zk, config.replica_lag_time_max_ms,
                                              lambda: {b.id for b in self.metadata.live_brokers})
        self.replica_manager.is_ordered_topic = lambda topic: self.metadata.undeleted_partition_count(topic) is not None
        self.controller = ControllerService(
            config.broker_id, self.zk, config.data_dir / "state-change.log",
            config.leader_imbalance_check_interval_seconds if config.auto_leader_rebalance_enable else None,
            config.leader_imbalance_per_broker_percentage, config.delete_topic_enable,
            lambda: broker_config.unclean_leader_election_enable, self.inter_broker_security)
        clock, scheduler = SystemClock(), AsyncioScheduler()  # the group coordinator's time and timers
        self.group_coordinator = GroupCoordinator(
            GroupMetadataManager(self._offsets_partition_count, self.replica_manager.get,
                                 config.offsets_commit_timeout_ms, config.message_max_bytes, clock, scheduler),
            GroupConfig(config.group_min_session_timeout_ms, config.group_max_session_timeout_ms,
                        config.group_initial_rebalance_delay_ms, config.offsets_retention_minutes * 60_000,
                        config.offset_metadata_max_bytes), clock, scheduler)
        self.producer_ids = ProducerIdManager(config.broker_id, self.zk)
        self.txn_markers = TxnMarkerChannel(config.broker_id, self.metadata, self.zk, self.inter_broker_security)
        # the state log's writes wait for its ISR as long as offset commits do
        self.transaction_coordinator = TransactionCoordinator(
            TransactionStateManager(self._transaction_partition_count, self.replica_manager.get,
                                    config.offsets_commit_timeout_ms, config.message_max_bytes, clock, scheduler),
            TransactionConfig(config.transaction_max_timeout_ms, config.transactional_id_expiration_ms,
                              config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                              config.transaction_remove_expired_transaction_cleanup_interval_ms),
            clock, scheduler, self.producer_ids.generate_producer_id, self.txn_markers)
        self.txn_verifier = TransactionVerifier(config.broker_id, self.metadata, self.transaction_coordinator,
                                                config.transaction_state_log_num_partitions,
                                                self.inter_broker_security)
        self.replica_manager.on_leadership_change = self._on_leadership_change
        self.replica_manager.load_topic_ids = self._load_topic_ids
        self.replication_quotas = ReplicationQuotas(config.broker_id, config.replication_quota_window_num,
                                                    config.replication_quota_window_size_seconds)
        self.dynamic_config = DynamicConfigManager(config.broker_id, self.zk, broker_config,
                                                   self.replica_manager, self.log_cleaner, self.replication_quotas)
        # every user's SCRAM credentials (/config/users), loaded at startup and kept current
        self.credential_cache = CredentialCache()
        self.dynamic_config.register(admin_zk_client.USERS, self.credential_cache.on_user_config)
        # client quotas (KIP-13/55/124): /config/users and /config/clients, loaded at startup and kept current
        self.client_quotas = ClientQuotas(config.quota_window_num, config.quota_window_size_seconds)
        self.dynamic_config.register(admin_zk_client.USERS, self.client_quotas.on_user_config)
        self.dynamic_config.register(admin_zk_client.CLIENTS, self.client_quotas.on_client_config)
        # authorizer.class.name: the ACLs in ZooKeeper, kept current in this broker's authorizer
        self.authorizer = authorizer_from_config(config)
        self.acl_manager = AclManager(self.zk, self.authorizer) if self.authorizer is not None else None
        # the metrics endpoint's TLS and logins (broker/metrics_security.py), checked before anything starts
        self.metrics_security: MetricsSecurity | None = (
            metrics_security(config, self.listeners) if config.metrics_port else None)
        # KIP-253: partitions marked for deletion this broker leads are rolled, then reported
        # to the controller once empty
        self.marked_partitions = MarkedPartitions(self.replica_manager.partitions,
                                                  self.metadata.ordered_partition_counts,
                                                  self.zk.report_partition_removal)
        # set once registered: controller requests wait for the broker epoch (controller_apis.py)
        self._registered = asyncio.Event()
        self.controller_apis = ControllerApis(self.replica_manager, self.metadata, self.group_coordinator,
                                              self.controller.ask, self._registered)
        self._servers: list[asyncio.base_events.Server] = []
        self._stopping = asyncio.Event()
        self._session_lost = False
        self._metrics_url: str | None = None  # published in the registration once serving
        self._gc_pauses = GcPauseWatch()

    def _start_metrics(self) -> BrokerMetrics | None:
        """Prometheus metrics on metrics.port (broker/metrics.py), or None without one."""
        if not self.config.metrics_port:
            return None
        metrics = BrokerMetrics()
        rm, cache = self.replica_manager, self.metadata
        metrics.add_collector(BrokerCollector(
            metrics, rm.partitions, lambda: (rm.isr_shrinks, rm.isr_expands), lambda: self.controller.is_controller,
            cache.offline_and_all_partitions,
            lambda: self.group_coordinator.lags(lambda tp: None if (p := rm.get(tp)) is None else p.high_watermark),
            brokers_and_imbalance=lambda: controller_view(cache), fetcher_max_lag=self.fetchers.max_lag))
        metrics.add_section(LogMetrics(rm.partitions).render)
        metrics.add_collector(EventLoopCollector(lambda: (self._watchdog.stalls, self._watchdog.longest_stall_s)))
        metrics.add_collector(GcCollector(self._gc_pauses))
        metrics.add_collector(ClientQuotaCollector(self.client_quotas.metrics, asyncio.get_running_loop()))
        metrics.add_collector(TransactionsCollector(self.transaction_coordinator.open_transactions,
                                                    lambda: dict(self.transaction_coordinator.aborts), rm.partitions))
        secured = self.metrics_security
        assert secured is not None  # made in __init__ with a metrics port
        authenticate = (BasicAuthenticator(self.credential_cache.lookup, self.authorizer)
                        if secured.authentication == BASIC else None)
        try:
            metrics.serve(self.config.host, self.config.metrics_port, self.config.data_dir / "state-change.log",
                          ssl_context=secured.ssl_context, authenticate=authenticate)
        except OSError as exc:  # refused as a taken listen port is: a broker silently without metrics misleads
            raise OSError(exc.errno, f"cannot serve metrics on {self.config.host}:{self.config.metrics_port} "
                                     f"(metrics.port): {exc.strerror or exc}") from None
        metrics.listen_to_controller()
        self._metrics_url = f"{secured.scheme}://{self.config.host}:{self.config.metrics_port}/metrics"
        return metrics

    def _offsets_partition_count(self) -> int:
        """__consumer_offsets' partition count: the topic's own once known (as Kafka reads it
        from ZooKeeper), else offsets.topic.num.partitions, the count it is created with."""
        return len(self.metadata.partitions(OFFSETS_TOPIC) or ()) or self.config.offsets_topic_num_partitions

    def _transaction_partition_count(self) -> int:
        """__transaction_state's partition count, as _offsets_partition_count's."""
        return (len(self.metadata.partitions(TRANSACTION_STATE_TOPIC) or ())
                or self.config.transaction_state_log_num_partitions)

    def _on_leadership_change(self, led: list[Partition], not_led: list[Partition]) -> None:
        """Kafka's KafkaApis.onLeadershipChange: both coordinators move with the leadership of
        their internal topics' partitions."""
        self.group_coordinator.on_leadership_change(led, not_led)
        self.transaction_coordinator.on_leadership_change(led, not_led)

    def _producer_last_offsets(self, tp: TopicPartition) -> dict[int, int] | None:
        """For the log cleaner's thread: the hosted partition's producers' last batches."""
        partition = self.replica_manager.get(tp)
        return None if partition is None else partition.producers.last_offsets()

    def _transaction_state(self, tp: TopicPartition) -> tuple[int, list[AbortedTxn]] | None:
        """For the log cleaner's thread: the hosted partition's last stable offset and aborted
        transactions (the high watermark read first: an older one only lowers the LSO)."""
        partition = self.replica_manager.get(tp)
        if partition is None:
            return None
        high_watermark = partition.high_watermark
        return partition.producers.transaction_snapshot(high_watermark)

    def _new_fetcher(self, leader: BrokerInfo) -> ReplicaFetcher:
        return ReplicaFetcher(self.config.broker_id, leader, self.config.replica_fetch_wait_max_ms,
                              self.config.replica_fetch_max_bytes, quota=self.replication_quotas.follower,
                              security=self.inter_broker_security)

    def _scram_credential(self, mechanism: str, username: str) -> ScramCredential | None:
        """The SCRAM credential a SASL/SCRAM exchange checks: the credential cache's."""
        return self.credential_cache.lookup(mechanism, username)

    def _connection(self, apis: KafkaApis, security: ListenerSecurity) -> KafkaConnection:
        """A new connection on ``security``'s listener: SASL listeners put the exchange in front
        of KafkaApis and accept small frames until it is done; TLS ones name the client by its
        certificate."""
        listener = security.listener
        max_bytes = self.config.socket_request_max_bytes
        mapper = security.principal_mapper
        handler: Handler = SaslServerAuthenticator(apis, security, max_bytes) if listener.uses_sasl else apis
        return KafkaConnection(handler, security.max_receive_size if listener.uses_sasl else max_bytes,
                               listener.name, listener.security_protocol,
                               (lambda der: principal_for(der, mapper)) if listener.uses_ssl else None)

    async def _load_topic_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        return await self.dynamic_config.load_topic_configs(topics, self.zk.get_topic_configs)

    async def _load_topic_ids(self, topics: list[str]) -> dict[str, str]:
        assignments = await asyncio.to_thread(self.zk.get_topic_assignments, topics)
        return {t: a.topic_id for t, a in assignments.items()}

    async def run(self) -> None:
        cfg = self.config
        self._watchdog = LoopWatchdog(asyncio.get_running_loop())
        self._watchdog.start()
        self._gc_pauses.install()
        gc_policy = GcPolicy()
        gc_policy.install()  # before the first LeaderAndIsr, whose burst it freezes at its end
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        bind_outgoing_to(cfg.host)
        await asyncio.to_thread(self.zk.start)
        cluster_id = await asyncio.to_thread(self.zk.until_connected, self.zk.get_or_create_cluster_id)
        if any(s.listener.uses_sasl for s in self.listener_securities):
            key = await asyncio.to_thread(self.zk.until_connected, self.zk.get_or_create_scram_unknown_user_key)
            for security in self.listener_securities:
                security.unknown_user_key = key
        await self._claim_data_dir(cluster_id)
        await self.dynamic_config.startup()  # before any partition: they start with the dynamic defaults
        if self.acl_manager is not None:  # every ACL loaded before the first request is served
            await self.acl_manager.startup()
        ctx = BrokerContext(cfg, cluster_id, self.replica_manager, self.metadata, self.zk,
                            self.controller_apis, self.producer_ids.generate_producer_id, self.controller.ask,
                            self.group_coordinator, self.transaction_coordinator, self.txn_verifier,
                            self._start_metrics(),
                            replication_quotas=self.replication_quotas,
                            authorizer=self.authorizer, acl_manager=self.acl_manager,
                            client_quotas=self.client_quotas)
        apis = KafkaApis(ctx)
        loop = asyncio.get_running_loop()
        for security in self.listener_securities:
            listener = security.listener
            self._servers.append(await loop.create_server(
                lambda s=security: self._connection(apis, s), listener.host, listener.port,
                ssl=security.ssl_context, reuse_address=True, backlog=1024))
        self._info = BrokerInfo(cfg.broker_id, cfg.advertised_host or cfg.host, cfg.advertised_port or cfg.port,
                                rack=cfg.broker_rack,
                                endpoints=tuple(listener.endpoint for listener in self.listeners.listeners))
        try:
            await asyncio.to_thread(self.replica_manager.remove_stale_logs, self.zk.get_topic_assignments)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: LeaderAndIsr checks ids too
            log.warning("broker %d: could not check its logs against ZooKeeper: %r", cfg.broker_id, exc)
        self.replica_manager.broker_epoch = await self._register()
        self._registered.set()
        self.zk.add_state_listener(
            lambda state: loop.call_soon_threadsafe(self._on_zk_state, state, time.monotonic()))
        log.info("broker %d listening on %s (broker epoch %d, cluster %s)", cfg.broker_id,
                 ", ".join(f"{listener.name}://{listener.host}:{listener.port}" for listener in self.listeners.listeners),
                 self.replica_manager.broker_epoch, cluster_id)
        self.controller.start()
        self.transaction_coordinator.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        isr_interval_s = min(0.5, cfg.replica_lag_time_max_ms / 2000)
        if cfg.log_cleaner_enable:
            self.log_cleaner.start()
        tasks = [loop.create_task(self._every(HW_CHECKPOINT_INTERVAL_S, self._checkpoint)),
                 loop.create_task(self._every(isr_interval_s, self.replica_manager.maintain_isr)),
                 loop.create_task(self._every(cfg.log_retention_check_interval_ms / 1000,
                                              self._retention)),
                 loop.create_task(self._every(FREEZE_EVERY_S, gc_policy.tick)),
                 loop.create_task(self._every(CHECK_INTERVAL_S, self.marked_partitions.check)),
                 loop.create_task(self._every(KEYSTORE_CHECK_INTERVAL_S, self._reload_keystores)),
                 loop.create_task(self._every(cfg.offsets_retention_check_interval_ms / 1000,
                                              self.group_coordinator.expire_offsets))]
        await self._stopping.wait()
        log.info("broker %d shutting down", cfg.broker_id)
        self.fetchers.refuse_new()
        if cfg.controlled_shutdown_enable:
            await controlled_shutdown(self.zk, cfg.broker_id, self.replica_manager.broker_epoch,
                                      self._another_leader_possible, cfg.controlled_shutdown_max_retries,
                                      cfg.controlled_shutdown_retry_backoff_ms / 1000,
                                      cached_controller=lambda: self.metadata.broker(self.metadata.controller_id),
                                      security=self.inter_broker_security)
        for task in tasks:
            task.cancel()
        self._watchdog.stop()
        self._gc_pauses.uninstall()
        self.group_coordinator.shutdown()
        self.transaction_coordinator.shutdown()
        self.txn_markers.close()
        self.txn_verifier.close()
        await self.shutdown()

    async def _claim_data_dir(self, cluster_id: str) -> None:
        """Refuse a data dir of another cluster; else record whose it is (meta.properties, at
        the first start) and only then finish the deletions a crash interrupted."""
        cfg = self.config
        try:
            broker_metadata_checkpoint.check_cluster_id(cfg.data_dir, self._stored_identity, cluster_id)
        except StartupRefusedError:
            await asyncio.to_thread(self.zk.close)
            raise
        identity = BrokerMetadata(cfg.broker_id, cluster_id)
        if self._stored_identity != identity:
            await asyncio.to_thread(broker_metadata_checkpoint.write, cfg.data_dir, identity)
            self._stored_identity = identity
        await asyncio.to_thread(self.log_manager.finish_interrupted_deletions)

    def _another_leader_possible(self, remaining: tuple[TopicPartition, ...]) -> bool:
        """Whether some partition we still lead has another live in-sync replica to take over."""
        live = {b.id for b in self.metadata.live_brokers} - {self.config.broker_id}
        partitions = (self.replica_manager.get(tp) for tp in remaining)
        return any(live & p.isr for p in partitions if p is not None)

    def _on_zk_state(self, state: KazooState, told_at: float) -> None:
        """After a session expiry the registration znode is gone and the controller counts this
        broker dead: register again once a new session is up, which gives a new broker epoch
        (so requests meant for the old incarnation are refused). ``told_at``: when kazoo's
        thread told us, so that a late reaction says whether the loop or kazoo was late."""
        if self._stopping.is_set():
            return  # closing our own session at shutdown is not an expiry
        late = time.monotonic() - told_at
        if late > 1.0:
            log.warning("broker %d: ZooKeeper state %s reached the event loop %.1f s after kazoo told it",
                        self.config.broker_id, state, late)
        if state == KazooState.LOST:
            log.warning("broker %d: ZooKeeper session expired", self.config.broker_id)
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            asyncio.get_running_loop().create_task(self._register_again())

    async def _register(self) -> int:
        """Create /brokers/ids/N; the broker epoch. Tried again while ZooKeeper cannot answer
        (as Kafka's KafkaZkClient retries until connected): a broker started while ZooKeeper
        restarts would otherwise get ConnectionLoss here and exit. Another live broker holding
        our id is fatal."""
        while True:
            try:
                return await asyncio.to_thread(self.zk.register_broker, self._info, self._metrics_url)
            except BrokerIdInUseError:
                raise
            except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable or restarting
                log.warning("broker %d: registering failed (%r); retrying", self.config.broker_id, exc)
            # waited out of the except block: a failed thread's traceback is a reference cycle
            # that must be garbage before the next freeze (common/gc_policy.py)
            await asyncio.sleep(1.0)

    async def _register_again(self) -> None:
        epoch = await self._register()
        self.replica_manager.broker_epoch = epoch
        log.info("broker %d registered again (broker epoch %d)", self.config.broker_id, epoch)

    async def _every(self, interval_s: float, fn: Any) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("periodic task %s failed", fn.__name__)

    async def _reload_keystores(self) -> None:
        """Certificates renewed in place: a listener whose keystore or truststore file was
        replaced loads it (checked, off the event loop) for every new connection."""
        for security in self.listener_securities:
            if security.ssl_factory is None:
                continue
            name = security.listener.name
            try:
                new = await asyncio.to_thread(security.replaced_stores)
                if new is not None:
                    security.use_stores(new)
                    log.info("listener %s: reloaded its keystore; new connections get the new certificate", name)
                    secured = self.metrics_security
                    if secured is not None and secured.ssl_context is not None and secured.tls_listener == name:
                        ssl_factory.update_context(secured.ssl_context, new)  # the metrics endpoint's too
            except (SslConfigError, OSError, ssl.SSLError) as exc:
                log.error("listener %s: keeping its certificate, the replaced store is refused: %s", name, exc)

    def _checkpoint(self) -> None:
        self.replica_manager.checkpoint_high_watermarks()

    def _retention(self) -> None:
        now_ms = int(time.time() * 1000)
        for partition in self.replica_manager.partitions():
            partition.apply_retention(now_ms)

    async def shutdown(self) -> None:
        if not self.zk.connected:
            # The controller's event thread may be waiting for ZooKeeper (a ControlledShutdown
            # it took while ZooKeeper was gone); ending the session fails its requests with
            # ConnectionLoss, so it stops now instead of after events.close's 10 s wait.
            await asyncio.to_thread(self.zk.close)
        self.controller.stop()
        self.dynamic_config.shutdown()
        if self.acl_manager is not None:
            self.acl_manager.shutdown()
        for server in self._servers:
            server.close()
        await self.fetchers.close()
        await asyncio.to_thread(self.log_cleaner.shutdown)
        for partition in self.replica_manager.partitions():
            partition.close()
            partition.write_producer_snapshot(producer_state_snapshots.SHUTDOWN_BATCHES)
        self.replica_manager.checkpoint_high_watermarks()
        self.log_manager.close()
        await asyncio.to_thread(self.zk.close)
        self.release_data_dir()

    def release_data_dir(self) -> None:
        """Free the data dir's lock (after the logs are closed): another broker may start on it."""
        self._dir_lock.release()


def run_broker(config: BrokerConfig) -> None:
    """Run one broker until SIGTERM or SIGINT; SIGUSR1 prints every thread's stack to stderr
    (the broker log), for a broker that seems stuck."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    asyncio.run(Broker(config).run())
