"""The controller: maps events to Kafka's KafkaController operations over the two state machines.

Every event runs the same way (``_run``): start a request batch, re-read what the event says
changed, drive the state machines, then send the batch once. A ``ControllerMovedError`` from any
fenced write means another controller was elected while we worked: we resign on the spot and the
batch is dropped, because a deposed controller's requests would only confuse brokers.
"""
from __future__ import annotations

import logging
from typing import Callable

from odradek.controller.controller_context import ControllerContext
from odradek.controller.events import (
    AutoLeaderRebalance,
    BrokerChange,
    ControlledShutdown,
    ControllerEvent,
    ElectionNotNeededError,
    ElectionTrigger,
    ElectionType,
    Expire,
    IsrChangeNotification,
    NotControllerError,
    PartitionReassignment,
    ReplicaLeaderElection,
    Resign,
    Startup,
    TopicChange,
    TopicDeletion,
    UnknownPartitionError,
)
from odradek.controller.leader_selectors import ElectionStrategy, StateChangeFailedError
from odradek.controller.partition_state_machine import PartitionStateMachine, PartitionStatus
from odradek.controller.replica_state_machine import PartitionReplica, ReplicaStateMachine, ReplicaStatus
from odradek.controller.request_batch import ControllerBrokerRequestBatch
from odradek.controller.seams import BrokerChannel, ControllerMovedError, ControllerZk
from odradek.controller.state_change_log import StateChangeLog
from odradek.controller.timing import EventTimer, TimedZk
from odradek.metadata import LeaderAndIsr, TopicPartition

logger = logging.getLogger(__name__)

#: deferred state-change lines are written at the end of an event anyway beyond this many:
#: a controller that is never idle must not hold them without bound
MAX_DEFERRED_STATE_CHANGES = 500_000


class Controller:
    """The active controller's decision core; call it only from the one event thread."""

    def __init__(self, broker_id: int, zk: ControllerZk, channel: BrokerChannel,
                 state_change_log: StateChangeLog,
                 timing_sink: Callable[[dict], None] | None = None,
                 leader_imbalance_per_broker_percentage: int = 10,
                 defer_state_change_flush: bool = False) -> None:
        """``defer_state_change_flush``: leave an event's state-change lines pending when it
        ends, for ``flush_state_change_log`` once the event thread is idle (ControllerService
        does so). Formatting a failover's ~43,000 lines right after its requests were sent
        took the GIL from the broker in the same process as it applied its LeaderAndIsr: at
        10,000 partitions that broker took 250-415 ms instead of 100-170 ms, and every
        partition it leads waited for it. Without it every event's lines are written as the
        event ends."""
        self.broker_id = broker_id
        #: leader.imbalance.per.broker.percentage: the share of the partitions a broker is
        #: preferred for that it may fail to lead before AutoLeaderRebalance moves them back
        self._imbalance_ratio = leader_imbalance_per_broker_percentage / 100
        self._timing_sink = timing_sink  # None: the odradek.controller.timing logger
        self._timer: EventTimer | None = None
        zk = TimedZk(zk, lambda: self._timer)
        self._zk = zk
        self._channel = channel
        self._ctx = ControllerContext()
        self._batch = ControllerBrokerRequestBatch(broker_id, self._ctx, channel)
        self._partitions = PartitionStateMachine(broker_id, self._ctx, zk, self._batch,
                                                 state_change_log)
        self._replicas = ReplicaStateMachine(broker_id, self._ctx, zk, self._batch,
                                             state_change_log)
        self._state_change_log = state_change_log
        self._defer_flush = defer_state_change_flush
        self._active = False

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def context(self) -> ControllerContext:
        """Read access for the simulation's checkers and for tests."""
        return self._ctx

    def process(self, event: ControllerEvent) -> None:
        """The one dispatch point for every event (Kafka's ``process``)."""
        match event:
            case Startup(epoch=epoch, epoch_zk_version=zk_version, fired=fired):
                self.on_become_controller(epoch, zk_version, fired)
            case Resign() | Expire():
                if self._active:
                    self.on_resign()
            case ControlledShutdown(callback=callback) if not self._active:
                callback(NotControllerError(f"broker {self.broker_id} is not the controller"))
            case ReplicaLeaderElection(callback=callback) if not self._active:
                if callback is not None:
                    callback(NotControllerError(f"broker {self.broker_id} is not the controller"))
            case _ if not self._active:
                logger.debug("controller %d is not active, ignoring %r", self.broker_id, event)
            case BrokerChange(fired=fired):
                self._run(self._process_broker_change, "BrokerChange", fired)
            case TopicChange(fired=fired):
                self._run(self._process_topic_change, "TopicChange", fired)
            case IsrChangeNotification(fired=fired):
                self._run(self._process_isr_change_notification, "IsrChangeNotification", fired)
            case ReplicaLeaderElection(callback=callback):
                self._run(lambda: self._process_replica_leader_election(event),
                          "ReplicaLeaderElection", answer=callback)
            case AutoLeaderRebalance():
                self._run(self._process_auto_leader_rebalance, "AutoLeaderRebalance")
            case ControlledShutdown(callback=callback):
                self._run(lambda: self._process_controlled_shutdown(event), "ControlledShutdown",
                          answer=callback)
            case TopicDeletion() | PartitionReassignment():
                logger.warning("controller %d does not handle %r yet", self.broker_id, event)

    def on_become_controller(self, epoch: int, epoch_zk_version: int,
                             elected_at: float | None = None) -> None:
        """Kafka's KafkaController.onControllerFailover: load everything in batched reads, tell
        every broker the full metadata, then let both state machines bring the cluster to Online."""
        if self._active:
            self.on_resign()
        self._ctx.clear()
        self._ctx.set_epoch(epoch, epoch_zk_version)
        self._active = True
        self._run(self._failover, "Startup", elected_at)

    def on_resign(self) -> None:
        """Forget everything and stop talking to brokers (Kafka's onControllerResignation)."""
        for broker_id in self._ctx.live_or_shutting_down_broker_ids():
            self._channel.remove_broker(broker_id)
        self._batch.clear()
        self._ctx.clear()
        self._active = False

    # -- the event envelope -----------------------------------------------------------------
    def _run(self, action: Callable[[], object], name: str = "event",
             fired: float | None = None, answer: Callable[[object], None] | None = None) -> None:
        """One batch per event. On an unexpected error the requests already decided are still
        sent, since their ZooKeeper writes are committed and brokers must learn of them.
        The event's timing (timing.py) is logged when its requests are all answered.

        ``answer`` (API events) gets what ``action`` returned once the event's requests are
        queued to the brokers, as Kafka answers a ControlledShutdown: a stopping broker must
        not stop before its successors are being told. Whatever ends the event instead is
        answered too (``NotControllerError`` when we were deposed), so no caller waits forever."""
        self._batch.new_batch()
        self._ctx.start_event()
        timer = self._timer = EventTimer(name, self.broker_id, self._ctx.epoch, fired,
                                         self._timing_sink)
        outcome: object = None
        try:
            outcome = action()
        except ControllerMovedError:
            logger.warning("controller %d lost its epoch fence; resigning", self.broker_id)
            self.on_resign()
            outcome = NotControllerError(f"broker {self.broker_id} was deposed")
            return
        except Exception as exc:
            outcome = exc
            raise
        finally:
            self._timer = None
            if self._active:
                timer.mark("zk_done")
                self._batch.send_requests(self._ctx.epoch, timer)
                timer.seal()
            if (not self._defer_flush
                    or self._state_change_log.pending > MAX_DEFERRED_STATE_CHANGES):
                self._state_change_log.flush()
            if answer is not None:
                answer(outcome)

    def flush_state_change_log(self) -> None:
        """Write the state-change lines still pending (event thread only)."""
        self._state_change_log.flush()

    def _mark(self, phase: str) -> None:
        if self._timer is not None:
            self._timer.mark(phase)

    def _failover(self) -> None:
        live = self._zk.get_live_brokers()
        self._ctx.set_live_brokers(live.values())
        for info in live.values():
            self._channel.add_broker(info)
        self._load_topics(self._zk.get_all_topics())
        self._mark("loaded")
        self._batch.add_update_metadata(live, self._ctx.all_partitions())
        online, offline = self._replicas.initialize_replica_states()
        self._partitions.initialize_partition_states()
        # Kafka 2.4 runs the replica state machine's startup first: dead replicas leave their
        # ISRs (a dead leader leaves the partition leaderless), then the partition state
        # machine elects, writing every partition the dead broker led twice. Electing first
        # gives the same final states in one write per partition: the offline selector
        # already drops dead replicas from the ISR, so the Offline step only writes the
        # partitions the dead brokers followed. The live replicas' re-send comes last, so
        # the batch only adds the partitions the two steps before did not already queue.
        elected = self._elect_then_take_offline(offline)
        self._replicas.handle_state_changes(online, ReplicaStatus.ONLINE)
        if self._timer is not None:
            self._timer.add("leaderless", sum(1 for r in elected.values()
                                              if not isinstance(r, Exception)))
        # onControllerFailover's last step, resuming a pending preferred replica election
        # (resuming reassignments, the step before it, is not built yet).
        self._elect_from_znode()

    def _load_topics(self, topics: set[str] | frozenset[str]) -> list[TopicPartition]:
        """Cache assignments, configs and stored leaderships of ``topics`` in three reads."""
        if not topics:
            return []
        for assignment in self._zk.get_topic_assignments(topics).values():
            self._ctx.put_topic(assignment)
        for topic, config in self._zk.get_topic_configs(topics).items():
            self._ctx.put_topic_config(topic, config)
        tps = [tp for topic in sorted(topics) for tp in self._ctx.partitions_for_topic(topic)]
        for tp, lai in self._zk.get_partition_states(tps).items():
            self._ctx.put_partition_leadership(tp, lai)
        return tps

    # -- broker changes ---------------------------------------------------------------------
    def _process_broker_change(self) -> None:
        current = self._zk.get_live_brokers()
        known = self._ctx.live_or_shutting_down_broker_ids()
        new = sorted(current.keys() - known)
        dead = sorted(known - current.keys())
        bounced = sorted(b for b in current.keys() & known
                         if current[b].epoch != self._ctx.broker_epoch(b))
        for broker_id in bounced + dead:
            self._channel.remove_broker(broker_id)
            self._ctx.remove_live_broker(broker_id)
        if bounced:
            # A broker that re-registered lost its in-memory state: treat it as dead, then new
            # (Kafka 2.4). Unlike Kafka, a partition whose only live ISR member is a bounced
            # broker is not elected uncleanly in between: that broker still has the log.
            self._ctx.returning_brokers = frozenset(bounced)
            try:
                self._on_broker_failure(bounced)
            finally:
                self._ctx.returning_brokers = frozenset()
        for broker_id in new + bounced:
            self._ctx.add_live_broker(current[broker_id])
            self._channel.add_broker(current[broker_id])
        if self._timer is not None:
            self._timer.note("new", new)
            self._timer.note("dead", dead)
            self._timer.note("bounced", bounced)
        if new or bounced:
            self._on_broker_startup(new + bounced)
        if dead:
            self._on_broker_failure(dead)

    def _on_broker_startup(self, new_ids: list[int]) -> None:
        """KafkaController.onBrokerStartup, but for its reassignment resumption (not built yet)."""
        existing = self._ctx.live_or_shutting_down_broker_ids() - set(new_ids)
        self._batch.add_update_metadata(existing, [])
        self._batch.add_update_metadata(new_ids, self._ctx.partitions_with_leadership())
        self._replicas.handle_state_changes(self._ctx.replicas_on_brokers(new_ids),
                                            ReplicaStatus.ONLINE)
        self._partitions.trigger_online_partition_state_change()

    def _on_broker_failure(self, dead_ids: list[int]) -> None:
        """KafkaController.onBrokerFailure: leaderless partitions go Offline and are re-elected
        before the dead replicas leave the ISRs, so the election still sees the last ISR."""
        leaderless = self._ctx.partitions_with_offline_leader()
        if self._timer is not None:
            self._timer.add("leaderless", len(leaderless))
        self._partitions.handle_state_changes(leaderless, PartitionStatus.OFFLINE)
        self._elect_then_take_offline(self._ctx.replicas_on_brokers(dead_ids))
        if not leaderless:
            # Nobody else will carry the news that the broker is gone.
            self._batch.add_update_metadata(self._ctx.live_or_shutting_down_broker_ids(), [])

    def _elect_then_take_offline(self, dead: list[PartitionReplica]
                                 ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Every New or Offline partition -> Online, then ``dead`` -> OfflineReplica, with
        ZooKeeper kept busy: the elections' writes go out, the ISR shrinks of the partitions
        not being elected are decided and sent while ZooKeeper applies them, and the
        elections are applied while it applies the shrinks (at 10,000 partitions each write
        is tens of milliseconds of ZooKeeper's time). The two sets of partitions are
        disjoint, so their order does not matter; the dead replicas of the elected partitions
        go offline once the elections are applied, against the new ISRs (which the offline
        selector already left them out of, so they cost no write), while ZooKeeper still
        applies the shrinks."""
        electing, finish_elections = self._partitions.start_online_partition_state_change()
        being_elected = set(electing)
        try:
            finish_offline = self._replicas.start_state_changes(
                [pr for pr in dead if pr.tp not in being_elected], ReplicaStatus.OFFLINE)
        except BaseException:
            finish_elections()  # committed writes are applied (and sent) whatever happens
            raise
        try:
            elected = finish_elections()
            self._replicas.handle_state_changes([pr for pr in dead if pr.tp in being_elected],
                                                ReplicaStatus.OFFLINE)
        finally:
            finish_offline()  # every reply is read, even when the elections' raised
        return elected

    # -- topic changes ----------------------------------------------------------------------
    def _process_topic_change(self) -> None:
        topics = self._zk.get_all_topics()
        known = self._ctx.all_topics()
        for topic in known - topics:
            self._ctx.remove_topic(topic)
        new_partitions = self._load_topics(topics - known)
        if new_partitions:
            self._on_new_partition_creation(new_partitions)

    def _on_new_partition_creation(self, tps: list[TopicPartition]) -> None:
        """KafkaController.onNewTopicCreation / onNewPartitionCreation: exactly their four steps."""
        replicas = self._ctx.replicas_for_partitions(tps)
        self._partitions.handle_state_changes(tps, PartitionStatus.NEW)
        self._replicas.handle_state_changes(replicas, ReplicaStatus.NEW)
        self._partitions.handle_state_changes(tps, PartitionStatus.ONLINE,
                                              ElectionStrategy.OFFLINE)
        self._replicas.handle_state_changes(replicas, ReplicaStatus.ONLINE)

    # -- ISR changes made by leaders --------------------------------------------------------
    def _process_isr_change_notification(self) -> None:
        """Leaders change ISRs themselves; the controller only refreshes and re-advertises."""
        tps = [tp for tp in self._zk.pop_isr_change_notifications()
               if self._ctx.partition_replica_assignment(tp)]
        if not tps:
            return
        states = self._zk.get_partition_states(tps)
        for tp, lai in states.items():
            self._ctx.put_partition_leadership(tp, lai)
        self._batch.add_update_metadata(self._ctx.live_or_shutting_down_broker_ids(),
                                        sorted(states))

    # -- API-driven events ------------------------------------------------------------------
    def _process_replica_leader_election(
        self, event: ReplicaLeaderElection
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """KafkaController.onPreferredReplicaElection, for each of Kafka 2.4's triggers."""
        if event.trigger is ElectionTrigger.ZOOKEEPER:
            return self._elect_from_znode()
        return self._elect_replica_leaders(event.partitions, event.election_type, event.trigger)

    def _elect_from_znode(self) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """The preferred replica election an admin tool asked for in ZooKeeper, if any; the
        znode is deleted afterwards whatever the outcome, which tells the tool it is done."""
        requested = self._zk.get_preferred_replica_election()
        if requested is None:
            return {}
        try:
            return self._elect_replica_leaders(frozenset(requested), ElectionType.PREFERRED,
                                               ElectionTrigger.ZOOKEEPER)
        finally:
            self._zk.delete_preferred_replica_election()

    def _elect_replica_leaders(
        self, partitions: frozenset[TopicPartition], election_type: ElectionType,
        trigger: ElectionTrigger,
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Kafka 2.4's processReplicaLeaderElection: unknown partitions and those already led
        as asked are answered without an election; the rest go Online through the preferred
        selector, or for UNCLEAN (leaderless partitions only) the offline selector with
        unclean election allowed."""
        ctx = self._ctx
        live = ctx.live_broker_ids()
        results: dict[TopicPartition, LeaderAndIsr | Exception] = {}
        electable: list[TopicPartition] = []
        for tp in sorted(partitions):
            assignment = ctx.partition_replica_assignment(tp)
            lai = ctx.partition_leadership(tp)
            if not assignment:
                results[tp] = UnknownPartitionError(f"partition {tp} does not exist")
            elif lai is None:  # a new partition: its first leader comes from its creation
                results[tp] = StateChangeFailedError(f"{tp} has no leader yet")
            elif election_type is ElectionType.PREFERRED and lai.leader == assignment[0]:
                results[tp] = ElectionNotNeededError(
                    f"{tp} is already led by its preferred replica {assignment[0]}")
            elif election_type is ElectionType.UNCLEAN and lai.leader in live:
                results[tp] = ElectionNotNeededError(f"{tp} has a live leader {lai.leader}")
            else:
                electable.append(tp)
        strategy = (ElectionStrategy.PREFERRED if election_type is ElectionType.PREFERRED
                    else ElectionStrategy.OFFLINE_UNCLEAN)
        elected = self._partitions.handle_state_changes(electable, PartitionStatus.ONLINE,
                                                        strategy)
        results.update(elected)
        if electable:
            failed = sum(1 for r in elected.values() if isinstance(r, Exception))
            logger.info("%s leader election (%s) of %d partitions: %d elected, %d not needed or "
                        "unknown, %d failed", election_type.name.lower(), trigger.value,
                        len(results), len(electable) - failed, len(results) - len(electable),
                        failed)
        return results

    def _process_auto_leader_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: a live broker that leads more than the
        allowed share fewer of the partitions it is preferred for gets back those where it is
        in sync. Without this, leadership stays wherever the last failures pushed it."""
        ctx = self._ctx
        live = ctx.live_broker_ids()
        preferred_for: dict[int, list[TopicPartition]] = {}
        for tp in ctx.all_partitions():
            assignment = ctx.partition_replica_assignment(tp)
            if assignment:
                preferred_for.setdefault(assignment[0], []).append(tp)
        to_elect: list[TopicPartition] = []
        for broker, tps in sorted(preferred_for.items()):
            not_led = [(tp, lai) for tp in tps if (lai := ctx.partition_leadership(tp)) is not None
                       and lai.leader != broker]
            if broker not in live or len(not_led) <= self._imbalance_ratio * len(tps):
                continue
            ready = [tp for tp, lai in not_led if broker in lai.isr]
            logger.info("broker %d leads %d of the %d partitions it is preferred for; moving back "
                        "the %d where it is in sync", broker, len(tps) - len(not_led), len(tps),
                        len(ready))
            to_elect.extend(ready)
        if to_elect:
            self._elect_replica_leaders(frozenset(to_elect), ElectionType.PREFERRED,
                                        ElectionTrigger.AUTO)

    def _process_controlled_shutdown(self, event: ControlledShutdown) -> object:
        """KafkaController.shutdownBroker (controlled shutdown): move leadership away, then take
        its follower replicas offline; returns the replicated partitions the broker still leads.
        Single-replica partitions are left alone: there is nowhere to move them."""
        info = self._ctx.broker_info(event.broker_id)
        if info is None or info.epoch != event.broker_epoch:
            return StateChangeFailedError(
                f"broker {event.broker_id} epoch {event.broker_epoch} is not registered")
        self._ctx.add_shutting_down_broker(event.broker_id)
        replicated = [tp for tp in self._ctx.partitions_on_broker(event.broker_id)
                      if len(self._ctx.partition_replica_assignment(tp)) > 1]
        led_by_broker = set(self._ctx.partitions_led_by(event.broker_id))
        led = [tp for tp in replicated if tp in led_by_broker]
        followed = [tp for tp in replicated if tp not in led_by_broker]
        self._partitions.handle_state_changes(led, PartitionStatus.ONLINE,
                                              ElectionStrategy.CONTROLLED_SHUTDOWN)
        self._replicas.handle_state_changes(
            [pr for pr in self._ctx.replicas_for_partitions(followed)
             if pr.replica == event.broker_id], ReplicaStatus.OFFLINE)
        return set(self._ctx.partitions_led_by(event.broker_id)) & set(replicated)
