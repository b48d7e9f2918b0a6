"""The ZooKeeper-era controller-to-broker APIs, which the kio package does not model.

Layouts are transcribed from Kafka's JSON message schemas
(clients/src/main/resources/common/message/{LeaderAndIsr,UpdateMetadata,StopReplica}
{Request,Response}.json, Kafka 2.4-3.x). One version of each is spoken, the oldest one that
carries the broker epoch (so a broker can reject requests meant for an earlier incarnation of
itself) and groups partitions by topic:

    LeaderAndIsr   (key 4) v2  non-flexible: BrokerEpoch added, TopicStates grouping, IsNew
    StopReplica    (key 5) v1  non-flexible: BrokerEpoch added, Topics grouping
    UpdateMetadata (key 6) v5  non-flexible: BrokerEpoch added, TopicStates grouping,
                                              listener names, racks, offline replicas
    ControlledShutdown (key 7) v2  non-flexible: BrokerEpoch added; the one a broker sends to
                                   the controller, answered with the partitions it still leads

All three are non-flexible, so requests use request header v1 and responses header v0 (just
the correlation id). Fields a version lacks come back as their defaults when decoding:
LeaderAndIsr v2 has no offline replicas, UpdateMetadata v5 no is_new, neither request carries a
broker's epoch or rack in its broker list except UpdateMetadata's rack; the UpdateMetadata
response is only a top-level error code.
"""
from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Iterator, Mapping, Union

from odradek.common.metadata import (
    SECURITY_PROTOCOL_IDS,
    BrokerInfo,
    EndPoint,
    PartitionState,
    TopicPartition,
    new_tuple,
)
from odradek.protocol.schema import (
    Array,
    Boolean,
    Int16,
    Int32,
    Int64,
    NullableString,
    SchemaError,
    String,
    Struct,
    Type,
    decode,
)

API_LEADER_AND_ISR = 4
API_STOP_REPLICA = 5
API_UPDATE_METADATA = 6
API_CONTROLLED_SHUTDOWN = 7
VERSIONS: dict[int, int] = {API_LEADER_AND_ISR: 2, API_STOP_REPLICA: 1, API_UPDATE_METADATA: 5,
                            API_CONTROLLED_SHUTDOWN: 2}

PLAINTEXT_LISTENER = "PLAINTEXT"


class UnsupportedVersionError(SchemaError):
    """An api_key/api_version pair this module does not speak (answer UNSUPPORTED_VERSION)."""


#: KIP-253: (topic, undeleted_partition_count, initial_partition_count) for the ordered topics a
#: request names (brokers need both to check where a key belongs)
PartitionCounts = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class LeaderAndIsrRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[PartitionState, ...]
    live_leaders: tuple[BrokerInfo, ...]
    #: odradek's addition (docs/protocol.md): empty for topics without ordered delivery
    partition_counts: PartitionCounts = ()


@dataclass(frozen=True)
class UpdateMetadataRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: tuple[PartitionState, ...]
    live_brokers: tuple[BrokerInfo, ...]
    #: odradek's addition (docs/protocol.md): empty for topics without ordered delivery
    partition_counts: PartitionCounts = ()


@dataclass(frozen=True)
class StopReplicaRequest:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    delete_partitions: bool
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class ControlledShutdownRequest:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class ControlledShutdownResponse:
    error_code: int
    remaining_partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class ControllerResponse:
    """The shape the three responses share; UpdateMetadata's has no partition errors."""

    error_code: int
    partition_errors: Mapping[TopicPartition, int] = field(default_factory=dict)


ControllerRequest = Union[LeaderAndIsrRequest, UpdateMetadataRequest, StopReplicaRequest,
                          ControlledShutdownRequest]
Response = Union[ControllerResponse, ControlledShutdownResponse]

_INT32S = Array(Int32)
_HEAD = struct.Struct(">iiiii")  # partition, controller epoch, leader, leader epoch, len(isr)
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I32_PAIR = struct.Struct(">ii")
_BOOL = struct.Struct(">?")
_PARTITION_ERROR = struct.Struct(">ih")


@lru_cache(maxsize=256)
def _ints(n: int) -> struct.Struct:
    return struct.Struct(f">{n}i")


@lru_cache(maxsize=256)
def _lai_entry(n_isr: int, n_replicas: int) -> struct.Struct:
    return struct.Struct(f">{5 + n_isr}i{2 + n_replicas}i?")


@lru_cache(maxsize=256)
def _um_entry(n_isr: int, n_replicas: int, n_offline: int) -> struct.Struct:
    return struct.Struct(f">{5 + n_isr}i{2 + n_replicas}i{1 + n_offline}i")


_MEMO_MIN_STATES = 1000  # smaller requests are cheap to encode again


class _TopicStates(Type):
    """The TopicStates array of LeaderAndIsr v2 / UpdateMetadata v5, straight from and to
    ``PartitionState`` objects: [topic_name, [partition_index, controller_epoch, leader,
    leader_epoch, isr, zk_version, replicas, <last>]] where <last> is is_new (LeaderAndIsr) or
    offline_replicas (UpdateMetadata).

    Hand-rolled rather than composed from Array/Struct because a failover sends tens of
    thousands of entries and the generic codec costs ~40 Python calls per entry; here an entry
    is one precompiled ``struct`` pack, and decoding three to four unpacks."""

    def __init__(self, last_is_new: bool) -> None:
        self._last_is_new = last_is_new
        #: (states, encoding) of the last large tuple encoded: the controller sends one tuple
        #: of states to every broker (UpdateMetadata, and LeaderAndIsr after a failover),
        #: encoded here once. The controller channel's sender threads get their requests at
        #: the same moment, so the lock makes the later ones wait for the first encoding
        #: rather than each encode it again (meanwhile slowing the broker in that process).
        self._last: tuple[object, bytes] | None = None
        self._lock = threading.Lock()

    def encode(self, value: Iterable[PartitionState], out: list[bytes]) -> None:
        if isinstance(value, tuple) and len(value) >= _MEMO_MIN_STATES:
            with self._lock:
                last = self._last
                if last is None or last[0] is not value:
                    parts: list[bytes] = []
                    self._encode(value, parts)
                    last = self._last = (value, b"".join(parts))
            out.append(last[1])
        else:
            self._encode(value, out)

    def _encode(self, value: Iterable[PartitionState], out: list[bytes]) -> None:
        grouped = _by_topic(value)
        out.append(_I32.pack(len(grouped)))
        for topic, group in grouped.items():
            String.encode(topic, out)
            out.append(_I32.pack(len(group)))
            if self._last_is_new:
                out.extend(_lai_entry(len(ps.isr), len(ps.replicas)).pack(
                    ps.tp.partition, ps.controller_epoch, ps.leader, ps.leader_epoch,
                    len(ps.isr), *ps.isr, ps.zk_version, len(ps.replicas), *ps.replicas,
                    ps.is_new) for ps in group)
            else:
                out.extend(_um_entry(len(ps.isr), len(ps.replicas), len(ps.offline_replicas)).pack(
                    ps.tp.partition, ps.controller_epoch, ps.leader, ps.leader_epoch,
                    len(ps.isr), *ps.isr, ps.zk_version, len(ps.replicas), *ps.replicas,
                    len(ps.offline_replicas), *ps.offline_replicas) for ps in group)

    def decode(self, buf: memoryview, pos: int) -> tuple[tuple[PartitionState, ...], int]:
        """One ``struct`` unpack per entry while the ISR and replica counts stay those of the
        entry before (a failover's 10,000 entries have two or three shapes); an entry of
        another shape is read field by field, and its shape tried on the next one."""
        n_topics, pos = _count(buf, pos, 6)
        states: list[PartitionState] = []
        append = states.append
        is_lai = self._last_is_new
        end = len(buf)
        shape: tuple[int, int, int] | None = None  # (n_isr, n_replicas, n_offline)
        whole: struct.Struct | None = None  # the struct of a whole entry of that shape
        for _ in range(n_topics):
            topic, pos = String.decode(buf, pos)
            if topic is None:  # cannot happen (String raises on null); narrows the type
                raise SchemaError("null topic name")
            n_partitions, pos = _count(buf, pos, 29)
            for _ in range(n_partitions):
                if whole is not None and pos + whole.size <= end:
                    v = whole.unpack_from(buf, pos)
                    n_isr, n_replicas, n_offline = shape  # type: ignore[misc]
                    rep_at = 7 + n_isr
                    if (v[4] == n_isr and v[rep_at - 1] == n_replicas
                            and (is_lai or v[rep_at + n_replicas] == n_offline)):
                        pos += whole.size
                        append(new_tuple(PartitionState, (
                            new_tuple(TopicPartition, (topic, v[0])), v[1], v[2], v[3],
                            v[5:5 + n_isr], v[5 + n_isr], v[rep_at:rep_at + n_replicas],
                            v[-1] if is_lai else False,
                            () if is_lai else v[rep_at + n_replicas + 1:])))
                        continue
                state, pos = self._decode_entry(buf, pos, topic)
                append(state)
                shape = (len(state.isr), len(state.replicas), len(state.offline_replicas))
                whole = (_lai_entry(shape[0], shape[1]) if is_lai else _um_entry(*shape))
        return tuple(states), pos

    def _decode_entry(self, buf: memoryview, pos: int, topic: str) -> tuple[PartitionState, int]:
        """One entry, field by field, every count checked against the buffer."""
        partition, controller_epoch, leader, leader_epoch, n = _HEAD.unpack_from(buf, pos)
        isr, pos = _int_array(buf, pos + 20, n)
        zk_version, n = _I32_PAIR.unpack_from(buf, pos)
        replicas, pos = _int_array(buf, pos + 8, n)
        if self._last_is_new:
            (is_new,) = _BOOL.unpack_from(buf, pos)
            pos += 1
            offline: tuple[int, ...] = ()
        else:
            is_new = False
            offline, pos = _int_array(buf, pos + 4, _I32.unpack_from(buf, pos)[0])
        return new_tuple(PartitionState, (
            new_tuple(TopicPartition, (topic, partition)), controller_epoch, leader,
            leader_epoch, isr, zk_version, replicas, is_new, offline)), pos


def _count(buf: memoryview, pos: int, min_item_size: int) -> tuple[int, int]:
    """An array count that fits in what is left of the buffer."""
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0 or n * min_item_size > len(buf) - pos:
        raise SchemaError(f"array count {n} at offset {pos - 4} does not fit the remaining "
                          f"{len(buf) - pos} bytes")
    return n, pos


def _int_array(buf: memoryview, pos: int, n: int) -> tuple[tuple[int, ...], int]:
    """``n`` int32s at ``pos``, the count already read (and checked here)."""
    if n < 0 or 4 * n > len(buf) - pos:
        raise SchemaError(f"int32 array of {n} at offset {pos} does not fit the buffer")
    return _ints(n).unpack_from(buf, pos), pos + 4 * n


class _PartitionErrors(Type):
    """[topic_name, partition_index, error_code] of the LeaderAndIsr v2 / StopReplica v1
    responses, to and from {TopicPartition: code}: a broker answers for every partition."""

    def encode(self, value: dict[TopicPartition, int], out: list[bytes]) -> None:
        out.append(_I32.pack(len(value)))
        names: dict[str, bytes] = {}  # every entry repeats its topic name: encode each once
        pack = _PARTITION_ERROR.pack
        for tp, code in value.items():
            name = names.get(tp.topic)
            if name is None:
                encoded: list[bytes] = []
                String.encode(tp.topic, encoded)
                name = names[tp.topic] = b"".join(encoded)
            out.append(name)
            out.append(pack(tp.partition, code))

    def decode(self, buf: memoryview, pos: int) -> tuple[Mapping[TopicPartition, int], int]:
        """Checks the layout now and builds the mapping only when it is read: the controller
        waits on a failover's 10,000-entry responses in a process whose broker is busy taking
        on the new roles, where building them costs contended GIL time (0.2 s)."""
        n, start = _count(buf, pos, 8)
        pos = start
        unpack_size = _I16.unpack_from
        limit = len(buf) - 6
        for _ in range(n):
            (size,) = unpack_size(buf, pos)
            pos += 8 + size
            if size < 0 or pos - 6 > limit:
                raise SchemaError(f"partition error entry ending at offset {pos} overruns the "
                                  f"buffer")
        return _LazyPartitionErrors(bytes(buf[start:pos]), n), pos


class _LazyPartitionErrors(Mapping[TopicPartition, int]):
    """{TopicPartition: error code} decoded from layout-checked bytes on first use."""

    __slots__ = ("_raw", "_n", "_errors")

    def __init__(self, raw: bytes, n: int) -> None:
        self._raw = raw
        self._n = n
        self._errors: dict[TopicPartition, int] | None = None

    def _decoded(self) -> dict[TopicPartition, int]:
        if self._errors is None:
            errors: dict[TopicPartition, int] = {}
            topics: dict[bytes, str] = {}  # every entry repeats its topic name: decode each once
            buf, pos = self._raw, 0
            for _ in range(self._n):
                (size,) = _I16.unpack_from(buf, pos)
                end = pos + 2 + size
                raw = buf[pos + 2:end]
                topic = topics.get(raw)
                if topic is None:
                    try:
                        topic = topics[raw] = str(raw, "utf-8")
                    except UnicodeDecodeError as exc:
                        raise SchemaError(f"partition error topic name: {exc}") from None
                partition, code = _PARTITION_ERROR.unpack_from(buf, end)
                pos = end + 6
                errors[TopicPartition(topic, partition)] = code
            self._errors = errors
        return self._errors

    def __getitem__(self, tp: TopicPartition) -> int:
        return self._decoded()[tp]

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())  # not the entry count: a partition may repeat

    def __repr__(self) -> str:
        return repr(self._decoded())


_LEADER_AND_ISR_V2 = Struct(
    ("controller_id", Int32), ("controller_epoch", Int32), ("broker_epoch", Int64),
    ("topic_states", _TopicStates(last_is_new=True)),
    ("live_leaders", Array(Struct(("broker_id", Int32), ("host_name", String), ("port", Int32)))),
)

_UM_ENDPOINT_V5 = Struct(
    ("port", Int32), ("host", String), ("listener", String), ("security_protocol", Int16),
)
_UPDATE_METADATA_V5 = Struct(
    ("controller_id", Int32), ("controller_epoch", Int32), ("broker_epoch", Int64),
    ("topic_states", _TopicStates(last_is_new=False)),
    ("live_brokers", Array(Struct(("id", Int32), ("endpoints", Array(_UM_ENDPOINT_V5)),
                                  ("rack", NullableString)))),
)

# StopReplicaRequest v1
_STOP_REPLICA_V1 = Struct(
    ("controller_id", Int32), ("controller_epoch", Int32), ("broker_epoch", Int64),
    ("delete_partitions", Boolean),
    ("topics", Array(Struct(("name", String), ("partition_indexes", _INT32S)))),
)

# odradek's KIP-253 trailer of LeaderAndIsr v2 and UpdateMetadata v5: written after the last
# field only when the request names an ordered topic, so every other request is Kafka's, byte
# for byte (docs/protocol.md, "Controller requests: the topic's partition count")
_PARTITION_COUNTS = Array(Struct(("topic", String), ("undeleted_partition_count", Int32),
                                 ("initial_partition_count", Int32)))

_CONTROLLED_SHUTDOWN_V2 = Struct(("broker_id", Int32), ("broker_epoch", Int64))
_CONTROLLED_SHUTDOWN_RESPONSE_V2 = Struct(
    ("error_code", Int16),
    ("remaining_partitions", Array(Struct(("topic_name", String), ("partition_index", Int32)))),
)

# LeaderAndIsrResponse v2 and StopReplicaResponse v1 are identical; UpdateMetadataResponse v5
_PARTITION_ERRORS_RESPONSE = Struct(("error_code", Int16), ("partition_errors", _PartitionErrors()))
_UPDATE_METADATA_RESPONSE_V5 = Struct(("error_code", Int16))

_REQUEST_HEADER_V1 = Struct(
    ("api_key", Int16), ("api_version", Int16), ("correlation_id", Int32),
    ("client_id", NullableString),
)
_INT32 = struct.Struct(">i")  # the size prefix, and all of response header v0 (correlation id)

_API_KEYS: dict[type, int] = {
    LeaderAndIsrRequest: API_LEADER_AND_ISR,
    StopReplicaRequest: API_STOP_REPLICA,
    UpdateMetadataRequest: API_UPDATE_METADATA,
    ControlledShutdownRequest: API_CONTROLLED_SHUTDOWN,
}


def api_key_of(req: ControllerRequest) -> int:
    """The API key a request object is sent under."""
    try:
        return _API_KEYS[type(req)]
    except KeyError:
        raise TypeError(f"not a controller request: {type(req).__name__}") from None


def _check_version(api_key: int, api_version: int) -> None:
    if VERSIONS.get(api_key) != api_version:
        raise UnsupportedVersionError(f"api_key {api_key} version {api_version} not supported "
                                      f"(supported: {VERSIONS})")


def _by_topic(states: Iterable[PartitionState]) -> dict[str, list[PartitionState]]:
    """Kafka v2+/v5+ group partitions under their topic; keep first-seen topic order."""
    grouped: dict[str, list[PartitionState]] = {}
    for ps in states:
        grouped.setdefault(ps.tp.topic, []).append(ps)
    return grouped


def _with_size(parts: list[bytes]) -> bytes:
    """Fill the placeholder at parts[0] with the int32 size of everything after it, then join."""
    parts[0] = _INT32.pack(sum(map(len, parts)))
    return b"".join(parts)


def _encode_body(req: ControllerRequest, out: list[bytes]) -> None:
    if isinstance(req, LeaderAndIsrRequest):
        leaders = [(b.id, b.host, b.port) for b in req.live_leaders]
        _LEADER_AND_ISR_V2.encode((req.controller_id, req.controller_epoch, req.broker_epoch,
                                   req.partition_states, leaders), out)
        if req.partition_counts:
            _PARTITION_COUNTS.encode(req.partition_counts, out)
    elif isinstance(req, UpdateMetadataRequest):
        brokers = [(b.id, _endpoints_of(b), b.rack) for b in req.live_brokers]
        _UPDATE_METADATA_V5.encode((req.controller_id, req.controller_epoch, req.broker_epoch,
                                    req.partition_states, brokers), out)
        if req.partition_counts:
            _PARTITION_COUNTS.encode(req.partition_counts, out)
    elif isinstance(req, ControlledShutdownRequest):
        _CONTROLLED_SHUTDOWN_V2.encode((req.broker_id, req.broker_epoch), out)
    else:
        topics: dict[str, list[int]] = {}
        for tp in req.partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        _STOP_REPLICA_V1.encode((req.controller_id, req.controller_epoch, req.broker_epoch,
                                 req.delete_partitions, list(topics.items())), out)


def encode_request(req: ControllerRequest, correlation_id: int, client_id: str | None) -> bytes:
    """A complete frame: size prefix, request header v1, body at the version in VERSIONS."""
    api_key = api_key_of(req)
    parts: list[bytes] = [b""]
    _REQUEST_HEADER_V1.encode((api_key, VERSIONS[api_key], correlation_id, client_id), parts)
    _encode_body(req, parts)
    return _with_size(parts)


def _endpoints_of(broker: BrokerInfo) -> list[tuple[int, str, str, int]]:
    endpoints = broker.endpoints or (EndPoint(PLAINTEXT_LISTENER, broker.host, broker.port, PLAINTEXT_LISTENER),)
    return [(e.port, e.host, e.listener, SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0)) for e in endpoints]


def _decode_broker(broker_id: int, endpoints: list[tuple[int, str, str, int]], rack: str | None,
                   listener: str) -> BrokerInfo:
    """One UpdateMetadata broker, every endpoint kept; host and port are ``listener``'s (the
    receiver's inter-broker listener), or the first endpoint's when it has none of that name."""
    if not endpoints:
        raise SchemaError(f"broker {broker_id} has no endpoints")
    port, host = next(((p, h) for p, h, name, _ in endpoints if name == listener), endpoints[0][:2])
    names = {number: name for name, number in SECURITY_PROTOCOL_IDS.items()}
    kept = tuple(EndPoint(name, h, p, names.get(protocol, "PLAINTEXT")) for p, h, name, protocol in endpoints)
    return BrokerInfo(broker_id, host, port, rack=rack, endpoints=kept)


def _decode_partition_counts(body: bytes | memoryview, end: int) -> PartitionCounts:
    """The KIP-253 trailer after a LeaderAndIsr / UpdateMetadata body, if any; it must end
    the body, as the body itself must without it."""
    if end == len(body):
        return ()
    counts, _ = decode(_PARTITION_COUNTS, body, end)
    return tuple((topic, count, initial) for topic, count, initial in counts)


def decode_request(api_key: int, api_version: int, body: bytes | memoryview,
                   listener: str = PLAINTEXT_LISTENER) -> ControllerRequest:
    """Decode the bytes after the request header; the whole body must be consumed. ``listener``:
    the receiver's inter-broker listener, whose addresses UpdateMetadata's brokers are known by."""
    _check_version(api_key, api_version)
    if api_key == API_LEADER_AND_ISR:
        (cid, cepoch, bepoch, states, leaders), end = decode(_LEADER_AND_ISR_V2, body, exact=False)
        brokers = tuple(BrokerInfo(bid, host, port) for bid, host, port in leaders)
        return LeaderAndIsrRequest(cid, cepoch, bepoch, states, brokers,
                                   _decode_partition_counts(body, end))
    if api_key == API_UPDATE_METADATA:
        (cid, cepoch, bepoch, states, live), end = decode(_UPDATE_METADATA_V5, body, exact=False)
        brokers = tuple(_decode_broker(bid, eps, rack, listener) for bid, eps, rack in live)
        return UpdateMetadataRequest(cid, cepoch, bepoch, states, brokers,
                                     _decode_partition_counts(body, end))
    if api_key == API_CONTROLLED_SHUTDOWN:
        (broker_id, broker_epoch), _ = decode(_CONTROLLED_SHUTDOWN_V2, body)
        return ControlledShutdownRequest(broker_id, broker_epoch)
    (cid, cepoch, bepoch, delete, topics), _ = decode(_STOP_REPLICA_V1, body)
    partitions = tuple(TopicPartition(name, p) for name, indexes in topics for p in indexes)
    return StopReplicaRequest(cid, cepoch, bepoch, delete, partitions)


def encode_response(api_key: int, api_version: int, correlation_id: int, resp: Response) -> bytes:
    """A complete frame: size prefix, response header v0, body. UpdateMetadata v5 has no
    partition errors, so resp.partition_errors is dropped for it."""
    _check_version(api_key, api_version)
    parts: list[bytes] = [b"", _INT32.pack(correlation_id)]
    if isinstance(resp, ControlledShutdownResponse):
        _CONTROLLED_SHUTDOWN_RESPONSE_V2.encode(
            (resp.error_code, [(tp.topic, tp.partition) for tp in resp.remaining_partitions]), parts)
    elif api_key == API_UPDATE_METADATA:
        _UPDATE_METADATA_RESPONSE_V5.encode((resp.error_code,), parts)
    else:
        _PARTITION_ERRORS_RESPONSE.encode((resp.error_code, resp.partition_errors), parts)
    return _with_size(parts)


def parse_response_header(api_key: int, api_version: int,
                          frame: bytes | memoryview) -> tuple[int, memoryview]:
    """Split a response frame (size prefix removed) into (correlation_id, body). Kept here so
    callers need not know which response header version an API version uses."""
    _check_version(api_key, api_version)
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(view) < _INT32.size:
        raise SchemaError("response shorter than its header")
    return _INT32.unpack_from(view, 0)[0], view[_INT32.size:]


def decode_response(api_key: int, api_version: int, body: bytes | memoryview) -> Response:
    """Decode the bytes after the response header."""
    _check_version(api_key, api_version)
    if api_key == API_CONTROLLED_SHUTDOWN:
        (error_code, remaining), _ = decode(_CONTROLLED_SHUTDOWN_RESPONSE_V2, body)
        return ControlledShutdownResponse(error_code, tuple(TopicPartition(t, p) for t, p in remaining))
    if api_key == API_UPDATE_METADATA:
        (error_code,), _ = decode(_UPDATE_METADATA_RESPONSE_V5, body)
        return ControllerResponse(error_code)
    (error_code, partition_errors), _ = decode(_PARTITION_ERRORS_RESPONSE, body)
    return ControllerResponse(error_code, partition_errors)
