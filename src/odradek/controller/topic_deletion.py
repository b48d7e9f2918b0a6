"""Kafka's TopicDeletionManager (kafka/controller/TopicDeletionManager.scala, 2.4-3.x).

1. DeleteTopics (or Kafka's TopicCommand) creates /admin/delete_topics/<topic>; the controller
   watches its children (``TopicDeletion``) and queues the topics.
2. A queued topic is deleted on the controller's event thread: its partitions go
   OfflinePartition -> NonExistentPartition and UpdateMetadata gives them leader -2 (brokers drop
   them from their metadata); every replica on a live broker goes OfflineReplica (StopReplica)
   -> ReplicaDeletionStarted (StopReplica with delete, one request per broker per event); a
   replica on a dead broker goes straight to ReplicaDeletionIneligible and halts the topic.
3. Each StopReplica response (``TopicDeletionStopReplicaResponseReceived``) moves the replicas
   it names to ReplicaDeletionSuccessful, or ReplicaDeletionIneligible on an error.
4. Once every replica of a topic is ReplicaDeletionSuccessful, the replicas go
   NonExistentReplica and the topic's znodes (/brokers/topics/T, /config/topics/T and the marker
   last) are removed, with those of every topic completed in the same event (one batched
   ``delete_topics``); only then does the topic disappear.
5. A halted topic resumes when a broker holding one of its replicas starts
   (``resume_deletion_for_topics``), and a new controller reads /admin/delete_topics at failover
   (``init``) and resumes whatever was pending, halting topics with replicas on dead brokers.

With delete.topic.enable=false the manager only removes the markers (Kafka's behaviour).

It sees the controller through the narrow ``DeletionClient`` (Kafka's four-method trait), so it
can be driven alone; the state machines and the context are the controller's own.
"""
from __future__ import annotations

import logging
from typing import Iterable, Mapping, Protocol

from odradek.common.metadata import TopicPartition
from odradek.controller.controller_context import ControllerContext
from odradek.controller.partition_state_machine import PartitionStateMachine
from odradek.controller.replica_state_machine import ReplicaStateMachine
from odradek.controller.states import PartitionReplica, PartitionStatus, ReplicaStatus

logger = logging.getLogger(__name__)

_R = ReplicaStatus


class DeletionClient(Protocol):
    """What the manager asks of the controller (Kafka's DeletionClient)."""

    def delete_topics(self, topics: Iterable[str]) -> None:
        """Remove the topics' znodes and their deletion markers (fenced), all in one go."""

    def delete_topic_deletions(self, topics: Iterable[str]) -> None:
        """Remove deletion markers only (fenced)."""

    def send_metadata_update(self, partitions: Iterable[TopicPartition]) -> None:
        """Queue an UpdateMetadata of ``partitions`` to every registered broker."""


class TopicDeletionManager:
    def __init__(self, ctx: ControllerContext, replicas: ReplicaStateMachine,
                 partitions: PartitionStateMachine, client: DeletionClient,
                 delete_topic_enable: bool = True) -> None:
        self._ctx = ctx
        self._replicas = replicas
        self._partitions = partitions
        self._client = client
        self.enabled = delete_topic_enable

    # -- entry points -------------------------------------------------------------------------
    def init(self, to_be_deleted: Iterable[str], ineligible: Iterable[str]) -> None:
        """At controller failover: queue the pending deletions, those with replicas on dead
        brokers halted; with deletion disabled, remove the markers instead."""
        to_be_deleted = set(to_be_deleted)
        if not to_be_deleted:
            return
        if self.enabled:
            self._ctx.queue_topic_deletion(to_be_deleted)
            self._ctx.mark_topics_ineligible_for_deletion(set(ineligible) & to_be_deleted)
            logger.info("pending topic deletions %s (halted: %s)", sorted(to_be_deleted),
                        sorted(set(ineligible) & to_be_deleted))
        else:
            logger.info("removing the deletion markers of %s: delete.topic.enable is false",
                        sorted(to_be_deleted))
            self._client.delete_topic_deletions(to_be_deleted)

    def try_topic_deletion(self) -> None:
        if self.enabled:
            self._resume_deletions()

    def enqueue_topics_for_deletion(self, topics: Iterable[str]) -> None:
        if self.enabled:
            self._ctx.queue_topic_deletion(topics)
            self._resume_deletions()

    def resume_deletion_for_topics(self, topics: Iterable[str]) -> None:
        """A broker holding replicas of these topics started: their deletion may go on."""
        if not self.enabled:
            return
        resumed = set(topics) & self._ctx.topics_queued_for_deletion()
        if resumed:
            self._ctx.mark_topics_eligible_for_deletion(resumed)
            self._resume_deletions()

    def fail_replica_deletion(self, replicas: Iterable[PartitionReplica]) -> None:
        """Replicas whose broker died or answered an error: ReplicaDeletionIneligible, and
        their topics halted until one of those brokers starts again."""
        if not self.enabled:
            return
        failed = [pr for pr in replicas if self._ctx.is_topic_queued_up_for_deletion(pr.tp.topic)]
        if not failed:
            return
        self._to_ineligible(failed)
        self.mark_topics_ineligible({pr.tp.topic for pr in failed}, "replica deletion failure")
        self._resume_deletions()

    def mark_topics_ineligible(self, topics: Iterable[str], reason: str) -> None:
        if self.enabled:
            halted = self._ctx.mark_topics_ineligible_for_deletion(topics)
            if halted:
                logger.info("halted the deletion of topics %s: %s", sorted(halted), reason)

    def complete_replica_deletion(self, replicas: Iterable[PartitionReplica]) -> None:
        done = [pr for pr in replicas if self._ctx.is_topic_queued_up_for_deletion(pr.tp.topic)]
        self._replicas.handle_state_changes(done, _R.DELETION_SUCCESSFUL)
        self._resume_deletions()

    def on_stop_replica_response(self, broker_id: int, partitions: Iterable[TopicPartition],
                                 error_code: int, partition_errors: Mapping[TopicPartition, int]
                                 ) -> None:
        """KafkaController.processTopicDeletionStopReplicaResponseReceived, for the replicas
        still waiting for this answer (ReplicaDeletionStarted)."""
        waiting = [pr for tp in partitions
                   if self._ctx.replica_state(pr := PartitionReplica(tp, broker_id))
                   is _R.DELETION_STARTED]
        if not waiting:
            return
        failed = [pr for pr in waiting
                  if error_code != 0 or partition_errors.get(pr.tp, 0) != 0]
        if failed:
            logger.warning("broker %d failed to delete %s (error %d)", broker_id,
                           [str(pr.tp) for pr in failed], error_code)
            self.fail_replica_deletion(failed)
        failed_set = set(failed)
        succeeded = [pr for pr in waiting if pr not in failed_set]
        if succeeded:
            self.complete_replica_deletion(succeeded)

    # -- the manager's own steps ----------------------------------------------------------------
    def _resume_deletions(self) -> None:
        """TopicDeletionManager.resumeDeletions: complete topics whose replicas are all
        deleted, retry halted ones whose replicas are no longer being asked, start eligible ones."""
        ctx = self._ctx
        retry: set[str] = set()
        start: set[str] = set()
        completed: list[str] = []
        for topic in sorted(ctx.topics_queued_for_deletion()):
            states = ctx.replica_states(ctx.replicas_for_topic(topic))
            if all(s is _R.DELETION_SUCCESSFUL for s in states):
                completed.append(topic)
                continue
            in_progress = any(s is _R.DELETION_STARTED for s in states)
            if not in_progress and any(s is _R.DELETION_INELIGIBLE for s in states):
                retry.add(topic)
            if not in_progress and not ctx.is_topic_ineligible_for_deletion(topic):
                start.add(topic)
        if completed:
            self._complete_delete_topics(completed)
            logger.info("deletion of topics %s completed", completed)
        if retry:
            # back to OfflineReplica, from where the deletion can start again
            ineligible = [pr for topic in sorted(retry) for pr in ctx.replicas_for_topic(topic)
                          if ctx.replica_state(pr) is _R.DELETION_INELIGIBLE]
            self._replicas.handle_state_changes(ineligible, _R.OFFLINE)
        if start:
            logger.info("deletion of topics %s (re)started", sorted(start))
            self._on_topic_deletion(start)

    def _to_ineligible(self, replicas: list[PartitionReplica]) -> None:
        """ReplicaDeletionIneligible, through OfflineReplica for a replica that was still New
        or Online (a topic halted before its deletion started, whose broker then died)."""
        states = self._ctx.replica_states(replicas)
        self._replicas.handle_state_changes(
            [pr for pr, s in zip(replicas, states) if s in (_R.NEW, _R.ONLINE)], _R.OFFLINE)
        self._replicas.handle_state_changes(
            [pr for pr, s in zip(replicas, states) if s is not _R.DELETION_INELIGIBLE],
            _R.DELETION_INELIGIBLE)

    def _complete_delete_topics(self, topics: list[str]) -> None:
        """TopicDeletionManager.completeDeleteTopic for every topic done in this event at
        once: one state change of their replicas and one (batched) removal of their znodes."""
        ctx = self._ctx
        replicas = [pr for topic in topics for pr in ctx.replicas_for_topic(topic)
                    if ctx.replica_state(pr) is _R.DELETION_SUCCESSFUL]
        self._replicas.handle_state_changes(replicas, _R.NON_EXISTENT)
        self._client.delete_topics(topics)
        for topic in topics:
            ctx.remove_topic(topic)

    def _on_topic_deletion(self, topics: set[str]) -> None:
        """TopicDeletionManager.onTopicDeletion: partitions of topics seen for the first time
        go Offline -> NonExistent, every broker learns they are being deleted, then their
        replicas are deleted."""
        ctx = self._ctx
        unseen = sorted(t for t in topics if not ctx.is_topic_deletion_started(t))
        if unseen:
            tps = [tp for t in unseen for tp in ctx.partitions_for_topic(t)
                   if ctx.partition_state(tp) is not PartitionStatus.NON_EXISTENT]
            self._partitions.handle_state_changes(tps, PartitionStatus.OFFLINE)
            self._partitions.handle_state_changes(tps, PartitionStatus.NON_EXISTENT)
            ctx.begin_topic_deletion(unseen)
        self._client.send_metadata_update([tp for t in sorted(topics)
                                           for tp in ctx.partitions_for_topic(t)])
        self._on_partition_deletion(topics)

    def _on_partition_deletion(self, topics: set[str]) -> None:
        """TopicDeletionManager.onPartitionDeletion: dead replicas -> Ineligible (halting their
        topic); live ones not yet deleted -> Offline (StopReplica, no fetching from the leader)
        -> ReplicaDeletionStarted (StopReplica with delete). Both StopReplicas of a broker merge
        into one with delete in the event's batch."""
        ctx = self._ctx
        dead: list[PartitionReplica] = []
        retry: list[PartitionReplica] = []
        halted: set[str] = set()
        for topic in sorted(topics):
            for pr in ctx.replicas_for_topic(topic):
                if not ctx.is_replica_online(pr.replica, pr.tp, include_shutting_down=True):
                    dead.append(pr)
                    halted.add(topic)
                elif ctx.replica_state(pr) is not _R.DELETION_SUCCESSFUL:
                    retry.append(pr)
        self._to_ineligible(dead)
        self._replicas.handle_state_changes(retry, _R.OFFLINE)
        self._replicas.handle_state_changes(retry, _R.DELETION_STARTED)
        if halted:
            self.mark_topics_ineligible(halted, "replicas on dead brokers")
