"""The KIP-253 messages (ConsumerGroupPosition, PartitionLeaderEpochsForPartitions,
DescribeOrderedGroups): every message
survives a round trip, the bytes are those docs/protocol.md specifies, and no input, however
malformed, raises anything but SchemaError."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.common.metadata import TopicPartition
from odradek.protocol import ordered_delivery_api as api
from odradek.protocol.schema import SchemaError

topics = st.text(min_size=1, max_size=8)
int32s = st.integers(-(2**31), 2**31 - 1)
tps = st.builds(TopicPartition, topics, int32s)
epoch_maps = st.none() | st.dictionaries(int32s, int32s, min_size=1, max_size=5)

group_position_requests = st.builds(
    api.ConsumerGroupPositionRequest, st.text(max_size=10), int32s, st.text(max_size=10), st.none() | st.text(max_size=5),
    st.dictionaries(tps, st.builds(api.ReportedPosition, st.integers(-1, 2**63 - 1), int32s), max_size=6),
    st.lists(tps, max_size=6, unique=True).map(tuple),
    st.dictionaries(tps, st.builds(api.BlockedPartition, int32s, st.integers(-1, 2**63 - 1),
                                   st.integers(-(2**63), 2**63 - 1)), max_size=4))
group_position_responses = st.builds(
    api.ConsumerGroupPositionResponse, st.integers(-1, 120), int32s,
    st.dictionaries(tps, st.builds(api.PositionResult, st.integers(-1, 2**63 - 1), st.integers(-1, 120)),
                    max_size=6),
    st.lists(tps, max_size=6, unique=True).map(tuple))
epochs_requests = st.builds(api.PartitionLeaderEpochsForPartitionsRequest,
                            st.lists(tps, max_size=8, unique=True).map(tuple),
                            st.lists(topics, max_size=3, unique=True).map(tuple))
describe_requests = st.builds(api.DescribeOrderedGroupsRequest, st.lists(st.text(max_size=8), max_size=4,
                                                                          unique=True).map(tuple))
group_blocks = st.builds(api.OrderedGroupBlock, st.text(max_size=8), int32s, st.integers(-1, 2**63 - 1),
                         st.integers(-1, 2**63 - 1), st.integers(-(2**63), 2**63 - 1))
describe_responses = st.builds(api.DescribeOrderedGroupsResponse, st.dictionaries(
    st.text(max_size=8), st.builds(api.OrderedGroupDescription, st.integers(-1, 120), int32s,
                                   st.dictionaries(tps, group_blocks, max_size=4)), max_size=4), int32s)
partition_counts = st.builds(api.TopicPartitionCounts, st.integers(-1, 120), int32s, int32s, int32s)


@st.composite
def epochs_responses(draw: st.DrawFn) -> api.PartitionLeaderEpochsForPartitionsResponse:
    """Every topic of the partitions has its counts (as a broker answers), and maybe more topics."""
    partitions = draw(st.dictionaries(
        tps, st.builds(api.PartitionLeaderEpochs, st.integers(-1, 120), epoch_maps, epoch_maps), max_size=6))
    extra = draw(st.lists(topics, max_size=3, unique=True))
    counts = {t: draw(partition_counts) for t in dict.fromkeys([*(tp.topic for tp in partitions), *extra])}
    return api.PartitionLeaderEpochsForPartitionsResponse(partitions, draw(int32s), counts)


def _grouped_order(tps: tuple[TopicPartition, ...]) -> tuple[TopicPartition, ...]:
    """The order a decoder sees: partitions grouped under their topic, topics in first-seen order."""
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp)
    return tuple(tp for group in by_topic.values() for tp in group)


def _request_round_trip(req: api.Request) -> api.Request:
    frame = api.encode_request(req, 42, "client")
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    key, version, corr, client_id, decoded = api.decode_request_frame(memoryview(frame)[4:])
    assert (key, version, corr, client_id) == (api.api_key_of(req), 0, 42, "client")
    return decoded


def _response_round_trip(resp: api.Response) -> api.Response:
    key = api.api_key_of(resp)
    frame = api.encode_response(key, 0, 7, resp)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    corr, body = api.parse_response_header(frame[4:])
    assert corr == 7
    return api.decode_response(key, 0, body)


@settings(max_examples=150, deadline=None)
@given(req=group_position_requests)
def test_consumer_group_position_request_round_trip(req: api.ConsumerGroupPositionRequest) -> None:
    decoded = _request_round_trip(req)
    assert isinstance(decoded, api.ConsumerGroupPositionRequest)
    assert decoded.reported == req.reported
    assert decoded.requested == _grouped_order(req.requested)
    assert decoded.blocked == req.blocked
    assert (decoded.group_id, decoded.generation_id, decoded.member_id, decoded.group_instance_id) == (
        req.group_id, req.generation_id, req.member_id, req.group_instance_id)


@settings(max_examples=150, deadline=None)
@given(resp=group_position_responses)
def test_consumer_group_position_response_round_trip(resp: api.ConsumerGroupPositionResponse) -> None:
    decoded = _response_round_trip(resp)
    assert isinstance(decoded, api.ConsumerGroupPositionResponse)
    assert (decoded.error_code, decoded.throttle_time_ms, decoded.positions) == (
        resp.error_code, resp.throttle_time_ms, resp.positions)
    assert decoded.wanted == _grouped_order(resp.wanted)


@settings(max_examples=150, deadline=None)
@given(req=epochs_requests, resp=epochs_responses())
def test_partition_leader_epochs_round_trip(req: api.PartitionLeaderEpochsForPartitionsRequest,
                                            resp: api.PartitionLeaderEpochsForPartitionsResponse) -> None:
    decoded_req = _request_round_trip(req)
    assert isinstance(decoded_req, api.PartitionLeaderEpochsForPartitionsRequest)
    assert decoded_req.partitions == _grouped_order(req.partitions)
    assert set(decoded_req.topic_names()) == {tp.topic for tp in req.partitions} | set(req.topics)
    assert _response_round_trip(resp) == resp


@settings(max_examples=150, deadline=None)
@given(req=describe_requests, resp=describe_responses)
def test_describe_ordered_groups_round_trip(req: api.DescribeOrderedGroupsRequest,
                                            resp: api.DescribeOrderedGroupsResponse) -> None:
    assert _request_round_trip(req) == req
    assert _response_round_trip(resp) == resp


def test_the_blocked_set_defaults_to_empty_for_callers_that_do_not_name_it() -> None:
    req = api.ConsumerGroupPositionRequest("g", 1, "m", None, {}, ())
    assert req.blocked == {}
    decoded = _request_round_trip(req)
    assert isinstance(decoded, api.ConsumerGroupPositionRequest) and decoded.blocked == {}


def test_consumer_group_position_request_bytes_are_the_documented_layout() -> None:
    """Request header v2 and the v0 body field by field, as docs/protocol.md lists them."""
    req = api.ConsumerGroupPositionRequest("g", 3, "m", None, {TopicPartition("t", 1): api.ReportedPosition(500, 2)},
                                           (TopicPartition("t", 0),),
                                           {TopicPartition("t", 2): api.BlockedPartition(0, 800, 1_700_000_000_000)})
    assert api.encode_request(req, 9, "c")[4:] == b"".join([
        struct.pack(">hhih", 10000, 0, 9, 1), b"c", b"\x00",   # header: key, version, correlation, client id, tags
        b"\x02g", struct.pack(">i", 3), b"\x02m", b"\x00",     # GroupId, GenerationId, MemberId, GroupInstanceId null
        b"\x02", b"\x02t", b"\x02", struct.pack(">iqi", 1, 500, 2), b"\x00", b"\x00",  # ReportedTopics
        b"\x02", b"\x02t", b"\x02", struct.pack(">i", 0), b"\x00",                   # RequestedTopics
        b"\x02", b"\x02t", b"\x02", struct.pack(">iiqq", 2, 0, 800, 1_700_000_000_000),  # BlockedTopics[t][2]
        b"\x00", b"\x00",                                                             # partition, topic tags
        b"\x00",                                                                     # tagged fields
    ])


def test_describe_ordered_groups_bytes_are_the_documented_layout() -> None:
    assert api.encode_request(api.DescribeOrderedGroupsRequest(("g",)), 4, "c")[4:] == b"".join([
        struct.pack(">hhih", 10002, 0, 4, 1), b"c", b"\x00",  # header v2
        b"\x02", b"\x02g", b"\x00",                           # Groups ["g"], tagged fields
    ])
    resp = api.DescribeOrderedGroupsResponse({"g": api.OrderedGroupDescription(0, 5, {
        TopicPartition("t", 3): api.OrderedGroupBlock("m", 1, api.READ_TO_END, 40, 1000)})})
    assert api.encode_response(10002, 0, 6, resp)[4:] == b"".join([
        struct.pack(">i", 6), b"\x00",                           # header v1
        struct.pack(">i", 0),                                    # ThrottleTimeMs
        b"\x02", b"\x02g", struct.pack(">hi", 0, 5),             # Groups[g]: ErrorCode, GenerationId
        b"\x02", b"\x02t", b"\x02", struct.pack(">i", 3), b"\x02m",  # BlockedTopics[t]: PartitionIndex 3, MemberId
        struct.pack(">iqqq", 1, -1, 40, 1000),                   # WaitsOn, Barrier (to its end), GroupPosition, Since
        b"\x00", b"\x00", b"\x00", b"\x00",                       # partition, topic, group, top-level tags
    ])


def test_partition_leader_epochs_response_bytes_are_the_documented_layout() -> None:
    resp = api.PartitionLeaderEpochsForPartitionsResponse(
        {TopicPartition("t", 4): api.PartitionLeaderEpochs(0, {0: 7}, None)}, throttle_time_ms=0,
        counts={"t": api.TopicPartitionCounts(0, 4, 6, 7)})
    assert api.encode_response(10001, 0, 5, resp)[4:] == b"".join([
        struct.pack(">i", 5), b"\x00",                          # header v1: correlation id, tags
        struct.pack(">i", 0),                                   # ThrottleTimeMs
        b"\x02", b"\x02t", struct.pack(">hiii", 0, 4, 6, 7),    # Topics[t]: ErrorCode, Initial/Undeleted/PartitionCount
        b"\x02", struct.pack(">ih", 4, 0),                      # Partitions[4], ErrorCode
        b"\x02", struct.pack(">ii", 0, 7), b"\x00",             # LeaderEpochAfterCreation {0: 7}
        b"\x00",                                                # LeaderEpochBeforeDeletion null
        b"\x00", b"\x00", b"\x00",                              # partition, topic, top-level tags
    ])


def test_unknown_tagged_fields_are_skipped() -> None:
    """A later version's tagged field (tag 0, 3 bytes) in the body's closing section is read and dropped."""
    frame = bytearray(api.encode_request(api.PartitionLeaderEpochsForPartitionsRequest((TopicPartition("t", 0),)),
                                         1, None))
    frame[-1:] = b"\x01\x00\x03abc"
    _, _, _, client_id, decoded = api.decode_request_frame(bytes(frame[4:]))
    assert client_id is None
    assert decoded == api.PartitionLeaderEpochsForPartitionsRequest((TopicPartition("t", 0),))


def test_unsupported_version_is_refused() -> None:
    frame = bytearray(api.encode_request(api.PartitionLeaderEpochsForPartitionsRequest(()), 1, "c"))
    frame[6:8] = struct.pack(">h", 1)
    with pytest.raises(api.UnsupportedVersionError):
        api.decode_request_frame(bytes(frame[4:]))
    with pytest.raises(api.UnsupportedVersionError):
        api.encode_request(api.PartitionLeaderEpochsForPartitionsRequest(()), 1, "c", api_version=1)


def _sample_frames() -> list[bytes]:
    tp = TopicPartition("topic", 3)
    return [api.encode_request(r, 1, "c")[4:] for r in (
        api.ConsumerGroupPositionRequest("group", 5, "member", "instance", {tp: api.ReportedPosition(10, 1)}, (tp,)),
        api.ConsumerGroupPositionRequest("group", 5, "member", None, {}, (tp,),
                                         {tp: api.BlockedPartition(0, 99, 1_700_000_000_000)}),
        api.PartitionLeaderEpochsForPartitionsRequest((tp, TopicPartition("other", 0))),
        api.DescribeOrderedGroupsRequest(("group", "other")),
    )]


@pytest.mark.parametrize("frame", _sample_frames())
def test_every_truncation_is_a_schema_error(frame: bytes) -> None:
    for end in range(len(frame)):
        with pytest.raises(SchemaError):
            api.decode_request_frame(frame[:end])
    with pytest.raises(SchemaError, match="trailing"):
        api.decode_request_frame(frame + b"\x00")


@pytest.mark.parametrize("body,why", [
    (b"\xff\xff\xff\xff\x0f", "exceeds the remaining bytes|need"),   # topics count 2^32 - 2
    (b"\x02\xff\xff\xff\x7f", "need"),                                # a topic name of 2^28 bytes
    (b"\x02\x02\xff\x02" + struct.pack(">i", 0) + b"\x00\x00", "malformed"),  # invalid UTF-8 in a name
    (b"\x02\x02t\xff\xff\xff\xff\xff\x01", "varint longer"),
])
def test_what_would_allocate_or_crash_is_refused(body: bytes, why: str) -> None:
    header = struct.pack(">hhih", 10001, 0, 1, -1) + b"\x00"
    with pytest.raises(SchemaError, match=why):
        api.decode_request_frame(header + body)


@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from([10000, 10001, 10002]), body=st.binary(max_size=64))
def test_random_bodies_raise_only_schema_error(key: int, body: bytes) -> None:
    frame = struct.pack(">hhih", key, 0, 1, -1) + b"\x00" + body
    try:
        api.decode_request_frame(frame)
    except SchemaError:
        pass


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_requests_raise_only_schema_error(data: st.DataObject) -> None:
    frame = bytearray(data.draw(st.sampled_from(_sample_frames())))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(8, len(frame) - 1))] = data.draw(st.integers(0, 255))
    try:
        api.decode_request_frame(bytes(frame))
    except SchemaError:
        pass


def test_error_codes_of_a_response() -> None:
    resp = api.ConsumerGroupPositionResponse(0, 0, {TopicPartition("t", 0): api.PositionResult(-1, 3)})
    assert sorted(api.error_codes(resp)) == [0, 3]
    epochs = api.PartitionLeaderEpochsForPartitionsResponse({TopicPartition("t", 0): api.PartitionLeaderEpochs(7)})
    assert api.error_codes(epochs) == [7]
    described = api.DescribeOrderedGroupsResponse({"a": api.OrderedGroupDescription(16), "b": api.OrderedGroupDescription()})
    assert api.error_codes(described) == [16, 0]


# -- docs/protocol.md is the specification: the codec must say the same --------------------------

def _documented_schemas() -> dict[tuple[int, str], dict[str, object]]:
    """(apiKey, type) -> the JSON schema of every block in the ordered delivery section."""
    import json
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()
    section = text.split("## Ordered delivery APIs (KIP-253)")[1].split("\n## ")[0]
    schemas = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)]
    return {(int(s["apiKey"]), str(s["type"])): s for s in schemas}


def _wire_type(spec: dict[str, object]) -> str:
    """The codec type a documented field must have, in flexible versions."""
    nullable = "nullableVersions" in spec
    kind = str(spec["type"])
    if kind.startswith("[]"):
        item = kind[2:]
        inner = (_struct_shape(spec["fields"]) if "fields" in spec  # type: ignore[arg-type]
                 else _wire_type({"type": item}))
        return f"CompactArray({inner}, nullable={nullable})"
    if kind == "string":
        return "CompactNullableString" if nullable else "CompactString"
    return {"int16": "Int16", "int32": "Int32", "int64": "Int64"}[kind]


def _struct_shape(fields: list[dict[str, object]]) -> str:
    return "Struct(" + ", ".join(_wire_type(f) for f in fields) + ", TaggedFields)"


def _codec_shape(t: object) -> str:
    from odradek.protocol import schema

    if isinstance(t, schema.Struct):
        return "Struct(" + ", ".join(_codec_shape(x) for x in t.types) + ")"
    if isinstance(t, schema.CompactArray):
        return f"CompactArray({_codec_shape(t.item)}, nullable={t.nullable})"
    names = {id(schema.CompactString): "CompactString", id(schema.CompactNullableString): "CompactNullableString",
             id(schema.Int16): "Int16", id(schema.Int32): "Int32", id(schema.Int64): "Int64",
             id(schema.TaggedFields): "TaggedFields"}
    return names[id(t)]


@pytest.mark.parametrize("key,kind,codec", [
    (10000, "request", api._CONSUMER_GROUP_POSITION_REQUEST_V0),
    (10000, "response", api._CONSUMER_GROUP_POSITION_RESPONSE_V0),
    (10001, "request", api._PARTITION_LEADER_EPOCHS_REQUEST_V0),
    (10001, "response", api._PARTITION_LEADER_EPOCHS_RESPONSE_V0),
    (10002, "request", api._DESCRIBE_ORDERED_GROUPS_REQUEST_V0),
    (10002, "response", api._DESCRIBE_ORDERED_GROUPS_RESPONSE_V0),
])
def test_the_codec_is_the_documented_schema(key: int, kind: str, codec: object) -> None:
    documented = _documented_schemas()[(key, kind)]
    assert (documented["validVersions"], documented["flexibleVersions"]) == ("0", "0+")
    assert api.VERSIONS[key] == (0, 0)
    assert _codec_shape(codec) == _struct_shape(documented["fields"])  # type: ignore[arg-type]
