"""The parts of Kafka's consumer protocol (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, the bytes members of a group with protocol type "consumer" exchange
through JoinGroup and SyncGroup) that the coordinator and the CLI read.

The coordinator treats these bytes as opaque except to learn which topics a group subscribes
to: OffsetDelete refuses the offsets of subscribed topics (GROUP_SUBSCRIBED_TO_TOPIC), as in
Kafka. Every version starts with the same fields, so one reader serves v0 to v3.
"""
from __future__ import annotations

from odradek.protocol.schema import Array, Int16, Int32, SchemaError, String, Struct, decode

_SUBSCRIPTION_HEAD = Struct(("version", Int16), ("topics", Array(String)))
_ASSIGNMENT_HEAD = Struct(("version", Int16),
                          ("assigned_partitions", Array(Struct(("topic", String), ("partitions", Array(Int32))))))


def subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a subscription; None if the bytes are not a consumer subscription."""
    try:
        (version, topics), _ = decode(_SUBSCRIPTION_HEAD, metadata, exact=False)
    except (SchemaError, ValueError):
        return None
    return set(topics) if version >= 0 else None


def assignment_partitions(assignment: bytes) -> list[tuple[str, int]] | None:
    """(topic, partition) pairs of an assignment; [] for empty bytes, None if unreadable."""
    if not assignment:
        return []
    try:
        (_version, topics), _ = decode(_ASSIGNMENT_HEAD, assignment, exact=False)
    except (SchemaError, ValueError):
        return None
    return [(topic, p) for topic, partitions in topics for p in partitions]
