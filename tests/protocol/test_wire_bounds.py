"""wire_bounds: every valid request passes, every count, length or null that kio would trust
wrongly is refused before kio reads it."""
from __future__ import annotations

import random
import struct
import uuid

import pytest

from odradek.broker import api_keys
from odradek.fuzz import harness, structured, templates
from odradek.protocol import fast_paths, kio_util, wire_bounds
from odradek.protocol.schema import SchemaError, UnsignedVarInt


def check(frame: bytes) -> int:
    cls = kio_util.request_class(*struct.unpack_from(">hh", frame))
    return wire_bounds.check_message(cls, frame, wire_bounds.check_message(cls.__header_schema__, frame, 0))


def test_every_template_and_many_well_formed_requests_pass() -> None:
    frames = [t.payload for t in templates.build(harness.TOPOLOGY)
              if t.api_key in api_keys.VERSIONS and api_keys.supported(t.api_key, t.version)]
    choices = structured.RandomChoices(random.Random(3))
    frames += [structured.request(choices, harness.TOPOLOGY, k, v) for k, v in
               [(k, v) for k, (lo, hi) in sorted(api_keys.VERSIONS.items()) for v in range(lo, hi + 1)] * 20]
    for frame in frames:
        assert check(frame) == len(frame)


def test_a_follower_fetch_of_many_partitions_passes() -> None:
    frame = fast_paths.follower_fetch_request(1, "f", 2, 500, 1 << 20, [
        (f"t{i}", [(p, 3, 100, 0, 1 << 20) for p in range(10)]) for i in range(1000)])[4:]
    assert check(frame) == len(frame)


@pytest.mark.parametrize("frame,why", [
    (struct.pack(">hhihi", 3, 1, 1, 0, 0x7FFFFFFF), "array of 2147483647"),        # Metadata v1 topics
    (struct.pack(">hhihih", 43, 0, 1, 0, 1, 0x7FFF) + b"t", "string of 32767"),      # ElectLeaders topic name
    (struct.pack(">hhihih", 43, 0, 1, 0, 1, 1) + b"t" + struct.pack(">i", 1 << 30), "array of 1073741824"),
    (struct.pack(">hhihb", 18, 3, 1, 0, 0) + b"\xff\xff\xff\xff\x0f", "string of"),  # compact length 2^32-2
    (struct.pack(">hhihb", 18, 3, 1, 0, 0) + b"\xff\xff\xff\xff\xff\x01", "varint longer"),
    (struct.pack(">hhihi", 23, 2, 1, 0, -1), "null array"),                           # topics null
    (struct.pack(">hhihih", 43, 0, 1, 0, 1, -1), "null string"),                      # topic name null
    (struct.pack(">hhih", 3, 1, 1, 300), "string of 300"),                           # client id past the end
])
def test_what_kio_would_trust_is_refused(frame: bytes, why: str) -> None:
    with pytest.raises(SchemaError, match=why):
        check(frame)
    with pytest.raises(ValueError):
        kio_util.decode_request(frame)


def _tag(tag: int, value: bytes) -> bytes:
    out: list[bytes] = []
    UnsignedVarInt.encode(tag, out)
    UnsignedVarInt.encode(len(value), out)
    return b"".join(out) + value


def test_tagged_fields_the_schema_does_not_know_are_skipped_as_kafka_skips_them() -> None:
    """A newer client may send a tagged field this schema lacks (KIP-482): Kafka's readers skip
    it; kio's raised KeyError and the broker closed the connection. Cut out of the request
    header, of the body and of an array element, each request decodes as it would without."""
    frame = kio_util.encode_request(3, 12, 7, "c", {"topics": [{"topic_id": uuid.UUID(int=0), "name": "t"}], "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False})[4:]
    header_tags = 8 + 2 + 1  # api key, version, correlation id, client id "c"
    element_tags = header_tags + 1 + 1 + 16 + 2  # header's empty section, topics count, topic id, name "t"
    assert frame[header_tags] == frame[element_tags] == frame[-1] == 0  # empty tagged sections
    expected = kio_util.decode_request(frame)
    for at in (header_tags, element_tags, len(frame) - 1):
        for extra in ([_tag(10000, b"new")], [_tag(5, b""), _tag(200, b"x" * 300)]):
            sent = frame[:at] + bytes([len(extra)]) + b"".join(extra) + frame[at + 1:]
            with pytest.raises(wire_bounds.UnknownTaggedField):
                check(sent)
            assert kio_util.decode_request(sent) == expected

