"""The controller as it runs inside a broker: election, watches, one event thread, the channel.

Threads: kazoo's watcher thread and the elector thread only put events on the queue; the event
thread runs the controller core. Watches are armed whether or not this broker is controller
(they are cheap, and the core ignores events while inactive), so failover has nothing to arm.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from odradek.common.gc_policy import collection_paused
from odradek.controller.controller import Controller
from odradek.controller.controller_channel import ControllerChannel
from odradek.controller.election import ControllerElector
from odradek.controller.event_manager import ControllerEventManager
from odradek.controller.events import (
    AutoLeaderRebalance,
    BrokerChange,
    Callback,
    ControllerEvent,
    ElectionTrigger,
    IsrChangeNotification,
    PartitionModifications,
    PartitionReassignment,
    PartitionRemovalReports,
    ReplicaLeaderElection,
    Resign,
    Startup,
    TopicChange,
    TopicDeletion,
)
from odradek.controller.state_change_log import StateChangeLog
from odradek.security.client_security import PLAINTEXT, ClientSecurity
from odradek.zk import paths
from odradek.zk.client import KafkaZkClient, Watch

log = logging.getLogger("odradek.controller")

#: how long an API request waits for the controller's event thread to take it up and answer
CONTROLLER_ANSWER_S = 60.0


class ControllerService:
    def __init__(self, broker_id: int, zk: KafkaZkClient, state_change_log_path: Path | None = None,
                 leader_rebalance_interval_s: float | None = 300.0,
                 leader_imbalance_per_broker_percentage: int = 10,
                 delete_topic_enable: bool = True,
                 unclean_leader_election_default: Callable[[], bool] = lambda: False,
                 security: ClientSecurity = PLAINTEXT) -> None:
        """``leader_rebalance_interval_s`` None: no automatic leader rebalance.
        ``unclean_leader_election_default``: the broker's unclean.leader.election.enable as it
        is now (static, or changed dynamically for the cluster or this broker), for topics
        that do not set it; Kafka's controller reads its broker's KafkaConfig the same way.
        ``security``: how the channel reaches brokers' inter-broker listeners."""
        self.broker_id = broker_id
        self.zk = zk
        self._rebalance_interval_s = leader_rebalance_interval_s
        self._stopped = threading.Event()
        # Buffered: a failover writes a few lines per partition; the event thread writes the
        # state-change log when idle (Controller's defer_state_change_flush).
        self._log_file = open(state_change_log_path, "a", buffering=1 << 20) if state_change_log_path else None
        self.channel = ControllerChannel(broker_id, security=security)
        self.events = ControllerEventManager(self._process, name=f"controller-event-thread-{broker_id}",
                                             on_idle=self._flush_state_change_log)
        self.core = Controller(broker_id, zk, self.channel, StateChangeLog(self._log_file),
                               leader_imbalance_per_broker_percentage=leader_imbalance_per_broker_percentage,
                               defer_state_change_flush=True, enqueue=self.events.put,
                               delete_topic_enable=delete_topic_enable,
                               unclean_leader_election_default=unclean_leader_election_default)
        # one data watch per topic znode (Kafka's PartitionModificationsHandler), armed off
        # kazoo's thread: registering reads the znode, which must not block a watch callback
        self._topic_watches: dict[str, Watch] = {}
        self._topic_watch_lock = threading.Lock()
        self._watch_arming = ThreadPoolExecutor(1, thread_name_prefix=f"topic-watches-{broker_id}")
        self.elector = ControllerElector(zk, broker_id, self._on_become, self._on_resign)
        self._watches: list[Watch] = []

    def start(self) -> None:
        self.events.start()
        self._watches = [
            self.zk.watch_children(paths.BROKER_IDS,
                                   lambda _c: self.events.put(BrokerChange(fired=time.time()))),
            self.zk.watch_children(paths.BROKER_TOPICS, self._on_topics),
            self.zk.watch_children(paths.DELETE_TOPICS, lambda _c: self.events.put(TopicDeletion())),
            self.zk.watch_children(paths.ISR_CHANGE_NOTIFICATION,
                                   lambda c: self.events.put(IsrChangeNotification(fired=time.time())) if c else None),
            # KIP-253: leaders report drained partitions marked for deletion
            self.zk.watch_children(paths.ORDERED_PARTITION_REMOVALS,
                                   lambda c: self.events.put(PartitionRemovalReports()) if c else None),
            self.zk.watch_data_exists(
                paths.PREFERRED_REPLICA_ELECTION,
                lambda _data, stat: self.events.put(
                    ReplicaLeaderElection(trigger=ElectionTrigger.ZOOKEEPER)) if stat is not None else None),
            # created or rewritten by an admin tool; the controller's own rewrites as
            # reassignments complete fire it too, and are ignored (nothing new in them)
            self.zk.watch_data_exists(
                paths.REASSIGN_PARTITIONS,
                lambda _data, stat: self.events.put(PartitionReassignment()) if stat is not None else None),
        ]
        self.elector.start()
        if self._rebalance_interval_s is not None:
            threading.Thread(target=self._rebalance_timer, name=f"leader-rebalance-{self.broker_id}",
                             daemon=True).start()

    def _flush_state_change_log(self) -> None:
        self.core.flush_state_change_log()

    def _on_topics(self, topics: list[str]) -> None:
        """Children of /brokers/topics changed: a TopicChange, and watches for new topics."""
        self.events.put(TopicChange(fired=time.time()))
        if not self._stopped.is_set():
            try:
                self._watch_arming.submit(self._arm_topic_watches, set(topics))
            except RuntimeError:
                pass  # stopping: the executor is shut down

    def _arm_topic_watches(self, topics: set[str]) -> None:
        """Watch the data of each topic znode: partitions added (CreatePartitions) fire
        PartitionModifications. The watch's first call (its current data) is no change."""
        with self._topic_watch_lock:
            for topic in sorted(set(self._topic_watches) - topics):
                self._topic_watches.pop(topic).cancel()
            for topic in sorted(topics - set(self._topic_watches)):
                armed = [False]

                def changed(_data: object, _stat: object, topic: str = topic,
                            armed: list[bool] = armed) -> None:
                    if armed[0]:
                        self.events.put(PartitionModifications(topic))
                    armed[0] = True

                self._topic_watches[topic] = self.zk.watch_data_exists(paths.topic_path(topic), changed)

    def _rebalance_timer(self) -> None:
        """Queue the imbalance check every interval; an inactive controller ignores it."""
        while not self._stopped.wait(self._rebalance_interval_s):
            if self.core.is_active:
                self.events.put(AutoLeaderRebalance())

    def _on_become(self, epoch: int, epoch_zk_version: int) -> None:
        self.events.put(Startup(epoch, epoch_zk_version, fired=time.time()))

    def _on_resign(self) -> None:
        # Drop queued work meant for the controller we no longer are; stop sending at once.
        self.events.clear_and_put(Resign())

    def _process(self, event: ControllerEvent) -> None:
        if isinstance(event, Startup):
            self.zk.epoch_zk_version = event.epoch_zk_version
            log.info("broker %d is controller at epoch %d", self.broker_id, event.epoch)
        was_active = self.core.is_active
        with collection_paused():
            self.core.process(event)
        if was_active and not self.core.is_active and not isinstance(event, Resign):
            self.elector.trigger()  # fenced out mid-event: let the elector look at /controller again

    async def ask(self, make: Callable[[Callback], ControllerEvent],
                  timeout_s: float = CONTROLLER_ANSWER_S) -> object:
        """An API's event (ControlledShutdown, ElectLeaders' ReplicaLeaderElection, the
        reassignment APIs'), built by ``make`` around its callback, put on the event thread;
        returns what the controller reports (the exception that ended the event included:
        NotControllerError on a broker that is not the controller), or a TimeoutError if it
        reported nothing within ``timeout_s``. Called on the broker's event loop."""
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[object] = loop.create_future()

        def done(result: object) -> None:
            loop.call_soon_threadsafe(lambda: None if outcome.done() else outcome.set_result(result))

        self.events.put(make(done))
        try:
            return await asyncio.wait_for(outcome, timeout_s)
        except asyncio.TimeoutError:
            return TimeoutError(f"the controller did not answer within {timeout_s:g} s")

    @property
    def is_controller(self) -> bool:
        return self.core.is_active

    def stop(self) -> None:
        self._stopped.set()
        for watch in self._watches:
            watch.cancel()
        self._watch_arming.shutdown(wait=False, cancel_futures=True)
        with self._topic_watch_lock:
            for watch in self._topic_watches.values():
                watch.cancel()
        self.elector.stop()
        self.events.close(timeout=10)
        self.channel.shutdown()
        if self._log_file is not None:
            self._log_file.close()
