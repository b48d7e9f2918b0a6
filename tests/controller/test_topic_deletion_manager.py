"""Topic deletion (TopicDeletionManager) and partition expansion driven through the simulation's
world: real controller core, in-memory ZooKeeper, simulated brokers answering StopReplica."""
from __future__ import annotations

from controller_simulation import World

from odradek.common.metadata import TopicAssignment, TopicPartition
from odradek.controller.events import PartitionModifications, TopicChange, TopicDeletion
from odradek.controller.replica_state_machine import PartitionReplica, ReplicaStatus
from odradek.protocol.controller_api import StopReplicaRequest, UpdateMetadataRequest


def _world() -> World:
    world = World(seed=7)
    world.elect()
    world.zk.create_topic("gone", {0: (1, 2), 1: (2, 3)})
    world.assignment.update({TopicPartition("gone", 0): (1, 2), TopicPartition("gone", 1): (2, 3)})
    world.process(TopicChange())
    return world


def test_deletion_with_a_dead_broker_waits_through_a_controller_failover_and_completes() -> None:
    world = _world()
    assert all(world.live[b].roles.get(TopicPartition("gone", 0)) for b in (1, 2))
    controller_broker = world.active.broker_id
    victim = next(b for b in (3, 2, 1) if b != controller_broker)
    world.kill(victim)
    world.zk.deletions.add("gone")
    world.process(TopicDeletion())
    # halted: the dead broker's replica cannot be deleted, so the topic and its marker stay
    assert "gone" in world.zk.topics and world.zk.deletions == {"gone"}
    ctx = world.active.context
    dead = [pr for pr in ctx.replicas_for_topic("gone") if pr.replica == victim]
    # (Ineligible, then back to Offline for a retry once no replica is being deleted: Kafka's
    # retryDeletionForIneligibleReplicas) and the topic halted
    assert dead and all(ctx.replica_state(pr) in (ReplicaStatus.DELETION_INELIGIBLE, ReplicaStatus.OFFLINE)
                        for pr in dead)
    assert ctx.is_topic_ineligible_for_deletion("gone")
    # every live replica was deleted (one StopReplica with delete per broker) and is told so
    for broker in set(world.live) & {1, 2, 3} - {victim}:
        hosted = [tp for tp in world.live[broker].roles if tp.topic == "gone"]
        assert not hosted, f"broker {broker} still hosts {hosted}"
    world.check_deletions("delete with a dead broker")
    # the controller fails over to another live broker: the new one reads the marker, halts
    # the topic again (a replica is on a dead broker) and deletes nothing more
    world.elect()
    assert "gone" in world.zk.topics and world.zk.deletions == {"gone"}
    assert world.active.context.is_topic_queued_up_for_deletion("gone")
    # the broker returns: its replica is deleted and the deletion completes
    world.restart(victim)
    assert TopicPartition("gone", 1) in world.live[victim].deleted or \
        TopicPartition("gone", 0) in world.live[victim].deleted
    assert "gone" not in world.zk.topics and not world.zk.deletions
    assert not any(tp.topic == "gone" for tp in world.zk.states)
    assert "gone" not in world.active.context.all_topics()
    world.check_deletions("broker back")


def test_deletion_sends_one_stop_replica_with_delete_per_broker_and_leader_minus_two() -> None:
    world = _world()
    world.zk.create_topic("gone2", {0: (1, 2), 1: (1, 2), 2: (2, 3)})
    world.process(TopicChange())
    channel = world.controllers[-1][1]
    seen: list[tuple[int, object]] = []
    original = channel.send

    def recording(broker_id: int, request: object, callback: object = None) -> None:
        seen.append((broker_id, request))
        original(broker_id, request, callback)

    channel.send = recording  # type: ignore[method-assign]
    world.zk.deletions.update({"gone", "gone2"})
    world.process(TopicDeletion())
    stops = [(b, r) for b, r in seen if isinstance(r, StopReplicaRequest)]
    # the StopReplica of OfflineReplica and the one of ReplicaDeletionStarted merge: one per
    # broker, with delete, naming both topics' replicas on it
    assert sorted(b for b, _ in stops) == [1, 2, 3]
    assert all(r.delete_partitions for _, r in stops)
    assert {tp.topic for _, r in stops for tp in r.partitions} == {"gone", "gone2"}
    told = [s for _, r in seen if isinstance(r, UpdateMetadataRequest)
            for s in r.partition_states if s.tp.topic.startswith("gone")]
    assert told and all(s.leader == -2 for s in told)  # LeaderDuringDelete
    assert "gone" not in world.zk.topics and "gone2" not in world.zk.topics
    # both topics completed in the same event: their znodes go in one batched removal
    assert [c for c in world.zk.calls if c[0] == "delete_topics"] == \
        [("delete_topics", ["gone", "gone2"])]


def test_delete_topic_disabled_removes_the_marker_and_keeps_the_topic() -> None:
    import io

    from controller_fakes import FakeChannel, FakeZk

    from odradek.controller.controller import Controller
    from odradek.controller.events import Startup
    from odradek.controller.state_change_log import StateChangeLog
    zk = FakeZk()
    for b in (1, 2):
        zk.register_broker(b)
    zk.create_topic("t", {0: (1, 2)})
    zk.deletions.add("t")
    controller = Controller(1, zk, FakeChannel(), StateChangeLog(io.StringIO()),
                            delete_topic_enable=False)
    controller.process(Startup(1, 1))
    assert "t" in zk.topics and not zk.deletions  # removed at failover
    zk.deletions.add("t")
    controller.process(TopicDeletion())
    assert "t" in zk.topics and not zk.deletions
    zk.deletions.add("unknown")
    controller = Controller(1, zk, FakeChannel(), StateChangeLog(io.StringIO()))
    controller.process(Startup(2, 2))
    controller.process(TopicDeletion())
    assert not zk.deletions  # the marker of a topic that does not exist goes


def test_new_partitions_of_an_existing_topic_are_created_alone() -> None:
    world = _world()
    before = {tp: lai for tp, lai in world.zk.states.items() if tp.topic == "gone"}
    old = world.zk.topics["gone"]
    world.zk.topics["gone"] = TopicAssignment("gone", old.topic_id, {**old.partitions, 2: (3, 1)},
                                              old.initial_partition_count)
    world.assignment[TopicPartition("gone", 2)] = (3, 1)
    world.process(PartitionModifications("gone"))
    new = world.zk.states[TopicPartition("gone", 2)]
    assert new.leader == 3 and new.leader_epoch == 0
    assert {tp: lai for tp, lai in world.zk.states.items() if tp in before} == before
    assert world.live[1].roles[TopicPartition("gone", 2)].leader == 3
    assert world.zk.topics["gone"].initial_partition_count == 2
    ctx = world.active.context
    assert ctx.replica_state(PartitionReplica(TopicPartition("gone", 2), 1)) is ReplicaStatus.ONLINE
    world.check({}, "create partitions")


def test_failover_backfills_initial_partition_count_and_topic_id() -> None:
    world = World(seed=3)
    world.zk.topics["old"] = TopicAssignment("old", "AAAAAAAAAAAAAAAAAAAAAA", {0: (1,), 1: (2,)})
    world.assignment.update({TopicPartition("old", 0): (1,), TopicPartition("old", 1): (2,)})
    world.elect()
    stored = world.zk.topics["old"]
    assert stored.initial_partition_count == 2 and stored.topic_id == "id-old"
    assert world.active.context.topic_id("old") == "id-old"
