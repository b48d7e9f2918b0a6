"""Kafka's internal topics (org.apache.kafka.common.internals.Topic): the topics the brokers
create and write for themselves. Their names are shared by every layer that must treat them
apart: the group coordinator that owns `__consumer_offsets`, the broker APIs that refuse to
create, delete or repartition them for a client, Metadata's is_internal flag, and the tools
that mark or hide them. One definition, so a new internal topic is protected everywhere at once.
"""
from __future__ import annotations

#: consumer groups' committed offsets and group metadata (Kafka's GROUP_METADATA_TOPIC_NAME)
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
#: the transaction coordinator's log (Kafka's TRANSACTION_STATE_TOPIC_NAME)
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"

INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})


def is_internal(topic: str | None) -> bool:
    """Whether ``topic`` is one of Kafka's internal topics (Kafka's Topic.isInternal)."""
    return topic in INTERNAL_TOPICS
