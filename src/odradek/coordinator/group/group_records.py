"""The records of the `__consumer_offsets` topic, in Kafka's own formats (GroupMetadataManager's
key and value schemas), so its contents read the same as on Apache Kafka:

    key v1  OffsetCommitKey    group, topic, partition       value v3  OffsetCommitValue
    key v2  GroupMetadataKey   group                         value v3  GroupMetadataValue

A null value is a tombstone: the offset was deleted or expired, the group was deleted. Log
compaction keeps only the newest record per key, which is why a coordinator that takes over an
offsets partition reads it quickly.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.group_metadata import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata
from odradek.protocol.schema import (
    Array,
    Bytes,
    Int16,
    Int32,
    Int64,
    NullableString,
    SchemaError,
    String,
    Struct,
    decode,
    encode,
)

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_VERSION = Int16
_OFFSET_COMMIT_KEY = Struct(("group", String), ("topic", String), ("partition", Int32))
_GROUP_METADATA_KEY = Struct(("group", String))
_OFFSET_COMMIT_VALUE_V3 = Struct(("offset", Int64), ("leader_epoch", Int32), ("metadata", String),
                                 ("commit_timestamp", Int64))
_OFFSET_COMMIT_VALUE_V1 = Struct(("offset", Int64), ("metadata", String), ("commit_timestamp", Int64),
                                 ("expire_timestamp", Int64))
_MEMBER_V3 = Struct(("member_id", String), ("group_instance_id", NullableString), ("client_id", String),
                    ("client_host", String), ("rebalance_timeout", Int32), ("session_timeout", Int32),
                    ("subscription", Bytes), ("assignment", Bytes))
_GROUP_METADATA_VALUE_V3 = Struct(("protocol_type", String), ("generation", Int32), ("protocol", NullableString),
                                  ("leader", NullableString), ("current_state_timestamp", Int64),
                                  ("members", Array(_MEMBER_V3)))


class UnknownRecordError(ValueError):
    """A key or value version this broker cannot read."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    tp: TopicPartition


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class StoredGroup:
    """A group as its last GroupMetadataValue describes it."""

    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    # (member id, group instance id, client id, client host, rebalance timeout ms,
    #  session timeout ms, subscription, assignment): _MEMBER_V3's fields
    members: tuple[tuple[str, str | None, str, str, int, int, bytes, bytes], ...]


def offset_commit_key(group: str, tp: TopicPartition) -> bytes:
    return encode(_VERSION, OFFSET_COMMIT_KEY_VERSION) + encode(_OFFSET_COMMIT_KEY, (group, tp.topic, tp.partition))


def offset_tombstones(group: str, partitions: Iterable[TopicPartition]) -> list[tuple[bytes, bytes | None]]:
    """The records that delete the group's offsets of ``partitions``."""
    return [(offset_commit_key(group, tp), None) for tp in partitions]


def group_metadata_key(group: str) -> bytes:
    return encode(_VERSION, GROUP_METADATA_KEY_VERSION) + encode(_GROUP_METADATA_KEY, (group,))


def offset_commit_value(offset: OffsetAndMetadata) -> bytes:
    return encode(_VERSION, OFFSET_COMMIT_VALUE_VERSION) + encode(
        _OFFSET_COMMIT_VALUE_V3, (offset.offset, offset.leader_epoch, offset.metadata, offset.commit_timestamp))


def group_metadata_value(group: GroupMetadata, assignment: dict[str, bytes]) -> bytes:
    """The group with each member's subscription for the chosen protocol and its assignment."""
    members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.session_timeout_ms, m.metadata(group.protocol_name) if group.protocol_name else b"",
                assignment.get(m.member_id, b"")) for m in group.members.values()]
    return encode(_VERSION, GROUP_METADATA_VALUE_VERSION) + encode(_GROUP_METADATA_VALUE_V3, (
        group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
        group.state_timestamp_ms, members))


def read_key(key: bytes) -> OffsetKey | GroupKey:
    try:
        version, pos = decode(_VERSION, key, exact=False)
        if version in (0, 1):
            (group, topic, partition), _ = decode(_OFFSET_COMMIT_KEY, key, pos)
            return OffsetKey(group, TopicPartition(topic, partition))
        if version == 2:
            (group,), _ = decode(_GROUP_METADATA_KEY, key, pos)
            return GroupKey(group)
    except SchemaError as exc:
        raise UnknownRecordError(f"unreadable key: {exc}") from None
    raise UnknownRecordError(f"unknown key version {version}")


def _read_value(value: bytes, schemas: dict[int, Struct], what: str) -> tuple[int, tuple[Any, ...]]:
    """(version, fields) of a value whose version has a schema here; UnknownRecordError else."""
    try:
        version, pos = decode(_VERSION, value, exact=False)
        schema = schemas.get(version)
        if schema is None:
            raise UnknownRecordError(f"unknown {what} value version {version}")
        return version, decode(schema, value, pos, exact=False)[0]
    except SchemaError as exc:
        raise UnknownRecordError(f"unreadable {what} value: {exc}") from None


def read_offset_value(value: bytes) -> OffsetAndMetadata:
    version, fields = _read_value(value, {3: _OFFSET_COMMIT_VALUE_V3, 1: _OFFSET_COMMIT_VALUE_V1}, "offset")
    if version == 3:
        offset, epoch, metadata, ts = fields
        return OffsetAndMetadata(offset, epoch, metadata, ts)
    offset, metadata, ts, _expire = fields
    return OffsetAndMetadata(offset, -1, metadata, ts)


def read_group_value(value: bytes) -> StoredGroup:
    _, (ptype, generation, protocol, leader, ts, members) = _read_value(
        value, {GROUP_METADATA_VALUE_VERSION: _GROUP_METADATA_VALUE_V3}, "group")
    return StoredGroup(ptype, generation, protocol, leader, ts, tuple(members))


def group_from_stored(group_id: str, stored: StoredGroup) -> GroupMetadata:
    """Kafka's GroupMetadata.loadGroup: Stable if it had members, else Empty."""
    group = GroupMetadata(group_id, GroupState.STABLE if stored.members else GroupState.EMPTY,
                          stored.state_timestamp_ms)
    group.generation_id = stored.generation_id
    group.protocol_type = stored.protocol_type or None
    group.protocol_name = stored.protocol_name
    for member_id, instance_id, client_id, host, rebalance_ms, session_ms, subscription, assignment in stored.members:
        protocols = [(stored.protocol_name, subscription)] if stored.protocol_name else []
        group.add(MemberMetadata(member_id, instance_id, client_id, host, rebalance_ms, session_ms,
                                 stored.protocol_type, protocols, assignment=assignment), None)
    group.leader_id = stored.leader_id if stored.leader_id in group.members else group.leader_id
    group.subscribed = group.compute_subscribed_topics()
    return group
