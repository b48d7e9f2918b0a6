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
from odradek.controller.controller_context import UNCLEAN_LEADER_ELECTION
from odradek.controller.events import (
    AlterPartitionReassignments,
    BrokerChange,
    ControlledShutdown,
    ControllerEvent,
    ElectionType,
    IsrChangeNotification,
    PartitionModifications,
    PartitionReassignment,
    ReplicaLeaderElection,
    Startup,
    TopicChange,
    TopicDeletion,
)
from odradek.controller.seams import ControllerMovedError
from odradek.controller.state_change_log import StateChangeLog
from odradek.protocol.controller_api import ControllerResponse, LeaderAndIsrRequest, StopReplicaRequest

BROKERS = (1, 2, 3, 4)
TOPICS = {"a": (6, 3), "b": (4, 2), "c": (3, 1), "d": (3, 2)}  # name: (partitions, RF)
UNCLEAN_TOPICS = {"d"}  # unclean.leader.election.enable=true
UNCLEAN_ASKED = "unclean leader election asked for"


class FencedZk:
    """One controller's view of the shared ZooKeeper: its writes fail with ControllerMovedError
    once a newer controller was elected, as the /controller_epoch version check makes them."""

    _WRITES = ("create_partition_states", "update_leader_and_isr", "start_update_leader_and_isr",
               "delete_preferred_replica_election", "pop_isr_change_notifications",
               "delete_topic_deletions", "delete_topics", "backfill_topic_znodes",
               "set_partition_reassignments", "set_replica_assignments")

    def __init__(self, zk: FakeZk, epoch: int, current_epoch: Callable[[], int]) -> None:
        self._zk = zk
        self._epoch = epoch
        self._current_epoch = current_epoch

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._zk, name)
        if name not in self._WRITES:
            return attr

        def fenced(*args: Any, **kwargs: Any) -> Any:
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

    def deliver(self, request: Any) -> bool:
        """Apply a request as replica_manager does; False if it was fenced off."""
        if request.controller_epoch < self.controller_epoch or request.broker_epoch != self.epoch:
            return False
        self.controller_epoch = request.controller_epoch
        if isinstance(request, StopReplicaRequest) and request.delete_partitions:
            for tp in request.partitions:
                self.roles.pop(tp, None)
                self.deleted.add(tp)
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
                 topics: dict[str, tuple[int, int]] = TOPICS) -> None:
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
        self.assignment = {TopicPartition(t, p): replicas for t, a in self.zk.topics.items()
                           for p, replicas in a.partitions.items()}
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
        controller = Controller(broker_id, FencedZk(self.zk, self.epoch, lambda: self.epoch),
                                channel, StateChangeLog(io.StringIO()), enqueue=queue.append)
        self.controllers.append((controller, channel, self.epoch))
        self.queued.append(queue)
        self.process(Startup(epoch=self.epoch, epoch_zk_version=self.epoch))

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
        # reassignments change assignments: the topic znodes are the truth (RS = ORS + TRS
        # while one is in progress)
        for topic, stored in self.zk.topics.items():
            for partition, replicas in stored.partitions.items():
                self.assignment[TopicPartition(topic, partition)] = replicas
        return what

    def _step(self) -> tuple[str, str]:
        rng = self.rng
        dead = [b for b in self.brokers if b not in self.live]
        led = [tp for tp, lai in sorted(self.zk.states.items()) if lai.leader in self.live]
        choice = rng.choice(["kill", "kill", "restart", "restart", "shrink", "expand",
                             "controlled_shutdown", "resign", "preferred", "unclean", "deposed",
                             "race", "create", "bounce", "delete", "add_partitions",
                             "reassign", "reassign"])
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
        candidates = [tp for tp in sorted(self.assignment)
                      if tp.topic in self.zk.topics and tp.topic not in self.zk.deletions]
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
        for broker in self.live.values():
            broker.deleted = {tp for tp in broker.deleted if tp.topic != topic}

    # -- the properties ----------------------------------------------------------------------
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
        written, self.leader_written = self.leader_written, {}
        live = set(self.live)
        deleting = self.zk.deletions
        for tp, lai in sorted(self.zk.states.items()):
            if tp.topic in deleting:
                continue  # not elected, not told: being deleted
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
                if tp.topic in deleting:
                    continue
                assert tp in self.zk.states or not live & set(replicas), \
                    f"{tp} (replicas {replicas}) has live replicas but no state after '{action}'"
