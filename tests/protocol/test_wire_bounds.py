"""wire_bounds: every valid request passes, every count, length or null that kio would trust
wrongly is refused before kio reads it."""
from __future__ import annotations

import random
import struct

import pytest

from odradek.broker import apis
from odradek.fuzz import harness, structured, templates
from odradek.protocol import fast_paths, kio_util, wire_bounds
from odradek.protocol.schema import SchemaError


def check(frame: bytes) -> int:
    cls = kio_util.request_class(*struct.unpack_from(">hh", frame))
    return wire_bounds.check_message(cls, frame, wire_bounds.check_message(cls.__header_schema__, frame, 0))


def test_every_template_and_many_well_formed_requests_pass() -> None:
    frames = [t.payload for t in templates.build(harness.TOPOLOGY)
              if t.api_key in apis.VERSIONS and apis.supported(t.api_key, t.version)]
    choices = structured.RandomChoices(random.Random(3))
    frames += [structured.request(choices, harness.TOPOLOGY, k, v) for k, v in
               [(k, v) for k, (lo, hi) in sorted(apis.VERSIONS.items()) for v in range(lo, hi + 1)] * 20]
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
