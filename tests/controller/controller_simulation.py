"""A deterministic simulation of the controller core (TigerBeetle's simulator in miniature).

A World is one reproducible schedule of random steps, drawn from its seed, on the in-memory
seams: brokers die and come back (or bounce before the controller notices), controllers fail
over (and the deposed one keeps acting), leaders shrink and expand their ISRs, brokers shut down
cleanly, admins ask for elections, create topics, delete them (and create them again under the
same name), add partitions and reassign them. Simulated brokers apply the controller's requests
as real ones do (fenced by controller and broker epoch, newer leader epochs only). World.check
asserts, after a step, the properties that make failover safe (test_simulation.py lists them);
other tests drive a World by hand (topic deletion, partition reassignment).
"""
from __future__ import annotations

import dataclasses
import io
import random
from collections import Counter
from typing import Any, Callable

from controller_fakes import FakeChannel, FakeZk

from odradek.common.metadata import LeaderAndIsr, PartitionState, TopicPartition
from odradek.controller.controller import Controller
from odradek.controller.controller_context import ENABLE_ORDERED_DELIVERY, UNCLEAN_LEADER_ELECTION
from odradek.controller.events import (
    AlterPartitionReassignments,
    BrokerChange,
    ControlledShutdown,
    ControllerEvent,
    ElectionType,
    IsrChangeNotification,
    PartitionModifications,
    PartitionReassignment,
    PartitionRemovalReports,
    ReplicaLeaderElection,
    Startup,
    TopicChange,
    TopicDeletion,
)
from odradek.controller.seams import ControllerMovedError
from odradek.controller.state_change_log import StateChangeLog
from odradek.protocol.controller_api import (
    ControllerResponse,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)

BROKERS = (1, 2, 3, 4)
TOPICS = {"a": (6, 3), "b": (4, 2), "c": (3, 1), "d": (3, 2)}  # name: (partitions, RF)
UNCLEAN_TOPICS = {"d"}  # unclean.leader.election.enable=true
UNCLEAN_ASKED = "unclean leader election asked for"
#: KIP-253: the ordered topic of a World(ordered=True): (partitions, RF); it grows to at most
#: ORDERED_MAX partitions
ORDERED_TOPIC = "o"
ORDERED = (3, 2)
ORDERED_MAX = 12


class FencedZk:
    """One controller's view of the shared ZooKeeper: its writes fail with ControllerMovedError
    once a newer controller was elected, as the /controller_epoch version check makes them."""

    _WRITES = ("create_partition_states", "update_leader_and_isr", "start_update_leader_and_isr",
               "delete_preferred_replica_election", "pop_isr_change_notifications",
               "delete_topic_deletions", "delete_topics", "backfill_topic_znodes",
               "set_partition_reassignments", "set_replica_assignments",
               "set_undeleted_partition_counts", "delete_partition_removals",
               "remove_partitions")

    def __init__(self, zk: FakeZk, epoch: int, current_epoch: Callable[[], int],
                 before_write: Callable[[int], None] = lambda epoch: None) -> None:
        """``before_write(epoch)`` runs before each write: the world may depose the
        controller right there (a newer one is elected while it works)."""
        self._zk = zk
        self._epoch = epoch
        self._current_epoch = current_epoch
        self._before_write = before_write

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._zk, name)
        if name not in self._WRITES:
            return attr

        def fenced(*args: Any, **kwargs: Any) -> Any:
            self._before_write(self._epoch)
            if self._epoch != self._current_epoch():
                raise ControllerMovedError(f"epoch {self._epoch} is not the current one")
            return attr(*args, **kwargs)

        return fenced


class SimBroker:
    """What a broker keeps of the controller's requests: the newest role per partition."""

    def __init__(self, broker_id: int, epoch: int) -> None:
        self.id = broker_id
        self.epoch = epoch
        self.controller_epoch = 0
        self.roles: dict[TopicPartition, PartitionState] = {}
        #: partitions whose replica this incarnation deleted (StopReplica with delete)
        self.deleted: set[TopicPartition] = set()
        #: KIP-253: the undeleted_partition_count per ordered topic, as requests told it
        self.counts: dict[str, int] = {}

    def deliver(self, request: Any) -> bool:
        """Apply a request as replica_manager does; False if it was fenced off."""
        if request.controller_epoch < self.controller_epoch or request.broker_epoch != self.epoch:
            return False
        self.controller_epoch = request.controller_epoch
        if isinstance(request, StopReplicaRequest) and request.delete_partitions:
            for tp in request.partitions:
                self.roles.pop(tp, None)
                self.deleted.add(tp)
        if isinstance(request, (LeaderAndIsrRequest, UpdateMetadataRequest)):
            self.counts.update((t, c) for t, c, _ in request.partition_counts)
        if isinstance(request, LeaderAndIsrRequest):
            for state in request.partition_states:
                current = self.roles.get(state.tp)
                if self.id in state.replicas and (
                        current is None
                        or (state.leader_epoch, state.zk_version)
                        > (current.leader_epoch, current.zk_version)):
                    self.roles[state.tp] = state
        return True


class World:
    """Four brokers, three topics, one shared ZooKeeper and every controller ever elected: the
    newest is the active one, older ones are zombies (paused, partitioned away) that may
    still act in a "deposed" step."""

    def __init__(self, seed: int, brokers: tuple[int, ...] = BROKERS,
                 topics: dict[str, tuple[int, int]] = TOPICS, ordered: bool = False) -> None:
        """``ordered``: also an ordered topic (KIP-253), and steps that grow it and mark its
        partitions for deletion with the controller deposed before one of its writes."""
        self.rng = random.Random(seed)
        self.zk = FakeZk()
        self.brokers = brokers
        self.next_broker_epoch = 100
        self.live: dict[int, SimBroker] = {}
        for broker_id in brokers:
            self._register(broker_id)
        for topic, (count, rf) in topics.items():
            self.zk.create_topic(topic, {p: tuple(brokers[(p + i) % len(brokers)]
                                                  for i in range(rf)) for p in range(count)},
                                 {UNCLEAN_LEADER_ELECTION: "true"} if topic in UNCLEAN_TOPICS
                                 else None)
        self.ordered = ordered
        if ordered:
            count, rf = ORDERED
            self.zk.create_topic(ORDERED_TOPIC, {p: tuple(brokers[(p + i) % len(brokers)]
                                                          for i in range(rf))
                                                 for p in range(count)},
                                 {ENABLE_ORDERED_DELIVERY: "true"})
        self.assignment = {TopicPartition(t, p): replicas for t, a in self.zk.topics.items()
                           for p, replicas in a.partitions.items()}
        #: KIP-253 bookkeeping: the step in which each state znode appeared, the step in which
        #: each partition was marked for deletion, and the writes before which the active
        #: controller is deposed (None: never)
        self.step_number = 0
        self.born: dict[TopicPartition, int] = {}
        self.marked_at: dict[TopicPartition, int] = {}
        self.depose_before: int | None = None
        self.deposed_mid_event = 0
        #: KIP-253 removal: (partition, leader epoch) of every removal report filed, and the
        #: (partition, broker) replicas deleted by a StopReplica with delete since the
        #: partition last appeared
        self.reports_filed: set[tuple[TopicPartition, int]] = set()
        self.replica_deleted: set[tuple[TopicPartition, int]] = set()
        self.removed = 0
        #: the last leader epoch of each removed partition that had a state znode: one created
        #: again under its number must start above it (clients ignore lower epochs: KIP-320)
        self.removed_epochs: dict[TopicPartition, int] = {}
        self.recreated = 0
        self.epoch = 0
        self.controllers: list[tuple[Controller, FakeChannel, int]] = []  # newest last
        #: events each controller put on its own queue (StopReplica answers), by index
        self.queued: list[list[ControllerEvent]] = []
        self.fenced_requests = 0
        self.created = 0
        self.done: Counter[str] = Counter()  # steps taken, by kind
        #: the ISRs leaders wrote during the current step: a new leader may come from them (a
        #: reassignment completes on the ISR change that brings its new replicas in)
        self.leader_written: dict[TopicPartition, LeaderAndIsr] = {}

    # -- the world's moves -----------------------------------------------------------------
    def _register(self, broker_id: int) -> None:
        self.next_broker_epoch += 1
        self.zk.register_broker(broker_id, self.next_broker_epoch)
        self.live[broker_id] = SimBroker(broker_id, self.next_broker_epoch)

    def elect(self) -> None:
        """A live broker wins the controller election with the next epoch."""
        self.epoch += 1
        broker_id = self.rng.choice(sorted(self.live))
        channel = FakeChannel()
        queue: list[ControllerEvent] = []
        controller = Controller(broker_id, FencedZk(self.zk, self.epoch, lambda: self.epoch,
                                                    self._before_write),
                                channel, StateChangeLog(io.StringIO()), enqueue=queue.append)
        self.controllers.append((controller, channel, self.epoch))
        self.queued.append(queue)
        self.process(Startup(epoch=self.epoch, epoch_zk_version=self.epoch))

    def _before_write(self, epoch: int) -> None:
        """Deposes the active controller before its next ``depose_before``-th write: the
        epoch moves on (a newer controller won), so the write and every later one fail."""
        if self.depose_before is None or epoch != self.epoch:
            return
        if self.depose_before == 0:
            self.depose_before = None
            self.epoch += 1
            self.deposed_mid_event += 1
        else:
            self.depose_before -= 1

    def process_deposed_at(self, event: ControllerEvent, writes: int | None) -> bool:
        """``event`` with the active controller deposed before its ``writes``-th ZooKeeper
        write (None: not at all); a deposed controller's successor is then elected and must
        finish the work from what ZooKeeper holds. Returns whether it was deposed."""
        self.depose_before = writes
        epoch = self.epoch
        self.process(event)
        self.depose_before = None
        if self.epoch != epoch:
            self.elect()
            return True
        return False

    @property
    def active(self) -> Controller:
        return self.controllers[-1][0]

    def process(self, event: ControllerEvent, controller_index: int = -1) -> None:
        """The event, then the events its requests' answers put on that controller's queue
        (a broker that died meanwhile answers nothing), until the queue is empty."""
        controller, channel, _ = self.controllers[controller_index]
        queue = self.queued[controller_index]
        queue.append(event)
        while queue:
            controller.process(queue.pop(0))
            sent, channel.sent[:] = list(channel.sent), []
            answers, channel.callbacks[:] = list(channel.callbacks), []
            for broker_id, request in sent:
                broker = self.live.get(broker_id)
                if broker is not None and not broker.deliver(request):
                    self.fenced_requests += 1
                elif (broker is not None and isinstance(request, StopReplicaRequest)
                      and request.delete_partitions):
                    self.replica_deleted.update((tp, broker_id) for tp in request.partitions)
            for broker_id, request, callback in answers:
                broker = self.live.get(broker_id)
                if (isinstance(request, StopReplicaRequest) and broker is not None
                        and broker.epoch == request.broker_epoch):
                    fenced = request.controller_epoch < broker.controller_epoch
                    callback(ControllerResponse(11 if fenced else 0, {} if fenced else {
                        tp: 0 for tp in request.partitions}))

    def kill(self, broker_id: int) -> None:
        self.zk.kill_broker(broker_id)
        del self.live[broker_id]
        if self.active.broker_id == broker_id:
            self.elect()  # its /controller znode went with its session
        else:
            self.process(BrokerChange())

    def restart(self, broker_id: int) -> None:
        self._register(broker_id)
        self.process(BrokerChange())

    def heal(self) -> None:
        """Liveness: once every broker is back, every deletion asked for has completed."""
        for broker_id in [b for b in self.brokers if b not in self.live]:
            self.restart(broker_id)
        # a topic being reassigned is deleted once its reassignments end
        self.complete_reassignments()
        self.check_deletions("every broker back")
        assert not self.zk.deletions, f"deletions {sorted(self.zk.deletions)} never completed"
        if self.ordered:
            self.drain_everything()

    def leader_changes_isr(self, tp: TopicPartition, isr: tuple[int, ...]) -> None:
        """The partition's leader writes a new ISR and notifies the controller."""
        self.zk.leader_isr_write(tp, isr)
        self.leader_written[tp] = self.zk.states[tp]
        self.zk.isr_notifications.add(tp)
        self.process(IsrChangeNotification())

    # -- one random step ---------------------------------------------------------------------
    def step(self) -> str:
        """One random move that the current state allows; returns what it did."""
        kind, what = self._step()
        self.done[kind] += 1
        self.note_births()
        # reassignments change assignments: the topic znodes are the truth (RS = ORS + TRS
        # while one is in progress)
        for topic, stored in self.zk.topics.items():
            for partition, replicas in stored.partitions.items():
                self.assignment[TopicPartition(topic, partition)] = replicas
        return what

    def note_births(self) -> None:
        self.step_number += 1
        for tp in self.zk.states:
            self.born.setdefault(tp, self.step_number)
        for tp in [tp for tp in self.born if tp not in self.zk.states]:
            del self.born[tp]  # its topic was deleted

    # -- KIP-253 steps on the ordered topic ---------------------------------------------------
    def ordered_expand(self, added: int, depose_before: int | None) -> str:
        """CreatePartitions on the ordered topic (it keeps undeleted_partition_count as it
        was), then the controller's event, maybe deposed before one of its writes."""
        old = self.zk.topics[ORDERED_TOPIC]
        count = len(old.partitions)
        rf = len(old.partitions[0])
        new = {p: tuple(self.rng.sample(BROKERS, rf)) for p in range(count, count + added)}
        self.zk.topics[ORDERED_TOPIC] = dataclasses.replace(
            old, partitions={**old.partitions, **new})
        self.assignment.update({TopicPartition(ORDERED_TOPIC, p): r for p, r in new.items()})
        deposed = self.process_deposed_at(PartitionModifications(ORDERED_TOPIC), depose_before)
        return (f"create ordered partitions {sorted(new)} of {ORDERED_TOPIC}"
                + (f" (controller deposed before write {depose_before})" if deposed else ""))

    def ordered_mark(self, count: int, depose_before: int | None) -> str:
        """An admin lowers undeleted_partition_count (the CLI's write), then the controller's
        event, maybe deposed before one of its writes."""
        old = self.zk.topics[ORDERED_TOPIC]
        self.zk.topics[ORDERED_TOPIC] = dataclasses.replace(old, undeleted_partition_count=count)
        for p in old.partitions:
            if p >= count:
                self.marked_at.setdefault(TopicPartition(ORDERED_TOPIC, p), self.step_number + 1)
        deposed = self.process_deposed_at(PartitionModifications(ORDERED_TOPIC), depose_before)
        return (f"mark partitions of {ORDERED_TOPIC} from {count} for deletion"
                + (f" (controller deposed before write {depose_before})" if deposed else ""))

    def marked_with_state(self) -> list[TopicPartition]:
        """Partitions of the ordered topic marked for deletion that have a state znode."""
        stored = self.zk.topics.get(ORDERED_TOPIC)
        if stored is None or stored.undeleted_partition_count is None:
            return []
        return sorted(tp for tp in self.zk.states if tp.topic == ORDERED_TOPIC
                      and tp.partition >= stored.undeleted_partition_count)

    def ordered_drain(self, tp: TopicPartition, stale: bool, depose_before: int | None) -> str:
        """The partition's leader finds it empty and files a removal report (with an older
        leader epoch when ``stale``: the controller must drop it), then the controller's event,
        maybe deposed before one of its writes."""
        epoch = self.zk.states[tp].leader_epoch - (1 if stale else 0)
        self.zk.report_removal(tp, epoch)
        self.reports_filed.add((tp, epoch))
        deposed = self.process_deposed_at(PartitionRemovalReports(), depose_before)
        return (f"{tp} reported drained at leader epoch {epoch}"
                + (f" (controller deposed before write {depose_before})" if deposed else ""))

    def drain_everything(self) -> None:
        """Liveness, once every broker is back: every marked partition reported drained by its
        current leader epoch is removed, down to undeleted_partition_count, and no report is
        left behind."""
        for topic, stored in self.zk.topics.items():  # (healing completed reassignments)
            for partition, replicas in stored.partitions.items():
                self.assignment[TopicPartition(topic, partition)] = replicas
        for _ in range(ORDERED_MAX):
            marked = self.marked_with_state()
            if not marked:
                break
            for tp in marked:
                self.zk.report_removal(tp, self.zk.states[tp].leader_epoch)
                self.reports_filed.add((tp, self.zk.states[tp].leader_epoch))
            before = dict(self.zk.states)
            self.process(PartitionRemovalReports())
            self.check_removals(before, "every marked partition reported drained")
            self.check_ordered("every marked partition reported drained")
        stored = self.zk.topics[ORDERED_TOPIC]
        count = stored.undeleted_partition_count
        assert count is None or len(stored.partitions) == count, \
            f"{ORDERED_TOPIC} still has partitions {sorted(stored.partitions)} past count {count}"
        assert not self.zk.removal_reports, f"reports left: {self.zk.removal_reports}"

    def _ordered_step(self) -> tuple[str, str]:
        rng = self.rng
        marked = self.marked_with_state()
        if marked and rng.random() < 0.5:
            # usually the highest (removable at once), sometimes a lower one (waits)
            tp = marked[-1] if rng.random() < 0.6 else rng.choice(marked)
            return "ordered_drain", self.ordered_drain(
                tp, rng.random() < 0.15, rng.randint(0, 3) if rng.random() < 0.6 else None)
        stored = self.zk.topics[ORDERED_TOPIC]
        total = len(stored.partitions)
        initial = stored.initial_partition_count or total
        undeleted = stored.undeleted_partition_count
        marking = undeleted is not None and undeleted < total
        depose = rng.randint(0, 4) if rng.random() < 0.6 else None
        if rng.random() < 0.5 and not marking and total < ORDERED_MAX:
            # (the CLI refuses an expansion while a deletion drains)
            return "ordered_expand", self.ordered_expand(rng.randint(1, 3), depose)
        current = undeleted if undeleted is not None else total
        if current > initial:
            return "ordered_mark", self.ordered_mark(rng.randint(initial, current - 1), depose)
        if initial > 1 and rng.random() < 0.2:
            # a count below initial_partition_count is refused and changes nothing
            before = {tp: lai for tp, lai in self.zk.states.items() if tp.topic == ORDERED_TOPIC}
            self.zk.topics[ORDERED_TOPIC] = dataclasses.replace(
                stored, undeleted_partition_count=initial - 1)
            self.process(PartitionModifications(ORDERED_TOPIC))
            after = {tp: lai for tp, lai in self.zk.states.items() if tp.topic == ORDERED_TOPIC}
            assert after == before, "a count below initial_partition_count was applied"
            self.zk.topics[ORDERED_TOPIC] = stored  # the admin puts it back
            self.process(PartitionModifications(ORDERED_TOPIC))
            return "ordered_refused", "undeleted_partition_count below the initial one refused"
        return "nothing", "nothing"

    def _step(self) -> tuple[str, str]:
        rng = self.rng
        dead = [b for b in self.brokers if b not in self.live]
        led = [tp for tp, lai in sorted(self.zk.states.items()) if lai.leader in self.live]
        choice = rng.choice(["kill", "kill", "restart", "restart", "shrink", "expand",
                             "controlled_shutdown", "resign", "preferred", "unclean", "deposed",
                             "race", "create", "bounce", "delete", "add_partitions",
                             "reassign", "reassign"] + (["ordered"] * 4 if self.ordered else []))
        if choice == "ordered":
            return self._ordered_step()
        if choice == "kill" and len(self.live) > 1:
            victim = rng.choice(sorted(self.live))
            self.kill(victim)
            return choice, f"kill {victim}"
        if choice == "restart" and dead:
            broker_id = rng.choice(dead)
            self.restart(broker_id)
            return choice, f"restart {broker_id}"
        if choice == "shrink":
            shrinkable = [tp for tp in led if len(self.zk.states[tp].isr) > 1]
            if shrinkable:
                tp = rng.choice(shrinkable)
                lai = self.zk.states[tp]
                out = rng.choice([r for r in lai.isr if r != lai.leader])
                self.leader_changes_isr(tp, tuple(r for r in lai.isr if r != out))
                return choice, f"{tp} leader drops {out} from its ISR"
        if choice == "expand":
            expandable = [(tp, r) for tp in led for r in self.assignment[tp]
                          if r in self.live and r not in self.zk.states[tp].isr]
            if expandable:
                tp, joiner = rng.choice(expandable)
                self.leader_changes_isr(tp, (*self.zk.states[tp].isr, joiner))
                return choice, f"{tp} leader adds {joiner} to its ISR"
        if choice == "controlled_shutdown" and len(self.live) > 1:
            broker_id = rng.choice(sorted(self.live))
            answers: list[object] = []
            self.process(ControlledShutdown(broker_id, self.live[broker_id].epoch,
                                            answers.append))
            assert len(answers) == 1, "a controlled shutdown is answered exactly once"
            self.kill(broker_id)
            return choice, f"controlled shutdown of {broker_id}"
        if choice == "resign":
            self.elect()  # /controller deleted: every broker races, one wins
            return choice, f"controller failover to {self.active.broker_id}"
        if choice == "preferred":
            answers = []
            self.process(ReplicaLeaderElection(frozenset(self.assignment), ElectionType.PREFERRED,
                                               callback=answers.append))
            assert len(answers) == 1, "an election request is answered exactly once"
            return choice, "preferred leader election"
        if choice == "bounce" and len(self.live) > 1:
            # a broker dies and registers again before the controller looks: same id, new
            # broker epoch, its in-memory state gone
            broker_id = rng.choice([b for b in sorted(self.live) if b != self.active.broker_id])
            self.zk.kill_broker(broker_id)
            self._register(broker_id)
            self.process(BrokerChange())
            return choice, f"restart {broker_id} (bounced before the controller saw it go)"
        if choice == "delete":
            # a created topic, or "c" (RF 1: its only replica may be on a dead broker)
            candidates = [t for t in sorted(self.zk.topics)
                          if (t.startswith("new") or t == "c") and t not in self.zk.deletions]
            if candidates:
                topic = rng.choice(candidates)
                self.zk.deletions.add(topic)
                self.process(TopicDeletion())
                return choice, f"delete {topic}"
        if choice == "reassign":
            return self._reassign()
        if choice == "add_partitions":
            # (CreatePartitions refuses a topic with a reassignment in progress)
            grown = [t for t in sorted(self.zk.topics) if t.startswith("new")
                     and t not in self.zk.deletions and not self.zk.topics[t].adding_replicas
                     and not self.zk.topics[t].removing_replicas]
            if grown:
                topic = rng.choice(grown)
                old = self.zk.topics[topic]
                count = len(old.partitions)
                added = {p: tuple(rng.sample(BROKERS, len(old.partitions[0])))
                         for p in range(count, count + rng.randint(1, 2))}
                self.zk.topics[topic] = dataclasses.replace(
                    old, partitions={**old.partitions, **added})
                self.assignment.update({TopicPartition(topic, p): r for p, r in added.items()})
                self.process(PartitionModifications(topic))
                return choice, f"create partitions {added} of {topic}"
        if choice == "create" and len(self.zk.topics) < len(TOPICS) + 3:
            # a new topic, maybe with replicas on dead brokers (its partitions with no live
            # replica stay New until one comes back); names are reused once their topic is
            # deleted, so a topic is also created again under its old name
            free = [f"new{n}" for n in range(self.created) if f"new{n}" not in self.zk.topics]
            topic = rng.choice(free) if free and rng.random() < 0.5 else f"new{self.created}"
            if topic == f"new{self.created}":
                self.created += 1
            self.forget(topic)
            rf = rng.randint(1, 3)
            partitions = {p: tuple(rng.sample(BROKERS, rf)) for p in range(rng.randint(1, 4))}
            self.zk.create_topic(topic, partitions)
            self.assignment.update({TopicPartition(topic, p): r for p, r in partitions.items()})
            self.process(TopicChange())
            return choice, f"create {topic} {partitions}"
        if choice == "unclean":
            answers = []
            self.process(ReplicaLeaderElection(frozenset(self.assignment), ElectionType.UNCLEAN,
                                               callback=answers.append))
            assert len(answers) == 1, "an election request is answered exactly once"
            return choice, UNCLEAN_ASKED
        if choice == "race" and len(self.live) > 1 and led:
            # leaders rewrite some ISRs just before the controller's next writes of them, so
            # those fail on the znode version and the controller must re-read and retry
            for tp in rng.sample(led, min(3, len(led))):
                self.zk.leader_races[tp] = 1
            victim = rng.choice(sorted(self.live))
            self.kill(victim)
            return choice, f"kill {victim} while leaders race the controller's writes"
        if choice == "deposed" and len(self.controllers) > 1:
            index = rng.randrange(len(self.controllers) - 1)
            before = dict(self.zk.states)
            fenced_before = self.fenced_requests
            self.process(BrokerChange(), controller_index=index)
            assert self.zk.states == before, "a deposed controller changed ZooKeeper"
            assert self.fenced_requests >= fenced_before
            return choice, f"deposed controller of epoch {self.controllers[index][2]} acts"
        return "nothing", "nothing"

    def _reassign(self) -> tuple[str, str]:
        """An admin moves a partition to random live brokers (sometimes another replication
        factor), through the API or /admin/reassign_partitions, or cancels a move."""
        rng = self.rng
        # (a partition marked for deletion before it was created never gets a leader, so a
        # move of it could not complete until its removal, which is not built yet)
        candidates = [tp for tp in sorted(self.assignment)
                      if tp.topic in self.zk.topics and tp.topic not in self.zk.deletions
                      and not self.marked_uncreated(tp)]
        if not candidates:
            return "nothing", "nothing"
        tp = rng.choice(candidates)
        stored = self.zk.topics[tp.topic]
        moving = tp.partition in stored.adding_replicas or tp.partition in stored.removing_replicas
        if moving and rng.random() < 0.3:
            target = None
        else:
            target = tuple(rng.sample(sorted(self.live), min(rng.randint(1, 3), len(self.live))))
        if target is not None and rng.random() < 0.3:
            self.zk.reassignments = {**(self.zk.reassignments or {}), tp: target}
            self.process(PartitionReassignment())
            return "reassign", f"reassign {tp} to {list(target)} through /admin/reassign_partitions"
        answers: list[object] = []
        self.process(AlterPartitionReassignments({tp: target}, answers.append))
        assert len(answers) == 1, "a reassignment request is answered exactly once"
        return "reassign", f"reassign {tp} to {target and list(target)}: {answers[0]}"

    def complete_reassignments(self) -> None:
        """Liveness: with every broker back and the leaders adding every caught-up replica to
        their ISRs, every reassignment completes and leaves nothing in ZooKeeper."""
        for _ in range(5):
            moving = [TopicPartition(t, p) for t, a in sorted(self.zk.topics.items())
                      for p in sorted(set(a.adding_replicas) | set(a.removing_replicas))]
            if not moving:
                break
            for tp in moving:
                lai = self.zk.states.get(tp)
                replicas = self.zk.topics[tp.topic].partitions[tp.partition]
                if lai is not None and lai.leader in self.live and set(lai.isr) != set(replicas):
                    self.leader_changes_isr(tp, tuple(replicas))
        stuck = {t: (a.adding_replicas, a.removing_replicas) for t, a in self.zk.topics.items()
                 if a.adding_replicas or a.removing_replicas}
        assert not stuck, f"reassignments never completed: {stuck}"
        assert not self.zk.reassignments, f"/admin/reassign_partitions left: {self.zk.reassignments}"
        for tp in self.active.context.all_partitions():
            assert not self.active.context.is_being_reassigned(tp), f"{tp} still reassigned"

    def forget(self, topic: str) -> None:
        """A deleted topic's partitions leave the expected assignment (and a re-created one
        starts from nothing): live brokers' records of its deletion are old news."""
        for tp in [tp for tp in self.assignment if tp.topic == topic]:
            del self.assignment[tp]
        self.removed_epochs = {tp: e for tp, e in self.removed_epochs.items() if tp.topic != topic}
        for broker in self.live.values():
            broker.deleted = {tp for tp in broker.deleted if tp.topic != topic}

    # -- the properties ----------------------------------------------------------------------
    def marked_uncreated(self, tp: TopicPartition) -> bool:
        """A partition of the ordered topic marked for deletion before it was ever created:
        KIP-253 never creates it (nothing can have been written to it)."""
        stored = self.zk.topics.get(tp.topic)
        return (self.ordered and tp.topic == ORDERED_TOPIC and stored is not None
                and stored.undeleted_partition_count is not None
                and tp.partition >= stored.undeleted_partition_count and tp not in self.zk.states)

    def check_ordered(self, action: str) -> None:
        """KIP-253's invariants on the ordered topic:
        - undeleted_partition_count is never below initial_partition_count, and the
          controller never writes one that is;
        - a partition at or past initial_partition_count with a state znode has
          leader_epoch_after_creation naming every partition whose state znode appeared in an
          earlier step, each with an epoch strictly lower than that partition's current one;
        - a partition marked for deletion has leader_epoch_before_deletion naming every
          undeleted partition whose state znode appeared before the marking, likewise;
        - live brokers hosting the topic were told the topic's count."""
        stored = self.zk.topics.get(ORDERED_TOPIC)
        if stored is None:
            return
        where = f"after '{action}'"
        initial = stored.initial_partition_count
        assert initial is not None, f"no initial_partition_count {where}"
        undeleted = stored.undeleted_partition_count
        assert undeleted is None or undeleted >= initial, f"count {undeleted} < {initial} {where}"
        for written in self.zk.calls_named("set_undeleted_partition_counts"):
            for topic, count in written.items():  # type: ignore[attr-defined]
                assert count >= (self.zk.topics[topic].initial_partition_count or 0), \
                    f"the controller wrote count {count} for {topic} {where}"
        states = {tp.partition: lai for tp, lai in self.zk.states.items()
                  if tp.topic == ORDERED_TOPIC}

        def check_map(p: int, name: str, recorded: tuple[tuple[int, int], ...],
                      must_name: set[int]) -> None:
            named = dict(recorded)
            assert must_name <= set(named), \
                f"{ORDERED_TOPIC}-{p} {name} {named} misses {sorted(must_name - set(named))} {where}"
            for q, epoch in named.items():
                if q in states:
                    assert epoch < states[q].leader_epoch, \
                        f"{ORDERED_TOPIC}-{p} {name} names {q} at epoch {epoch}, not below " \
                        f"its current {states[q].leader_epoch} {where}"

        count = undeleted if undeleted is not None else len(stored.partitions)
        for p, lai in sorted(states.items()):
            tp = TopicPartition(ORDERED_TOPIC, p)
            born = self.born.get(tp, self.step_number + 1)
            if p >= initial:
                assert lai.ordering is not None and lai.ordering.after_creation, \
                    f"{tp} created without leader_epoch_after_creation {where}: {lai}"
                check_map(p, "leader_epoch_after_creation", lai.ordering.after_creation,
                          {q for q in states if q < p
                           and self.born.get(TopicPartition(ORDERED_TOPIC, q), born) < born})
            if p >= count:
                marked = self.marked_at.get(tp, self.step_number + 1)
                must_name = {q for q in states if q < count
                             and self.born.get(TopicPartition(ORDERED_TOPIC, q), marked) < marked}
                if must_name:  # (no undeleted partition had a state: nothing to record yet)
                    assert lai.ordering is not None and lai.ordering.before_deletion, \
                        f"{tp} marked without leader_epoch_before_deletion {where}: {lai}"
                check_map(p, "leader_epoch_before_deletion",
                          lai.ordering.before_deletion if lai.ordering else (), must_name)
        hosted = {r for tp, replicas in self.assignment.items() if tp.topic == ORDERED_TOPIC
                  for r in replicas}
        for broker in self.live.values():
            if broker.id in hosted and any(tp.topic == ORDERED_TOPIC for tp in broker.roles):
                assert broker.counts.get(ORDERED_TOPIC) == count, \
                    f"broker {broker.id} was told count {broker.counts.get(ORDERED_TOPIC)}, " \
                    f"ZooKeeper has {count} {where}"

    def check_removals(self, before: dict[TopicPartition, LeaderAndIsr], action: str) -> None:
        """KIP-253's removal of drained partitions:
        - a topic's partitions are numbered 0..N-1 without a gap;
        - a removed partition has no state znode, every replica of it was deleted by its
          broker (StopReplica with delete) and no live broker hosts it;
        - a partition with a state znode is removed only if a report with its current leader
          epoch said it was empty;
        - a report of a partition that is gone (or no longer marked) does not outlive the
          event that read it, and the topic never has fewer than undeleted_partition_count;
        - a partition created again under a removed number starts above the removed one's
          last leader epoch."""
        where = f"after '{action}'"
        for topic, stored in self.zk.topics.items():
            assert sorted(stored.partitions) == list(range(len(stored.partitions))), \
                f"{topic} has partitions {sorted(stored.partitions)} {where}"
            count = stored.undeleted_partition_count
            assert count is None or len(stored.partitions) >= count, \
                f"{topic} has {len(stored.partitions)} partitions, fewer than its count {count}"
        removed = sorted(tp for tp in self.assignment if tp.topic in self.zk.topics
                         and tp.partition not in self.zk.topics[tp.topic].partitions)
        for tp in removed:
            assert tp not in self.zk.states, f"removed {tp} kept its state znode {where}"
            for replica in self.assignment[tp]:
                assert (tp, replica) in self.replica_deleted, \
                    f"removed {tp} but broker {replica} never deleted its replica {where}"
            for broker in self.live.values():
                assert tp not in broker.roles, f"broker {broker.id} hosts removed {tp} {where}"
            old = before.get(tp)
            if old is not None:
                assert (tp, old.leader_epoch) in self.reports_filed, \
                    f"{tp} removed at leader epoch {old.leader_epoch} without a report of it"
                self.removed_epochs[tp] = max(old.leader_epoch, self.removed_epochs.get(tp, -1))
            del self.assignment[tp]
            self.born.pop(tp, None)
            self.marked_at.pop(tp, None)
            self.replica_deleted = {(t, r) for t, r in self.replica_deleted if t != tp}
            self.removed += 1
        for tp, lai in self.zk.states.items():
            last = self.removed_epochs.get(tp)
            if last is not None and tp not in before:
                self.recreated += 1
            assert last is None or lai.leader_epoch > last, \
                f"{tp} created again at leader epoch {lai.leader_epoch}, not above the removed " \
                f"partition's {last} {where}"
        for name, report in self.zk.removal_reports.items():
            assert report is not None and report.tp.topic in self.zk.topics \
                and report.tp.partition in self.zk.topics[report.tp.topic].partitions, \
                f"report {name} of {report} outlived its partition {where}"

    def check_deletions(self, action: str) -> None:
        """A topic is gone from ZooKeeper only once every replica was deleted by a live
        broker (a dead one's copy waits for it), and then no live broker hosts it."""
        gone = {tp.topic for tp in self.assignment} - set(self.zk.topics)
        for topic in sorted(gone):
            tps = [tp for tp in self.assignment if tp.topic == topic]
            for broker in self.live.values():
                hosted = [tp for tp in tps if tp in broker.roles]
                assert not hosted, f"broker {broker.id} still hosts {hosted} of deleted {topic} " \
                                   f"after '{action}'"
            assert topic not in self.zk.deletions, f"marker of {topic} outlived it"
            self.forget(topic)
        for topic in sorted(self.zk.deletions):
            assert topic in self.zk.topics, f"{topic} marked but not there after '{action}'"

    def check(self, before: dict[TopicPartition, LeaderAndIsr], action: str) -> None:
        self.check_deletions(action)
        if self.ordered:
            self.check_removals(before, action)
            self.check_ordered(action)
        written, self.leader_written = self.leader_written, {}
        live = set(self.live)
        deleting = self.zk.deletions
        removing = self.active.context.partitions_being_removed()
        for tp, lai in sorted(self.zk.states.items()):
            if tp.topic in deleting or tp in removing:
                continue  # not elected, not told: being deleted (a topic, or drained)
            where = f"{tp} after '{action}': {lai}"
            assert lai.isr and set(lai.isr) <= set(self.assignment[tp]), where
            assert lai.leader == -1 or lai.leader in lai.isr, where
            old = written.get(tp) or before.get(tp)
            if old is not None:
                assert lai.leader_epoch >= old.leader_epoch, where
                if lai.leader != old.leader:
                    assert lai.leader_epoch > old.leader_epoch, where
                    if lai.leader != -1 and lai.leader not in old.isr:
                        # unclean: only where the topic or an admin's request (ElectLeaders
                        # UNCLEAN, KIP-460) allows it, and when no ISR member is live (a
                        # bounced one included: it is back with its log)
                        allowed = tp.topic in UNCLEAN_TOPICS or action == UNCLEAN_ASKED
                        assert allowed and not live & set(old.isr), f"unclean: {where} was {old}"
            if action.startswith(("kill", "restart", "controller", "controlled", "create")):
                if live & set(lai.isr):
                    assert lai.leader in live, f"offline with a live ISR member: {where}"
                # dead replicas leave the ISR, but for the last member (who holds the log)
                assert len(lai.isr) == 1 or set(lai.isr) <= live, f"dead in the ISR: {where}"
            if lai.leader in live:
                for replica in self.assignment[tp]:
                    if replica in live:
                        role = self.live[replica].roles.get(tp)
                        assert role is not None and (role.leader, role.leader_epoch) == (
                            lai.leader, lai.leader_epoch), f"broker {replica} has {role}: {where}"
            cached = self.active.context.partition_leadership(tp)
            assert cached == lai, f"controller caches {cached}: {where}"
        if action.startswith(("kill", "restart", "controller", "controlled", "create")):
            for tp, replicas in sorted(self.assignment.items()):
                if tp.topic in deleting or self.marked_uncreated(tp) or tp in removing:
                    continue
                assert tp in self.zk.states or not live & set(replicas), \
                    f"{tp} (replicas {replicas}) has live replicas but no state after '{action}'"
