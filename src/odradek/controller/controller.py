"""The controller: maps events to Kafka's KafkaController operations over the two state machines.

Every event runs the same way (``_run``): start a request batch, re-read what the event says
changed, drive the state machines, then send the batch once. A ``ControllerMovedError`` from any
fenced write means another controller was elected while we worked: we resign on the spot and the
batch is dropped, because a deposed controller's requests would only confuse brokers.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

from odradek.common.metadata import LeaderAndIsr, TopicAssignment, TopicPartition
from odradek.controller.controller_context import ControllerContext
from odradek.controller.events import (
    AlterPartitionReassignments,
    AutoLeaderRebalance,
    BrokerChange,
    ControlledShutdown,
    ControllerEvent,
    ElectionNotNeededError,
    ElectionTrigger,
    ElectionType,
    Expire,
    IsrChangeNotification,
    ListPartitionReassignments,
    NotControllerError,
    PartitionModifications,
    PartitionReassignment,
    PartitionRemovalReports,
    ReplicaLeaderElection,
    Resign,
    Startup,
    TopicChange,
    TopicDeletion,
    TopicDeletionStopReplicaResponseReceived,
    UnknownPartitionError,
)
from odradek.controller.leader_selectors import ElectionStrategy, StateChangeFailedError
from odradek.controller.ordered_partitions import OrderedPartitions
from odradek.controller.partition_removal import PartitionRemoval
from odradek.controller.partition_state_machine import PartitionStateMachine
from odradek.controller.reassignment import ReassignmentManager
from odradek.controller.replica_state_machine import ReplicaStateMachine
from odradek.controller.request_batch import ControllerBrokerRequestBatch
from odradek.controller.seams import BrokerChannel, ControllerMovedError, ControllerZk
from odradek.controller.state_change_log import StateChangeLog
from odradek.controller.states import PartitionReplica, PartitionStatus, ReplicaStatus
from odradek.controller.timing import EventTimer, TimedZk
from odradek.controller.topic_deletion import TopicDeletionManager
from odradek.zk.paths import ZERO_TOPIC_ID

logger = logging.getLogger(__name__)

#: deferred state-change lines are written at the end of an event anyway beyond this many:
#: a controller that is never idle must not hold them without bound
MAX_DEFERRED_STATE_CHANGES = 500_000


class Controller:
    """The active controller's decision core; call it only from the one event thread."""

    def __init__(self, broker_id: int, zk: ControllerZk, channel: BrokerChannel,
                 state_change_log: StateChangeLog,
                 timing_sink: Callable[[dict[str, Any]], None] | None = None,
                 leader_imbalance_per_broker_percentage: int = 10,
                 defer_state_change_flush: bool = False,
                 enqueue: Callable[[ControllerEvent], None] | None = None,
                 delete_topic_enable: bool = True,
                 unclean_leader_election_default: Callable[[], bool] = lambda: False) -> None:
        """``defer_state_change_flush``: leave an event's state-change lines pending when it
        ends, for ``flush_state_change_log`` once the event thread is idle (ControllerService
        does so). Formatting a failover's ~43,000 lines right after its requests were sent
        takes the GIL from the broker in the same process while it applies its LeaderAndIsr
        (250-415 ms instead of 100-170 ms at 10,000 partitions), and every partition it leads
        waits for it. Without it every event's lines are written as the event ends.

        ``enqueue`` puts an event on this controller's queue from any thread (the event
        manager's ``put``): StopReplica answers come back through it. ``delete_topic_enable``
        is the broker's delete.topic.enable; ``unclean_leader_election_default`` reads its
        unclean.leader.election.enable, the default of topics that do not set it."""
        self.broker_id = broker_id
        #: leader.imbalance.per.broker.percentage: the share of the partitions a broker is
        #: preferred for that it may fail to lead before AutoLeaderRebalance moves them back
        self._imbalance_ratio = leader_imbalance_per_broker_percentage / 100
        self._timing_sink = timing_sink  # None: the odradek.controller.timing logger
        self._timer: EventTimer | None = None
        zk = TimedZk(zk, lambda: self._timer)
        self._zk = zk
        self._channel = channel
        self._ctx = ControllerContext(unclean_leader_election_default)
        self._batch = ControllerBrokerRequestBatch(broker_id, self._ctx, channel)
        self._partitions = PartitionStateMachine(broker_id, self._ctx, zk, self._batch,
                                                 state_change_log)
        self._replicas = ReplicaStateMachine(broker_id, self._ctx, zk, self._batch,
                                             state_change_log)
        self._deletion = TopicDeletionManager(self._ctx, self._replicas, self._partitions,
                                              _DeletionClient(self), delete_topic_enable)
        self._reassignment = ReassignmentManager(self._ctx, zk, self._partitions, self._replicas,
                                                 self._batch)
        self._ordered = OrderedPartitions(self._ctx, zk, self._batch)
        self._partitions.prepare_ordered_creation = self._ordered.prepare_creation
        self._removal = PartitionRemoval(self._ctx, zk, self._partitions, self._replicas,
                                         self._batch)
        if enqueue is not None:
            self._batch.on_stop_replica_deleted = (
                lambda broker, epoch, tps, result: enqueue(_stop_replica_answer(
                    broker, epoch, tps, result)))
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
            case (ReplicaLeaderElection(callback=callback)
                  | AlterPartitionReassignments(callback=callback)
                  | ListPartitionReassignments(callback=callback)) if not self._active:
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
            case TopicDeletion():
                self._run(self._process_topic_deletion, "TopicDeletion")
            case TopicDeletionStopReplicaResponseReceived():
                self._run(lambda: self._process_stop_replica_deleted(event),
                          "TopicDeletionStopReplicaResponseReceived")
            case PartitionModifications(topic=topic):
                self._run(lambda: self._process_partition_modifications(topic),
                          "PartitionModifications")
            case PartitionReassignment():
                self._run(self._reassignment.on_zk_reassignment, "PartitionReassignment")
            case PartitionRemovalReports():
                self._run(self._removal.check, "PartitionRemovalReports")
            case AlterPartitionReassignments(targets=targets, callback=callback):
                self._run(lambda: self._reassignment.trigger(targets),
                          "AlterPartitionReassignments", answer=callback)
            case ListPartitionReassignments(partitions=partitions, callback=callback):
                # a read: answered from the context, no batch to send
                callback(self._reassignment.list_reassignments(partitions))

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
        # KafkaController.fetchTopicDeletionsInProgress: topics with a replica on a dead
        # broker stay halted until it returns
        markers = self._zk.get_topic_deletions()
        to_delete = markers & self._ctx.all_topics()
        if markers - to_delete:  # markers of topics that no longer exist
            self._zk.delete_topic_deletions(markers - to_delete)
        live_ids = self._ctx.live_or_shutting_down_broker_ids()
        self._deletion.init(to_delete, {t for t in to_delete for pr in self._ctx.replicas_for_topic(t)
                                        if pr.replica not in live_ids})
        self._batch.add_update_metadata(live, self._ctx.all_partitions())
        online, offline = self._replicas.initialize_replica_states()
        self._partitions.initialize_partition_states()
        # KIP-253: finish what a deposed controller left of an ordered expansion or deletion
        # marking, before the elections create the new partitions' state znodes
        self._ordered.reconcile(self._ctx.all_topics())
        # KIP-253: drained partitions reported before the failover are being removed again
        # (their replicas deleted, never told to serve), as /admin/delete_topics is re-read
        self._removal.check()
        # replicas of topics being deleted are not told to serve again: they are deleted next
        being_deleted = self._ctx.is_being_deleted
        online = [pr for pr in online if not being_deleted(pr.tp)]
        offline = [pr for pr in offline if not self._ctx.is_partition_being_removed(pr.tp)]
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
        # onControllerFailover's last steps: resume topic deletions and reassignments, then a
        # pending preferred replica election
        self._deletion.try_topic_deletion()
        self._reassignment.resume()
        self._elect_from_znode()

    def _load_topics(self, topics: set[str] | frozenset[str]) -> list[TopicPartition]:
        """Cache assignments, configs and stored leaderships of ``topics`` in three reads."""
        if not topics:
            return []
        assignments = self._zk.get_topic_assignments(topics)
        lacking = [t for t, a in assignments.items()
                   if a.initial_partition_count is None or a.topic_id == ZERO_TOPIC_ID]
        if lacking:
            # KIP-253: every topic znode carries initial_partition_count; Kafka 2.8+: a
            # topic id. Topics written without them (by Kafka's tools, or before) get them.
            assignments.update(self._zk.backfill_topic_znodes(lacking))
            logger.info("wrote initial_partition_count / topic id into %d topic znodes",
                        len(lacking))
        for assignment in assignments.values():
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
        """KafkaController.onBrokerStartup."""
        existing = self._ctx.live_or_shutting_down_broker_ids() - set(new_ids)
        self._batch.add_update_metadata(existing, [])
        self._batch.add_update_metadata(new_ids, self._ctx.partitions_with_leadership())
        replicas = self._ctx.replicas_on_brokers(new_ids)
        queued = self._ctx.is_topic_queued_up_for_deletion
        # replicas of topics being deleted are not brought online: they are deleted instead
        # (and those of drained partitions being removed, KIP-253)
        being_deleted = self._ctx.is_being_deleted
        self._replicas.handle_state_changes([pr for pr in replicas if not being_deleted(pr.tp)],
                                            ReplicaStatus.ONLINE)
        self._partitions.trigger_online_partition_state_change()
        self._reassignment.on_brokers_started(new_ids)
        deleting = {pr.tp.topic for pr in replicas if queued(pr.tp.topic)}
        if deleting:
            logger.info("brokers %s hold replicas of topics being deleted %s: resuming their "
                        "deletion", new_ids, sorted(deleting))
            self._deletion.resume_deletion_for_topics(deleting)
        if any(pr.tp in self._ctx.partitions_being_removed() for pr in replicas):
            self._removal.on_brokers_started(new_ids)  # their replicas' deletion goes on

    def _on_broker_failure(self, dead_ids: list[int]) -> None:
        """KafkaController.onBrokerFailure: leaderless partitions go Offline and are re-elected
        before the dead replicas leave the ISRs, so the election still sees the last ISR."""
        leaderless = self._ctx.partitions_with_offline_leader()
        if self._timer is not None:
            self._timer.add("leaderless", len(leaderless))
        self._partitions.handle_state_changes(leaderless, PartitionStatus.OFFLINE)
        dead = self._ctx.replicas_on_brokers(dead_ids)
        queued = self._ctx.is_topic_queued_up_for_deletion
        removing = self._ctx.partitions_being_removed()
        self._elect_then_take_offline([pr for pr in dead if not queued(pr.tp.topic)
                                       and pr.tp not in removing])
        if removing:  # KIP-253: their deletion waits for the broker
            self._removal.on_brokers_failed([pr for pr in dead if pr.tp in removing])
        # a replica being deleted cannot be on a dead broker: its topic waits for the broker
        self._deletion.fail_replica_deletion([pr for pr in dead if queued(pr.tp.topic)])
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
        electing, elections = self._partitions.start_online_partition_state_change()
        being_elected = set(electing)
        try:
            shrinks = self._replicas.start_state_changes(
                [pr for pr in dead if pr.tp not in being_elected], ReplicaStatus.OFFLINE)
        except BaseException:
            elections.finish()  # committed writes are applied (and sent) whatever happens
            raise
        try:
            elected = elections.finish()
            self._replicas.handle_state_changes([pr for pr in dead if pr.tp in being_elected],
                                                ReplicaStatus.OFFLINE)
        finally:
            shrinks.finish()  # every reply is read, even when the elections' raised
        return elected

    # -- topic changes ----------------------------------------------------------------------
    def _process_topic_change(self) -> None:
        topics = self._zk.get_all_topics()
        known = self._ctx.all_topics()
        for topic in known - topics:
            # gone from ZooKeeper without our deletion (an admin removed the znodes)
            self._ctx.remove_topic(topic)
        new_partitions = self._load_topics(topics - known)
        if new_partitions:
            self._ordered.reconcile(topics - known)
            self._on_new_partition_creation(new_partitions)

    def _on_new_partition_creation(self, tps: list[TopicPartition]) -> None:
        """KafkaController.onNewTopicCreation / onNewPartitionCreation: exactly their four steps."""
        replicas = self._ctx.replicas_for_partitions(tps)
        self._partitions.handle_state_changes(tps, PartitionStatus.NEW)
        self._replicas.handle_state_changes(replicas, ReplicaStatus.NEW)
        self._partitions.handle_state_changes(tps, PartitionStatus.ONLINE,
                                              ElectionStrategy.OFFLINE)
        self._replicas.handle_state_changes(replicas, ReplicaStatus.ONLINE)

    def _process_partition_modifications(self, topic: str) -> None:
        """KafkaController.processPartitionModifications: partitions added to an existing
        topic's assignment (CreatePartitions) are created; the others are left as they are.
        A topic being deleted gets none (CreatePartitions refuses it before writing)."""
        if topic not in self._ctx.all_topics():
            return  # created (TopicChange does it) or deleted meanwhile
        assignment = self._zk.get_topic_assignments([topic]).get(topic)
        if assignment is None:
            return
        added = sorted(TopicPartition(topic, p) for p in assignment.partitions
                       if not self._ctx.partition_replica_assignment(TopicPartition(topic, p)))
        # enable.ordered.delivery is read now: a config change reaches the controller no other way
        for name, config in self._zk.get_topic_configs([topic]).items():
            self._ctx.put_topic_config(name, config)
        ordered = self._ctx.is_ordered(topic)
        if ordered:
            # KIP-253: the count may have changed without partitions being added (a deletion)
            self._ctx.set_undeleted_partition_count(topic, assignment.undeleted_partition_count)
        elif not added:
            return
        if self._ctx.is_topic_queued_up_for_deletion(topic):
            if added:
                logger.warning("not adding partitions %s to topic %s: it is being deleted",
                               [tp.partition for tp in added], topic)
            return
        if added:
            logger.info("new partitions of topic %s: %s", topic, [tp.partition for tp in added])
            self._ctx.put_topic(TopicAssignment(topic, assignment.topic_id, {
                tp.partition: assignment.partitions[tp.partition] for tp in added}))
        if ordered:
            self._reconcile_ordered(topic)
        if added:
            self._on_new_partition_creation(added)
        if ordered:
            # KIP-253: a deletion's partitions never created go at once; a removal that
            # could not write the topic znode (it changed) tries again
            self._removal.check()

    def _reconcile_ordered(self, topic: str) -> None:
        """KIP-253 for one ordered topic, on states read now: the topic's leaders may have
        rewritten them since they were cached, and the maps must be decided on the stored
        epochs."""
        tps = self._ctx.partitions_for_topic(topic)
        for tp, lai in self._zk.get_partition_states(tps).items():
            self._ctx.put_partition_leadership(tp, lai)
        self._ordered.reconcile([topic])

    # -- topic deletion (TopicDeletionManager) ----------------------------------------------
    def _process_topic_deletion(self) -> None:
        """KafkaController.processTopicDeletion: markers of unknown topics are removed; the
        rest are queued, or with delete.topic.enable=false their markers are removed."""
        requested = self._zk.get_topic_deletions()
        unknown = requested - self._ctx.all_topics()
        if unknown:
            logger.warning("ignoring the deletion of topics that do not exist: %s", sorted(unknown))
            self._zk.delete_topic_deletions(unknown)
        wanted = requested - unknown
        if not wanted:
            return
        if self._deletion.enabled:
            new = wanted - self._ctx.topics_queued_for_deletion()
            if new:
                logger.info("deleting topics %s", sorted(new))
                self._reassignment.abandon(new)
            self._deletion.enqueue_topics_for_deletion(wanted)
        else:
            logger.info("removing the deletion markers of %s: delete.topic.enable is false",
                        sorted(wanted))
            self._zk.delete_topic_deletions(wanted)

    def _process_stop_replica_deleted(self, event: TopicDeletionStopReplicaResponseReceived
                                      ) -> None:
        if self._ctx.broker_epoch(event.broker_id) != event.broker_epoch:
            return  # sent to an earlier incarnation, handled as dead since
        if event.error_code == -1:
            # no answer: the broker left the channel, and its failure restarts the deletion
            # (Kafka drops a removed broker's requests without calling back)
            return
        removing = self._ctx.partitions_being_removed()
        removed = tuple(tp for tp in event.partitions if tp in removing)
        if len(removed) < len(event.partitions):
            self._deletion.on_stop_replica_response(
                event.broker_id, tuple(tp for tp in event.partitions if tp not in removing),
                event.error_code, event.partition_errors)
        if removed:  # KIP-253: replicas of drained partitions
            self._removal.on_stop_replica_response(event.broker_id, removed, event.error_code,
                                                   event.partition_errors)

    # -- ISR changes made by leaders --------------------------------------------------------
    def _process_isr_change_notification(self) -> None:
        """Leaders change ISRs themselves; the controller only refreshes and re-advertises."""
        # (a drained partition being removed is not told anything more: its replicas go)
        tps = [tp for tp in self._zk.pop_isr_change_notifications()
               if self._ctx.partition_replica_assignment(tp)
               and not self._ctx.is_partition_being_removed(tp)]
        if not tps:
            return
        states = self._zk.get_partition_states(tps)
        for tp, lai in states.items():
            self._ctx.put_partition_leadership(tp, lai)
        self._batch.add_update_metadata(self._ctx.live_or_shutting_down_broker_ids(),
                                        sorted(states))
        self._reassignment.on_isr_change(states)
        # KIP-253: the leader's ISR write dropped the partition's maps; the cache kept them
        lost = [tp for tp, lai in states.items() if lai.ordering is None
                and (cached := self._ctx.partition_leadership(tp)) is not None
                and cached.ordering is not None]
        if lost:
            self._ordered.restore_orderings(lost)
        if self._ctx.partitions_being_removed():
            self._removal.check()  # a removal's write may have lost a race with this ISR write

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
            if not assignment or ctx.is_being_deleted(tp):
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
            # (a partition being reassigned gets its leader from the reassignment's end)
            if (assignment and not ctx.is_being_deleted(tp)
                    and not ctx.is_being_reassigned(tp)):
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
                      if len(self._ctx.partition_replica_assignment(tp)) > 1
                      and not self._ctx.is_being_deleted(tp)]
        led_by_broker = set(self._ctx.partitions_led_by(event.broker_id))
        led = [tp for tp in replicated if tp in led_by_broker]
        followed = [tp for tp in replicated if tp not in led_by_broker]
        self._partitions.handle_state_changes(led, PartitionStatus.ONLINE,
                                              ElectionStrategy.CONTROLLED_SHUTDOWN)
        self._replicas.handle_state_changes(
            [pr for pr in self._ctx.replicas_for_partitions(followed)
             if pr.replica == event.broker_id], ReplicaStatus.OFFLINE)
        return set(self._ctx.partitions_led_by(event.broker_id)) & set(replicated)


class _DeletionClient:
    """The controller as TopicDeletionManager sees it (Kafka's ControllerDeletionClient).
    Partition-modification watches need no muting here: an event for a topic the controller
    no longer knows is ignored."""

    def __init__(self, controller: Controller) -> None:
        self._controller = controller

    def delete_topics(self, topics: Iterable[str]) -> None:
        self._controller._zk.delete_topics(topics)

    def delete_topic_deletions(self, topics: Iterable[str]) -> None:
        self._controller._zk.delete_topic_deletions(topics)

    def send_metadata_update(self, partitions: Iterable[TopicPartition]) -> None:
        ctx = self._controller._ctx
        self._controller._batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids(),
                                                    partitions)


def _stop_replica_answer(broker: int, broker_epoch: int, tps: tuple[TopicPartition, ...],
                         result: object) -> TopicDeletionStopReplicaResponseReceived:
    """A StopReplica (delete) answer as an event: no answer at all (the broker left the
    channel) counts as a request error."""
    if isinstance(result, Exception):
        return TopicDeletionStopReplicaResponseReceived(broker, broker_epoch, tps, -1)
    return TopicDeletionStopReplicaResponseReceived(
        broker, broker_epoch, tps, getattr(result, "error_code", 0),
        dict(getattr(result, "partition_errors", {}) or {}))
