"""Which positions an OrderedConsumer member may commit (ordered_consumer.committable): never
one for a partition number that was removed during its generation, even once an expansion has
created that number again."""
from __future__ import annotations

from odradek.client.ordered_consumer import committable
from odradek.common.metadata import TopicPartition

T = "t"
OWNED = {TopicPartition(T, p): (100 + p, 3) for p in range(6)} | {TopicPartition("plain", 0): (7, -1)}


def test_everything_owned_is_committable_while_the_topic_keeps_its_partitions() -> None:
    assert committable(OWNED, {T: 6}, {T: 6}) == OWNED


def test_a_removed_partition_is_not_committed() -> None:
    out = committable(OWNED, {T: 4}, {T: 4})
    assert sorted(tp.partition for tp in out if tp.topic == T) == [0, 1, 2, 3]


def test_a_number_removed_and_created_again_within_the_generation_is_not_committed() -> None:
    """The topic is back at 6 partitions, but 4 and 5 are new partitions: the member's positions
    in them are the removed ones'."""
    out = committable(OWNED, {T: 6}, {T: 4})
    assert sorted(tp.partition for tp in out if tp.topic == T) == [0, 1, 2, 3]
    assert out[TopicPartition("plain", 0)] == (7, -1)  # a topic it knows no count of is left alone
