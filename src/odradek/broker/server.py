"""The broker process: wiring only.

Start order matters: the Kafka listener opens before the broker registers in ZooKeeper, so that
the controller's first LeaderAndIsr (sent as soon as the registration appears) finds it listening;
the controller election starts last. Shutdown goes the other way.
"""
from __future__ import annotations

import asyncio
import base64
import faulthandler
import json
import logging
import signal
import time
import uuid
from typing import Any, Awaitable, Callable

from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError

from odradek.broker.config import BrokerConfig
from odradek.broker.connection import KafkaConnection
from odradek.broker.context import BrokerContext
from odradek.broker.controlled_shutdown import controlled_shutdown
from odradek.controller.controller_service import ControllerService
from odradek.broker.dynamic_broker_config import DynamicBrokerConfig
from odradek.broker.dynamic_config_manager import DynamicConfigManager
from odradek.broker.fetcher import ReplicaFetcher, ReplicaFetcherManager
from odradek.broker.gc_policy import FREEZE_EVERY_S, GcPolicy
from odradek.broker.handlers import KafkaApis
from odradek.broker.metadata_cache import LEADER_DURING_DELETE, MetadataCache
from odradek.broker.metrics import BrokerCollector, BrokerMetrics
from odradek.broker.partition import Partition
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.replication_quota import ReplicationQuotas
from odradek.controller.events import ControllerEvent, ElectionType, EventPreemptedError, NotControllerError
from odradek.controller.leader_selectors import StateChangeFailedError
from odradek.group.group_coordinator import GroupConfig, GroupCoordinator
from odradek.group.group_metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from odradek.log.log import LogConfig
from odradek.log.log_cleaner import LogCleaner
from odradek.log.log_manager import LogManager
from odradek.metadata import BrokerInfo, TopicPartition
from odradek.protocol import controller_api
from odradek.protocol.controller_api import (ControlledShutdownRequest, ControlledShutdownResponse,
                                             ControllerResponse)
from odradek.netutil import bind_outgoing_to
from odradek.protocol.errors import ErrorCode
from odradek.zk.client import KafkaZkClient
from odradek.zk.errors import BrokerIdInUseError

log = logging.getLogger("odradek.broker")

CLUSTER_ID_PATH = "/cluster/id"
HW_CHECKPOINT_INTERVAL_S = 5.0
#: how long an API request waits for the controller's event thread to take it up and answer
CONTROLLER_ANSWER_S = 60.0


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.zk = KafkaZkClient(config.zookeeper, config.zookeeper_session_timeout_ms / 1000,
                                config.zookeeper_jute_maxbuffer)
        self.metadata = MetadataCache()
        default_log = LogConfig(segment_bytes=config.log_segment_bytes, retention_ms=config.log_retention_ms,
                                retention_bytes=config.log_retention_bytes,
                                flush_messages=config.log_flush_interval_messages,
                                flush_ms=config.log_flush_interval_ms)
        self.log_manager = LogManager(config.data_dir, default_log, max_open_files=config.max_open_files)
        self.log_cleaner = LogCleaner(self.log_manager, lambda tp: (p := self.replica_manager.get(tp)) and p.high_watermark,
                                      config.log_cleaner_backoff_ms, config.log_cleaner_dedupe_buffer_size,
                                      producer_last_offsets=self._producer_last_offsets)
        self.fetchers = ReplicaFetcherManager(config.broker_id, self._new_fetcher)
        self.replica_manager = ReplicaManager(config.broker_id, config.data_dir, self.log_manager, default_log,
                                              config.min_insync_replicas, self.fetchers, self._load_topic_configs,
                                              self.zk, config.replica_lag_time_max_ms,
                                              lambda: {b.id for b in self.metadata.live_brokers})
        self.controller = ControllerService(
            config.broker_id, self.zk, config.data_dir / "state-change.log",
            config.leader_imbalance_check_interval_seconds if config.auto_leader_rebalance_enable else None,
            config.leader_imbalance_per_broker_percentage, config.delete_topic_enable)
        self.group_coordinator = GroupCoordinator(
            GroupMetadataManager(self._offsets_partition_count, self.replica_manager.get,
                                 config.offsets_commit_timeout_ms / 1000, config.message_max_bytes),
            GroupConfig(config.group_min_session_timeout_ms, config.group_max_session_timeout_ms,
                        config.group_initial_rebalance_delay_ms, config.offsets_retention_minutes * 60_000,
                        config.offset_metadata_max_bytes))
        self.replica_manager.on_leadership_change = self._on_leadership_change
        self.replica_manager.load_topic_ids = self._load_topic_ids
        self.replication_quotas = ReplicationQuotas(config.broker_id, config.replication_quota_window_num,
                                                    config.replication_quota_window_size_seconds)
        self.dynamic_config = DynamicConfigManager(config.broker_id, self.zk, DynamicBrokerConfig(config),
                                                   self.replica_manager, self.log_cleaner, self.replication_quotas)
        self._producer_ids: list[int] = []
        self._producer_id_lock = asyncio.Lock()
        self._server: asyncio.base_events.Server | None = None
        self._stopping = asyncio.Event()
        self._session_lost = False

    def _start_metrics(self) -> BrokerMetrics | None:
        """Prometheus metrics on metrics.port (broker/metrics.py), or None without one."""
        if not self.config.metrics_port:
            return None
        metrics = BrokerMetrics()
        rm, cache = self.replica_manager, self.metadata
        metrics.add_collector(BrokerCollector(
            metrics, rm.partitions, lambda: (rm.isr_shrinks, rm.isr_expands), lambda: self.controller.is_controller,
            lambda: _offline_and_all(cache), self._group_lag))
        try:
            metrics.serve(self.config.host, self.config.metrics_port)
        except OSError as exc:  # a taken port costs the metrics, not the broker
            log.error("broker %d: cannot serve metrics on port %d (%s); running without them",
                      self.config.broker_id, self.config.metrics_port, exc)
            return None
        metrics.listen_to_controller()
        return metrics

    def _group_lag(self) -> list[tuple[str, str, int, int]]:
        """Lag of the groups this broker coordinates, for the partitions it holds a replica of."""
        lags = []
        for group in self.group_coordinator.manager.local_groups():
            for tp, committed in group.offsets.items():
                partition = self.replica_manager.get(tp)
                if partition is not None:
                    lags.append((group.group_id, tp.topic, tp.partition,
                                 max(partition.high_watermark - committed.offset, 0)))
        return lags

    def _offsets_partition_count(self) -> int:
        """__consumer_offsets' partition count: the topic's own once known (as Kafka reads it
        from ZooKeeper), else offsets.topic.num.partitions, the count it is created with."""
        return len(self.metadata.partitions(OFFSETS_TOPIC) or ()) or self.config.offsets_topic_num_partitions

    def _on_leadership_change(self, led: list[Partition], not_led: list[Partition]) -> None:
        """Kafka's KafkaApis.onLeadershipChange: coordination moves with the leadership of the
        __consumer_offsets partitions."""
        for partition in led:
            if partition.tp.topic == OFFSETS_TOPIC:
                self.group_coordinator.on_election(partition.tp.partition, partition.leader_epoch)
        for partition in not_led:
            if partition.tp.topic == OFFSETS_TOPIC:
                self.group_coordinator.on_resignation(partition.tp.partition)

    def _producer_last_offsets(self, tp: TopicPartition) -> dict[int, int] | None:
        """For the log cleaner's thread: the hosted partition's producers' last batches."""
        partition = self.replica_manager.get(tp)
        return None if partition is None else partition.producers.last_offsets()

    def _new_fetcher(self, leader: BrokerInfo) -> ReplicaFetcher:
        return ReplicaFetcher(self.config.broker_id, leader, self.config.replica_fetch_wait_max_ms,
                              self.config.replica_fetch_max_bytes, quota=self.replication_quotas.follower)

    async def _load_topic_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        return await self.dynamic_config.load_topic_configs(topics, self.zk.get_topic_configs)

    async def _load_topic_ids(self, topics: list[str]) -> dict[str, str]:
        assignments = await asyncio.to_thread(self.zk.get_topic_assignments, topics)
        return {t: a.topic_id for t, a in assignments.items()}

    def _remove_stale_logs(self) -> None:
        """Before registering: delete the logs of topics that no longer exist, or exist under
        another topic id (deleted and created again while this broker was down), so nothing
        of an earlier incarnation is ever loaded or served. Logs without a stored id (written
        before ids were kept) stay: nothing tells them apart."""
        on_disk = self.log_manager.partitions()
        if not on_disk:
            return
        existing = self.zk.get_topic_assignments({tp.topic for tp in on_disk})
        for tp in on_disk:
            assignment = existing.get(tp.topic)
            stored = self.log_manager.topic_id(tp)
            if assignment is None or (stored is not None and stored != assignment.topic_id):
                log.info("deleting the log of %s: its topic %s", tp,
                         "no longer exists" if assignment is None
                         else f"is now topic id {assignment.topic_id}, the log's is {stored}")
                self.replica_manager.drop_log(tp)

    async def _next_producer_id(self) -> int:
        async with self._producer_id_lock:
            if not self._producer_ids:
                block = await asyncio.to_thread(self.zk.allocate_producer_id_block, self.config.broker_id)
                self._producer_ids = list(range(block.end, block.start - 1, -1))
            return self._producer_ids.pop()

    async def _ask_controller(self, put: Callable[[Callable[[object], None]], None],
                              timeout_s: float) -> object:
        """Queue an API event on the controller's event thread (``put`` gets its callback)
        and wait for the outcome it reports; a TimeoutError if none came within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[object] = loop.create_future()

        def done(result: object) -> None:
            loop.call_soon_threadsafe(lambda: outcome.done() or outcome.set_result(result))

        put(done)
        try:
            return await asyncio.wait_for(outcome, timeout_s)
        except asyncio.TimeoutError:
            return TimeoutError(f"the controller did not answer within {timeout_s:g} s")

    async def _elect_leaders(self, partitions: frozenset[TopicPartition], election_type: ElectionType) -> object:
        return await self._ask_controller(
            lambda done: self.controller.elect_leaders(partitions, election_type, done), CONTROLLER_ANSWER_S)

    async def _controller_event(self, make: Callable[[Callable[[object], None]], ControllerEvent]) -> object:
        """An admin API's event on the controller's thread (reassignment_apis.py), awaited."""
        return await self._ask_controller(lambda done: self.controller.events.put(make(done)), CONTROLLER_ANSWER_S)

    async def _controlled_shutdown_of(self, version: int, correlation_id: int,
                                      request: ControlledShutdownRequest) -> bytes:
        """The controller's side of a broker's ControlledShutdown: answered once leadership
        has moved, with the replicated partitions the broker still leads."""
        outcome = await self._ask_controller(lambda done: self.controller.controlled_shutdown(
            request.broker_id, request.broker_epoch, done), CONTROLLER_ANSWER_S)
        if isinstance(outcome, (NotControllerError, EventPreemptedError)):
            response = ControlledShutdownResponse(ErrorCode.NOT_CONTROLLER)
        elif isinstance(outcome, TimeoutError):
            response = ControlledShutdownResponse(ErrorCode.REQUEST_TIMED_OUT)
        elif isinstance(outcome, StateChangeFailedError):  # not registered at that epoch
            response = ControlledShutdownResponse(ErrorCode.STALE_BROKER_EPOCH)
        elif isinstance(outcome, Exception):
            response = ControlledShutdownResponse(ErrorCode.UNKNOWN_SERVER_ERROR)
        else:
            response = ControlledShutdownResponse(ErrorCode.NONE, tuple(sorted(outcome)))  # type: ignore[call-overload]
        return controller_api.encode_response(controller_api.API_CONTROLLED_SHUTDOWN, version,
                                              correlation_id, response)

    def _controller_request(self, api_key: int, version: int, correlation_id: int,
                            request: Any) -> bytes | Awaitable[bytes]:
        """LeaderAndIsr, UpdateMetadata and StopReplica, fenced by controller and broker epoch;
        answered in the same callback unless a LeaderAndIsr must read topic configs first.
        A ControlledShutdown from another broker goes to our controller."""
        rm = self.replica_manager
        if api_key == controller_api.API_CONTROLLED_SHUTDOWN:
            return self._controlled_shutdown_of(version, correlation_id, request)
        if api_key == controller_api.API_LEADER_AND_ISR:
            result = rm.become_leader_or_follower(request)
            if not isinstance(result, ControllerResponse):
                return self._encode_later(api_key, version, correlation_id, result)
            response = result
        elif api_key == controller_api.API_STOP_REPLICA:
            response = rm.stop_replicas(request)
        else:
            stale = rm.fence(request.controller_epoch, request.broker_epoch)
            if stale is None:
                known = {b.id for b in self.metadata.live_brokers}
                self.metadata.update(request.controller_id, request.controller_epoch,
                                     request.live_brokers, request.partition_states)
                deleted = [st.tp for st in request.partition_states if st.leader == LEADER_DURING_DELETE]
                if deleted:  # Kafka's handleUpdateMetadataRequest: their groups' offsets go too
                    self.group_coordinator.handle_deleted_partitions(deleted)
                registered = {b.id for b in request.live_brokers} - known
                if registered:
                    rm.brokers_registered(registered)
            response = ControllerResponse(int(stale or 0), {})
        return controller_api.encode_response(api_key, version, correlation_id, response)

    @staticmethod
    async def _encode_later(api_key: int, version: int, correlation_id: int,
                            pending: Awaitable[ControllerResponse]) -> bytes:
        return controller_api.encode_response(api_key, version, correlation_id, await pending)

    def _cluster_id(self) -> str:
        """Kafka's /cluster/id: made once by the first broker, read by every later one."""
        kz = self.zk.kazoo
        new_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        try:
            kz.create(CLUSTER_ID_PATH, json.dumps({"version": "1", "id": new_id}).encode(), makepath=True)
        except NodeExistsError:
            pass
        return json.loads(kz.get(CLUSTER_ID_PATH)[0])["id"]

    async def run(self) -> None:
        cfg = self.config
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        bind_outgoing_to(cfg.host)
        await asyncio.to_thread(self.zk.start)
        cluster_id = await asyncio.to_thread(self._cluster_id)
        await self.dynamic_config.startup()  # before any partition: they start with the dynamic defaults
        ctx = BrokerContext(cfg, cluster_id, self.replica_manager, self.metadata, self.zk,
                            self._controller_request, self._next_producer_id, self._elect_leaders,
                            self.group_coordinator, self._start_metrics(),
                            replication_quotas=self.replication_quotas,
                            ask_controller=self._controller_event)
        apis = KafkaApis(ctx)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: KafkaConnection(apis, cfg.socket_request_max_bytes),
                                                cfg.host, cfg.port, reuse_address=True, backlog=1024)
        self._info = BrokerInfo(cfg.broker_id, cfg.host, cfg.port, rack=cfg.broker_rack)
        try:
            await asyncio.to_thread(self._remove_stale_logs)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: LeaderAndIsr checks ids too
            log.warning("broker %d: could not check its logs against ZooKeeper: %r", cfg.broker_id, exc)
        self.replica_manager.broker_epoch = await self._register()
        self.zk.add_state_listener(lambda state: loop.call_soon_threadsafe(self._on_zk_state, state))
        log.info("broker %d listening on %s:%d (broker epoch %d, cluster %s)", cfg.broker_id, cfg.host, cfg.port,
                 self.replica_manager.broker_epoch, cluster_id)
        self.controller.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        isr_interval_s = min(0.5, cfg.replica_lag_time_max_ms / 2000)
        gc_policy = GcPolicy()
        gc_policy.install()
        if cfg.log_cleaner_enable:
            self.log_cleaner.start()
        tasks = [loop.create_task(self._every(HW_CHECKPOINT_INTERVAL_S, self._checkpoint)),
                 loop.create_task(self._every(isr_interval_s, self.replica_manager.maintain_isr)),
                 loop.create_task(self._every(cfg.log_retention_check_interval_ms / 1000,
                                              self._retention)),
                 loop.create_task(self._every(FREEZE_EVERY_S, gc_policy.tick)),
                 loop.create_task(self._every(cfg.offsets_retention_check_interval_ms / 1000,
                                              self.group_coordinator.expire_offsets))]
        await self._stopping.wait()
        log.info("broker %d shutting down", cfg.broker_id)
        self.fetchers.refuse_new()
        if cfg.controlled_shutdown_enable:
            await controlled_shutdown(self.zk, cfg.broker_id, self.replica_manager.broker_epoch,
                                      self._another_leader_possible, cfg.controlled_shutdown_max_retries,
                                      cfg.controlled_shutdown_retry_backoff_ms / 1000,
                                      cached_controller=lambda: self.metadata.broker(self.metadata.controller_id))
        for task in tasks:
            task.cancel()
        self.group_coordinator.shutdown()
        await self.shutdown()

    def _another_leader_possible(self, remaining: tuple[TopicPartition, ...]) -> bool:
        """Whether some partition we still lead has another live in-sync replica to take over."""
        live = {b.id for b in self.metadata.live_brokers} - {self.config.broker_id}
        partitions = (self.replica_manager.get(tp) for tp in remaining)
        return any(live & p.isr for p in partitions if p is not None)

    def _on_zk_state(self, state: KazooState) -> None:
        """After a session expiry the registration znode is gone and the controller counts this
        broker dead: register again once a new session is up, which gives a new broker epoch
        (so requests meant for the old incarnation are refused)."""
        if self._stopping.is_set():
            return  # closing our own session at shutdown is not an expiry
        if state == KazooState.LOST:
            log.warning("broker %d: ZooKeeper session expired", self.config.broker_id)
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            asyncio.get_running_loop().create_task(self._register_again())

    async def _register(self) -> int:
        """Create /brokers/ids/N; the broker epoch. Tried again while ZooKeeper cannot answer
        (as Kafka's KafkaZkClient retries until connected): a broker started while ZooKeeper
        restarted got ConnectionLoss here and exited (found by odradek.faults). Another live
        broker holding our id is fatal."""
        while True:
            try:
                return await asyncio.to_thread(self.zk.register_broker, self._info)
            except BrokerIdInUseError:
                raise
            except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable or restarting
                log.warning("broker %d: registering failed (%r); retrying", self.config.broker_id, exc)
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
        if self._server is not None:
            self._server.close()
        await self.fetchers.close()
        await asyncio.to_thread(self.log_cleaner.shutdown)
        for partition in self.replica_manager.partitions():
            partition.close()
        self.replica_manager.checkpoint_high_watermarks()
        self.log_manager.close()
        await asyncio.to_thread(self.zk.close)


def _offline_and_all(cache: MetadataCache) -> tuple[int, int]:
    """(partitions without a live leader, all partitions) in this broker's metadata, one walk."""
    offline = total = 0
    for topic in cache.topics():
        for state in (cache.partitions(topic) or {}).values():
            total += 1
            offline += cache.broker(state.leader) is None
    return offline, total


def run_broker(config: BrokerConfig) -> None:
    """Run one broker until SIGTERM or SIGINT; SIGUSR1 prints every thread's stack to stderr
    (the broker log), for a broker that seems stuck."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    asyncio.run(Broker(config).run())
