"""The request/response pairs of ordered delivery across partition expansion and deletion
(KIP-253, parts 7 and 8, and what operators read of them), which no Kafka release has and kio
therefore cannot decode.

Layouts are specified in docs/protocol.md ("Ordered delivery APIs (KIP-253)") in the terms of
Kafka's JSON message schemas; this module is their one codec, used by the broker (requests in,
responses out) and by clients (the other way). The APIs live in a private key range, far above
Kafka's keys (which end below 100), so a Kafka release adding APIs can never collide with them:

    ConsumerGroupPosition              (key 10000) v0, flexible: a group member reports the
        positions of its partitions the coordinator asked for and learns the group's positions
        of the partitions it waits on (part 7), and says which of its partitions wait on a
        barrier, on what, and since when (so that operators can see a block)
    PartitionLeaderEpochsForPartitions (key 10001) v0, flexible: the leader epoch maps the
        controller wrote into partition state znodes at an expansion (leader_epoch_after_creation)
        and a deletion (leader_epoch_before_deletion) (part 8, steps 4.1 and 5.2)
    DescribeOrderedGroups              (key 10002) v0, flexible: what the coordinator knows of
        its groups' blocks (`odradek groups describe`, the dashboard); the KIP has no such API,
        but a block nobody can see looks like a stuck consumer

Flexible from v0 (KIP-482), as every new Kafka API is: requests use request header v2 and
responses header v1, and every struct ends in a tagged-field section, so later versions can add
fields a v0 reader skips. Unknown tags are read and dropped.

Decoding is bounded like wire_bounds.py's for kio: every count and length is checked against the
bytes left before anything is allocated (schema.py's Array and _take), and any malformed input,
invalid UTF-8 included, raises SchemaError, never anything else, so the broker answers garbage
with a closed connection and never crashes.
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from odradek.common.metadata import TopicPartition
from odradek.protocol.framing import FramingError, parse_request_header
from odradek.protocol.schema import (
    CompactArray,
    CompactNullableString,
    CompactString,
    Int16,
    Int32,
    Int64,
    SchemaError,
    Struct,
    TaggedFields,
    decode,
)

API_CONSUMER_GROUP_POSITION = 10000
API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS = 10001
API_DESCRIBE_ORDERED_GROUPS = 10002
#: (lowest, highest) version of each, as ApiVersions advertises them
VERSIONS: dict[int, tuple[int, int]] = {
    API_CONSUMER_GROUP_POSITION: (0, 0),
    API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS: (0, 0),
    API_DESCRIBE_ORDERED_GROUPS: (0, 0),
}
NAMES: dict[int, str] = {
    API_CONSUMER_GROUP_POSITION: "ConsumerGroupPosition",
    API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS: "PartitionLeaderEpochsForPartitions",
    API_DESCRIBE_ORDERED_GROUPS: "DescribeOrderedGroups",
}

#: the position of a partition nobody has reported (yet), and a leader epoch not known
UNKNOWN = -1
#: a BarrierOffset that means "until the group has read the partition waited on to its end"
#: (a partition fed by one marked for deletion, part 8 step 5), not an offset to reach
READ_TO_END = -1


class UnsupportedVersionError(SchemaError):
    """An api_key/api_version pair this module does not speak."""


# -- the Python side -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ReportedPosition:
    """A member's position of one of its partitions: the offset of the next record it will
    deliver, and the leader epoch of the last record before it (UNKNOWN if none was read): part
    7's condition resends a position when that epoch grows."""

    position: int
    last_leader_epoch: int = UNKNOWN


@dataclass(frozen=True, slots=True)
class BlockedPartition:
    """Why one of a member's partitions is held back, as the member's gate knows it: it waits
    until the group's position in ``waits_on`` (a partition of the same topic: the parent an
    expansion split, or a partition marked for deletion) reaches ``barrier_offset``, or, with
    READ_TO_END, until the group has read ``waits_on`` to its end; since ``blocked_since_ms``
    (the member's wall clock). Only operators read it: the coordinator decides nothing by it."""

    waits_on: int
    barrier_offset: int
    blocked_since_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupPositionRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    #: the positions of the partitions the coordinator asked this member for last time
    reported: Mapping[TopicPartition, ReportedPosition] = field(default_factory=dict)
    #: the partitions whose group position this member wants to know (its whole interest now)
    requested: tuple[TopicPartition, ...] = ()
    #: every partition of this member blocked on a barrier now (its whole blocked set: it
    #: replaces the one sent before, so a block that ends needs no message of its own)
    blocked: Mapping[TopicPartition, BlockedPartition] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PositionResult:
    position: int  # UNKNOWN (-1) when no member has reported one
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupPositionResponse:
    error_code: int
    throttle_time_ms: int = 0
    #: the group's position of every partition the request asked about
    positions: Mapping[TopicPartition, PositionResult] = field(default_factory=dict)
    #: this member's partitions whose position some member waits on: report them next time
    wanted: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionLeaderEpochsForPartitionsRequest:
    partitions: tuple[TopicPartition, ...]
    #: topics whose counts are wanted without any partition's maps (a producer's question)
    topics: tuple[str, ...] = ()

    def topic_names(self) -> list[str]:
        """Every topic the request names, in first-seen order (each gets its counts back)."""
        return list(dict.fromkeys([*(tp.topic for tp in self.partitions), *self.topics]))


@dataclass(frozen=True, slots=True)
class TopicPartitionCounts:
    """An ordered topic's initial_partition_count and undeleted_partition_count, as the
    answering broker's metadata holds them (-1 and -1 for a topic without ordered delivery),
    and its partition count (undeleted and marked for deletion, as Metadata counts them);
    UNKNOWN_TOPIC_OR_PARTITION when the broker's metadata does not know the topic."""

    error_code: int = 0
    initial_partition_count: int = UNKNOWN
    undeleted_partition_count: int = UNKNOWN
    partition_count: int = UNKNOWN

    @property
    def ordered(self) -> bool:
        return self.undeleted_partition_count >= 0


@dataclass(frozen=True, slots=True)
class PartitionLeaderEpochs:
    """One partition's KIP-253 leader epoch maps (partition -> leader epoch), None where the
    partition state znode has none: leader_epoch_after_creation is written when an ordered
    expansion creates the partition, leader_epoch_before_deletion when the partition is marked
    for deletion."""

    error_code: int = 0
    leader_epoch_after_creation: Mapping[int, int] | None = None
    leader_epoch_before_deletion: Mapping[int, int] | None = None


@dataclass(frozen=True, slots=True)
class PartitionLeaderEpochsForPartitionsResponse:
    partitions: Mapping[TopicPartition, PartitionLeaderEpochs]
    throttle_time_ms: int = 0
    #: every topic the request named
    counts: Mapping[str, TopicPartitionCounts] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DescribeOrderedGroupsRequest:
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OrderedGroupBlock:
    """One blocked partition of a group, as its coordinator holds it: the member that owns it
    and reported the block, the BlockedPartition it reported, and the group's last reported
    position of ``waits_on`` (UNKNOWN when its owner has not reported one this generation)."""

    member_id: str
    waits_on: int
    barrier_offset: int
    group_position: int
    blocked_since_ms: int


@dataclass(frozen=True, slots=True)
class OrderedGroupDescription:
    """One group's answer: NOT_COORDINATOR (and the other coordinator errors) from a broker
    that does not answer for it, GROUP_ID_NOT_FOUND for a group it does not have; else its
    generation and every partition blocked in it (none: no member reported a block)."""

    error_code: int = 0
    generation_id: int = UNKNOWN
    blocked: Mapping[TopicPartition, OrderedGroupBlock] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DescribeOrderedGroupsResponse:
    #: every group the request named, in its order
    groups: Mapping[str, OrderedGroupDescription]
    throttle_time_ms: int = 0


Request = Union[ConsumerGroupPositionRequest, PartitionLeaderEpochsForPartitionsRequest, DescribeOrderedGroupsRequest]
Response = Union[ConsumerGroupPositionResponse, PartitionLeaderEpochsForPartitionsResponse,
                 DescribeOrderedGroupsResponse]


# -- the wire side (docs/protocol.md) --------------------------------------------------------------

def _topics_of(item: Struct) -> CompactArray:
    """[Name, <item array>, _tagged]: Kafka's grouping of partitions under their topic."""
    return CompactArray(Struct(("name", CompactString), ("partitions", CompactArray(item)),
                               ("_tagged", TaggedFields)))


_PARTITION_INDEXES = CompactArray(Struct(("name", CompactString), ("partition_indexes", CompactArray(Int32)),
                                         ("_tagged", TaggedFields)))

_CONSUMER_GROUP_POSITION_REQUEST_V0 = Struct(
    ("group_id", CompactString),
    ("generation_id", Int32),
    ("member_id", CompactString),
    ("group_instance_id", CompactNullableString),
    ("reported_topics", _topics_of(Struct(("partition_index", Int32), ("position", Int64),
                                          ("last_leader_epoch", Int32), ("_tagged", TaggedFields)))),
    ("requested_topics", _PARTITION_INDEXES),
    ("blocked_topics", _topics_of(Struct(("partition_index", Int32), ("waits_on_partition", Int32),
                                         ("barrier_offset", Int64), ("blocked_since_ms", Int64),
                                         ("_tagged", TaggedFields)))),
    ("_tagged", TaggedFields),
)
_CONSUMER_GROUP_POSITION_RESPONSE_V0 = Struct(
    ("throttle_time_ms", Int32),
    ("error_code", Int16),
    ("topics", _topics_of(Struct(("partition_index", Int32), ("position", Int64), ("error_code", Int16),
                                 ("_tagged", TaggedFields)))),
    ("wanted_topics", _PARTITION_INDEXES),
    ("_tagged", TaggedFields),
)

_PARTITION_LEADER_EPOCHS_REQUEST_V0 = Struct(
    ("topics", _PARTITION_INDEXES),
    ("_tagged", TaggedFields),
)
_EPOCH_MAP = CompactArray(Struct(("partition_index", Int32), ("leader_epoch", Int32), ("_tagged", TaggedFields)),
                          nullable=True)
_PARTITION_LEADER_EPOCHS_RESPONSE_V0 = Struct(
    ("throttle_time_ms", Int32),
    ("topics", CompactArray(Struct(
        ("name", CompactString), ("error_code", Int16),
        ("initial_partition_count", Int32), ("undeleted_partition_count", Int32), ("partition_count", Int32),
        ("partitions", CompactArray(Struct(("partition_index", Int32), ("error_code", Int16),
                                           ("leader_epoch_after_creation", _EPOCH_MAP),
                                           ("leader_epoch_before_deletion", _EPOCH_MAP),
                                           ("_tagged", TaggedFields)))),
        ("_tagged", TaggedFields)))),
    ("_tagged", TaggedFields),
)

_DESCRIBE_ORDERED_GROUPS_REQUEST_V0 = Struct(
    ("groups", CompactArray(CompactString)),
    ("_tagged", TaggedFields),
)
_DESCRIBE_ORDERED_GROUPS_RESPONSE_V0 = Struct(
    ("throttle_time_ms", Int32),
    ("groups", CompactArray(Struct(
        ("group_id", CompactString), ("error_code", Int16), ("generation_id", Int32),
        ("blocked_topics", _topics_of(Struct(("partition_index", Int32), ("member_id", CompactString),
                                             ("waits_on_partition", Int32), ("barrier_offset", Int64),
                                             ("group_position", Int64), ("blocked_since_ms", Int64),
                                             ("_tagged", TaggedFields)))),
        ("_tagged", TaggedFields)))),
    ("_tagged", TaggedFields),
)

_REQUEST_HEADER_V2_FIXED = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")


def api_key_of(req: Request | Response) -> int:
    if isinstance(req, (ConsumerGroupPositionRequest, ConsumerGroupPositionResponse)):
        return API_CONSUMER_GROUP_POSITION
    if isinstance(req, (PartitionLeaderEpochsForPartitionsRequest, PartitionLeaderEpochsForPartitionsResponse)):
        return API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS
    if isinstance(req, (DescribeOrderedGroupsRequest, DescribeOrderedGroupsResponse)):
        return API_DESCRIBE_ORDERED_GROUPS
    raise TypeError(f"not an ordered delivery message: {type(req).__name__}")


def supported(api_key: int, api_version: int) -> bool:
    lo_hi = VERSIONS.get(api_key)
    return lo_hi is not None and lo_hi[0] <= api_version <= lo_hi[1]


def _check_version(api_key: int, api_version: int) -> None:
    if not supported(api_key, api_version):
        raise UnsupportedVersionError(f"api_key {api_key} version {api_version} not supported "
                                      f"(supported: {VERSIONS})")


def _grouped(tps: Iterable[TopicPartition]) -> list[tuple[str, list[int], dict[int, bytes]]]:
    """[(topic, [partition, ...], no tags)] in first-seen topic order, duplicates dropped."""
    topics: dict[str, dict[int, None]] = {}
    for topic, partition in tps:
        topics.setdefault(topic, {})[partition] = None
    return [(topic, list(partitions), {}) for topic, partitions in topics.items()]


def _by_topic(items: Mapping[TopicPartition, Any]) -> dict[str, list[tuple[int, Any]]]:
    topics: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), value in items.items():
        topics.setdefault(topic, []).append((partition, value))
    return topics


def _epoch_map(value: Mapping[int, int] | None) -> list[tuple[int, int, dict[int, bytes]]] | None:
    return None if value is None else [(p, e, {}) for p, e in sorted(value.items())]


def _decoded(t: Struct, body: bytes | memoryview) -> tuple[Any, ...]:
    """The whole body as ``t``; SchemaError for anything malformed, invalid UTF-8 included."""
    try:
        value, _ = decode(t, body)
    except SchemaError:
        raise
    except (ValueError, IndexError) as exc:  # UnicodeDecodeError is a ValueError
        raise SchemaError(f"malformed body: {exc}") from None
    return tuple(value)


def _encode_body(message: Request | Response, out: list[bytes]) -> None:
    if isinstance(message, ConsumerGroupPositionRequest):
        reported: list[Any] = [(topic, [(p, r.position, r.last_leader_epoch, {}) for p, r in entries], {})
                               for topic, entries in _by_topic(message.reported).items()]
        blocked: list[Any] = [(topic, [(p, b.waits_on, b.barrier_offset, b.blocked_since_ms, {})
                                       for p, b in entries], {})
                              for topic, entries in _by_topic(message.blocked).items()]
        _CONSUMER_GROUP_POSITION_REQUEST_V0.encode(
            (message.group_id, message.generation_id, message.member_id, message.group_instance_id,
             reported, _grouped(message.requested), blocked, {}), out)
    elif isinstance(message, ConsumerGroupPositionResponse):
        topics: list[Any] = [(topic, [(p, r.position, r.error_code, {}) for p, r in entries], {})
                             for topic, entries in _by_topic(message.positions).items()]
        _CONSUMER_GROUP_POSITION_RESPONSE_V0.encode(
            (message.throttle_time_ms, message.error_code, topics, _grouped(message.wanted), {}), out)
    elif isinstance(message, PartitionLeaderEpochsForPartitionsRequest):
        grouped = _grouped(message.partitions)
        named = {topic for topic, _, _ in grouped}
        grouped += [(topic, [], {}) for topic in dict.fromkeys(message.topics) if topic not in named]
        _PARTITION_LEADER_EPOCHS_REQUEST_V0.encode((grouped, {}), out)
    elif isinstance(message, DescribeOrderedGroupsRequest):
        _DESCRIBE_ORDERED_GROUPS_REQUEST_V0.encode((list(dict.fromkeys(message.groups)), {}), out)
    elif isinstance(message, DescribeOrderedGroupsResponse):
        groups: list[Any] = [
            (group_id, d.error_code, d.generation_id,
             [(topic, [(p, b.member_id, b.waits_on, b.barrier_offset, b.group_position, b.blocked_since_ms, {})
                       for p, b in entries], {}) for topic, entries in _by_topic(d.blocked).items()], {})
            for group_id, d in message.groups.items()]
        _DESCRIBE_ORDERED_GROUPS_RESPONSE_V0.encode((message.throttle_time_ms, groups, {}), out)
    else:
        by_topic = _by_topic(message.partitions)
        entries_of: list[Any] = []
        for topic in dict.fromkeys([*by_topic, *message.counts]):
            c = message.counts.get(topic, TopicPartitionCounts())
            entries_of.append((topic, c.error_code, c.initial_partition_count, c.undeleted_partition_count,
                               c.partition_count, [(p, e.error_code, _epoch_map(e.leader_epoch_after_creation),
                                 _epoch_map(e.leader_epoch_before_deletion), {})
                                for p, e in by_topic.get(topic, [])], {}))
        _PARTITION_LEADER_EPOCHS_RESPONSE_V0.encode((message.throttle_time_ms, entries_of, {}), out)


def _with_size(parts: list[bytes]) -> bytes:
    """Fill the placeholder at parts[0] with the int32 size of everything after it, then join."""
    parts[0] = _INT32.pack(sum(map(len, parts)))
    return b"".join(parts)


def encode_request(req: Request, correlation_id: int, client_id: str | None, api_version: int = 0) -> bytes:
    """A complete frame: size prefix, request header v2 (flexible), body."""
    api_key = api_key_of(req)
    _check_version(api_key, api_version)
    parts: list[bytes] = [b"", _REQUEST_HEADER_V2_FIXED.pack(api_key, api_version, correlation_id)]
    if client_id is None:
        parts.append(b"\xff\xff")
    else:
        data = client_id.encode("utf-8")
        parts += [struct.pack(">h", len(data)), data]
    TaggedFields.encode({}, parts)
    _encode_body(req, parts)
    return _with_size(parts)


def decode_request(api_key: int, api_version: int, body: bytes | memoryview) -> Request:
    """Decode the bytes after the request header; the whole body must be consumed."""
    _check_version(api_key, api_version)
    if api_key == API_CONSUMER_GROUP_POSITION:
        group_id, generation_id, member_id, instance_id, reported_topics, requested_topics, blocked_topics, _ = \
            _decoded(_CONSUMER_GROUP_POSITION_REQUEST_V0, body)
        reported = {TopicPartition(topic, p): ReportedPosition(position, epoch)
                    for topic, entries, _ in reported_topics for p, position, epoch, _ in entries}
        requested = tuple(dict.fromkeys(TopicPartition(topic, p) for topic, ps, _ in requested_topics for p in ps))
        blocked = {TopicPartition(topic, p): BlockedPartition(waits_on, barrier, since)
                   for topic, entries, _ in blocked_topics for p, waits_on, barrier, since, _ in entries}
        return ConsumerGroupPositionRequest(group_id, generation_id, member_id, instance_id, reported, requested,
                                            blocked)
    if api_key == API_DESCRIBE_ORDERED_GROUPS:
        groups, _ = _decoded(_DESCRIBE_ORDERED_GROUPS_REQUEST_V0, body)
        return DescribeOrderedGroupsRequest(tuple(dict.fromkeys(groups)))
    topics, _ = _decoded(_PARTITION_LEADER_EPOCHS_REQUEST_V0, body)
    return PartitionLeaderEpochsForPartitionsRequest(
        tuple(dict.fromkeys(TopicPartition(topic, p) for topic, ps, _ in topics for p in ps)),
        tuple(dict.fromkeys(topic for topic, ps, _ in topics if not ps)))


def decode_request_frame(frame: bytes | memoryview) -> tuple[int, int, int, str | None, Request]:
    """(api_key, api_version, correlation_id, client_id, request) of a whole frame without its
    size prefix; SchemaError (UnsupportedVersionError for a version not spoken) for anything
    else."""
    try:
        api_key, api_version, correlation_id, client_id, header_end = parse_request_header(frame, flexible=True)
    except FramingError as exc:
        raise SchemaError(str(exc)) from None
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    return api_key, api_version, correlation_id, client_id, decode_request(api_key, api_version,
                                                                            view[header_end:])


def encode_response(api_key: int, api_version: int, correlation_id: int, resp: Response) -> bytes:
    """A complete frame: size prefix, response header v1 (correlation id, tagged fields), body."""
    _check_version(api_key, api_version)
    if api_key_of(resp) != api_key:
        raise TypeError(f"{type(resp).__name__} is not an answer to api_key {api_key}")
    parts: list[bytes] = [b"", _INT32.pack(correlation_id), b"\x00"]
    _encode_body(resp, parts)
    return _with_size(parts)


def parse_response_header(frame: bytes | memoryview) -> tuple[int, memoryview]:
    """Split a response frame (size prefix removed) into (correlation_id, body)."""
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(view) < _INT32.size:
        raise SchemaError("response shorter than its header")
    try:
        _, body_at = TaggedFields.decode(view, _INT32.size)
    except IndexError as exc:
        raise SchemaError(f"response header: {exc}") from None
    return _INT32.unpack_from(view, 0)[0], view[body_at:]


def decode_response(api_key: int, api_version: int, body: bytes | memoryview) -> Response:
    """Decode the bytes after the response header."""
    _check_version(api_key, api_version)
    if api_key == API_CONSUMER_GROUP_POSITION:
        throttle, error_code, topics, wanted_topics, _ = _decoded(_CONSUMER_GROUP_POSITION_RESPONSE_V0, body)
        positions = {TopicPartition(topic, p): PositionResult(position, code)
                     for topic, entries, _ in topics for p, position, code, _ in entries}
        wanted = tuple(TopicPartition(topic, p) for topic, ps, _ in wanted_topics for p in ps)
        return ConsumerGroupPositionResponse(error_code, throttle, positions, wanted)
    if api_key == API_DESCRIBE_ORDERED_GROUPS:
        throttle, groups, _ = _decoded(_DESCRIBE_ORDERED_GROUPS_RESPONSE_V0, body)
        return DescribeOrderedGroupsResponse({
            group_id: OrderedGroupDescription(code, generation, {
                TopicPartition(topic, p): OrderedGroupBlock(member, waits_on, barrier, position, since)
                for topic, entries, _ in blocked_topics
                for p, member, waits_on, barrier, position, since, _ in entries})
            for group_id, code, generation, blocked_topics, _ in groups}, throttle)
    throttle, topics, _ = _decoded(_PARTITION_LEADER_EPOCHS_RESPONSE_V0, body)
    partitions = {
        TopicPartition(topic, p): PartitionLeaderEpochs(
            code,
            None if after is None else {q: e for q, e, _ in after},
            None if before is None else {q: e for q, e, _ in before})
        for topic, _, _, _, _, entries, _ in topics for p, code, after, before, _ in entries}
    counts = {topic: TopicPartitionCounts(code, initial, undeleted, total)
              for topic, code, initial, undeleted, total, _, _ in topics}
    return PartitionLeaderEpochsForPartitionsResponse(partitions, throttle, counts)


def error_codes(resp: Response) -> list[int]:
    """Every error code of a response (Kafka's errorCounts: the top-level one, if the response
    has one, and every partition's), for the broker's request error counts."""
    if isinstance(resp, ConsumerGroupPositionResponse):
        return [resp.error_code, *(r.error_code for r in resp.positions.values())]
    if isinstance(resp, DescribeOrderedGroupsResponse):
        return [d.error_code for d in resp.groups.values()]
    return [*(c.error_code for c in resp.counts.values()), *(e.error_code for e in resp.partitions.values())]
