"""A topic too large for one ZooKeeper request is refused before anything is written, with the
limit and the ways around it in the message (broker/topic_admin.check_fits_in_zookeeper)."""
from __future__ import annotations

import pytest

from odradek.broker.topic_admin import TopicError, assign_replicas, check_fits_in_zookeeper
from odradek.common.metadata import TopicAssignment
from odradek.protocol.errors import ErrorCode
from odradek.zk import paths
from odradek.zk.request_size import JUTE_MAXBUFFER, payload_budget


def _topic(partitions: int, brokers: int = 3, rf: int = 3, name: str = "big") -> TopicAssignment:
    return TopicAssignment(name, paths.new_topic_id(),
                           assign_replicas(list(range(1, brokers + 1)), partitions, rf))


def test_100000_partitions_at_rf3_are_refused_naming_the_limit_and_the_ways_around() -> None:
    topic = _topic(100_000)
    size = len(paths.encode_topic_assignment(topic))
    assert size > JUTE_MAXBUFFER  # 1.59 MB: ZooKeeper would drop the connection
    with pytest.raises(TopicError) as refused:
        check_fits_in_zookeeper(topic, {})
    assert refused.value.code == ErrorCode.POLICY_VIOLATION
    message = str(refused.value)
    assert "\n" not in message
    for part in (f"{size:,} bytes", "jute.maxbuffer 1,048,575", "100,000 partitions",
                 "several topics", "every ZooKeeper server", "zookeeper.jute.maxbuffer"):
        assert part in message


def test_the_suggested_partition_count_fits() -> None:
    with pytest.raises(TopicError) as refused:
        check_fits_in_zookeeper(_topic(100_000), {})
    suggested = int(str(refused.value).split("Create at most ")[1].split(" ")[0].replace(",", ""))
    assert 60_000 <= suggested < 100_000
    check_fits_in_zookeeper(_topic(suggested), {})
    with pytest.raises(TopicError):
        check_fits_in_zookeeper(_topic(suggested + 5_000), {})


def test_the_config_znode_counts_and_a_larger_jute_maxbuffer_lets_a_topic_through() -> None:
    topic = _topic(60_000)
    check_fits_in_zookeeper(topic, {})
    room = payload_budget() - len(paths.encode_topic_assignment(topic))
    with pytest.raises(TopicError):  # the same creation multi carries the topic's configs
        check_fits_in_zookeeper(topic, {"retention.ms": "1" * room})
    check_fits_in_zookeeper(_topic(100_000), {}, jute_maxbuffer=4 * 1024 * 1024)
