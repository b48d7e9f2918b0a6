"""odradek.client.group_membership.GroupMember, the consumer-group member of the ordered
consumer (KIP-253), against a real cluster: members in threads of this process split a topic's
partitions with their own assignor, commit and fetch offsets, rebalance when a member joins or
leaves, lose a commit once the group moved on without them, and keep their generation across
the coordinator's kill -9. librdkafka's AdminClient (`odradek groups describe`) reads the
members and the assignments they sent, so the consumer-protocol bytes are Kafka's."""
from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from clients import create_topic
from cluster_state import known_everywhere
from polling import wait_until

from cli_helpers import run
from odradek.client.broker_connection import BrokerConnection, metadata
from odradek.client.group_membership import Assignment, CommitFailedError, GroupMember, GroupMembershipError
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.metadata import TopicPartition
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration

PARTITIONS = 6
HEARTBEAT_MS = 300


def new_topic(c: LocalCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap_servers, name, PARTITIONS, 3)
    wait_until(lambda: known_everywhere(c, name), 30, f"every broker to know {name}")
    return name


def bootstrap(c: LocalCluster) -> list[tuple[str, int]]:
    return [(c.host, c.broker_port(b)) for b in c.broker_ids]


def round_robin(c: LocalCluster):  # type: ignore[no-untyped-def]
    """An assignor that deals each subscribed topic's partitions (counted by Metadata through
    BrokerConnection) to the members in member-id order."""
    calls: list[dict[str, list[str]]] = []

    def assign(subscriptions: dict[str, list[str]]) -> dict[str, list[TopicPartition]]:
        calls.append(subscriptions)
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        conn = BrokerConnection(c.host, c.broker_port(c.broker_ids[0]), "assignor")
        try:
            _brokers, counts = metadata(conn, topics)
        finally:
            conn.close()
        members = sorted(subscriptions)
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])]
        for i, tp in enumerate(tps):
            out[members[i % len(members)]].append(tp)
        return out

    assign.calls = calls  # type: ignore[attr-defined]
    return assign


def member(c: LocalCluster, group: str, name: str, **kwargs: object) -> GroupMember:
    args: dict[str, object] = {"heartbeat_interval_ms": HEARTBEAT_MS, "session_timeout_ms": 20000,
                               "rebalance_timeout_ms": 20000, **kwargs}
    return GroupMember(bootstrap(c), group, name, round_robin(c), **args)  # type: ignore[arg-type]


def join_all(members: list[GroupMember], topic: str) -> list[Assignment]:
    """Every member joins at once (each JoinGroup waits at the coordinator for the others)."""
    with ThreadPoolExecutor(len(members)) as pool:
        return list(pool.map(lambda m: m.join([topic], timeout_s=60), members))


def assert_one_generation_covering(assignments: list[Assignment], topic: str) -> None:
    generations = {a.generation_id for a in assignments}
    assert len(generations) == 1, assignments
    assert sum(a.is_leader for a in assignments) == 1, assignments
    owned = [tp for a in assignments for tp in a.partitions]
    assert sorted(owned) == [TopicPartition(topic, p) for p in range(PARTITIONS)], assignments
    assert len({a.member_id for a in assignments}) == len(assignments)


def close_all(members: list[GroupMember]) -> None:
    for m in members:
        m.close()


def test_members_split_partitions_commit_and_rebalance_when_one_joins(cluster: LocalCluster) -> None:
    topic, group = new_topic(cluster, "split"), f"g-{uuid.uuid4().hex[:8]}"
    a, b, c = (member(cluster, group, name) for name in ("member-a", "member-b", "member-c"))
    try:
        first = join_all([a, b], topic)
        assert_one_generation_covering(first, topic)
        assert [len(x.partitions) for x in first] == [3, 3]
        assert not a.needs_rejoin and not b.needs_rejoin

        # the coordinator keeps A's commits; B reads them, and None where nothing was committed
        mine = {tp: (100 + tp.partition, 0) for tp in first[0].partitions}
        a.commit_offsets(mine)
        every = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        fetched = b.fetch_offsets(every)
        assert fetched == {tp: mine[tp][0] if tp in mine else None for tp in every}

        # librdkafka's AdminClient reads the members and the assignment bytes they sent
        described = run("groups", "describe", group, "--members", "--json",
                        "--bootstrap-server", cluster.bootstrap_servers)
        assert described.returncode == 0, described.stderr
        [d] = json.loads(described.stdout)
        assert d["state"] == "Stable" and d["assignor"] == "odradek-ordered", d
        assert {m["member_id"]: sorted((x["topic"], x["partition"]) for x in m["assignment"])
                for m in d["members"]} == {x.member_id: sorted(x.partitions) for x in first}

        # a third member: the first two hear of the rebalance from their heartbeats, then all rejoin
        joined_c: list[Assignment] = []
        joining = threading.Thread(target=lambda: joined_c.append(c.join([topic], timeout_s=60)))
        joining.start()
        wait_until(lambda: a.needs_rejoin and b.needs_rejoin, 30, "the first two members to need a rejoin")
        second = join_all([a, b], topic)
        joining.join(60)
        assert joined_c, "the third member's join did not return"
        assert_one_generation_covering([*second, *joined_c], topic)
        assert second[0].generation_id > first[0].generation_id
        assert sorted(len(x.partitions) for x in [*second, *joined_c]) == [2, 2, 2]
        assert a.assignment == second[0] and c.assignment == joined_c[0]
        assert not any(m.needs_rejoin for m in (a, b, c))

        # a commit with the new generation counts
        c.commit_offsets({tp: (7, 0) for tp in joined_c[0].partitions})
        assert a.fetch_offsets(list(joined_c[0].partitions)) == {tp: 7 for tp in joined_c[0].partitions}
    finally:
        close_all([a, b, c])


def test_leave_rebalances_and_a_member_left_behind_cannot_commit(cluster: LocalCluster) -> None:
    topic, group = new_topic(cluster, "leave"), f"g-{uuid.uuid4().hex[:8]}"
    # C never heartbeats in this test: it cannot hear of the rebalance, as a stalled process.
    # Sessions outlast the waits below, so only B's LeaveGroup can make the group rebalance.
    short = {"rebalance_timeout_ms": 2000, "session_timeout_ms": 120_000}
    a = member(cluster, group, "member-a", **short)
    b = member(cluster, group, "member-b", **short)
    c = member(cluster, group, "member-c", **short, heartbeat_interval_ms=600_000)
    try:
        first = join_all([a, b, c], topic)
        assert_one_generation_covering(first, topic)
        stale = first[2].partitions

        b.leave()
        assert b.needs_rejoin and b.member_id == ""
        wait_until(lambda: a.needs_rejoin, 30, "the remaining member to need a rejoin")
        # C does not rejoin: after the rebalance timeout the group goes on without it
        [alone] = join_all([a], topic)
        assert alone.generation_id > first[0].generation_id
        assert sorted(alone.partitions) == [TopicPartition(topic, p) for p in range(PARTITIONS)]

        # C's commit, with the generation it still holds, is refused by the coordinator
        with pytest.raises(CommitFailedError) as refused:
            c.commit_offsets({tp: (5, 0) for tp in stale})
        assert refused.value.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert c.needs_rejoin and c.member_id == ""
        assert a.fetch_offsets(list(stale)) == {tp: None for tp in stale}
        # and the member that left has nothing to commit with
        with pytest.raises(CommitFailedError):
            b.commit_offsets({TopicPartition(topic, 0): (5, 0)})

        # C comes back as a new member and the group splits the partitions again
        joined_c: list[Assignment] = []
        joining = threading.Thread(target=lambda: joined_c.append(c.join([topic], timeout_s=60)))
        joining.start()
        wait_until(lambda: a.needs_rejoin, 30, "the member to hear of C's return")
        again = join_all([a], topic)
        joining.join(60)
        assert joined_c, "C's join did not return"
        assert_one_generation_covering([*again, *joined_c], topic)
    finally:
        close_all([a, b, c])


def test_a_static_member_replaced_by_another_process_is_fenced(cluster: LocalCluster) -> None:
    """KIP-345: a member with the same group.instance.id takes the place without a rebalance,
    and the one it replaced hears FENCED_INSTANCE_ID, after which it can neither join nor commit."""
    topic, group = new_topic(cluster, "static"), f"g-{uuid.uuid4().hex[:8]}"
    old = member(cluster, group, "static-old", group_instance_id="instance-1")
    new = member(cluster, group, "static-new", group_instance_id="instance-1")
    try:
        [before] = join_all([old], topic)
        [after] = join_all([new], topic)
        assert sorted(after.partitions) == sorted(before.partitions)
        assert after.generation_id == before.generation_id  # no rebalance
        wait_until(lambda: old.needs_rejoin, 30, "the replaced member's heartbeat to be fenced")
        with pytest.raises(GroupMembershipError) as fenced:
            old.join([topic], timeout_s=10)
        assert fenced.value.error_code == ErrorCode.FENCED_INSTANCE_ID
        with pytest.raises(GroupMembershipError):
            old.commit_offsets({TopicPartition(topic, 0): (1, 0)})
        new.commit_offsets({TopicPartition(topic, 0): (3, 0)})
        assert new.fetch_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 3}
        assert not new.needs_rejoin
    finally:
        close_all([old, new])


def test_a_hurried_member_heartbeats_four_times_an_interval(cluster: LocalCluster) -> None:
    """While ``hurry`` answers True (an OrderedConsumer's gate waits on the group's positions)
    the heartbeats, and the position exchange that follows each, come four times an interval."""
    topic, group = new_topic(cluster, "hurry"), f"g-{uuid.uuid4().hex[:8]}"
    beats: list[float] = []
    hurried = threading.Event()
    m = member(cluster, group, "member-h", heartbeat_interval_ms=1000,
               on_heartbeat=lambda _m: beats.append(time.monotonic()), hurry=hurried.is_set)
    try:
        m.join([topic], timeout_s=60)
        wait_until(lambda: len(beats) >= 2, 10, "heartbeats")
        count = len(beats)
        time.sleep(2.0)
        calm = len(beats) - count
        hurried.set()
        wait_until(lambda: len(beats) > count + calm + 1, 5, "a hurried heartbeat")
        count = len(beats)
        time.sleep(2.0)
        hurry = len(beats) - count
        assert calm <= 3 and hurry >= 5, (calm, hurry)   # 2 and 8 expected
    finally:
        m.close()


def test_hurry_now_heartbeats_at_once_rather_than_at_the_end_of_the_interval(cluster: LocalCluster) -> None:
    """``hurry_now`` (an OrderedConsumer that just took an assignment with gates, or whose
    partitions others' gates may wait on) ends the heartbeat thread's wait: the exchange comes
    at once, not up to an interval later."""
    topic, group = new_topic(cluster, "hurry-now"), f"g-{uuid.uuid4().hex[:8]}"
    beats: list[float] = []
    m = member(cluster, group, "member-n", heartbeat_interval_ms=6000,
               on_heartbeat=lambda _m: beats.append(time.monotonic()))
    try:
        m.join([topic], timeout_s=60)
        wait_until(lambda: len(beats) >= 1, 15, "a first heartbeat")
        count, asked = len(beats), time.monotonic()
        m.hurry_now()
        wait_until(lambda: len(beats) > count, 10, "the heartbeat hurry_now asked for")
        # the interval is 6 s: a heartbeat within 3 s of the call was the one it asked for
        assert beats[count] - asked < 3.0, beats[count] - asked
    finally:
        m.close()


@pytest.mark.slow  # 7 s: make test-long, with the OrderedConsumer group under kill -9 of the coordinator
def test_coordinator_killed_members_keep_their_generation_and_commit(cluster: LocalCluster) -> None:
    """Last in the module: it leaves a broker down."""
    topic, group = new_topic(cluster, "coord"), f"g-{uuid.uuid4().hex[:8]}"
    beats = {"a": 0}
    lock = threading.Lock()

    def counted(_member: GroupMember) -> None:
        with lock:
            beats["a"] += 1

    # sessions long enough for a loaded machine's failover (ZooKeeper session expiry, leader
    # election, the group's load): a member's session ending would rightly ask for a rejoin
    a = member(cluster, group, "member-a", on_heartbeat=counted, session_timeout_ms=45000)
    b = member(cluster, group, "member-b", session_timeout_ms=45000)
    try:
        first = join_all([a, b], topic)
        assert_one_generation_covering(first, topic)
        killed = a.coordinator_id
        assert killed is not None and killed == b.coordinator_id
        cluster.kill_broker(killed)
        with lock:
            beats_at_kill = beats["a"]

        # the heartbeats find the new coordinator, which loaded the group with its generation
        wait_until(lambda: a.coordinator_id not in (None, killed) and beats["a"] >= beats_at_kill + 3, 60,
                   "heartbeats answered by a new coordinator")
        assert not a.needs_rejoin and not b.needs_rejoin
        assert a.generation_id == b.generation_id == first[0].generation_id
        a.commit_offsets({tp: (42, 0) for tp in first[0].partitions})
        assert b.fetch_offsets(list(first[0].partitions)) == {tp: 42 for tp in first[0].partitions}
        assert b.coordinator_id not in (None, killed)
    finally:
        close_all([a, b])
