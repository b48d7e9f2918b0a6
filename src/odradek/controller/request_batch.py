"""Collects the requests one controller event produces and sends them once per broker.

A broker failure can move thousands of partitions; sending one request per partition would
multiply round trips by the partition count (the latency analysis of Kafka's controller-based
replication design). So the state machines only *add* to this batch, keyed by broker, and the
controller flushes it once at the end of each event: at most one LeaderAndIsr, one UpdateMetadata
and one StopReplica per broker (two StopReplicas if the event both stops and deletes replicas on
one broker, because the request carries a single delete_partitions flag), in Kafka's order: a
broker must learn its role (LeaderAndIsr) before metadata advertises it, and stop replicas last.
"""
from __future__ import annotations

from typing import Callable, Iterable

from odradek.common.metadata import LeaderAndIsr, PartitionState, TopicPartition, new_tuple
from odradek.controller.controller_context import ControllerContext
from odradek.controller.seams import BrokerChannel
from odradek.controller.timing import EventTimer

#: Kafka's LeaderAndIsr.LeaderDuringDelete: the leader UpdateMetadata gives the partitions of a
#: topic being deleted, so that brokers drop them from their metadata
LEADER_DURING_DELETE = -2
from odradek.protocol.controller_api import (
    ControllerRequest,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)


class IllegalBatchStateError(Exception):
    """A new batch was started while the previous one still held unsent requests: some event
    forgot to flush, and silently merging its decisions into the next event would hide that."""


class ControllerBrokerRequestBatch:
    def __init__(self, controller_id: int, context: ControllerContext,
                 channel: BrokerChannel) -> None:
        self._controller_id = controller_id
        self._context = context
        self._channel = channel
        self._leader_and_isr: dict[int, dict[TopicPartition, PartitionState]] = {}
        self._update_metadata: dict[int, set[TopicPartition]] = {}
        self._stop_replica: dict[int, dict[TopicPartition, bool]] = {}
        #: partitions whose metadata goes to every broker registered when the batch is sent
        self._metadata_for_all: set[TopicPartition] = set()
        #: the last LeaderAndIsr entry built per partition, with the leadership it came from,
        #: reused as the UpdateMetadata entry while that leadership is still current
        self._entries: dict[TopicPartition, tuple[LeaderAndIsr, PartitionState]] = {}
        self._timer: EventTimer | None = None
        #: called with (broker, broker epoch, partitions, response or exception) for every
        #: StopReplica with delete: the controller turns it into an event, as Kafka's
        #: TopicDeletionStopReplicaResponseReceived
        self.on_stop_replica_deleted: (
            Callable[[int, int, tuple[TopicPartition, ...], object], None] | None) = None

    def is_empty(self) -> bool:
        return not (self._leader_and_isr or self._update_metadata or self._stop_replica
                    or self._metadata_for_all)

    def new_batch(self) -> None:
        if not self.is_empty():
            raise IllegalBatchStateError(
                f"controller {self._controller_id} has unsent requests from a previous event: "
                f"LeaderAndIsr to {sorted(self._leader_and_isr)}, UpdateMetadata to "
                f"{sorted(self._update_metadata)}, StopReplica to {sorted(self._stop_replica)}"
            )

    def clear(self) -> None:
        """Drop everything unsent; used on resignation, when sending would be wrong."""
        self._leader_and_isr.clear()
        self._update_metadata.clear()
        self._stop_replica.clear()
        self._metadata_for_all.clear()
        self._entries.clear()

    def add_leader_and_isr(
        self,
        brokers: Iterable[int],
        tp: TopicPartition,
        leader_and_isr: LeaderAndIsr,
        replicas: Iterable[int],
        is_new: bool,
    ) -> None:
        """Tell ``brokers`` their role for ``tp`` (``add_leader_and_isrs`` for one partition)."""
        self.add_leader_and_isrs([(brokers, tp, leader_and_isr, tuple(replicas))], is_new)

    def add_leader_and_isrs(
        self,
        entries: Iterable[tuple[Iterable[int], TopicPartition, LeaderAndIsr, tuple[int, ...]]],
        is_new: bool,
    ) -> None:
        """For each (brokers, partition, leadership, assigned replicas), tell the brokers their
        role; every live broker also gets the partition's metadata, since a leadership change
        is exactly what clients must learn about. One call per state change of thousands of
        partitions: per-partition calls were a sixth of a failover's decision time."""
        all_lai = self._leader_and_isr
        known = self._entries
        registered = self._context.registered_broker_ids
        for_all = self._metadata_for_all
        for brokers, tp, lai, replicas in entries:
            entry = known.get(tp)
            if (not is_new and entry is not None and entry[0] is lai
                    and entry[1].replicas == replicas):
                # The same facts again (a failover re-sends every live replica's state after
                # the elections and ISR shrinks already queued most of them): new receivers
                # only, and receivers queued an older state of the partition earlier in the
                # event (an epoch bump sent to every replica, then an ISR shrink that left this
                # one out while its broker was handled as dead, then its return)
                told = entry[1]
                brokers = [b for b in brokers
                           if (queued := all_lai.get(b, {}).get(tp)) is None
                           or queued.leader_epoch != told.leader_epoch
                           or queued.zk_version != told.zk_version]
                if not brokers:
                    continue
            # One immutable entry shared by every receiver; a receiver already told in this
            # batch that the replica is new keeps hearing so.
            state = new_tuple(PartitionState, (
                tp, lai.controller_epoch, lai.leader, lai.leader_epoch, lai.isr, lai.zk_version,
                replicas, is_new, tuple([r for r in replicas if r not in registered])))
            stored = False
            for broker in brokers:
                if broker < 0:
                    continue
                per_broker = all_lai.get(broker)
                if per_broker is None:
                    per_broker = all_lai[broker] = {}
                previous = per_broker.get(tp)
                per_broker[tp] = (state._replace(is_new=True)
                                  if previous is not None and previous.is_new and not is_new
                                  else state)
                stored = True
            if stored:
                known[tp] = (lai, state)
            for_all.add(tp)

    def add_update_metadata(self, brokers: Iterable[int], tps: Iterable[TopicPartition]) -> None:
        """Brokers added with no partitions still get an UpdateMetadata: it carries the live
        broker list, which is how brokers learn that another broker came or went."""
        tps = list(tps)
        for broker in brokers:
            self._update_metadata.setdefault(broker, set()).update(tps)

    def add_stop_replicas(self, replicas: Iterable[tuple[TopicPartition, int]],
                          delete: bool) -> None:
        """Stop each (partition, broker) replica; deletion wins if one event both stops and
        deletes a replica. One call for all: a broker failure stops thousands.

        A stop without delete for a broker that is not registered now is dropped, as Kafka's
        channel manager drops requests to a broker it removed: it was meant for the
        incarnation that died. A bounced broker is failed over and started in one event whose
        requests go out together, LeaderAndIsr before StopReplica, so the dead incarnation's
        stop would reach the new one after it was told to follow, and it would never fetch."""
        all_stop = self._stop_replica
        registered = self._broker_epoch
        for tp, broker in replicas:
            if not delete and registered(broker) is None:
                continue
            per_broker = all_stop.get(broker)
            if per_broker is None:
                per_broker = all_stop[broker] = {}
            if delete:
                per_broker[tp] = True
            else:
                per_broker.setdefault(tp, False)

    def send_requests(self, controller_epoch: int, timer: EventTimer | None = None) -> None:
        """Flush in Kafka's order to the brokers still registered, then start empty.

        With ``timer``, every request is counted in flight there and its response stamped."""
        self._timer = timer
        try:
            self._send_leader_and_isr(controller_epoch)
            self._send_update_metadata(controller_epoch)
            self._send_stop_replica(controller_epoch)
        finally:
            self._timer = None
            self.clear()

    def _send(self, broker: int, request: ControllerRequest, is_lai: bool = False, partitions: int = 0,
              then: Callable[[object], None] | None = None) -> None:
        timer = self._timer
        tracked = None if timer is None else timer.track(is_lai, partitions)
        if then is None:
            callback = tracked
        else:
            def callback(result: object) -> None:
                if tracked is not None:
                    tracked(result)
                then(result)
        if callback is None:
            self._channel.send(broker, request)
        else:
            self._channel.send(broker, request, callback)

    def _broker_epoch(self, broker: int) -> int | None:
        """None for a broker that is gone: it will be told everything on re-registration."""
        return self._context.broker_epoch(broker)

    def _partition_counts(self, states: tuple[PartitionState, ...], ordered: frozenset[str]
                          ) -> tuple[tuple[str, int, int], ...]:
        """KIP-253: the undeleted_partition_count and initial_partition_count of each ordered
        topic ``states`` names (an ordered topic's znode always has the initial count; were it
        missing, the undeleted count stands in, which is right until the first change)."""
        if not ordered:
            return ()
        count_of = self._context.undeleted_partition_count
        initial_of = self._context.initial_partition_count
        return tuple(sorted((t, c, initial_of(t) or c) for t in {ps.tp.topic for ps in states} & ordered
                            if (c := count_of(t)) is not None))

    def _send_leader_and_isr(self, controller_epoch: int) -> None:
        previous: tuple[PartitionState, ...] = ()
        ordered = self._context.ordered_topics()
        for broker in sorted(self._leader_and_isr):
            broker_epoch = self._broker_epoch(broker)
            if broker_epoch is None:
                continue
            states = self._leader_and_isr[broker]
            leader_ids = {s.leader for s in states.values()}
            leaders = tuple(b for b in self._context.live_or_shutting_down_brokers()
                            if b.id in leader_ids)
            partition_states = tuple([states[tp] for tp in sorted(states)])
            if partition_states == previous:
                # Brokers with the same entries (every broker of a failover where each holds a
                # replica of every partition) share one tuple, which the encoder encodes once.
                partition_states = previous
            previous = partition_states
            request = LeaderAndIsrRequest(
                controller_id=self._controller_id,
                controller_epoch=controller_epoch,
                broker_epoch=broker_epoch,
                partition_states=partition_states,
                live_leaders=leaders,
                partition_counts=self._partition_counts(partition_states, ordered),
            )
            self._send(broker, request, True, len(states))

    def _metadata_states(self, tps: list[TopicPartition],
                         built: dict[TopicPartition, PartitionState | None]
                         ) -> tuple[PartitionState, ...]:
        """The UpdateMetadata entries of ``tps`` that have a leadership, built at send time so
        the latest decision of the event is what gets advertised; ``built`` keeps them for the
        other receivers. One loop, no call per partition: a failover advertises all of them."""
        leadership_of = self._context.partition_leadership
        assignment_of = self._context.partition_replica_assignment
        entries = self._entries
        registered = self._context.registered_broker_ids
        deleting = self._context.topics_queued_for_deletion()
        removing = self._context.partitions_being_removed()  # KIP-253: drained partitions
        out = []
        for tp in tps:
            if tp in built:
                state = built[tp]
            else:
                lai = leadership_of(tp)
                if lai is None:
                    state = None
                elif tp.topic in deleting or tp in removing:
                    replicas = assignment_of(tp)
                    state = new_tuple(PartitionState, (
                        tp, lai.controller_epoch, LEADER_DURING_DELETE, lai.leader_epoch, lai.isr,
                        lai.zk_version, replicas, False,
                        tuple([r for r in replicas if r not in registered])))
                else:
                    replicas = assignment_of(tp)
                    entry = entries.get(tp)
                    if entry is not None and entry[0] is lai and entry[1].replicas == replicas:
                        state = entry[1]  # the same facts; is_new is not part of UpdateMetadata
                    else:
                        state = new_tuple(PartitionState, (
                            tp, lai.controller_epoch, lai.leader, lai.leader_epoch, lai.isr,
                            lai.zk_version, replicas, False,
                            tuple([r for r in replicas if r not in registered])))
                built[tp] = state
            if state is not None:
                out.append(state)
        return tuple(out)

    def _send_update_metadata(self, controller_epoch: int) -> None:
        live = self._context.live_or_shutting_down_brokers()
        built: dict[TopicPartition, PartitionState | None] = {}  # shared by all receivers
        if self._metadata_for_all:
            for broker in self._context.live_or_shutting_down_broker_ids():
                self._update_metadata.setdefault(broker, set()).update(self._metadata_for_all)
        # Brokers told the same partitions share one tuple, which the encoder then encodes once.
        by_partitions: dict[frozenset[TopicPartition], tuple[PartitionState, ...]] = {}
        ordered = self._context.ordered_topics()
        counts_of: dict[frozenset[TopicPartition], tuple[tuple[str, int, int], ...]] = {}
        for broker in sorted(self._update_metadata):
            broker_epoch = self._broker_epoch(broker)
            if broker_epoch is None:
                continue
            tps = frozenset(self._update_metadata[broker])
            states = by_partitions.get(tps)
            if states is None:
                states = by_partitions[tps] = self._metadata_states(sorted(tps), built)
                if ordered:  # KIP-253: computed once per set of partitions too
                    counts_of[tps] = self._partition_counts(states, ordered)
            request = UpdateMetadataRequest(
                controller_id=self._controller_id,
                controller_epoch=controller_epoch,
                broker_epoch=broker_epoch,
                partition_states=states,
                live_brokers=live,
                partition_counts=counts_of.get(tps, ()),
            )
            self._send(broker, request)

    def _send_stop_replica(self, controller_epoch: int) -> None:
        for broker in sorted(self._stop_replica):
            broker_epoch = self._broker_epoch(broker)
            if broker_epoch is None:
                continue
            entries = self._stop_replica[broker]
            for delete in (True, False):
                tps = tuple(sorted(tp for tp, d in entries.items() if d == delete))
                if tps:
                    self._send(broker, StopReplicaRequest(
                        controller_id=self._controller_id,
                        controller_epoch=controller_epoch,
                        broker_epoch=broker_epoch,
                        delete_partitions=delete,
                        partitions=tps,
                    ), then=self._deleted_callback(broker, broker_epoch, tps) if delete else None)

    def _deleted_callback(self, broker: int, broker_epoch: int, tps: tuple[TopicPartition, ...]
                          ) -> Callable[[object], None] | None:
        hook = self.on_stop_replica_deleted
        if hook is None:
            return None
        return lambda result: hook(broker, broker_epoch, tps, result)
