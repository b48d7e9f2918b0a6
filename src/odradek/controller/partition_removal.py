"""KIP-253: removing drained partitions of ordered topics (the last step of a deletion).

A partition marked for deletion (at or past the topic znode's ``undeleted_partition_count``,
its state znode carrying ``leader_epoch_before_deletion``) takes no new record: the produce
fence refuses them. It empties by retention (its leader rolls its active segment once it is
marked, so time and size retention can delete every segment) or by DeleteRecords to its end.
Its leader checks every few seconds (broker/marked_partitions.py) and, once log start == log
end, reports it with a persistent sequential znode
``/admin/ordered_partition_removals/removal-N`` naming its leader epoch.

What the controller does with the reports (``PartitionRemoval.check``, run on each report, on
StopReplica answers, broker changes, the topic's znode changes and at failover):

1. A report is dropped (its znode deleted) unless its partition is still marked and its state
   znode's ``leader_epoch`` is the one reported: a later leader may hold records the reporting
   one had deleted (a follower that had not yet followed the log start), and must report again.
2. Partitions are removed from the top only: Kafka clients number partitions 0..N-1 without
   gaps, so partition p goes once every partition above it goes too (in the same step or an
   earlier one). A lower drained partition keeps its report and waits, with a log line naming
   the partitions it waits for. A marked partition that was never created (no state znode: it
   holds nothing and has no replica) needs no report.
3. Removal is TopicDeletionManager's replica deletion, per partition: the partition goes
   OfflinePartition -> NonExistentPartition, every broker is told leader -2 (Kafka's
   LeaderDuringDelete: clients stop seeing the partition), and its replicas go OfflineReplica
   -> ReplicaDeletionStarted (StopReplica with delete); a replica on a dead broker is
   ReplicaDeletionIneligible until the broker returns. Meanwhile the partition is not elected,
   its ISR not shrunk and its replicas not told to serve (``ControllerContext.is_being_deleted``).
4. Once every replica of the top partitions is ReplicaDeletionSuccessful, one fenced multi
   (``ControllerZk.remove_partitions``) rewrites the topic znode without them (conditional on
   its version), deletes their state and partition znodes and their reports. Then every broker
   gets an UpdateMetadata of the topic's remaining partitions. When the partition count reaches
   ``undeleted_partition_count`` the deletion is complete, and CreatePartitions may change the
   count again.

Crash safety: the reports and the marks are in ZooKeeper, the rest is decided again. A
controller deposed at any point leaves either the reports and every znode (the next one
re-reads the reports at failover, as it reads /admin/delete_topics, sends StopReplica with
delete again, which a broker that already deleted the replica answers without error, and
writes the multi), or the multi done (nothing left to do). A partition being removed is never
elected, so the epoch its report names stays current through a failover.
"""
from __future__ import annotations

import logging
from typing import Iterable, Mapping

from odradek.common.metadata import LeaderAndIsr, PartitionOrdering, TopicPartition
from odradek.controller.controller_context import ControllerContext
from odradek.controller.partition_state_machine import PartitionStateMachine
from odradek.controller.replica_state_machine import ReplicaStateMachine
from odradek.controller.request_batch import ControllerBrokerRequestBatch
from odradek.controller.seams import ControllerZk
from odradek.controller.states import PartitionReplica, PartitionStatus, ReplicaStatus
from odradek.zk.paths import PartitionRemovalReport

logger = logging.getLogger(__name__)

_R = ReplicaStatus


def is_marked(ctx: ControllerContext, tp: TopicPartition) -> bool:
    """Whether ``tp`` is past its ordered topic's stored undeleted_partition_count."""
    count = ctx.stored_undeleted_partition_count(tp.topic)
    return ctx.is_ordered(tp.topic) and count is not None and tp.partition >= count


def removable_from_top(partitions: Iterable[int], ready: set[int]) -> list[int]:
    """The partitions of ``ready`` that can go now: the highest partitions of the topic, as
    long as each is ready (no gap may open in the numbering)."""
    out = []
    for p in sorted(partitions, reverse=True):
        if p not in ready:
            break
        out.append(p)
    return sorted(out)


class PartitionRemoval:
    """Removes drained partitions of ordered topics (event thread only)."""

    def __init__(self, ctx: ControllerContext, zk: ControllerZk,
                 partitions: PartitionStateMachine, replicas: ReplicaStateMachine,
                 batch: ControllerBrokerRequestBatch) -> None:
        self._ctx = ctx
        self._zk = zk
        self._partitions = partitions
        self._replicas = replicas
        self._batch = batch
        #: the reports read in the last check, by znode name: the multi removes those of the
        #: partitions it removes
        self._reports: dict[str, PartitionRemovalReport] = {}
        #: (partition, reason) logged last, so a partition waiting for the same thing is not
        #: logged at every event
        self._told: dict[TopicPartition, str] = {}
        #: replicas whose broker answered their deletion with an error: tried again when that
        #: broker starts again (as TopicDeletionManager does), not at every event
        self._errored: set[PartitionReplica] = set()

    def check(self) -> None:
        """Read the reports and move every removal as far as it can go now."""
        ctx = self._ctx
        reports = self._zk.get_partition_removals()
        stale: list[str] = []
        valid: dict[str, PartitionRemovalReport] = {}
        for name, report in sorted(reports.items()):
            if report is None:
                logger.warning("removing the malformed partition removal report %s", name)
                stale.append(name)
            elif (not ctx.partition_replica_assignment(report.tp)
                  or ctx.is_topic_queued_up_for_deletion(report.tp.topic)
                  or not is_marked(ctx, report.tp)):
                logger.info("dropping the removal report of %s: not a partition marked for "
                            "deletion", report.tp)
                stale.append(name)
            else:
                valid[name] = report
        reported = sorted({r.tp for r in valid.values()} - ctx.partitions_being_removed())
        stored = self._zk.get_partition_states(reported) if reported else {}
        for tp, read in stored.items():
            ctx.put_partition_leadership(tp, read)  # (keeps KIP-253's maps a leader dropped)
        drained: set[TopicPartition] = set()
        for name, report in list(valid.items()):
            tp = report.tp
            if ctx.is_partition_being_removed(tp):
                continue
            lai = ctx.partition_leadership(tp) if tp in stored else None
            if lai is None or lai.leader_epoch != report.leader_epoch:
                logger.info("dropping the removal report of %s at leader epoch %d: the "
                            "partition is at epoch %s now", tp, report.leader_epoch,
                            None if lai is None else lai.leader_epoch)
                stale.append(name)
                del valid[name]
            elif lai.ordering is None or not lai.ordering.before_deletion:
                continue  # its marking is not finished yet: the report waits for it
            else:
                drained.add(tp)
        if stale:
            self._zk.delete_partition_removals(stale)
        self._reports = valid
        self._start(drained)
        self._retry()
        self._complete()

    def on_stop_replica_response(self, broker_id: int, partitions: Iterable[TopicPartition],
                                 error_code: int, partition_errors: Mapping[TopicPartition, int]
                                 ) -> None:
        """A StopReplica with delete answered for replicas of partitions being removed."""
        waiting = [pr for tp in partitions
                   if self._ctx.is_partition_being_removed(tp)
                   and self._ctx.replica_state(pr := PartitionReplica(tp, broker_id))
                   is _R.DELETION_STARTED]
        failed = [pr for pr in waiting if error_code != 0 or partition_errors.get(pr.tp, 0) != 0]
        if failed:
            logger.warning("broker %d failed to delete %s (error %d); retried when it starts "
                           "again", broker_id, [str(pr.tp) for pr in failed], error_code)
            self._replicas.handle_state_changes(failed, _R.DELETION_INELIGIBLE)
            self._errored.update(failed)
        self._replicas.handle_state_changes([pr for pr in waiting if pr not in set(failed)],
                                            _R.DELETION_SUCCESSFUL)
        self.check()

    def on_brokers_started(self, broker_ids: Iterable[int]) -> None:
        """Brokers registered (again): their replicas' deletions are tried again."""
        started = set(broker_ids)
        self._errored = {pr for pr in self._errored if pr.replica not in started}
        self.check()

    def on_brokers_failed(self, replicas: Iterable[PartitionReplica]) -> None:
        """Replicas of partitions being removed on brokers that died: ineligible until their
        broker starts again (and never brought online meanwhile)."""
        replicas = list(replicas)
        states = self._ctx.replica_states(replicas)
        self._replicas.handle_state_changes(
            [pr for pr, s in zip(replicas, states) if s in (_R.NEW, _R.ONLINE)], _R.OFFLINE)
        self._replicas.handle_state_changes(
            [pr for pr, s in zip(replicas, states)
             if s in (_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_STARTED)],
            _R.DELETION_INELIGIBLE)

    # -- the steps ----------------------------------------------------------------------------
    def _candidates(self, topic: str, drained: set[TopicPartition]) -> set[int]:
        """Partitions of ``topic`` that may go: being removed, reported drained, or marked and
        never created (nothing was ever written to them)."""
        ctx = self._ctx
        out = set()
        for tp in ctx.partitions_for_topic(topic):
            if ctx.is_being_reassigned(tp):
                continue  # waits for its reassignment to end
            if tp in drained or ctx.is_partition_being_removed(tp) or self._never_created(tp):
                out.add(tp.partition)
        return out

    def _never_created(self, tp: TopicPartition) -> bool:
        """A partition marked for deletion before it ever had a state znode, by a deletion
        this controller applied: it holds nothing and no broker has a replica of it. (Past
        the count the topic had when its count was applied, a partition without a state is
        a growth not yet applied, and is created instead.)"""
        ctx = self._ctx
        applied_total = ctx.applied_partition_total(tp.topic)
        applied = ctx.undeleted_partition_count(tp.topic)
        return (ctx.partition_leadership(tp) is None and is_marked(ctx, tp)
                and applied_total is not None and applied is not None
                and applied <= tp.partition < applied_total)

    def _start(self, drained: set[TopicPartition]) -> None:
        ctx = self._ctx
        topics = {tp.topic for tp in drained} | {
            t for t in ctx.ordered_topics() if not ctx.is_topic_queued_up_for_deletion(t)
            and any(self._never_created(tp) for tp in ctx.partitions_for_topic(t))}
        starting: list[TopicPartition] = []
        for topic in sorted(topics):
            tps = ctx.partitions_for_topic(topic)
            candidates = self._candidates(topic, drained)
            going = set(removable_from_top([tp.partition for tp in tps], candidates))
            for tp in tps:
                if tp.partition in going and not ctx.is_partition_being_removed(tp):
                    starting.append(tp)
                elif tp in drained and tp.partition not in going:
                    above = [q.partition for q in tps if q.partition > tp.partition
                             and q.partition not in candidates]
                    self._tell(tp, f"{tp} is drained; it is removed once partitions {above} "
                                   f"above it are (partition numbers stay without gaps)")
        if not starting:
            return
        logger.info("KIP-253: removing drained partitions %s", [str(tp) for tp in starting])
        ctx.begin_partition_removal(starting)
        # TopicDeletionManager.onTopicDeletion for these partitions: Offline -> NonExistent,
        # every broker told leader -2 (clients stop seeing them), then their replicas deleted
        self._partitions.handle_state_changes(
            [tp for tp in starting if ctx.partition_state(tp) is not PartitionStatus.NON_EXISTENT],
            PartitionStatus.OFFLINE)
        self._partitions.handle_state_changes(starting, PartitionStatus.NON_EXISTENT)
        self._batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids(), starting)

    def _retry(self) -> None:
        """Every replica of a partition being removed that is not deleted nor being deleted:
        on a live broker, OfflineReplica -> ReplicaDeletionStarted (StopReplica with delete);
        on a dead one, ReplicaDeletionIneligible until it starts again."""
        ctx = self._ctx
        replicas = ctx.replicas_for_partitions(sorted(ctx.partitions_being_removed()))
        self._errored &= set(replicas)  # (a topic deleted whole meanwhile took them over)
        states = ctx.replica_states(replicas)
        live = ctx.registered_broker_ids
        todo = [pr for pr, s in zip(replicas, states)
                if s not in (_R.DELETION_STARTED, _R.DELETION_SUCCESSFUL)
                and pr not in self._errored]
        dead = [pr for pr in todo if pr.replica not in live]
        if dead:
            self.on_brokers_failed(dead)
            for pr in dead:
                self._tell(pr.tp, f"{pr.tp} waits for broker {pr.replica} to start again: "
                                  f"its replica must be deleted first")
        alive = [pr for pr in todo if pr.replica in live]
        states = ctx.replica_states(alive)
        self._replicas.handle_state_changes(
            [pr for pr, s in zip(alive, states) if s is not _R.OFFLINE], _R.OFFLINE)
        self._replicas.handle_state_changes(alive, _R.DELETION_STARTED)

    def _complete(self) -> None:
        """Partitions at the top of their topic whose replicas are all deleted: one multi each
        topic, then every broker learns the topic's remaining partitions."""
        ctx = self._ctx
        removing = ctx.partitions_being_removed()
        for topic in sorted({tp.topic for tp in removing}):
            tps = ctx.partitions_for_topic(topic)
            done = {tp.partition for tp in tps if tp in removing
                    and all(s is _R.DELETION_SUCCESSFUL for s in ctx.replica_states(
                        ctx.replicas_for_partitions([tp])))}
            going = removable_from_top([tp.partition for tp in tps], done)
            if not going:
                continue
            gone = [TopicPartition(topic, p) for p in going]
            names = [name for name, r in self._reports.items() if r.tp in set(gone)]
            rewrite = self._unnamed(topic, set(going))
            stored = self._zk.remove_partitions(topic, going, names, rewrite)
            if stored is None:
                continue  # a znode changed: its watch (or ISR notification) brings the next try
            written = {tp: w._replace(zk_version=w.zk_version + 1) for tp, w in rewrite.items()}
            for tp, w in written.items():
                ctx.put_partition_leadership(tp, w)
            # same epoch, new znode version: the leader's next ISR write must name it
            assignment_of = ctx.partition_replica_assignment
            self._batch.add_leader_and_isrs(
                [(assignment_of(tp), tp, w, assignment_of(tp)) for tp, w in sorted(written.items())],
                is_new=False)
            self._replicas.handle_state_changes(ctx.replicas_for_partitions(gone),
                                                _R.NON_EXISTENT)
            ctx.remove_partitions(gone)
            self._errored = {pr for pr in self._errored if pr.tp not in set(gone)}
            for name in names:
                self._reports.pop(name, None)
            for tp in gone:
                self._told.pop(tp, None)
            total = len(ctx.partitions_for_topic(topic))
            count = stored.undeleted_partition_count
            ctx.set_undeleted_partition_count(topic, count)
            ctx.set_removed_leader_epochs(topic, stored.removed_leader_epochs)
            ctx.set_applied_partition_count(topic, count if count is not None else total, total)
            logger.info("KIP-253: partitions %s of %s removed; it has %d partitions%s", going,
                        topic, total, " (deletion complete)" if count == total else "")
            self._batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids(),
                                            ctx.partitions_for_topic(topic))

    def _unnamed(self, topic: str, going: set[int]) -> dict[TopicPartition, LeaderAndIsr]:
        """The topic's other partitions whose KIP-253 maps name partitions about to go (a
        partition created late, after higher ones, names them), with those entries dropped:
        a partition created again under a removed number starts above its epochs, and an entry
        naming the old one would name another partition's epochs. Read now, so the write
        is conditional on the stored version."""
        ctx = self._ctx
        naming = [tp for tp in ctx.partitions_for_topic(topic) if tp.partition not in going
                  and not ctx.is_partition_being_removed(tp)  # (goes next: told nothing more)
                  and (lai := ctx.partition_leadership(tp)) is not None and lai.ordering is not None
                  and any(q in going for q, _ in lai.ordering.after_creation
                          + lai.ordering.before_deletion)]
        if not naming:
            return {}
        for tp, read in self._zk.get_partition_states(naming).items():
            ctx.put_partition_leadership(tp, read)
        out = {}
        for tp in naming:
            lai = ctx.partition_leadership(tp)
            if lai is None or lai.ordering is None:
                continue
            out[tp] = lai._replace(ordering=PartitionOrdering(
                tuple(e for e in lai.ordering.after_creation if e[0] not in going),
                tuple(e for e in lai.ordering.before_deletion if e[0] not in going)))
        return out

    def _tell(self, tp: TopicPartition, why: str) -> None:
        if self._told.get(tp) != why:
            self._told[tp] = why
            logger.info("KIP-253: %s", why)
