"""What the broker owes each frame, decided without the broker: a response of the frame's API
and version carrying its correlation id, no response (Produce with acks=0), or a closed
connection; and whether the request may legitimately change stored data.

A frame is a request when it decodes: kio's decoder for the client APIs (the broker uses the
same one, so this says which frames the broker must answer rather than re-deriving kio), the
broker's own codec for the controller APIs kio lacks. Responses are decoded with the same
codecs, in full: a response with bytes left over, a wrong correlation id or a field that does
not decode is malformed.
"""
from __future__ import annotations

import dataclasses
import datetime
import struct
from dataclasses import dataclass, field
from typing import Any

from kio.serial import entity_reader

from odradek.broker import api_keys
from odradek.broker.txn_admin_apis import read_describe_transactions_response
from odradek.common.internal_topics import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME
from odradek.common.metadata import TopicPartition
from odradek.protocol import controller_api, kio_util
from odradek.protocol.framing import parse_request_header

_SIZE = struct.Struct(">i")


@dataclass
class Expectation:
    """What one frame (without its size prefix) may get."""

    api_key: int
    version: int
    correlation_id: int
    #: (api_key, version) of the response owed; None when the connection must be closed
    response: tuple[int, int] | None
    request: Any = None
    #: a Produce with acks=0: no response at all
    silent: bool = False
    #: the longest wait the request itself asks for (Fetch max_wait, Produce/CreateTopics timeout)
    wait_s: float = 0.0
    #: partitions a decoded Produce or WriteTxnMarkers names (appends there are legitimate)
    produces_to: frozenset[TopicPartition] = frozenset()
    #: a controller request that passes the broker's epoch fence: it may change anything
    controller_write: bool = False
    #: topics a CreateTopics (not validate-only) may create
    creates: frozenset[str] = frozenset()
    #: partitions a decoded DeleteRecords names (their log start may move up)
    deletes_from: frozenset[TopicPartition] = frozenset()


def expect(frame: bytes | memoryview, fence: tuple[int, int]) -> Expectation:
    """``fence``: the broker's (controller epoch, broker epoch) before the frame."""
    if len(frame) < 8:
        return Expectation(-1, -1, -1, None)
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    exp = Expectation(api_key, version, correlation_id, None)
    if api_key in controller_api.VERSIONS:
        if version != controller_api.VERSIONS[api_key]:
            return exp
        try:
            header_end = parse_request_header(frame)[4]
            request = controller_api.decode_request(api_key, version, memoryview(frame)[header_end:])
        except Exception:  # noqa: BLE001 - any decoding failure means "not a request"
            return exp
        exp.response, exp.request = (api_key, version), request
        if isinstance(request, controller_api.ControlledShutdownRequest):
            exp.wait_s = 60.0  # answered by the controller, which may take its time
        else:
            exp.controller_write = (request.controller_epoch >= fence[0]
                                    and (request.broker_epoch == -1 or request.broker_epoch >= fence[1]))
        return exp
    if api_key == api_keys.API_VERSIONS and not api_keys.supported(api_key, version):
        exp.response = (api_keys.API_VERSIONS, 0)  # the v0 answer that says which versions exist
        return exp
    if not api_keys.supported(api_key, version):
        return exp
    try:
        _header, request = kio_util.decode_request(frame)
    except Exception:  # noqa: BLE001
        return exp
    exp.response, exp.request = (api_key, version), request
    exp.wait_s = _longest_wait(request)
    if api_key == api_keys.PRODUCE:
        exp.silent = request.acks == 0
        exp.produces_to = frozenset(TopicPartition(t.name, p.index) for t in request.topic_data
                                    for p in t.partition_data)
    elif api_key == api_keys.WRITE_TXN_MARKERS:  # a transaction coordinator's: markers are appends
        exp.produces_to = frozenset(TopicPartition(t.name, p) for m in request.markers for t in m.topics
                                    for p in t.partition_indexes)
    elif api_key == api_keys.CREATE_TOPICS and not request.validate_only:
        exp.creates = frozenset(t.name for t in request.topics)
    elif api_key == api_keys.DELETE_RECORDS:
        exp.deletes_from = frozenset(TopicPartition(t.name, p.partition_index) for t in request.topics
                                     for p in t.partitions)
    elif api_key == api_keys.FIND_COORDINATOR:
        # creates its coordinator's topic when the metadata lacks it (an UpdateMetadata with
        # leader -2, Kafka's LeaderDuringDelete, drops a topic being deleted): key type 1 is
        # a transactional id's (__transaction_state), any other a group's (v0 has no key type)
        exp.creates = frozenset({TRANSACTION_STATE_TOPIC_NAME if getattr(request, "key_type", 0) == 1
                                 else GROUP_METADATA_TOPIC_NAME})
    return exp


def _longest_wait(entity: Any) -> float:
    """The largest duration field anywhere in a decoded request, in seconds (0 if none)."""
    longest = 0.0
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if isinstance(value, datetime.timedelta):
            longest = max(longest, value.total_seconds())
        elif dataclasses.is_dataclass(value):
            longest = max(longest, _longest_wait(value))
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            longest = max(longest, max(_longest_wait(v) for v in value))
    return longest


@dataclass
class Verdict:
    ok: bool
    has_error: bool = False
    problem: str = ""
    #: Produce, WriteTxnMarkers: partitions the response reports as written
    written: frozenset[TopicPartition] = field(default_factory=frozenset)


def check_response(exp: Expectation, frame: bytes | memoryview) -> Verdict:
    """Decode a response frame (without size prefix) as what ``exp`` owes."""
    assert exp.response is not None
    api_key, version = exp.response
    try:
        if api_key in controller_api.VERSIONS:
            correlation_id, body = controller_api.parse_response_header(api_key, version, frame)
            resp = controller_api.decode_response(api_key, version, body)
            errors = dict(getattr(resp, "partition_errors", {}))  # decodes the lazy mapping in full
            has_error = resp.error_code != 0 or any(errors.values())
            written: frozenset[TopicPartition] = frozenset()
        elif api_key == api_keys.DESCRIBE_TRANSACTIONS:  # kio refuses the start time -1 Kafka sends
            correlation_id, described = read_describe_transactions_response(frame)
            has_error, written = any(d.error_code != 0 for d in described), frozenset()
        else:
            cls = kio_util.response_class(api_key, version)
            header, pos = entity_reader(cls.__header_schema__)(frame, 0)
            payload, size = entity_reader(cls)(frame, pos)
            if pos + size != len(frame):
                return Verdict(False, problem=f"{len(frame) - pos - size} bytes after the response body")
            correlation_id = header.correlation_id
            has_error = _has_error(payload)
            written = (_written(payload) if api_key == api_keys.PRODUCE
                       else _markers_written(payload) if api_key == api_keys.WRITE_TXN_MARKERS else frozenset())
    except Exception as exc:  # noqa: BLE001 - a response that does not decode is the finding
        return Verdict(False, problem=f"response does not decode: {exc!r}")
    if correlation_id != exp.correlation_id:
        return Verdict(False, problem=f"correlation id {correlation_id}, request had {exp.correlation_id}")
    return Verdict(True, has_error, written=written)


def _has_error(entity: Any) -> bool:
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.name == "error_code" or f.name.endswith("_error_code"):
            if value is not None and int(value) != 0:
                return True
        elif dataclasses.is_dataclass(value):
            if _has_error(value):
                return True
        elif isinstance(value, tuple) and value and dataclasses.is_dataclass(value[0]):
            if any(_has_error(v) for v in value):
                return True
    return False


def _written(body: Any) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t.name, p.index) for t in body.responses for p in t.partition_responses
                     if int(p.error_code) == 0)


def _markers_written(body: Any) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t.name, p.partition_index) for m in body.markers for t in m.topics
                     for p in t.partitions if int(p.error_code) == 0)


def split_frames(stream: bytes, max_frame_bytes: int) -> tuple[list[bytes], str]:
    """The frames a Kafka peer cuts ``stream`` into, and how the stream ends: "whole", "partial"
    (a frame still incomplete: the peer waits for the rest) or "bad-size" (a size no peer may
    send: the connection closes)."""
    frames: list[bytes] = []
    pos = 0
    while len(stream) - pos >= 4:
        (size,) = _SIZE.unpack_from(stream, pos)
        if size < 0 or size > max_frame_bytes:
            return frames, "bad-size"
        if len(stream) - pos - 4 < size:
            return frames, "partial"
        frames.append(stream[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames, "whole" if pos == len(stream) else "partial"
