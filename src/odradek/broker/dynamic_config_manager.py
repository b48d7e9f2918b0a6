"""Kafka's DynamicConfigManager: every broker follows /config/changes and applies a changed
topic or broker config to what it runs, without a restart.

A notification only names an entity (topics/<t>, brokers/<id>, brokers/<default>); the broker
re-reads that entity's whole config, so notifications may be processed twice or late without
harm. Those with a sequence number above the last one processed are taken up, in order, after
every change of /config/changes (Kafka's ZkNodeChangeNotificationListener), all of them once at
startup; each round also deletes notifications older than 15 minutes.

What applies live, on the partitions this broker hosts: a topic's LogConfig (retention, segment
rolling, flushing, cleanup.policy and the compaction settings, max.message.bytes; the log
cleaner reads the log's config at each clean and the retention task at each check) and
min.insync.replicas; for every topic named, hosted or not (as Kafka's TopicConfigHandler), its
throttled-replica lists (replication_quota.py). unclean.leader.election.enable is not the
broker's business: the controller reads the topic's config from ZooKeeper when an election
needs it, and for a topic that does not set it the broker default from this broker's
DynamicBrokerConfig (which this manager keeps current). A broker config
change (cluster default or this broker's) replaces the defaults of every topic that does not
set the config itself, log.cleaner.backoff.ms the cleaner's idle wait, and the two
replication throttle rates the quotas' bounds.

Other entity types (users, clients) are followed by whoever registers a listener for them
(``register``): the broker's SCRAM credential cache for users (credential_cache.py), its client
quotas for users and clients (client_quotas.py). A listener gets every stored entity of its type
at startup and, after that, each entity a notification names with its whole config re-read ({}
once it has none), on the event loop. An entity below another, /config/users/<user>/clients/<id>,
reaches the "users" listeners as "<user>/clients/<id>", at startup too (as Kafka's startup reads
fetchAllChildEntityConfigs): the users and their clients are listed, then read in one batch.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from odradek.broker.dynamic_broker_config import DEFAULT_ENTITY, DynamicBrokerConfig
from odradek.broker.partition import Partition
from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.replication_quota import ReplicationQuotas
from odradek.log.log import LogConfig
from odradek.log.log_cleaner import LogCleaner
from odradek.zk import admin_zk_client as azk
from odradek.zk import paths

log = logging.getLogger("odradek.broker.dynamic_config")

#: a listener of one entity type's configs (``register``): the entity's name as ZooKeeper holds
#: it (sanitized, as Kafka's Sanitizer: "alice", "alice/clients/app") and its whole config
EntityConfigListener = Callable[[str, dict[str, str]], None]


class DynamicConfigManager:
    def __init__(self, broker_id: int, zk: Any, config: DynamicBrokerConfig, replica_manager: ReplicaManager,
                 log_cleaner: LogCleaner, quotas: ReplicationQuotas | None = None) -> None:
        self.broker_id = broker_id
        self.zk = zk  # odradek.zk.client.KafkaZkClient
        self.config = config
        self.replica_manager = replica_manager
        self.log_cleaner = log_cleaner
        self.quotas = quotas
        self._last_executed = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: asyncio.Task[None] | None = None
        self._again = False
        self._watch: Any = None
        # topic -> (the round that applied it, its config): for reads that raced a change
        self._round = 0
        self._applied: dict[str, tuple[int, dict[str, str]]] = {}
        self._listeners: dict[str, list[EntityConfigListener]] = {}

    def register(self, entity_type: str, listener: EntityConfigListener) -> None:
        """Follow the configs of ``entity_type`` ("users", "clients": not topics or brokers, which
        this manager applies itself), registered before startup. Several listeners may follow one
        type; one that raises is logged and the others still get the change."""
        if entity_type in (azk.TOPICS, azk.BROKERS) or not entity_type or "/" in entity_type:
            raise ValueError(f"cannot register a listener for entity type {entity_type!r}")
        if self._loop is not None:
            raise RuntimeError("listeners are registered before startup")
        self._listeners.setdefault(entity_type, []).append(listener)

    async def startup(self) -> None:
        """Read this broker's dynamic configs before it serves (Kafka's
        DynamicBrokerConfig.initialize), then follow /config/changes."""
        self._loop = asyncio.get_running_loop()
        entities = [str(self.broker_id), DEFAULT_ENTITY]
        stored = await asyncio.to_thread(self.zk.until_connected, self.zk.get_entity_configs, azk.BROKERS, entities)
        for entity in entities:
            self.config.update(entity, stored[entity])
        self._apply_broker_defaults()
        for entity_type in self._listeners:
            configs = await asyncio.to_thread(self.zk.until_connected, self._read_all, entity_type)
            self._notify(entity_type, configs)
            log.info("/config/%s: %d entities loaded", entity_type, len(configs))
        self._watch = self.zk.watch_children(
            paths.CONFIG_CHANGES, lambda _children: self._loop.call_soon_threadsafe(self._changed))

    def shutdown(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self._running is not None:
            self._running.cancel()

    def _changed(self) -> None:
        if self._running is not None and not self._running.done():
            self._again = True  # one more round when this one ends: it may have missed the change
            return
        self._running = asyncio.get_running_loop().create_task(self._process())

    async def _process(self) -> None:
        while True:
            self._again = False
            try:
                changes = await asyncio.to_thread(self._read_changes)
            except Exception:  # noqa: BLE001 - ZooKeeper trouble: the next change or reconnect retries
                log.exception("reading config changes failed")
                return
            if changes is not None:
                self._apply(*changes)
            if not self._again:
                return

    def _read_all(self, entity_type: str) -> dict[str, dict[str, str]]:
        """On a thread: every /config/<entity_type>/<name> and its config (Kafka's
        fetchAllEntityConfigs), for "users" also every users/<user>/clients/<id> (Kafka's
        fetchAllChildEntityConfigs), in one batched read."""
        names = self.zk.get_entity_names(entity_type)
        if entity_type == azk.USERS:
            names += self.zk.get_child_entity_names(entity_type, names, azk.CLIENTS)
        return self.zk.get_entity_configs(entity_type, names)

    def _notify(self, entity_type: str, configs: dict[str, dict[str, str]]) -> None:
        for name, config in configs.items():
            for listener in self._listeners.get(entity_type, ()):
                try:
                    listener(name, config)
                except Exception:  # noqa: BLE001 - one listener's bug must not stop the others
                    log.exception("applying the config of %s/%s failed", entity_type, name)

    def _read_changes(self) -> tuple[int, dict[str, dict[str, str]], dict[str, dict[str, str]],
                                     dict[str, dict[str, dict[str, str]]]] | None:
        """On a thread: the new notifications' entities and their configs, as of now."""
        kz = self.zk.kazoo
        children = azk.config_changes(kz)
        azk.purge_obsolete_notifications(kz, children)
        new = [c for c in children if azk.sequence_of(c) > self._last_executed]
        if not new:
            return None
        # one batched read; a notification another broker purged meanwhile is left out (its
        # entity is re-read below anyway)
        notifications = self.zk.get_config_change_notifications(new)
        topics: set[str] = set()
        brokers: set[str] = set()
        others: dict[str, set[str]] = {}  # the entities of the types listeners follow
        for child, data in notifications.items():
            entity = azk.decode_notification(data)
            if entity is None:
                log.warning("ignoring malformed config change notification %s", child)
            elif entity[0] == azk.TOPICS:
                topics.add(entity[1])
            elif entity[0] == azk.BROKERS and entity[1] in (str(self.broker_id), DEFAULT_ENTITY):
                brokers.add(entity[1])
            elif entity[0] in self._listeners:
                others.setdefault(entity[0], set()).add(entity[1])
        broker_configs = self.zk.get_entity_configs(azk.BROKERS, brokers)
        if broker_configs:  # every hosted topic's defaults may change: re-read them all
            topics |= {p.tp.topic for p in self.replica_manager.partitions()}
        topic_configs = self.zk.get_topic_configs(topics) if topics else {}
        other_configs = {t: self.zk.get_entity_configs(t, names) for t, names in others.items()}
        return azk.sequence_of(new[-1]), broker_configs, topic_configs, other_configs

    def _apply(self, last: int, broker_configs: dict[str, dict[str, str]],
               topic_configs: dict[str, dict[str, str]], other_configs: dict[str, dict[str, dict[str, str]]]) -> None:
        for entity, config in broker_configs.items():
            self.config.update(entity, config)
            log.info("broker config %s changed: %s", entity, config)
        if broker_configs:
            self._apply_broker_defaults()
        self._round += 1
        hosted: dict[str, list[Partition]] = {}  # one walk of the partitions, not one per topic
        if topic_configs:
            for partition in self.replica_manager.partitions():
                hosted.setdefault(partition.tp.topic, []).append(partition)
        for topic, config in topic_configs.items():
            self._applied[topic] = (self._round, config)
            self.apply_topic_config(topic, config, hosted.get(topic, []))
        for entity_type, configs in other_configs.items():
            for name, config in configs.items():  # the keys only: SCRAM credentials are secrets
                log.info("config of %s/%s changed: keys %s", entity_type, name, sorted(config))
            self._notify(entity_type, configs)
        self._last_executed = max(self._last_executed, last)

    async def load_topic_configs(self, topics: list[str], read: Callable[[list[str]], dict[str, dict[str, str]]]
                                 ) -> dict[str, dict[str, str]]:
        """The configs of topics new to this broker (a LeaderAndIsr creating their partitions).
        A change applied while ZooKeeper was read was read later than our read, and would miss
        the partitions created from it: its config wins."""
        started = self._round
        configs = await asyncio.to_thread(read, topics)
        for topic in topics:
            applied = self._applied.get(topic)
            if applied is not None and applied[0] > started:
                configs[topic] = applied[1]
            if self.quotas is not None:  # a replica new here (a reassignment) is throttled at once
                self.quotas.update_topic(topic, configs.get(topic, {}))
        return configs

    def _apply_broker_defaults(self) -> None:
        default = self.config.log_config()
        self.replica_manager.default_log_config = default
        self.replica_manager.log_manager.default_config = default
        self.replica_manager.default_min_isr = self.config.min_insync_replicas
        self.log_cleaner.backoff_s = self.config.log_cleaner_backoff_ms / 1000
        if self.quotas is not None:
            self.quotas.update_rates(self.config.value)

    def apply_topic_config(self, topic: str, config: dict[str, str], hosted: list[Partition]) -> None:
        """Kafka's TopicConfigHandler.processConfigChanges: the hosted partitions of `topic`
        take the new overrides over the current defaults, and the replication quotas its
        throttled-replica lists."""
        if self.quotas is not None:
            self.quotas.update_topic(topic, config)
        log_config = LogConfig.from_topic_config(config, self.replica_manager.default_log_config)
        min_isr = int(config.get("min.insync.replicas", self.replica_manager.default_min_isr))
        changed = 0
        for partition in hosted:
            if partition.log.config != log_config or partition.min_insync_replicas != min_isr:
                partition.log.config = log_config
                partition.min_insync_replicas = min_isr
                changed += 1
        if changed:
            log.info("topic %s: config %s applied to %d partitions", topic, config, changed)
