"""KafkaZkClient against a real ZooKeeper (one server per session, one chroot per test)."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from zk_helpers import crashed_broker

from odradek.common.metadata import BrokerInfo, LeaderAndIsr, TopicAssignment, TopicPartition
from odradek.common.netutil import free_port
from odradek.controller.seams import ControllerMovedError
from odradek.zk import paths
from odradek.zk.client import KafkaZkClient
from odradek.zk.errors import BrokerIdInUseError, RequestTooLargeError, TopicExistsError
from odradek.zk.request_size import payload_budget

pytestmark = pytest.mark.integration


@pytest.fixture
def make_client(zk_connect: str) -> Iterator:
    clients: list[KafkaZkClient] = []

    def make(session_timeout_s: float = 6.0) -> KafkaZkClient:
        client = KafkaZkClient(zk_connect, session_timeout_s)
        client.start()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def _controller(make_client, *topics: str) -> KafkaZkClient:
    """Broker 1 as elected controller, with `topics` created (no partitions assigned)."""
    zk = make_client()
    epoch, zk.epoch_zk_version = zk.try_become_controller(1)
    for topic in topics:
        zk.create_topic(TopicAssignment(topic, paths.new_topic_id()), {})
    return zk


def _states(topic: str, n: int) -> dict[TopicPartition, LeaderAndIsr]:
    return {TopicPartition(topic, p): LeaderAndIsr(1, 0, (1, 2), 1) for p in range(n)}


def test_register_broker_epoch_is_czxid(make_client) -> None:
    zk = make_client()
    epoch = zk.register_broker(BrokerInfo(1, "127.0.0.1", 9092, rack="r"))
    assert epoch == zk.kazoo.exists("/brokers/ids/1").czxid
    assert zk.get_live_brokers() == {1: BrokerInfo(1, "127.0.0.1", 9092, epoch, "r")}


def test_broker_id_held_by_another_live_broker_fails(make_client) -> None:
    make_client().register_broker(BrokerInfo(1, "127.0.0.1", 9092))
    with pytest.raises(BrokerIdInUseError):
        make_client().register_broker(BrokerInfo(1, "127.0.0.1", 9999))


@pytest.mark.slow  # 11 s: make test-long
def test_restarted_broker_waits_for_its_old_registration_however_long_it_stays(make_client) -> None:
    """ZooKeeper keeps a dead incarnation's registration past twice the session timeout when it
    lost its quorum meanwhile; the restarted broker waits instead of exiting."""
    old = make_client(session_timeout_s=30.0)
    port = free_port()
    old.register_broker(BrokerInfo(1, "127.0.0.1", port))
    new = make_client(session_timeout_s=2.0)
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(_registered(new, BrokerInfo(1, "127.0.0.1", port))))
    thread.start()
    time.sleep(2 * 2.0 + 5 + 1.5)  # past twice its session timeout and then some: still waiting
    assert outcome == [] and thread.is_alive()
    old.close()  # what ZooKeeper's expiry of the dead session does
    thread.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], int)


def _registered(zk: KafkaZkClient, info: BrokerInfo) -> object:
    try:
        return zk.register_broker(info)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc


def test_restarted_broker_waits_out_its_old_registration(zk_connect: str, make_client) -> None:
    port = free_port()
    crashed_broker(zk_connect, 1, port)
    zk = make_client(session_timeout_s=2.0)
    old_epoch = zk.kazoo.exists("/brokers/ids/1").czxid
    new_epoch = zk.register_broker(BrokerInfo(1, "127.0.0.1", port))
    assert new_epoch > old_epoch
    assert zk.kazoo.exists("/brokers/ids/1").ephemeralOwner == zk.session_id


def test_election_race_has_one_winner_and_one_epoch_step(make_client) -> None:
    a, b = make_client(), make_client()
    before, _ = a.get_controller_epoch()
    barrier = threading.Barrier(2)
    results: dict[int, tuple[int, int] | None] = {}

    def elect(zk: KafkaZkClient, broker_id: int) -> None:
        barrier.wait()
        results[broker_id] = zk.try_become_controller(broker_id)

    threads = [threading.Thread(target=elect, args=(a, 1)), threading.Thread(target=elect, args=(b, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [bid for bid, r in results.items() if r is not None]
    assert len(winners) == 1
    assert a.get_controller_id() == winners[0]
    assert results[winners[0]] == a.get_controller_epoch() and a.get_controller_epoch()[0] == before + 1


def test_own_controller_znode_from_expired_session_is_waited_out(zk_connect: str, make_client) -> None:
    old_epoch, _ = crashed_broker(zk_connect, 1, free_port())
    zk = make_client(session_timeout_s=2.0)
    assert zk.get_controller_id() == 1  # still there: the dead session has not expired yet
    started = time.monotonic()
    won = zk.try_become_controller(1)
    assert won is not None and won[0] == old_epoch + 1
    assert time.monotonic() - started > 0.2
    assert zk.kazoo.exists("/controller").ephemeralOwner == zk.session_id


def test_deposed_controller_writes_are_fenced(make_client) -> None:
    a = _controller(make_client, "t", "u")
    created = a.create_partition_states(_states("t", 2))
    assert all(isinstance(s, LeaderAndIsr) for s in created.values())
    b = make_client()
    b.kazoo.delete("/controller")
    assert b.try_become_controller(2) is not None
    with pytest.raises(ControllerMovedError):
        a.create_partition_states(_states("u", 3))
    assert not b.kazoo.exists("/brokers/topics/u/partitions/0/state")
    moved = {tp: LeaderAndIsr(2, 1, (2,), 1, 0) for tp in created}
    with pytest.raises(ControllerMovedError):
        a.update_leader_and_isr(moved)
    assert b.get_partition_states(created) == {tp: LeaderAndIsr(1, 0, (1, 2), 1, 0) for tp in created}


def test_update_leader_and_isr_fails_only_the_stale_partition(make_client) -> None:
    zk = _controller(make_client, "t")
    zk.create_partition_states(_states("t", 3))
    stale = TopicPartition("t", 1)
    zk.kazoo.set(paths.partition_state_path(stale), paths.encode_leader_and_isr(LeaderAndIsr(2, 1, (2,), 1)))
    updates = {tp: LeaderAndIsr(2, 1, (2, 1), 1, 0) for tp in _states("t", 3)}
    result = zk.update_leader_and_isr(updates)
    assert isinstance(result[stale], BadVersionError)
    for tp in (TopicPartition("t", 0), TopicPartition("t", 2)):
        assert result[tp] == LeaderAndIsr(2, 1, (2, 1), 1, 1)
        assert zk.get_partition_state(tp) == result[tp]


def test_many_conflicts_in_one_batch_fail_exactly_the_stale_partitions(make_client) -> None:
    zk = _controller(make_client, "t")
    zk.create_partition_states(_states("t", 300))
    stale = {TopicPartition("t", p) for p in range(0, 300, 7)}
    for tp in stale:  # a leader's ISR writes race the controller's
        zk.kazoo.set(paths.partition_state_path(tp), paths.encode_leader_and_isr(LeaderAndIsr(1, 0, (1,), 1)))
    result = zk.update_leader_and_isr({tp: LeaderAndIsr(2, 1, (2,), 1, 0) for tp in _states("t", 300)})
    assert {tp for tp, r in result.items() if isinstance(r, BadVersionError)} == stale
    assert all(r == LeaderAndIsr(2, 1, (2,), 1, 1) for tp, r in result.items() if tp not in stale)
    assert zk.get_partition_states(stale) == {tp: LeaderAndIsr(1, 0, (1,), 1, 1) for tp in stale}


def test_conditional_isr_update_conflict(make_client) -> None:
    zk = _controller(make_client, "t")
    tp = TopicPartition("t", 0)
    zk.create_partition_states({tp: LeaderAndIsr(1, 0, (1, 2), 1)})
    shrunk = LeaderAndIsr(1, 0, (1,), 1, zk_version=0)
    assert zk.conditional_update_partition_states({tp: shrunk}) == {tp: 1}
    # zombie leader: stale version
    assert zk.conditional_update_partition_states({tp: shrunk}) == {tp: None}
    assert zk.get_partition_state(tp) == LeaderAndIsr(1, 0, (1,), 1, 1)
    other = TopicPartition("t", 1)
    zk.create_partition_states({other: LeaderAndIsr(1, 0, (1, 2), 1)})
    # independent writes: the stale one fails alone
    assert zk.conditional_update_partition_states({tp: shrunk, other: shrunk}) == {tp: None, other: 1}


def test_five_thousand_partition_states_in_batches(make_client) -> None:
    zk = _controller(make_client, "big", "bigger")
    states = {**_states("big", 3000), **_states("bigger", 2000)}
    result = zk.create_partition_states(states)
    assert all(isinstance(s, LeaderAndIsr) for s in result.values()) and len(result) == 5000
    assert len(zk.kazoo.get_children("/brokers/topics/big/partitions")) == 3000
    assert zk.get_partition_states(states) == states


def test_create_fails_only_existing_states_and_missing_topics(make_client) -> None:
    zk = _controller(make_client, "t")
    zk.create_partition_states(_states("t", 1))
    result = zk.create_partition_states({**_states("t", 3), **_states("gone", 1)})
    assert isinstance(result[TopicPartition("t", 0)], NodeExistsError)
    assert isinstance(result[TopicPartition("gone", 0)], NoNodeError)
    assert isinstance(result[TopicPartition("t", 2)], LeaderAndIsr)
    assert not zk.kazoo.exists("/brokers/topics/gone")


def test_topic_creation_and_reads(make_client) -> None:
    zk = make_client()
    assignment = TopicAssignment("t", paths.new_topic_id(), {0: (1, 2), 1: (2, 1)}, 2)
    zk.create_topic(assignment, {"retention.ms": "1000"})
    with pytest.raises(TopicExistsError):
        zk.create_topic(assignment, {})
    assert zk.topic_exists("t") and not zk.topic_exists("nope")
    assert zk.get_all_topics() == {"t"}
    assert zk.get_topic_assignments(["t", "nope"]) == {"t": assignment}
    assert zk.get_topic_configs(["t", "nope"]) == {"t": {"retention.ms": "1000"}, "nope": {}}


def test_chroot_is_created_and_isolates(zk_connect: str, make_client) -> None:
    zk = make_client()
    zk.create_topic(TopicAssignment("t", paths.new_topic_id(), {0: (1,)}), {})
    hosts, _, chroot = zk_connect.partition("/")
    raw = KazooClient(hosts=hosts)
    raw.start()
    try:
        assert raw.exists(f"/{chroot}/brokers/topics/t")
        assert not raw.exists("/brokers/topics/t")
    finally:
        raw.stop()
        raw.close()


def test_isr_change_notifications_are_popped_once(make_client) -> None:
    zk = _controller(make_client)
    zk.propagate_isr_changes([TopicPartition("t", 0)])
    zk.propagate_isr_changes([TopicPartition("t", 1), TopicPartition("u", 0)])
    assert zk.pop_isr_change_notifications() == {TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)}
    assert zk.pop_isr_change_notifications() == set()


def test_isr_changes_of_30000_partitions_fit_zookeeper_request_limits(make_client) -> None:
    """One notification of 30,000 partitions is ~1.3 MB (a 249-character topic name: 8.7 MB):
    over jute.maxbuffer, ZooKeeper would drop the leader's connection and the controller would
    never hear of the change."""
    zk = _controller(make_client)
    for topic in ("failover-bench", "t" * 249):
        changed = {TopicPartition(topic, p) for p in range(30000)}
        created = zk.propagate_isr_changes(changed)
        assert len(created) >= 2
        for path in created:
            assert len(zk.kazoo.get(path)[0]) <= payload_budget()
        assert zk.pop_isr_change_notifications() == changed


def test_a_topic_too_large_for_one_request_is_refused_unsent(make_client) -> None:
    zk = make_client()
    huge = TopicAssignment("huge", paths.new_topic_id(), {p: (1, 2, 3) for p in range(100_000)})
    with pytest.raises(RequestTooLargeError):
        zk.create_topic(huge, {})
    assert not zk.kazoo.exists(paths.topic_path("huge"))
    assert not zk.kazoo.exists(paths.topic_config_path("huge"))
    assert zk.kazoo.connected  # nothing was sent, so ZooKeeper kept the connection


def test_fenced_multis_are_batched_under_jute_maxbuffer(make_client) -> None:
    """999 state znodes of a 249-character topic with ISRs of 300 replicas are ~1.6 MB in one
    multi: the writes are split by bytes, not only by op count, and all of them land."""
    topic = "t" * 249
    zk = _controller(make_client, topic)
    wide = tuple(range(1, 301))
    states = {TopicPartition(topic, p): LeaderAndIsr(1, 0, wide, 1) for p in range(1200)}
    created = zk.create_partition_states(states)
    assert all(not isinstance(r, Exception) for r in created.values())
    moved = {tp: LeaderAndIsr(2, 1, wide, 1, s.zk_version) for tp, s in created.items()}
    updated = zk.update_leader_and_isr(moved)
    assert all(not isinstance(r, Exception) and r.zk_version == 1 for r in updated.values())
    assert zk.get_partition_states(list(states)) == updated


def test_producer_id_blocks_are_consecutive(make_client) -> None:
    a, b = make_client(), make_client()
    assert a.allocate_producer_id_block(1) == paths.ProducerIdBlock(1, 0, 999)
    assert b.allocate_producer_id_block(2, size=10) == paths.ProducerIdBlock(2, 1000, 1009)


def test_topic_deletion_removes_every_znode_of_the_topic_marker_last(make_client) -> None:
    zk = make_client()
    zk.epoch_zk_version = zk.get_controller_epoch()[1]
    zk.create_topic(TopicAssignment("t", paths.new_topic_id(), {0: (1,), 1: (1,)}), {"retention.ms": "1"})
    zk.create_topic(TopicAssignment("kept", paths.new_topic_id(), {0: (1,)}), {})
    zk.create_partition_states({TopicPartition("t", 0): LeaderAndIsr(1, 0, (1,), 1),
                                TopicPartition("t", 1): LeaderAndIsr(1, 0, (1,), 1)})
    zk.mark_topics_for_deletion(["t"])
    zk.mark_topics_for_deletion(["t"])  # marking twice is fine
    assert zk.get_topic_deletions() == {"t"}
    zk.delete_topics(["t"])
    assert zk.get_all_topics() == {"kept"} and zk.get_topic_deletions() == set()
    assert not zk.kazoo.exists("/config/topics/t") and zk.kazoo.exists("/config/topics/kept")
    zk.delete_topics(["t"])  # already gone: nothing to do
    zk.mark_topics_for_deletion(["nope"])
    zk.delete_topic_deletions(["nope", "never"])
    assert zk.get_topic_deletions() == set()


def test_deleting_many_topics_packs_them_into_few_multis_each_marker_after_its_partitions(
        make_client, monkeypatch) -> None:
    zk = make_client()
    zk.epoch_zk_version = zk.get_controller_epoch()[1]
    topics = [f"t{i}" for i in range(4)]
    for topic in topics:
        zk.create_topic(TopicAssignment(topic, paths.new_topic_id(), {p: (1,) for p in range(3)}),
                        {"retention.ms": "1"})
        zk.create_partition_states(_states(topic, 3))
    zk.mark_topics_for_deletion(topics + ["unknown"])
    sent: list[list[str]] = []
    original = zk._start_pipelined

    def recording(batches):
        sent.extend([op.path for _, op in batch] for batch in batches)
        return original(batches)

    monkeypatch.setattr(zk, "_start_pipelined", recording)
    monkeypatch.setattr(zk, "_ops_per_multi", lambda items: 12)  # force several multis
    zk.delete_topics(topics + ["unknown"])
    assert zk.get_all_topics() == set() and zk.get_topic_deletions() == set()
    assert not zk.kazoo.get_children("/config/topics")
    # 4 topics x (3 states + 3 partitions + /partitions + topic + config + marker) + the
    # unknown topic's marker: 41 ops in 4 multis of 12 (not one or more per topic); each
    # marker comes after its topic's partitions
    order = [path for batch in sent for path in batch]
    assert len(sent) == 4 and len(order) == 41 == len(set(order))
    for topic in topics:
        marker = order.index(f"/admin/delete_topics/{topic}")
        assert all(i < marker for i, path in enumerate(order)
                   if path.startswith(f"/brokers/topics/{topic}/"))
    assert order.index("/admin/delete_topics/unknown") == len(order) - 1


def test_backfill_gives_old_topic_znodes_an_initial_partition_count_and_an_id(make_client) -> None:
    zk = make_client()
    zk.epoch_zk_version = zk.get_controller_epoch()[1]
    zk.kazoo.create("/brokers/topics/old", b'{"version":1,"partitions":{"0":[1],"1":[1]}}')
    backfilled = zk.backfill_topic_znodes(["old"])["old"]
    assert backfilled.initial_partition_count == 2 and backfilled.topic_id != paths.ZERO_TOPIC_ID
    assert zk.get_topic_assignments(["old"])["old"] == backfilled
    found = zk.get_topic_assignments_and_versions(["old", "missing"])
    assert list(found) == ["old"] and found["old"][0] == backfilled
    grown = TopicAssignment("old", backfilled.topic_id, {**backfilled.partitions, 2: (1,)}, 2)
    stale = TopicAssignment("missing", backfilled.topic_id, {0: (1,)})
    results = zk.set_topic_assignments([(grown, found["old"][1]), (stale, 0)])
    assert results["old"] is None and isinstance(results["missing"], NoNodeError)
    assert isinstance(zk.set_topic_assignments([(grown, found["old"][1])])["old"], BadVersionError)
    assert zk.get_topic_assignments(["old"])["old"] == grown  # the initial count stays 2


def test_entity_configs_and_change_notifications_are_read_in_batches(make_client) -> None:
    from odradek.zk import admin_zk_client as azk

    zk = _controller(make_client, *[f"c{i}" for i in range(10)])
    zk.change_entity_configs({(azk.TOPICS, f"c{i}"): {"retention.ms": str(i)} for i in range(10)})
    zk.change_entity_configs({(azk.BROKERS, "1"): {"log.cleaner.backoff.ms": "7"}})
    names = [f"c{i}" for i in range(10)] + ["none"]
    configs = {f"c{i}": {"retention.ms": str(i)} for i in range(10)}
    assert zk.get_topic_configs(names) == {**configs, "none": {}}
    assert zk.get_entity_configs(azk.BROKERS, ["1", "2"]) == {"1": {"log.cleaner.backoff.ms": "7"}, "2": {}}
    children = azk.config_changes(zk.kazoo)
    gone = "config_change_9999999999"  # purged by another broker meanwhile: left out
    notifications = zk.get_config_change_notifications([*children, gone])
    assert list(notifications) == children and len(children) == 11
    assert [azk.decode_notification(d) for d in notifications.values()] == \
        [(azk.TOPICS, f"c{i}") for i in range(10)] + [(azk.BROKERS, "1")]


def test_kip253_count_and_maps_round_trip_through_zookeeper(make_client) -> None:
    """The controller's count write is fenced and keeps the rest of the topic znode; state
    znodes keep KIP-253's maps through creation, conditional updates and both read paths
    (kazoo and multi-read, which the decode memo sits behind)."""
    from odradek.common.metadata import PartitionOrdering

    zk = _controller(make_client)
    zk.create_topic(TopicAssignment("o", paths.new_topic_id(), {p: (1,) for p in range(10)}, 8),
                    {})
    stored = zk.set_undeleted_partition_counts({"o": 10, "missing": 3})
    assert list(stored) == ["o"] and stored["o"].undeleted_partition_count == 10
    assert stored["o"].initial_partition_count == 8 and len(stored["o"].partitions) == 10
    assert zk.get_topic_assignments(["o"])["o"] == stored["o"]

    ordering = PartitionOrdering(((0, 3), (1, 4)))
    states = {TopicPartition("o", p): LeaderAndIsr(1, 0, (1,), 1, 0,
                                                   ordering if p >= 8 else None)
              for p in range(10)}
    created = zk.create_partition_states(states)
    assert all(not isinstance(r, Exception) for r in created.values())
    read = zk.get_partition_states(states)  # ten znodes: the multi-read path
    assert read == states
    assert zk.get_partition_state(TopicPartition("o", 9)) == states[TopicPartition("o", 9)]
    marked = read[TopicPartition("o", 9)]._replace(
        ordering=PartitionOrdering(ordering.after_creation, ((0, 3),)))
    updated = zk.update_leader_and_isr({TopicPartition("o", 9): marked})
    assert updated[TopicPartition("o", 9)] == marked._replace(zk_version=1)
    assert zk.get_partition_states([TopicPartition("o", 9)]) == {
        TopicPartition("o", 9): marked._replace(zk_version=1)}

    other = make_client()
    other.kazoo.delete("/controller")
    assert other.try_become_controller(2) is not None
    with pytest.raises(ControllerMovedError):
        zk.set_undeleted_partition_counts({"o": 9})
    assert other.get_topic_assignments(["o"])["o"].undeleted_partition_count == 10
