"""The controller APIs' wire format, plus the schema codec and error codes beneath them."""
import struct
import threading
import time

import pytest

from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition
from odradek.protocol import controller_api, schema
from odradek.protocol.controller_api import (
    API_CONTROLLED_SHUTDOWN,
    API_LEADER_AND_ISR,
    API_STOP_REPLICA,
    API_UPDATE_METADATA,
    VERSIONS,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    ControllerResponse,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UnsupportedVersionError,
    UpdateMetadataRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    parse_response_header,
)
from odradek.protocol.errors import RETRIABLE, ErrorCode, is_retriable
from odradek.protocol.framing import FrameBuffer, parse_request_header
from odradek.protocol.schema import SchemaError

TP_A0, TP_A1, TP_B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def one_frame(data: bytes) -> memoryview:
    frames = FrameBuffer().feed(data)
    assert len(frames) == 1
    return frames[0]


def request_round_trip(req, correlation_id=42, client_id="controller-1"):
    frame = one_frame(encode_request(req, correlation_id, client_id))
    key, version, corr, cid, end = parse_request_header(frame)
    assert (version, corr, cid) == (VERSIONS[key], correlation_id, client_id)
    return key, decode_request(key, version, frame[end:])


# --- requests -----------------------------------------------------------------------------

def test_golden_leader_and_isr_v2():
    req = LeaderAndIsrRequest(
        controller_id=1, controller_epoch=2, broker_epoch=3,
        partition_states=(PartitionState(TopicPartition("t", 0), controller_epoch=2, leader=1,
                                         leader_epoch=0, isr=(1,), zk_version=0, replicas=(1,),
                                         is_new=True),),
        live_leaders=(BrokerInfo(1, "h", 9092),),
    )
    expected = bytes.fromhex(
        "0000005a"             # size: 90 = 11 header + 79 body
        "0004" "0002"          # api_key 4, api_version 2
        "00000007"             # correlation_id 7
        "0001" "63"            # client_id "c"
        "00000001"             # ControllerId 1
        "00000002"             # ControllerEpoch 2
        "0000000000000003"     # BrokerEpoch 3 (int64)
        "00000001"             # TopicStates: 1 topic
        "0001" "74"            #   TopicName "t"
        "00000001"             #   PartitionStates: 1 partition
        "00000000"             #     PartitionIndex 0
        "00000002"             #     ControllerEpoch 2
        "00000001"             #     Leader 1
        "00000000"             #     LeaderEpoch 0
        "00000001" "00000001"  #     Isr [1]
        "00000000"             #     ZkVersion 0
        "00000001" "00000001"  #     Replicas [1]
        "01"                   #     IsNew true
        "00000001"             # LiveLeaders: 1 broker
        "00000001"             #   BrokerId 1
        "0001" "68"            #   HostName "h"
        "00002384"             #   Port 9092
    )
    assert encode_request(req, 7, "c") == expected
    assert decode_request(API_LEADER_AND_ISR, 2, expected[4 + 11:]) == req


def test_leader_and_isr_round_trip_groups_by_topic():
    states = (
        PartitionState(TP_A0, 5, 1, 7, (1, 2), 3, (1, 2, 3), is_new=False),
        PartitionState(TP_A1, 5, 2, 1, (2,), 0, (2, 3), is_new=True),
        PartitionState(TP_B0, 4, -1, 9, (), 12, (3,)),
    )
    req = LeaderAndIsrRequest(1, 5, 2**40, states, (BrokerInfo(1, "h1", 9092),
                                                   BrokerInfo(2, "héllo", 9093)))
    key, decoded = request_round_trip(req)
    assert key == API_LEADER_AND_ISR
    assert decoded == req


def test_update_metadata_round_trip():
    states = (
        PartitionState(TP_A0, 5, 1, 7, (1, 2), 3, (1, 2, 3), offline_replicas=(3,)),
        PartitionState(TP_B0, 5, 2, 0, (2,), 1, (2,)),
    )
    brokers = (BrokerInfo(1, "h1", 9092, rack="r1"), BrokerInfo(2, "h2", 9093))
    req = UpdateMetadataRequest(0, 5, 17, states, brokers)
    key, decoded = request_round_trip(req)
    assert key == API_UPDATE_METADATA
    assert decoded == req


@pytest.mark.parametrize("request_type", [LeaderAndIsrRequest, UpdateMetadataRequest])
def test_entries_whose_shape_changes_from_one_to_the_next_decode_as_sent(request_type):
    """The decoder reads an entry in one unpack while the ISR / replica / offline counts stay
    those of the entry before; every change of shape, in each count and back, must still
    decode field by field to what was sent, across topics too."""
    shapes = [((1, 2), (1, 2, 3), ()), ((1, 2), (1, 2, 3), ()), ((1,), (1, 2, 3), ()),
              ((1, 2), (1, 2, 3), ()), ((1, 2), (1, 2), ()), ((1, 2), (1, 2, 3), ()),
              ((1, 2), (1, 2, 3), (3,)), ((1, 2), (1, 2, 3), (3,)), ((1, 2), (1, 2, 3), ()),
              ((), (3,), (3,)), ((2, 3), (2, 3, 1), ())]
    states = tuple(
        PartitionState(TopicPartition(topic, p), 4, isr[0] if isr else -1, p, isr, 10 + p,
                       replicas, is_new=request_type is LeaderAndIsrRequest and p % 2 == 1,
                       offline_replicas=offline if request_type is UpdateMetadataRequest else ())
        for topic in ("a", "b") for p, (isr, replicas, offline) in enumerate(shapes))
    args = (1, 5, 2, states, (BrokerInfo(1, "h", 9092),))
    req = request_type(*args)
    assert request_round_trip(req)[1] == req


@pytest.mark.parametrize("api_key", [API_LEADER_AND_ISR, API_UPDATE_METADATA])
def test_every_truncation_and_a_huge_count_are_schema_errors(api_key):
    """The hand-rolled partition-state codec checks its own bounds: any cut of a valid body,
    or an array count larger than the bytes left, is a SchemaError, never another exception."""
    states = (PartitionState(TP_A0, 5, 1, 7, (1, 2), 3, (1, 2, 3), is_new=True,
                             offline_replicas=(3,) if api_key == API_UPDATE_METADATA else ()),)
    cls = LeaderAndIsrRequest if api_key == API_LEADER_AND_ISR else UpdateMetadataRequest
    frame = one_frame(encode_request(cls(1, 5, 9, states, (BrokerInfo(1, "h", 1),)), 0, "c"))
    body = bytes(frame[parse_request_header(frame)[-1]:])
    for cut in range(len(body)):
        with pytest.raises(SchemaError):
            decode_request(api_key, VERSIONS[api_key], body[:cut])
    isr_count_at = 4 + 4 + 8 + 4 + 3 + 4 + 16  # header fields, 1 topic "a", 1 partition, 4 ints
    huge = body[:isr_count_at] + struct.pack(">i", 2**30) + body[isr_count_at + 4:]
    with pytest.raises(SchemaError):
        decode_request(api_key, VERSIONS[api_key], huge)
    negative = body[:isr_count_at] + struct.pack(">i", -5) + body[isr_count_at + 4:]
    with pytest.raises(SchemaError):
        decode_request(api_key, VERSIONS[api_key], negative)


def test_update_metadata_broker_endpoint_layout():
    req = UpdateMetadataRequest(0, 1, 2, (), (BrokerInfo(3, "h", 9092, epoch=99, rack=None),))
    body = encode_request(req, 1, None)[4 + 10:]  # size prefix, header with null client_id
    expected_brokers = bytes.fromhex(
        "00000001" "00000003"                       # 1 broker, Id 3
        "00000001" "00002384" "0001" "68"           # 1 endpoint: Port 9092, Host "h"
        "0009") + b"PLAINTEXT" + bytes.fromhex(     # Listener "PLAINTEXT"
        "0000"                                      # SecurityProtocol 0
        "ffff")                                     # Rack null
    assert body == struct.pack(">iiqi", 0, 1, 2, 0) + expected_brokers
    # the broker epoch is not on the wire: it travels as the request's broker_epoch
    assert decode_request(API_UPDATE_METADATA, 5, body).live_brokers == (BrokerInfo(3, "h", 9092),)


def test_stop_replica_round_trip():
    req = StopReplicaRequest(2, 8, 123, True, (TP_A0, TP_A1, TP_B0))
    key, decoded = request_round_trip(req)
    assert key == API_STOP_REPLICA
    assert decoded == req


def test_controlled_shutdown_v2_round_trip_and_layout():
    req = ControlledShutdownRequest(3, 0x1_0000_0007)
    key, decoded = request_round_trip(req)
    assert (key, decoded) == (API_CONTROLLED_SHUTDOWN, req)
    assert encode_request(req, 0, "")[4 + 10:] == struct.pack(">iq", 3, 0x1_0000_0007)
    resp = ControlledShutdownResponse(0, (TP_A0, TP_B0))
    frame = encode_response(API_CONTROLLED_SHUTDOWN, 2, 7, resp)
    corr, body = parse_response_header(API_CONTROLLED_SHUTDOWN, 2, frame[4:])
    assert corr == 7 and bytes(body) == struct.pack(">hi", 0, 2) + b"\x00\x01a" + struct.pack(">i", 0) \
        + b"\x00\x01b" + struct.pack(">i", 0)
    assert decode_response(API_CONTROLLED_SHUTDOWN, 2, body) == resp


def test_stop_replica_v1_layout():
    body = encode_request(StopReplicaRequest(2, 8, 123, False, (TP_A0,)), 0, "")[4 + 10:]
    assert body == struct.pack(">iiq?ih1sii", 2, 8, 123, False, 1, 1, b"a", 1, 0)


def test_unsupported_version_and_trailing_bytes():
    body = encode_request(StopReplicaRequest(2, 8, 123, False, (TP_A0,)), 0, "")[4 + 10:]
    with pytest.raises(UnsupportedVersionError):
        decode_request(API_STOP_REPLICA, 0, body)
    with pytest.raises(SchemaError):
        decode_request(API_STOP_REPLICA, 1, body + b"\x00")
    with pytest.raises(SchemaError):
        decode_request(API_STOP_REPLICA, 1, body[:-1])


def test_one_states_tuple_sent_to_many_brokers_is_encoded_once_and_right_for_each():
    """The controller shares one tuple of states between the UpdateMetadata requests of an
    event; the encoder reuses its encoding, never the other fields of the request."""
    states = tuple(PartitionState(TopicPartition("big", p), 3, p % 3, 4, (p % 3,), 5, (0, 1, 2),
                                  offline_replicas=(2,)) for p in range(1500))
    brokers = (BrokerInfo(0, "h0", 9092), BrokerInfo(1, "h1", 9093))
    first = UpdateMetadataRequest(1, 3, 10, states, brokers)
    second = UpdateMetadataRequest(1, 3, 11, states, brokers[:1])
    assert request_round_trip(first)[1] == first
    assert request_round_trip(second)[1] == second
    other = UpdateMetadataRequest(1, 3, 11, tuple(s._replace(leader_epoch=9) for s in states),
                                  brokers)
    assert request_round_trip(other)[1] == other


def test_sender_threads_encoding_one_states_tuple_at_once_encode_it_once(monkeypatch):
    """Every sender thread of the controller channel gets its request of an event at the
    same moment; the later ones wait for the first encoding instead of making their own."""
    states = tuple(PartitionState(TopicPartition("big", p), 3, p % 3, 4, (p % 3,), 5, (0, 1, 2))
                   for p in range(1500))
    encodings = []
    real = controller_api._TopicStates._encode

    def slow_encode(self, value, out):
        encodings.append(value)
        time.sleep(0.05)  # long enough for the other threads to arrive meanwhile
        real(self, value, out)

    monkeypatch.setattr(controller_api._TopicStates, "_encode", slow_encode)
    requests = [LeaderAndIsrRequest(1, 3, 10 + b, states, ()) for b in range(3)]
    frames: dict[int, bytes] = {}
    threads = [threading.Thread(target=lambda b=b: frames.__setitem__(
        b, encode_request(requests[b], b, "c"))) for b in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert encodings == [states]
    for b in range(3):
        key, version, _, _, end = parse_request_header(one_frame(frames[b]))
        assert decode_request(key, version, one_frame(frames[b])[end:]) == requests[b]


# --- responses ----------------------------------------------------------------------------

@pytest.mark.parametrize("api_key", [API_LEADER_AND_ISR, API_STOP_REPLICA])
def test_partition_error_responses_round_trip(api_key):
    resp = ControllerResponse(0, {TP_A0: 0, TP_B0: ErrorCode.KAFKA_STORAGE_ERROR})
    frame = one_frame(encode_response(api_key, VERSIONS[api_key], 99, resp))
    corr, body = parse_response_header(api_key, VERSIONS[api_key], frame)
    assert corr == 99
    assert decode_response(api_key, VERSIONS[api_key], body) == resp


def test_partition_errors_are_checked_at_decode_and_built_when_read():
    """The layout (every entry inside the body) is checked by decode_response; the mapping is
    built on first read, where a topic name that is not UTF-8 is a SchemaError too."""
    resp = ControllerResponse(0, {TP_A0: 0, TP_B0: 5})
    frame = one_frame(encode_response(API_LEADER_AND_ISR, VERSIONS[API_LEADER_AND_ISR], 1, resp))
    _, body = parse_response_header(API_LEADER_AND_ISR, VERSIONS[API_LEADER_AND_ISR], frame)
    for cut in range(1, len(body) - 2):
        with pytest.raises(SchemaError):
            decode_response(API_LEADER_AND_ISR, VERSIONS[API_LEADER_AND_ISR], body[:-cut])
    decoded = decode_response(API_LEADER_AND_ISR, VERSIONS[API_LEADER_AND_ISR], body)
    assert dict(decoded.partition_errors) == {TP_A0: 0, TP_B0: 5}
    assert decoded.partition_errors[TP_B0] == 5 and len(decoded.partition_errors) == 2
    bad = bytearray(body)
    name = bytes(body).index(TP_A0.topic.encode())
    bad[name] = 0xFF
    garbled = decode_response(API_LEADER_AND_ISR, VERSIONS[API_LEADER_AND_ISR], bytes(bad))
    with pytest.raises(SchemaError):
        dict(garbled.partition_errors)


def test_update_metadata_response_is_just_an_error_code():
    data = encode_response(API_UPDATE_METADATA, 5, 3,
                           ControllerResponse(ErrorCode.STALE_BROKER_EPOCH, {TP_A0: 1}))
    assert data == bytes.fromhex("00000006" "00000003" "004d")
    corr, body = parse_response_header(API_UPDATE_METADATA, 5, one_frame(data))
    assert corr == 3
    assert decode_response(API_UPDATE_METADATA, 5, body) == ControllerResponse(77)


# --- schema codec (flexible encodings are not used by the chosen versions) ------------------

def test_unsigned_varint():
    for value, encoded in [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"),
                           (2**31 - 1, "ffffffff07")]:
        assert schema.encode(schema.UnsignedVarInt, value).hex() == encoded
        assert schema.decode(schema.UnsignedVarInt, bytes.fromhex(encoded)) == (value, len(encoded) // 2)


def test_flexible_struct_round_trip_and_layout():
    t = schema.Struct(
        ("name", schema.CompactString),
        ("rack", schema.CompactNullableString),
        ("ids", schema.CompactArray(schema.Int32)),
        ("maybe", schema.CompactArray(schema.Int8, nullable=True)),
        ("tags", schema.TaggedFields),
    )
    value = ("ab", None, [1, 2], None, {3: b"\x07"})
    data = schema.encode(t, value)
    assert data.hex() == "03" "6162" "00" "03" "00000001" "00000002" "00" "01" "03" "01" "07"
    assert schema.decode(t, data) == (value, len(data))


def test_classic_types_round_trip():
    t = schema.Struct(("a", schema.Int8), ("b", schema.Int16), ("c", schema.Int64),
                      ("d", schema.Boolean), ("e", schema.NullableString),
                      ("f", schema.Array(schema.String, nullable=True)))
    for value in [(-1, 300, -2**63, True, None, None), (1, 2, 3, False, "x", ["p", "q"])]:
        assert schema.decode(t, schema.encode(t, value))[0] == value


def test_schema_rejects_nulls_and_truncation():
    with pytest.raises(SchemaError):
        schema.encode(schema.String, None)
    with pytest.raises(SchemaError):
        schema.encode(schema.Array(schema.Int32), None)
    with pytest.raises(SchemaError):
        schema.decode(schema.String, b"\xff\xff")
    with pytest.raises(SchemaError):
        schema.decode(schema.String, b"\x00\x05ab")
    with pytest.raises(SchemaError):
        schema.decode(schema.Array(schema.Int32), b"\x00\x00\x00\x02\x00\x00\x00\x01")
    with pytest.raises(SchemaError):
        schema.decode(schema.CompactArray(schema.Int32), b"\x00")


# --- error codes --------------------------------------------------------------------------

def test_error_codes_match_kafka():
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert ErrorCode.STALE_CONTROLLER_EPOCH == 11
    assert ErrorCode.STALE_BROKER_EPOCH == 77
    assert ErrorCode.UNKNOWN_TOPIC_ID == 100
    assert ErrorCode(87).name == "INVALID_RECORD"


def test_retriable():
    assert is_retriable(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert is_retriable(3)  # plain ints from the wire work too
    assert ErrorCode.REQUEST_TIMED_OUT.retriable
    assert not is_retriable(ErrorCode.NONE)
    assert not is_retriable(ErrorCode.STALE_CONTROLLER_EPOCH)
    assert not ErrorCode.OFFSET_OUT_OF_RANGE.retriable
    assert not is_retriable(12345)
    assert all(isinstance(code, ErrorCode) for code in RETRIABLE)


# --- KIP-253: the topic's undeleted partition count -----------------------------------------

def _counted_states():
    return (PartitionState(TP_A0, 2, 1, 4, (1, 2), 3, (1, 2)),
            PartitionState(TP_B0, 2, 2, 1, (2,), 0, (2,), True))


def test_partition_counts_round_trip_in_leader_and_isr_and_update_metadata():
    brokers = (BrokerInfo(1, "h1", 9092), BrokerInfo(2, "h2", 9093))
    for req in (LeaderAndIsrRequest(1, 2, 3, _counted_states(), brokers, (("a", 6, 4),)),
                UpdateMetadataRequest(1, 2, 3, tuple(s._replace(is_new=False)
                                                     for s in _counted_states()),
                                      brokers, (("a", 6, 4), ("b", 4, 4)))):
        _, decoded = request_round_trip(req)
        assert decoded.partition_counts == req.partition_counts
        assert decoded.partition_states == req.partition_states


def test_a_request_without_counts_is_kafkas_byte_for_byte():
    """Topics without ordered delivery get no trailer: the encoding is unchanged."""
    brokers = (BrokerInfo(1, "h1", 9092),)
    plain = LeaderAndIsrRequest(1, 2, 3, _counted_states(), brokers)
    counted = LeaderAndIsrRequest(1, 2, 3, _counted_states(), brokers, (("a", 6, 4),))
    plain_bytes, counted_bytes = encode_request(plain, 7, "c"), encode_request(counted, 7, "c")
    trailer = schema.encode(controller_api._PARTITION_COUNTS, [("a", 6, 4)])
    assert counted_bytes[4:] == plain_bytes[4:] + trailer
    _, decoded = request_round_trip(plain)
    assert decoded.partition_counts == ()


def test_a_malformed_count_trailer_is_refused():
    frame = one_frame(encode_request(
        UpdateMetadataRequest(0, 1, 2, (), (BrokerInfo(1, "h", 9092),), (("a", 6, 4),)), 1, None))
    _, _, _, _, end = parse_request_header(frame)
    body = bytes(frame[end:])
    with pytest.raises(SchemaError):
        decode_request(API_UPDATE_METADATA, VERSIONS[API_UPDATE_METADATA], body[:-2])
    with pytest.raises(SchemaError):
        decode_request(API_UPDATE_METADATA, VERSIONS[API_UPDATE_METADATA], body + b"\0")
