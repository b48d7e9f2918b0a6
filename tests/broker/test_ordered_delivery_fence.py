"""KIP-253's produce fence alone: a record is accepted only in the partition its key belongs to
under the topic's current count, or with the declared count equal to the topic's."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.ordered_delivery_fence import OrderedDeliveryFence
from odradek.common.linear_hashing import partition_for_key
from odradek.common.metadata import TopicPartition
from odradek.protocol.declared_partition_counts import with_declared_counts
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch

COUNTS = {"o": (4, 6)}


def _fence() -> OrderedDeliveryFence:
    return OrderedDeliveryFence(COUNTS.get)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.binary(max_size=12), min_size=1, max_size=20), partition=st.integers(0, 5))
def test_a_batch_is_accepted_exactly_when_every_key_belongs_to_the_partition(keys: list[bytes], partition: int) -> None:
    refused = _fence().check(TopicPartition("o", partition), build_batch([(k, b"v") for k in keys]), None)
    belongs = all(partition_for_key(k, 4, 6) == partition for k in keys)
    assert (refused is None) == belongs
    if refused is not None:
        assert refused[0] == ErrorCode.INVALID_RECORD and "belongs to partition" in refused[1]


def test_unkeyed_records_go_to_any_undeleted_partition_and_none_to_a_marked_one() -> None:
    batch = build_batch([(None, b"v")] * 3)
    assert all(_fence().check(TopicPartition("o", p), batch, None) is None for p in range(6))
    refused = _fence().check(TopicPartition("o", 6), batch, None)
    assert refused is not None and refused[0] == ErrorCode.INVALID_RECORD and "marked for deletion" in refused[1]


def test_a_declared_count_is_trusted_when_current_and_fenced_when_stale() -> None:
    misrouted = build_batch([(k, b"v") for k in (b"a", b"b", b"c", b"d")])
    current = with_declared_counts("app", {"o": 6})
    assert _fence().check(TopicPartition("o", 0), misrouted, current) is None
    stale = _fence().check(TopicPartition("o", 0), misrouted, with_declared_counts("app", {"o": 5}))
    assert stale is not None and stale[0] == ErrorCode.FENCED_LEADER_EPOCH
    other_topic = with_declared_counts("app", {"p": 5})  # declares nothing for o: keys are checked
    assert _fence().check(TopicPartition("o", 0), misrouted, other_topic) is not None


def test_plain_topics_are_never_looked_at() -> None:
    assert _fence().check(TopicPartition("plain", 0), b"not even records", None) is None


def test_a_batch_whose_keys_cannot_be_read_is_refused_by_name() -> None:
    """snappy (codec 2) cannot be decompressed here: refusing is the only way to keep the rule."""
    batch = bytearray(build_batch([(b"k", b"v")]))
    batch[22] |= 2  # attributes (int16 at offset 21): compression codec 2
    refused = _fence().check(TopicPartition("o", 0), bytes(batch), None)
    assert refused is not None and refused[0] == ErrorCode.INVALID_RECORD and "cannot read" in refused[1]
