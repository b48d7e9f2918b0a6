"""CreatePartitions' rules for an ordered topic (KIP-253): a lower count is a deletion written as
the znode's undeleted_partition_count, refused below initial_partition_count and while an
earlier deletion drains or an earlier growth is not applied yet."""
from __future__ import annotations

import pytest

from odradek.broker.ordered_partition_count import is_ordered, plan_ordered
from odradek.broker.topic_admin import TopicError
from odradek.common.metadata import TopicAssignment
from odradek.protocol.errors import ErrorCode


def _topic(total: int, initial: int | None = 4, undeleted: int | None = None) -> TopicAssignment:
    return TopicAssignment("t", "id", {p: (1, 2) for p in range(total)}, initial,
                           undeleted_partition_count=undeleted)


def test_a_lower_count_writes_only_the_undeleted_count() -> None:
    current = _topic(8, undeleted=8)
    shrunk = plan_ordered(current, 6, False, [])
    assert shrunk is not None
    assert shrunk.undeleted_partition_count == 6
    assert shrunk.partitions == current.partitions  # the marked partitions stay until removed
    assert (shrunk.initial_partition_count, shrunk.topic_id) == (4, "id")
    # a topic never grown has no count in its znode: every partition is undeleted
    assert plan_ordered(_topic(6, undeleted=None), 5, False, []) is not None
    # a znode from before initial_partition_count is taken at its current count (what the
    # controller backfills), below which nothing goes
    with pytest.raises(TopicError, match="cannot have fewer than 6"):
        plan_ordered(_topic(6, initial=None), 5, False, [])


def test_a_higher_count_is_a_growth_planned_as_kafkas() -> None:
    assert plan_ordered(_topic(4), 5, False, []) is None
    assert plan_ordered(_topic(6, undeleted=6), 9, True, []) is None


@pytest.mark.parametrize("current,count,created,code,words", [
    (_topic(6, undeleted=6), 3, [], ErrorCode.INVALID_PARTITIONS, "cannot have fewer than 4"),
    # below the initial count is said first, even while a deletion drains
    (_topic(6, undeleted=5), 3, [5], ErrorCode.INVALID_PARTITIONS, "cannot have fewer than 4"),
    (_topic(6, undeleted=5), 4, [5], ErrorCode.INVALID_PARTITIONS, "partition 5 marked for deletion"),
    (_topic(8, undeleted=5), 7, [5, 6, 7], ErrorCode.INVALID_PARTITIONS, "partitions 5, 6, 7 marked"),
    # no partition past the count has a state znode: a growth the controller is still applying
    (_topic(6, undeleted=4), 5, [], ErrorCode.INVALID_PARTITIONS, "still adding partitions 4, 5"),
    (_topic(6, undeleted=6), 6, [], ErrorCode.INVALID_PARTITIONS, "Topic already has 6 partitions."),
    (_topic(4), 4, [], ErrorCode.INVALID_PARTITIONS, "Topic already has 4 partitions."),
    (_topic(8, undeleted=8), 6, [], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "no replica assignment"),
])
def test_refusals(current: TopicAssignment, count: int, created: list[int], code: ErrorCode, words: str) -> None:
    with pytest.raises(TopicError) as refused:
        plan_ordered(current, count, code == ErrorCode.INVALID_REPLICA_ASSIGNMENT, created)
    assert refused.value.code == code
    assert words in str(refused.value)


def test_ordered_config_is_read_as_the_controller_reads_it() -> None:
    assert is_ordered({"enable.ordered.delivery": "true"})
    assert is_ordered({"enable.ordered.delivery": " TRUE "})
    assert not is_ordered({"enable.ordered.delivery": "false"})
    assert not is_ordered({})
