"""KafkaController's operations end to end over the recording fakes."""
from __future__ import annotations

from collections import Counter

from controller_fakes import FakeZk, new_controller, tp

from odradek.common.metadata import LeaderAndIsr
from odradek.controller.events import (
    BrokerChange,
    ControlledShutdown,
    IsrChangeNotification,
    NotControllerError,
    Resign,
    Startup,
    TopicChange,
)
from odradek.controller.partition_state_machine import PartitionStatus
from odradek.controller.replica_state_machine import PartitionReplica, ReplicaStatus
from odradek.protocol.controller_api import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)

P, R = PartitionStatus, ReplicaStatus


def cluster(brokers=(1, 2, 3)) -> FakeZk:
    zk = FakeZk()
    for b in brokers:
        zk.register_broker(b)
    return zk


def t0_led_by_1_on_controller_3():
    """t-0 on brokers (1, 2), led by 1; broker 3 is the active controller."""
    zk = cluster()
    zk.create_topic("t", {0: (1, 2)})
    zk.states[tp("t", 0)] = LeaderAndIsr(1, 0, (1, 2), 1, 0)
    controller, channel, _ = new_controller(zk, broker_id=3)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    return zk, controller, channel


def test_on_new_topic_creation_batches_requests_per_broker() -> None:
    zk = cluster()
    controller, channel, _ = new_controller(zk)
    controller.process(Startup(epoch=1, epoch_zk_version=0))
    channel.sent.clear()
    zk.calls.clear()
    zk.create_topic("big", {p: ((1, 2, 3)[p % 3], (1, 2, 3)[(p + 1) % 3]) for p in range(100)})
    controller.process(TopicChange())

    assert len(zk.calls_named("create_partition_states")) == 1
    assert len(zk.calls_named("create_partition_states")[0]) == 100  # type: ignore[arg-type]
    per_broker = Counter((b, type(r).__name__) for b, r in channel.sent)
    assert per_broker == {(b, kind): 1 for b in (1, 2, 3)
                          for kind in ("LeaderAndIsrRequest", "UpdateMetadataRequest")}
    kinds = [type(r) for _, r in channel.sent]
    assert kinds == [LeaderAndIsrRequest] * 3 + [UpdateMetadataRequest] * 3
    for broker, request in channel.leader_and_isr():
        assert request.broker_epoch == 100 + broker
        assert all(s.is_new and broker in s.replicas for s in request.partition_states)
    for _, request in channel.update_metadata():
        assert len(request.partition_states) == 100
    ctx = controller.context
    assert all(ctx.partition_state(tp("big", p)) is P.ONLINE for p in range(100))
    assert all(ctx.replica_state(r) is R.ONLINE for r in ctx.replicas_on_brokers([1, 2, 3]))
    assert zk.states[tp("big", 4)] == LeaderAndIsr(2, 0, (2, 3), 1, 0)


def test_controller_failover_sets_initial_states_and_elects() -> None:
    zk = cluster(brokers=(1, 2))
    zk.create_topic("t", {0: (1, 2), 1: (3, 2), 2: (1, 2)})
    zk.states[tp("t", 0)] = LeaderAndIsr(1, 4, (1, 2), 1, 6)   # live leader: Online
    zk.states[tp("t", 1)] = LeaderAndIsr(3, 2, (3, 2), 1, 2)   # dead leader: Offline
    controller, channel, _ = new_controller(zk)                 # t-2 has no state: New
    controller.on_become_controller(epoch=2, epoch_zk_version=1)

    ctx = controller.context
    assert [ctx.partition_state(tp("t", i)) for i in range(3)] == [P.ONLINE] * 3
    assert zk.states[tp("t", 0)] == LeaderAndIsr(1, 4, (1, 2), 1, 6)   # untouched
    # 2 is elected and the dead leader leaves the ISR in the same (single) write
    assert zk.states[tp("t", 1)] == LeaderAndIsr(2, 3, (2,), 2, 3)
    assert len(zk.calls_named("update_leader_and_isr")) == 1
    assert zk.states[tp("t", 2)] == LeaderAndIsr(1, 0, (1, 2), 2, 0)
    assert ctx.replica_state(PartitionReplica(tp("t", 1), 3)) is R.OFFLINE
    assert ctx.replica_state(PartitionReplica(tp("t", 1), 2)) is R.ONLINE
    assert Counter(b for b, r in channel.sent if isinstance(r, LeaderAndIsrRequest)) == {1: 1, 2: 1}
    assert all(r.controller_epoch == 2 for _, r in channel.sent)


def test_controller_failover_writes_each_partition_at_most_once() -> None:
    """Broker 3 died with the old controller: the partitions it led are elected and the ones
    it followed shrink their ISR, each in one write; healthy ones are not written at all."""
    zk = cluster(brokers=(1, 2))
    zk.create_topic("t", {p: tuple(1 + (p + i) % 3 for i in range(3)) for p in range(30)})
    for p, replicas in zk.topics["t"].partitions.items():
        zk.states[tp("t", p)] = LeaderAndIsr(replicas[0], 1, tuple(replicas), 1, 0)
    controller, _, _ = new_controller(zk)
    controller.on_become_controller(epoch=2, epoch_zk_version=1)

    written = [t for batch in zk.calls_named("update_leader_and_isr") for t in batch]
    assert len(written) == len(set(written)) == 30
    for p in range(30):
        state = zk.states[tp("t", p)]
        assert 3 not in state.isr and state.leader in (1, 2)
        assert state.zk_version == 1
    assert zk.calls_named("get_partition_states") == [sorted(tp("t", p) for p in range(30))]


def test_broker_failure_elects_a_live_isr_member() -> None:
    zk = cluster()
    zk.create_topic("t", {0: (1, 2, 3)})
    zk.states[tp("t", 0)] = LeaderAndIsr(1, 0, (1, 3), 1, 0)
    controller, channel, _ = new_controller(zk, broker_id=2)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    channel.sent.clear()
    zk.kill_broker(1)
    controller.process(BrokerChange())

    state = zk.states[tp("t", 0)]
    assert (state.leader, state.isr, state.leader_epoch) == (3, (3,), 1)
    assert 1 not in channel.brokers
    assert controller.context.replica_state(PartitionReplica(tp("t", 0), 1)) is R.OFFLINE
    assert all(b in (2, 3) for b, _ in channel.sent)
    assert sorted(b for b, _ in channel.update_metadata()) == [2, 3]


def test_broker_failure_sends_the_isr_shrinks_before_collecting_the_elections() -> None:
    """ZooKeeper applies the elections' writes while the shrinks are decided and sent, and the
    shrinks' while the elections are applied: both writes are in flight at once."""
    zk = cluster()
    zk.create_topic("t", {0: (1, 2, 3), 1: (2, 1, 3)})
    zk.states[tp("t", 0)] = LeaderAndIsr(1, 0, (1, 2, 3), 1, 0)  # led by the victim: elected
    zk.states[tp("t", 1)] = LeaderAndIsr(2, 0, (2, 1, 3), 1, 0)  # followed by it: shrunk
    controller, channel, _ = new_controller(zk, broker_id=2)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    zk.calls.clear()
    channel.sent.clear()
    zk.kill_broker(1)
    controller.process(BrokerChange())

    writes = [(name, sorted(arg) if name == "update_leader_and_isr" else arg)
              for name, arg in zk.calls if "update_leader_and_isr" in name]
    assert writes == [("update_leader_and_isr", [tp("t", 0)]),
                      ("update_leader_and_isr", [tp("t", 1)]),
                      ("collect_update_leader_and_isr", [tp("t", 0)]),
                      ("collect_update_leader_and_isr", [tp("t", 1)])]
    assert (zk.states[tp("t", 0)].leader, zk.states[tp("t", 0)].isr) == (2, (2, 3))
    assert (zk.states[tp("t", 1)].leader, zk.states[tp("t", 1)].isr) == (2, (2, 3))
    lai = dict(channel.leader_and_isr())
    assert sorted(lai) == [2, 3]
    assert all(sorted(s.tp.partition for s in r.partition_states) == [0, 1] for r in lai.values())
    assert controller.context.replica_state(PartitionReplica(tp("t", 0), 1)) is R.OFFLINE
    assert controller.context.replica_state(PartitionReplica(tp("t", 1), 1)) is R.OFFLINE


def test_broker_failure_without_live_isr_stays_offline_unless_unclean_enabled() -> None:
    for unclean, expected_leader in (("false", -1), ("true", 2)):
        zk = cluster()
        zk.create_topic("t", {0: (1, 2)}, {"unclean.leader.election.enable": unclean})
        zk.states[tp("t", 0)] = LeaderAndIsr(1, 0, (1,), 1, 0)
        controller, _, _ = new_controller(zk, broker_id=3)
        controller.on_become_controller(epoch=1, epoch_zk_version=0)
        zk.kill_broker(1)
        controller.process(BrokerChange())
        assert zk.states[tp("t", 0)].leader == expected_leader
        expected_state = P.ONLINE if unclean == "true" else P.OFFLINE
        assert controller.context.partition_state(tp("t", 0)) is expected_state


def test_the_brokers_unclean_leader_election_default_applies_where_the_topic_is_silent() -> None:
    """unclean.leader.election.enable in server.properties (or changed for the cluster) is the
    default of every topic that does not set it; a topic's own "false" still wins. The default
    is read at each election, so a dynamic change takes effect at the next one."""
    broker_default = [False]
    zk = cluster()
    zk.create_topic("silent", {0: (1, 2)})
    zk.create_topic("strict", {0: (1, 2)}, {"unclean.leader.election.enable": "false"})
    for topic in ("silent", "strict"):
        zk.states[tp(topic, 0)] = LeaderAndIsr(1, 0, (1,), 1, 0)
    controller, _, _ = new_controller(zk, broker_id=3,
                                      unclean_leader_election_default=lambda: broker_default[0])
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    zk.kill_broker(1)
    controller.process(BrokerChange())
    assert zk.states[tp("silent", 0)].leader == -1
    broker_default[0] = True
    zk.kill_broker(2)
    zk.register_broker(2, epoch=50)
    controller.process(BrokerChange())
    assert zk.states[tp("silent", 0)].leader == 2
    assert zk.states[tp("strict", 0)].leader == -1


def test_broker_startup_brings_replicas_and_partitions_online() -> None:
    zk = cluster(brokers=(1,))
    zk.create_topic("t", {0: (2, 1), 1: (2,)})
    zk.states[tp("t", 1)] = LeaderAndIsr(2, 0, (2,), 1, 0)
    controller, channel, _ = new_controller(zk)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    assert controller.context.partition_state(tp("t", 1)) is P.OFFLINE
    channel.sent.clear()
    zk.register_broker(2)
    controller.process(BrokerChange())

    ctx = controller.context
    assert ctx.partition_state(tp("t", 1)) is P.ONLINE
    # failover marked it leaderless (epoch 1), the returning broker is elected at epoch 2
    assert zk.states[tp("t", 1)] == LeaderAndIsr(2, 2, (2,), 1, 2)
    assert ctx.replica_state(PartitionReplica(tp("t", 0), 2)) is R.ONLINE
    um_to_new = [r for b, r in channel.update_metadata() if b == 2]
    assert len(um_to_new) == 1 and {s.tp for s in um_to_new[0].partition_states} == {
        tp("t", 0), tp("t", 1)}
    assert [b.id for b in um_to_new[0].live_brokers] == [1, 2]
    assert Counter(b for b, _ in channel.update_metadata()) == {1: 1, 2: 1}


def test_bounced_broker_is_failed_over_then_started() -> None:
    zk, controller, channel = t0_led_by_1_on_controller_3()
    zk.register_broker(1, epoch=999)
    controller.process(BrokerChange())
    assert zk.states[tp("t", 0)].leader == 2
    assert controller.context.broker_epoch(1) == 999
    assert [r.broker_epoch for b, r in channel.leader_and_isr() if b == 1][-1] == 999


def test_a_bounced_follower_is_not_stopped_after_it_is_told_to_follow() -> None:
    """The bounced broker is failed over (its replicas go offline, which stops them) and then
    started (LeaderAndIsr) in one event, whose requests go out together, LeaderAndIsr first.
    The stop belonged to the incarnation that died; sent to the new one after its
    LeaderAndIsr, it made a restarted follower stop fetching for good (a fault run saw it)."""
    zk, controller, channel = t0_led_by_1_on_controller_3()
    channel.sent.clear()
    zk.register_broker(2, epoch=999)  # the follower, gone and back before the controller looked
    controller.process(BrokerChange())
    to_2 = [type(r).__name__ for b, r in channel.sent if b == 2]
    assert "LeaderAndIsrRequest" in to_2
    assert "StopReplicaRequest" not in to_2


def test_a_bounced_sole_isr_member_is_elected_again_not_an_unclean_replica() -> None:
    """Kafka 2.4 fails a bounced broker over before starting it, so on a topic that allows
    unclean elections the partition it alone had in sync went to a replica without its log.
    The bounced broker still has that log: it is elected again, cleanly."""
    zk = cluster()
    zk.create_topic("t", {0: (1, 2)}, {"unclean.leader.election.enable": "true"})
    zk.states[tp("t", 0)] = LeaderAndIsr(1, 0, (1,), 1, 0)
    controller, _, _ = new_controller(zk, broker_id=3)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    zk.register_broker(1, epoch=999)  # gone and back before the controller looked
    controller.process(BrokerChange())
    assert zk.states[tp("t", 0)].leader == 1
    assert zk.states[tp("t", 0)].isr == (1,)
    assert controller.context.partition_state(tp("t", 0)) is P.ONLINE
    assert controller.context.returning_brokers == frozenset()
    zk.kill_broker(1)  # really gone this time: the unclean election the topic allows
    controller.process(BrokerChange())
    assert zk.states[tp("t", 0)].leader == 2


def test_isr_change_notification_refreshes_cache_and_metadata() -> None:
    zk = cluster()
    zk.create_topic("t", {0: (1, 2, 3)})
    zk.states[tp("t", 0)] = LeaderAndIsr(1, 0, (1, 2, 3), 1, 0)
    controller, channel, _ = new_controller(zk)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    channel.sent.clear()
    zk.leader_isr_write(tp("t", 0), (1, 2))
    zk.isr_notifications.add(tp("t", 0))
    controller.process(IsrChangeNotification())
    assert controller.context.partition_leadership(tp("t", 0)).isr == (1, 2)  # type: ignore[union-attr]
    assert sorted(b for b, _ in channel.sent) == [1, 2, 3]
    assert all(r.partition_states[0].isr == (1, 2) for _, r in channel.update_metadata())


def test_controller_moved_error_resigns_and_stops_sending() -> None:
    zk = cluster()
    controller, channel, _ = new_controller(zk)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    channel.sent.clear()
    zk.fenced = True
    zk.create_topic("t", {0: (1, 2)})
    controller.process(TopicChange())
    assert not controller.is_active
    assert channel.sent == [] and channel.brokers == set()
    assert controller.context.all_topics() == frozenset()
    zk.fenced = False
    zk.kill_broker(2)
    controller.process(BrokerChange())
    assert channel.sent == [] and zk.calls_named("update_leader_and_isr") == []


def test_resign_event_clears_state() -> None:
    zk = cluster()
    controller, channel, _ = new_controller(zk)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    controller.process(Resign())
    assert not controller.is_active and channel.brokers == set()


def test_controlled_shutdown_moves_leadership_and_stops_followers() -> None:
    zk = cluster()
    zk.create_topic("t", {0: (1, 2), 1: (2, 1), 2: (1,)})
    zk.states[tp("t", 0)] = LeaderAndIsr(1, 0, (1, 2), 1, 0)
    zk.states[tp("t", 1)] = LeaderAndIsr(2, 0, (2, 1), 1, 0)
    zk.states[tp("t", 2)] = LeaderAndIsr(1, 0, (1,), 1, 0)
    controller, channel, _ = new_controller(zk, broker_id=3)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    channel.sent.clear()
    answers: list[object] = []
    controller.process(ControlledShutdown(1, 101, answers.append))
    assert answers == [set()]
    assert zk.states[tp("t", 0)] == LeaderAndIsr(2, 1, (2,), 1, 1)
    assert zk.states[tp("t", 1)].isr == (2,)
    assert zk.states[tp("t", 2)].leader == 1           # single replica: nowhere to go
    stops = [r for b, r in channel.sent if b == 1 and isinstance(r, StopReplicaRequest)]
    assert [s.partitions for s in stops] == [(tp("t", 1),)] and not stops[0].delete_partitions


def test_controlled_shutdown_is_answered_once_its_requests_are_queued() -> None:
    """The stopping broker must not stop before its partitions' new leaders are being told."""
    zk, controller, channel = t0_led_by_1_on_controller_3()
    channel.sent.clear()
    queued_when_answered: list[list[int]] = []
    controller.process(ControlledShutdown(1, 101, lambda _answer: queued_when_answered.append(
        sorted(b for b, r in channel.sent if isinstance(r, LeaderAndIsrRequest)))))
    assert queued_when_answered == [[1, 2]]


def test_controlled_shutdown_with_stale_broker_epoch_is_refused() -> None:
    zk = cluster()
    controller, _, _ = new_controller(zk, broker_id=3)
    controller.on_become_controller(epoch=1, epoch_zk_version=0)
    answers: list[object] = []
    controller.process(ControlledShutdown(1, 5, answers.append))
    assert isinstance(answers[0], Exception)


def test_controlled_shutdown_answers_not_controller_when_deposed_midway() -> None:
    zk, controller, _ = t0_led_by_1_on_controller_3()
    zk.fenced = True
    answers: list[object] = []
    controller.process(ControlledShutdown(1, 101, answers.append))
    assert len(answers) == 1 and isinstance(answers[0], NotControllerError)
    assert not controller.is_active and zk.states[tp("t", 0)].leader == 1


def test_inactive_controller_answers_api_events_with_not_controller() -> None:
    controller, channel, _ = new_controller(cluster())
    answers: list[object] = []
    controller.process(ControlledShutdown(1, 101, answers.append))
    controller.process(BrokerChange())
    assert isinstance(answers[0], NotControllerError) and channel.sent == []
