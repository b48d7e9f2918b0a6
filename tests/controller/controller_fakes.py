"""Recording fakes for the controller's two seams (ControllerZk, BrokerChannel) and a rig of
the two state machines over them, shared by the controller's tests. No mocks: the fakes keep
real state, so tests assert on outcomes, not call scripts; test_controller_fakes.py checks
that they honour the seams' contract.
"""
from __future__ import annotations

import dataclasses
import io
from typing import Any, Callable, Iterable, Mapping

from odradek.common.metadata import (
    BrokerInfo,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartition,
    raised_leader_epochs,
)
from odradek.controller.controller import Controller
from odradek.controller.seams import ControllerMovedError
from odradek.controller.state_change_log import StateChangeLog
from odradek.protocol.controller_api import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from odradek.zk.paths import PartitionRemovalReport


class NodeExistsError(Exception):
    pass


class NoNodeError(Exception):
    pass


class BadVersionError(Exception):
    pass


class FakePendingWrites:
    """FakeZk's started LeaderAndIsr writes: already applied, their collection recorded."""

    def __init__(self, zk: FakeZk, results: dict[TopicPartition, LeaderAndIsr | Exception]
                 ) -> None:
        self._zk = zk
        self._results = results

    def result(self) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        self._zk.calls.append(("collect_update_leader_and_isr", sorted(self._results)))
        return self._results


class FakeZk:
    """An in-memory ZooKeeper with znode versions, recording every call."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicAssignment] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.states: dict[TopicPartition, LeaderAndIsr] = {}
        self.isr_notifications: set[TopicPartition] = set()
        self.calls: list[tuple[str, object]] = []
        #: tp -> how many upcoming updates a leader's concurrent ISR write will beat.
        self.leader_races: dict[TopicPartition, int] = {}
        self.fenced = False
        #: /admin/preferred_replica_election: None while it does not exist
        self.preferred_election: set[TopicPartition] | None = None
        #: children of /admin/delete_topics
        self.deletions: set[str] = set()
        #: /admin/reassign_partitions: None while it does not exist
        self.reassignments: dict[TopicPartition, tuple[int, ...]] | None = None
        #: whether leader_isr_write loses KIP-253's maps, as today's broker ISR write does
        self.leaders_drop_orderings = False
        #: KIP-253: /admin/ordered_partition_removals children: name -> report (None: malformed)
        self.removal_reports: dict[str, PartitionRemovalReport | None] = {}
        self._next_report = 0

    # -- test setup -------------------------------------------------------------------------
    def register_broker(self, broker_id: int, epoch: int | None = None) -> BrokerInfo:
        info = BrokerInfo(broker_id, f"b{broker_id}", 9092, epoch if epoch is not None
                          else 100 + broker_id)
        self.brokers[broker_id] = info
        return info

    def kill_broker(self, broker_id: int) -> None:
        del self.brokers[broker_id]

    def create_topic(self, name: str, partitions: dict[int, tuple[int, ...]],
                     config: dict[str, str] | None = None) -> None:
        self.topics[name] = TopicAssignment(name, f"id-{name}", dict(partitions), len(partitions))
        if config:
            self.configs[name] = dict(config)

    def report_removal(self, tp: TopicPartition, leader_epoch: int) -> str:
        """What a partition leader does when a partition marked for deletion is empty."""
        name = f"removal-{self._next_report:010d}"
        self._next_report += 1
        self.removal_reports[name] = PartitionRemovalReport(tp, leader_epoch)
        return name

    def calls_named(self, name: str) -> list[object]:
        return [arg for method, arg in self.calls if method == name]

    # -- ControllerZk -----------------------------------------------------------------------
    def get_live_brokers(self) -> dict[int, BrokerInfo]:
        self.calls.append(("get_live_brokers", None))
        return dict(self.brokers)

    def get_all_topics(self) -> set[str]:
        self.calls.append(("get_all_topics", None))
        return set(self.topics)

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        topics = sorted(topics)
        self.calls.append(("get_topic_assignments", topics))
        return {t: self.topics[t] for t in topics if t in self.topics}

    def get_topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        topics = sorted(topics)
        self.calls.append(("get_topic_configs", topics))
        return {t: dict(self.configs.get(t, {})) for t in topics}

    def get_partition_states(self, tps: Iterable[TopicPartition]
                             ) -> dict[TopicPartition, LeaderAndIsr]:
        tps = sorted(tps)
        self.calls.append(("get_partition_states", tps))
        return {tp: self.states[tp] for tp in tps if tp in self.states}

    def create_partition_states(self, states: dict[TopicPartition, LeaderAndIsr]
                                ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        self.calls.append(("create_partition_states", dict(states)))
        if self.fenced:
            raise ControllerMovedError("fenced")
        out: dict[TopicPartition, LeaderAndIsr | Exception] = {}
        for tp, lai in states.items():
            if tp in self.states:
                out[tp] = NodeExistsError(str(tp))
            else:
                self.states[tp] = out[tp] = lai._replace(zk_version=0)
        return out

    def start_update_leader_and_isr(self, states: dict[TopicPartition, LeaderAndIsr]
                                    ) -> FakePendingWrites:
        """Applied at once (recorded as an update_leader_and_isr call); the results wait, and
        their collection is recorded too."""
        return FakePendingWrites(self, self.update_leader_and_isr(states))

    def update_leader_and_isr(self, states: dict[TopicPartition, LeaderAndIsr]
                              ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        self.calls.append(("update_leader_and_isr", dict(states)))
        if self.fenced:
            raise ControllerMovedError("fenced")
        out: dict[TopicPartition, LeaderAndIsr | Exception] = {}
        for tp, lai in states.items():
            if self.leader_races.get(tp, 0) > 0:
                self.leader_races[tp] -= 1
                self.leader_isr_write(tp, self.states[tp].isr)
            stored = self.states.get(tp)
            if stored is None:
                out[tp] = NoNodeError(str(tp))
            elif stored.zk_version != lai.zk_version:
                out[tp] = BadVersionError(f"{tp}: {lai.zk_version} != {stored.zk_version}")
            else:
                self.states[tp] = out[tp] = lai._replace(zk_version=lai.zk_version + 1)
        return out

    def pop_isr_change_notifications(self) -> set[TopicPartition]:
        self.calls.append(("pop_isr_change_notifications", None))
        popped, self.isr_notifications = self.isr_notifications, set()
        return popped

    def get_preferred_replica_election(self) -> set[TopicPartition] | None:
        self.calls.append(("get_preferred_replica_election", None))
        return None if self.preferred_election is None else set(self.preferred_election)

    def delete_preferred_replica_election(self) -> None:
        self.calls.append(("delete_preferred_replica_election", None))
        if self.fenced:
            raise ControllerMovedError("fenced")
        self.preferred_election = None

    def get_topic_deletions(self) -> set[str]:
        self.calls.append(("get_topic_deletions", None))
        return set(self.deletions)

    def delete_topic_deletions(self, topics: Iterable[str]) -> None:
        topics = sorted(topics)
        self.calls.append(("delete_topic_deletions", topics))
        if self.fenced:
            raise ControllerMovedError("fenced")
        self.deletions.difference_update(topics)

    def delete_topics(self, topics: Iterable[str]) -> None:
        """The topic znode, its partition states, its config and its marker, at once."""
        topics = sorted(topics)
        self.calls.append(("delete_topics", topics))
        if self.fenced:
            raise ControllerMovedError("fenced")
        for topic in topics:
            self.topics.pop(topic, None)
            self.configs.pop(topic, None)
            self.deletions.discard(topic)
            for tp in [tp for tp in self.states if tp.topic == topic]:
                del self.states[tp]

    def get_partition_reassignments(self) -> dict[TopicPartition, tuple[int, ...]] | None:
        self.calls.append(("get_partition_reassignments", None))
        return None if self.reassignments is None else dict(self.reassignments)

    def set_partition_reassignments(self, remaining: Mapping[TopicPartition, Iterable[int]]) -> None:
        self.calls.append(("set_partition_reassignments", dict(remaining)))
        if self.fenced:
            raise ControllerMovedError("fenced")
        self.reassignments = {tp: tuple(r) for tp, r in remaining.items()} or None

    def set_replica_assignments(self, changes: Mapping[TopicPartition, ReplicaAssignment]) -> None:
        """Rewrites the topic znodes: the given partitions changed, the others kept."""
        self.calls.append(("set_replica_assignments", dict(changes)))
        if self.fenced:
            raise ControllerMovedError("fenced")
        for topic in {tp.topic for tp in changes}:
            stored = self.topics[topic]
            partitions = dict(stored.partitions)
            adding, removing = dict(stored.adding_replicas), dict(stored.removing_replicas)
            for tp, a in changes.items():
                if tp.topic == topic:
                    partitions[tp.partition] = a.replicas
                    adding[tp.partition], removing[tp.partition] = a.adding, a.removing
            self.topics[topic] = dataclasses.replace(
                stored, partitions=partitions,
                adding_replicas={p: r for p, r in adding.items() if r},
                removing_replicas={p: r for p, r in removing.items() if r})

    def backfill_topic_znodes(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        topics = sorted(topics)
        self.calls.append(("backfill_topic_znodes", topics))
        if self.fenced:
            raise ControllerMovedError("fenced")
        for topic in topics:
            a = self.topics[topic]
            self.topics[topic] = TopicAssignment(
                topic, a.topic_id if a.topic_id != "AAAAAAAAAAAAAAAAAAAAAA" else f"id-{topic}",
                a.partitions, a.initial_partition_count or len(a.partitions))
        return {t: self.topics[t] for t in topics}

    def set_undeleted_partition_counts(self, counts: Mapping[str, int]
                                       ) -> dict[str, TopicAssignment]:
        self.calls.append(("set_undeleted_partition_counts", dict(counts)))
        if self.fenced:
            raise ControllerMovedError("fenced")
        out: dict[str, TopicAssignment] = {}
        for topic, count in counts.items():
            if topic in self.topics:
                self.topics[topic] = out[topic] = dataclasses.replace(
                    self.topics[topic], undeleted_partition_count=count)
        return out

    def get_partition_removals(self) -> dict[str, PartitionRemovalReport | None]:
        self.calls.append(("get_partition_removals", None))
        return dict(self.removal_reports)

    def delete_partition_removals(self, names: Iterable[str]) -> None:
        names = sorted(names)
        self.calls.append(("delete_partition_removals", names))
        if self.fenced:
            raise ControllerMovedError("fenced")
        for name in names:
            self.removal_reports.pop(name, None)

    def remove_partitions(self, topic: str, partitions: Iterable[int], reports: Iterable[str],
                          rewrite: Mapping[TopicPartition, LeaderAndIsr] | None = None
                          ) -> TopicAssignment | None:
        """One multi: the partitions leave the topic znode (their states' leader epochs kept
        in its removed_leader_epochs), their states and the reports go, the states of
        ``rewrite`` are set (all or nothing: a version conflict writes nothing)."""
        removed = sorted(set(partitions))
        reports = sorted(reports)
        rewrite = dict(rewrite or {})
        self.calls.append(("remove_partitions", (topic, removed, reports, rewrite)))
        if self.fenced:
            raise ControllerMovedError("fenced")
        stored = self.topics.get(topic)
        if stored is None or any(tp not in self.states or self.states[tp].zk_version
                                 != lai.zk_version for tp, lai in rewrite.items()):
            return None
        for tp, lai in rewrite.items():
            self.states[tp] = lai._replace(zk_version=lai.zk_version + 1)
        self.topics[topic] = new = dataclasses.replace(
            stored, partitions={p: r for p, r in stored.partitions.items() if p not in removed},
            adding_replicas={p: r for p, r in stored.adding_replicas.items() if p not in removed},
            removing_replicas={p: r for p, r in stored.removing_replicas.items()
                               if p not in removed},
            removed_leader_epochs=raised_leader_epochs(stored.removed_leader_epochs, {
                p: self.states[TopicPartition(topic, p)].leader_epoch for p in removed
                if TopicPartition(topic, p) in self.states}))
        for p in removed:
            self.states.pop(TopicPartition(topic, p), None)
        for name in reports:
            self.removal_reports.pop(name, None)
        return new

    def leader_isr_write(self, tp: TopicPartition, isr: tuple[int, ...]) -> None:
        """What a partition leader does when it shrinks or expands its ISR. With
        ``leaders_drop_orderings`` it writes the state without KIP-253's maps, as today's
        broker does (replica_manager's ISR write does not know them); else it keeps them."""
        stored = self.states[tp]
        self.states[tp] = stored._replace(
            isr=isr, zk_version=stored.zk_version + 1,
            ordering=None if self.leaders_drop_orderings else stored.ordering)


class FakeChannel:
    """Records every request in order, and which brokers it is connected to."""

    def __init__(self) -> None:
        self.brokers: set[int] = set()
        self.sent: list[tuple[int, object]] = []
        #: (broker, request, callback) of every request sent with a callback, in order
        self.callbacks: list[tuple[int, object, Callable[[object], None]]] = []

    def add_broker(self, info: BrokerInfo) -> None:
        self.brokers.add(info.id)

    def remove_broker(self, broker_id: int) -> None:
        self.brokers.discard(broker_id)

    def send(self, broker_id: int, request: object, callback: object = None) -> None:
        assert broker_id in self.brokers, f"send to unconnected broker {broker_id}"
        self.sent.append((broker_id, request))
        if callable(callback):
            self.callbacks.append((broker_id, request, callback))

    def of_type(self, kind: type) -> list[tuple[int, object]]:
        return [(b, r) for b, r in self.sent if isinstance(r, kind)]

    def leader_and_isr(self) -> list[tuple[int, LeaderAndIsrRequest]]:
        return self.of_type(LeaderAndIsrRequest)  # type: ignore[return-value]

    def update_metadata(self) -> list[tuple[int, UpdateMetadataRequest]]:
        return self.of_type(UpdateMetadataRequest)  # type: ignore[return-value]

    def stop_replica(self) -> list[tuple[int, StopReplicaRequest]]:
        return self.of_type(StopReplicaRequest)  # type: ignore[return-value]


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def new_controller(zk: FakeZk, broker_id: int = 1, **options: Any) -> tuple[Controller, FakeChannel, io.StringIO]:
    """``options``: Controller's keyword arguments (the broker configs it is given)."""
    channel = FakeChannel()
    sink = io.StringIO()
    return Controller(broker_id, zk, channel, StateChangeLog(sink), **options), channel, sink


class Rig:
    """The two state machines over a context, batch and the fakes, without a Controller."""

    def __init__(self, brokers: Iterable[int] = (1, 2, 3), epoch: int = 5) -> None:
        from odradek.controller.controller_context import ControllerContext
        from odradek.controller.partition_state_machine import PartitionStateMachine
        from odradek.controller.replica_state_machine import ReplicaStateMachine
        from odradek.controller.request_batch import ControllerBrokerRequestBatch

        self.zk = FakeZk()
        self.channel = FakeChannel()
        self.sink = io.StringIO()
        self.ctx = ControllerContext()
        self.ctx.set_epoch(epoch, 0)
        for b in brokers:
            info = self.zk.register_broker(b)
            self.ctx.add_live_broker(info)
            self.channel.add_broker(info)
        self.batch = ControllerBrokerRequestBatch(0, self.ctx, self.channel)
        log = self.log = StateChangeLog(self.sink)
        self.psm = PartitionStateMachine(0, self.ctx, self.zk, self.batch, log)
        self.rsm = ReplicaStateMachine(0, self.ctx, self.zk, self.batch, log)

    def add_partition(self, p: TopicPartition, replicas: tuple[int, ...],
                      stored: LeaderAndIsr | None = None) -> None:
        """A partition whose assignment (and optionally stored state) is already known."""
        self.ctx.update_partition_replica_assignment(p, replicas)
        if stored is not None:
            self.zk.states[p] = stored
            self.ctx.put_partition_leadership(p, stored)
            self.ctx.start_event()  # known from an earlier event: not fresh

    def send(self) -> None:
        self.batch.send_requests(self.ctx.epoch)

    def log_text(self) -> str:
        """The state-change log so far (the controller flushes it once per event)."""
        self.log.flush()
        return self.sink.getvalue()
